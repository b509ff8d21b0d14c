// Package search is the pure prefix-search algorithm of consumer §7.
//
// The search answers, for every lane of a 16-bit mask at once, "how many
// leading positions 0..n-1 appear present in that lane". A position's
// membership is only observable through a probe callback that returns the
// 16-lane hit mask for that position; one call costs two bucket rows (32 word
// loads), so the algorithm minimises probe calls and shares every call
// between all lanes that need the same position:
//
//  1. position 0 is probed once (consumer §7.1);
//  2. an exponential ("galloping") phase probes 1, 2, 4, … while any lane
//     keeps hitting (consumer §7.2);
//  3. a level-synchronised binary phase narrows every lane's [lower, upper)
//     bracket, merging lanes whose midpoints coincide into one probe (consumer §7.3);
//  4. the last w positions below each tentative depth are re-checked one by
//     one (tail verification, consumer §7.4);
//  5. a lane whose first verification miss is the left edge of its window
//     re-scans the gap the binary search skipped ("provenance fallback",
//     consumer §7.5).
//
// Binary search assumes monotone membership. Cuckoo false positives, stable
// capacity holes and torn multi-word deltas make membership non-monotone, so
// the result is advisory: it may over- or under-report by design (consumer §7.8). The
// linear reference Linear is the exact answer the search
// approximates; both agree on every monotone membership (property-tested).
//
// Neither Find nor Linear allocates: all per-lane state lives in fixed-size arrays
// on the caller's stack.
//
// It knows nothing of tables or identities, only the width of the lane mask.
// Two widths exist (consumer §16): the reference's 16 lanes (Find,
// FindWith, Linear: uint16 masks, [16]uint32 depths), kept per lane by the
// generic body findWith exactly as before the wide search existed, and up
// to 64 lanes (FindWide, LinearWide: uint64 masks, [64]uint32 depths), kept
// per class of lanes in equal state (findClasses), so that 64 lanes sharing
// a prefix cost about what one lane does; findWith's 64-lane instantiation
// is the oracle it is tested against. Package ckf re-exports both
// (FindPrefixDepths, FindPrefixDepths64, …) and ckf/index runs them over
// the transposed table.
package search

import (
	"math"
	"math/bits"
)

const (
	// Lanes is the number of lanes a search covers: one per bit of the
	// uint16 lane mask. ckf.LaneCount is the same fact; the compiler pins it
	// (ckf.FindPrefixDepths returns this package's [Lanes]uint32 as
	// [ckf.LaneCount]uint32).
	Lanes = 16
	// MaxLanes is the number of lanes the wide search covers: one per bit
	// of a uint64 lane mask (ckf.MaxLanes, consumer §16).
	MaxLanes = 64
	// MaxWindow is the largest verification window (consumer §1.2); ckf
	// exports it as MaxVerificationWindow. Larger windows are clamped.
	MaxWindow = 8
)

// Linear is the exact linear reference (consumer §7.6): lanes are removed
// from the active set at their first miss, so a lane's depth is the length of
// its leading run of hits. Tests and benchmarks only.
//
//go:noinline
func Linear(n int, ready uint16, probe func(pos int) uint16) [Lanes]uint32 {
	var depths [Lanes]uint32
	linear(&depths, n, ready, probe)
	return depths
}

// LinearWide is Linear over up to 64 lanes (uint64 masks).
//
//go:noinline
func LinearWide(n int, ready uint64, probe func(pos int) uint64) [MaxLanes]uint32 {
	var depths [MaxLanes]uint32
	linear(&depths, n, ready, probe)
	return depths
}

func linear[M mask, D depthArray](depths *D, n int, ready M, probe func(pos int) M) {
	active := ready
	for i := 0; i < n && active != 0; i++ {
		active &= probe(i)
		d := saturateDepth(i + 1)
		for m := active; m != 0; m &= m - 1 {
			(*depths)[lowestLane(m)] = d
		}
	}
}

// mask is a lane mask: bit l is lane l.
type mask interface{ ~uint16 | ~uint64 }

// The per-lane arrays of one search width. Each instantiation of findWith
// takes the arrays of its width (16 with uint16 masks, 64 with uint64
// masks), so the compiler stencils one body per width with constant array
// sizes.
type (
	depthArray interface {
		[Lanes]uint32 | [MaxLanes]uint32
	}
	intArray interface{ [Lanes]int | [MaxLanes]int }
)

