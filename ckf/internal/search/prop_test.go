package search

import (
	"math/rand/v2"
	"slices"
	"testing"

	"pgregory.net/rapid"
)

// The galloping search equals the linear reference on every monotone
// membership, for every window and ready mask.
func TestPropSearchEqualsLinearOnMonotone(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		n := rapid.IntRange(0, 600).Draw(rt, "n")
		ready := rapid.Uint16().Draw(rt, "ready")
		w := rapid.IntRange(1, 8).Draw(rt, "window")
		var depth [Lanes]int
		for l := range depth {
			// Bias towards shared depths (common prefixes) and the ends.
			switch rapid.IntRange(0, 3).Draw(rt, "shape") {
			case 0:
				depth[l] = n
			case 1:
				depth[l] = 0
			default:
				depth[l] = rapid.IntRange(0, n).Draw(rt, "depth")
			}
		}
		m := laneDepths(n, depth)
		got := Find(n, ready, w, m.probe)
		want := Linear(n, ready, m.probe)
		if got != want {
			rt.Fatalf("n=%d ready=%016b w=%d depths=%v: got %v want %v", n, ready, w, depth, got, want)
		}
	})
}

// The 16-lane search equals 16 independent single-lane searches on any
// (non-monotone) membership: sharing probes never couples lanes.
func TestPropSearchLanesIndependent(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		n := rapid.IntRange(0, 300).Draw(rt, "n")
		ready := rapid.Uint16().Draw(rt, "ready")
		w := rapid.IntRange(1, 8).Draw(rt, "window")
		m := randomMembership(rt, n)
		all := Find(n, ready, w, m.probe)
		for l := 0; l < Lanes; l++ {
			bit := uint16(1) << uint(l)
			one := Find(n, ready&bit, w, func(pos int) uint16 { return m[pos] & bit })
			if one[l] != all[l] {
				rt.Fatalf("lane %d: alone %d, together %d", l, one[l], all[l])
			}
			if all[l] > uint32(n) || (ready&bit == 0 && all[l] != 0) {
				rt.Fatalf("lane %d depth %d (n=%d ready=%016b)", l, all[l], n, ready)
			}
		}
	})
}

// FindWith reads, at each probe, only the bits of the lanes it passes: a probe that answers
// garbage in every other bit yields the same depths. (The indexer relies on it: it spends a
// second load of row A only on the passed lanes that missed.)
func TestPropSearchReadsOnlyTheLanesItPasses(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		n := rapid.IntRange(0, 300).Draw(rt, "n")
		ready := rapid.Uint16().Draw(rt, "ready")
		w := rapid.IntRange(1, 8).Draw(rt, "window")
		m := randomMembership(rt, n)
		honest := Find(n, ready, w, m.probe)
		noise := rand.New(rand.NewPCG(rapid.Uint64().Draw(rt, "noise"), 11))
		got := FindWith(n, ready, w, func(pos int, lanes uint16) uint16 {
			if lanes&^ready != 0 {
				rt.Fatalf("probe of position %d passes lanes %016b outside ready %016b", pos, lanes, ready)
			}
			return m[pos]&lanes | uint16(noise.Uint32())&^lanes
		}, nil, nil)
		if got != honest {
			rt.Fatalf("n=%d ready=%016b w=%d: with noise outside the passed lanes %v, honest %v", n, ready, w, got, honest)
		}
	})
}

// randomMembership draws a (non-monotone) membership of n positions: each lane holds each
// position unless a hole is drawn, holes with a drawn density.
func randomMembership(rt *rapid.T, n int) membership {
	density := rapid.IntRange(0, 64).Draw(rt, "holes")
	r := rand.New(rand.NewPCG(rapid.Uint64().Draw(rt, "seed"), 7))
	m := make(membership, n)
	for i := range m {
		for l := 0; l < Lanes; l++ {
			if r.IntN(65) >= density {
				m[i] |= 1 << uint(l)
			}
		}
	}
	return m
}

// wideMembership is a 64-lane oracle: member[pos] is the hit mask of pos.
type wideMembership []uint64

func (m wideMembership) probe(pos int) uint64 { return m[pos] }

