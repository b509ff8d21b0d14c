package lanes_test

import (
	"fmt"
	"testing"

	"github.com/ckf-stream/ckf-stream/streams/internal/streamtest"
	"github.com/ckf-stream/ckf-stream/testenv"
)

// The lane owner's behaviour that only a broker shows: exact lag against the last stable offset
// of a transactional lane. The owner's logic (faults, panics, zombie relays) is tested in process
// (lane_internal_test.go), and so is a burst's backpressure (lane_burst_internal_test.go).

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
	// The end is listed once the last commit marker is written: a commit returns before it is.
	streamtest.WaitTransactionsSettled(t, e.Cluster.Admin(t), e.Topics.Lanes)
	end := streamtest.PerfEndOffsets(t, e.Topics.Lanes, []int32{lane})
	ri := e.StartIndexer(e.Manifest(84, lane), e.IndexerConfig())
	streamtest.WaitLane(t, ri, p, streamtest.Converge)
	testenv.WaitUntil(t, streamtest.Converge, "the applied offset reaches the last stable offset", func() bool {
		st := streamtest.LaneStatus(ri, lane)
		return st.AppliedOffset == end-1 && st.HighWatermark == end && st.LagRecords == 0
	}, func() string { return fmt.Sprintf("status %+v, end %d", streamtest.LaneStatus(ri, lane), end) })
}
