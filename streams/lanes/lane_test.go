package lanes_test

import (
	"fmt"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/ckf-stream/ckf-stream/streams/internal/streamtest"
	"github.com/ckf-stream/ckf-stream/streams/lanes"
	"github.com/ckf-stream/ckf-stream/testenv"
)

// The lane owner's behaviours beyond the spec's fault table (faults_test.go): backpressure,
// panics, zombie relays, drains, exact lag.

// TestLaneBurstIsBackpressure: a burst of valid deltas far beyond one lane's worth of images (a
// 512-bucket lane receiving 3,000 deltas of 64 images, already in the log when the indexer
// starts) only pauses the lane's partition; it is never a fault. The lane applies every delta
// and ends with the producer's words.
func TestLaneBurstIsBackpressure(t *testing.T) {
	t.Parallel()
	const lane, deltas, images = 4, 3000, 64
	e := streamtest.NewEnv(t, 1500) // 512 buckets
	if e.Format.BucketCount != 512 {
		t.Fatalf("bucket count %d, want 512", e.Format.BucketCount)
	}
	words := writeSyntheticDeltas(t, e, lane, deltas, images)
	end := streamtest.PerfEndOffsets(t, e.Topics.Lanes, []int32{lane})
	cfg := e.IndexerConfig()
	cfg.Feed.PauseBytes = 64 << 10 // 2.3 MB of deltas wait in the log: the partition must pause
	cfg.Feed.ResumeBytes = 16 << 10
	ri := e.StartIndexer(e.Manifest(81, lane), cfg)

	testenv.WaitUntil(t, streamtest.Converge, "the lane applies the whole burst", func() bool { return streamtest.LaneStatus(ri, lane).AppliedOffset >= end-1 },
		func() string { return fmt.Sprintf("status %+v, end %d", streamtest.LaneStatus(ri, lane), end) })
	st := streamtest.LaneStatus(ri, lane)
	if len(st.Faults) != 0 || st.Recoveries != 0 || st.Deltas != deltas || st.Images != deltas*images {
		t.Fatalf("after the burst: faults %v, recoveries %d, %d deltas and %d images applied; want no fault and every delta",
			st.Faults, st.Recoveries, st.Deltas, st.Images)
	}
	if st.FetchPauses == 0 {
		t.Fatalf("the partition was never paused (status %+v): the burst did not exercise backpressure", st)
	}
	g := ri.Indexer.GlobalIndexer()
	if g.ReadyLanes() != 1<<lane || !slices.Equal(g.LaneWords(lane), words) {
		t.Fatalf("ready %016b, words equal %v; want the lane ready with the producer's words", g.ReadyLanes(), slices.Equal(g.LaneWords(lane), words))
	}
}

// TestLanePanicFaultsAndRecovers: a panic while a lane handles a record deactivates the lane
// with WORKER_FAILURE (disposition CONSUMER_WORKER_FAILURE_MID_APPLY) and the lane recovers: by
// replaying from its snapshot when the panic does not recur, and by asking the relay for a new
// snapshot when it does (the progress rule). Other lanes are not touched.
func TestLanePanicFaultsAndRecovers(t *testing.T) {
	t.Parallel()
	for _, recurring := range []bool{false, true} {
		t.Run(fmt.Sprintf("recurring=%v", recurring), func(t *testing.T) {
			t.Parallel()
			const lane, other = 6, 7
			e := streamtest.NewEnv(t, 4096)
			p := e.Producer(lane, 1)
			q := e.Producer(other, 1)
			p.Snapshot()
			q.Snapshot()
			p.StoreChain(5, nil, 0)
			q.StoreChain(5, nil, 0)
			at := streamtest.PerfEndOffsets(t, e.Topics.Lanes, []int32{lane}) // the next delta's record
			p.StoreChain(5, p.Chains[0], 2)

			events := e.WatchEvents()
			ri := e.StartIndexerWith(e.Manifest(82, lane, other), e.IndexerConfig(), func(ix *lanes.Indexer) {
				var panics atomic.Int32
				lanes.SetBeforeRecord(ix, func(l uint8, offset int64) {
					if l == lane && offset == at && (recurring || panics.Load() == 0) {
						panics.Add(1)
						panic(fmt.Sprintf("injected panic at offset %d", offset))
					}
				})
			})
			ev := events.WaitFor(t, lane, streamtest.Converge, "DEACTIVATED(WORKER_FAILURE)", streamtest.FaultIs(schemas.EventDeactivated, schemas.FaultWorkerFailure))
			if ev.Disposition == nil || ev.Disposition.Point != schemas.PointConsumerWorkerFailureMidApply {
				t.Fatalf("disposition %+v, want CONSUMER_WORKER_FAILURE_MID_APPLY", ev.Disposition)
			}
			if recurring {
				events.WaitFor(t, lane, streamtest.Converge, "SNAPSHOT_REQUESTED", streamtest.KindIs(schemas.EventSnapshotRequested))
				p.Snapshot() // the relay answers: written after the bad offset, so installed
			}
			p.StoreChain(3, nil, 0)
			streamtest.WaitLane(t, ri, p, streamtest.Converge)
			q.StoreChain(3, nil, 0)
			streamtest.WaitLane(t, ri, q, streamtest.Converge)
			if st := streamtest.LaneStatus(ri, lane); st.Recoveries < 1 || st.Faults[schemas.FaultWorkerFailure.String()] < 1 {
				t.Fatalf("status %+v: want a WORKER_FAILURE fault and a recovery by seek", st)
			}
			if st := streamtest.LaneStatus(ri, other); len(st.Faults) != 0 {
				t.Fatalf("the other lane faulted: %+v", st.Faults)
			}
		})
	}
}

