package bridge

import (
	"context"
	"errors"

	"github.com/ckf-stream/ckf-stream/bridge/kvevents"
	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/zeebo/xxh3"
	"go.uber.org/zap"
)

// Replayed is one batch a replay returned.
type Replayed struct {
	Seq     int64
	Payload []byte
}

// Replayer asks the engine's replay socket for its buffered batches from seq from on. complete
// is true when the end marker arrived; false when the reply stopped short (the engine dropped
// replies, or the replay timed out), and replies holds what arrived. A nil Replayer means the
// engine has no replay endpoint.
type Replayer interface {
	Replay(ctx context.Context, from int64) (replies []Replayed, complete bool, err error)
}

// Sink receives what a source decides: the records of one batch (written in order, with the
// batch's sequence number and payload digest as provenance), the clear that stands for lost
// history, and refused batches.
type Sink interface {
	Write(rank uint32, seq int64, digest uint64, groups []byte, evs []schemas.KvEvent)
	// WriteLost writes clear, the KvCleared of the rank that replaces the engine batches
	// [from, to), which no replay can bring back (LostHistoryClear).
	WriteLost(rank uint32, from, to int64, groups []byte, clear schemas.KvEvent)
	DeadLetter(rank uint32, seq int64, payload []byte, err error)
}

// Resume is what a source knows from the records its worker already has in Kafka: the last
// batch written for the rank and its payload digest. Lost says that the last record is the
// clear written for the lost batches up to Seq (Seq itself included, Digest 0); Degraded that a
// clear for lost history was written and no full clear (an engine restart, the engine's own
// clear) came after it.
type Resume struct {
	Seq      int64
	Digest   uint64
	Lost     bool
	Degraded bool
}

// LostHistory is what a bridge does with a rank's blocks when engine batches are lost (gone
// from the engine's replay buffer, or never answered): their stores and removals are unknown,
// so the blocks the bridge wrote for the rank may no longer be the engine's.
type LostHistory string

const (
	// LostHistoryClear (the default) writes a KvCleared for the (worker, rank) in place of the
	// lost batches and lets the batches after them rebuild it: answers for the rank's earlier
	// blocks are then short (the engine still holds blocks the index forgot) rather than long
	// (the index keeping blocks the engine evicted during the lost batches). Until a full clear
	// (engine restart, the engine's own AllBlocksCleared) the rank is degraded, and stores whose
	// parent block the bridge does not hold are dropped (counted as orphaned): the relay could
	// not place them in a chain.
	LostHistoryClear LostHistory = "clear"
	// LostHistoryKeep leaves the rank's blocks as they were and applies the batches after the
	// lost ones: blocks evicted during the lost batches stay in the index until the engine
	// restarts or clears.
	LostHistoryKeep LostHistory = "keep"
)

// seenWindow is how many recent sequence numbers a source remembers with their payload
// digests, to tell a batch it already handled (a live copy of a batch that an idle re-check
// fetched from the replay socket) from an engine restart (a new batch under an old number).
const seenWindow = 4096

// sourceStats are a source's counters, read by the metrics.
type sourceStats struct {
	batches, replayed, duplicates, restarts, gaps, lost, undecodable, refused, retries uint64
	lostClears                                                                         uint64
}

