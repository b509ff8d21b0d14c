package query_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/ckf-stream/ckf-stream/streams/query"
)

// TestAnswerLaneStatesAndAges: every configured lane the request selects is in every answer,
// searched or not, with its state and age: a lane without a snapshot is UNAVAILABLE, one the
// freshness policy excludes or older than the request's max_age_ms STALE (no depth), one whose
// DC's filter misses blocks INCOMPLETE, the rest EXACT; ages are the reply time minus each lane's
// as_of, in ms, absent for a lane with none. When no lane is left to search the UNAVAILABLE reply
// says why and still lists every lane. The answer stays allocation-free.
func TestAnswerLaneStatesAndAges(t *testing.T) {
	x := newQIndex(t, 0, 1, 5, 7)
	p := newQPrompts(3)
	p.fill(x)
	x.activate(0, 1, 5) // lane 7 never gets a snapshot
	now := time.UnixMicro(1_780_000_000_000_000)
	asOf := map[uint8]int64{0: now.UnixMicro() - 5_000, 1: now.UnixMicro() - 40_000, 5: now.UnixMicro() - 2_500_000}
	var eligible, incomplete atomic.Uint32
	eligible.Store(1<<0 | 1<<1 | 1<<5)
	incomplete.Store(1 << 1)
	ans := query.NewAnswerer(x.g, func() uint64 { return uint64(eligible.Load()) },
		query.IncompleteLanes(func() uint64 { return uint64(incomplete.Load()) }),
		query.LaneAsOf(func(l uint8) int64 { return asOf[l] }))
	query.SetAnswererClock(ans, func() time.Time { return now })
	var sc query.QueryScratch
	age := schemas.Some[int64]
	st := func(l uint8, s schemas.LaneAnswerState, a schemas.Optional[int64]) schemas.LaneState {
		return schemas.LaneState{Lane: l, State: s, AgeMillis: a}
	}
	none := schemas.Optional[int64]{}
	check := func(name string, r schemas.QueryReply, status schemas.QueryStatus, ready uint16, want ...schemas.LaneState) {
		t.Helper()
		if r.Status != status || r.ReadyLanes != ready || !r.ReplyTime.Equal(now) {
			t.Errorf("%s: status %v, ready %#x, reply time %v; want %v, %#x, %v", name, r.Status, r.ReadyLanes, r.ReplyTime, status, ready, now)
		}
		if len(r.LaneStates) != len(want) {
			t.Fatalf("%s: lane states %+v, want %+v", name, r.LaneStates, want)
		}
		for i := range want {
			if r.LaneStates[i] != want[i] {
				t.Errorf("%s: lane state %d %+v, want %+v", name, i, r.LaneStates[i], want[i])
			}
		}
		searched := 0
		for _, s := range r.LaneStates {
			if s.State.HasDepth() {
				if searched >= len(r.Lanes) || r.Lanes[searched].Lane != s.Lane {
					t.Errorf("%s: lane %d is %v but has no depth in %+v", name, s.Lane, s.State, r.Lanes)
				}
				searched++
			}
		}
		if searched != len(r.Lanes) {
			t.Errorf("%s: %d depths for %d searched lanes", name, len(r.Lanes), searched)
		}
	}

	req := qHashRequest("all", p.a)
	check("no bound", ans.Answer(&req, &sc), schemas.QueryOK, 1<<0|1<<1|1<<5,
		st(0, schemas.LaneExact, age(5)), st(1, schemas.LaneIncomplete, age(40)), st(5, schemas.LaneExact, age(2500)),
		st(7, schemas.LaneUnavailable, none))

	req.MaxAgeMillis = schemas.Some[int64](100)
	check("max age 100 ms", ans.Answer(&req, &sc), schemas.QueryOK, 1<<0|1<<1,
		st(0, schemas.LaneExact, age(5)), st(1, schemas.LaneIncomplete, age(40)), st(5, schemas.LaneStale, age(2500)),
		st(7, schemas.LaneUnavailable, none))

	eligible.Store(1<<1 | 1<<5) // the freshness policy excludes lane 0
	check("lane 0 excluded", ans.Answer(&req, &sc), schemas.QueryOK, 1<<1,
		st(0, schemas.LaneStale, age(5)), st(1, schemas.LaneIncomplete, age(40)), st(5, schemas.LaneStale, age(2500)),
		st(7, schemas.LaneUnavailable, none))

	req.MaxAgeMillis = schemas.Some[int64](1)
	r := ans.Answer(&req, &sc)
	check("every lane too old", r, schemas.QueryUnavailable, 0,
		st(0, schemas.LaneStale, age(5)), st(1, schemas.LaneStale, age(40)), st(5, schemas.LaneStale, age(2500)),
		st(7, schemas.LaneUnavailable, none))
	if r.ErrorMessage != "every eligible lane is older than max_age_ms" {
		t.Errorf("every lane too old: message %q", r.ErrorMessage)
	}

	req.MaxAgeMillis = schemas.Optional[int64]{}
	req.LaneMask = schemas.Some[uint16](1<<5 | 1<<7 | 1<<9) // lane 9 is not configured
	check("lane mask", ans.Answer(&req, &sc), schemas.QueryOK, 1<<5, st(5, schemas.LaneExact, age(2500)), st(7, schemas.LaneUnavailable, none))

	// A lane whose relay stamped a time after the indexer's clock reads age 0.
	asOf[5] = now.UnixMicro() + 3_000
	check("relay clock ahead", ans.Answer(&req, &sc), schemas.QueryOK, 1<<5, st(5, schemas.LaneExact, age(0)), st(7, schemas.LaneUnavailable, none))

	bad := req
	bad.MaxAgeMillis = schemas.Some[int64](-1)
	if r := ans.Answer(&bad, &sc); r.Status != schemas.QueryInvalidRequest || len(r.LaneStates) != 0 {
		t.Errorf("negative max_age_ms: %+v", r)
	}
	if n := testing.AllocsPerRun(200, func() { ans.Answer(&req, &sc) }); n != 0 {
		t.Errorf("%.1f allocations per answer with lane states, want 0", n)
	}
	pooled := ans.AnswerPooled(&req)
	ans.AnswerPooled(&bad)
	if len(pooled.LaneStates) != 2 || pooled.LaneStates[0].Lane != 5 {
		t.Errorf("AnswerPooled's lane states changed by a later answer: %+v", pooled.LaneStates)
	}
}
