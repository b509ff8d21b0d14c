package workers

import (
	"fmt"
	"slices"
	"unsafe"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/ckf/producer"
)

// TierCount is the number of storage tiers (producer.StorageTier's values).
const TierCount = 4

// lineageEntry is what a source's lineage keeps per external id: the position in the slab of
// the block it maps to, whose canonical hash the slab keeps, and the tiers (bit t =
// producer.StorageTier t) the id is held on; five bytes of a lineage bucket's way (lineageTable).
// A canonical hash is at most one block of the slab, so two entries map to the same canonical
// iff they have the same position.
type lineageEntry struct {
	pos   uint32
	tiers uint8
}

func (e *lineageEntry) position() uint32 { return e.pos }

func newLineageEntry(pos uint32) lineageEntry { return lineageEntry{pos: pos} }

// source is one (worker, dp rank) with at least one mapping (workers §2.1).
type source struct {
	lin  *lineageTable
	held [TierCount]uint64 // memberships per tier
}

// aliasKey names one membership that more than one external id of its source maps to: by the
// block's slab position on the device tier (whose holder values are the slab's), by its canonical
// hash on a lower tier (whose maps are keyed by it).
type aliasKey struct {
	block uint64
	src   uint32
	tier  producer.StorageTier
}

// Telemetry is the index's saturating-free diagnostic counters (workers §6). None of them
// means the state is wrong: each counts input the index refused or found redundant.
type Telemetry struct {
	// Events applied (any outcome, gated events excluded).
	Events uint64
	// StoredBlocks and RemovedBlocks count memberships added and dropped by stores,
	// removals, clears and worker removals.
	StoredBlocks  uint64
	RemovedBlocks uint64
	// DuplicateBlocks counts stored blocks the source already held on that tier under that
	// external id (workers §3.3).
	DuplicateBlocks uint64
	// UnknownRemovals counts removal ids the source did not hold on that tier (workers §3.4).
	UnknownRemovals uint64
	// UnknownSources counts removals, clears and worker removals naming a source (or worker)
	// the index holds nothing for (workers §3.5).
	UnknownSources uint64
	// ParentNotFound and InvalidSequences count rejected stores (workers §6).
	ParentNotFound   uint64
	InvalidSequences uint64
	// NotWorkerResidency counts events of the cache-owner residency domain, which hold no
	// worker's blocks and are ignored (workers §3.1); UnsupportedResidency counts events
	// rejected for an unknown or invalid residency.
	NotWorkerResidency   uint64
	UnsupportedResidency uint64
	// InvalidKinds counts events whose Kind is none of the three.
	InvalidKinds uint64
}

// Index is the worker-level index of one DC (workers §2).
//
// Invariants (checked by TestIndexMatchesModel and the property tests):
//
//   - a source entry exists iff its lineage has at least one external id, and every
//     lineage entry has at least one tier bit;
//   - source i holds canonical c on tier t (c's holder value on t names i: its slab block's on
//     the device tier, its entry's in tier t's map below) iff some external id of i's lineage
//     maps to c's block with bit t set; aliases[{c, i, t}] (c's slab position for the device
//     tier) is the number of such ids minus one, listed only when positive;
//   - held[t] of a source is the number of canonicals it holds on t;
//   - the slab's invariants hold (slab), and every block held on some tier is in it;
//   - a holder value is never 0 in a lower tier's map, and a set id's refs equal the number of
//     slab blocks and tier-map entries holding it.
//
// Failure behaviour: a store is validated before any holder value changes, and what its slab
// and lineage passes did is undone when it is refused (Index.commit), so a returned error means
// nothing of that event changed; removals and clears never fail (workers §6).
//
// Concurrency: none; one goroutine owns an Index (see Shared for concurrent readers).
type Index struct {
	ids     map[ckf.SourceKey]uint32
	srcs    []source        // by dense index; lin is nil for a free index
	keys    []ckf.SourceKey // by dense index, apart from srcs: the answer's and the sets' order read only keys
	order   []uint32        // the live dense indexes in SourceKey order (collect's key-order scan)
	freeSrc []uint32
	lastKey ckf.SourceKey          // sourceOf's one-entry cache: lastIdx is ids[lastKey]
	lastIdx int32                  // -1 when empty
	slab    slab                   // every held block, its local hash and its device holder value
	tiers   [TierCount]holderTable // the lower tiers' holder values by canonical; tiers[0] is unused
	sets    setTable
	aliases map[aliasKey]uint32
	tel     Telemetry
	prep    []prepared // the store path's working memory
	sorted  []prepared // remapsWithin's copy of a long store
	addrs   []uintptr  // the apply paths' cache lines to prefetch (prefetch.Lines)
}

