package replay

import (
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/eval"
	"github.com/ckf-stream/ckf-stream/schemas"
)

// TestStalenessIsTheOldestStoreNotYetShown: the truth an answer's lane age is compared with is
// how long before the reply the oldest store of the lane's DC that the lane did not show yet was
// produced, 0 when it showed them all; stores of other DCs, stores produced after the reply and
// stores shown (or removed) by then do not count.
func TestStalenessIsTheOldestStoreNotYetShown(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	p := newProberOf(2, time.Minute, nil, nil)
	a := &pstore{unit: 0, keys: []uint64{1}, at: ms(10)}
	b := &pstore{unit: 0, keys: []uint64{2}, at: ms(20)}
	c := &pstore{unit: 1, keys: []uint64{3}, at: ms(5)}
	for _, s := range []*pstore{a, b, c} {
		p.addStore(s.unit, nil, s.keys, s.at)
	}
	// addStore clones the store; resolve the clones.
	stored := map[uint64]*pstore{}
	for s := range p.pending {
		stored[s.keys[0]] = s
	}
	p.mu.Lock()
	p.resolve(stored[1], ms(30)) // a shown at 30 ms
	p.mu.Unlock()
	p.removed(0, []uint64{2}, ms(50)) // b removed before it was shown: moot from 50 ms

	for _, tc := range []struct {
		unit int
		at   time.Time
		want time.Duration
	}{
		{0, ms(8), 0},                      // nothing of DC 0 produced yet
		{0, ms(15), 5 * time.Millisecond},  // a produced at 10, not shown
		{0, ms(25), 15 * time.Millisecond}, // a still the oldest not shown
		{0, ms(30), 10 * time.Millisecond}, // a shown at 30 (not after): b, produced at 20
		{0, ms(60), 0},                     // b removed at 50
		{1, ms(60), 55 * time.Millisecond}, // c of DC 1, never shown
	} {
		if got := p.staleness(tc.unit, tc.at); got != tc.want {
			t.Errorf("staleness(%d, +%v) = %v, want %v", tc.unit, tc.at.Sub(t0), got, tc.want)
		}
	}
}

// TestAgeAccuracyCountsBothDirections: an age above the truth by more than 2 ms is outside the
// band but not understated; one below it by more than 2 ms is understated.
func TestAgeAccuracyCountsBothDirections(t *testing.T) {
	a := ageAccuracy([]float64{0, 1.5, -2, 3, -2.5, 40}, []float64{-2.5, 1})
	if a.Compared != 6 || a.WithinTwoMs != 3 || a.Understated != 1 || a.Behind != 2 || a.BehindWithinTwoMs != 1 || a.BehindUnderstated != 1 {
		t.Fatalf("ageAccuracy = %+v", a)
	}
	if a.ErrMaxMs != 40 {
		t.Errorf("ErrMaxMs = %v, want 40", a.ErrMaxMs)
	}
}

// TestJudgeLeavesOutLanesNotSearched: a DC whose lane the answer left out (stale or unavailable:
// no entry in its lanes, its lane state says why) is counted as left out, not as an under-report
// at depth 0; searched lanes are judged as before.
func TestJudgeLeavesOutLanesNotSearched(t *testing.T) {
	p := &ckfPolicy{}
	pr := newProberOf(3, time.Minute, nil, nil)
	v := &eval.View{Keys: []uint64{1, 2, 3}, Depth: []int{3, 2, 1}}
	a := &answer{pending: make([][]bool, 3), reply: schemas.QueryReply{Lanes: []schemas.LaneMatch{
		{Lane: 0, Depth: 3}, {Lane: 2, Depth: 0}, // lane 1 left out
	}}}
	var total Accuracy
	p.judge(pr, a, v, &total, nil)
	want := Accuracy{Compared: 3, LeftOut: 1, Exact: 1, UnderReports: 1}
	if total != want {
		t.Fatalf("judged %+v, want %+v", total, want)
	}
}
