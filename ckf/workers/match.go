package workers

import (
	"cmp"
	"slices"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/ckf/producer"
)

// Match is one source's answer (workers §5): Device is its device depth, the number of leading
// query blocks it holds on the device tier; HostPinned, Disk and External are the lengths of
// the runs that continue the chain on those tiers, each starting where the previous tier's run
// ended (the crate's lower-tier continuation).
type Match struct {
	Source     ckf.SourceKey
	Device     uint32
	HostPinned uint32
	Disk       uint32
	External   uint32
}

// Total is the number of leading query blocks the source holds on some tier, in the tier order.
func (m Match) Total() uint32 { return m.Device + m.HostPinned + m.Disk + m.External }

// Options narrow a query (workers §5.3). The zero value asks for every source with a
// non-zero answer.
type Options struct {
	// TopK, when positive, keeps the TopK best matches in Result.Matches' order.
	TopK int
	// Sources, when non-empty, restricts the answer to these sources.
	Sources []ckf.SourceKey
	// Frequencies asks for Result.Frequencies.
	Frequencies bool
}

// Result is a query's answer, reused across queries: a query overwrites it, and once its
// buffers have grown to the largest answer, a query allocates nothing. A Result belongs to one
// goroutine at a time.
type Result struct {
	// Matches lists every source with a non-zero Total, best first: by Device descending, then
	// Total descending, then Source ascending.
	Matches []Match
	// Frequencies[i] is the number of sources whose device depth exceeds i (the crate's
	// OverlapScores.frequencies); filled only when Options.Frequencies is set, up to the largest
	// device depth.
	Frequencies []uint32

	stamp   uint32
	scores  []scoreSlot // by dense source index, valid where stamp matches
	touched []uint32
	active  []uint32
	next    []uint32
	tierVal []uint32 // a lower tier's holder value per query position
	allow   []uint32 // dense indexes of Options.Sources, sorted
}

// scoreSlot is one source's answer under construction.
type scoreSlot struct {
	stamp uint32
	m     [TierCount]uint32 // per tier, in producer.StorageTier order
}

// touch returns source i's slot for this query, registering it on first use.
func (r *Result) touch(i uint32) *scoreSlot {
	s := &r.scores[i]
	if s.stamp != r.stamp {
		*s = scoreSlot{stamp: r.stamp}
		r.touched = append(r.touched, i)
	}
	return s
}

// Match answers query, the canonical sequence hashes of a prompt (ckf.SequenceHashes of its
// local block hashes), into r (workers §5). It does not allocate once r has served a query of
// the same shape, and never changes the index.
func (ix *Index) Match(query []ckf.CanonicalHash, opt Options, r *Result) {
	r.Matches = r.Matches[:0]
	r.Frequencies = r.Frequencies[:0]
	r.touched = r.touched[:0]
	if len(r.scores) < len(ix.srcs) {
		r.scores = slices.Grow(r.scores[:0], len(ix.srcs))[:len(ix.srcs)]
		clear(r.scores)
		r.stamp = 0
	}
	r.stamp++
	if r.stamp == 0 { // wrapped: every stale stamp could match again
		clear(r.scores)
		r.stamp = 1
	}
	if len(query) == 0 || len(ix.ids) == 0 {
		return
	}
	ix.matchDevice(query, r)
	for t := producer.StorageTierHostPinned; t <= producer.StorageTierExternal; t++ {
		if ix.tiers[t].Len() > 0 {
			ix.matchLower(query, t, r)
		}
	}
	ix.collect(opt, r)
}

// matchDevice is workers §5.1: one lookup per query block while some source is still active;
// sets are intersected only where the holder value changes.
func (ix *Index) matchDevice(query []ckf.CanonicalHash, r *Result) {
	dev := &ix.tiers[producer.StorageTierDevice]
	var buf [1]uint32
	v, _ := dev.Get(query[0])
	if v == 0 {
		return
	}
	active := append(r.active[:0], ix.sets.members(v, &buf)...)
	cur := v // a holder value whose holders include every active source
	depth := len(query)
	for pos := 1; pos < len(query); pos++ {
		v, _ := dev.Get(query[pos])
		if v == cur {
			continue
		}
		if v == 0 {
			depth = pos
			break
		}
		mem := ix.sets.members(v, &buf)
		next := r.next[:0]
		j := 0
		for _, a := range active {
			for j < len(mem) && mem[j] < a {
				j++
			}
			if j < len(mem) && mem[j] == a {
				next = append(next, a)
			} else {
				r.touch(a).m[producer.StorageTierDevice] = uint32(pos)
			}
		}
		r.next, active = active, next
		cur = v
		if len(active) == 0 {
			break
		}
	}
	for _, a := range active {
		r.touch(a).m[producer.StorageTierDevice] = uint32(depth)
	}
	r.active = active
}