// Stats counts what the search did; used by tests to pin probe
// schedules and by benchmarks. It is filled only when a non-nil pointer is
// passed to FindWith.
type Stats struct {
	Probes          int // probe calls, all phases
	FallbackLanes   int // lanes whose first verification miss was the left edge
	FallbackActive  int // of those, lanes with a non-empty fallback range
	FallbackProbes  int // probe calls in the fallback phase
	ProvenanceSkips int // left-edge lanes skipped because lower_pred >= start
}

func saturateDepth(v int) uint32 {
	if v < 0 {
		return 0
	}
	if uint64(v) > math.MaxUint32 {
		return math.MaxUint32
	}
	return uint32(v)
}

// lowestLane returns the index of the lowest set bit of m (m != 0).
func lowestLane[M mask](m M) int { return bits.TrailingZeros64(uint64(m)) }

// lowestLane16 is lowestLane for FindWith: TrailingZeros16 needs no test
// for a zero input (two instructions fewer per call than the 64-bit form).
func lowestLane16(m uint16) int { return bits.TrailingZeros16(m) }

// Find is the production search (consumer §7, with tail verification and provenance
// fallback) for n positions over the lanes in ready with the given
// verification window; it returns one depth per lane (lanes outside ready are
// 0). probe(pos) must return the 16-lane hit mask of position pos (0 <= pos <
// n); it is called at most once per distinct position per phase and never for
// pos >= n. window is clamped into 1..MaxWindow. Depths saturate at
// math.MaxUint32.
func Find(n int, ready uint16, window int, probe func(pos int) uint16) [Lanes]uint32 {
	return FindWith(n, ready, window, func(pos int, _ uint16) uint16 { return probe(pos) }, nil, nil)
}

