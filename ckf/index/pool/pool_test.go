package pool

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/ckf/index"
)

// ---- pool fixture -------------------------------------------------------------

type poolFixture struct {
	*fixture
	p   *IngestionPool
	ctx context.Context
}

func newPoolFixture(t *testing.T, lanes int, buckets uint64, cfg IngestionPoolConfig, hooks poolHooks) *poolFixture {
	t.Helper()
	f := newFixture(t, lanes, buckets, 2)
	p, err := newIngestionPool(f.g, cfg, hooks)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return &poolFixture{fixture: f, p: p, ctx: context.Background()}
}

// activate assigns lane at epoch and installs a snapshot at seq.
func (pf *poolFixture) activate(lane uint8, epoch, seq uint64, words []uint64) {
	pf.t.Helper()
	if err := pf.p.Assign(pf.ctx, pf.identity(lane), pf.lease(lane, epoch)); err != nil {
		pf.t.Fatalf("assign lane %d: %v", lane, err)
	}
	out, err := pf.p.InstallSnapshot(pf.ctx, pf.snapshot(lane, epoch, seq, words))
	if err != nil || out.Kind != index.OutcomeSnapshotInstalled {
		pf.t.Fatalf("install lane %d: %v %v", lane, out, err)
	}
}

// pause blocks worker i until the returned release func is called.
func (pf *poolFixture) pause(i int) (release func()) {
	started := make(chan struct{})
	gate := make(chan struct{})
	pf.p.runOnWorker(i, func() {
		close(started)
		<-gate
	})
	<-started
	var once sync.Once
	return func() { once.Do(func() { close(gate) }) }
}

// flush waits until worker i has processed everything queued before now.
func (pf *poolFixture) flush(i int) {
	done := make(chan struct{})
	pf.p.runOnWorker(i, func() { close(done) })
	<-done
}

// waitFault receives faults until one of kind arrives (5 s safety net; this
// is a liveness bound, not a performance assertion).
func (pf *poolFixture) waitFault(kind PoolFaultKind) PoolFault {
	pf.t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		select {
		case f := <-pf.p.Faults():
			if f.Kind == kind {
				return f
			}
		case <-deadline:
			pf.t.Fatalf("no %v fault", kind)
		}
	}
}

func (pf *poolFixture) worker(lane uint8) int {
	w, _ := pf.p.WorkerOf(lane)
	return w
}

func quietConfig() IngestionPoolConfig {
	cfg := DefaultIngestionPoolConfig()
	cfg.MaxDirtyToAppliedAge = time.Hour // tests that pause workers must not trip the lag bound
	return cfg
}

// ---- consumer §12 ingestion_pool.rs ------------------------------------------

func TestPoolStickyWorkerFunction(t *testing.T) {
	want := []int{2, 3, 1, 2, 1, 2, 1, 1, 1, 0, 1, 2, 2, 3, 2, 1}
	for l, w := range want {
		if got := stickyWorker(17, uint8(l), 4); got != w {
			t.Fatalf("lane %d: worker %d want %d", l, got, w)
		}
	}
	pf := newPoolFixture(t, 16, 64, DefaultIngestionPoolConfig(), poolHooks{})
	for l := uint8(0); l < 16; l++ {
		if w, ok := pf.p.WorkerOf(l); !ok || w != want[l] {
			t.Fatalf("pool lane %d worker %d", l, w)
		}
	}
	if _, ok := pf.p.WorkerOf(16); ok {
		t.Fatal("lane 16")
	}
}

func TestPoolAsyncDeltaAppliedBeforeDrain(t *testing.T) {
	pf := newPoolFixture(t, 2, 64, quietConfig(), poolHooks{})
	pf.activate(0, 1, 0, nil)
	for seq := uint64(1); seq <= 20; seq++ {
		if err := pf.p.SubmitDelta(pf.ctx, pf.delta(0, 1, seq-1, seq, ckf.BucketImage{Bucket: seq % 64, Value: seq})); err != nil {
			t.Fatal(err)
		}
	}
	out, err := pf.p.CompleteDrain(pf.ctx, pf.marker(0, 1, 20))
	if err != nil || out.Kind != index.OutcomeDrainAcknowledged || out.InstalledSequence != 20 {
		t.Fatalf("drain %v %v", out, err)
	}
	if pf.word(20, 0) != 20 || pf.g.ReadyLanes() != 1 {
		t.Fatal("delta not applied before drain")
	}
}

