package bridge

import (
	"context"
	"encoding/binary"
	"testing"

	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/vmihailenco/msgpack/v5"
)

// publishChild appends a batch storing block h under parent (4 tokens).
func (e *fakeEngine) publishChild(t *testing.T, h, parent int64) []byte {
	t.Helper()
	b, err := msgpack.Marshal([]any{e.tsBase + float64(len(e.batches)), []any{[]any{"BlockStored", []any{h}, parent, []any{h, h, h, h}, 4, nil, "GPU"}}})
	if err != nil {
		t.Fatal(err)
	}
	e.batches = append(e.batches, b)
	return b
}

// Under LostHistoryClear (the default) batches gone from the engine's replay buffer are
// replaced by a clear of the rank, written with the lost range: the index forgets what the
// bridge wrote before (which the lost batches may have evicted) and the batches after rebuild
// the rank. The rank is degraded until a full clear, and stores whose parent went with the lost
// history are dropped as orphans instead of reaching the relay, which would refuse them.
func TestSourceLostHistoryClearsTheRank(t *testing.T) {
	e, sink := &fakeEngine{}, &recordingSink{}
	s := newTestSource(e, sink)
	var changes []bool
	s.onDegraded = func(on bool) { changes = append(changes, on) }
	ctx := context.Background()
	e.publish(t, 10)          // 0
	e.publishChild(t, 11, 10) // 1
	e.publish(t, 20)          // 2 (lost)
	e.publishChild(t, 21, 20) // 3 (lost)
	e.publishChild(t, 22, 21) // 4: its parent came with the lost history
	e.publish(t, 30)          // 5: a new root
	s.live(ctx, 0, e.batches[0])
	s.live(ctx, 1, e.batches[1])
	e.lo = 4 // the engine's buffer no longer reaches batches 2 and 3
	s.live(ctx, 5, e.batches[5])
	if got := sink.lostClears(); len(got) != 1 || got[0] != [2]int64{2, 4} {
		t.Fatalf("lost clears %v, want one for [2, 4)", got)
	}
	if s.stats.lost != 2 || s.stats.lostClears != 1 || !s.degraded || len(changes) != 1 || !changes[0] {
		t.Fatalf("stats %+v degraded %v changes %v", s.stats, s.degraded, changes)
	}
	if !equalU64(sink.hashes(), 10, 11, 30) || s.conv.HeldBlocks(0) != 1 || s.conv.Held(0, 30) != 1 {
		t.Fatalf("written %v, held %v: the orphan 22 must be dropped and 10, 11 forgotten", sink.hashes(), s.conv.HeldHashes(0))
	}
	// The clear comes before the batches after the loss.
	if w := sink.out[2]; w.kind != schemas.KvClearedEvent || w.seq != 3 {
		t.Fatalf("third record %+v, want the clear as batch 3", w)
	}
	// The engine's own clear ends the degradation.
	b, _ := msgpack.Marshal([]any{100.0, []any{[]any{"AllBlocksCleared"}}})
	e.batches = append(e.batches, b)
	s.live(ctx, 6, b)
	e.publishChild(t, 41, 40) // a store whose parent is unknown is no orphan once the rank is whole
	s.live(ctx, 7, e.batches[7])
	if s.degraded || len(changes) != 2 || changes[1] || s.conv.Held(0, 41) != 1 {
		t.Fatalf("after the engine's clear: degraded %v changes %v held %v", s.degraded, changes, s.conv.HeldHashes(0))
	}
}

// Under LostHistoryKeep a loss only counts: no clear, the rank keeps its blocks.
func TestSourceLostHistoryKeep(t *testing.T) {
	e, sink := &fakeEngine{lo: 2}, &recordingSink{}
	s := newTestSource(e, sink)
	s.keepOnLoss = true
	for h := int64(10); h < 14; h++ {
		e.publish(t, h)
	}
	s.live(context.Background(), 3, e.batches[3])
	if s.stats.lost != 2 || len(sink.lostClears()) != 0 || s.degraded || !equalU64(sink.hashes(), 12, 13) {
		t.Fatalf("stats %+v lost clears %v written %v", s.stats, sink.lostClears(), sink.hashes())
	}
}

