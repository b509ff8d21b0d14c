package query_test

import (
	"strings"
	"testing"

	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/ckf-stream/ckf-stream/streams/query"
)

// TestAnswerLanesBeyond16 (consumer §16): an indexer that serves lanes 2, 17, 40 and 63 (a 64-lane
// table) answers a request with lane_mask64 over every lane it selects, with the 64-bit masks and
// the 16-bit ones their low bits, lane 63 and the incomplete lane 40 included; it answers a
// request read as 16 lanes only when its selection stays below lane 16: one with lane_mask null
// (every lane) is refused, INVALID_REQUEST naming the way out, never answered with its lanes
// beyond 15 cut off; one whose lane_mask selects lane 2 is answered as on a 16-lane indexer.
func TestAnswerLanesBeyond16(t *testing.T) {
	t.Parallel()
	p := newQPrompts(64)
	x := newQIndex(t, 2, 17, 40, 63)
	x.store(2, p.a)
	x.store(17, p.a[:90])
	x.store(40, p.b)
	x.store(63, p.a[:10])
	x.activate(2, 17, 40, 63)
	ans := query.NewAnswerer(x.g, nil, query.IncompleteLanes(func() uint64 { return 1 << 40 }))

	req := qHashRequest("wide", p.a)
	req.LaneMask64 = schemas.Some(schemas.AllLanes64)
	r := ans.Answer(&req, nil)
	want := map[uint8]uint32{2: uint32(len(p.a)), 17: 90, 40: 40, 63: 10} // p.b shares 40 blocks with p.a
	if r.Status != schemas.QueryOK || r.ReadyMask() != 1<<2|1<<17|1<<40|1<<63 || r.ReadyLanes != 1<<2 ||
		r.IncompleteMask() != 1<<40 || r.IncompleteLanes != 0 || len(r.Lanes) != 4 || len(r.LaneStates) != 4 {
		t.Fatalf("lane_mask64 of every lane: %+v", r)
	}
	for i, m := range r.Lanes {
		if d, ok := want[m.Lane]; !ok || m.Depth != d || r.LaneStates[i].Lane != m.Lane {
			t.Errorf("lane %d: depth %d, want %d", m.Lane, m.Depth, d)
		}
	}
	if s := r.LaneStates[2]; s.Lane != 40 || s.State != schemas.LaneIncomplete {
		t.Errorf("lane 40's state %+v, want INCOMPLETE", s)
	}
	req.LaneMask64 = schemas.Some[uint64](1<<40 | 1<<63)
	if r := ans.Answer(&req, nil); r.Status != schemas.QueryOK || r.ReadyMask() != 1<<40|1<<63 || r.ReadyLanes != 0 || len(r.Lanes) != 2 {
		t.Fatalf("lane_mask64 of lanes 40 and 63: %+v", r)
	}

	req = qHashRequest("narrow-all", p.a)
	r = ans.Answer(&req, nil)
	if r.Status != schemas.QueryInvalidRequest || !strings.Contains(r.ErrorMessage, "lane_mask64") ||
		!strings.Contains(r.ErrorMessage, "up to 63") || r.ReadyLanes != 0 || len(r.Lanes) != 0 {
		t.Fatalf("null lane_mask on a 64-lane indexer: %+v, want INVALID_REQUEST naming lane_mask64", r)
	}

	req = qHashRequest("narrow-2", p.a)
	req.LaneMask = schemas.Some[uint16](1<<2 | 1<<9)
	r = ans.Answer(&req, nil)
	if r.Status != schemas.QueryOK || r.ReadyLanes != 1<<2 || len(r.Lanes) != 1 || r.Lanes[0].Lane != 2 ||
		r.Lanes[0].Depth != uint32(len(p.a)) || len(r.LaneStates) != 1 || r.LaneStates[0].Lane != 2 {
		t.Fatalf("lane_mask of lanes 2 and 9 on a 64-lane indexer: %+v, want lane 2 at depth %d", r, len(p.a))
	}
}