func TestPoolGapFaultDeactivatesOnlyThatLane(t *testing.T) {
	pf := newPoolFixture(t, 2, 64, quietConfig(), poolHooks{})
	pf.activate(0, 1, 0, nil)
	pf.activate(1, 1, 0, nil)
	if err := pf.p.SubmitDelta(pf.ctx, pf.delta(0, 1, 1, 2, ckf.BucketImage{Bucket: 3, Value: 3})); err != nil {
		t.Fatal(err)
	}
	f := pf.waitFault(PoolFaultLaneDeactivated)
	if f.Lane != 0 || f.Fault.Kind != index.FaultBaseSequenceMismatch || f.Disposition != ckf.DispositionOf(ckf.ConsumerGapOrMalformedBeforeWrite) {
		t.Fatalf("fault %+v", f)
	}
	if f.Disposition.Domain != ckf.DomainConsumerLane || f.Disposition.RecoveryDomain != ckf.DomainConsumerLane {
		t.Fatal("a consumer lane fault must not target the producer")
	}
	pf.flush(pf.worker(0))
	if pf.g.ReadyLanes() != 0b10 || pf.word(3, 0) != 0 {
		t.Fatalf("ready %b", pf.g.ReadyLanes())
	}
	// Gap-class faults retire the admission: the lease is no longer usable.
	if err := pf.p.SubmitDelta(pf.ctx, pf.delta(0, 1, 0, 1, ckf.BucketImage{Bucket: 3, Value: 3})); !errors.Is(err, ErrLaneRetired) {
		t.Fatalf("after gap: %v", err)
	}
	if _, err := pf.p.InstallSnapshot(pf.ctx, pf.snapshot(0, 1, 0, nil)); !errors.Is(err, ErrLaneRetired) {
		t.Fatalf("snapshot on retired lease: %v", err)
	}
	// Recovery: new lease + snapshot.
	pf.activate(0, 2, 7, nil)
	if pf.g.ReadyLanes() != 0b11 {
		t.Fatal("recovery")
	}
}

func TestPoolStaleAndForeignAssignmentsRejected(t *testing.T) {
	pf := newPoolFixture(t, 2, 64, quietConfig(), poolHooks{})
	pf.activate(0, 1, 0, nil)
	pf.activate(0, 2, 0, nil) // replacement
	if err := pf.p.Assign(pf.ctx, pf.identity(0), pf.lease(0, 1)); !errors.Is(err, index.ErrStaleAssignmentEpoch) {
		t.Fatalf("stale assign: %v", err)
	}
	if err := pf.p.Assign(pf.ctx, pf.identity(1), pf.lease(0, 3)); !errors.Is(err, index.ErrWrongLaneOwner) {
		t.Fatalf("foreign pool: %v", err)
	}
	if pf.g.ReadyLanes() != 1 {
		t.Fatal("rejected assignments touched the ready lane")
	}
	if err := pf.p.SubmitDelta(pf.ctx, pf.delta(0, 2, 0, 1, ckf.BucketImage{Bucket: 1, Value: 1})); err != nil {
		t.Fatalf("replacement lease unusable: %v", err)
	}
	if err := pf.p.Assign(pf.ctx, pf.identity(0), pf.lease(9, 9)); !errors.Is(err, index.ErrUnconfiguredLane) {
		t.Fatalf("unconfigured: %v", err)
	}
}

func TestPoolStaleActiveSnapshotIgnored(t *testing.T) {
	pf := newPoolFixture(t, 1, 64, quietConfig(), poolHooks{})
	pf.activate(0, 1, 4, nil)
	if err := pf.p.SubmitDelta(pf.ctx, pf.delta(0, 1, 4, 5, ckf.BucketImage{Bucket: 2, Value: 22})); err != nil {
		t.Fatal(err)
	}
	old := make([]uint64, 64)
	old[2] = 1
	out, err := pf.p.InstallSnapshot(pf.ctx, pf.snapshot(0, 1, 4, old))
	if err != nil || out.Kind != index.OutcomeIgnoredStaleOrDuplicate || out.InstalledSequence != 5 {
		t.Fatalf("stale snapshot %v %v", out, err)
	}
	if pf.word(2, 0) != 22 || pf.g.ReadyLanes() != 1 {
		t.Fatal("rolled back")
	}
	if err := pf.p.SubmitDelta(pf.ctx, pf.delta(0, 1, 5, 6, ckf.BucketImage{Bucket: 2, Value: 23})); err != nil {
		t.Fatalf("lane must stay active: %v", err)
	}
}

