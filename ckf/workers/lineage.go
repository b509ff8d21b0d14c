package workers

import (
	"iter"
	"math/bits"
	"math/rand/v2"
	"unsafe"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/ckf/internal/hugepage"
	"github.com/ckf-stream/ckf-stream/ckf/internal/prefetch"
)

// lineageTable is one source's lineage (workers §2.1): external id → lineageEntry, a cuckoo
// hash table of 64-byte buckets (one cache line each) of lineageWays slots, specialised to this
// one use (workers §8):
//
//   - a bucket keeps its four ways' ids together, then their block positions, then their tiers
//     (13 bytes a way, 53 of the line), so that a lookup compares four aligned words; its used
//     mask (in the line's padding) names its live ways, so that a lookup tests a way's liveness
//     only when its key matches (an empty way's key is 0) and an insertion finds the free ways in
//     one load, and every 64-bit id, 0 included, is an ordinary key. A live entry always holds
//     at least one tier (workers §2.1), so its tiers are not 0 either;
//   - an id has two buckets (buckets2: its mixed hash, and the hash turned by half its width,
//     each scaled to the bucket count) and sits in one of them, so a lookup reads at most two
//     lines, and a store or removal prefetches both before it needs them. The Robin Hood table
//     this replaces (in 2^k slots at up to 7/8 full, 0.71 at the fixture) probed a run of about
//     six 17-byte slots per insertion, two or three lines not known in advance, and computed the
//     home of every slot it passed; one bucket per id with an overflow chain (tried) read 1.6–3.8
//     buckets per new id at 0.6–0.74 full, because buckets of three overflow often (performance
//     §9.1);
//   - an insertion takes the emptier of the two buckets; when both are full it moves one of their
//     eight entries to that entry's other bucket (moveOne: the eight other buckets prefetched
//     together), and only when those are full too walks at random, entry after entry (at most
//     lineageMaxKicks moves), growing the table should the walk not end;
//   - a deletion empties its way; nothing moves, so a slot index (slotIndex: the bucket times
//     four plus the way) stays valid until the next insertion of a new id.
//
// Growth and shrinking: the table grows to lineageGrowBy times its buckets (any count, not a
// power of two) when an insertion would take it past lineageMaxLoad of its slots, and shrinks to
// twice its entries' slots when a deletion leaves it under 1/16 full, so a source's clear gives
// memory back. With buckets of three 17-byte slots (when an entry kept its canonical hash), one
// new id in thirteen found both of its buckets full at 0.70, and 0.80 was slower (performance
// §9.1); buckets of four fill further before they overflow. Each table draws a random seed,
// mixed into both buckets of every id, so ids cannot be aimed at one bucket; no result depends
// on it.
//
// Memory: 64 bytes per four ways, 0.56–0.70 full between growths: 23–29 bytes per id.
// BenchmarkMembershipMemory measures the whole index.
type lineageTable struct {
	buckets  []lineageBucket
	shared   bool // a LineageSnapshot reads buckets too: copied before the first write (unshare)
	live     int
	growAt   int
	shrinkAt int // a deletion that leaves fewer ids shrinks the table (0: never)
	seed     uint64
	walk     uint64 // the random walk's state (xorshift)
}

// lineageWays is the number of ways in a bucket: four ids, positions and tiers fill 52 bytes of
// one 64-byte line.
const lineageWays = 4

type lineageBucket struct {
	keys  [lineageWays]uint64 // the ways' external ids; a free way's is 0
	pos   [lineageWays]uint32 // their entries' block positions
	tiers [lineageWays]uint8  // their entries' tiers
	used  uint8               // bit w: way w holds an id (its tiers are not 0, or it was just placed)
	_     [11]byte            // to the line
}

// lineageSlot is one way's id and entry, as moves carry them from bucket to bucket.
type lineageSlot struct {
	key uint64
	lineageEntry
}