// FindWith is Find with the lanes each probe decides and two optional hooks.
// probe(pos, lanes) receives the lanes whose bit of the returned mask the
// search reads at this call (a subset of ready); the other bits are
// ignored, so a prober may spend extra work (the indexer's second load of
// row A for a missing lane) on those lanes only. prefetch, when not nil, is
// called with each position shortly before it is probed (one sample ahead
// in the exponential phase, a whole level ahead in the binary phase), so
// the caller can prefetch its rows; st, when not nil, receives what the
// search did.
//
// It is findWith's body written out for 16 lanes (the code this search had
// before the wide one existed): the generic instantiation cost about 4 %
// more instructions per 16-lane query (performance §4.1), and
// TestPropGenericEqualsFindWith keeps the two equal.
func FindWith(n int, ready uint16, window int, probe func(pos int, lanes uint16) uint16, prefetch func(pos int), st *Stats) [Lanes]uint32 {
	var depths [Lanes]uint32
	if n <= 0 {
		return depths
	}
	if window < 1 {
		window = 1
	} else if window > MaxWindow {
		window = MaxWindow
	}
	nprobe := 0

	// consumer §7.1 initial probe.
	active := ready & probe(0, ready)
	nprobe++
	if active == 0 {
		if st != nil {
			st.Probes = nprobe
		}
		return depths
	}

	var lower, lowerPred, upper [Lanes]int
	for m := active; m != 0; m &= m - 1 {
		l := lowestLane16(m)
		upper[l] = n
	}

	// consumer §7.2 exponential phase: 1, 2, 4, … while any lane keeps hitting; the
	// prefetch runs exactly one sample ahead.
	sampling := active
	pos := 1
	if prefetch != nil && 1 < n {
		prefetch(1)
	}
	for pos < n && sampling != 0 {
		next := pos * 2
		overflow := pos > math.MaxInt/2
		if prefetch != nil && !overflow && next < n {
			prefetch(next)
		}
		h := probe(pos, sampling)
		nprobe++
		for m := sampling; m != 0; m &= m - 1 {
			l := lowestLane16(m)
			if h&(1<<uint(l)) != 0 {
				lowerPred[l] = lower[l]
				lower[l] = pos
			} else {
				upper[l] = pos
			}
		}
		sampling &= h
		if overflow {
			break
		}
		pos = next
	}

	// consumer §7.3 grouped binary phase, level by level. Groups keep
	// first-appearance order (ascending lane of their first member).
	var groupPos [Lanes]int
	var groupLanes [Lanes]uint16
	for {
		ng := 0
		for m := active; m != 0; m &= m - 1 {
			l := lowestLane16(m)
			if upper[l]-lower[l] <= 1 {
				continue
			}
			mid := lower[l] + (upper[l]-lower[l])/2
			g := 0
			for g < ng && groupPos[g] != mid {
				g++
			}
			if g == ng {
				groupPos[ng] = mid
				groupLanes[ng] = 0
				ng++
			}
			groupLanes[g] |= 1 << uint(l)
		}
		if ng == 0 {
			break
		}
		if prefetch != nil {
			for g := 0; g < ng; g++ {
				prefetch(groupPos[g])
			}
		}
		for g := 0; g < ng; g++ {
			mid := groupPos[g]
			h := probe(mid, groupLanes[g])
			nprobe++
			for m := groupLanes[g]; m != 0; m &= m - 1 {
				l := lowestLane16(m)
				if h&(1<<uint(l)) != 0 {
					lowerPred[l] = lower[l]
					lower[l] = mid
				} else {
					upper[l] = mid
				}
			}
		}
	}

	// Tentative depth = upper.
	var start, cursor [Lanes]int
	for m := active; m != 0; m &= m - 1 {
		l := lowestLane16(m)
		depths[l] = saturateDepth(upper[l])
		s := upper[l] - window
		if s < 0 {
			s = 0
		}
		start[l] = s
		cursor[l] = s
	}

	// consumer §7.4 tail verification. The reference builds the union of every
	// active lane's window [start, upper) as position groups sorted
	// ascending and probes each position once for the lanes of its group
	// that are still verifying. Walking the per-lane cursors in lock-step
	// (always the smallest cursor next) visits exactly the same positions in
	// the same order with the same participants, without a sort: a position
	// whose group has no verifying lane left is never reached because only
	// verifying lanes' cursors are considered.
	verifying := active
	var fallback uint16
	if prefetch != nil {
		// Issue every window's loads up front so the serial verification
		// probes overlap their misses (a pure optimisation: the reference
		// prefetches each position right before probing it).
		var seen uint16
		for m := active; m != 0; m &= m - 1 {
			l := lowestLane16(m)
			dup := false
			for o := seen; o != 0; o &= o - 1 {
				k := lowestLane16(o)
				if start[k] == start[l] && upper[k] == upper[l] {
					dup = true
					break
				}
			}
			if dup {
				continue
			}
			seen |= 1 << uint(l)
			for p := start[l]; p < upper[l]; p++ {
				prefetch(p)
			}
		}
	}
	for {
		p := -1
		var part uint16
		for m := verifying; m != 0; m &= m - 1 {
			l := lowestLane16(m)
			c := cursor[l]
			if c >= upper[l] {
				continue
			}
			switch {
			case p < 0 || c < p:
				p = c
				part = 1 << uint(l)
			case c == p:
				part |= 1 << uint(l)
			}
		}
		if p < 0 {
			break
		}
		h := probe(p, part)
		nprobe++
		miss := part &^ h
		for m := part; m != 0; m &= m - 1 {
			cursor[lowestLane16(m)] = p + 1
		}
		for m := miss; m != 0; m &= m - 1 {
			l := lowestLane16(m)
			depths[l] = saturateDepth(p)
			if p == start[l] {
				fallback |= 1 << uint(l)
			}
		}
		verifying &^= miss
		// Lanes whose window is exhausted stop participating; keeping them
		// in verifying is harmless because their cursor is at upper.
	}

	// consumer §7.5 provenance fallback: scan [lower_pred+1, start) for left-edge
	// lanes, in lock-step, one probe per distinct cursor.
	if fallback != 0 {
		var end [Lanes]int
		var scanning uint16
		for m := fallback; m != 0; m &= m - 1 {
			l := lowestLane16(m)
			if st != nil {
				st.FallbackLanes++
			}
			if lowerPred[l] >= start[l] {
				if st != nil {
					st.ProvenanceSkips++
				}
				continue
			}
			from := lowerPred[l] + 1
			if from >= start[l] {
				continue
			}
			cursor[l] = from
			end[l] = start[l]
			scanning |= 1 << uint(l)
			if st != nil {
				st.FallbackActive++
			}
		}
		for scanning != 0 {
			p := -1
			var part uint16
			for m := scanning; m != 0; m &= m - 1 {
				l := lowestLane16(m)
				c := cursor[l]
				switch {
				case p < 0 || c < p:
					p = c
					part = 1 << uint(l)
				case c == p:
					part |= 1 << uint(l)
				}
			}
			if prefetch != nil {
				prefetch(p)
			}
			h := probe(p, part)
			nprobe++
			if st != nil {
				st.FallbackProbes++
			}
			for m := part; m != 0; m &= m - 1 {
				l := lowestLane16(m)
				bit := uint16(1) << uint(l)
				if h&bit == 0 {
					depths[l] = saturateDepth(p)
					scanning &^= bit
					continue
				}
				cursor[l] = p + 1
				if cursor[l] >= end[l] {
					scanning &^= bit
				}
			}
		}
	}
	if st != nil {
		st.Probes = nprobe
	}
	return depths
}

