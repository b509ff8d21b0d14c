package bridge

import (
	"context"
	"testing"

	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/vmihailenco/msgpack/v5"
	"go.uber.org/zap"
)

// fakeEngine is one engine incarnation's history as its replay socket serves it: batches
// [lo, len(batches)) are still buffered.
type fakeEngine struct {
	batches [][]byte
	lo      int
	// drop makes the next replies stop short after this many batches (a dropped reply).
	drop     []int
	requests []int64
	// cuts make the next replies lose what a ROUTER socket drops beyond its high-water mark
	// when the bridge reads slowly: one cut per reply, in order.
	cuts []replyCut
	// tsBase is added to each batch's timestamp (the batch's index): a later incarnation has a
	// larger base, as its clock is later.
	tsBase float64
}

func (e *fakeEngine) Replay(_ context.Context, from int64) ([]Replayed, bool, error) {
	e.requests = append(e.requests, from)
	var out []Replayed
	for s := max(int(from), e.lo); s < len(e.batches); s++ {
		out = append(out, Replayed{Seq: int64(s), Payload: e.batches[s]})
	}
	if len(e.cuts) > 0 {
		c := e.cuts[0]
		e.cuts = e.cuts[1:]
		kept := out[:0:0]
		for _, r := range out {
			if r.Seq < c.from || r.Seq >= c.to {
				kept = append(kept, r)
			}
		}
		if c.endLost {
			return kept, false, errReplayTimeout
		}
		return kept, true, nil
	}
	if len(e.drop) > 0 {
		n := e.drop[0]
		e.drop = e.drop[1:]
		if n < len(out) {
			return out[:n], false, nil
		}
	}
	return out, true, nil
}

// replyCut is one reply's loss at the engine's high-water mark: the batches [from, to) are
// dropped, and with endLost the end marker too, so that the client times out after the batches
// that did arrive.
type replyCut struct {
	from, to int64
	endLost  bool
}

// publish appends a batch storing one block with hash h (a root, 4 tokens).
func (e *fakeEngine) publish(t *testing.T, h int64) (int64, []byte) {
	t.Helper()
	ts := e.tsBase + float64(len(e.batches))
	b, err := msgpack.Marshal([]any{ts, []any{[]any{"BlockStored", []any{h}, nil, []any{h, h, h, h}, 4, nil, "GPU"}}})
	if err != nil {
		t.Fatal(err)
	}
	e.batches = append(e.batches, b)
	return int64(len(e.batches) - 1), b
}

type written struct {
	seq  int64
	kind schemas.KvEventKind
	hash uint64
	// lost is the lost range a clear stands for (WriteLost).
	lost [2]int64
}

type recordingSink struct {
	out  []written
	dead []int64
}

func (r *recordingSink) Write(_ uint32, seq int64, _ uint64, _ []byte, evs []schemas.KvEvent) {
	for _, ev := range evs {
		w := written{seq: seq, kind: ev.Kind}
		if ev.Kind == schemas.KvStoredEvent {
			w.hash = ev.Stored.Blocks[0].BlockHash
		}
		r.out = append(r.out, w)
	}
}

func (r *recordingSink) WriteLost(_ uint32, from, to int64, _ []byte, ev schemas.KvEvent) {
	r.out = append(r.out, written{seq: to - 1, kind: ev.Kind, lost: [2]int64{from, to}})
}

// lostClears returns the lost ranges of the clears written for lost history.
func (r *recordingSink) lostClears() [][2]int64 {
	var out [][2]int64
	for _, w := range r.out {
		if w.lost != ([2]int64{}) {
			out = append(out, w.lost)
		}
	}
	return out
}

func (r *recordingSink) DeadLetter(_ uint32, seq int64, _ []byte, _ error) {
	r.dead = append(r.dead, seq)
}

func (r *recordingSink) hashes() []uint64 {
	var hs []uint64
	for _, w := range r.out {
		if w.kind == schemas.KvStoredEvent {
			hs = append(hs, w.hash)
		}
	}
	return hs
}

func newTestSource(e *fakeEngine, sink *recordingSink) *source {
	s := &source{conv: NewConverter(1, 4, nil), sink: sink, log: zap.NewNop(), retries: 2}
	if e != nil {
		s.replay = e
	}
	return s
}

