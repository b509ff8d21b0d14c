package lanes_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/ckf-stream/ckf-stream/streams/internal/streamtest"
	"github.com/ckf-stream/ckf-stream/testenv"
)

// The lane owner's behaviours that only a broker shows: backpressure reaching the partition's
// fetches, and exact lag against the last stable offset of a transactional lane. The owner's logic
// (faults, panics, zombie relays) is tested in process (lane_internal_test.go).

// TestLaneBurstIsBackpressure: a burst of valid deltas far beyond one lane's worth of images (a
// 512-bucket lane receiving 3,000 deltas of 64 images, already in the log when the indexer
// starts) only pauses the lane's partition; it is never a fault. The lane applies every delta
// and ends with the producer's words.
// Broker: the backpressure reaches the fetches of the lane's partition (PauseFetchPartitions).
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

// TestLaneLagIsExact: the lane consumer sees transaction markers, so a lane that applied every
// record reports an applied offset just below the partition's last stable offset and a lag of
// zero, also when the partition ends with a commit marker.
// Broker: read_committed and the last stable offset with a transactional writer's commit markers.
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