// source follows one engine PUB stream (one data-parallel rank): it orders batches by sequence
// number, fills gaps from the replay socket, detects engine restarts, and converts each batch
// exactly once. Its methods run on one goroutine.
//
// States: before the first batch it does not know where the engine is (fresh start: it fills
// from 0, all the history the engine still has; resumed: it checks that the batch the
// previous bridge wrote last is still the engine's batch of that number). Then next is the
// sequence number it expects.
type source struct {
	rank    uint32 // for batches that carry no rank (SGLang)
	conv    *Converter
	replay  Replayer
	sink    Sink
	log     *zap.Logger
	retries int
	// keepOnLoss applies LostHistoryKeep; false (the zero value) is LostHistoryClear.
	keepOnLoss bool
	// degraded: a clear for lost history was written and no full clear came after it.
	degraded bool
	resume   *Resume
	started  bool
	next     int64
	eventID  uint64
	seen     [seenWindow]struct {
		seq    int64
		digest uint64
	}
	stats sourceStats
	// lastTS is the largest engine timestamp applied (hasTS: any); see handled.
	lastTS float64
	hasTS  bool
	// idleBehind is the next batch an idle re-check found no longer in the replay buffer
	// (idleChecked: there is one); a second re-check finding the same declares it lost (fill).
	idleBehind  int64
	idleChecked bool
	out         []schemas.KvEvent
	onMetric    func(kind string, n int) // events by kind, for the metrics; may be nil
	onDegraded  func(degraded bool)      // the rank became degraded or healthy; may be nil
}

func digestOf(payload []byte) uint64 { return xxh3.Hash(payload) }

func (s *source) remember(seq int64, digest uint64) {
	s.seen[uint64(seq)%seenWindow] = struct {
		seq    int64
		digest uint64
	}{seq, digest}
}

// handled says whether live batch seq (< next) is one this source already applied rather than
// a new incarnation's batch under an old number. Within the window of remembered digests the
// digest decides. Beyond it (an idle re-check that ran far ahead of a slow live stream), the
// engine's timestamp does: a restarted engine's batches are newer than every batch applied,
// an old batch is not.
func (s *source) handled(seq int64, payload []byte) bool {
	if e := s.seen[uint64(seq)%seenWindow]; e.seq == seq {
		return e.digest == digestOf(payload)
	}
	b, err := kvevents.Decode(payload)
	return err == nil && s.hasTS && b.TS <= s.lastTS
}

// live handles a batch from the PUB socket.
func (s *source) live(ctx context.Context, seq int64, payload []byte) {
	if !s.started {
		s.start(ctx, seq)
	}
	switch {
	case seq == s.next:
	case seq > s.next:
		s.fill(ctx, seq)
	case s.handled(seq, payload):
		s.stats.duplicates++
		return
	default:
		s.restart(ctx, seq)
	}
	if seq == s.next {
		s.apply(seq, payload)
	}
}

// idle re-checks the replay socket for batches after the last one handled: a dropped final
// batch is otherwise invisible until the engine publishes again.
func (s *source) idle(ctx context.Context) {
	if s.replay == nil {
		return
	}
	if !s.started {
		s.start(ctx, -1)
		return
	}
	// Ask from the last batch applied: if the engine no longer has it under its number (its
	// buffer ends before it, or holds another batch there), the engine restarted; a restart
	// whose first batches were all lost live is otherwise invisible until it publishes again,
	// and its cache is empty meanwhile.
	if last := s.next - 1; last >= 0 {
		if e := s.seen[uint64(last)%seenWindow]; e.seq == last {
			replies, complete, err := s.replay.Replay(ctx, last)
			if ctx.Err() != nil || (err != nil && len(replies) == 0) {
				return
			}
			// A reply cut short (err: its end marker was dropped) still shows the batch asked for.
			if (len(replies) == 0 && complete) || (len(replies) > 0 && replies[0].Seq == last && digestOf(replies[0].Payload) != e.digest) {
				s.restart(ctx, -1)
				return
			}
		}
	}
	s.fill(ctx, -1)
}