func equalU64(a []uint64, b ...uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestSourceFillsGapFromReplay(t *testing.T) {
	e, sink := &fakeEngine{}, &recordingSink{}
	s := newTestSource(e, sink)
	ctx := context.Background()
	for h := int64(10); h < 16; h++ {
		e.publish(t, h)
	}
	s.live(ctx, 0, e.batches[0])
	s.live(ctx, 1, e.batches[1])
	// 2 and 3 were dropped on the PUB socket; 4 arrives live; 5 is in flight.
	s.live(ctx, 4, e.batches[4])
	s.live(ctx, 5, e.batches[5])
	if !equalU64(sink.hashes(), 10, 11, 12, 13, 14, 15) {
		t.Fatalf("written %v", sink.hashes())
	}
	if s.stats.gaps != 1 || s.stats.replayed != 2 || s.stats.lost != 0 || len(e.requests) != 1 || e.requests[0] != 2 {
		t.Fatalf("stats %+v requests %v", s.stats, e.requests)
	}
}

func TestSourceRetriesShortReplay(t *testing.T) {
	e, sink := &fakeEngine{drop: []int{1}}, &recordingSink{}
	s := newTestSource(e, sink)
	for h := int64(10); h < 15; h++ {
		e.publish(t, h)
	}
	s.live(context.Background(), 4, e.batches[4]) // fresh start: fill 0..3, the first reply stops after 0
	if !equalU64(sink.hashes(), 10, 11, 12, 13, 14) || len(e.requests) != 2 || e.requests[1] != 1 || s.stats.lost != 0 {
		t.Fatalf("written %v requests %v stats %+v", sink.hashes(), e.requests, s.stats)
	}
}

func TestSourceReportsLostHistory(t *testing.T) {
	e, sink := &fakeEngine{lo: 3}, &recordingSink{}
	s := newTestSource(e, sink)
	for h := int64(10); h < 16; h++ {
		e.publish(t, h)
	}
	s.live(context.Background(), 5, e.batches[5])
	if !equalU64(sink.hashes(), 13, 14, 15) || s.stats.lost != 3 {
		t.Fatalf("written %v stats %+v", sink.hashes(), s.stats)
	}
	// Without a replay socket a gap is lost at once.
	sink2 := &recordingSink{}
	s2 := newTestSource(nil, sink2)
	s2.live(context.Background(), 0, e.batches[0])
	s2.live(context.Background(), 3, e.batches[3])
	if !equalU64(sink2.hashes(), 10, 13) || s2.stats.lost != 2 {
		t.Fatalf("no replay: written %v stats %+v", sink2.hashes(), s2.stats)
	}
}

func TestSourceRestartClearsAndRefills(t *testing.T) {
	e, sink := &fakeEngine{}, &recordingSink{}
	s := newTestSource(e, sink)
	ctx := context.Background()
	for h := int64(10); h < 14; h++ {
		_, b := e.publish(t, h)
		s.live(ctx, int64(len(e.batches)-1), b)
	}
	// The engine restarts: a new incarnation publishes 0 and 1; the bridge sees 1 first.
	e2 := &fakeEngine{}
	s.replay = e2
	e2.publish(t, 20)
	_, b := e2.publish(t, 21)
	s.live(ctx, 1, b)
	if s.stats.restarts != 1 {
		t.Fatalf("stats %+v", s.stats)
	}
	var kinds []schemas.KvEventKind
	for _, w := range sink.out[4:] {
		kinds = append(kinds, w.kind)
	}
	if len(kinds) != 3 || kinds[0] != schemas.KvClearedEvent || !equalU64(sink.hashes()[4:], 20, 21) {
		t.Fatalf("after restart: %+v", sink.out[4:])
	}
	if s.conv.Held(0, 10) != 0 || s.conv.Held(0, 20) != 1 {
		t.Fatal("the clear did not reset the copies")
	}
}

func TestSourceIdleRecheckFindsDroppedFinalBatch(t *testing.T) {
	e, sink := &fakeEngine{}, &recordingSink{}
	s := newTestSource(e, sink)
	ctx := context.Background()
	_, b0 := e.publish(t, 10)
	s.live(ctx, 0, b0)
	_, b1 := e.publish(t, 11) // dropped on the PUB socket, and the engine goes quiet
	s.idle(ctx)
	if !equalU64(sink.hashes(), 10, 11) {
		t.Fatalf("written %v", sink.hashes())
	}
	// The live copy arrives after all: a duplicate, not a restart.
	s.live(ctx, 1, b1)
	if s.stats.duplicates != 1 || s.stats.restarts != 0 || len(sink.out) != 2 {
		t.Fatalf("stats %+v out %+v", s.stats, sink.out)
	}
}

func TestSourceResume(t *testing.T) {
	ctx := context.Background()
	e := &fakeEngine{}
	for h := int64(10); h < 17; h++ {
		e.publish(t, h)
	}
	t.Run("same incarnation continues after the last written batch", func(t *testing.T) {
		sink := &recordingSink{}
		s := newTestSource(e, sink)
		s.resume = &Resume{Seq: 3, Digest: digestOf(e.batches[3])}
		s.live(ctx, 6, e.batches[6])
		if !equalU64(sink.hashes(), 14, 15, 16) || s.stats.restarts != 0 || e.requests[len(e.requests)-1] != 0 {
			t.Fatalf("written %v stats %+v", sink.hashes(), s.stats)
		}
	})
	t.Run("a different batch under the last written number is a restart", func(t *testing.T) {
		sink := &recordingSink{}
		s := newTestSource(e, sink)
		s.resume = &Resume{Seq: 3, Digest: 12345}
		s.live(ctx, 6, e.batches[6])
		if s.stats.restarts != 1 || sink.out[0].kind != schemas.KvClearedEvent || !equalU64(sink.hashes(), 10, 11, 12, 13, 14, 15, 16) {
			t.Fatalf("written %+v stats %+v", sink.out, s.stats)
		}
	})
	t.Run("a live sequence behind the last written one is a restart", func(t *testing.T) {
		sink := &recordingSink{}
		short := &fakeEngine{batches: e.batches[:2]}
		s := newTestSource(short, sink)
		s.resume = &Resume{Seq: 5, Digest: digestOf(e.batches[5])}
		s.live(ctx, 1, e.batches[1])
		if s.stats.restarts != 1 || !equalU64(sink.hashes(), 10, 11) {
			t.Fatalf("written %+v stats %+v", sink.out, s.stats)
		}
	})
	t.Run("idle start after a resume writes what the previous bridge did not", func(t *testing.T) {
		sink := &recordingSink{}
		s := newTestSource(e, sink)
		s.resume = &Resume{Seq: 4, Digest: digestOf(e.batches[4])}
		s.idle(ctx)
		if !equalU64(sink.hashes(), 15, 16) || s.next != 7 {
			t.Fatalf("written %v next %d", sink.hashes(), s.next)
		}
	})
}

func TestSourceDeadLettersUndecodable(t *testing.T) {
	sink := &recordingSink{}
	s := newTestSource(nil, sink)
	s.live(context.Background(), 0, []byte{0xc1})
	if len(sink.dead) != 1 || s.stats.undecodable != 1 || s.next != 1 {
		t.Fatalf("dead %v stats %+v", sink.dead, s.stats)
	}
}

// TestSourceIdleRecheckWhileBehind: an idle re-check that finds the replay buffer no longer
// reaching next does not declare loss at once (the live stream may still deliver those batches);
// a second re-check finding the same does.
func TestSourceIdleRecheckWhileBehind(t *testing.T) {
	e, sink := &fakeEngine{}, &recordingSink{}
	s := newTestSource(e, sink)
	ctx := context.Background()
	for h := int64(10); h < 20; h++ {
		e.publish(t, h)
	}
	s.live(ctx, 0, e.batches[0])
	s.live(ctx, 1, e.batches[1])
	e.lo = 5
	s.idle(ctx)
	if s.stats.lost != 0 || s.next != 2 || len(sink.hashes()) != 2 {
		t.Fatalf("first re-check: stats %+v next %d", s.stats, s.next)
	}
	s.live(ctx, 2, e.batches[2]) // the live stream was behind, not lost
	s.idle(ctx)
	if s.stats.lost != 0 || s.next != 3 {
		t.Fatalf("re-check after progress: stats %+v next %d", s.stats, s.next)
	}
	s.idle(ctx)
	if s.stats.lost != 2 || s.next != 10 || !equalU64(sink.hashes(), 10, 11, 12, 15, 16, 17, 18, 19) {
		t.Fatalf("second re-check without progress: stats %+v next %d written %v", s.stats, s.next, sink.hashes())
	}
}

// TestSourceIdleRecheckBoundedAhead: an idle re-check applies at most half the duplicate
// window, and live copies far behind (beyond the window) are still duplicates by timestamp,
// while a new incarnation's batch under an old number is a restart.
func TestSourceIdleRecheckBoundedAhead(t *testing.T) {
	e, sink := &fakeEngine{}, &recordingSink{}
	s := newTestSource(e, sink)
	ctx := context.Background()
	for h := int64(0); h < seenWindow+100; h++ {
		e.publish(t, 1000+h)
	}
	s.live(ctx, 0, e.batches[0])
	s.idle(ctx)
	if s.next != 1+seenWindow/2 {
		t.Fatalf("one re-check applied up to %d", s.next)
	}
	for s.next < int64(len(e.batches)) {
		s.idle(ctx)
	}
	// Live copies of batches applied by the re-checks: within the window by digest, beyond it
	// by timestamp.
	s.live(ctx, 5, e.batches[5])
	s.live(ctx, int64(len(e.batches)-1), e.batches[len(e.batches)-1])
	if s.stats.duplicates != 2 || s.stats.restarts != 0 {
		t.Fatalf("stats %+v", s.stats)
	}
	e2 := &fakeEngine{tsBase: 1e9}
	s.replay = e2
	for h := int64(0); h < 6; h++ {
		e2.publish(t, 5000+h)
	}
	s.live(ctx, 5, e2.batches[5])
	if s.stats.restarts != 1 || s.next != 6 {
		t.Fatalf("restart beyond the window: stats %+v next %d", s.stats, s.next)
	}
}

// TestSourceFollowsReplayAnsweredInPieces: a long gap whose replays each stop short (the engine
// drops replies beyond its high-water mark) is followed to its end as long as every replay
// brings something new; only replays in a row without progress count against the retries.
func TestSourceFollowsReplayAnsweredInPieces(t *testing.T) {
	e, sink := &fakeEngine{drop: []int{1, 1, 1, 1, 1, 1, 1, 1}}, &recordingSink{}
	s := newTestSource(e, sink) // retries: 2
	for h := int64(10); h < 20; h++ {
		e.publish(t, h)
	}
	s.live(context.Background(), 9, e.batches[9])
	if s.stats.lost != 0 || s.next != 10 || len(sink.hashes()) != 10 || s.stats.retries != 8 || len(e.requests) != 9 {
		t.Fatalf("stats %+v next %d written %v", s.stats, s.next, sink.hashes())
	}
}

// TestSourceIdleRecheckDetectsQuietRestart: an engine that restarted and whose new batches were
// all lost live (or that published none yet) is found by the idle re-check, which asks from the
// last batch applied: the rank is cleared and the new incarnation's batches are applied.
func TestSourceIdleRecheckDetectsQuietRestart(t *testing.T) {
	ctx := context.Background()
	for _, newBatches := range []int{0, 2, 6} {
		e, sink := &fakeEngine{}, &recordingSink{}
		s := newTestSource(e, sink)
		for h := int64(10); h < 14; h++ {
			seq, b := e.publish(t, h)
			s.live(ctx, seq, b)
		}
		s.idle(ctx) // the same incarnation: nothing to do
		if s.stats.restarts != 0 || len(sink.out) != 4 {
			t.Fatalf("same incarnation: stats %+v", s.stats)
		}
		e2 := &fakeEngine{tsBase: 1e9}
		for h := 0; h < newBatches; h++ {
			e2.publish(t, int64(100+h))
		}
		s.replay = e2
		s.idle(ctx)
		if s.stats.restarts != 1 || sink.out[4].kind != schemas.KvClearedEvent || len(sink.hashes()) != 4+newBatches ||
			s.next != int64(newBatches) || s.conv.Held(0, 10) != 0 {
			t.Fatalf("%d new batches: stats %+v next %d out %+v", newBatches, s.stats, s.next, sink.out)
		}
	}
}

// TestSourceResumeAcrossDroppedReplies: a resumed source asks the replay socket from 0 for the
// whole buffer (to check the last batch written and rebuild the copy counts); a reply that long
// overflows the engine's high-water mark when the bridge reads slowly, and the ROUTER socket
// drops a run of replies, the end marker sometimes among them. Wherever the run falls (before,
// on or right after the last batch written, or at the end), what is missing was dropped on the
// way, not lost by the engine: it is asked again, nothing is reported lost, and the batches
// after the last one written are written once each.
func TestSourceResumeAcrossDroppedReplies(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name string
		cuts []replyCut
	}{
		{"a run dropped right after the last batch written", []replyCut{{from: 4, to: 7}}},
		{"a run dropped over the last batch written", []replyCut{{from: 2, to: 6}}},
		{"a run dropped before the last batch written", []replyCut{{from: 1, to: 2}}},
		{"the tail and the end marker dropped before the last batch written", []replyCut{{from: 2, to: 10, endLost: true}}},
		{"the tail and the end marker dropped after it", []replyCut{{from: 5, to: 10, endLost: true}}},
		{"every reply cut, each a little further", []replyCut{{from: 2, to: 10, endLost: true}, {from: 5, to: 10, endLost: true}, {from: 8, to: 10, endLost: true}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			e, sink := &fakeEngine{}, &recordingSink{}
			for h := int64(10); h < 20; h++ {
				e.publish(t, h)
			}
			e.cuts = c.cuts
			s := newTestSource(e, sink) // retries: 2
			s.resume = &Resume{Seq: 3, Digest: digestOf(e.batches[3])}
			s.idle(ctx)
			if s.stats.lost != 0 || s.stats.restarts != 0 || s.next != 10 || !equalU64(sink.hashes(), 14, 15, 16, 17, 18, 19) {
				t.Fatalf("stats %+v next %d written %v requests %v", s.stats, s.next, sink.hashes(), e.requests)
			}
		})
	}
	t.Run("the copy counts are rebuilt from a history answered in pieces", func(t *testing.T) {
		e := &fakeEngine{}
		e.publish(t, 10) // 0
		e.publish(t, 10) // 1: a second copy of block 10
		e.publish(t, 11) // 2
		rm, _ := msgpack.Marshal([]any{3.0, []any{[]any{"BlockRemoved", []any{10}, "GPU"}}})
		e.batches = append(e.batches, rm) // 3: one copy removed
		e.cuts = []replyCut{{from: 1, to: 4, endLost: true}}
		sink := &recordingSink{}
		s := newTestSource(e, sink)
		s.conv.rank(0).copies[10] = 1 // what Kafka gives back: block 10 held once
		s.conv.rank(0).copies[11] = 1
		s.resume = &Resume{Seq: 2, Digest: digestOf(e.batches[2])}
		s.live(ctx, 3, rm)
		if s.conv.Held(0, 10) != 1 || len(sink.out) != 0 || s.stats.lost != 0 {
			t.Fatalf("after the first removal: held %d, written %+v, stats %+v", s.conv.Held(0, 10), sink.out, s.stats)
		}
	})
}

