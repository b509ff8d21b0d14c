package search

import (
	"fmt"
	"math"
	"reflect"
	"testing"
)

// membership is a test oracle: member[pos] is the 16-lane hit mask of pos.
type membership []uint16

func (m membership) probe(pos int) uint16 { return m[pos] }

// recorder wraps a membership and records the probe / prefetch schedule.
type recorder struct {
	m      membership
	events []string
	probes []int
}

func (r *recorder) probe(pos int) uint16 {
	r.events = append(r.events, fmt.Sprintf("probe %d", pos))
	r.probes = append(r.probes, pos)
	return r.m[pos]
}

func (r *recorder) prefetch(pos int) { r.events = append(r.events, fmt.Sprintf("prefetch %d", pos)) }

// singleLane builds a one-lane (lane 0) membership from 0/1 values.
func singleLane(bitsOf ...int) membership {
	m := make(membership, len(bitsOf))
	for i, b := range bitsOf {
		if b != 0 {
			m[i] = 1
		}
	}
	return m
}

// laneDepths builds a monotone membership of n positions where lane l hits
// exactly positions < depth[l].
func laneDepths(n int, depth [Lanes]int) membership {
	m := make(membership, n)
	for pos := 0; pos < n; pos++ {
		for l := 0; l < Lanes; l++ {
			if pos < depth[l] {
				m[pos] |= 1 << uint(l)
			}
		}
	}
	return m
}

// withHits returns lane-0 membership of n positions: hits at [0, depth) plus
// the extra positions.
func withHits(n, depth int, extra ...int) membership {
	m := make(membership, n)
	for i := 0; i < depth; i++ {
		m[i] = 1
	}
	for _, e := range extra {
		m[e] = 1
	}
	return m
}

func TestSearchEmptyQueryAndEmptyMask(t *testing.T) {
	var zero [Lanes]uint32
	called := false
	p := func(int) uint16 { called = true; return 0xFFFF }
	if got := findT(0, 0xFFFF, 2, p); got != zero || called {
		t.Fatalf("n=0: got %v, probe called %v", got, called)
	}
	if got := findT(5, 0, 2, p); got != zero {
		t.Fatalf("empty mask: got %v", got)
	}
	// A lane that misses block 0 has depth 0; lanes outside the mask are 0.
	m := laneDepths(4, [Lanes]int{0: 4, 1: 0, 2: 4})
	got := findT(4, 0b011, 2, m.probe)
	if got[0] != 4 || got[1] != 0 || got[2] != 0 {
		t.Fatalf("got %v", got)
	}
}

// The window contract of consumer §7.4 on [1,1,1,0,1,1,1,1]: w=1 -> 8, w=8 -> 3.
func TestSearchWindowContract(t *testing.T) {
	m := singleLane(1, 1, 1, 0, 1, 1, 1, 1)
	if got := findT(len(m), 1, 1, m.probe)[0]; got != 8 {
		t.Fatalf("w=1: got %d want 8", got)
	}
	if got := findT(len(m), 1, 8, m.probe)[0]; got != 3 {
		t.Fatalf("w=8: got %d want 3", got)
	}
	if got := linearT(len(m), 1, m.probe)[0]; got != 3 {
		t.Fatalf("linear: got %d want 3", got)
	}
}

// The schedule of consumer §7.2 for n=9.
func TestSearchExponentialPrefetchSchedule(t *testing.T) {
	r := &recorder{m: withHits(9, 9)}
	findWithT(9, 1, 1, anyLanes(r.probe), r.prefetch, nil)
	want := []string{"probe 0", "prefetch 1", "prefetch 2", "probe 1", "prefetch 4", "probe 2", "prefetch 8", "probe 4", "probe 8"}
	if got := r.events[:len(want)]; !reflect.DeepEqual(got, want) {
		t.Fatalf("schedule\n got %v\nwant %v", r.events, want)
	}
}

