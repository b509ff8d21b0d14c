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
// batch's sequence number and payload digest as provenance) and refused batches.
type Sink interface {
	Write(rank uint32, seq int64, digest uint64, evs []schemas.KvEvent)
	DeadLetter(rank uint32, seq int64, payload []byte, err error)
}

// Resume is what a source knows from the records its worker already has in Kafka: the last
// batch written for the rank and its payload digest.
type Resume struct {
	Seq    int64
	Digest uint64
}

// seenWindow is how many recent sequence numbers a source remembers with their payload
// digests, to tell a batch it already handled (a live copy of a batch that an idle re-check
// fetched from the replay socket) from an engine restart (a new batch under an old number).
const seenWindow = 4096

// sourceStats are a source's counters, read by the metrics.
type sourceStats struct {
	batches, replayed, duplicates, restarts, gaps, lost, undecodable, refused uint64
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
	resume  *Resume
	started bool
	next    int64
	eventID uint64
	seen    [seenWindow]struct {
		seq    int64
		digest uint64
	}
	stats    sourceStats
	out      []schemas.KvEvent
	onMetric func(kind string, n int) // events by kind, for the metrics; may be nil
}

func digestOf(payload []byte) uint64 { return xxh3.Hash(payload) }

func (s *source) remember(seq int64, digest uint64) {
	s.seen[uint64(seq)%seenWindow] = struct {
		seq    int64
		digest uint64
	}{seq, digest}
}

func (s *source) handled(seq int64, digest uint64) bool {
	e := s.seen[uint64(seq)%seenWindow]
	return e.seq == seq && e.digest == digest && seq < s.next
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
	case s.handled(seq, digestOf(payload)):
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
	if s.replay == nil {
		if upTo >= 0 && upTo <= r.Seq {
			s.restart(ctx, upTo)
		}
		return
	}
	// Is the engine's batch r.Seq still the one written last? Then the engine did not restart.
	replies, complete, err := s.replay.Replay(ctx, r.Seq)
	if err != nil && ctx.Err() != nil {
		return
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

// restart handles an engine restart seen at live sequence seq: everything the rank held is
// cleared, then the new incarnation's history before seq is filled from the replay socket.
func (s *source) restart(ctx context.Context, seq int64) {
	s.stats.restarts++
	s.log.Warn("engine restart detected: sequence went back; clearing the rank", zap.Uint32("rank", s.rank),
		zap.Int64("seq", seq), zap.Int64("expected", s.next))
	s.out = append(s.out[:0], s.conv.Clear(s.rank, s.eventID))
	s.eventID++
	s.sink.Write(s.rank, -1, 0, s.out)
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
	for attempt := 0; s.replay != nil && attempt <= s.retries; attempt++ {
		replies, complete, err := s.replay.Replay(ctx, s.next)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			s.log.Warn("replay request failed", zap.Int64("from", s.next), zap.Int("attempt", attempt), zap.Error(err))
			continue
		}
		holes := s.applyReplies(replies, upTo)
		if upTo < 0 && complete && !holes {
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
	}
	if upTo >= 0 && s.next < upTo {
		s.lose(s.next, upTo)
	}
}

// lose reports the batches [from, to) as lost and moves past them.
func (s *source) lose(from, to int64) {
	s.stats.lost += uint64(to - from)
	s.log.Error("engine history lost: batches are gone from the replay buffer; the index may miss blocks they stored",
		zap.Uint32("rank", s.rank), zap.Int64("from", from), zap.Int64("to", to), zap.Int64("batches", to-from))
	s.next = to
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
	}
	s.sink.Write(rank, seq, digest, out)
}