func (s *lineageSlot) k() uint64 { return s.key }

// slot returns way w's id and entry.
func (b *lineageBucket) slot(w int) lineageSlot {
	return lineageSlot{key: b.keys[w], lineageEntry: lineageEntry{pos: b.pos[w], tiers: b.tiers[w]}}
}

// put writes c into way w and marks it live.
func (b *lineageBucket) put(w int, c *lineageSlot) {
	b.keys[w], b.pos[w], b.tiers[w] = c.key, c.pos, c.tiers
	b.used |= 1 << w
}

// drop empties way w.
func (b *lineageBucket) drop(w int) {
	b.keys[w], b.pos[w], b.tiers[w] = 0, 0, 0
	b.used &^= 1 << w
}

// lineagePlaced marks a slot insertFull has just taken (no storage tier's bit:
// producer.StorageTier has four values).
const lineagePlaced = 0x80

// Load bounds and the random walk's length of a lineage table (see the type's comment).
const (
	lineageMaxLoad  = 0.70
	lineageGrowBy   = 1.25
	lineageMinLoad  = 1.0 / 16
	lineageMaxKicks = 256
)

// buckets2 returns k's two buckets among n: k's mixed hash (as mixHome's) and the hash rotated
// by 32 bits, each scaled into [0, n) by the high half of its product with n. The two may be
// equal.
func buckets2(k, seed, n uint64) (uint64, uint64) {
	hi, lo := bits.Mul64(k^seed, mixFold)
	h := hi ^ lo
	b1, _ := bits.Mul64(h, n)
	b2, _ := bits.Mul64(bits.RotateLeft64(h, 32), n)
	return b1, b2
}

// Len is the number of ids.
func (l *lineageTable) Len() int { return l.live }

// Bytes is the memory the buckets take.
func (l *lineageTable) Bytes() uint64 {
	if l == nil {
		return 0
	}
	return uint64(len(l.buckets)) * uint64(unsafe.Sizeof(lineageBucket{}))
}

// in returns the way of bucket b that holds k, or -1. The keys are compared first: they rarely
// match, so the branches are predicted, and an empty way (whose key is 0) is excluded by the used
// mask only when one does.
func (b *lineageBucket) in(k uint64) int {
	u := b.used
	switch {
	case b.keys[0] == k && u&1 != 0:
		return 0
	case b.keys[1] == k && u&2 != 0:
		return 1
	case b.keys[2] == k && u&4 != 0:
		return 2
	case b.keys[3] == k && u&8 != 0:
		return 3
	}
	return -1
}

// taken is bucket b's live ways as a mask (bit w: way w holds an id).
func (b *lineageBucket) taken() uint { return uint(b.used) }

// free returns the first free way of bucket b, or -1 when it is full.
func (b *lineageBucket) free() int {
	if m := b.taken(); m != 1<<lineageWays-1 {
		return bits.TrailingZeros(^m)
	}
	return -1
}

// find returns id's slot index, or -1 (also for a nil table: a source the index does not know).
// An index is valid until the next insertion of a new id.
func (l *lineageTable) find(id ckf.ExternalBlockHash) int {
	if l == nil || l.live == 0 {
		return -1
	}
	k := uint64(id)
	b1, b2 := buckets2(k, l.seed, uint64(len(l.buckets)))
	if w := l.buckets[b1].in(k); w >= 0 {
		return slotIndex(b1, w)
	}
	if w := l.buckets[b2].in(k); w >= 0 {
		return slotIndex(b2, w)
	}
	return -1
}

// slotIndex is the index of way w of bucket b.
func slotIndex(b uint64, w int) int { return int(b)<<2 | w }

// at returns the entry in slot i (an index from find).
func (l *lineageTable) at(i int) lineageEntry {
	b := &l.buckets[i>>2]
	return lineageEntry{pos: b.pos[i&3], tiers: b.tiers[i&3]}
}