// Grouped binary phase: lanes with equal midpoints share one probe per
// level; the whole schedule is pinned for a three-lane case (derived by hand
// from consumer §7.2–§7.4).
func TestSearchGroupedBinaryMidpointsOncePerLevel(t *testing.T) {
	m := laneDepths(8, [Lanes]int{0: 5, 1: 5, 2: 3})
	r := &recorder{m: m}
	got := findWithT(8, 0b111, 2, anyLanes(r.probe), nil, nil)
	if got[0] != 5 || got[1] != 5 || got[2] != 3 {
		t.Fatalf("depths %v", got)
	}
	want := []int{0, 1, 2, 4, 6, 3, 5, 1, 2, 3, 4}
	if !reflect.DeepEqual(r.probes, want) {
		t.Fatalf("probes\n got %v\nwant %v", r.probes, want)
	}

	// Sixteen lanes, all at the same depth: the binary phase must probe
	// each midpoint exactly once per level (one probe serves all lanes).
	var d [Lanes]int
	for l := range d {
		d[l] = 77
	}
	r = &recorder{m: laneDepths(128, d)}
	got = findWithT(128, 0xFFFF, 1, anyLanes(r.probe), nil, nil)
	for l := range got {
		if got[l] != 77 {
			t.Fatalf("lane %d depth %d", l, got[l])
		}
	}
	one := &recorder{m: laneDepths(128, [Lanes]int{0: 77})}
	findWithT(128, 1, 1, anyLanes(one.probe), nil, nil)
	if !reflect.DeepEqual(r.probes, one.probes) {
		t.Fatalf("16 equal lanes probed %v, one lane %v", r.probes, one.probes)
	}

	// Sixteen lanes with distinct depths: within one binary level, a
	// position is probed at most once.
	for l := range d {
		d[l] = 3 + 7*l
	}
	lv := &levelRecorder{m: laneDepths(128, d)}
	got = findWithT(128, 0xFFFF, 2, anyLanes(lv.probe), lv.prefetch, nil)
	for l := range got {
		if got[l] != uint32(d[l]) {
			t.Fatalf("lane %d depth %d want %d", l, got[l], d[l])
		}
	}
	for i, level := range lv.levels {
		seen := map[int]bool{}
		for _, p := range level {
			if seen[p] {
				t.Fatalf("level %d probed %d twice: %v", i, p, level)
			}
			seen[p] = true
		}
	}
}

// levelRecorder splits probes into levels at each prefetch burst.
type levelRecorder struct {
	m            membership
	levels       [][]int
	lastPrefetch bool
}

func (r *levelRecorder) prefetch(int) {
	if !r.lastPrefetch {
		r.levels = append(r.levels, nil)
	}
	r.lastPrefetch = true
}

func (r *levelRecorder) probe(pos int) uint16 {
	r.lastPrefetch = false
	if len(r.levels) > 0 {
		r.levels[len(r.levels)-1] = append(r.levels[len(r.levels)-1], pos)
	}
	return r.m[pos]
}

// Overlapping verification windows stay per lane and stop at the first miss.
func TestSearchOverlappingWindowsStayPerLane(t *testing.T) {
	// Lane 0: full 16. Lane 1: full 16 except a hole at 14. Lane 2: hole at
	// 15. All three windows (w=4) overlap on 12..15.
	m := laneDepths(16, [Lanes]int{0: 16, 1: 16, 2: 16})
	m[14] &^= 1 << 1
	m[15] &^= 1 << 2
	m[13] &^= 1 << 2 // lane 2 also misses 13: first miss wins
	got := findT(16, 0b111, 4, m.probe)
	if got[0] != 16 || got[1] != 14 || got[2] != 13 {
		t.Fatalf("got %v want [16 14 13]", got[:3])
	}
}

// consumer §7.4: window 8 repairs holes at offsets 1..8 below the end of a fully
// present 33-block query; a hole 9 below the end stays advisory; w=1 does
// not repair a hole at offset 2.
func TestSearchWindowRepairsNearHoles(t *testing.T) {
	const n = 33
	for off := 1; off <= 8; off++ {
		m := withHits(n, n)
		m[n-off] = 0
		if got := findT(n, 1, 8, m.probe)[0]; got != uint32(n-off) {
			t.Fatalf("w=8 hole at offset %d: got %d want %d", off, got, n-off)
		}
	}
	m := withHits(n, n)
	m[n-9] = 0
	if got := findT(n, 1, 8, m.probe)[0]; got != n {
		t.Fatalf("w=8 hole at offset 9: got %d want %d (advisory)", got, n)
	}
	m = withHits(n, n)
	m[n-2] = 0
	if got := findT(n, 1, 1, m.probe)[0]; got != n {
		t.Fatalf("w=1 hole at offset 2: got %d want %d", got, n)
	}
}