// A restarted bridge reads a lost-history clear back as the rank's position (Resume.Lost:
// the lost batch has no digest to compare) and as degraded until a full clear follows.
func TestReadBackLostHistory(t *testing.T) {
	rb := newReadBack(NewConverter(1, 4, nil))
	rb.record(provenance(0, 100, 0, 1), storedKV(1))
	lost := append(provenance(4, 0, 0, 1), kgo.RecordHeader{Key: HeaderLost,
		Value: binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(nil, 1), 5)})
	rb.record(lost, &schemas.KvEvent{Kind: schemas.KvClearedEvent})
	if r := rb.resumes[0]; r == nil || r.Seq != 4 || !r.Lost || !r.Degraded || rb.conv.HeldBlocks(0) != 0 {
		t.Fatalf("after the lost-history clear: %+v held %v", rb.resumes[0], rb.conv.HeldHashes(0))
	}
	rb.record(provenance(5, 105, 0, 1), storedKV(7))
	if r := rb.resumes[0]; r.Seq != 5 || r.Lost || !r.Degraded {
		t.Fatalf("a batch after it: %+v", r)
	}
	rb.record(provenance(6, 106, 0, 1), &schemas.KvEvent{Kind: schemas.KvClearedEvent})
	if r := rb.resumes[0]; r.Degraded {
		t.Fatalf("the engine's clear: %+v", r)
	}
}

// A source resumed on a lost-history clear continues after it without comparing digests, stays
// degraded and keeps dropping orphans.
func TestSourceResumesAfterLostHistory(t *testing.T) {
	e, sink := &fakeEngine{lo: 5}, &recordingSink{}
	for h := int64(10); h < 15; h++ {
		e.publish(t, h)
	}
	e.publishChild(t, 21, 20) // 5: an orphan of the lost history
	e.publish(t, 30)          // 6
	s := newTestSource(e, sink)
	s.resume = &Resume{Seq: 4, Lost: true, Degraded: true}
	s.live(context.Background(), 6, e.batches[6])
	if s.stats.restarts != 0 || s.stats.lost != 0 || !s.degraded || !equalU64(sink.hashes(), 30) || s.next != 7 {
		t.Fatalf("stats %+v degraded %v written %v next %d", s.stats, s.degraded, sink.hashes(), s.next)
	}
}

// A resumed source rebuilds the rank's copy counts from the engine's replay buffer when it still
// holds the incarnation's whole history: a block the engine stored twice before the previous
// bridge stopped is held twice again (Kafka has it once), so its first removal writes nothing and
// the index keeps it while the engine does.
func TestSourceResumeRebuildsCopyCounts(t *testing.T) {
	e := &fakeEngine{}
	e.publish(t, 10) // 0
	e.publish(t, 10) // 1: a second copy of block 10
	rm, _ := msgpack.Marshal([]any{2.0, []any{[]any{"BlockRemoved", []any{10}, "GPU"}}})
	e.batches = append(e.batches, rm) // 2: one copy removed
	sink := &recordingSink{}
	s := newTestSource(e, sink)
	// What Kafka gives back: block 10 held once, batch 1 written last.
	s.conv.rank(0).copies[10] = 1
	s.resume = &Resume{Seq: 1, Digest: digestOf(e.batches[1])}
	s.live(context.Background(), 2, rm)
	if s.conv.Held(0, 10) != 1 || len(sink.out) != 0 {
		t.Fatalf("after the first removal: held %d, written %+v (the engine still holds a copy)", s.conv.Held(0, 10), sink.out)
	}
	// A degraded rank keeps what Kafka says.
	sink2 := &recordingSink{}
	s2 := newTestSource(e, sink2)
	s2.conv.rank(0).copies[10] = 1
	s2.resume = &Resume{Seq: 1, Digest: digestOf(e.batches[1]), Degraded: true}
	s2.live(context.Background(), 2, rm)
	if s2.conv.Held(0, 10) != 0 || len(sink2.out) != 1 || sink2.out[0].kind != schemas.KvRemovedEvent {
		t.Fatalf("degraded: held %d, written %+v", s2.conv.Held(0, 10), sink2.out)
	}
}
