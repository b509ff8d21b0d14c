package workers

import (
	"cmp"
	"errors"
	"slices"
	"unsafe"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/ckf/internal/prefetch"
	"github.com/ckf-stream/ckf-stream/ckf/producer"
)

// ErrUnknownTier rejects an event whose storage tier is none of producer.StorageTier's four.
// errors.Is matches it; nothing of the event was applied.
var ErrUnknownTier = errors.New("workers: unknown storage tier")

// Apply applies one KV event (workers §3); it keeps none of ev's slices, so a caller may reuse
// them for the next event. It returns nil when the event was applied, was redundant
// (duplicates, unknown removal ids and unknown sources are counted, not errors) or was ignored
// because it does not describe a worker's own residency (the cache-owner domain). Otherwise it
// returns an error and the event changed nothing:
//
//   - *ckf.EventError of kind EventUnsupportedResidencyDomain: an unknown residency encoding,
//     or cache-owner residency on the device tier (as producer.DcState.ApplyEvent);
//   - ErrUnknownTier: a tier outside producer.StorageTier's values;
//   - EventParentBlockNotFound: a store whose parent the source does not map on any tier;
//   - EventInvalidBlockSequence: a store without a parent but a non-zero start position, a
//     store that would map an external id of the source to another canonical hash, or an
//     undefined Kind.
func (ix *Index) Apply(ev producer.RouterEvent) error {
	if !ev.Residency.Known() {
		ix.tel.UnsupportedResidency++
		return ckf.NewEventError(ckf.EventUnsupportedResidencyDomain, ev.Residency.String())
	}
	kind := ev.Event.Kind
	if int(ev.StorageTier) >= TierCount {
		return ErrUnknownTier
	}
	if ev.Residency == producer.ResidencyCacheOwner {
		if ev.StorageTier == producer.StorageTierDevice && kind != producer.KvEventCleared {
			ix.tel.UnsupportedResidency++
			return ckf.NewEventError(ckf.EventUnsupportedResidencyDomain, "cache_owner residency on the device tier")
		}
		ix.tel.NotWorkerResidency++
		return nil
	}
	src := ev.Source()
	switch kind {
	case producer.KvEventStored:
		ix.tel.Events++
		return ix.store(src, ev.StorageTier, &ev.Event.Stored)
	case producer.KvEventRemoved:
		ix.tel.Events++
		ix.remove(src, ev.StorageTier, ev.Event.Removed)
		return nil
	case producer.KvEventCleared:
		ix.tel.Events++
		ix.Clear(src)
		return nil
	}
	ix.tel.InvalidKinds++
	return ckf.NewEventError(ckf.EventInvalidBlockSequence, "unknown event kind")
}

// store is workers §3.2: the event's chain computed, then placed in the slab, validated against
// the source's lineage and committed (commit).
//
// Cost: with the index larger than the caches (prefetchFloorBytes), the lines of every block's
// two lineage buckets are prefetched first (one prefetch.Lines call), and on a lower tier the
// tier-map lines of every canonical once the chain is computed, so that the event's cache misses
// overlap instead of arriving one block at a time (as ckf/producer's store path does). The
// device tier's holder values are in the slab, where the store's blocks follow their parent's
// position or are appended as a run (slab): lines the store reads in order.
func (ix *Index) store(key ckf.SourceKey, t producer.StorageTier, d *producer.StoreData) error {
	si := ix.sourceOf(key)
	var lin *lineageTable
	if si >= 0 {
		lin = ix.srcs[si].lin
	}
	n := len(d.Blocks)
	warm := ix.worthPrefetching()
	var addrs []uintptr
	if warm {
		addrs = ix.scratchAddrs(4 * n)
		if lin != nil && len(lin.buckets) != 0 {
			for i := range d.Blocks {
				addrs[2*i], addrs[2*i+1] = lin.lines(d.Blocks[i].BlockHash)
			}
			prefetch.Lines(addrs[:2*n])
		}
	}
	var prev ckf.CanonicalHash
	havePrev := false
	prevPos := noPos
	if d.HasParent {
		e, ok := lin.lookup(d.ParentHash)
		if !ok {
			ix.tel.ParentNotFound++
			return ckf.NewEventError(ckf.EventParentBlockNotFound, "parent not in source lineage")
		}
		prevPos = e.position()
		prev, havePrev = ix.slab.at(prevPos).canon, true
	} else if d.HasStartPosition && d.StartPosition != 0 {
		ix.tel.InvalidSequences++
		return ckf.NewEventError(ckf.EventInvalidBlockSequence, "non-zero start position without a parent")
	}
	p := ix.scratchPrep(n)
	for i := range p {
		b := &d.Blocks[i]
		if havePrev {
			prev = ckf.CanonicalChild(prev, b.TokensHash)
		} else {
			prev, havePrev = ckf.CanonicalRoot(b.TokensHash), true
		}
		p[i] = prepared{ext: b.BlockHash, canon: prev, local: b.TokensHash, pos: noPos}
	}
	if tm := &ix.tiers[t]; warm && t != producer.StorageTierDevice && tm.live != 0 {
		tl := addrs[2*n : 4*n]
		tm.runLinesOf(tl, p)
		prefetch.Lines(tl)
	}
	if len(p) == 0 {
		return nil
	}
	return ix.commit(key, si, t, p, prevPos, true, nil)
}

