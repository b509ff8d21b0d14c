package lanes

import (
	"testing"

	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/ckf-stream/ckf-stream/streams/query"
)

// TestLanesBeyond16 (consumer §16): lanes 3, 40 and 63 of one indexer (a 64-lane table) take
// their snapshots and deltas from their partitions, become eligible in the 64-bit mask, report
// their events and statuses by lane, and a reader of 64 lanes finds each lane's prompts there,
// and only there.
func TestLanesBeyond16(t *testing.T) {
	t.Parallel()
	rigs := newLaneRigs(t, 4096, 4096, testConfig(), 3, 40, 63)
	ix := rigs[0].ix
	if n := ix.g.LaneCount(); n != 64 {
		t.Fatalf("table of %d lanes, want 64", n)
	}
	var ps []*rigProducer
	for _, r := range rigs {
		p := r.producer(1)
		p.snapshot()
		p.storeChain(6, nil, 0)
		r.mustConverge(p)
		ps = append(ps, p)
	}
	if got, want := ix.EligibleLanes(), uint64(1<<3|1<<40|1<<63); got != want {
		t.Fatalf("eligible lanes %#x, want %#x", got, want)
	}
	var lanes []uint8
	for _, s := range ix.Lanes() {
		lanes = append(lanes, s.Lane)
	}
	if len(lanes) != 3 || lanes[0] != 3 || lanes[1] != 40 || lanes[2] != 63 {
		t.Fatalf("lane statuses of lanes %v, want 3, 40, 63", lanes)
	}
	if n := rigs[0].out.count(func(ev schemas.LaneEvent) bool { return ev.Lane == 63 && ev.Kind == schemas.EventSnapshotInstalled }); n != 1 {
		t.Errorf("%d SNAPSHOT_INSTALLED events of lane 63, want 1", n)
	}
	ans := query.NewAnswerer(ix.g, ix.EligibleLanes, query.IncompleteLanes(ix.IncompleteLanes))
	for i, r := range rigs {
		req := schemas.QueryRequest{CorrelationID: "q", Input: schemas.InputLocalBlockHashes,
			Hashes: schemas.AppendU64s(nil, ps[i].Chains[0]), LaneMask64: schemas.Some(schemas.AllLanes64)}
		reply := ans.Answer(&req, nil)
		if reply.Status != schemas.QueryOK || reply.ReadyMask() != 1<<3|1<<40|1<<63 || len(reply.Lanes) != 3 {
			t.Fatalf("lane %d's chain: %+v", r.lane, reply)
		}
		for _, m := range reply.Lanes {
			if want := map[bool]uint32{true: 6, false: 0}[m.Lane == r.lane]; m.Depth != want {
				t.Errorf("lane %d's chain on lane %d: depth %d, want %d", r.lane, m.Lane, m.Depth, want)
			}
		}
	}
}