// consumer §7.5: a false pivot at 48 over a true depth of 40 (n=65) makes the binary
// search answer 49; the first verification miss is the window's left edge
// (47), so the fallback scans [33, 47) and repairs the depth to 40.
func TestSearchFallbackRepairsClippedFalsePivot(t *testing.T) {
	m := withHits(65, 40, 48)
	var st Stats
	got := findWithT(65, 1, 2, anyLanes(m.probe), nil, &st)[0]
	if got != 40 {
		t.Fatalf("got %d want 40", got)
	}
	if st.FallbackLanes != 1 || st.FallbackActive != 1 || st.FallbackProbes != 8 {
		t.Fatalf("stats %+v", st)
	}
}

// consumer §7.5: lanes in fallback are scanned in lock-step; a probe is shared only
// by lanes whose cursors are at the same position.
func TestSearchFallbackStaggeredCursorsGroupedAtEqualPositions(t *testing.T) {
	// Lanes 0 and 1: false pivot 48 over true depths 40 and 36 (n=65): both
	// fall back over [33, 47) and share the probes at 33..36; lane 0 goes on
	// alone to 40.
	m := make(membership, 65)
	for pos := 0; pos < 65; pos++ {
		if pos < 40 || pos == 48 {
			m[pos] |= 1
		}
		if pos < 36 || pos == 48 {
			m[pos] |= 2
		}
	}
	var st Stats
	got := findWithT(65, 0b11, 2, anyLanes(m.probe), nil, &st)
	if got[0] != 40 || got[1] != 36 {
		t.Fatalf("got %v", got[:2])
	}
	if st.FallbackProbes != 8 {
		t.Fatalf("fallback probes %d want 8", st.FallbackProbes)
	}

	// Staggered: lane 0 as above scans 33..40; lane 2 (true depth 20, false
	// pivot 24) scans 17..20. The cursors never coincide, so the lock-step
	// visits 17..20 for lane 2 then 33..40 for lane 0: 12 probes, ascending.
	for pos := 0; pos < 65; pos++ {
		m[pos] &^= 2
		if pos < 20 || pos == 24 {
			m[pos] |= 4
		}
	}
	r := &recorder{m: m}
	st = Stats{}
	got = findWithT(65, 0b101, 2, anyLanes(r.probe), nil, &st)
	if got[0] != 40 || got[2] != 20 {
		t.Fatalf("got %v", got[:3])
	}
	if st.FallbackProbes != 12 {
		t.Fatalf("fallback probes %d want 12 (%v)", st.FallbackProbes, r.probes)
	}
	tail := r.probes[len(r.probes)-12:]
	want := []int{17, 18, 19, 20, 33, 34, 35, 36, 37, 38, 39, 40}
	if !reflect.DeepEqual(tail, want) {
		t.Fatalf("fallback schedule %v want %v", tail, want)
	}
}