// start positions a source at its first batch (upTo, or -1 from an idle check).
func (s *source) start(ctx context.Context, upTo int64) {
	s.started = true
	r := s.resume
	if r == nil {
		s.next = 0
		s.fill(ctx, upTo)
		return
	}
	s.next = r.Seq + 1
	s.setDegraded(r.Degraded)
	s.conv.GuardOrphans(s.rank, r.Degraded)
	if r.Lost {
		// The last record is the clear that replaced lost batches up to r.Seq: there is no
		// batch to compare, so only a live sequence not beyond it shows a restart.
		if upTo >= 0 && upTo <= r.Seq {
			s.restart(ctx, upTo)
			return
		}
		s.fill(ctx, upTo)
		return
	}
	if s.replay == nil {
		if upTo >= 0 && upTo <= r.Seq {
			s.restart(ctx, upTo)
		}
		return
	}
	// Is the engine's batch r.Seq still the one written last? Then the engine did not restart.
	// The replay is asked from 0: when the engine still holds its whole history up to r.Seq,
	// the rank's copy counts are rebuilt from it (Kafka holds each block once, the engine may
	// hold it twice); a degraded rank keeps what Kafka says, since a lost-history clear
	// happened in that history.
	from := r.Seq
	if !r.Degraded {
		from = 0
	}
	replies, complete := s.replayThrough(ctx, from, r.Seq)
	if ctx.Err() != nil {
		return
	}
	if from == 0 && r.Seq > 0 {
		if k := int(r.Seq); len(replies) > k && replies[0].Seq == 0 && replies[k].Seq == r.Seq && digestOf(replies[k].Payload) == r.Digest {
			s.rebuild(replies[:k+1])
		}
		for len(replies) > 0 && replies[0].Seq < r.Seq {
			replies = replies[1:]
		}
	}
	if len(replies) > 0 && replies[0].Seq == r.Seq {
		if digestOf(replies[0].Payload) != r.Digest {
			s.log.Warn("engine restarted while the bridge was down (batch of the last written sequence differs)", zap.Int64("seq", r.Seq))
			s.restart(ctx, upTo)
			return
		}
		s.remember(r.Seq, r.Digest)
		s.applyReplies(replies[1:], upTo)
		if !complete || (upTo >= 0 && s.next < upTo) {
			s.fill(ctx, upTo)
		}
		return
	}
	if upTo >= 0 && upTo <= r.Seq {
		s.log.Warn("engine restarted while the bridge was down (its sequence is behind the last written)", zap.Int64("live_seq", upTo), zap.Int64("last_written", r.Seq))
		s.restart(ctx, upTo)
		return
	}
	s.applyReplies(replies, upTo)
	if upTo >= 0 && s.next < upTo {
		s.fill(ctx, upTo)
	}
}

// replayThrough asks the replay socket for the engine's batches from from on, at least through
// through when the engine still has them, and returns them in order without a hole, from the
// first one the engine holds. A reply that stops short or has a hole was cut on the way (the
// engine's ROUTER socket drops replies beyond its high-water mark when the bridge reads slowly,
// the end marker among them), not lost by the engine: the rest is asked again from the first
// missing batch, while each reply brings something new (retries replies in a row may bring
// nothing). complete says that the last reply came whole, with its end marker: replies then
// hold everything the engine had from from on.
func (s *source) replayThrough(ctx context.Context, from, through int64) (replies []Replayed, complete bool) {
	requests := 0
	for attempt := 0; attempt <= s.retries; attempt++ {
		if requests++; requests > 1 {
			s.stats.retries++
		}
		ask := from
		if n := len(replies); n > 0 {
			ask = replies[n-1].Seq + 1
		}
		got, whole, err := s.replay.Replay(ctx, ask)
		if ctx.Err() != nil {
			return replies, false
		}
		before, hole := len(replies), false
		for _, r := range got {
			n := len(replies)
			if (n == 0 && r.Seq < from) || (n > 0 && r.Seq < ask) {
				continue
			}
			if n > 0 && r.Seq != replies[n-1].Seq+1 {
				hole = true
				break
			}
			replies = append(replies, r)
		}
		if err == nil && whole && !hole {
			return replies, true
		}
		if n := len(replies); n > 0 && replies[n-1].Seq >= through {
			return replies, false // the rest is fill's, which asks from next
		}
		if len(replies) > before {
			attempt = -1 // progress: the next replay is a first attempt again
		}
	}
	return replies, false
}

