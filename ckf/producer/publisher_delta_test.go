package producer

// The one-way publisher path (Delta, AppendDelta, SnapshotAfterBarrierDelta, MarkDeliveryUncertain): the
// same rules as Publish and SnapshotAfterBarrier (producer §8.2), with the delta returned to
// the caller instead of handed to a sink.

import (
	"errors"
	"math"
	"slices"
	"testing"

	"github.com/ckf-stream/ckf-stream/ckf"
	"pgregory.net/rapid"
)

func TestDeltaSequencesLikePublish(t *testing.T) {
	s := mustDcState(t, cfgN(64, 1))
	p := NewPublisher(prodIdentity(s.BucketCount()), 7, nil)
	out := mustApplyEvent(t, s, storeEv(pSrc(1, 0), pBlk(1, 11)))
	if d, kind, err := p.Delta(out.Publication); err != nil || kind != PublishNoSubscriber || d.Images != nil || p.LastSequence() != 7 {
		t.Fatalf("no lease: %+v %v %v, last %d", d, kind, err, p.LastSequence())
	}
	lease := ckf.LaneLease{Consumer: 1, Lane: 3, Epoch: 1}
	tail, snap, err := p.SnapshotAfterBarrierDelta(s, lease)
	if err != nil || tail.Images != nil || snap.Sequence != 7 || snap.Lease != lease || !slices.Equal(snap.Buckets, s.CopyWords()) {
		t.Fatalf("snapshot %d tail %+v err %v", snap.Sequence, tail, err)
	}
	for i, id := range []uint64{2, 3} {
		out := mustApplyEvent(t, s, storeEv(pSrc(1, 0), pBlk(id, 10+id)))
		d, kind, err := p.Delta(out.Publication)
		want := uint64(8 + i)
		if err != nil || kind != Published || d.BaseSequence != want-1 || d.Sequence != want || d.Lease != lease ||
			d.Identity != p.Identity() || !slices.Equal(d.Images, out.Publication) || p.LastSequence() != want {
			t.Fatalf("delta %d: %+v %v %v", i, d, kind, err)
		}
	}
	if _, _, err := p.Delta(nil); !errors.Is(err, ErrEmptyBatch) || p.LastSequence() != 9 {
		t.Fatalf("empty batch: %v", err)
	}
	if m, ok := p.ExactDrainMarker(); !ok || m.ExpectedSequence != 9 || m.Lease != lease {
		t.Fatalf("marker %+v", m)
	}
}