// TestSourceFillKeepsRepliesBeforeTimeout: a gap whose replies each stop short with the end
// marker dropped (the client times out) is filled with what each reply brought, asked again from
// the first missing batch, and nothing is lost.
func TestSourceFillKeepsRepliesBeforeTimeout(t *testing.T) {
	e, sink := &fakeEngine{}, &recordingSink{}
	s := newTestSource(e, sink) // retries: 2
	ctx := context.Background()
	for h := int64(10); h < 22; h++ {
		e.publish(t, h)
	}
	s.live(ctx, 0, e.batches[0])
	e.cuts = []replyCut{{from: 4, to: 12, endLost: true}, {from: 6, to: 12, endLost: true}, {from: 8, to: 12, endLost: true},
		{from: 10, to: 12, endLost: true}}
	s.live(ctx, 11, e.batches[11]) // a gap: 1..10
	if s.stats.lost != 0 || s.next != 12 || len(sink.hashes()) != 12 {
		t.Fatalf("gap: stats %+v next %d written %v requests %v", s.stats, s.next, sink.hashes(), e.requests)
	}
	// The same on an idle re-check, which also first checks the last batch applied.
	for h := int64(22); h < 30; h++ {
		e.publish(t, h)
	}
	e.cuts = []replyCut{{from: 14, to: 20, endLost: true}, {from: 16, to: 20, endLost: true}, {from: 18, to: 20, endLost: true}}
	s.idle(ctx)
	if s.stats.lost != 0 || s.stats.restarts != 0 || s.next != 20 || len(sink.hashes()) != 20 {
		t.Fatalf("idle: stats %+v next %d written %v requests %v", s.stats, s.next, sink.hashes(), e.requests)
	}
}