// rebuild recomputes the rank's copy counts and group knowledge from the engine's batches 0 to
// the last one written, that one included (history, contiguous from 0): what the converter held
// after the previous bridge converted them. Nothing is written; the relay already has these
// records.
func (s *source) rebuild(history []Replayed) {
	for i, r := range history {
		if r.Seq != int64(i) {
			return // a hole: keep what Kafka says
		}
	}
	s.conv.Clear(s.rank, 0)
	for _, r := range history {
		b, err := kvevents.Decode(r.Payload)
		if err != nil {
			continue
		}
		rank := s.rank
		if b.HasRank {
			rank = b.Rank
		}
		s.out, _, _ = s.conv.Convert(s.out[:0], &b, rank, 0)
	}
	s.log.Info("copy counts rebuilt from the engine's replay buffer", zap.Uint32("rank", s.rank),
		zap.Int("batches", len(history)), zap.Int("held_blocks", s.conv.HeldBlocks(s.rank)))
}

// restart handles an engine restart seen at live sequence seq (-1: by an idle re-check):
// everything the rank held is cleared, then the new incarnation's history before seq (all of
// it, for -1) is filled from the replay socket.
func (s *source) restart(ctx context.Context, seq int64) {
	s.stats.restarts++
	s.log.Warn("engine restart detected: sequence went back; clearing the rank", zap.Uint32("rank", s.rank),
		zap.Int64("seq", seq), zap.Int64("expected", s.next))
	s.out = append(s.out[:0], s.conv.Clear(s.rank, s.eventID))
	s.eventID++
	s.sink.Write(s.rank, -1, 0, s.conv.GroupKinds(s.rank), s.out)
	s.setDegraded(false)
	s.idleChecked = false
	s.seen = [seenWindow]struct {
		seq    int64
		digest uint64
	}{}
	s.next = 0
	if seq != 0 {
		s.fill(ctx, seq)
	}
}

// fill brings next up to upTo (-1: as far as the replay socket reaches) from the replay socket,
// retrying short replays; history the engine no longer has is reported as lost.
func (s *source) fill(ctx context.Context, upTo int64) {
	if upTo >= 0 && s.next >= upTo {
		return
	}
	if upTo >= 0 {
		s.stats.gaps++
	}
	// attempt counts the replays in a row that brought nothing new: a long gap answered in
	// pieces (the engine drops replies beyond its high-water mark) is followed to its end.
	requests := 0
	for attempt := 0; s.replay != nil && attempt <= s.retries; attempt++ {
		if requests++; requests > 1 {
			s.stats.retries++
		}
		before := s.next
		replies, complete, err := s.replay.Replay(ctx, s.next)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			// An idle re-check that cannot reach the replay socket is routine (an engine
			// without replay, or restarting); a gap that cannot be filled is not.
			log := s.log.Warn
			if upTo < 0 {
				log = s.log.Debug
			}
			log("replay request failed", zap.Int64("from", s.next), zap.Int("attempt", attempt), zap.Int("replies", len(replies)), zap.Error(err))
			if len(replies) == 0 {
				continue
			}
			// The replies that arrived before the failure are the engine's batches in order (a
			// reply cut at the engine's high-water mark loses its end marker, and the client
			// times out): they are applied, and the rest is asked again.
		}
		if upTo < 0 {
			// An idle re-check: the live stream may still be delivering what the replay
			// buffer no longer holds (the bridge is behind), so a first reply beyond next is
			// lost only if the next re-check, after another silent period, finds the same.
			if len(replies) > 0 && replies[0].Seq > s.next && !(s.idleChecked && s.idleBehind == s.next) {
				s.idleChecked, s.idleBehind = true, s.next
				return
			}
			// At most half the duplicate window ahead, so that the live copies of what is
			// applied here are still recognised by their digests.
			if max := seenWindow / 2; len(replies) > max {
				replies, complete = replies[:max], false
			}
		}
		holes := s.applyReplies(replies, upTo)
		if upTo < 0 && (complete || len(replies) == seenWindow/2) && !holes {
			return
		}
		if upTo >= 0 && s.next >= upTo {
			return
		}
		if complete && !holes && upTo >= 0 && (len(replies) == 0 || replies[len(replies)-1].Seq < s.next) {
			// The engine's buffer ends before upTo although upTo was published: it cannot be
			// filled by asking again.
			break
		}
		if s.next > before {
			attempt = -1 // progress: the next replay is a first attempt again
		}
	}
	if upTo >= 0 && s.next < upTo {
		s.lose(s.next, upTo)
	}
}

