package workers

import (
	"cmp"
	"slices"
	"unsafe"

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
	tierVal []uint32            // a lower tier's holder value per query position
	allow   []uint32            // dense indexes of Options.Sources, sorted
	dropped []uint32            // matchGroups: sources in the order the walk dropped them
	cuts    []cut               // matchGroups: where each drop position's sources end in dropped
	walked  uint32              // the positions the last device walk decided: from 0 up to walked
	lookups uint32              // the head-map lookups the last device walk made
	chain   []ckf.CanonicalHash // MatchLocal without a chain of the caller's: the chain, in part
}

// Followed reports, for the last query answered into r, how many of the leading query
// positions the device walk decided (walked: up to the position where every source had dropped
// out, the device held nothing, or the query ended) and how many of those it found by following
// the slab from the block before, without a head-map lookup (followed, workers §5.4). Both are 0
// for an index without device entries.
func (r *Result) Followed() (followed, walked int) {
	return int(r.walked - min(r.lookups, r.walked)), int(r.walked)
}

// cut is one position of a device walk at which sources dropped out: they hold exactly depth
// leading blocks, and they are dropped[previous cut's end:end] (in key order).
type cut struct{ depth, end uint32 }

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
// the same shape, and never changes the index. The query must be a chain, each hash the child
// of the one before it: the walk finds a block by its parent's position in the slab (slab.find),
// so a list of hashes that is not one prompt's is answered as far as it is one.
func (ix *Index) Match(query []ckf.CanonicalHash, opt Options, r *Result) {
	ix.match(query, nil, opt, r)
}

// match is Match on the query's canonical hashes, or, with query nil, on the prompt's local
// hashes local (MatchLocal's device-only answer).
func (ix *Index) match(query []ckf.CanonicalHash, local []ckf.LocalBlockHash, opt Options, r *Result) {
	r.Matches = r.Matches[:0]
	r.Frequencies = r.Frequencies[:0]
	r.walked, r.lookups = 0, 0
	if len(query)+len(local) == 0 || len(ix.ids) == 0 {
		return
	}
	if ix.deviceOnly() {
		ix.matchGroups(query, local, opt, r)
		return
	}
	ix.matchSlots(query, opt, r)
}

// deviceOnly reports whether no lower tier holds anything: then every total is the device depth.
func (ix *Index) deviceOnly() bool {
	return ix.tiers[producer.StorageTierHostPinned].Len() == 0 && ix.tiers[producer.StorageTierDisk].Len() == 0 &&
		ix.tiers[producer.StorageTierExternal].Len() == 0
}

// matchSlots is Match with lower tiers to walk: each source's answer is built in a slot of
// r.scores, then collected. It also answers a device-only index (TestGroupsEqualSlots).
func (ix *Index) matchSlots(query []ckf.CanonicalHash, opt Options, r *Result) {
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
	active, depth := ix.walkDevice(query, nil, r)
	for _, a := range r.dropped {
		r.touch(a)
	}
	from := 0
	for _, c := range r.cuts {
		for _, a := range r.dropped[from:c.end] {
			r.scores[a].m[producer.StorageTierDevice] = c.depth
		}
		from = int(c.end)
	}
	for _, a := range active {
		r.touch(a).m[producer.StorageTierDevice] = depth
	}
	for t := producer.StorageTierHostPinned; t <= producer.StorageTierExternal; t++ {
		if ix.tiers[t].Len() > 0 {
			ix.matchLower(query, t, r)
		}
	}
	ix.collect(opt, r)
}