func TestPoolInactiveSnapshotFailureRetryable(t *testing.T) {
	pf := newPoolFixture(t, 1, 64, quietConfig(), poolHooks{})
	if err := pf.p.Assign(pf.ctx, pf.identity(0), pf.lease(0, 1)); err != nil {
		t.Fatal(err)
	}
	out, err := pf.p.InstallSnapshot(pf.ctx, pf.snapshot(0, 1, 3, make([]uint64, 10)))
	if err != nil || out.Kind != index.OutcomeLaneDeactivated || out.Fault.Kind != index.FaultInvalidSnapshotBucketCount {
		t.Fatalf("bad snapshot %v %v", out, err)
	}
	f := pf.waitFault(PoolFaultLaneDeactivated)
	if f.Disposition.Action != ckf.ActionRetrySnapshot || f.Disposition.RecoveryDomain != ckf.DomainConsumerLane {
		t.Fatalf("disposition %+v (no producer recovery expected)", f.Disposition)
	}
	out, err = pf.p.InstallSnapshot(pf.ctx, pf.snapshot(0, 1, 3, nil))
	if err != nil || out.Kind != index.OutcomeSnapshotInstalled {
		t.Fatalf("retry on the same lease: %v %v", out, err)
	}
}

// Race: a retirement while a snapshot activation is paused (words written,
// guard not yet entered) cannot be undone by the activation.
func TestPoolRetireDuringPausedActivation(t *testing.T) {
	entered := make(chan struct{})
	gate := make(chan struct{})
	hooks := poolHooks{beforeActivate: func(lane uint8) {
		close(entered)
		<-gate
	}}
	pf := newPoolFixture(t, 1, 64, quietConfig(), hooks)
	if err := pf.p.Assign(pf.ctx, pf.identity(0), pf.lease(0, 1)); err != nil {
		t.Fatal(err)
	}
	words := make([]uint64, 64)
	words[9] = 99
	type result struct {
		out index.IngestOutcome
		err error
	}
	done := make(chan result, 1)
	go func() {
		out, err := pf.p.InstallSnapshot(pf.ctx, pf.snapshot(0, 1, 1, words))
		done <- result{out, err}
	}()
	<-entered
	if err := pf.p.RetireLane(pf.lease(0, 1)); err != nil {
		t.Fatal(err)
	}
	close(gate)
	r := <-done
	if !errors.Is(r.err, ErrLaneRetired) {
		t.Fatalf("install after retirement: %v %v", r.out, r.err)
	}
	pf.flush(pf.worker(0))
	if pf.g.ReadyLanes() != 0 {
		t.Fatal("activation undid the retirement")
	}
	if err := pf.p.RetireLane(pf.lease(0, 1)); !errors.Is(err, ErrLaneRetired) {
		t.Fatalf("second retire: %v", err)
	}
}

func TestPoolAdmissionEpochExhaustionFences(t *testing.T) {
	pf := newPoolFixture(t, 1, 64, quietConfig(), poolHooks{})
	lc := pf.p.lanes[0]
	lc.mu.Lock()
	lc.epoch = ^uint64(0) - 1
	lc.mu.Unlock()
	pf.activate(0, 1, 0, nil) // epoch -> MaxUint64
	if pf.g.ReadyLanes() != 1 {
		t.Fatal("not ready")
	}
	// Any retirement now exhausts the epoch: the lane is fenced.
	if err := pf.p.RetireLane(pf.lease(0, 1)); !errors.Is(err, ErrAdmissionEpochExhausted) {
		t.Fatalf("retire: %v", err)
	}
	if pf.g.ReadyLanes() != 0 {
		t.Fatal("fenced lane still ready")
	}
	for e := uint64(2); e < 4; e++ {
		if err := pf.p.Assign(pf.ctx, pf.identity(0), pf.lease(0, e)); !errors.Is(err, ErrAdmissionEpochExhausted) {
			t.Fatalf("assign after fence: %v", err)
		}
	}
	if err := pf.p.SubmitDelta(pf.ctx, pf.delta(0, 1, 0, 1, ckf.BucketImage{Bucket: 1})); !errors.Is(err, ErrLaneRetired) {
		t.Fatalf("submit after fence: %v", err)
	}
	if _, ok := PoolErrorDisposition(ErrAdmissionEpochExhausted); ok {
		t.Fatal("a rejection has no disposition")
	}
}

