package search

import (
	"math/rand/v2"
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