// matchLower is workers §5.2 for lower tier t: every source continues from the position its
// earlier tiers reached; a source that reached no position starts at the root when it holds the
// first block on t.
func (ix *Index) matchLower(query []ckf.CanonicalHash, t producer.StorageTier, r *Result) {
	m := &ix.tiers[t]
	n := len(query)
	if cap(r.tierVal) < n {
		r.tierVal = make([]uint32, n)
	}
	vals := r.tierVal[:n]
	const unread = ^uint32(0) // no holder value has every bit set: set ids stay below 2^31
	for i := range vals {
		vals[i] = unread
	}
	val := func(pos int) uint32 {
		if vals[pos] == unread {
			vals[pos], _ = m.Get(query[pos])
		}
		return vals[pos]
	}
	walk := func(i uint32, s *scoreSlot) {
		start := 0
		for k := range t {
			start += int(s.m[k])
		}
		pos := start
		for pos < n && ix.sets.has(val(pos), i) {
			pos++
		}
		s.m[t] = uint32(pos - start)
	}
	// Sources already in the answer continue from their position.
	for _, i := range r.touched {
		walk(i, &r.scores[i])
	}
	// Sources not yet in the answer start at the root on this tier.
	var buf [1]uint32
	for _, i := range ix.sets.members(val(0), &buf) {
		if s := &r.scores[i]; s.stamp == r.stamp {
			continue
		}
		walk(i, r.touch(i))
	}
}

// collect turns the touched slots into r.Matches under opt.
//
// Order without a full sort: when the answer touches at least a quarter of the sources, the
// slots are read in SourceKey order (ix.order), so the list is already ordered by its last key;
// it is then sorted (stably) by depth and total only if it is not already in that order, which a
// prompt that every source holds to the same depth never needs. A small answer is sorted whole.
func (ix *Index) collect(opt Options, r *Result) {
	allow := r.allow[:0]
	for _, k := range opt.Sources {
		if i, ok := ix.ids[k]; ok {
			allow = append(allow, i)
		}
	}
	slices.Sort(allow)
	r.allow = allow
	// One pass over the touched slots: in key order (ix.order) when they are at least a quarter
	// of the sources, else in touch order; ordered stays true while the depths and totals met so
	// far do not increase, which is Result.Matches' order when the pass is in key order.
	keyOrdered := 4*len(r.touched) >= len(ix.order)
	list := r.touched
	if keyOrdered {
		list = ix.order
	}
	filter := len(opt.Sources) > 0
	maxDev := uint32(0)
	ordered := true
	pd, pt := ^uint32(0), ^uint32(0)
	out, scores, stamp, srcs := r.Matches[:0], r.scores, r.stamp, ix.srcs // locals: the loop keeps them in registers
	for _, i := range list {
		s := &scores[i]
		if s.stamp != stamp {
			continue
		}
		d, tot := s.m[0], s.m[0]+s.m[1]+s.m[2]+s.m[3]
		if tot == 0 {
			continue
		}
		if filter {
			if _, ok := slices.BinarySearch(allow, i); !ok {
				continue
			}
		}
		ordered = ordered && (d < pd || (d == pd && tot <= pt))
		pd, pt = d, tot
		maxDev = max(maxDev, d)
		out = append(out, Match{Source: srcs[i].key, Device: d, HostPinned: s.m[1], Disk: s.m[2], External: s.m[3]})
	}
	r.Matches = out
	if opt.Frequencies && maxDev > 0 {
		r.Frequencies = slices.Grow(r.Frequencies[:0], int(maxDev))[:maxDev]
		clear(r.Frequencies)
		for _, mt := range r.Matches {
			if mt.Device > 0 {
				r.Frequencies[mt.Device-1]++
			}
		}
		for d := int(maxDev) - 2; d >= 0; d-- {
			r.Frequencies[d] += r.Frequencies[d+1]
		}
	}
	switch {
	case !keyOrdered:
		slices.SortFunc(r.Matches, compareMatches)
	case !ordered:
		slices.SortStableFunc(r.Matches, compareDepths)
	}
	if opt.TopK > 0 && len(r.Matches) > opt.TopK {
		r.Matches = r.Matches[:opt.TopK]
	}
}

// compareDepths is Result.Matches' order without its last key (Source).
func compareDepths(a, b Match) int {
	if c := cmp.Compare(b.Device, a.Device); c != 0 {
		return c
	}
	return cmp.Compare(b.Total(), a.Total())
}

// compareMatches is Result.Matches' order.
func compareMatches(a, b Match) int {
	if c := cmp.Compare(b.Device, a.Device); c != 0 {
		return c
	}
	if c := cmp.Compare(b.Total(), a.Total()); c != 0 {
		return c
	}
	return a.Source.Compare(b.Source)
}

// MatchLocal is Match on a prompt's local block hashes: it computes their canonical chain
// (ckf.CanonicalRoot, ckf.CanonicalChild) into r's memory first.
func (ix *Index) MatchLocal(local []ckf.LocalBlockHash, opt Options, r *Result, chain *[]ckf.CanonicalHash) {
	c := (*chain)[:0]
	for i, l := range local {
		if i == 0 {
			c = append(c, ckf.CanonicalRoot(l))
		} else {
			c = append(c, ckf.CanonicalChild(c[i-1], l))
		}
	}
	*chain = c
	ix.Match(c, opt, r)
}