// FindWide is FindWith over up to 64 lanes (consumer §16): uint64 masks, and
// the depths written into *depths (every entry: lanes outside ready get 0).
// Per lane it is FindWith: the same probes in the same order, each passed
// the same lanes, the same prefetches, statistics and depths; a search
// whose lanes all lie below 16 probes exactly the positions FindWith
// probes. Its state is kept per class of lanes (findClasses).
//
// FindWide, Linear and LinearWide are never inlined: a caller in another
// package that inlined such a wrapper would call the generic body directly,
// and escape analysis then moves the caller's probe state to the heap.
//
//go:noinline
func FindWide(depths *[MaxLanes]uint32, n int, ready uint64, window int, probe func(pos int, lanes uint64) uint64, prefetch func(pos int), st *Stats) {
	*depths = [MaxLanes]uint32{}
	findClasses(depths, n, ready, window, probe, prefetch, st)
}

// findWidePerLane is FindWide kept per lane (findWith's 64-lane
// instantiation): the oracle findClasses is tested against.
func findWidePerLane(depths *[MaxLanes]uint32, n int, ready uint64, window int, probe func(pos int, lanes uint64) uint64, prefetch func(pos int), st *Stats) {
	*depths = [MaxLanes]uint32{}
	findWith[uint64, [MaxLanes]int, [MaxLanes]uint64](depths, n, ready, window, probe, prefetch, st)
}