// prepared is one block of a store, or of a removal found in the source's lineage.
type prepared struct {
	ext     ckf.ExternalBlockHash
	canon   ckf.CanonicalHash
	local   ckf.LocalBlockHash
	pos     uint32 // the block's slab position
	did     uint8  // the store's lineage pass: didNothing, didCreate or didAddTier
	created bool   // the store's slab pass placed the block (slab.place)
	unheld  bool   // a removal took the block's last device holder (loseDevice)
}

// New returns an empty index.
func New() *Index {
	return &Index{ids: make(map[ckf.SourceKey]uint32), lastIdx: -1, aliases: map[aliasKey]uint32{}}
}

// Telemetry returns the counters.
func (ix *Index) Telemetry() Telemetry { return ix.tel }

// sourceOf returns key's dense index, or -1.
func (ix *Index) sourceOf(key ckf.SourceKey) int32 {
	if ix.lastIdx >= 0 && ix.lastKey == key {
		return ix.lastIdx
	}
	i, ok := ix.ids[key]
	if !ok {
		return -1
	}
	ix.lastKey, ix.lastIdx = key, int32(i)
	return int32(i)
}

// addSource registers key with an empty lineage and returns its dense index.
func (ix *Index) addSource(key ckf.SourceKey) (uint32, error) {
	var i uint32
	if n := len(ix.freeSrc); n > 0 {
		i = ix.freeSrc[n-1]
		ix.freeSrc = ix.freeSrc[:n-1]
	} else {
		if len(ix.srcs) >= maxSources {
			return 0, ckf.NewEventError(ckf.EventAllocationFailed, "more than 2^31-1 sources")
		}
		i = uint32(len(ix.srcs))
		ix.srcs = append(ix.srcs, source{})
		ix.keys = append(ix.keys, ckf.SourceKey{})
	}
	ix.srcs[i] = source{lin: &lineageTable{}}
	ix.keys[i] = key
	ix.ids[key] = i
	at, _ := slices.BinarySearchFunc(ix.order, key, func(j uint32, k ckf.SourceKey) int { return ix.keys[j].Compare(k) })
	ix.order = slices.Insert(ix.order, at, i)
	ix.lastKey, ix.lastIdx = key, int32(i)
	return i, nil
}

// dropSource forgets source i, whose lineage is empty.
func (ix *Index) dropSource(i uint32) {
	key := ix.keys[i]
	at, _ := slices.BinarySearchFunc(ix.order, key, func(j uint32, k ckf.SourceKey) int { return ix.keys[j].Compare(k) })
	ix.order = slices.Delete(ix.order, at, at+1)
	delete(ix.ids, key)
	ix.srcs[i] = source{}
	ix.keys[i] = ckf.SourceKey{}
	ix.freeSrc = append(ix.freeSrc, i)
	ix.lastIdx = -1
}