func TestPoolOutstandingImageLimit(t *testing.T) {
	cfg := quietConfig()
	cfg.MaxOutstandingImagesPerLane = 4
	pf := newPoolFixture(t, 2, 64, cfg, poolHooks{})
	pf.activate(0, 1, 0, nil)
	pf.activate(1, 1, 0, nil)
	release := pf.pause(pf.worker(0))
	defer release()
	if err := pf.p.SubmitDelta(pf.ctx, pf.delta(0, 1, 0, 1, ckf.BucketImage{Bucket: 1}, ckf.BucketImage{Bucket: 2}, ckf.BucketImage{Bucket: 3})); err != nil {
		t.Fatal(err)
	}
	err := pf.p.SubmitDelta(pf.ctx, pf.delta(0, 1, 1, 2, ckf.BucketImage{Bucket: 4}, ckf.BucketImage{Bucket: 5}))
	var le *OutstandingImageLimitError
	if !errors.As(err, &le) || le.Requested != 5 || le.Limit != 4 || le.Lane != 0 || !errors.Is(err, ErrOutstandingImageLimit) {
		t.Fatalf("limit: %v", err)
	}
	if d, ok := PoolErrorDisposition(err); !ok || d != ckf.DispositionOf(ckf.ConsumerGapOrMalformedBeforeWrite) {
		t.Fatalf("disposition %+v", d)
	}
	f := pf.waitFault(PoolFaultOutstandingImageLimit)
	if f.Lane != 0 || f.Requested != 5 || f.Limit != 4 {
		t.Fatalf("fault %+v", f)
	}
	if pf.g.ReadyLanes() != 0b10 {
		t.Fatalf("only lane 0 may be retired: ready %b", pf.g.ReadyLanes())
	}
	release()
	// A single oversized delta trips the limit too.
	pf.activate(1, 2, 0, nil)
	imgs := []ckf.BucketImage{{Bucket: 1}, {Bucket: 2}, {Bucket: 3}, {Bucket: 4}, {Bucket: 5}}
	if err := pf.p.SubmitDelta(pf.ctx, pf.delta(1, 2, 0, 1, imgs...)); !errors.Is(err, ErrOutstandingImageLimit) {
		t.Fatalf("oversized: %v", err)
	}
}