// commit is the rest of a store (workers §3.2) once its blocks on tier t are prepared in p
// (external ids, canonicals and local hashes): the blocks found or placed in the slab (placeAll:
// a chain whose first block's parent is at position prev when chain is set, else blocks each
// without a parent, also looked for in nonHeads), source key's lineage pass (si its dense index, or -1 for a source the index
// does not hold yet), both undone should a block remap an id, then the holder values. An error
// means nothing changed.
func (ix *Index) commit(key ckf.SourceKey, si int32, t producer.StorageTier, p []prepared, prev uint32, chain bool, nonHeads map[ckf.CanonicalHash]uint32) error {
	if !ix.slab.room(len(p)) {
		return ckf.NewEventError(ckf.EventAllocationFailed, "the slab's positions are used up")
	}
	if si < 0 && ix.remapsWithin(p) {
		// A new source has no lineage to contradict: only the store itself can remap an id.
		ix.tel.InvalidSequences++
		return ckf.NewEventError(ckf.EventInvalidBlockSequence, "external id twice in one store")
	}
	ix.placeAll(p, prev, chain, nonHeads)
	bit := uint8(1) << t
	var i uint32
	if si >= 0 {
		i = uint32(si)
		lin := ix.srcs[i].lin
		if lin.gainTier(p, bit) >= 0 {
			lin.rollback(p, bit)
			ix.unplace(p)
			ix.tel.InvalidSequences++
			return ckf.NewEventError(ckf.EventInvalidBlockSequence, "external id remapped to a different chain")
		}
	} else {
		var err error
		if i, err = ix.addSource(key); err != nil {
			ix.unplace(p)
			return err
		}
		// A repeated id is at the same canonical (remapsWithin): a duplicate.
		ix.srcs[i].lin.gainTier(p, bit)
	}
	// The lineage is final: the holder values change.
	ix.gainAll(i, t, p)
	return nil
}

// placeAll sets each block's slab position (prepared.pos): where the slab has the block already
// (slab.find), else placed there (slab.place, prepared.created), without a holder yet. With chain,
// block k's parent is block k-1, and block 0's is at position prev (noPos: a root, or a parent
// that is not in the slab); without, every block is looked for as a head and in nonHeads (the
// slab's blocks that are not heads, by canonical, or nil when there are none) and placed as a run
// of its own (RestoreLineage's rows, whose parents are not known).
//
// The blocks after one just placed, the usual store's new blocks, are absent (a new block has no
// branch mark: slab.find's rule, without orphans) and go into its run while it has room, written
// here in one loop without a call (placeRun).
func (ix *Index) placeAll(p []prepared, prev uint32, chain bool, nonHeads map[ckf.CanonicalHash]uint32) {
	sl := &ix.slab
	for k := 0; k < len(p); k++ {
		q := &p[k]
		want := len(p) - k
		if !chain {
			prev, want = noPos, 1
		}
		pos := sl.find(prev, q.canon)
		if pos == noPos && nonHeads != nil {
			if at, ok := nonHeads[q.canon]; ok {
				pos = at
			}
		}
		q.pos, q.created = pos, false
		if pos == noPos {
			q.pos = sl.place(prev, q.canon, q.local, want, !chain)
			q.created = true
			if chain && sl.orphans == 0 {
				k += sl.placeRun(q.pos, p[k+1:])
			}
		}
		prev = p[k].pos
	}
}

// unplace undoes placeAll for a store refused after it: the blocks it placed hold nothing, and
// each ended its run when placed, so dropping them last first leaves the slab as it was.
func (ix *Index) unplace(p []prepared) {
	for k := len(p) - 1; k >= 0; k-- {
		if p[k].created {
			ix.slab.truncate(p[k].pos, &ix.tiers)
		}
	}
}

// What the lineage pass of a store did to one block's slot (prepared.did), for the holder
// values' pass (Index.gainAll) and for lineageTable.rollback.
const (
	didNothing uint8 = iota // the id already held the tier: a duplicate
	didCreate               // a new slot
	didAddTier              // the tier added to an existing slot
)

// scanLimit is the store length up to which remapsWithin compares every pair (at most 496
// comparisons of registers); longer stores sort a copy instead (n log n).
const scanLimit = 32