// gainAll records that source i now holds each block of p whose lineage pass did something
// (prepared.did) on tier t through one more external id; the other blocks are duplicates. The
// counters are added once for the store, and a block without a holder takes source i inline
// without the holder sets (a store's first holder of a block, most of a store's blocks). On the
// device tier the holder value is the block's in the slab, at its position; a lower tier's is
// its entry in that tier's map.
func (ix *Index) gainAll(i uint32, t producer.StorageTier, p []prepared) {
	var gained, dups uint64
	if t == producer.StorageTierDevice {
		gained, dups = ix.gainDevice(i, p)
	} else {
		tm := &ix.tiers[t]
		for k := range p {
			q := &p[k]
			if q.did == didNothing {
				dups++
				continue
			}
			s := tm.upsert(uint64(q.canon))
			if s.val == 0 {
				s.val = single(i) // the sets' with(0, i)
				gained++
				continue
			}
			nv, already := ix.sets.with(s.val, i, ix.keys)
			if already {
				ix.aliases[aliasKey{uint64(q.canon), i, t}]++
				continue
			}
			s.val = nv
			gained++
		}
	}
	ix.srcs[i].held[t] += gained
	ix.tel.StoredBlocks += gained
	ix.tel.DuplicateBlocks += dups
}

// gainDevice is gainAll on the device tier: the holder values are the slab's.
func (ix *Index) gainDevice(i uint32, p []prepared) (gained, dups uint64) {
	sl := &ix.slab
	for k := range p {
		q := &p[k]
		if q.did == didNothing {
			dups++
			continue
		}
		b := sl.mut(q.pos)
		if b.val == 0 {
			b.val = single(i)
			sl.held++
			gained++
			continue
		}
		nv, already := ix.sets.with(b.val, i, ix.keys)
		if already {
			ix.aliases[aliasKey{uint64(q.pos), i, producer.StorageTierDevice}]++
			continue
		}
		b.val = nv
		gained++
	}
	return gained, dups
}

// loseAll is lose for each block of p (blocks of source i on tier t, by their slab positions),
// the counters subtracted once, and a block whose only holder is source i
// dropped without the holder sets. lose's steps are written out in the loops rather than shared
// through a function: one that the compiler does not inline cost 19 more instructions per
// removed block (3.4 %, callgrind, bench/workersprof 1048576 8).
func (ix *Index) loseAll(i uint32, t producer.StorageTier, p []prepared) {
	if t == producer.StorageTierDevice {
		ix.loseDevice(i, p)
		return
	}
	tm := &ix.tiers[t]
	only := single(i)
	var lost uint64
	for k := range p {
		c := ix.slab.at(p[k].pos).canon
		if len(ix.aliases) > 0 && ix.dropAlias(aliasKey{uint64(c), i, t}) {
			continue
		}
		at := tm.findHeld(uint64(c))
		if at < 0 {
			panic(fmt.Sprintf("workers: lineage maps to %#x on tier %v but the tier does not hold it", uint64(c), t))
		}
		s := &tm.slots[at]
		nv := uint32(0)
		if v := s.val; v != only { // else the sets' without(single(i), i)
			var was bool
			if nv, was = ix.sets.without(v, i, ix.keys); !was {
				panic(fmt.Sprintf("workers: source %d maps to %#x on tier %v but is not a holder", i, uint64(c), t))
			}
		}
		if nv == 0 {
			tm.deleteAt(at)
			ix.slab.truncate(p[k].pos, &ix.tiers) // dropped if no tier holds it and it ends its run
		} else {
			s.val = nv
		}
		lost++
	}
	ix.srcs[i].held[t] -= lost
	ix.tel.RemovedBlocks += lost
}

