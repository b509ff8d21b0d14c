package producer

// Publisher behaviours 36–41 and local-adapter behaviours 50–54 (table at
// the top of dcstate_test.go). The adapter tests use a test-local replica
// lane (replicaLane) that applies the consumer acceptance rules of producer
// producer §8.3, so these tests pin the producer's side of the contract
// independently of the consumer half's ingestor.

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/ckf-stream/ckf-stream/ckf"
)

func TestBehaviour36_SnapshotSequenceThenDeltaThenMarker(t *testing.T) {
	s := mustDcState(t, cfgN(64, 1))
	sink := &prodRecordingSink{}
	p := NewPublisher(prodIdentity(s.BucketCount()), 7, sink)
	if _, ok := p.ExactDrainMarker(); ok {
		t.Fatal("no lease, no marker")
	}
	lease := ckf.LaneLease{Consumer: 1, Lane: 3, Epoch: 1}
	snap, err := p.SnapshotAfterBarrier(s, lease)
	if err != nil || snap.Sequence != 7 || snap.Lease != lease || len(snap.Buckets) != int(s.BucketCount()) {
		t.Fatalf("snapshot %+v err %v", snap.Sequence, err)
	}
	out := mustApplyEvent(t, s, storeEv(pSrc(1, 0), pBlk(1, 11)))
	res, err := p.Publish(out.Publication)
	if err != nil || res.Kind != Published || res.Sequence != 8 {
		t.Fatalf("publish %+v %v", res, err)
	}
	d := sink.deltas[0]
	if d.BaseSequence != 7 || d.Sequence != 8 || d.Lease != lease || d.Identity != p.Identity() {
		t.Fatalf("delta %+v", d)
	}
	m, ok := p.ExactDrainMarker()
	if !ok || m.ExpectedSequence != 8 || m.Lease != lease {
		t.Fatalf("marker %+v", m)
	}
}