// Race: a stalled worker makes the lag watchdog retire the lane once the
// oldest outstanding delta reaches the dirty-to-applied deadline. Deterministic
// on both clocks: the admission age comes from the injected clock (exactly one
// nanosecond short of the deadline, then exactly at it), and the watchdog's
// ticker runs in a synctest bubble, so time.Sleep(4 periods) makes exactly four
// ticks due and synctest.Wait returns only once the watchdog has handled them
// and blocks again. "The lane stays" is therefore checked after four real
// watchdog passes, not after a wall-clock pause.
func TestPoolLagWatchdogRetiresStalledLane(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var fakeNanos atomic.Int64
		base := time.Unix(1_000_000, 0)
		hooks := poolHooks{now: func() time.Time { return base.Add(time.Duration(fakeNanos.Load())) }}
		cfg := DefaultIngestionPoolConfig()
		cfg.MaxDirtyToAppliedAge = 10 * time.Millisecond
		pf := newPoolFixture(t, 2, 64, cfg, hooks)
		pf.activate(0, 1, 0, nil)
		pf.activate(1, 1, 0, nil)
		release := pf.pause(pf.worker(0))
		defer release()
		if err := pf.p.SubmitDelta(pf.ctx, pf.delta(0, 1, 0, 1, ckf.BucketImage{Bucket: 1, Value: 1})); err != nil {
			t.Fatal(err)
		}
		// Just below the deadline: four watchdog passes see the lane, and it stays.
		fakeNanos.Store(int64(10*time.Millisecond - 1))
		time.Sleep(4 * cfg.lagWatchdogPeriod()) // the bubble's clock: exactly four watchdog ticks fall due
		synctest.Wait()
		if pf.g.ReadyLanes()&1 == 0 {
			t.Fatal("retired before the deadline")
		}
		select {
		case f := <-pf.p.Faults():
			t.Fatalf("fault before the deadline: %+v", f)
		default:
		}
		// At the deadline: the next pass retires it.
		fakeNanos.Store(int64(10 * time.Millisecond))
		time.Sleep(cfg.lagWatchdogPeriod()) // the bubble's clock: the next tick falls due
		synctest.Wait()
		f := pf.waitFault(PoolFaultDirtyToAppliedAgeExceeded)
		if f.Lane != 0 || f.Disposition != ckf.DispositionOf(ckf.ConsumerWorkerFailureMidApply) || f.Disposition.Commit != ckf.CommitUncertain {
			t.Fatalf("fault %+v", f)
		}
		if pf.g.ReadyLanes() != 0b10 {
			t.Fatalf("ready %b", pf.g.ReadyLanes())
		}
		if err := pf.p.SubmitDelta(pf.ctx, pf.delta(0, 1, 1, 2, ckf.BucketImage{Bucket: 1})); !errors.Is(err, ErrLaneRetired) {
			t.Fatalf("submit after lag retirement: %v", err)
		}
		release()
		pf.flush(pf.worker(0))
		if pf.word(1, 0) != 0 {
			t.Fatal("stale delta applied after retirement")
		}
	})
}

// SubmitDelta itself enforces the lag bound (consumer §4.6 step 2).
func TestPoolSubmitChecksLag(t *testing.T) {
	var fakeNanos atomic.Int64
	base := time.Unix(1_000_000, 0)
	hooks := poolHooks{now: func() time.Time { return base.Add(time.Duration(fakeNanos.Load())) }, noWatchdog: true}
	cfg := DefaultIngestionPoolConfig()
	cfg.MaxDirtyToAppliedAge = time.Second
	pf := newPoolFixture(t, 1, 64, cfg, hooks)
	pf.activate(0, 1, 0, nil)
	release := pf.pause(pf.worker(0))
	defer release()
	if err := pf.p.SubmitDelta(pf.ctx, pf.delta(0, 1, 0, 1, ckf.BucketImage{Bucket: 1})); err != nil {
		t.Fatal(err)
	}
	fakeNanos.Store(int64(time.Second - 1))
	if err := pf.p.SubmitDelta(pf.ctx, pf.delta(0, 1, 1, 2, ckf.BucketImage{Bucket: 2})); err != nil {
		t.Fatalf("below the deadline: %v", err)
	}
	fakeNanos.Store(int64(time.Second))
	err := pf.p.SubmitDelta(pf.ctx, pf.delta(0, 1, 2, 3, ckf.BucketImage{Bucket: 3}))
	if !errors.Is(err, ErrDirtyToAppliedAgeExceeded) {
		t.Fatalf("lagging submit: %v", err)
	}
	if d, _ := PoolErrorDisposition(err); d.Commit != ckf.CommitUncertain {
		t.Fatalf("disposition %+v", d)
	}
}

func TestPoolWorkerHealthTracksEachFailedWorker(t *testing.T) {
	pf := newPoolFixture(t, 16, 64, quietConfig(), poolHooks{})
	for l := uint8(0); l < 16; l++ {
		pf.activate(l, 1, 0, nil)
	}
	for _, w := range []int{0, 2} {
		pf.p.runOnWorker(w, func() { panic("injected") })
		f := pf.waitFault(PoolFaultWorkerFailed)
		if f.Worker != w {
			t.Fatalf("fault worker %d want %d", f.Worker, w)
		}
	}
	for w := 0; w < 4; w++ {
		if want := w == 1 || w == 3; pf.p.WorkerHealthy(w) != want {
			t.Fatalf("worker %d healthy=%v", w, !want)
		}
	}
	for l := uint8(0); l < 16; l++ {
		w := pf.worker(l)
		failed := w == 0 || w == 2
		ready := pf.g.ReadyLanes()&(1<<l) != 0
		if ready == failed {
			t.Fatalf("lane %d on worker %d: ready=%v", l, w, ready)
		}
		err := pf.p.SubmitDelta(pf.ctx, pf.delta(l, 1, 0, 1, ckf.BucketImage{Bucket: 1}))
		if failed != errors.Is(err, ErrWorkerFailed) {
			t.Fatalf("lane %d submit: %v", l, err)
		}
	}
}

