package search

import (
	"math"
	"math/bits"
)

// findClasses is the 64-lane search (FindWide) kept per class of lanes
// instead of per lane: a class is a set of lanes whose search state (lower,
// lower_pred, upper, the verification and fallback cursors) is equal, so
// one update serves all of its lanes. All active lanes start in one class;
// a probe that hits some lanes of a class and misses others splits it, so
// there are never more classes than lanes, and lanes that share a prefix
// (the common case of a routing query) stay in a handful of classes: the
// work per probe follows the number of distinct states, not the lane count.
// Per lane, everything is exactly findWith's: the same positions probed in
// the same order with the same lanes passed to each probe, the same
// prefetches and statistics and the same depths
// (TestPropClassesEqualPerLane checks it against findWith's 64-lane
// instantiation, which is otherwise unused).
//
// Order: consumer §7.3 forms a level's groups in the order of the lowest
// lane of their first member, and consumer §7.4 prefetches the distinct windows in
// lane order; both follow from visiting classes by their lowest lane
// (byLane), which is kept sorted when a split adds a class.
func findClasses(depths *[MaxLanes]uint32, n int, ready uint64, window int, probe func(pos int, lanes uint64) uint64, prefetch func(pos int), st *Stats) {
	if n <= 0 {
		return
	}
	if window < 1 {
		window = 1
	} else if window > MaxWindow {
		window = MaxWindow
	}
	nprobe := 0
	active := ready & probe(0, ready)
	nprobe++
	if active == 0 {
		if st != nil {
			st.Probes = nprobe
		}
		return
	}

	// Class c: lanes[c] and its state. byLane lists the classes by lowest lane.
	var (
		lanes                       [MaxLanes]uint64
		lower, lowerPred, upper     [MaxLanes]int
		start, cursor, end, depthOf [MaxLanes]int
		byLane                      [MaxLanes]uint8
		nc                          int
	)
	add := func(m uint64, lo, lp, up int) int {
		c := nc
		nc++
		lanes[c], lower[c], lowerPred[c], upper[c] = m, lo, lp, up
		// Insert c into byLane by its lowest lane.
		low := bits.TrailingZeros64(m)
		i := c
		for i > 0 && bits.TrailingZeros64(lanes[byLane[i-1]]) > low {
			byLane[i] = byLane[i-1]
			i--
		}
		byLane[i] = uint8(c)
		return c
	}
	// split moves the lanes of class c in out to a new class with c's state
	// (out is a non-empty proper subset of lanes[c]) and returns it.
	split := func(c int, out uint64) int {
		lanes[c] &^= out
		if lanes[c] == 0 {
			panic("search: split emptied a class")
		}
		// The lowest lane of c may have moved up: restore byLane's order
		// before the new class is inserted by its own lowest lane.
		low := bits.TrailingZeros64(lanes[c])
		for i := 0; i < nc; i++ {
			if int(byLane[i]) != c {
				continue
			}
			for i+1 < nc && bits.TrailingZeros64(lanes[byLane[i+1]]) < low {
				byLane[i], byLane[i+1] = byLane[i+1], byLane[i]
				i++
			}
			break
		}
		k := add(out, lower[c], lowerPred[c], upper[c])
		start[k], cursor[k], end[k], depthOf[k] = start[c], cursor[c], end[c], depthOf[c]
		return k
	}

	// consumer §7.2 exponential phase. Every lane still sampling has hit
	// every sample so far, so they share lower (the last sample, 0 before
	// the first) and lower_pred (the one before); the lanes that miss a
	// sample leave as one class with upper = that sample.
	sampling := active
	hitLast, hitBefore := 0, 0
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
		if miss := sampling &^ h; miss != 0 {
			add(miss, hitLast, hitBefore, pos)
		}
		sampling &= h
		hitBefore, hitLast = hitLast, pos
		if overflow {
			break
		}
		pos = next
	}
	if sampling != 0 {
		add(sampling, hitLast, hitBefore, n)
	}

	// consumer §7.3 grouped binary phase, level by level.
	var groupPos [MaxLanes]int
	var groupLanes [MaxLanes]uint64
	var groupClasses [MaxLanes]uint64 // bit c: class c probes with this group
	for {
		ng := 0
		for i := 0; i < nc; i++ {
			c := int(byLane[i])
			if upper[c]-lower[c] <= 1 {
				continue
			}
			mid := lower[c] + (upper[c]-lower[c])/2
			g := 0
			for g < ng && groupPos[g] != mid {
				g++
			}
			if g == ng {
				groupPos[ng], groupLanes[ng], groupClasses[ng] = mid, 0, 0
				ng++
			}
			groupLanes[g] |= lanes[c]
			groupClasses[g] |= 1 << uint(c)
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
			for cs := groupClasses[g]; cs != 0; cs &= cs - 1 {
				c := bits.TrailingZeros64(cs)
				hit, miss := lanes[c]&h, lanes[c]&^h
				if hit != 0 && miss != 0 {
					k := split(c, miss)
					upper[k] = mid
					lowerPred[c], lower[c] = lower[c], mid
				} else if hit != 0 {
					lowerPred[c], lower[c] = lower[c], mid
				} else {
					upper[c] = mid
				}
			}
		}
	}

	// Tentative depth = upper; verification window [start, upper).
	for c := 0; c < nc; c++ {
		depthOf[c] = upper[c]
		s := max(upper[c]-window, 0)
		start[c], cursor[c] = s, s
	}

	// consumer §7.4 tail verification, in lock-step over the classes still
	// verifying (as findWith does over lanes).
	var verifying, fallback uint64 // bit c: class c
	verifying = 1<<uint(nc) - 1
	if nc == MaxLanes {
		verifying = ^uint64(0)
	}
	if prefetch != nil {
		var seen [MaxLanes]uint8
		ns := 0
		for i := 0; i < nc; i++ {
			c := int(byLane[i])
			dup := false
			for j := 0; j < ns; j++ {
				k := int(seen[j])
				if start[k] == start[c] && upper[k] == upper[c] {
					dup = true
					break
				}
			}
			if dup {
				continue
			}
			seen[ns] = uint8(c)
			ns++
			for p := start[c]; p < upper[c]; p++ {
				prefetch(p)
			}
		}
	}
	for {
		p := -1
		var part, partLanes uint64
		for cs := verifying; cs != 0; cs &= cs - 1 {
			c := bits.TrailingZeros64(cs)
			cur := cursor[c]
			if cur >= upper[c] {
				continue
			}
			switch {
			case p < 0 || cur < p:
				p, part, partLanes = cur, 1<<uint(c), lanes[c]
			case cur == p:
				part |= 1 << uint(c)
				partLanes |= lanes[c]
			}
		}
		if p < 0 {
			break
		}
		h := probe(p, partLanes)
		nprobe++
		for cs := part; cs != 0; cs &= cs - 1 {
			c := bits.TrailingZeros64(cs)
			cursor[c] = p + 1
			miss := lanes[c] &^ h
			if miss == 0 {
				continue
			}
			k := c
			if miss != lanes[c] {
				k = split(c, miss)
			}
			depthOf[k] = p
			verifying &^= 1 << uint(k)
			if p == start[k] {
				fallback |= 1 << uint(k)
			}
		}
	}

	// consumer §7.5 provenance fallback.
	if fallback != 0 {
		var scanning uint64
		for cs := fallback; cs != 0; cs &= cs - 1 {
			c := bits.TrailingZeros64(cs)
			size := bits.OnesCount64(lanes[c])
			if st != nil {
				st.FallbackLanes += size
			}
			if lowerPred[c] >= start[c] {
				if st != nil {
					st.ProvenanceSkips += size
				}
				continue
			}
			from := lowerPred[c] + 1
			if from >= start[c] {
				continue
			}
			cursor[c], end[c] = from, start[c]
			scanning |= 1 << uint(c)
			if st != nil {
				st.FallbackActive += size
			}
		}
		for scanning != 0 {
			p := -1
			var part, partLanes uint64
			for cs := scanning; cs != 0; cs &= cs - 1 {
				c := bits.TrailingZeros64(cs)
				switch cur := cursor[c]; {
				case p < 0 || cur < p:
					p, part, partLanes = cur, 1<<uint(c), lanes[c]
				case cur == p:
					part |= 1 << uint(c)
					partLanes |= lanes[c]
				}
			}
			if prefetch != nil {
				prefetch(p)
			}
			h := probe(p, partLanes)
			nprobe++
			if st != nil {
				st.FallbackProbes++
			}
			for cs := part; cs != 0; cs &= cs - 1 {
				c := bits.TrailingZeros64(cs)
				if miss := lanes[c] &^ h; miss != 0 {
					k := c
					if miss != lanes[c] {
						k = split(c, miss)
					}
					depthOf[k] = p
					scanning &^= 1 << uint(k)
					if k == c {
						continue
					}
				}
				cursor[c] = p + 1
				if cursor[c] >= end[c] {
					scanning &^= 1 << uint(c)
				}
			}
		}
	}
	for c := 0; c < nc; c++ {
		d := saturateDepth(depthOf[c])
		for m := lanes[c]; m != 0; m &= m - 1 {
			depths[bits.TrailingZeros64(m)] = d
		}
	}
	if st != nil {
		st.Probes = nprobe
	}
}