// lookup returns id's entry, and whether the table has id.
func (l *lineageTable) lookup(id ckf.ExternalBlockHash) (lineageEntry, bool) {
	if i := l.find(id); i >= 0 {
		return l.at(i), true
	}
	return lineageEntry{}, false
}

// lines returns the addresses of id's two buckets, for prefetch.Lines; the table must have
// buckets. The addresses are only hints, computed from the buckets' base without a bounds check.
func (l *lineageTable) lines(id ckf.ExternalBlockHash) (uintptr, uintptr) {
	b1, b2 := buckets2(uint64(id), l.seed, uint64(len(l.buckets)))
	base := uintptr(unsafe.Pointer(unsafe.SliceData(l.buckets)))
	const size = unsafe.Sizeof(lineageBucket{})
	return base + uintptr(b1)*size, base + uintptr(b2)*size
}

// gainTier is a store's lineage pass (workers §3.2) over p, the store's blocks on the tier of
// bit: each id's entry is found or made, and checked against the block's canonical. Each
// block's did must be didNothing on entry; gainTier sets it to what it did (didCreate,
// didAddTier, or didNothing for a duplicate). It returns -1, or the index of the first block
// whose id the source maps to another canonical: the pass stopped there, and the blocks' did
// fields name exactly what was done (the blocks from that one on keep didNothing), so that
// rollback over all of p undoes it. An id that appears twice in p meets its own earlier entry,
// so a repeat at another canonical is a remap too and one at the same canonical a duplicate.
//
// The table grows first, as far as p needs should every id be new, so that the loop keeps the
// buckets in registers; only an insertion whose buckets are both full calls out (insertFull,
// which can grow the table again). Deferring those insertions to the end of the loop, with the
// lines moveOne reads prefetched when they are met, was measured and not kept (performance
// §9.1).
func (l *lineageTable) gainTier(p []prepared, bit uint8) int {
	if l.live+len(p) > l.growAt {
		l.resize(max(uint64(float64(len(l.buckets))*lineageGrowBy), bucketsFor(l.live+len(p))))
	}
	if l.shared {
		l.unshare()
	}
	buckets, seed := l.buckets, l.seed
	for k := range p {
		q := &p[k]
		key := uint64(q.ext)
		b1, b2 := buckets2(key, seed, uint64(len(buckets)))
		x, y := &buckets[b1], &buckets[b2]
		w := x.in(key)
		if w < 0 {
			x, w = y, y.in(key)
		}
		if w >= 0 {
			// Found: another position is another block, so another canonical (lineageEntry): a
			// remap, nothing done; else the tier added (didAddTier) or already there (didNothing).
			switch {
			case x.pos[w] != q.pos:
				return k
			case x.tiers[w]&bit == 0:
				x.tiers[w] |= bit
				q.did = didAddTier
			}
			continue
		}
		q.did = didCreate
		x = &buckets[b1]
		second, w, ok := freeWay(x.taken(), y.taken())
		if !ok {
			i := l.insertFull(q.ext, b1, b2)
			buckets = l.buckets
			b := &buckets[i>>2]
			b.pos[i&3], b.tiers[i&3] = q.pos, bit
			continue
		}
		b := x
		if second {
			b = y
		}
		b.keys[w], b.pos[w], b.tiers[w] = key, q.pos, bit
		b.used |= 1 << w
		l.live++
	}
	return -1
}

// rollback undoes gainTier's pass over p (a store's blocks, whose did fields name what the
// pass did to each), last first, so that a rejected store leaves the lineage as it found it.
// Slots move as others are inserted, so each is found again by its id. The buckets are the
// table's own: gainTier copied any a snapshot shared (unshare).
func (l *lineageTable) rollback(p []prepared, bit uint8) {
	for k := len(p) - 1; k >= 0; k-- {
		switch q := &p[k]; q.did {
		case didCreate:
			l.delete(q.ext)
		case didAddTier:
			i := l.find(q.ext)
			l.buckets[i>>2].tiers[i&3] &^= bit
		}
	}
}