// walkDevice is workers §5.1 on the slab: the query's blocks are found in order (slabWalk), and
// sets are intersected only where the holder value changes, so a prompt held by the same sources
// all along costs a comparison or two per block whatever the number of sources. The query is
// query's canonical hashes, or with query nil the local hashes local. It returns the sources
// that hold every block up to the end of the walk (in key order) and that depth; the sources
// that dropped out earlier are in r.dropped, grouped by r.cuts, each group in key order and the
// groups in increasing depth.
func (ix *Index) walkDevice(query []ckf.CanonicalHash, local []ckf.LocalBlockHash, r *Result) ([]uint32, uint32) {
	r.dropped, r.cuts = r.dropped[:0], r.cuts[:0]
	sl := &ix.slab
	if sl.held == 0 {
		return nil, 0
	}
	n := len(query)
	if query == nil {
		n = len(local)
	}
	var buf [1]uint32
	var active []uint32
	keys := ix.keys
	// cur is a holder value whose holders include every active source; before the first block,
	// a value no block has (set ids and single holders never have every bit set), so that the
	// first block always stops the run.
	cur := ^uint32(0)
	depth := n
	w := slabWalk{at: noPos}
	for pos := 0; pos < n; pos++ {
		var v uint32
		if query != nil {
			pos, v = w.scanCanonical(sl, query, pos, cur)
		} else {
			pos, v = w.scanLocal(sl, local, pos, cur)
		}
		r.walked = uint32(min(pos+1, n))
		if pos == n {
			break
		}
		if v == 0 {
			depth = pos
			break
		}
		if pos == 0 {
			active = append(r.active[:0], ix.sets.members(v, &buf)...)
			cur = v
			continue
		}
		// Both lists are in key order: a merge keeps the active sources that v holds.
		mem := ix.sets.members(v, &buf)
		next := r.next[:0]
		j := 0
		for _, a := range active {
			ka := keys[a]
			for j < len(mem) && keys[mem[j]].Less(ka) {
				j++
			}
			if j < len(mem) && mem[j] == a {
				next = append(next, a)
			} else {
				r.dropped = append(r.dropped, a)
			}
		}
		if n, last := uint32(len(r.dropped)), len(r.cuts)-1; (last < 0 && n > 0) || (last >= 0 && r.cuts[last].end < n) {
			r.cuts = append(r.cuts, cut{depth: uint32(pos), end: n})
		}
		r.next, active = active, next
		cur = v
		if len(active) == 0 {
			break
		}
	}
	r.lookups = uint32(w.lookups)
	if active != nil {
		r.active = active
	}
	return active, uint32(depth)
}

// slabWalk is a query's way through the slab: the position of the last block it found, and how
// many head-map lookups it has made.
type slabWalk struct {
	at      uint32 // noPos before the first block
	lookups int
}

// scanCanonical returns the first position from from on whose block's device holder value is
// not cur, and that value (0 when the slab does not have the block); len(q) and cur when there
// is none. Block from's parent is at w.at (noPos for from = 0), and w.at is left at the block
// returned. Each block is looked for right after its parent, then as a head (slab.find's rule):
// the rest of a run is compared block after block in a loop of its own (followCanonical), and
// only where the query leaves the run is the next block looked for.
func (w *slabWalk) scanCanonical(s *slab, q []ckf.CanonicalHash, from int, cur uint32) (int, uint32) {
	i := from
	for i < len(q) {
		if w.at != noPos {
			pg, rest := s.runRest(w.at)
			j := followCanonical(rest, q[i:], cur)
			w.at += uint32(j)
			i += j
			if j < len(rest) && i < len(q) && rest[j].canon == q[i] {
				w.at++ // the query's block, with another holder value
				return i, rest[j].val
			}
			if i == len(q) {
				return i, cur
			}
			if pg[w.at&slabPageMask].run&branchBit == 0 && s.orphans == 0 { // not in the slab
				w.at = noPos
				return i, 0
			}
		}
		w.lookups++
		at := s.head(q[i])
		w.at = at
		if at == noPos {
			return i, 0
		}
		if v := s.at(at).val; v != cur {
			return i, v
		}
		i++
	}
	return i, cur
}

