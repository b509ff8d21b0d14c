package workers

import (
	"iter"
	"math/bits"
	"slices"
	"unsafe"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/ckf/internal/hugepage"
)

// slab is where the index keeps its blocks (workers §8): every canonical hash that some source
// holds on some tier is one slabBlock, at a position that does not change while the block
// lives, with its local hash and its device holder value. Blocks are laid out in store order,
// in runs: a run is a range of positions whose first block (its head) is listed in the head map
// (canonical → position) and each of whose other blocks is the child of the block before it.
//
// Invariants (checkSlab in the tests):
//
//   - a canonical hash is at most one block of the slab;
//   - a block that is not the head of its run has canonical ckf.CanonicalChild(c, local), where
//     c is the canonical of the block before it (same run) and local is its own local hash;
//   - the head map lists exactly the runs' heads;
//   - a head placed as the child of a block in the slab (a branch: slabRun.parent) is counted in
//     its parent's entry of branches, and a block is marked (branchBit) iff it has an entry, so
//     that it stays while it has head children; a head placed without a known parent (a
//     restored row, slabRun.orphan) is counted in orphans. A child's head is therefore found
//     without a lookup when its parent has no branch mark and there are no orphans: it is not
//     in the slab (find);
//   - the last block of every run is held (on some tier) by some source or marked, once a store
//     is done: a block that loses its last holder is dropped when it is its run's last, along
//     with the unheld blocks before it (truncate); one within the run stays, unheld, so that the
//     chain through it stays whole.
//
// What the layout is for: a chain's blocks are found by following the slab rather than by a
// lookup each. A block whose parent is at position p is at p+1 or is a head (the invariants:
// were it neither, its parent would be right before it), so a store or a query that knows its
// parent's position compares one slot, in the line it has just read, and looks up the head map
// only where the parent has a branch (or a restored row may be the block). A store appends what
// is new to the slab as one run; a removal changes a holder value where the source's lineage
// says the block is. Where a query's blocks follow a run, their local hashes are compared in
// order (MatchLocal) and no canonical is hashed.
//
// Allocation: positions are taken in ranges of a power of two (a run's capacity, 1 to
// 1<<runMaxClass blocks), from a free list of that size or else from the end of the slab, in
// pages of slabPageSize blocks that no range straddles (so growth never copies the slab but the
// first page, made small and doubled as it fills, so that a small index stays small); a run
// whose blocks are all dropped gives its range back to its free list. A run that ends where a
// store's chain continues takes the new blocks into its unused capacity, so a conversation's next
// turn extends its run. Pages are never returned: the slab keeps the most blocks it has held
// (Stats.Bytes counts them).
type slab struct {
	pages    [][]slabBlock
	runs     []slabRun // a block's run field is 1 + its index here (and branchBit)
	freeRuns []uint32  // indexes of runs not in use
	free     [runMaxClass + 1][]uint32
	next     uint32            // the first position never handed out
	heads    holderTable       // a run head's canonical → its position + 1 (in the value)
	branches map[uint32]uint32 // a marked block's position → the runs whose heads are its children
	orphans  int               // runs whose heads were placed without a parent (slabRun.orphan)
	held     int               // blocks with a device holder (val != 0)
	blocks   int               // blocks in the slab
	// shared[i] marks page i as read by a LineageSnapshot (share): the slab copies it before its
	// next write to it (mut, page), so that the snapshot's canonicals stay as they were.
	shared  []bool
	nshared int // pages marked
}

// slabBlock is one block of the slab: 24 bytes, so a 64-byte line holds two and a half.
type slabBlock struct {
	canon ckf.CanonicalHash
	local ckf.LocalBlockHash
	val   uint32 // the device tier's holder value (workers §8); 0: none
	// run is 1 + the block's run index (0: the position is not in use), with branchBit set when
	// the heads of other runs are the block's children (slab.branches).
	run uint32
}

// branchBit marks a block with head children in slabBlock.run; run indexes stay below it.
const branchBit = 1 << 31

// id is the block's run field without the mark: 1 + its run index, 0 for a position not in use.
func (b *slabBlock) id() uint32 { return b.run &^ branchBit }

// sameRun reports whether blocks a and b are in the same run (b in use).
func sameRun(a, b *slabBlock) bool { return (a.run^b.run)<<1 == 0 }

// slabRun is one run: blocks start to start+n-1, in a range of 1<<class positions.
type slabRun struct {
	start  uint32
	n      uint32
	parent uint32 // the position of the head's parent when placed as its child (noPos: none)
	class  uint8
	orphan bool // the head was placed without a known parent (a restored row)
}