func findWide(n int, ready uint64, w int, probe func(pos int) uint64) [MaxLanes]uint32 {
	var d [MaxLanes]uint32
	FindWide(&d, n, ready, w, func(pos int, _ uint64) uint64 { return probe(pos) }, nil, nil)
	return d
}

// randomWideMembership draws a (non-monotone) 64-lane membership, holes with a drawn density.
func randomWideMembership(rt *rapid.T, n int) wideMembership {
	density := rapid.IntRange(0, 64).Draw(rt, "holes")
	r := rand.New(rand.NewPCG(rapid.Uint64().Draw(rt, "seed"), 7))
	m := make(wideMembership, n)
	for i := range m {
		for l := 0; l < MaxLanes; l++ {
			if density == 0 || r.IntN(density+1) != 0 {
				m[i] |= 1 << uint(l)
			}
		}
	}
	return m
}

// The 64-lane search equals the linear reference on every monotone
// membership, for every window and ready mask (consumer §16).
func TestPropWideSearchEqualsLinearOnMonotone(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		n := rapid.IntRange(0, 400).Draw(rt, "n")
		ready := rapid.Uint64().Draw(rt, "ready")
		w := rapid.IntRange(1, 8).Draw(rt, "window")
		m := make(wideMembership, n)
		for l := 0; l < MaxLanes; l++ {
			var depth int
			switch rapid.IntRange(0, 3).Draw(rt, "shape") {
			case 0:
				depth = n
			case 1:
				depth = 0
			default:
				depth = rapid.IntRange(0, n).Draw(rt, "depth")
			}
			for pos := 0; pos < depth; pos++ {
				m[pos] |= 1 << uint(l)
			}
		}
		if got, want := findWide(n, ready, w, m.probe), LinearWide(n, ready, m.probe); got != want {
			rt.Fatalf("n=%d ready=%064b w=%d: got %v want %v", n, ready, w, got, want)
		}
	})
}

// The 64-lane search equals 64 independent single-lane searches on any membership, and
// reads only the lanes it passes to the probe.
func TestPropWideSearchLanesIndependent(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		n := rapid.IntRange(0, 200).Draw(rt, "n")
		ready := rapid.Uint64().Draw(rt, "ready")
		w := rapid.IntRange(1, 8).Draw(rt, "window")
		m := randomWideMembership(rt, n)
		all := findWide(n, ready, w, m.probe)
		for l := 0; l < MaxLanes; l++ {
			bit := uint64(1) << uint(l)
			one := findWide(n, ready&bit, w, func(pos int) uint64 { return m[pos] & bit })
			if one[l] != all[l] {
				rt.Fatalf("lane %d: alone %d, together %d", l, one[l], all[l])
			}
			if all[l] > uint32(n) || (ready&bit == 0 && all[l] != 0) {
				rt.Fatalf("lane %d depth %d (n=%d ready=%064b)", l, all[l], n, ready)
			}
		}
		noise := rand.New(rand.NewPCG(rapid.Uint64().Draw(rt, "noise"), 11))
		var got [MaxLanes]uint32
		FindWide(&got, n, ready, w, func(pos int, lanes uint64) uint64 {
			if lanes&^ready != 0 {
				rt.Fatalf("probe of position %d passes lanes %064b outside ready %064b", pos, lanes, ready)
			}
			return m[pos]&lanes | noise.Uint64()&^lanes
		}, nil, nil)
		if got != all {
			rt.Fatalf("with noise outside the passed lanes %v, honest %v", got, all)
		}
	})
}

// On lanes 0..15 the 64-lane search is the 16-lane one: same depths, same probe schedule.
func TestPropWideSearchMatchesNarrowBelow16(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		n := rapid.IntRange(0, 300).Draw(rt, "n")
		ready := rapid.Uint16().Draw(rt, "ready")
		w := rapid.IntRange(1, 8).Draw(rt, "window")
		m := randomMembership(rt, n)
		var narrowProbes, wideProbes []int
		narrow := FindWith(n, ready, w, func(pos int, _ uint16) uint16 {
			narrowProbes = append(narrowProbes, pos)
			return m[pos]
		}, nil, nil)
		var wide [MaxLanes]uint32
		FindWide(&wide, n, uint64(ready), w, func(pos int, _ uint64) uint64 {
			wideProbes = append(wideProbes, pos)
			return uint64(m[pos])
		}, nil, nil)
		if [Lanes]uint32(wide[:Lanes]) != narrow || !slices.Equal(narrowProbes, wideProbes) {
			rt.Fatalf("wide %v (probes %v), narrow %v (probes %v)", wide[:Lanes], wideProbes, narrow, narrowProbes)
		}
	})
}