// TestZombieSnapshotRefused: a snapshot of an older producer incarnation than the one a lane
// follows (a replaced relay that still writes) is refused with STALE_INCARNATION, whether the
// lane is ready or waiting for a snapshot after a fault; the current incarnation keeps the lane.
func TestZombieSnapshotRefused(t *testing.T) {
	t.Parallel()
	const lane = 3
	e := streamtest.NewEnv(t, 4096)
	current := e.Producer(lane, 2)
	zombie := e.Producer(lane, 1)
	zombie.StoreChain(4, nil, 0)
	current.Snapshot()
	current.StoreChain(6, nil, 0)
	events := e.WatchEvents()
	ri := e.StartIndexer(e.Manifest(83, lane), e.IndexerConfig())
	streamtest.WaitLane(t, ri, current, streamtest.Converge)
	g := ri.Indexer.GlobalIndexer()

	// Ready lane: the zombie's snapshot is refused and changes nothing.
	zombie.Snapshot()
	events.WaitFor(t, lane, streamtest.Converge, "RECORD_REJECTED(STALE_INCARNATION)", streamtest.FaultIs(schemas.EventRecordRejected, schemas.FaultStaleIncarnation))
	current.StoreChain(3, nil, 0)
	streamtest.WaitLane(t, ri, current, streamtest.Converge)

	// A lane waiting for a snapshot after a fault does not take the zombie's either.
	last := current.Publisher.LastSequence()
	e.Raw(lane).Delta(current.ID, last+1, last+2, [2]uint64{1, 1}) // a gap: deactivates the lane
	events.WaitFor(t, lane, streamtest.Converge, "SNAPSHOT_REQUESTED", streamtest.KindIs(schemas.EventSnapshotRequested))
	before := events.Count(lane, streamtest.FaultIs(schemas.EventRecordRejected, schemas.FaultStaleIncarnation))
	zombie.Snapshot()
	testenv.WaitUntil(t, streamtest.Converge, "a second STALE_INCARNATION rejection", func() bool {
		return events.Count(lane, streamtest.FaultIs(schemas.EventRecordRejected, schemas.FaultStaleIncarnation)) > before
	})
	if g.ReadyLanes() != 0 {
		t.Fatal("the waiting lane installed the zombie's snapshot")
	}
	current.Snapshot()
	current.StoreChain(2, nil, 0)
	streamtest.WaitLane(t, ri, current, streamtest.Converge)
	if st := streamtest.LaneStatus(ri, lane); st.Identity != current.ID.String() {
		t.Fatalf("lane follows %s, want %s", st.Identity, current.ID)
	}
}

// TestLaneLagIsExact: the lane consumer sees transaction markers, so a lane that applied every
// record reports an applied offset just below the partition's last stable offset and a lag of
// zero, also when the partition ends with a commit marker.
func TestLaneLagIsExact(t *testing.T) {
	t.Parallel()
	const lane = 11
	e := streamtest.NewEnv(t, 4096)
	p := e.TransactionalProducer(lane, 1)
	p.Snapshot()
	for range 5 {
		p.StoreChain(4, nil, 0) // one transaction each: data record, then commit marker
	}
	end := streamtest.PerfEndOffsets(t, e.Topics.Lanes, []int32{lane})
	ri := e.StartIndexer(e.Manifest(84, lane), e.IndexerConfig())
	streamtest.WaitLane(t, ri, p, streamtest.Converge)
	testenv.WaitUntil(t, streamtest.Converge, "the applied offset reaches the last stable offset", func() bool {
		st := streamtest.LaneStatus(ri, lane)
		return st.AppliedOffset == end-1 && st.HighWatermark == end && st.LagRecords == 0
	}, func() string { return fmt.Sprintf("status %+v, end %d", streamtest.LaneStatus(ri, lane), end) })
}