const (
	slabPageBits = 16
	slabPageSize = 1 << slabPageBits
	slabPageMask = slabPageSize - 1
	runMaxClass  = 10 // a run holds at most 1024 blocks; a longer chain is several runs
	// slabFirstPage is the first page's length when made: it doubles up to slabPageSize as the
	// slab fills it, so that a small index does not take a whole page.
	slabFirstPage = 256
	// noPos is a position that names no block.
	noPos = ^uint32(0)
	// slabMaxPositions bounds the slab (48 GiB of blocks) so that no position reaches noPos and
	// no run index, a run having a position at least, reaches branchBit.
	slabMaxPositions = 1<<31 - 2*slabPageSize
)

// at returns the block at position pos (a position in use, or a free one of an allocated page).
func (s *slab) at(pos uint32) *slabBlock {
	return &s.pages[pos>>slabPageBits][pos&slabPageMask]
}

// mut returns the block at position pos for writing: its page is copied first when a snapshot
// shares it (share).
func (s *slab) mut(pos uint32) *slabBlock {
	if s.nshared != 0 {
		s.own(pos >> slabPageBits)
	}
	return &s.pages[pos>>slabPageBits][pos&slabPageMask]
}

// page returns page i for writing (as mut).
func (s *slab) page(i uint32) []slabBlock {
	if s.nshared != 0 {
		s.own(i)
	}
	return s.pages[i]
}

// own copies page i when a snapshot shares it: one copy per page and snapshot, paid by the first
// write to the page after the snapshot (workers §2.2).
func (s *slab) own(i uint32) {
	if !s.shared[i] {
		return
	}
	pg := make([]slabBlock, len(s.pages[i]))
	hugepage.Advise(pg)
	copy(pg, s.pages[i])
	s.pages[i], s.shared[i] = pg, false
	s.nshared--
}

// share marks every page as read by a snapshot from now on and returns them: the slab no longer
// writes them (copy on write, workers §2.2).
func (s *slab) share() [][]slabBlock {
	for i := range s.shared {
		s.shared[i] = true
	}
	s.nshared = len(s.shared)
	return slices.Clone(s.pages)
}

// runRest returns pos's page and the blocks of pos's run after it (pos in use).
func (s *slab) runRest(pos uint32) ([]slabBlock, []slabBlock) {
	pg := s.pages[pos>>slabPageBits]
	r := &s.runs[pg[pos&slabPageMask].id()-1]
	end := (r.start + r.n) & slabPageMask
	if end == 0 {
		end = slabPageSize // the run ends its page
	}
	return pg, pg[pos&slabPageMask+1 : end]
}

// addr is the address of pos's block, for prefetch.Lines: a hint computed without a bounds
// check beyond the page's.
func (s *slab) addr(pos uint32) uintptr {
	pg := s.pages[pos>>slabPageBits]
	return uintptr(unsafe.Pointer(unsafe.SliceData(pg))) + uintptr(pos&slabPageMask)*unsafe.Sizeof(slabBlock{})
}

// room reports whether n more blocks can be placed without the slab's positions running out.
func (s *slab) room(n int) bool {
	return uint64(s.next)+uint64(n)<<1+slabPageSize <= slabMaxPositions
}

// find returns the position of canonical c, or noPos: the block after prev when it continues
// prev's run with canonical c, else c's head. prev is the position of c's parent (noPos when c
// is a root or its parent is not in the slab): then, by the slab's invariants, c is at prev+1 or
// a head, and a head only when prev is marked or some head is an orphan, so find is exact and
// looks the head map up only then.
func (s *slab) find(prev uint32, c ckf.CanonicalHash) uint32 {
	if prev != noPos {
		pg := s.pages[prev>>slabPageBits]
		o := prev & slabPageMask
		pb := &pg[o]
		if int(o)+1 < len(pg) {
			if nb := &pg[o+1]; sameRun(nb, pb) && nb.canon == c {
				return prev + 1
			}
		}
		if pb.run&branchBit == 0 && s.orphans == 0 {
			return noPos
		}
	}
	return s.head(c)
}

