package pool

import (
	"context"
	"errors"
	"math"
	"testing"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/ckf/index"
	"github.com/ckf-stream/ckf-stream/ckf/producer"
)

// testAdapter is a test-only LocalCkfAdapter (consumer §9.2): the producer's
// DcState and Publisher wired to one lane of an IngestionPool, with fault
// injection on the delivery path. It exists to check the consumer §12 adapter.rs
// behaviours end to end; the production composition belongs to the app
// layer.
type testAdapter struct {
	t     testing.TB
	pf    *poolFixture
	lane  uint8
	state *producer.DcState
	pub   *producer.Publisher
	sink  *poolSink
	epoch uint64
	open  bool
}

var (
	errAdapterAdmissionClosed = errors.New("adapter: admission closed")
	errAdapterEpochExhausted  = errors.New("adapter: assignment epoch exhausted")
)

// poolSink is the publisher's DeltaSink: SubmitDelta on the pool, with
// injected failures (failNext: refuse; dropNext: accept and lose).
type poolSink struct {
	p        *IngestionPool
	failNext int
	dropNext int
}

func (s *poolSink) Enqueue(d ckf.Delta) error {
	if s.failNext > 0 {
		s.failNext--
		return errors.New("injected delivery failure")
	}
	if s.dropNext > 0 {
		s.dropNext--
		return nil
	}
	return s.p.SubmitDelta(context.Background(), &d)
}

// adapterConfig returns a producer config whose format equals the fixture's
// (same seed, bucket count).
func adapterConfig(t testing.TB, buckets uint64) ckf.CkfConfig {
	for n := uint64(1); ; n++ {
		if b, err := ckf.BucketCountFor(n); err == nil && b == buckets {
			return ckf.NewCkfConfig(n)
		} else if b > buckets {
			t.Fatalf("no config for %d buckets", buckets)
		}
	}
}

