package lanes

import (
	"fmt"
	"testing"

	"github.com/ckf-stream/ckf-stream/schemas"
)

// The lane owner's behaviours beyond the spec's fault table (lane_faults_internal_test.go),
// in process: panics, zombie relays.

// TestLanePanicFaultsAndRecovers: a panic while a lane handles a record deactivates the lane
// with WORKER_FAILURE (disposition CONSUMER_WORKER_FAILURE_MID_APPLY) and the lane recovers: by
// replaying from its snapshot when the panic does not recur, and by asking the relay for a new
// snapshot when it does (the progress rule). Another lane of the same indexer is not touched.
func TestLanePanicFaultsAndRecovers(t *testing.T) {
	t.Parallel()
	for _, recurring := range []bool{false, true} {
		t.Run(fmt.Sprintf("recurring=%v", recurring), func(t *testing.T) {
			t.Parallel()
			const lane, other = 6, 7
			rigs := newLaneRigs(t, 4096, 4096, testConfig(), lane, other)
			r, o := rigs[0], rigs[1]
			p, q := r.producer(1), o.producer(1)
			p.snapshot()
			q.snapshot()
			p.storeChain(5, nil, 0)
			q.storeChain(5, nil, 0)
			o.mustConverge(q)
			at := int64(len(r.log)) // the next delta's record
			p.storeChain(5, p.Chains[0], 2)
			panics := 0
			r.panicAt = func(offset int64) bool {
				if offset == at && (recurring || panics == 0) {
					panics++
					return true
				}
				return false
			}
			r.drain()
			ev := r.out.find(t, "DEACTIVATED(WORKER_FAILURE)", faultIs(schemas.EventDeactivated, schemas.FaultWorkerFailure))
			if ev.Disposition == nil || ev.Disposition.Point != schemas.PointConsumerWorkerFailureMidApply {
				t.Fatalf("disposition %+v, want CONSUMER_WORKER_FAILURE_MID_APPLY", ev.Disposition)
			}
			if recurring {
				r.out.find(t, "SNAPSHOT_REQUESTED", kindIs(schemas.EventSnapshotRequested))
				if panics != 2 {
					t.Fatalf("%d panics, want 2 (the record, then its replay)", panics)
				}
				p.snapshot() // the relay answers: written after the bad offset, so installed
			} else if ok, how := r.converged(p); !ok {
				t.Fatalf("the replay past a panic that did not recur did not restore the lane: %s", how)
			}
			p.storeChain(3, nil, 0)
			r.mustConverge(p)
			q.storeChain(3, nil, 0)
			o.mustConverge(q)
			if st := r.status(); st.Recoveries < 1 || st.Faults[schemas.FaultWorkerFailure.String()] < 1 {
				t.Fatalf("status %+v: want a WORKER_FAILURE fault and a recovery by seek", st)
			}
			if st := o.status(); len(st.Faults) != 0 || st.Recoveries != 0 {
				t.Fatalf("the other lane faulted: %+v", st.Faults)
			}
		})
	}
}

// TestLaneOwnerPanicIsRecovered: a panic raised by the owner's own code while it handles a
// record (here, while it reports the snapshot it just installed) is recovered by the owner:
// WORKER_FAILURE with CONSUMER_WORKER_FAILURE_MID_APPLY, a fresh ingestor, and a replay from the
// snapshot that brings the lane back to the producer's state.
func TestLaneOwnerPanicIsRecovered(t *testing.T) {
	t.Parallel()
	r := newLaneRig(t, 9, 4096, testConfig())
	p := r.producer(1)
	p.snapshot()
	p.storeChain(5, nil, 0)
	r.out.panicOn = kindIs(schemas.EventSnapshotInstalled)
	r.mustConverge(p)
	ev := r.out.find(t, "DEACTIVATED(WORKER_FAILURE)", faultIs(schemas.EventDeactivated, schemas.FaultWorkerFailure))
	if ev.Disposition == nil || ev.Disposition.Point != schemas.PointConsumerWorkerFailureMidApply {
		t.Fatalf("disposition %+v, want CONSUMER_WORKER_FAILURE_MID_APPLY", ev.Disposition)
	}
	if st := r.status(); st.Recoveries != 1 {
		t.Fatalf("status %+v: want one recovery by seek", st)
	}
}

// TestZombieSnapshotRefused: a snapshot of an older producer incarnation than the one a lane
// follows (a replaced relay that still writes) is refused with STALE_INCARNATION, whether the
// lane is ready or waiting for a snapshot after a fault; the current incarnation keeps the lane.
func TestZombieSnapshotRefused(t *testing.T) {
	t.Parallel()
	const lane = 3
	r := newLaneRig(t, lane, 4096, testConfig())
	current := r.producer(2)
	zombie := r.producer(1)
	zombie.storeChain(4, nil, 0)
	current.snapshot()
	current.storeChain(6, nil, 0)
	r.mustConverge(current)

	// Ready lane: the zombie's snapshot is refused and changes nothing.
	stale := faultIs(schemas.EventRecordRejected, schemas.FaultStaleIncarnation)
	zombie.snapshot()
	r.drain()
	r.out.find(t, "RECORD_REJECTED(STALE_INCARNATION)", stale)
	current.storeChain(3, nil, 0)
	r.mustConverge(current)

	// A lane waiting for a snapshot after a fault does not take the zombie's either.
	last := current.Publisher.LastSequence()
	r.delta(current.ID, last+1, last+2, [2]uint64{1, 1}) // a gap: deactivates the lane
	r.drain()
	r.out.find(t, "SNAPSHOT_REQUESTED", kindIs(schemas.EventSnapshotRequested))
	before := r.out.count(stale)
	zombie.snapshot()
	r.drain()
	if r.out.count(stale) <= before {
		t.Fatalf("no second STALE_INCARNATION rejection; events %s", r.out.kinds())
	}
	if r.ready() {
		t.Fatal("the waiting lane installed the zombie's snapshot")
	}
	current.snapshot()
	current.storeChain(2, nil, 0)
	r.mustConverge(current)
	if st := r.status(); st.Identity != current.ID.String() {
		t.Fatalf("lane follows %s, want %s", st.Identity, current.ID)
	}
}