// findClasses (FindWide) equals findWith's per-lane 64-lane body on any membership: the same
// depths, the same probes and prefetches in the same order with the same lanes passed, and the
// same statistics. Memberships are drawn with a few distinct lane patterns so that classes
// form, split and stay shared.
func TestPropClassesEqualPerLane(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		n := rapid.IntRange(0, 300).Draw(rt, "n")
		ready := rapid.Uint64().Draw(rt, "ready")
		w := rapid.IntRange(1, 8).Draw(rt, "window")
		patterns := rapid.IntRange(1, 8).Draw(rt, "patterns")
		r := rand.New(rand.NewPCG(rapid.Uint64().Draw(rt, "seed"), 3))
		// Lane l follows pattern l%patterns: a depth with a few holes and false hits.
		rows := make([][]bool, patterns)
		for p := range rows {
			d := r.IntN(n + 1)
			rows[p] = make([]bool, n)
			for i := range rows[p] {
				rows[p][i] = i < d
				if r.IntN(12) == 0 {
					rows[p][i] = !rows[p][i]
				}
			}
		}
		perm := r.Perm(MaxLanes)
		m := make(wideMembership, n)
		for i := range m {
			for l := 0; l < MaxLanes; l++ {
				if rows[perm[l]%patterns][i] {
					m[i] |= 1 << uint(l)
				}
			}
		}
		type event struct {
			prefetch bool
			pos      int
			lanes    uint64
		}
		run := func(find func(*[MaxLanes]uint32, int, uint64, int, func(int, uint64) uint64, func(int), *Stats)) ([MaxLanes]uint32, []event, Stats) {
			var d [MaxLanes]uint32
			var ev []event
			var st Stats
			find(&d, n, ready, w, func(pos int, lanes uint64) uint64 {
				ev = append(ev, event{pos: pos, lanes: lanes})
				return m[pos]
			}, func(pos int) { ev = append(ev, event{prefetch: true, pos: pos}) }, &st)
			return d, ev, st
		}
		d1, e1, s1 := run(FindWide)
		d2, e2, s2 := run(findWidePerLane)
		if d1 != d2 || s1 != s2 || !slices.Equal(e1, e2) {
			rt.Fatalf("classes %v %+v\nper lane %v %+v\nevents equal: %v", d1, s1, d2, s2, slices.Equal(e1, e2))
		}
	})
}

// FindWith (the 16-lane body written out) equals findWith's generic 16-lane instantiation:
// the same depths, probes (with their lanes), prefetches and statistics.
func TestPropGenericEqualsFindWith(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		n := rapid.IntRange(0, 300).Draw(rt, "n")
		ready := rapid.Uint16().Draw(rt, "ready")
		w := rapid.IntRange(1, 8).Draw(rt, "window")
		m := randomMembership(rt, n)
		type event struct {
			prefetch bool
			pos      int
			lanes    uint16
		}
		var e1, e2 []event
		var s1, s2 Stats
		d1 := FindWith(n, ready, w, func(pos int, lanes uint16) uint16 {
			e1 = append(e1, event{pos: pos, lanes: lanes})
			return m[pos]
		}, func(pos int) { e1 = append(e1, event{prefetch: true, pos: pos}) }, &s1)
		var d2 [Lanes]uint32
		findWith[uint16, [Lanes]int, [Lanes]uint16](&d2, n, ready, w, func(pos int, lanes uint16) uint16 {
			e2 = append(e2, event{pos: pos, lanes: lanes})
			return m[pos]
		}, func(pos int) { e2 = append(e2, event{prefetch: true, pos: pos}) }, &s2)
		if d1 != d2 || s1 != s2 || !slices.Equal(e1, e2) {
			rt.Fatalf("written out %v %+v, generic %v %+v", d1, s1, d2, s2)
		}
	})
}