// A delta whose delivery is uncertain fences the publisher; the sequence it took is not
// continued by another delta, and a barrier under a new lease recovers at it.
func TestDeltaUncertainDeliveryFencesAndRecovers(t *testing.T) {
	s := mustDcState(t, cfgN(64, 1))
	p := NewPublisher(prodIdentity(s.BucketCount()), 0, nil)
	if _, _, err := p.SnapshotAfterBarrierDelta(s, ckf.LaneLease{Consumer: 1, Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	out := mustApplyEvent(t, s, storeEv(pSrc(1, 0), pBlk(1, 11)))
	if _, _, err := p.Delta(out.Publication); err != nil {
		t.Fatal(err)
	}
	p.MarkDeliveryUncertain()
	out = mustApplyEvent(t, s, storeEv(pSrc(1, 0), pBlk(2, 22)))
	var fe *FencedError
	if _, _, err := p.Delta(out.Publication); !errors.As(err, &fe) || fe.Reason != FenceDeliveryUncertain || p.LastSequence() != 1 {
		t.Fatalf("fenced delta: %v, last %d", err, p.LastSequence())
	}
	mustApplyEvent(t, s, storeEv(pSrc(1, 0), pBlk(3, 33))) // pending: dropped as the fenced tail
	s.cfg.PublishEveryNEvents = 100
	mustApplyEvent(t, s, storeEv(pSrc(1, 0), pBlk(4, 44)))
	tail, snap, err := p.SnapshotAfterBarrierDelta(s, ckf.LaneLease{Consumer: 1, Epoch: 2})
	if err != nil || tail.Images != nil || snap.Sequence != 1 || p.Fenced() != FenceNone || !slices.Equal(snap.Buckets, s.CopyWords()) {
		t.Fatalf("recovery: tail %+v snapshot %d err %v fence %v", tail, snap.Sequence, err, p.Fenced())
	}
}

func TestSnapshotAfterBarrierDeltaReturnsTheOldLeaseTail(t *testing.T) {
	s := mustDcState(t, cfgN(64, 100))
	p := NewPublisher(prodIdentity(s.BucketCount()), 0, nil)
	old := ckf.LaneLease{Consumer: 1, Lane: 2, Epoch: 1}
	if _, _, err := p.SnapshotAfterBarrierDelta(s, old); err != nil {
		t.Fatal(err)
	}
	mustApplyEvent(t, s, storeEv(pSrc(1, 0), pBlk(1, 11))) // pending tail
	newLease := ckf.LaneLease{Consumer: 1, Lane: 2, Epoch: 2}
	tail, snap, err := p.SnapshotAfterBarrierDelta(s, newLease)
	if err != nil || tail.Lease != old || tail.BaseSequence != 0 || tail.Sequence != 1 || len(tail.Images) == 0 {
		t.Fatalf("old-lease tail %+v err %v", tail, err)
	}
	if snap.Sequence != 1 || snap.Lease != newLease || s.HasPendingPublication() {
		t.Fatalf("snapshot %d under %v", snap.Sequence, snap.Lease)
	}
}

func TestSnapshotAfterBarrierDeltaRollover(t *testing.T) {
	s := mustDcState(t, cfgN(64, 100))
	p := NewPublisher(prodIdentity(s.BucketCount()), math.MaxUint64, nil)
	p.lease, p.hasLease = ckf.LaneLease{Epoch: 1}, true
	if _, _, err := p.SnapshotAfterBarrierDelta(s, ckf.LaneLease{Epoch: 2}); !errors.Is(err, ErrSequenceExhausted) {
		t.Fatalf("last == MaxUint64: %v", err)
	}
	p.last = math.MaxUint64 - 1
	out := mustApplyEvent(t, s, storeEv(pSrc(1, 0), pBlk(1, 11)))
	s.cfg.PublishEveryNEvents = 1
	out = mustApplyEvent(t, s, storeEv(pSrc(1, 0), pBlk(2, 22)))
	if d, _, err := p.Delta(out.Publication); err != nil || d.Sequence != math.MaxUint64 {
		t.Fatalf("last delta %+v %v", d, err)
	}
	s.cfg.PublishEveryNEvents = 100
	mustApplyEvent(t, s, storeEv(pSrc(1, 0), pBlk(3, 33)))
	if _, _, err := p.SnapshotAfterBarrierDelta(s, ckf.LaneLease{Epoch: 3}); !errors.Is(err, ErrSequenceExhausted) || p.Fenced() != FenceNone {
		t.Fatalf("rollover barrier: %v fence %v", err, p.Fenced())
	}
	if l, _ := p.Lease(); l.Epoch != 1 {
		t.Fatal("new lease installed despite the rollover")
	}
	p.fenced = FenceSequenceExhausted
	p.MarkDeliveryUncertain()
	if p.Fenced() != FenceSequenceExhausted {
		t.Fatal("an uncertain delivery must not replace SequenceExhausted")
	}
}

// A publisher built without a sink refuses the sink's calls and changes nothing: the state's
// window stays pending for SnapshotAfterBarrierDelta.
func TestPublisherWithoutSink(t *testing.T) {
	s := mustDcState(t, cfgN(64, 100))
	p := NewPublisher(prodIdentity(s.BucketCount()), 4, nil)
	mustApplyEvent(t, s, storeEv(pSrc(1, 0), pBlk(1, 11)))
	if _, err := p.SnapshotAfterBarrier(s, ckf.LaneLease{Epoch: 1}); !errors.Is(err, ErrNoSink) || !s.HasPendingPublication() {
		t.Fatalf("SnapshotAfterBarrier without a sink: %v", err)
	}
	if _, ok := p.Lease(); ok {
		t.Fatal("lease installed")
	}
	if _, err := p.Publish([]ckf.BucketImage{{Bucket: 0, Value: 1}}); !errors.Is(err, ErrNoSink) || p.LastSequence() != 4 || p.Fenced() != FenceNone {
		t.Fatalf("Publish without a sink: %v", err)
	}
}

func TestAppendDeltaAppendsOnlyADelta(t *testing.T) {
	p := NewPublisher(prodIdentity(64), 2, nil)
	images := []ckf.BucketImage{{Bucket: 1, Value: 2}}
	ds := []ckf.Delta{{Sequence: 99}}
	if got, kind, err := p.AppendDelta(ds, images); err != nil || kind != PublishNoSubscriber || len(got) != 1 || p.LastSequence() != 2 {
		t.Fatalf("no lease: %d deltas, %v %v", len(got), kind, err)
	}
	p.lease, p.hasLease = ckf.LaneLease{Epoch: 1}, true
	got, kind, err := p.AppendDelta(ds, images)
	if err != nil || kind != Published || len(got) != 2 || got[0].Sequence != 99 ||
		got[1].BaseSequence != 2 || got[1].Sequence != 3 || got[1].Lease != p.lease || !slices.Equal(got[1].Images, images) {
		t.Fatalf("appended %+v, %v %v", got, kind, err)
	}
	if got, _, err := p.AppendDelta(got, nil); !errors.Is(err, ErrEmptyBatch) || len(got) != 2 || p.LastSequence() != 3 {
		t.Fatalf("empty batch: %d deltas, %v", len(got), err)
	}
	p.MarkDeliveryUncertain()
	if got, _, err := p.AppendDelta(got, images); !errors.Is(err, ErrFenced) || len(got) != 2 {
		t.Fatalf("fenced: %d deltas, %v", len(got), err)
	}
}

func TestDeltaDoesNotAllocate(t *testing.T) {
	p := NewPublisher(prodIdentity(64), 0, nil)
	p.lease, p.hasLease = ckf.LaneLease{Epoch: 1}, true
	images := []ckf.BucketImage{{Bucket: 1, Value: 2}, {Bucket: 3, Value: 4}}
	taken := make([]ckf.Delta, 0, 1)
	if allocs := testing.AllocsPerRun(1000, func() {
		d, _, err := p.Delta(images)
		if err != nil {
			t.Fatal(err)
		}
		taken = append(taken[:0], d)
	}); allocs != 0 {
		t.Fatalf("Delta: %v allocations per call", allocs)
	}
	if allocs := testing.AllocsPerRun(1000, func() {
		var err error
		if taken, _, err = p.AppendDelta(taken[:0], images); err != nil {
			t.Fatal(err)
		}
	}); allocs != 0 {
		t.Fatalf("AppendDelta into a slice with room: %v allocations per call", allocs)
	}
}

// For random streams of events, flushes, barriers, failed deliveries and retired leases, the
// one-way path (Delta or AppendDelta, SnapshotAfterBarrierDelta, MarkDeliveryUncertain) and the sink path
// (Publish, SnapshotAfterBarrier, a failing sink) on two identical states agree: same outcomes,
// fences, leases, snapshots and delivered deltas, except that a failed delivery has advanced the
// one-way publisher's sequence by one (the delta counted as handed over) and the sink's not.
// A replica fed the one-way path's delivered records never faults and ends at the producer's
// words after the last barrier.
func TestPropDeltaPathEqualsSinkPath(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		cfg := cfgN(uint64(rapid.SampledFrom([]int{8, 64}).Draw(rt, "expected")), uint64(rapid.IntRange(1, 4).Draw(rt, "every")))
		start := rapid.SampledFrom([]uint64{0, 5, math.MaxUint64 - 3}).Draw(rt, "start")
		sa, sb := mustDcState(rt, cfg), mustDcState(rt, cfg)
		id := prodIdentity(sa.BucketCount())
		sink := &prodRecordingSink{}
		pa, pb := NewPublisher(id, start, sink), NewPublisher(id, start, nil)
		rep := &replicaLane{identity: id}
		var delivered []ckf.Delta             // the one-way path's deltas, as the caller writes them
		var shift uint64                      // failed deliveries: the one-way sequence is ahead by these
		leasesDiffer := false                 // a refused barrier tail: the one-way path installed the new lease
		failures := start != math.MaxUint64-3 // an advanced sequence would exhaust earlier
		epoch := uint64(0)
		deliver := func(d ckf.Delta) {
			delivered = append(delivered, d)
			if err := rep.delta(d); err != nil {
				rt.Fatalf("replica: %v", err)
			}
		}
		// publish hands one batch to both paths; failing makes the sink refuse it and the
		// one-way caller lose it.
		publish := func(batch []ckf.BucketImage, failing bool) {
			if failing && failures {
				sink.failNext = 1
			}
			ra, errA := pa.Publish(batch)
			sink.failNext = 0
			var d ckf.Delta
			var kind PublishKind
			var errB error
			if rapid.Bool().Draw(rt, "append") {
				var ds []ckf.Delta
				ds, kind, errB = pb.AppendDelta(ds, batch)
				if len(ds) != map[bool]int{true: 1, false: 0}[errB == nil && kind == Published] {
					rt.Fatalf("AppendDelta appended %d deltas (kind %v, err %v)", len(ds), kind, errB)
				}
				if len(ds) == 1 {
					d = ds[0]
				}
			} else {
				d, kind, errB = pb.Delta(batch)
			}
			var ee *EnqueueError
			switch {
			case errors.As(errA, &ee):
				if errB != nil || kind != Published {
					rt.Fatalf("sink failed, one-way %v %v", kind, errB)
				}
				pb.MarkDeliveryUncertain()
				shift++
			case (errA == nil) != (errB == nil) || (errA != nil && errA.Error() != errB.Error()):
				rt.Fatalf("errors differ: %v / %v", errA, errB)
			case errA == nil && ra.Kind != kind:
				rt.Fatalf("kinds differ: %v / %v", ra.Kind, kind)
			case errA == nil && kind == Published:
				deliver(d)
			}
		}
		same := func(step string) {
			if pa.Fenced() != pb.Fenced() || pa.LastSequence()+shift != pb.LastSequence() {
				rt.Fatalf("%s: fence %v / %v, sequence %d+%d / %d", step, pa.Fenced(), pb.Fenced(), pa.LastSequence(), shift, pb.LastSequence())
			}
			la, oka := pa.Lease()
			if lb, okb := pb.Lease(); !leasesDiffer && (la != lb || oka != okb) {
				rt.Fatalf("%s: leases differ", step)
			}
			if shift == 0 && !slices.EqualFunc(sink.deltas, delivered, func(a, b ckf.Delta) bool {
				return a.Identity == b.Identity && a.Lease == b.Lease && a.BaseSequence == b.BaseSequence &&
					a.Sequence == b.Sequence && slices.Equal(a.Images, b.Images)
			}) {
				rt.Fatalf("%s: delivered deltas differ", step)
			}
		}
		barrier := func() {
			epoch++
			lease := ckf.LaneLease{Consumer: 1, Lane: 2, Epoch: epoch}
			failing := rapid.IntRange(0, 5).Draw(rt, "failTail") == 0 && failures
			if failing {
				sink.failNext = 1
			}
			snapA, errA := pa.SnapshotAfterBarrier(sa, lease)
			tailFailed := sink.failNext == 0 && failing
			sink.failNext = 0
			tail, snapB, errB := pb.SnapshotAfterBarrierDelta(sb, lease)
			if tailFailed {
				// The sink refused the tail: no new lease there. The one-way caller could not
				// write it either: it marks the delivery uncertain and sends no snapshot.
				if errB != nil || tail.Images == nil {
					rt.Fatalf("tail refused, one-way tail %+v %v", tail, errB)
				}
				pb.MarkDeliveryUncertain()
				shift++
				leasesDiffer = true // until both take the next lease
				return
			}
			if (errA == nil) != (errB == nil) || (errA != nil && !errors.Is(errB, ErrSequenceExhausted)) {
				rt.Fatalf("barrier errors differ: %v / %v", errA, errB)
			}
			if errA != nil {
				return
			}
			leasesDiffer = false
			if tail.Images != nil {
				deliver(tail)
			}
			if snapA.Sequence+shift != snapB.Sequence || !slices.Equal(snapA.Buckets, snapB.Buckets) || snapA.Lease != snapB.Lease {
				rt.Fatalf("snapshots differ: %d+%d / %d", snapA.Sequence, shift, snapB.Sequence)
			}
			if err := rep.assign(lease); err != nil {
				rt.Fatal(err)
			}
			if err := rep.snapshot(snapB); err != nil {
				rt.Fatalf("replica snapshot: %v", err)
			}
		}
		ext := uint64(1)
		for i, steps := 0, rapid.IntRange(1, 80).Draw(rt, "steps"); i < steps; i++ {
			w := ckf.WorkerID(rapid.IntRange(1, 3).Draw(rt, "worker"))
			switch op := rapid.IntRange(0, 19).Draw(rt, "op"); {
			case op < 10:
				ev := storeEv(pSrc(w, 0), pBlk(ext, uint64(rapid.IntRange(1, 40).Draw(rt, "tok"))))
				ext++
				outA, outB := sa.ApplyEvent(ev), sb.ApplyEvent(ev)
				if !slices.Equal(outA.Publication, outB.Publication) {
					rt.Fatal("the two states diverged")
				}
				if len(outA.Publication) > 0 {
					publish(outA.Publication, rapid.IntRange(0, 9).Draw(rt, "fail") == 0)
				}
			case op < 13:
				ev := clearEv(pSrc(w, 0))
				outA, outB := sa.ApplyEvent(ev), sb.ApplyEvent(ev)
				if !slices.Equal(outA.Publication, outB.Publication) {
					rt.Fatal("the two states diverged")
				}
				if len(outA.Publication) > 0 {
					publish(outA.Publication, false)
				}
			case op < 15:
				if a, b := sa.Flush(), sb.Flush(); len(a) > 0 {
					if !slices.Equal(a, b) {
						rt.Fatal("the two flushes differ")
					}
					publish(a, false)
				}
			case op < 18:
				barrier()
			case op < 19:
				pa.RetireLease()
				pb.RetireLease()
				leasesDiffer = false
			default:
				pa.RetireStalledLease()
				pb.RetireStalledLease()
				leasesDiffer = false
			}
			same("step")
		}
		if a, b := sa.Flush(), sb.Flush(); len(a) > 0 {
			if !slices.Equal(a, b) {
				rt.Fatal("the two flushes differ")
			}
			publish(a, false)
		}
		same("last flush")
		if l, ok := pb.Lease(); ok && pb.Fenced() == FenceNone && rep.ready && rep.lease == l && !slices.Equal(rep.words, sb.CopyWords()) {
			rt.Fatalf("replica words differ from the producer's: snapshot and deltas do not reconstruct it")
		}
		barrier()
		same("last barrier")
	})
}