// findWith is the per-lane search body of both widths (FindWith is its
// 16-lane instantiation written out; findWidePerLane its 64-lane one, the
// oracle of findClasses); *depths must be zero.
func findWith[M mask, I intArray, G interface{ [Lanes]M | [MaxLanes]M }, D depthArray](depths *D, n int, ready M, window int, probe func(pos int, lanes M) M, prefetch func(pos int), st *Stats) {
	if n <= 0 {
		return
	}
	if window < 1 {
		window = 1
	} else if window > MaxWindow {
		window = MaxWindow
	}
	nprobe := 0

	// consumer §7.1 initial probe.
	active := ready & probe(0, ready)
	nprobe++
	if active == 0 {
		if st != nil {
			st.Probes = nprobe
		}
		return
	}

	var lower, lowerPred, upper I
	for m := active; m != 0; m &= m - 1 {
		l := lowestLane(m)
		upper[l] = n
	}

	// consumer §7.2 exponential phase: 1, 2, 4, … while any lane keeps hitting; the
	// prefetch runs exactly one sample ahead.
	sampling := active
	pos := 1
	if prefetch != nil && 1 < n {
		prefetch(1)
	}
	for pos < n && sampling != 0 {
		next := pos * 2
		overflow := pos > math.MaxInt/2
		if prefetch != nil && !overflow && next < n {
			prefetch(next)
		}
		h := probe(pos, sampling)
		nprobe++
		for m := sampling; m != 0; m &= m - 1 {
			l := lowestLane(m)
			if h&(1<<uint(l)) != 0 {
				lowerPred[l] = lower[l]
				lower[l] = pos
			} else {
				upper[l] = pos
			}
		}
		sampling &= h
		if overflow {
			break
		}
		pos = next
	}

	// consumer §7.3 grouped binary phase, level by level. Groups keep
	// first-appearance order (ascending lane of their first member).
	var groupPos I
	var groupLanes G
	for {
		ng := 0
		for m := active; m != 0; m &= m - 1 {
			l := lowestLane(m)
			if upper[l]-lower[l] <= 1 {
				continue
			}
			mid := lower[l] + (upper[l]-lower[l])/2
			g := 0
			for g < ng && groupPos[g] != mid {
				g++
			}
			if g == ng {
				groupPos[ng] = mid
				groupLanes[ng] = 0
				ng++
			}
			groupLanes[g] |= M(1) << uint(l)
		}
		if ng == 0 {
			break
		}
		if prefetch != nil {
			for g := 0; g < ng; g++ {
				prefetch(groupPos[g])
			}
		}
		for g := 0; g < ng; g++ {
			mid := groupPos[g]
			h := probe(mid, groupLanes[g])
			nprobe++
			for m := groupLanes[g]; m != 0; m &= m - 1 {
				l := lowestLane(m)
				if h&(1<<uint(l)) != 0 {
					lowerPred[l] = lower[l]
					lower[l] = mid
				} else {
					upper[l] = mid
				}
			}
		}
	}

	// Tentative depth = upper.
	var start, cursor I
	for m := active; m != 0; m &= m - 1 {
		l := lowestLane(m)
		(*depths)[l] = saturateDepth(upper[l])
		s := upper[l] - window
		if s < 0 {
			s = 0
		}
		start[l] = s
		cursor[l] = s
	}

	// consumer §7.4 tail verification. The reference builds the union of every
	// active lane's window [start, upper) as position groups sorted
	// ascending and probes each position once for the lanes of its group
	// that are still verifying. Walking the per-lane cursors in lock-step
	// (always the smallest cursor next) visits exactly the same positions in
	// the same order with the same participants, without a sort: a position
	// whose group has no verifying lane left is never reached because only
	// verifying lanes' cursors are considered.
	verifying := active
	var fallback M
	if prefetch != nil {
		// Issue every window's loads up front so the serial verification
		// probes overlap their misses (a pure optimisation: the reference
		// prefetches each position right before probing it).
		var seen M
		for m := active; m != 0; m &= m - 1 {
			l := lowestLane(m)
			dup := false
			for o := seen; o != 0; o &= o - 1 {
				k := lowestLane(o)
				if start[k] == start[l] && upper[k] == upper[l] {
					dup = true
					break
				}
			}
			if dup {
				continue
			}
			seen |= M(1) << uint(l)
			for p := start[l]; p < upper[l]; p++ {
				prefetch(p)
			}
		}
	}
	for {
		p := -1
		var part M
		for m := verifying; m != 0; m &= m - 1 {
			l := lowestLane(m)
			c := cursor[l]
			if c >= upper[l] {
				continue
			}
			switch {
			case p < 0 || c < p:
				p = c
				part = M(1) << uint(l)
			case c == p:
				part |= M(1) << uint(l)
			}
		}
		if p < 0 {
			break
		}
		h := probe(p, part)
		nprobe++
		miss := part &^ h
		for m := part; m != 0; m &= m - 1 {
			cursor[lowestLane(m)] = p + 1
		}
		for m := miss; m != 0; m &= m - 1 {
			l := lowestLane(m)
			(*depths)[l] = saturateDepth(p)
			if p == start[l] {
				fallback |= M(1) << uint(l)
			}
		}
		verifying &^= miss
		// Lanes whose window is exhausted stop participating; keeping them
		// in verifying is harmless because their cursor is at upper.
	}

	// consumer §7.5 provenance fallback: scan [lower_pred+1, start) for left-edge
	// lanes, in lock-step, one probe per distinct cursor.
	if fallback != 0 {
		var end I
		var scanning M
		for m := fallback; m != 0; m &= m - 1 {
			l := lowestLane(m)
			if st != nil {
				st.FallbackLanes++
			}
			if lowerPred[l] >= start[l] {
				if st != nil {
					st.ProvenanceSkips++
				}
				continue
			}
			from := lowerPred[l] + 1
			if from >= start[l] {
				continue
			}
			cursor[l] = from
			end[l] = start[l]
			scanning |= M(1) << uint(l)
			if st != nil {
				st.FallbackActive++
			}
		}
		for scanning != 0 {
			p := -1
			var part M
			for m := scanning; m != 0; m &= m - 1 {
				l := lowestLane(m)
				c := cursor[l]
				switch {
				case p < 0 || c < p:
					p = c
					part = M(1) << uint(l)
				case c == p:
					part |= M(1) << uint(l)
				}
			}
			if prefetch != nil {
				prefetch(p)
			}
			h := probe(p, part)
			nprobe++
			if st != nil {
				st.FallbackProbes++
			}
			for m := part; m != 0; m &= m - 1 {
				l := lowestLane(m)
				bit := M(1) << uint(l)
				if h&bit == 0 {
					(*depths)[l] = saturateDepth(p)
					scanning &^= bit
					continue
				}
				cursor[l] = p + 1
				if cursor[l] >= end[l] {
					scanning &^= bit
				}
			}
		}
	}
	if st != nil {
		st.Probes = nprobe
	}
}
