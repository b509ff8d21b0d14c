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
}

func (e *fakeEngine) Replay(_ context.Context, from int64) ([]Replayed, bool, error) {
	e.requests = append(e.requests, from)
	var out []Replayed
	for s := max(int(from), e.lo); s < len(e.batches); s++ {
		out = append(out, Replayed{Seq: int64(s), Payload: e.batches[s]})
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

// publish appends a batch storing one block with hash h (a root, 4 tokens).
func (e *fakeEngine) publish(t *testing.T, h int64) (int64, []byte) {
	t.Helper()
	b, err := msgpack.Marshal([]any{1.0, []any{[]any{"BlockStored", []any{h}, nil, []any{h, h, h, h}, 4, nil, "GPU"}}})
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
}

type recordingSink struct {
	out  []written
	dead []int64
}

func (r *recordingSink) Write(_ uint32, seq int64, _ uint64, evs []schemas.KvEvent) {
	for _, ev := range evs {
		w := written{seq: seq, kind: ev.Kind}
		if ev.Kind == schemas.KvStoredEvent {
			w.hash = ev.Stored.Blocks[0].BlockHash
		}
		r.out = append(r.out, w)
	}
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
		if !equalU64(sink.hashes(), 14, 15, 16) || s.stats.restarts != 0 || e.requests[len(e.requests)-1] != 3 {
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