// lose reports the batches [from, to) as lost and moves past them. Under LostHistoryClear it
// first writes the clear that stands for them and marks the rank degraded.
func (s *source) lose(from, to int64) {
	s.stats.lost += uint64(to - from)
	policy := LostHistoryClear
	if s.keepOnLoss {
		policy = LostHistoryKeep
	}
	s.log.Error("engine history lost: batches are gone from the replay buffer or were never answered; the index may miss blocks they stored and keep blocks they removed",
		zap.Uint32("rank", s.rank), zap.Int64("from", from), zap.Int64("to", to), zap.Int64("batches", to-from),
		zap.String("policy", string(policy)))
	s.next = to
	if s.keepOnLoss {
		return
	}
	s.stats.lostClears++
	clear := s.conv.Clear(s.rank, s.eventID)
	s.eventID++
	s.conv.GuardOrphans(s.rank, true)
	s.sink.WriteLost(s.rank, from, to, s.conv.GroupKinds(s.rank), clear)
	s.setDegraded(true)
}

// setDegraded records whether the rank is degraded (onDegraded hears every change).
func (s *source) setDegraded(on bool) {
	if s.degraded != on && s.onDegraded != nil {
		s.onDegraded(on)
	}
	s.degraded = on
}

// applyReplies applies the replies in [next, upTo) in order. A first reply beyond next means the
// engine's buffer no longer reaches next (lost); a hole after that is a dropped reply, and
// applyReplies stops there and reports holes so the caller asks again.
func (s *source) applyReplies(replies []Replayed, upTo int64) (holes bool) {
	first := true
	for _, r := range replies {
		if r.Seq < s.next {
			continue
		}
		if upTo >= 0 && r.Seq >= upTo {
			break
		}
		if r.Seq > s.next {
			if !first {
				return true
			}
			s.lose(s.next, r.Seq)
		}
		first = false
		s.stats.replayed++
		s.apply(r.Seq, r.Payload)
	}
	return false
}

// apply decodes, converts and writes batch seq (== next).
func (s *source) apply(seq int64, payload []byte) {
	digest := digestOf(payload)
	s.remember(seq, digest)
	s.next = seq + 1
	s.stats.batches++
	b, err := kvevents.Decode(payload)
	if err == nil && (!s.hasTS || b.TS > s.lastTS) {
		s.lastTS, s.hasTS = b.TS, true
	}
	if err != nil {
		s.stats.undecodable++
		s.sink.DeadLetter(s.rank, seq, payload, err)
		return
	}
	if b.HasRank {
		s.rank = b.Rank // the batch names its rank; clears after a restart use it too
	}
	rank := s.rank
	out, st, err := s.conv.Convert(s.out[:0], &b, rank, s.eventID)
	if err != nil {
		var re *RefusedError
		if errors.As(err, &re) {
			s.stats.refused++
		}
		s.sink.DeadLetter(rank, seq, payload, err)
		return
	}
	s.out = out
	s.eventID += uint64(len(out))
	if s.onMetric != nil {
		s.onMetric("stored", st.Stored)
		s.onMetric("removed", st.Removed)
		s.onMetric("cleared", st.Cleared)
		s.onMetric("filtered", st.Filtered)
		s.onMetric("unknown_removal", st.UnknownRemovals)
		s.onMetric("orphaned", st.Orphaned)
	}
	if st.Cleared > 0 {
		s.setDegraded(false) // the engine cleared the rank: nothing lost is held any more
	}
	s.sink.Write(rank, seq, digest, s.conv.GroupKinds(rank), out)
}