// takeTier is a removal's lineage pass (workers §3.4): tier bit is taken off each id of ids
// that holds it, an id left with no tier is deleted, and the id and its block's slab position
// appended to p. It returns p and the number of ids that did not hold the tier (unknown
// removals). The same id twice finds its entry gone or without the tier the second time. A table
// left under lineageMinLoad full shrinks once, after the loop. With sl not nil, the slab's line
// of each position found (the block the removal goes on to change) is prefetched, eight lines at
// a time, soon after their addresses are known, so that they arrive while the pass goes on. One
// prefetch.Lines call per block cost about 6 more instructions a removed block, for no time that
// alternating runs could tell apart (performance §9.1).
func (l *lineageTable) takeTier(ids []ckf.ExternalBlockHash, bit uint8, p []prepared, sl *slab) ([]prepared, int) {
	if l.shared {
		l.unshare()
	}
	buckets, seed := l.buckets, l.seed
	if len(buckets) == 0 {
		return p, len(ids)
	}
	unknown := 0
	var lines [8]uintptr // slab lines not yet prefetched: eight positions' at a time
	nl := 0
	for _, id := range ids {
		key := uint64(id)
		b1, b2 := buckets2(key, seed, uint64(len(buckets)))
		b := &buckets[b1]
		w := b.in(key)
		if w < 0 {
			b = &buckets[b2]
			w = b.in(key)
		}
		if w < 0 || b.tiers[w]&bit == 0 {
			unknown++
			continue
		}
		pos := b.pos[w]
		if sl != nil {
			lines[nl] = sl.addr(pos)
			if nl++; nl == len(lines) {
				prefetch.Lines(lines[:])
				nl = 0
			}
		}
		p = append(p, prepared{ext: id, pos: pos})
		if b.tiers[w] != bit {
			b.tiers[w] &^= bit
			continue
		}
		b.drop(w)
		l.live--
	}
	if nl > 0 {
		prefetch.Lines(lines[:nl])
	}
	if l.live < l.shrinkAt {
		l.shrink()
	}
	return p, unknown
}

// waysTaken is the number of live ways in a bucket's mask (taken).
func waysTaken(m uint) uint { return uint(bits.OnesCount8(uint8(m))) }

// freeWay is the insertion policy of an id whose buckets' live ways are m1 and m2: the first
// free way of the emptier bucket, the first bucket on a tie (second: the second bucket), chosen
// without a branch; ok is false when both are full.
func freeWay(m1, m2 uint) (second bool, w int, ok bool) {
	n1, n2 := waysTaken(m1), waysTaken(m2)
	m := m1
	if n2 < n1 {
		m, second = m2, true
	}
	return second, bits.TrailingZeros8(^uint8(m)), n1 < lineageWays || n2 < lineageWays
}

// insertFull is gainTier's insertion of the absent id when both of its buckets (b1, b2) are
// full: moveOne, then a random walk, growing the table should the walk not end. It returns the
// new entry's slot index; the entry holds no position and only lineagePlaced in its tiers, and
// the caller sets it.
func (l *lineageTable) insertFull(id ckf.ExternalBlockHash, b1, b2 uint64) int {
	c := lineageSlot{key: uint64(id), lineageEntry: lineageEntry{tiers: lineagePlaced}}
	for {
		if i, moved := l.placeIn(&c, b1, b2); i >= 0 {
			if moved { // the walk may have moved the new entry on
				return l.find(id)
			}
			return i
		}
		l.resize(max(uint64(float64(len(l.buckets))*lineageGrowBy), uint64(len(l.buckets))+1))
		b1, b2 = buckets2(c.key, l.seed, uint64(len(l.buckets)))
	}
}