// place adds block (c, local), absent from the slab, with no holder, and returns its position:
// right after prev when prev is the last block of a run with room (c is then prev's child), else
// as the head of a new run of capacity for want blocks (the blocks of the store still to place),
// a branch of prev when prev is a position, an orphan when orphan is set (a block whose parent is
// not known: prev is noPos), else a root.
func (s *slab) place(prev uint32, c ckf.CanonicalHash, local ckf.LocalBlockHash, want int, orphan bool) uint32 {
	s.blocks++
	if prev != noPos {
		pb := s.at(prev)
		r := &s.runs[pb.id()-1]
		if prev == r.start+r.n-1 && r.n < 1<<r.class {
			r.n++
			*s.mut(prev + 1) = slabBlock{canon: c, local: local, run: pb.id()}
			return prev + 1
		}
		s.mut(prev).run |= branchBit
		if s.branches == nil {
			s.branches = map[uint32]uint32{}
		}
		s.branches[prev]++
	}
	class := uint8(0)
	if want > 1 {
		class = uint8(min(bits.Len(uint(want-1)), runMaxClass))
	}
	start := s.alloc(class)
	id := reuse(&s.freeRuns, &s.runs)
	s.runs[id] = slabRun{start: start, n: 1, parent: prev, class: class, orphan: orphan}
	if orphan {
		s.orphans++
	}
	*s.mut(start) = slabBlock{canon: c, local: local, run: id + 1}
	s.heads.upsert(uint64(c)).val = start + 1
	return start
}

// placeRun places the blocks of p, the children one after another of the block just placed at
// pos (so absent from the slab while there are no orphans), after it in its run for as long as
// the run has room, and returns how many it placed (prepared.pos and created set).
func (s *slab) placeRun(pos uint32, p []prepared) int {
	b := s.at(pos)
	id := b.id()
	r := &s.runs[id-1]
	room := min(len(p), int(uint32(1)<<r.class-r.n))
	if room == 0 {
		return 0
	}
	// The run's range lies in one page, so its free positions follow pos in pos's page.
	blocks := s.page(pos >> slabPageBits)[pos&slabPageMask+1:][:room]
	for k := range blocks {
		q := &p[k]
		blocks[k] = slabBlock{canon: q.canon, local: q.local, run: id}
		q.pos, q.created = pos+1+uint32(k), true
	}
	r.n += uint32(room)
	s.blocks += room
	return room
}

// alloc returns the first position of a free range of 1<<class positions.
func (s *slab) alloc(class uint8) uint32 {
	if l := s.free[class]; len(l) > 0 {
		p := l[len(l)-1]
		s.free[class] = l[:len(l)-1]
		return p
	}
	size := uint32(1) << class
	if s.next&slabPageMask+size > slabPageSize {
		// The page's rest cannot hold the range: it goes to the free lists, in ranges of the
		// largest sizes that fit.
		for rest := slabPageSize - s.next&slabPageMask; rest > 0; {
			c := min(bits.Len32(rest)-1, runMaxClass)
			s.free[c] = append(s.free[c], s.next)
			s.next += 1 << c
			rest -= 1 << c
		}
	}
	i := int(s.next >> slabPageBits)
	if i == len(s.pages) {
		n := slabPageSize
		if i == 0 {
			n = slabFirstPage
		}
		s.pages = append(s.pages, make([]slabBlock, n))
		hugepage.Advise(s.pages[i])
		s.shared = append(s.shared, false)
	}
	if need := int(s.next&slabPageMask + size); need > len(s.pages[i]) {
		// Only the first page starts small; it doubles, copied, as the slab fills it.
		n := len(s.pages[i])
		for n < need {
			n *= 2
		}
		pg := make([]slabBlock, min(n, slabPageSize))
		hugepage.Advise(pg)
		copy(pg, s.pages[i])
		s.pages[i] = pg
		if s.shared[i] {
			s.shared[i] = false
			s.nshared--
		}
	}
	p := s.next
	s.next += size
	return p
}