// Race: with queue capacity 1 and a paused worker, the second submit
// saturates: readiness is retired immediately (before the worker runs
// again), the queued older delta is discarded and a later drain is
// LaneRetired.
func TestPoolSaturationRetiresAndDiscardsTail(t *testing.T) {
	cfg := quietConfig()
	cfg.QueueCapacity = 1
	pf := newPoolFixture(t, 1, 64, cfg, poolHooks{})
	pf.activate(0, 1, 0, nil)
	release := pf.pause(pf.worker(0))
	defer release()
	if err := pf.p.SubmitDelta(pf.ctx, pf.delta(0, 1, 0, 1, ckf.BucketImage{Bucket: 1, Value: 1})); err != nil {
		t.Fatal(err)
	}
	err := pf.p.SubmitDelta(pf.ctx, pf.delta(0, 1, 1, 2, ckf.BucketImage{Bucket: 2, Value: 2}))
	if !errors.Is(err, ErrSaturated) {
		t.Fatalf("second submit: %v", err)
	}
	if pf.g.ReadyLanes() != 0 {
		t.Fatal("saturation must clear readiness immediately")
	}
	if d, _ := PoolErrorDisposition(err); d != ckf.DispositionOf(ckf.ConsumerGapOrMalformedBeforeWrite) {
		t.Fatalf("disposition %+v", d)
	}
	if f := pf.waitFault(PoolFaultSaturated); f.Lane != 0 {
		t.Fatalf("fault %+v", f)
	}
	if _, err := pf.p.CompleteDrain(pf.ctx, pf.marker(0, 1, 1)); !errors.Is(err, ErrLaneRetired) {
		t.Fatalf("drain after saturation: %v", err)
	}
	release()
	pf.flush(pf.worker(0))
	if pf.word(1, 0) != 0 || pf.word(2, 0) != 0 {
		t.Fatal("discarded tail was applied")
	}
	lc := pf.p.lanes[0]
	lc.mu.Lock()
	n := lc.outstanding.Len()
	lc.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d outstanding entries leaked", n)
	}
}

// Race: an injected worker panic is observable, clears readiness, has
// Uncertain disposition, and later submits fail with WorkerFailed.
func TestPoolWorkerPanic(t *testing.T) {
	pf := newPoolFixture(t, 2, 64, quietConfig(), poolHooks{})
	pf.activate(0, 1, 0, nil)
	w := pf.worker(0)
	pf.p.runOnWorker(w, func() { panic("boom") })
	f := pf.waitFault(PoolFaultWorkerFailed)
	if f.Worker != w || f.Lanes&1 == 0 || f.Panic != "boom" {
		t.Fatalf("fault %+v", f)
	}
	if f.Disposition.Commit != ckf.CommitUncertain || f.Disposition.Action != ckf.ActionDeactivateAndSnapshot {
		t.Fatalf("disposition %+v", f.Disposition)
	}
	if pf.g.ReadyLanes()&1 != 0 {
		t.Fatal("readiness not cleared")
	}
	if err := pf.p.SubmitDelta(pf.ctx, pf.delta(0, 1, 0, 1, ckf.BucketImage{Bucket: 1})); !errors.Is(err, ErrWorkerFailed) {
		t.Fatalf("submit: %v", err)
	}
	if err := pf.p.Assign(pf.ctx, pf.identity(0), pf.lease(0, 2)); !errors.Is(err, ErrWorkerFailed) {
		t.Fatalf("assign: %v", err)
	}
	if d, _ := PoolErrorDisposition(ErrWorkerFailed); d.Commit != ckf.CommitUncertain {
		t.Fatal("WorkerFailed disposition")
	}
}