// remapsWithin reports whether two blocks of p share an external id with different canonicals.
func (ix *Index) remapsWithin(p []prepared) bool {
	if len(p) <= scanLimit {
		// One bit per id (of 64): when no two ids share a bit, no two are equal.
		var seen uint64
		clash := false
		for _, q := range p {
			bit := uint64(1) << (uint64(q.ext) * 0x9E3779B97F4A7C15 >> 58)
			clash = clash || seen&bit != 0
			seen |= bit
		}
		if !clash {
			return false
		}
		for j := 1; j < len(p); j++ {
			for k := range j {
				if p[k].ext == p[j].ext && p[k].canon != p[j].canon {
					return true
				}
			}
		}
		return false
	}
	if cap(ix.sorted) < len(p) { // Index fields are written only then (see scratchAddrs)
		ix.sorted = make([]prepared, 0, len(p))
	}
	s := append(ix.sorted[:0], p...)
	slices.SortFunc(s, func(a, b prepared) int {
		if c := cmp.Compare(a.ext, b.ext); c != 0 {
			return c
		}
		return cmp.Compare(a.canon, b.canon)
	})
	for j := 1; j < len(s); j++ {
		if s[j].ext == s[j-1].ext && s[j].canon != s[j-1].canon {
			return true
		}
	}
	return false
}

// prefetchFloorBytes is the slab's size below which the index does not prefetch:
// an index that small stays in the CPU's caches, so prefetches would only cost instructions.
const prefetchFloorBytes = 1 << 20

// scratchAddrs returns n words of the apply paths' prefetch addresses (Index.addrs), growing
// them when short. (Index fields are written only then: a write of a slice header while the
// collector marks costs a write barrier.)
func (ix *Index) scratchAddrs(n int) []uintptr {
	if cap(ix.addrs) < n {
		ix.addrs = make([]uintptr, n)
	}
	return ix.addrs[:n]
}

// scratchPrep returns n blocks of the apply paths' working memory (Index.prep), growing it when
// short.
func (ix *Index) scratchPrep(n int) []prepared {
	if cap(ix.prep) < n {
		ix.prep = make([]prepared, n)
	}
	return ix.prep[:n]
}

// worthPrefetching reports whether the slab's blocks take prefetchFloorBytes or more.
func (ix *Index) worthPrefetching() bool {
	return uint64(ix.slab.blocks)*uint64(unsafe.Sizeof(slabBlock{})) >= prefetchFloorBytes
}

// remove is workers §3.4: each id in order; an id the source does not hold on t is counted.
// A first pass (lineageTable.takeTier; with a large index, after prefetching every id's two
// lineage buckets) takes tier t off each id's lineage entry, deleting an entry left with no tier
// while its line is still in the cache, and prefetches the lines of each block it finds (the slab's line of each position, on the device tier); loseAll then changes the holder
// values. The same id twice in one event finds its entry
// gone or without the tier the second time: unknown then, as when removed one at a time.
func (ix *Index) remove(key ckf.SourceKey, t producer.StorageTier, ids []ckf.ExternalBlockHash) {
	si := ix.sourceOf(key)
	if si < 0 {
		if len(ids) > 0 {
			ix.tel.UnknownSources++
			ix.tel.UnknownRemovals += uint64(len(ids))
		}
		return
	}
	i := uint32(si)
	lin := ix.srcs[i].lin
	bit := uint8(1) << t
	n := len(ids)
	warm := n > 1 && ix.worthPrefetching()
	var sl *slab // the slab, whose lines takeTier prefetches when worth it
	if warm {
		addrs := ix.scratchAddrs(2 * n)
		for k, id := range ids {
			addrs[2*k], addrs[2*k+1] = lin.lines(id)
		}
		prefetch.Lines(addrs)
		sl = &ix.slab
	}
	p, unknown := lin.takeTier(ids, bit, ix.scratchPrep(n)[:0], sl)
	ix.tel.UnknownRemovals += uint64(unknown)
	ix.loseAll(i, t, p)
	if lin.Len() == 0 {
		ix.dropSource(i)
	}
}

// Clear drops every membership of src on every tier (workers §3.5): a Cleared event of the
// worker residency domain, and a dp rank's removal. A source the index holds nothing for is
// counted in Telemetry.UnknownSources.
func (ix *Index) Clear(src ckf.SourceKey) {
	si := ix.sourceOf(src)
	if si < 0 {
		ix.tel.UnknownSources++
		return
	}
	ix.clearIndex(uint32(si))
}

func (ix *Index) clearIndex(i uint32) {
	lin := ix.srcs[i].lin
	for _, e := range lin.all() {
		for t := range TierCount {
			if e.tiers&(1<<t) != 0 {
				ix.lose(i, producer.StorageTier(t), e.position())
			}
		}
	}
	*lin = lineageTable{}
	ix.dropSource(i)
}

// RemoveWorker drops every dp rank of worker (workers §3.6) and returns the number of sources
// it dropped; a worker with none is counted in Telemetry.UnknownSources.
func (ix *Index) RemoveWorker(worker ckf.WorkerID) int {
	var drop []uint32
	for k, i := range ix.ids {
		if k.Worker == worker {
			drop = append(drop, i)
		}
	}
	if len(drop) == 0 {
		ix.tel.UnknownSources++
	}
	for _, i := range drop {
		ix.clearIndex(i)
	}
	return len(drop)
}