// truncate drops the block at pos, which nobody holds any longer, when it is its run's last
// block, and the unheld blocks before it (held: a device holder, or an entry in one of the lower
// tiers' maps, tiers[1:]); a marked block (branchBit) stays. A run left without blocks gives back
// its range, and its head's parent loses a branch: that block, once unmarked, may go the same way.
// A block within its run stays (the slab's invariants), as does a position no longer in use (a
// rejected store's rollback meets those).
func (s *slab) truncate(pos uint32, tiers *[TierCount]holderTable) {
	if pg, o := s.pages[pos>>slabPageBits], pos&slabPageMask; pg[o].run == 0 || (int(o)+1 < len(pg) && sameRun(&pg[o+1], &pg[o])) {
		return // gone already, or not its run's last block
	}
	lower := anyLower(tiers)
	for pos != noPos {
		b := s.at(pos)
		if b.run == 0 {
			return
		}
		id := b.id() - 1
		r := &s.runs[id]
		if pos != r.start+r.n-1 {
			return
		}
		for r.n > 0 {
			tail := s.at(r.start + r.n - 1)
			if tail.val != 0 || tail.run&branchBit != 0 || (lower && heldLower(tiers, tail.canon)) {
				return
			}
			if r.n == 1 {
				s.heads.deleteAt(s.heads.findHeld(uint64(tail.canon)))
			}
			*s.mut(r.start + r.n - 1) = slabBlock{}
			r.n--
			s.blocks--
		}
		s.free[r.class] = append(s.free[r.class], r.start)
		s.freeRuns = append(s.freeRuns, id)
		if r.orphan {
			s.orphans--
		}
		pos = r.parent
		if pos == noPos {
			return
		}
		if s.branches[pos]--; s.branches[pos] != 0 {
			return
		}
		delete(s.branches, pos)
		pb := s.mut(pos)
		pb.run &^= branchBit
		if pb.val != 0 || (lower && heldLower(tiers, pb.canon)) {
			return
		}
	}
}

// anyLower reports whether a lower tier's map (tiers[1:]) has entries.
func anyLower(tiers *[TierCount]holderTable) bool {
	return tiers[1].live|tiers[2].live|tiers[3].live != 0
}

// heldLower reports whether a lower tier's map (tiers[1:]) holds c.
func heldLower(tiers *[TierCount]holderTable, c ckf.CanonicalHash) bool {
	for t := 1; t < TierCount; t++ {
		if tiers[t].live != 0 && tiers[t].find(uint64(c)) >= 0 {
			return true
		}
	}
	return false
}

// isHead reports whether the block at pos (in use) is its run's head.
func (s *slab) isHead(pos uint32) bool { return s.runs[s.at(pos).id()-1].start == pos }

// all yields every block in use and its position, in position order.
func (s *slab) all() iter.Seq2[uint32, *slabBlock] {
	return func(yield func(uint32, *slabBlock) bool) {
		for p := uint32(0); p < s.next; p++ {
			if b := s.at(p); b.run != 0 && !yield(p, b) {
				return
			}
		}
	}
}

// bytes is the memory the slab takes: its pages, runs and free lists and the head map.
func (s *slab) bytes() uint64 {
	n := uint64(cap(s.runs))*uint64(unsafe.Sizeof(slabRun{})) + uint64(cap(s.freeRuns))*4 + s.heads.Bytes()
	for _, pg := range s.pages {
		n += uint64(len(pg)) * uint64(unsafe.Sizeof(slabBlock{}))
	}
	for c := range s.free {
		n += uint64(cap(s.free[c])) * 4
	}
	return n
}

// head returns the position of the run head with canonical c, or noPos.
func (s *slab) head(c ckf.CanonicalHash) uint32 {
	if s.heads.live == 0 {
		return noPos
	}
	return probe(s.heads.slots, s.heads.seed, s.heads.shift, uint64(c)) - 1 // 0 - 1 is noPos
}

// chainOf sets chain[i] to the canonical hash of local[:i+1] (len(chain) = len(local)): read
// from the slab where the prompt follows a run (slabWalk.scanLocal's rule), hashed elsewhere; once
// a block is not in the slab, the rest is hashed.
func (s *slab) chainOf(local []ckf.LocalBlockHash, chain []ckf.CanonicalHash) {
	chain = chain[:len(local)]
	at := noPos
	for i, l := range local {
		if at != noPos {
			pg, o := s.pages[at>>slabPageBits], int(at&slabPageMask)
			if o+1 < len(pg) {
				if nb := &pg[o+1]; sameRun(nb, &pg[o]) && nb.local == l {
					at++
					chain[i] = nb.canon
					continue
				}
			}
			if pg[o].run&branchBit == 0 && s.orphans == 0 {
				at = noPos // the block is not in the slab: the rest is hashed
			}
		}
		if i == 0 {
			chain[i] = ckf.CanonicalRoot(l)
			at = s.head(chain[i])
		} else {
			chain[i] = childOf(chain[i-1], l)
			if at != noPos {
				at = s.head(chain[i])
			}
		}
		if at == noPos {
			for j := i + 1; j < len(local); j++ {
				chain[j] = ckf.CanonicalChild(chain[j-1], local[j])
			}
			return
		}
	}
}