// The control timeout runs in a synctest bubble: with the worker paused, every
// goroutine blocks, so the bubble's clock jumps straight to the timeout; the
// test neither waits 20 ms of real time nor depends on how long it takes.
func TestPoolControlTimeoutRetiresLane(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := quietConfig()
		cfg.ControlTimeout = 20 * time.Millisecond
		pf := newPoolFixture(t, 1, 64, cfg, poolHooks{})
		pf.activate(0, 1, 0, nil)
		release := pf.pause(pf.worker(0))
		defer release()
		began := time.Now()
		_, err := pf.p.CompleteDrain(pf.ctx, pf.marker(0, 1, 0))
		if !errors.Is(err, ErrControlTimeout) {
			t.Fatalf("drain on a stalled worker: %v", err)
		}
		if d := time.Since(began); d != cfg.ControlTimeout {
			t.Fatalf("the drain gave up after %v of the bubble's clock, want exactly ControlTimeout %v", d, cfg.ControlTimeout)
		}
		if pf.g.ReadyLanes() != 0 {
			t.Fatal("timeout must retire the lane")
		}
		if f := pf.waitFault(PoolFaultControlTimeout); f.Disposition.Commit != ckf.CommitUncertain {
			t.Fatalf("fault %+v", f)
		}
		release()
		pf.flush(pf.worker(0)) // the late marker is discarded as stale
		if pf.g.ReadyLanes() != 0 {
			t.Fatal("late marker re-activated the lane")
		}
	})
}

func TestPoolAdmissionStateErrors(t *testing.T) {
	pf := newPoolFixture(t, 1, 64, quietConfig(), poolHooks{})
	if err := pf.p.SubmitDelta(pf.ctx, pf.delta(0, 1, 0, 1, ckf.BucketImage{Bucket: 1})); !errors.Is(err, ErrLaneUnassigned) {
		t.Fatalf("unassigned submit: %v", err)
	}
	if _, err := pf.p.InstallSnapshot(pf.ctx, pf.snapshot(0, 1, 0, nil)); !errors.Is(err, ErrLaneUnassigned) {
		t.Fatalf("unassigned snapshot: %v", err)
	}
	if _, err := pf.p.CompleteDrain(pf.ctx, pf.marker(0, 1, 0)); !errors.Is(err, ErrLaneRetired) {
		t.Fatalf("unassigned drain: %v", err)
	}
	if err := pf.p.Assign(pf.ctx, pf.identity(0), pf.lease(0, 1)); err != nil {
		t.Fatal(err)
	}
	if err := pf.p.SubmitDelta(pf.ctx, pf.delta(0, 1, 0, 1, ckf.BucketImage{Bucket: 1})); !errors.Is(err, ErrAwaitingSnapshot) {
		t.Fatalf("awaiting submit: %v", err)
	}
	if _, err := pf.p.InstallSnapshot(pf.ctx, pf.snapshot(0, 9, 0, nil)); !errors.Is(err, ErrLaneRetired) {
		t.Fatalf("wrong-lease snapshot: %v", err)
	}
	// Newer snapshot on an active lane: Ok(LaneDeactivated) and retired.
	pf.activate(0, 2, 1, nil)
	out, err := pf.p.InstallSnapshot(pf.ctx, pf.snapshot(0, 2, 5, nil))
	if err != nil || out.Kind != index.OutcomeLaneDeactivated || out.Fault.Kind != index.FaultSnapshotWhileReady {
		t.Fatalf("newer snapshot: %v %v", out, err)
	}
	if err := pf.p.SubmitDelta(pf.ctx, pf.delta(0, 2, 1, 2, ckf.BucketImage{Bucket: 1})); !errors.Is(err, ErrLaneRetired) {
		t.Fatalf("after snapshot-while-ready: %v", err)
	}
	// Drain mismatch retires too.
	pf.activate(0, 3, 1, nil)
	out, err = pf.p.CompleteDrain(pf.ctx, pf.marker(0, 3, 2))
	if err != nil || out.Fault.Kind != index.FaultTerminalSequenceMismatch {
		t.Fatalf("drain mismatch: %v %v", out, err)
	}
	if _, err := pf.p.CompleteDrain(pf.ctx, pf.marker(0, 3, 1)); !errors.Is(err, ErrLaneRetired) {
		t.Fatalf("after drain mismatch: %v", err)
	}
	if err := pf.p.SubmitDelta(ctxCancelled(), pf.delta(0, 3, 1, 2)); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled ctx: %v", err)
	}
}

