package index

import (
	"errors"
	"runtime"
	"testing"

	"github.com/ckf-stream/ckf-stream/ckf"
)

// TestPoolSubmitDeltasAppliesRunInOrder: a run of deltas is applied in order, each with its own
// outstanding entry, and Backlog drains to zero.
func TestPoolSubmitDeltasAppliesRunInOrder(t *testing.T) {
	pf := newPoolFixture(t, 2, 64, quietConfig(), poolHooks{})
	pf.activate(0, 1, 0, nil)
	var run []*ckf.Delta
	for seq := uint64(1); seq <= 30; seq++ {
		run = append(run, pf.delta(0, 1, seq-1, seq, ckf.BucketImage{Bucket: seq % 64, Value: seq}, ckf.BucketImage{Bucket: 40, Value: seq}))
	}
	release := pf.pause(pf.worker(0))
	if err := pf.p.SubmitDeltas(pf.ctx, run); err != nil {
		t.Fatal(err)
	}
	if d, im := pf.p.Backlog(0); d != 30 || im != 60 {
		t.Fatalf("backlog %d deltas %d images, want 30 and 60", d, im)
	}
	release()
	out, err := pf.p.CompleteDrain(pf.ctx, pf.marker(0, 1, 30))
	if err != nil || out.Kind != OutcomeDrainAcknowledged {
		t.Fatalf("drain %v %v", out, err)
	}
	if pf.word(40, 0) != 30 || pf.word(29, 0) != 29 {
		t.Fatal("run not applied in order")
	}
	if d, im := pf.p.Backlog(0); d != 0 || im != 0 {
		t.Fatalf("backlog %d/%d after the run", d, im)
	}
}

// TestPoolSubmitDeltasFaultDropsRestOfRun: a gap inside a run deactivates the lane at that delta
// (known unchanged: nothing of it or after it is written) and the rest of the run is stale.
func TestPoolSubmitDeltasFaultDropsRestOfRun(t *testing.T) {
	pf := newPoolFixture(t, 1, 64, quietConfig(), poolHooks{})
	pf.activate(0, 1, 0, nil)
	run := []*ckf.Delta{
		pf.delta(0, 1, 0, 1, ckf.BucketImage{Bucket: 1, Value: 1}),
		pf.delta(0, 1, 5, 6, ckf.BucketImage{Bucket: 2, Value: 2}), // gap
		pf.delta(0, 1, 1, 2, ckf.BucketImage{Bucket: 3, Value: 3}),
	}
	if err := pf.p.SubmitDeltas(pf.ctx, run); err != nil {
		t.Fatal(err)
	}
	f := pf.waitFault(PoolFaultLaneDeactivated)
	if f.Fault.Kind != FaultBaseSequenceMismatch {
		t.Fatalf("fault %+v", f)
	}
	pf.flush(pf.worker(0))
	if pf.word(1, 0) != 1 || pf.word(2, 0) != 0 || pf.word(3, 0) != 0 || pf.g.ReadyLanes() != 0 {
		t.Fatal("the run was not cut at the faulting delta")
	}
	if d, _ := pf.p.Backlog(0); d != 0 {
		t.Fatalf("%d outstanding entries leaked", d)
	}
}

// TestPoolSubmitDeltasSaturationIsAllOrNothing: a full queue retires the lane and discards the
// whole run; a foreign lease anywhere in the run rejects it before anything is admitted.
func TestPoolSubmitDeltasSaturationIsAllOrNothing(t *testing.T) {
	cfg := quietConfig()
	cfg.QueueCapacity = 1
	pf := newPoolFixture(t, 1, 64, cfg, poolHooks{})
	pf.activate(0, 1, 0, nil)
	foreign := []*ckf.Delta{pf.delta(0, 1, 0, 1, ckf.BucketImage{Bucket: 1, Value: 1}), pf.delta(0, 2, 1, 2, ckf.BucketImage{Bucket: 2, Value: 2})}
	if err := pf.p.SubmitDeltas(pf.ctx, foreign); !errors.Is(err, ErrLaneRetired) {
		t.Fatalf("run with a foreign lease: %v", err)
	}
	if d, _ := pf.p.Backlog(0); d != 0 || pf.g.ReadyLanes() != 1 {
		t.Fatal("a rejected run admitted something or retired the lane")
	}
	release := pf.pause(pf.worker(0))
	defer release()
	if err := pf.p.SubmitDelta(pf.ctx, pf.delta(0, 1, 0, 1, ckf.BucketImage{Bucket: 1, Value: 1})); err != nil {
		t.Fatal(err)
	}
	run := []*ckf.Delta{pf.delta(0, 1, 1, 2, ckf.BucketImage{Bucket: 2, Value: 2}), pf.delta(0, 1, 2, 3, ckf.BucketImage{Bucket: 3, Value: 3})}
	if err := pf.p.SubmitDeltas(pf.ctx, run); !errors.Is(err, ErrSaturated) {
		t.Fatalf("run on a full queue: %v", err)
	}
	if pf.g.ReadyLanes() != 0 {
		t.Fatal("saturation must clear readiness")
	}
	release()
	pf.flush(pf.worker(0))
	if pf.word(2, 0) != 0 || pf.word(3, 0) != 0 {
		t.Fatal("a discarded run was applied")
	}
	if d, _ := pf.p.Backlog(0); d != 0 {
		t.Fatalf("%d outstanding entries leaked", d)
	}
}

// TestPoolSubmitDeltasSteadyStateAllocations: admitting and applying runs of deltas allocates
// (next to) nothing per delta once the lane is warm: the outstanding FIFO keeps its ring, the
// command is a value, and the worker applies in place (T11: at most one allocation per delta).
func TestPoolSubmitDeltasSteadyStateAllocations(t *testing.T) {
	const runs, perRun = 200, 32
	pf := newPoolFixture(t, 1, 64, quietConfig(), poolHooks{})
	pf.activate(0, 1, 0, nil)
	all := make([][]*ckf.Delta, runs+1)
	seq := uint64(0)
	for r := range all {
		for range perRun {
			seq++
			all[r] = append(all[r], pf.delta(0, 1, seq-1, seq, ckf.BucketImage{Bucket: seq % 64, Value: seq}))
		}
	}
	submit := func(run []*ckf.Delta) {
		if err := pf.p.SubmitDeltas(pf.ctx, run); err != nil {
			t.Fatal(err)
		}
		for {
			if d, _ := pf.p.Backlog(0); d == 0 {
				return
			}
			runtime.Gosched()
		}
	}
	submit(all[0]) // warm: the FIFO grows its ring once
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for _, run := range all[1:] {
		submit(run)
	}
	runtime.ReadMemStats(&after)
	perDelta := float64(after.Mallocs-before.Mallocs) / (runs * perRun)
	t.Logf("%.4f allocations per delta over %d runs of %d", perDelta, runs, perRun)
	if perDelta > 0.1 {
		t.Fatalf("%.3f allocations per delta, want (next to) none", perDelta)
	}
	if pf.word(seq%64, 0) != seq {
		t.Fatal("the last run was not applied")
	}
}