// consumer §7.5: second-order provenance. lower_pred >= verification start skips the
// fallback (no inverted range); the documented residual stays.
func TestSearchFallbackSecondOrderProvenanceSkipped(t *testing.T) {
	// True depth 30; false hits at 32, 40, 44, 46, 47; w=3 → tentative 48,
	// start 45 misses at the left edge, lower_pred = 46 >= 45 → skipped.
	m := withHits(65, 30, 32, 40, 44, 46, 47)
	var st Stats
	got := findWithT(65, 1, 3, anyLanes(m.probe), nil, &st)[0]
	if got != 45 {
		t.Fatalf("got %d want 45 (advisory residual)", got)
	}
	if st.FallbackLanes != 1 || st.ProvenanceSkips != 1 || st.FallbackActive != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// consumer §7.5 documented false-predecessor residual: when lower_pred is itself a
// false hit the fallback starts above the true depth.
func TestSearchFallbackFalsePredecessorResidual(t *testing.T) {
	m := withHits(65, 30, 32, 48)
	got := findT(65, 1, 2, m.probe)[0]
	if got != 33 {
		t.Fatalf("got %d want 33 (documented residual; linear = 30)", got)
	}
	if lin := linearT(65, 1, m.probe)[0]; lin != 30 {
		t.Fatalf("linear %d", lin)
	}
}

// Stable non-monotone holes keep the probe count bounded by 2n + 2·8.
func TestSearchStableHolesBoundedProbes(t *testing.T) {
	for n := 1; n <= 200; n++ {
		for seed := 0; seed < 4; seed++ {
			m := make(membership, n)
			x := uint64(n*7919 + seed*104729 + 1)
			for i := range m {
				x ^= x << 13
				x ^= x >> 7
				x ^= x << 17
				m[i] = uint16(x) | uint16(x>>16) // dense hits, random holes
			}
			m[0] = 0xFFFF
			for w := 1; w <= 8; w++ {
				var st Stats
				got := findWithT(n, 0xFFFF, w, anyLanes(m.probe), nil, &st)
				if st.Probes > 2*n+2*8 {
					t.Fatalf("n=%d w=%d: %d probes", n, w, st.Probes)
				}
				for l, d := range got {
					if d > uint32(n) {
						t.Fatalf("lane %d depth %d > n %d", l, d, n)
					}
				}
			}
		}
	}
}

func TestSearchDepthSaturates(t *testing.T) {
	if saturateDepth(math.MaxInt) != math.MaxUint32 || saturateDepth(-1) != 0 || saturateDepth(7) != 7 {
		t.Fatal("saturateDepth")
	}
}

func TestSearchWindowClampedInPureFunction(t *testing.T) {
	m := singleLane(1, 1, 1, 0, 1, 1, 1, 1)
	if findT(8, 1, 0, m.probe) != findT(8, 1, 1, m.probe) {
		t.Fatal("window 0 must behave as 1")
	}
	if findT(8, 1, 99, m.probe) != findT(8, 1, 8, m.probe) {
		t.Fatal("window 99 must behave as 8")
	}
}

func TestSearchDoesNotAllocate(t *testing.T) {
	var d [Lanes]int
	for l := range d {
		d[l] = 5 * l
	}
	m := laneDepths(128, d)
	probe := m.probe
	allocs := testing.AllocsPerRun(100, func() {
		_ = findT(128, 0xFFFF, 2, probe)
	})
	if allocs != 0 {
		t.Fatalf("allocs per search = %v", allocs)
	}
}

// Deterministic companion of the rapid property: long queries, random
// monotone memberships, every window.
func TestSearchEqualsLinearRandomMonotoneLong(t *testing.T) {
	r := uint64(88172645463325252)
	next := func(n int) int {
		r ^= r << 13
		r ^= r >> 7
		r ^= r << 17
		return int(r % uint64(n))
	}
	for iter := 0; iter < 3000; iter++ {
		n := next(1100)
		var d [Lanes]int
		base := next(n + 1)
		for l := range d {
			if next(3) == 0 {
				d[l] = next(n + 1)
			} else {
				d[l] = base
			}
		}
		m := laneDepths(n, d)
		ready := uint16(next(1 << 16))
		w := 1 + next(8)
		if got, want := findT(n, ready, w, m.probe), linearT(n, ready, m.probe); got != want {
			t.Fatalf("n=%d w=%d d=%v: got %v want %v", n, w, d, got, want)
		}
	}
}

// anyLanes adapts a probe that answers every lane to FindWith's probe, which is also told the
// lanes it decides.
func anyLanes(probe func(pos int) uint16) func(pos int, lanes uint16) uint16 {
	return func(pos int, _ uint16) uint16 { return probe(pos) }
}

// wideShift selects the search the spec cases run: -1 is the 16-lane search
// (FindWith, uint16 masks); 0 and 48 run the 64-lane search (FindWide) with
// each case's 16 lanes at lanes 0..15 or moved up to lanes 48..63
// (consumer §16), which must give the same depths, probe schedules and
// statistics. TestSearchSpecCasesWide sets it; every other test sees -1.
var wideShift = -1

func findWithT(n int, ready uint16, window int, probe func(pos int, lanes uint16) uint16, prefetch func(pos int), st *Stats) [Lanes]uint32 {
	if wideShift < 0 {
		return FindWith(n, ready, window, probe, prefetch, st)
	}
	s := uint(wideShift)
	var wide [MaxLanes]uint32
	FindWide(&wide, n, uint64(ready)<<s, window, func(pos int, lanes uint64) uint64 {
		if lanes&^(0xFFFF<<s) != 0 {
			panic(fmt.Sprintf("wide search passed lanes %064b outside %d..%d", lanes, s, s+15))
		}
		return uint64(probe(pos, uint16(lanes>>s)))<<s | ^uint64(0xFFFF<<s)&0x5555_5555_5555_5555
	}, prefetch, st)
	var out [Lanes]uint32
	for l := range wide {
		if l < int(s) || l >= int(s)+Lanes {
			if wide[l] != 0 {
				panic(fmt.Sprintf("wide search: lane %d outside the case has depth %d", l, wide[l]))
			}
			continue
		}
		out[l-int(s)] = wide[l]
	}
	return out
}

func findT(n int, ready uint16, window int, probe func(pos int) uint16) [Lanes]uint32 {
	return findWithT(n, ready, window, anyLanes(probe), nil, nil)
}

func linearT(n int, ready uint16, probe func(pos int) uint16) [Lanes]uint32 {
	if wideShift < 0 {
		return Linear(n, ready, probe)
	}
	s := uint(wideShift)
	wide := LinearWide(n, uint64(ready)<<s, func(pos int) uint64 { return uint64(probe(pos)) << s })
	var out [Lanes]uint32
	copy(out[:], wide[s:s+Lanes])
	return out
}

// The spec cases of this file (consumer §7, §12) at the 64-lane width: the
// wide search, with each case's lanes at 0..15 and at 48..63 and garbage in
// the bits of the lanes it does not pass, answers exactly as the 16-lane one.
func TestSearchSpecCasesWide(t *testing.T) {
	cases := map[string]func(*testing.T){
		"EmptyQueryAndEmptyMask":                          TestSearchEmptyQueryAndEmptyMask,
		"WindowContract":                                  TestSearchWindowContract,
		"ExponentialPrefetchSchedule":                     TestSearchExponentialPrefetchSchedule,
		"GroupedBinaryMidpointsOncePerLevel":              TestSearchGroupedBinaryMidpointsOncePerLevel,
		"OverlappingWindowsStayPerLane":                   TestSearchOverlappingWindowsStayPerLane,
		"WindowRepairsNearHoles":                          TestSearchWindowRepairsNearHoles,
		"FallbackRepairsClippedFalsePivot":                TestSearchFallbackRepairsClippedFalsePivot,
		"FallbackStaggeredCursorsGroupedAtEqualPositions": TestSearchFallbackStaggeredCursorsGroupedAtEqualPositions,
		"FallbackSecondOrderProvenanceSkipped":            TestSearchFallbackSecondOrderProvenanceSkipped,
		"FallbackFalsePredecessorResidual":                TestSearchFallbackFalsePredecessorResidual,
		"StableHolesBoundedProbes":                        TestSearchStableHolesBoundedProbes,
		"DepthSaturates":                                  TestSearchDepthSaturates,
		"WindowClampedInPureFunction":                     TestSearchWindowClampedInPureFunction,
		"EqualsLinearRandomMonotoneLong":                  TestSearchEqualsLinearRandomMonotoneLong,
	}
	defer func() { wideShift = -1 }()
	for _, shift := range []int{0, 48} {
		wideShift = shift
		for name, run := range cases {
			t.Run(fmt.Sprintf("lanes%d-%d/%s", shift, shift+15, name), run)
		}
	}
}