// scanLocal is scanCanonical for a prompt given as its local hashes l: a block right after its
// parent in the same run is the prompt's block when their local hashes are equal (the slab's
// invariants: its canonical is the child of its parent's and its local hash), so following a run
// hashes nothing; only where the prompt leaves a run is the block's canonical hashed and looked
// for as a head. It is written out apart from scanCanonical: one scan for both, choosing by a flag
// once a run, took 270 ns against 211 for the match rows' query with 8 workers.
func (w *slabWalk) scanLocal(s *slab, l []ckf.LocalBlockHash, from int, cur uint32) (int, uint32) {
	i := from
	for i < len(l) {
		var c ckf.CanonicalHash
		if w.at != noPos {
			pg, rest := s.runRest(w.at)
			j := followLocal(rest, l[i:], cur)
			w.at += uint32(j)
			i += j
			if j < len(rest) && i < len(l) && rest[j].local == l[i] {
				w.at++ // the prompt's block, with another holder value
				return i, rest[j].val
			}
			if i == len(l) {
				return i, cur
			}
			pb := &pg[w.at&slabPageMask]
			if pb.run&branchBit == 0 && s.orphans == 0 { // not in the slab
				w.at = noPos
				return i, 0
			}
			c = childOf(pb.canon, l[i])
		} else {
			c = ckf.CanonicalRoot(l[i]) // i = 0: a walk past it has a parent
		}
		w.lookups++
		at := s.head(c)
		w.at = at
		if at == noPos {
			return i, 0
		}
		if v := s.at(at).val; v != cur {
			return i, v
		}
		i++
	}
	return i, cur
}

// followCanonical returns how many leading blocks of rest (a run's blocks after the walk's
// position) are the query's next blocks q with holder value cur.
func followCanonical(rest []slabBlock, q []ckf.CanonicalHash, cur uint32) int {
	n := min(len(rest), len(q))
	rest, q = rest[:n], q[:n]
	for j := range rest {
		if rest[j].canon != q[j] || rest[j].val != cur {
			return j
		}
	}
	return n
}

// followLocal is followCanonical by local hash (the blocks after a run's block are its children).
func followLocal(rest []slabBlock, l []ckf.LocalBlockHash, cur uint32) int {
	n := min(len(rest), len(l))
	rest, l = rest[:n], l[:n]
	for j := range rest {
		if rest[j].local != l[j] || rest[j].val != cur {
			return j
		}
	}
	return n
}

// childOf is ckf.CanonicalChild, not inlined: the hash's code would crowd the walk's loop.
//
//go:noinline
func childOf(parent ckf.CanonicalHash, local ckf.LocalBlockHash) ckf.CanonicalHash {
	return ckf.CanonicalChild(parent, local)
}

// matchGroups answers a query when no lower tier holds anything: every total is the device
// depth, so Result.Matches' order is depth descending, then source key ascending, which is the
// order walkDevice leaves its groups in read backwards: the sources active at the end first,
// then each cut's sources from the last cut to the first, each group already in key order. No
// per-source slot and no sort.
func (ix *Index) matchGroups(query []ckf.CanonicalHash, local []ckf.LocalBlockHash, opt Options, r *Result) {
	active, depth := ix.walkDevice(query, local, r)
	ix.emitGroups(active, depth, opt, r)
}

// emitGroups is matchGroups' answer from a walk's groups.
func (ix *Index) emitGroups(active []uint32, depth uint32, opt Options, r *Result) {
	allow := ix.allowed(opt, r)
	filter := len(opt.Sources) > 0
	out := slices.Grow(r.Matches[:0], len(active)+len(r.dropped))
	out = ix.appendGroup(out, active, depth, filter, allow)
	for g := len(r.cuts) - 1; g >= 0; g-- {
		from := uint32(0)
		if g > 0 {
			from = r.cuts[g-1].end
		}
		out = ix.appendGroup(out, r.dropped[from:r.cuts[g].end], r.cuts[g].depth, filter, allow)
	}
	r.Matches = out
	if opt.Frequencies && len(out) > 0 {
		fillFrequencies(r, out[0].Device)
	}
	if opt.TopK > 0 && len(r.Matches) > opt.TopK {
		r.Matches = r.Matches[:opt.TopK]
	}
}