func TestBehaviour37_FinalRemovalPublishesZeroImage(t *testing.T) {
	s := mustDcState(t, cfgN(64, 1))
	k := pSrc(1, 0)
	mustApplyEvent(t, s, storeEv(k, pBlk(1, 11)))
	out := mustApplyEvent(t, s, removeEv(k, 1))
	if len(out.Publication) != 1 || out.Publication[0].Value != 0 {
		t.Fatalf("final removal must publish an absolute zero image: %+v", out.Publication)
	}
	sink := &prodRecordingSink{}
	p := NewPublisher(prodIdentity(s.BucketCount()), 0, sink)
	if _, err := p.SnapshotAfterBarrier(s, ckf.LaneLease{Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Publish(out.Publication); err != nil || sink.deltas[0].Images[0].Value != 0 {
		t.Fatal("zero image is an ordinary delta")
	}
}

func TestBehaviour38_SinkFailureFencesAndRecovers(t *testing.T) {
	s := mustDcState(t, cfgN(64, 1))
	sink := &prodRecordingSink{}
	p := NewPublisher(prodIdentity(s.BucketCount()), 0, sink)
	if _, err := p.SnapshotAfterBarrier(s, ckf.LaneLease{Consumer: 1, Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	out := mustApplyEvent(t, s, storeEv(pSrc(1, 0), pBlk(1, 11)))
	sink.failNext = 1
	sink.err = errors.New("broker down")
	_, err := p.Publish(out.Publication)
	var ee *EnqueueError
	if !errors.As(err, &ee) || ee.Err != sink.err || p.LastSequence() != 0 || p.Fenced() != FenceDeliveryUncertain {
		t.Fatalf("err %v seq %d fence %v", err, p.LastSequence(), p.Fenced())
	}
	out2 := mustApplyEvent(t, s, storeEv(pSrc(1, 0), pBlk(2, 22)))
	if _, err := p.Publish(out2.Publication); !errors.Is(err, ErrFenced) {
		t.Fatalf("fenced publish: %v", err)
	}
	snap, err := p.SnapshotAfterBarrier(s, ckf.LaneLease{Consumer: 1, Epoch: 2})
	if err != nil || snap.Sequence != 0 || p.Fenced() != FenceNone || !slices.Equal(snap.Buckets, s.CopyWords()) {
		t.Fatalf("recovery snapshot %d %v", snap.Sequence, err)
	}
	if len(sink.deltas) != 0 {
		t.Fatal("nothing was delivered")
	}
}

func TestBehaviour39_ReplacementSnapshotEmitsOldTailFirst(t *testing.T) {
	s := mustDcState(t, cfgN(64, 100))
	sink := &prodRecordingSink{}
	p := NewPublisher(prodIdentity(s.BucketCount()), 0, sink)
	old := ckf.LaneLease{Consumer: 1, Lane: 2, Epoch: 1}
	if _, err := p.SnapshotAfterBarrier(s, old); err != nil {
		t.Fatal(err)
	}
	mustApplyEvent(t, s, storeEv(pSrc(1, 0), pBlk(1, 11))) // pending tail
	newLease := ckf.LaneLease{Consumer: 1, Lane: 2, Epoch: 2}
	snap, err := p.SnapshotAfterBarrier(s, newLease)
	if err != nil {
		t.Fatal(err)
	}
	if len(sink.deltas) != 1 || sink.deltas[0].Lease != old || sink.deltas[0].BaseSequence != 0 || sink.deltas[0].Sequence != 1 {
		t.Fatalf("old-lease tail %+v", sink.deltas)
	}
	if snap.Sequence != 1 || snap.Lease != newLease {
		t.Fatalf("snapshot %d under %v", snap.Sequence, snap.Lease)
	}
	if l, _ := p.Lease(); l != newLease {
		t.Fatal("lease not installed")
	}
}

func TestBehaviour40_FailedOldTailThenRetry(t *testing.T) {
	s := mustDcState(t, cfgN(64, 100))
	sink := &prodRecordingSink{}
	p := NewPublisher(prodIdentity(s.BucketCount()), 0, sink)
	old := ckf.LaneLease{Consumer: 1, Epoch: 1}
	if _, err := p.SnapshotAfterBarrier(s, old); err != nil {
		t.Fatal(err)
	}
	mustApplyEvent(t, s, storeEv(pSrc(1, 0), pBlk(1, 11)))
	sink.failNext = 1
	_, err := p.SnapshotAfterBarrier(s, ckf.LaneLease{Consumer: 1, Epoch: 2})
	var se *SnapshotError
	if !errors.As(err, &se) {
		t.Fatalf("failed tail must error the snapshot: %v", err)
	}
	if l, _ := p.Lease(); l != old {
		t.Fatal("new lease installed despite the failure")
	}
	snap, err := p.SnapshotAfterBarrier(s, ckf.LaneLease{Consumer: 1, Epoch: 3})
	if err != nil || snap.Sequence != 0 {
		t.Fatalf("retry snapshot %d %v", snap.Sequence, err)
	}
	if !slices.Equal(snap.Buckets, s.CopyWords()) || !s.Contains(11) {
		t.Fatal("retry snapshot must cover the tail")
	}
}

func TestBehaviour41_SequenceRollover(t *testing.T) {
	s := mustDcState(t, cfgN(64, 1))
	sink := &prodRecordingSink{}
	p := NewPublisher(prodIdentity(s.BucketCount()), math.MaxUint64-1, sink)
	if _, err := p.SnapshotAfterBarrier(s, ckf.LaneLease{Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	out := mustApplyEvent(t, s, storeEv(pSrc(1, 0), pBlk(1, 11)))
	if r, err := p.Publish(out.Publication); err != nil || r.Sequence != math.MaxUint64 {
		t.Fatalf("last publish %+v %v", r, err)
	}
	out = mustApplyEvent(t, s, storeEv(pSrc(1, 0), pBlk(2, 22)))
	_, err := p.Publish(out.Publication)
	if !errors.Is(err, ErrFenced) || !errors.Is(err, ErrSequenceExhausted) || p.Fenced() != FenceSequenceExhausted {
		t.Fatalf("rollover: %v", err)
	}
	if len(sink.deltas) != 1 {
		t.Fatal("rollover must not enqueue")
	}
	if _, err := p.SnapshotAfterBarrier(s, ckf.LaneLease{Epoch: 2}); !errors.Is(err, ErrSequenceExhausted) {
		t.Fatalf("snapshot after rollover: %v", err)
	}
	p2 := NewPublisher(prodIdentity(s.BucketCount()), math.MaxUint64, sink)
	if _, err := p2.SnapshotAfterBarrier(s, ckf.LaneLease{Epoch: 1}); !errors.Is(err, ErrSequenceExhausted) {
		t.Fatal("last == MaxUint64 cannot snapshot")
	}
}

func TestPublisherNoSubscriberAndRetire(t *testing.T) {
	s := mustDcState(t, cfgN(64, 1))
	sink := &prodRecordingSink{}
	p := NewPublisher(prodIdentity(s.BucketCount()), 3, sink)
	out := mustApplyEvent(t, s, storeEv(pSrc(1, 0), pBlk(1, 11)))
	r, err := p.Publish(out.Publication)
	if err != nil || r.Kind != PublishNoSubscriber || r.Sequence != 3 || len(sink.deltas) != 0 {
		t.Fatalf("no subscriber: %+v %v", r, err)
	}
	if _, err := p.Publish(nil); !errors.Is(err, ErrEmptyBatch) {
		t.Fatal("empty batch")
	}
	if _, err := p.SnapshotAfterBarrier(s, ckf.LaneLease{Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	p.RetireLease()
	if p.Fenced() != FenceNone {
		t.Fatal("retire must not fence")
	}
	p.RetireStalledLease()
	if _, err := p.Publish([]ckf.BucketImage{{Bucket: 0, Value: 1}}); !errors.Is(err, ErrFenced) || p.Fenced() != FenceLeaseStalled {
		t.Fatal("stalled lease fences")
	}
	// A fenced (stalled) publisher drops the tail and snapshots.
	mustApplyEvent(t, s, storeEv(pSrc(1, 0), pBlk(2, 22)))
	s.cfg.PublishEveryNEvents = 100
	mustApplyEvent(t, s, storeEv(pSrc(1, 0), pBlk(3, 33)))
	snap, err := p.SnapshotAfterBarrier(s, ckf.LaneLease{Epoch: 5})
	if err != nil || snap.Sequence != 3 || len(sink.deltas) != 0 {
		t.Fatalf("stalled snapshot %d %v %d", snap.Sequence, err, len(sink.deltas))
	}
}

// ---- test-local consumer replica and local adapter -------------------

var errReplicaFault = errors.New("replica lane fault")

// replicaLane applies the consumer acceptance rules of producer §8.3 to one lane.
type replicaLane struct {
	identity  ckf.ProducerIdentity
	lease     ckf.LaneLease
	hasLease  bool
	ready     bool
	installed uint64
	words     []uint64
	faults    int
}

func (r *replicaLane) fault(format string, a ...any) error {
	r.faults++
	r.ready = false
	return fmt.Errorf("%w: "+format, append([]any{errReplicaFault}, a...)...)
}

func (r *replicaLane) assign(l ckf.LaneLease) error {
	if r.hasLease && l.Epoch <= r.lease.Epoch {
		return fmt.Errorf("epoch %d not greater than %d", l.Epoch, r.lease.Epoch)
	}
	r.lease, r.hasLease, r.ready = l, true, false
	return nil
}

func (r *replicaLane) snapshot(s ckf.Snapshot) error {
	if !r.hasLease || s.Lease != r.lease {
		return nil // ignored
	}
	if s.Identity != r.identity {
		return r.fault("identity")
	}
	if r.ready && s.Sequence <= r.installed {
		return nil // stale
	}
	if uint64(len(s.Buckets)) != r.identity.Format.BucketCount {
		return r.fault("bucket count")
	}
	if r.ready {
		return r.fault("snapshot while ready")
	}
	r.words = slices.Clone(s.Buckets)
	r.installed, r.ready = s.Sequence, true
	return nil
}

func (r *replicaLane) delta(d ckf.Delta) error {
	if !r.hasLease || d.Lease != r.lease {
		return nil
	}
	if d.Identity != r.identity {
		return r.fault("identity")
	}
	if !r.ready {
		return nil // awaiting snapshot
	}
	if d.Sequence <= r.installed {
		return nil
	}
	if d.BaseSequence != r.installed || d.Sequence != d.BaseSequence+1 {
		return r.fault("gap %d->%d at %d", d.BaseSequence, d.Sequence, r.installed)
	}
	if err := prodCheckBatch(uint64(len(r.words)), d.Images); err != nil || len(d.Images) == 0 {
		return r.fault("malformed images")
	}
	prodApplyImages(r.words, d.Images)
	r.installed = d.Sequence
	return nil
}

func (r *replicaLane) marker(m ckf.DrainMarker) error {
	if !r.ready || m.Lease != r.lease || r.installed != m.ExpectedSequence {
		return r.fault("terminal sequence mismatch: installed %d expected %d", r.installed, m.ExpectedSequence)
	}
	return nil
}

// replicaSink delivers deltas to the replica; drop loses deltas silently
// (returns nil), failNext refuses them.
type replicaSink struct {
	replica  *replicaLane
	failNext int
	drop     int
}

func (s *replicaSink) Enqueue(d ckf.Delta) error {
	if s.failNext > 0 {
		s.failNext--
		return errors.New("delivery failed")
	}
	if s.drop > 0 {
		s.drop--
		return nil
	}
	return s.replica.delta(d)
}

var errAdmissionClosed = errors.New("admission closed")

// localAdapter is a minimal LocalCkfAdapter (producer §8.4) over DcState, Publisher
// and the replica.
type localAdapter struct {
	state     *DcState
	pub       *Publisher
	replica   *replicaLane
	sink      *replicaSink
	lease     ckf.LaneLease
	admission bool
}

func newLocalAdapter(t testing.TB, cfg ckf.CkfConfig) *localAdapter {
	t.Helper()
	s := mustDcState(t, cfg)
	id := prodIdentity(s.BucketCount())
	rep := &replicaLane{identity: id}
	sink := &replicaSink{replica: rep}
	a := &localAdapter{state: s, pub: NewPublisher(id, 0, sink), replica: rep, sink: sink}
	a.lease = ckf.LaneLease{Consumer: 9, Lane: 0, Epoch: 1}
	if err := a.install(a.lease); err != nil {
		t.Fatal(err)
	}
	a.admission = true
	return a
}

func (a *localAdapter) install(l ckf.LaneLease) error {
	if err := a.replica.assign(l); err != nil {
		return err
	}
	snap, err := a.pub.SnapshotAfterBarrier(a.state, l)
	if err != nil {
		return err
	}
	if err := a.replica.snapshot(snap); err != nil {
		return err
	}
	if !a.replica.ready || a.replica.installed != snap.Sequence {
		return fmt.Errorf("snapshot %d not installed", snap.Sequence)
	}
	return nil
}

func (a *localAdapter) apply(ev RouterEvent) (EventOutcome, error) {
	if !a.admission {
		return EventOutcome{}, errAdmissionClosed
	}
	out := a.state.ApplyEvent(ev)
	if out.Publication != nil {
		if _, err := a.pub.Publish(out.Publication); err != nil {
			return out, err
		}
	}
	return out, nil
}

func (a *localAdapter) exactDrain() error {
	a.admission = false
	if b := a.state.Flush(); b != nil {
		if _, err := a.pub.Publish(b); err != nil {
			return err
		}
	}
	m, ok := a.pub.ExactDrainMarker()
	if !ok {
		return errors.New("no lease")
	}
	return a.replica.marker(m)
}

func (a *localAdapter) recoverSnapshot() error {
	a.admission = false
	if a.lease.Epoch == math.MaxUint64 {
		return errors.New("assignment epoch exhausted")
	}
	next := a.lease
	next.Epoch++
	a.pub.RetireLease()
	if err := a.install(next); err != nil {
		return err
	}
	a.lease = next
	a.admission = true
	return nil
}

func TestBehaviour50_AdapterPublishThenExactDrain(t *testing.T) {
	a := newLocalAdapter(t, cfgN(64, 1))
	if _, err := a.apply(storeEv(pSrc(1, 0), pBlk(1, 11))); err != nil {
		t.Fatal(err)
	}
	if err := a.exactDrain(); err != nil {
		t.Fatal(err)
	}
	if a.replica.installed != 1 || a.pub.LastSequence() != 1 || !slices.Equal(a.replica.words, a.state.CopyWords()) {
		t.Fatalf("terminal sequence %d", a.replica.installed)
	}
}

func TestBehaviour51_AdapterDeliveryFailureRecovery(t *testing.T) {
	a := newLocalAdapter(t, cfgN(64, 1))
	a.sink.failNext = 1
	if _, err := a.apply(storeEv(pSrc(1, 0), pBlk(1, 11))); err == nil {
		t.Fatal("delivery failure must surface")
	}
	if a.pub.Fenced() != FenceDeliveryUncertain {
		t.Fatal("not fenced DeliveryUncertain")
	}
	if err := a.recoverSnapshot(); err != nil {
		t.Fatal(err)
	}
	if a.replica.installed != 0 || a.lease.Epoch != 2 || !slices.Equal(a.replica.words, a.state.CopyWords()) {
		t.Fatalf("recovered at %d epoch %d", a.replica.installed, a.lease.Epoch)
	}
}

func TestBehaviour52_AdapterFailedRecoveryKeepsAdmissionClosed(t *testing.T) {
	a := newLocalAdapter(t, cfgN(64, 1))
	a.lease.Epoch = math.MaxUint64
	if err := a.recoverSnapshot(); err == nil {
		t.Fatal("epoch exhaustion must fail recovery")
	}
	if _, err := a.apply(storeEv(pSrc(1, 0), pBlk(1, 11))); !errors.Is(err, errAdmissionClosed) {
		t.Fatal("admission must stay closed")
	}
}

func TestBehaviour53_AdapterDroppedFinalDeltaCaught(t *testing.T) {
	a := newLocalAdapter(t, cfgN(64, 1))
	a.sink.drop = 1
	if _, err := a.apply(storeEv(pSrc(1, 0), pBlk(1, 11))); err != nil {
		t.Fatal(err)
	}
	if err := a.exactDrain(); !errors.Is(err, errReplicaFault) {
		t.Fatalf("lost final delta must be caught by the marker: %v", err)
	}
	if err := a.recoverSnapshot(); err != nil {
		t.Fatal(err)
	}
	if a.replica.installed != 1 || !slices.Equal(a.replica.words, a.state.CopyWords()) {
		t.Fatalf("recovery snapshot at %d", a.replica.installed)
	}
}

func TestBehaviour54_AdapterCapacityOmissionNeverRetiresLane(t *testing.T) {
	a := newLocalAdapter(t, cfgN(1, 1)) // 2 buckets
	k := pSrc(1, 0)
	for i := uint64(0); i < 8; i++ {
		if _, err := a.apply(storeEv(k, pBlk(100+i, 0x500+i))); err != nil {
			t.Fatal(err)
		}
	}
	out, err := a.apply(storeEv(k, pBlk(1, 0xABC)))
	if err != nil || !errors.Is(out.FirstError, ckf.ErrCapacityExhausted) {
		t.Fatalf("omission: %v %v", err, out.FirstError)
	}
	if p, _ := ckf.FailurePointOfEventError(out.FirstError); ckf.DispositionOf(p).RecoveryDomain != ckf.NoRecoveryDomain {
		t.Fatal("capacity omission needs no recovery")
	}
	if a.replica.faults != 0 || !a.replica.ready || a.pub.Fenced() != FenceNone {
		t.Fatal("omission retired the lane")
	}
	out, _ = a.apply(removeEv(k, 1))
	if out.UnknownRemovals != 0 {
		t.Fatal("removing the omitted hash is not an unknown removal")
	}
	if _, err := a.apply(removeEv(k, 100)); err != nil {
		t.Fatal(err)
	}
	out, err = a.apply(storeEv(k, pBlk(1, 0xABC)))
	if err != nil || out.FirstError != nil || !a.state.Contains(0xABC) {
		t.Fatalf("store after freeing: %v %v", err, out.FirstError)
	}
	if err := a.exactDrain(); err != nil || !slices.Equal(a.replica.words, a.state.CopyWords()) {
		t.Fatal(err)
	}
}