// loseDevice is loseAll on the device tier.
func (ix *Index) loseDevice(i uint32, p []prepared) {
	const t = producer.StorageTierDevice
	sl := &ix.slab
	only := single(i)
	freed := false
	var lost uint64
	for k := range p {
		q := &p[k]
		if len(ix.aliases) > 0 && ix.dropAlias(aliasKey{uint64(q.pos), i, t}) {
			continue
		}
		b := sl.mut(q.pos)
		nv := uint32(0)
		if v := b.val; v != only { // else the sets' without(single(i), i)
			var was bool
			if nv, was = ix.sets.without(v, i, ix.keys); !was {
				panic(fmt.Sprintf("workers: source %d maps to %#x on the device tier but is not a holder", i, uint64(b.canon)))
			}
		}
		b.val = nv
		if nv == 0 {
			sl.held--
			q.unheld, freed = true, true
		}
		lost++
	}
	ix.srcs[i].held[t] -= lost
	ix.tel.RemovedBlocks += lost
	// The blocks nobody holds any longer are dropped after the loop: a removal that takes a run's
	// blocks last first (the order engines evict in) drops them all at its first, the run's last
	// block, and finds the others gone.
	if freed {
		for k := range p {
			if p[k].unheld {
				sl.truncate(p[k].pos, &ix.tiers)
			}
		}
	}
}

// dropAlias takes one external id off k's alias count and reports whether k had one (then the
// membership stays).
func (ix *Index) dropAlias(k aliasKey) bool {
	n := ix.aliases[k]
	switch n {
	case 0:
		return false
	case 1:
		delete(ix.aliases, k)
	default:
		ix.aliases[k] = n - 1
	}
	return true
}

// lose records that one external id of source i mapping to the block at slab position pos on
// tier t is gone.
func (ix *Index) lose(i uint32, t producer.StorageTier, pos uint32) {
	one := [1]prepared{{pos: pos}}
	ix.loseAll(i, t, one[:])
}

// Sources returns every source the index holds blocks for, in (worker, rank) order.
func (ix *Index) Sources() []ckf.SourceKey {
	out := make([]ckf.SourceKey, len(ix.order))
	for j, i := range ix.order { // ix.order is already in key order
		out[j] = ix.keys[i]
	}
	return out
}

// Holds reports whether source src holds canonical c on tier t. On the device tier it reads the
// source's lineage, O(its external ids): a block that is not its run's head is found by its
// position only (slab), which an id's lineage entry gives.
func (ix *Index) Holds(src ckf.SourceKey, t producer.StorageTier, c ckf.CanonicalHash) bool {
	i, ok := ix.ids[src]
	if !ok || int(t) >= TierCount {
		return false
	}
	if t != producer.StorageTierDevice {
		return ix.sets.has(ix.tiers[t].get(uint64(c)), i, ix.keys)
	}
	for _, e := range ix.srcs[i].lin.all() {
		if b := ix.slab.at(e.position()); b.canon == c && e.tiers&(1<<producer.StorageTierDevice) != 0 {
			return ix.sets.has(b.val, i, ix.keys)
		}
	}
	return false
}

// Stats is a size view of the index.
type Stats struct {
	Sources     int
	Memberships [TierCount]uint64 // (source, canonical) pairs per tier
	Canonicals  [TierCount]int    // canonicals with at least one holder per tier
	HolderSets  int               // interned sets of two or more holders
	Aliases     int               // memberships held through more than one external id
	// Bytes is the tables' allocated memory (lineages, the slab, tier maps, holder sets), by
	// capacity.
	Bytes uint64
}

// Stats computes the stats (O(sources + holder sets)).
func (ix *Index) Stats() Stats {
	st := Stats{Sources: len(ix.ids), HolderSets: ix.sets.live(), Aliases: len(ix.aliases)}
	st.Canonicals[producer.StorageTierDevice] = ix.slab.held
	st.Bytes = ix.slab.bytes()
	for t := 1; t < TierCount; t++ {
		st.Canonicals[t] = ix.tiers[t].Len()
		st.Bytes += ix.tiers[t].Bytes()
	}
	for i := range ix.srcs {
		s := &ix.srcs[i]
		for t := range s.held {
			st.Memberships[t] += s.held[t]
		}
		st.Bytes += s.lin.Bytes()
	}
	st.Bytes += ix.sets.bytes() + uint64(cap(ix.srcs))*uint64(unsafe.Sizeof(source{})) + uint64(cap(ix.keys))*uint64(unsafe.Sizeof(ckf.SourceKey{}))
	return st
}