// appendGroup appends a Match of device depth d for each source of group (those in allow when
// filter is set) to out, whose capacity must hold them. Each Match is written field by field in
// place: a composite literal appended is built on the stack and copied with 16-byte loads that
// straddle its narrower stores, a store-forwarding stall per source that took most of a
// 512-source answer's time.
func (ix *Index) appendGroup(out []Match, group []uint32, d uint32, filter bool, allow []uint32) []Match {
	keys := ix.keys
	n := len(out)
	out = out[:n+len(group)]
	for _, a := range group {
		if filter && !contains(allow, a) {
			continue
		}
		m := &out[n]
		m.Source = keys[a]
		m.Device, m.HostPinned, m.Disk, m.External = d, 0, 0, 0
		n++
	}
	return out[:n]
}

// allowed returns the dense indexes of opt.Sources that the index knows, sorted, in r's memory.
func (ix *Index) allowed(opt Options, r *Result) []uint32 {
	allow := r.allow[:0]
	for _, k := range opt.Sources {
		if i, ok := ix.ids[k]; ok {
			allow = append(allow, i)
		}
	}
	slices.Sort(allow)
	r.allow = allow
	return allow
}

func contains(sorted []uint32, i uint32) bool {
	_, ok := slices.BinarySearch(sorted, i)
	return ok
}

// fillFrequencies sets r.Frequencies from r.Matches (workers §5.3): entry d counts the sources
// whose device depth exceeds d, for d below maxDev, the largest device depth.
func fillFrequencies(r *Result, maxDev uint32) {
	if maxDev == 0 {
		return
	}
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
			vals[pos] = m.get(uint64(query[pos]))
		}
		return vals[pos]
	}
	walk := func(i uint32, s *scoreSlot) {
		start := 0
		for k := range t {
			start += int(s.m[k])
		}
		pos := start
		for pos < n && ix.sets.has(val(pos), i, ix.keys) {
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
	allow := ix.allowed(opt, r)
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
	out, scores, stamp, keys := r.Matches[:0], r.scores, r.stamp, ix.keys // locals: the loop keeps them in registers
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
			if !contains(allow, i) {
				continue
			}
		}
		ordered = ordered && (d < pd || (d == pd && tot <= pt))
		pd, pt = d, tot
		maxDev = max(maxDev, d)
		out = append(out, Match{}) // then filled field by field (see appendGroup)
		m := &out[len(out)-1]
		m.Source = keys[i]
		m.Device, m.HostPinned, m.Disk, m.External = d, s.m[1], s.m[2], s.m[3]
	}
	r.Matches = out
	if opt.Frequencies {
		fillFrequencies(r, maxDev)
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

// MatchLocal is Match on a prompt's local block hashes; *chain receives their canonical chain
// (ckf.CanonicalRoot, ckf.CanonicalChild) unless chain is nil (the replica's answers). Without
// the chain and with no lower tier to walk, the device walk follows the prompt's local hashes
// through the slab's runs (slabWalk.scanLocal) and hashes only where the prompt leaves a run;
// otherwise the chain is read from the slab the same way (slab.chainOf), then matched.
func (ix *Index) MatchLocal(local []ckf.LocalBlockHash, opt Options, r *Result, chain *[]ckf.CanonicalHash) {
	if chain == nil && ix.deviceOnly() {
		ix.match(nil, local, opt, r)
		return
	}
	if chain == nil {
		chain = &r.chain
	}
	c := slices.Grow((*chain)[:0], len(local))[:len(local)]
	ix.slab.chainOf(local, c)
	*chain = c
	ix.Match(c, opt, r)
}

// asWords views a slice of a 64-bit hash type as []uint64 (same memory, same length and
// capacity), so that ckf.AppendSequenceHashes can fill it.
func asWords[H ~uint64](s []H) []uint64 {
	return unsafe.Slice((*uint64)(unsafe.Pointer(unsafe.SliceData(s))), cap(s))[:len(s)]
}