func ctxCancelled() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}

func TestPoolConfigValidation(t *testing.T) {
	f := newFixture(t, 1, 64, 2)
	for _, mut := range []func(*IngestionPoolConfig){
		func(c *IngestionPoolConfig) { c.Workers = 0 },
		func(c *IngestionPoolConfig) { c.QueueCapacity = 0 },
		func(c *IngestionPoolConfig) { c.ControlTimeout = 0 },
		func(c *IngestionPoolConfig) { c.MaxOutstandingImagesPerLane = -1 },
		func(c *IngestionPoolConfig) { c.MaxDirtyToAppliedAge = 0 },
	} {
		cfg := DefaultIngestionPoolConfig()
		mut(&cfg)
		if _, err := NewIngestionPool(f.g, cfg); !errors.Is(err, ErrInvalidPoolConfig) {
			t.Fatalf("cfg %+v: %v", cfg, err)
		}
	}
	if DefaultIngestionPoolConfig().lagWatchdogPeriod() != 2500*time.Microsecond {
		t.Fatal("watchdog period")
	}
	// A claimed lane makes the pool build fail and release what it claimed.
	in := f.claim(0)
	if _, err := NewIngestionPool(f.g, DefaultIngestionPoolConfig()); !errors.Is(err, index.ErrLaneAlreadyClaimed) {
		t.Fatalf("claimed lane: %v", err)
	}
	in.Close()
}

// The leak check runs in a synctest bubble: after Close, synctest.Wait returns
// once every other goroutine of the bubble has exited or blocked for good, so the
// bubble's goroutine count is final when it is read (no polling, no grace
// period). It counts only the bubble's goroutines: runtime.NumGoroutine also
// counts the process's own, and the finalizer goroutine counts as a user
// goroutine while it runs, which under load once made a correct pool read as a
// leak (5 > 4). A worker or watchdog that outlived Close would also make
// synctest.Test fail on its own, as a bubble that cannot finish.
func TestPoolCloseReleasesLanesWithoutLeaks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		before := bubbleGoroutines(t)
		f := newFixture(t, 4, 64, 2)
		p, err := NewIngestionPool(f.g, quietConfig())
		if err != nil {
			t.Fatal(err)
		}
		pf := &poolFixture{fixture: f, p: p, ctx: context.Background()}
		pf.activate(0, 1, 0, nil)
		pf.activate(3, 1, 0, nil)
		if err := p.SubmitDelta(pf.ctx, pf.delta(3, 1, 0, 1, ckf.BucketImage{Bucket: 1, Value: 1})); err != nil {
			t.Fatal(err)
		}
		p.Close()
		if f.g.ReadyLanes() != 0 || f.g.ClaimedLanes() != 0 {
			t.Fatalf("after close ready=%b claimed=%b", f.g.ReadyLanes(), f.g.ClaimedLanes())
		}
		if err := p.SubmitDelta(pf.ctx, pf.delta(0, 1, 0, 1, ckf.BucketImage{Bucket: 1})); !errors.Is(err, ErrPoolClosed) {
			t.Fatalf("after close: %v", err)
		}
		p.Close()
		synctest.Wait()
		if n := bubbleGoroutines(t); n > before {
			t.Fatalf("goroutines leaked: %d > %d", n, before)
		}
	})
}

// bubbleGoroutines counts the goroutines of the caller's synctest bubble, read
// from the traceback of every goroutine: each one of a bubble is headed
// "goroutine N [state, synctest bubble K]:", and the caller's own is the one
// that is running.
func bubbleGoroutines(t *testing.T) int {
	t.Helper()
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var headers []string
	for _, line := range strings.Split(string(buf), "\n") {
		if strings.HasPrefix(line, "goroutine ") && strings.HasSuffix(line, "]:") {
			headers = append(headers, line)
		}
	}
	bubble := ""
	for _, h := range headers {
		if strings.Contains(h, "[running, synctest bubble ") {
			bubble = h[strings.Index(h, "synctest bubble "):]
		}
	}
	if bubble == "" {
		t.Fatal("bubbleGoroutines called outside a synctest bubble")
	}
	count := 0
	for _, h := range headers {
		if strings.HasSuffix(h, bubble) {
			count++
		}
	}
	return count
}