// place inserts c, whose id is absent, and returns the slot index it took and whether other
// entries moved (a random walk, which may have moved c on too: the slot is then only where c
// went first); -1 when the walk did not end: the table is then as before, and must grow. An
// entry c meets when both of its buckets are full is moved to its other bucket, which can move
// another in turn.
func (l *lineageTable) place(c *lineageSlot) (int, bool) {
	b1, b2 := buckets2(c.key, l.seed, uint64(len(l.buckets)))
	return l.placeIn(c, b1, b2)
}

// placeIn is place with c's buckets b1 and b2 given.
func (l *lineageTable) placeIn(c *lineageSlot, b1, b2 uint64) (int, bool) {
	if second, w, ok := freeWay(l.buckets[b1].taken(), l.buckets[b2].taken()); ok {
		b := b1
		if second {
			b = b2
		}
		l.buckets[b].put(w, c)
		l.live++
		return slotIndex(b, w), false
	}
	if i := l.moveOne(c, b1, b2); i >= 0 {
		return i, false
	}
	return l.walkFrom(c, b1)
}

// moveOne is placeIn's first resort when both of c's buckets are full: the other buckets of
// their eight entries are prefetched together, and the first entry whose other bucket has a free
// way moves there, c taking its slot, whose index it returns. The eight lines arrive in one wait
// where a random walk waits for each of its steps in turn. -1 when all eight are full.
func (l *lineageTable) moveOne(c *lineageSlot, b1, b2 uint64) int {
	n := uint64(len(l.buckets))
	base := uintptr(unsafe.Pointer(unsafe.SliceData(l.buckets)))
	var other [2 * lineageWays]uint64
	var addrs [2 * lineageWays]uintptr
	for j, b := range [2]uint64{b1, b2} {
		for w := range lineageWays {
			x1, x2 := buckets2(l.buckets[b].keys[w], l.seed, n)
			o := x1
			if x1 == b {
				o = x2
			}
			other[j*lineageWays+w] = o
			addrs[j*lineageWays+w] = base + uintptr(o)*unsafe.Sizeof(lineageBucket{})
		}
	}
	prefetch.Lines(addrs[:])
	for j, b := range [2]uint64{b1, b2} {
		for w := range lineageWays {
			o := other[j*lineageWays+w]
			if o == b {
				continue // both of the entry's buckets are this one
			}
			if fw := l.buckets[o].free(); fw >= 0 {
				moved := l.buckets[b].slot(w)
				l.buckets[o].put(fw, &moved)
				l.buckets[b].put(w, c)
				l.live++
				return slotIndex(b, w)
			}
		}
	}
	return -1
}

// walkFrom is place's random walk from bucket b, both of c's buckets being full: each step puts
// the carried entry into b in place of a random way's entry, which then goes to its other
// bucket. The path is recorded so that a walk that does not end can be undone. (Apart from
// place so that only a walk pays for clearing the path.) It returns the slot c went to first,
// and true, or -1 when the walk did not end.
func (l *lineageTable) walkFrom(c *lineageSlot, b uint64) (int, bool) {
	n := uint64(len(l.buckets))
	var path [lineageMaxKicks]uint32
	carried := *c
	if l.walk == 0 {
		l.walk = l.seed | 1
	}
	for step := range lineageMaxKicks {
		l.walk ^= l.walk << 13
		l.walk ^= l.walk >> 7
		l.walk ^= l.walk << 17
		w := int(l.walk % lineageWays)
		path[step] = uint32(slotIndex(b, w))
		out := l.buckets[b].slot(w)
		l.buckets[b].put(w, &carried)
		carried = out
		x1, x2 := buckets2(carried.key, l.seed, n)
		if x1 == b {
			b = x2
		} else {
			b = x1
		}
		if fw := l.buckets[b].free(); fw >= 0 {
			l.buckets[b].put(fw, &carried)
			l.live++
			return int(path[0]), true
		}
	}
	// Undo, last step first: each slot of the path takes back the entry it held.
	for step := lineageMaxKicks - 1; step >= 0; step-- {
		i := path[step]
		out := l.buckets[i>>2].slot(int(i & 3))
		l.buckets[i>>2].put(int(i&3), &carried)
		carried = out
	}
	return -1, false
}