func newTestAdapter(t testing.TB, pf *poolFixture, lane uint8, epoch uint64) *testAdapter {
	t.Helper()
	cfg := adapterConfig(t, pf.format.BucketCount)
	st, err := producer.NewDcState(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if st.Format() != pf.format {
		t.Fatalf("format %+v != %+v", st.Format(), pf.format)
	}
	a := &testAdapter{t: t, pf: pf, lane: lane, state: st, sink: &poolSink{p: pf.p}}
	a.pub = producer.NewPublisher(pf.identity(lane), 0, a.sink)
	if err := a.start(epoch); err != nil {
		t.Fatal(err)
	}
	return a
}

// start assigns the lease, takes a barrier snapshot and installs it.
func (a *testAdapter) start(epoch uint64) error {
	lease := a.pf.lease(a.lane, epoch)
	if err := a.pf.p.Assign(a.pf.ctx, a.pf.identity(a.lane), lease); err != nil {
		return err
	}
	snap, err := a.pub.SnapshotAfterBarrier(a.state, lease)
	if err != nil {
		return err
	}
	out, err := a.pf.p.InstallSnapshot(a.pf.ctx, &snap)
	if err != nil {
		return err
	}
	if out.Kind != index.OutcomeSnapshotInstalled || out.Sequence != snap.Sequence {
		return errors.New("adapter: snapshot not installed: " + out.String())
	}
	a.epoch = epoch
	a.open = true
	return nil
}

// apply applies one event and publishes its batch synchronously.
func (a *testAdapter) apply(ev producer.RouterEvent) (producer.EventOutcome, error) {
	if !a.open {
		return producer.EventOutcome{}, errAdapterAdmissionClosed
	}
	out := a.state.ApplyEvent(ev)
	if len(out.Publication) > 0 {
		if _, err := a.pub.Publish(out.Publication); err != nil {
			return out, err
		}
	}
	return out, nil
}

// drain closes admission, flushes, sends the exact marker; only an exact
// acknowledgement reopens admission.
func (a *testAdapter) drain() (index.IngestOutcome, error) {
	a.open = false
	if tail := a.state.Flush(); len(tail) > 0 {
		if _, err := a.pub.Publish(tail); err != nil {
			return index.IngestOutcome{}, err
		}
	}
	m, ok := a.pub.ExactDrainMarker()
	if !ok {
		return index.IngestOutcome{}, errors.New("adapter: no lease")
	}
	out, err := a.pf.p.CompleteDrain(a.pf.ctx, m)
	if err == nil && out.Kind == index.OutcomeDrainAcknowledged && out.InstalledSequence == m.ExpectedSequence {
		a.open = true
	}
	return out, err
}

// recover runs recover_snapshot: new lease (epoch+1) and barrier snapshot.
func (a *testAdapter) recover() error {
	a.open = false
	if a.epoch == math.MaxUint64 {
		return errAdapterEpochExhausted
	}
	a.pub.RetireLease()
	return a.start(a.epoch + 1)
}

// converged reports whether the consumer lane's words equal the producer's.
func (a *testAdapter) converged() bool {
	got := a.pf.g.LaneWords(a.lane)
	want := a.state.CopyWords()
	for i := range want {
		if got[i] != want[i] {
			return false
		}
	}
	return true
}

// ---- event builders (private to the consumer tests) -----------------------

func cStore(w ckf.WorkerID, parent *uint64, blocks ...[2]uint64) producer.RouterEvent {
	ev := producer.RouterEvent{WorkerID: w, StorageTier: producer.StorageTierDevice, Event: producer.KvCacheEvent{Kind: producer.KvEventStored}}
	if parent != nil {
		ev.Event.Stored.HasParent = true
		ev.Event.Stored.ParentHash = ckf.ExternalBlockHash(*parent)
	}
	for _, b := range blocks {
		ev.Event.Stored.Blocks = append(ev.Event.Stored.Blocks, producer.StoredBlock{BlockHash: ckf.ExternalBlockHash(b[0]), TokensHash: ckf.LocalBlockHash(b[1])})
	}
	return ev
}

func cRemove(w ckf.WorkerID, ids ...uint64) producer.RouterEvent {
	ev := producer.RouterEvent{WorkerID: w, StorageTier: producer.StorageTierDevice, Event: producer.KvCacheEvent{Kind: producer.KvEventRemoved}}
	for _, id := range ids {
		ev.Event.Removed = append(ev.Event.Removed, ckf.ExternalBlockHash(id))
	}
	return ev
}

func cClear(w ckf.WorkerID) producer.RouterEvent {
	return producer.RouterEvent{WorkerID: w, StorageTier: producer.StorageTierDevice, Event: producer.KvCacheEvent{Kind: producer.KvEventCleared}}
}

// ---- consumer §12 adapter.rs ------------------------------------------------

func TestAdapterPublicationAndDrainConverge(t *testing.T) {
	pf := newPoolFixture(t, 1, 64, quietConfig(), poolHooks{})
	a := newTestAdapter(t, pf, 0, 1)
	if _, err := a.apply(cStore(1, nil, [2]uint64{100, 7})); err != nil {
		t.Fatal(err)
	}
	out, err := a.drain()
	if err != nil || out.Kind != index.OutcomeDrainAcknowledged || out.InstalledSequence != 1 {
		t.Fatalf("drain %v %v", out, err)
	}
	if pf.g.ReadyLanes() != 1 || !a.converged() || !a.open {
		t.Fatal("not converged / not ready")
	}
	res, err := pf.g.FindPrefixMatches([]uint64{7})
	if err != nil || res.Lanes[0].Depth != 1 {
		t.Fatalf("query %+v %v", res, err)
	}
}

func TestAdapterDeliveryFailureRecovery(t *testing.T) {
	pf := newPoolFixture(t, 1, 64, quietConfig(), poolHooks{})
	a := newTestAdapter(t, pf, 0, 1)
	a.sink.failNext = 1
	if _, err := a.apply(cStore(1, nil, [2]uint64{100, 7})); err == nil {
		t.Fatal("delivery failure not reported")
	}
	if a.pub.Fenced() != producer.FenceDeliveryUncertain {
		t.Fatalf("publisher fence %v", a.pub.Fenced())
	}
	if err := a.recover(); err != nil {
		t.Fatal(err)
	}
	if a.epoch != 2 || a.pub.LastSequence() != 0 {
		t.Fatalf("recovery epoch %d sequence %d, want 2 and 0", a.epoch, a.pub.LastSequence())
	}
	if pf.g.ReadyLanes() != 1 || !a.converged() {
		t.Fatal("recovered lane not ready/converged")
	}
	if _, err := a.apply(cStore(1, nil, [2]uint64{101, 8})); err != nil {
		t.Fatal(err)
	}
	if out, err := a.drain(); err != nil || out.Kind != index.OutcomeDrainAcknowledged || out.InstalledSequence != 1 {
		t.Fatalf("drain after recovery %v %v", out, err)
	}
}

func TestAdapterRecoveryEpochExhausted(t *testing.T) {
	pf := newPoolFixture(t, 1, 64, quietConfig(), poolHooks{})
	a := newTestAdapter(t, pf, 0, math.MaxUint64)
	if err := a.recover(); !errors.Is(err, errAdapterEpochExhausted) {
		t.Fatalf("recover: %v", err)
	}
	if _, err := a.apply(cStore(1, nil, [2]uint64{1, 1})); !errors.Is(err, errAdapterAdmissionClosed) {
		t.Fatalf("admission must stay closed: %v", err)
	}
	// The pool rejects any further assignment for that lane as stale (the
	// epoch cannot grow any more).
	if err := pf.p.Assign(pf.ctx, pf.identity(0), pf.lease(0, math.MaxUint64)); !errors.Is(err, index.ErrStaleAssignmentEpoch) {
		t.Fatalf("assign: %v", err)
	}
}

func TestAdapterDroppedFinalDeltaRecovered(t *testing.T) {
	pf := newPoolFixture(t, 1, 64, quietConfig(), poolHooks{})
	a := newTestAdapter(t, pf, 0, 1)
	a.sink.dropNext = 1
	if _, err := a.apply(cStore(1, nil, [2]uint64{100, 7})); err != nil {
		t.Fatal(err)
	}
	out, err := a.drain()
	if err != nil || out.Kind != index.OutcomeLaneDeactivated || out.Fault.Kind != index.FaultTerminalSequenceMismatch ||
		out.Fault.Expected != 1 || out.Fault.Actual != 0 {
		t.Fatalf("drain must detect the lost delta: %v %v", out, err)
	}
	if a.open || pf.g.ReadyLanes() != 0 {
		t.Fatal("admission must stay closed and the lane retired")
	}
	if err := a.recover(); err != nil {
		t.Fatal(err)
	}
	if a.epoch != 2 || a.pub.LastSequence() != 1 {
		t.Fatalf("recovery sequence %d", a.pub.LastSequence())
	}
	if out, err := a.drain(); err != nil || out.Kind != index.OutcomeDrainAcknowledged || out.InstalledSequence != 1 || !a.converged() {
		t.Fatalf("after recovery %v %v", out, err)
	}
}

func TestAdapterCapacityOmissionKeepsLane(t *testing.T) {
	cfg := quietConfig()
	// The default outstanding limit is one lane (2 images here); deltas are
	// submitted faster than the worker applies them, so allow more.
	cfg.MaxOutstandingImagesPerLane = 1 << 16
	pf := newPoolFixture(t, 1, 2, cfg, poolHooks{})
	a := newTestAdapter(t, pf, 0, 1)
	omitted := false
	for i := uint64(1); i <= 24; i++ {
		out, err := a.apply(cStore(1, nil, [2]uint64{1000 + i, i}))
		if err != nil {
			t.Fatal(err)
		}
		if errors.Is(out.FirstError, ckf.ErrCapacityExhausted) {
			omitted = true
		}
	}
	if !omitted {
		t.Fatal("expected a capacity omission in an 8-slot table")
	}
	if out, err := a.drain(); err != nil || out.Kind != index.OutcomeDrainAcknowledged {
		t.Fatalf("drain %v %v", out, err)
	}
	if pf.g.ReadyLanes() != 1 || !a.converged() {
		t.Fatal("capacity omission retired the lane")
	}
	for i := uint64(1); i <= 12; i++ {
		if _, err := a.apply(cRemove(1, 1000+i)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := a.apply(cStore(1, nil, [2]uint64{5000, 5000})); err != nil {
		t.Fatal(err)
	}
	if out, err := a.drain(); err != nil || out.Kind != index.OutcomeDrainAcknowledged || !a.converged() {
		t.Fatalf("later drain %v %v", out, err)
	}
}