// deleteAt removes the entry in slot i (an index from find). The buckets must be the table's own
// (not shared): its one caller is rollback, after gainTier.
func (l *lineageTable) deleteAt(i int) {
	l.buckets[i>>2].drop(i & 3)
	l.live--
	if l.live < l.shrinkAt {
		l.shrink()
	}
}

// shrink is deleteAt's resize when the table is left under lineageMinLoad full.
func (l *lineageTable) shrink() { l.resize(bucketsFor(2 * l.live)) }

// delete removes id when present.
func (l *lineageTable) delete(id ckf.ExternalBlockHash) {
	if i := l.find(id); i >= 0 {
		l.deleteAt(i)
	}
}

// all yields every id and its entry, in an unspecified order; the table must not change
// meanwhile.
func (l *lineageTable) all() iter.Seq2[ckf.ExternalBlockHash, lineageEntry] {
	return func(yield func(ckf.ExternalBlockHash, lineageEntry) bool) {
		for b := range l.buckets {
			bk := &l.buckets[b]
			for w := range lineageWays {
				if bk.used&(1<<w) != 0 && !yield(ckf.ExternalBlockHash(bk.keys[w]), lineageEntry{pos: bk.pos[w], tiers: bk.tiers[w]}) {
					return
				}
			}
		}
	}
}

// bucketsFor is the fewest buckets that hold n ids at most lineageMaxLoad full (at least one).
func bucketsFor(n int) uint64 {
	return max(1, uint64(float64(n)/(lineageMaxLoad*lineageWays))+1)
}

// resize moves every entry into a table of n buckets or more: should an entry's random walk not
// end, it starts again with lineageGrowBy times as many.
func (l *lineageTable) resize(n uint64) {
	old := l.buckets
	if old == nil {
		l.seed = rand.Uint64()
	}
	for !l.rehash(old, n) {
		n = max(uint64(float64(n)*lineageGrowBy), n+1)
	}
}

// share marks the buckets as read by a LineageSnapshot from now on, and returns them: the table
// no longer writes them (copy on write, workers §2.2). A snapshot of every source costs
// O(sources) where a copy of every table would cost O(rows) while the index waits.
func (l *lineageTable) share() []lineageBucket {
	l.shared = true
	return l.buckets
}

// unshare gives the table a copy of its buckets of its own, before its first write after share:
// one copy per source and snapshot, paid by the first event that writes the source's lineage,
// not by the snapshot (BenchmarkLineageRows' cow-max-ms is the longest such event; the fresh
// pages' faults cost more than the copy).
func (l *lineageTable) unshare() {
	b := make([]lineageBucket, len(l.buckets))
	hugepage.Advise(b)
	copy(b, l.buckets)
	l.buckets, l.shared = b, false
}

// reserve grows the table, if it must, so that it holds n ids without growing again.
func (l *lineageTable) reserve(n int) {
	if n > l.growAt {
		l.resize(bucketsFor(n))
	}
}

func (l *lineageTable) rehash(old []lineageBucket, n uint64) bool {
	l.buckets, l.shared = make([]lineageBucket, n), false
	hugepage.Advise(l.buckets)
	l.growAt, l.live = int(float64(n*lineageWays)*lineageMaxLoad), 0
	l.shrinkAt = 0
	if n > 64 {
		l.shrinkAt = int(float64(n*lineageWays) * lineageMinLoad)
	}
	for b := range old {
		for w := range lineageWays {
			if old[b].used&(1<<w) != 0 {
				s := old[b].slot(w)
				if at, _ := l.place(&s); at < 0 {
					return false
				}
			}
		}
	}
	return true
}
