package workers

import (
	"encoding/binary"
	"iter"
	"math/bits"
	"math/rand/v2"
	"unsafe"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/ckf/internal/hugepage"
)

// holderTable is a lower tier's map, and the slab's head map (workers §8): canonical hash → a
// 4-byte value (a holder value, or a head's position + 1), an open-addressing table with linear
// probing in Robin Hood order and backward-shift deletion, as ckf/internal/u64map, specialised
// to these uses:
//
//   - a slot is the key's eight bytes and the 4-byte value, padded to 16 bytes (four to a cache
//     line, none straddling two), and a value is never 0 in a live entry (workers §4), so value
//     0 marks an empty slot and every 64-bit key, 0 included, is an ordinary key;
//   - operations hand out slot indexes, so a removal reads the holder value and deletes the
//     entry in one probe (find, then deleteAt), where a generic map probes twice;
//   - lookups that expect the key (a query walk's head, probe) scan from its home without the
//     Robin Hood early exit, in a function of their own rather than through a generic map.
//
// Homes are a power of two (home(k) is the top bits of k's mixed hash, mixHome), the table grows
// by doubling at 7/8 full and shrinks when a deletion leaves it under 1/16 full (as u64map, so a
// source's clear gives memory back). Probe runs do not wrap: a tail of up to holderTail slots
// follows the last home, and an insertion whose run would pass it grows the table. Each table
// draws a random seed, mixed into every home, so keys cannot be aimed at one run; no result
// depends on it. Insertions and deletions move a run's slots one by one (runs are a few slots
// long), not through copy, whose call costs more (performance §9.1).
//
// Memory: the load is 7/16–7/8 between growths: 18–37 bytes per entry.
type holderTable struct {
	slots  []holderSlot // homes slots, then the tail
	homes  uint64       // a power of two, or 0 before the first insertion
	shift  uint8        // home(k) = mixHome(k, seed, shift)
	live   int
	growAt int
	seed   uint64
}

type holderSlot struct {
	key [8]byte // the canonical hash, little-endian
	val uint32  // the value; 0: the slot is empty
	_   uint32  // to 16 bytes: four slots a line, none straddling two
}

func (s *holderSlot) k() uint64 { return binary.LittleEndian.Uint64(s.key[:]) }

const (
	holderTail     = 64 // the most slots after the last home
	holderMinHomes = 8
	mixFold        = 0x9E3779B97F4A7C15 // 2^64 / golden ratio, odd
)

// mixHome is the home of k in a table with seed and shift: k's mixed hash (one 64×64→128-bit
// multiply, the halves folded) scaled to the homes by its top bits. The tables' insertion and
// deletion loops call it with the seed and shift in locals (slot writes would make a method
// reload them from the table).
func mixHome(k, seed uint64, shift uint8) uint64 {
	hi, lo := bits.Mul64(k^seed, mixFold)
	return (hi ^ lo) >> (shift & 63) // shift is below 64: the mask spares the compiler's test
}

// home is k's first probe position.
func (h *holderTable) home(k uint64) uint64 {
	return mixHome(k, h.seed, h.shift)
}

// Len is the number of entries.
func (h *holderTable) Len() int { return h.live }

// Bytes is the memory the slots take.
func (h *holderTable) Bytes() uint64 {
	return uint64(len(h.slots)) * uint64(unsafe.Sizeof(holderSlot{}))
}

// get returns k's holder value, 0 when absent.
func (h *holderTable) get(k uint64) uint32 {
	if i := h.find(k); i >= 0 {
		return h.slots[i].val
	}
	return 0
}

// find returns k's slot index, or -1. An index is valid until the next upsert or deleteAt.
func (h *holderTable) find(k uint64) int {
	slots := h.slots
	if h.live == 0 {
		return -1
	}
	for i, d := h.home(k), uint64(0); i < uint64(len(slots)); i, d = i+1, d+1 {
		s := &slots[i]
		if s.val == 0 {
			return -1
		}
		sk := s.k()
		if sk == k {
			return int(i)
		}
		if i-h.home(sk) < d { // k would sit here or earlier: absent
			return -1
		}
	}
	return -1
}

// findHeld is find for a key the caller knows to be present (a removal's canonical, which the
// source's lineage maps on this tier): a scan from k's home to k or an empty slot, without the
// Robin Hood early exit's home of every key passed. It returns -1 for an absent key too, after
// the rest of its run.
func (h *holderTable) findHeld(k uint64) int {
	if h.live == 0 {
		return -1
	}
	slots := h.slots
	for i := h.home(k); i < uint64(len(slots)); i++ {
		s := &slots[i]
		if s.val == 0 {
			return -1
		}
		if s.k() == k {
			return int(i)
		}
	}
	return -1
}

// runLines returns the addresses of the cache lines of k's first probe slot and of the slot
// four on (the next line: four slots fill a line), for prefetch.Lines: an insertion or a
// deletion reads and moves the run past k's slot, at 0.71 full about six slots (performance
// §9.1). The table must have slots. The addresses are only hints, computed from the slots' base
// without a bounds check (the second lies inside the tail, which is at least eight slots).
func (h *holderTable) runLines(k uint64) (uintptr, uintptr) {
	const size = unsafe.Sizeof(holderSlot{})
	a := uintptr(unsafe.Pointer(unsafe.SliceData(h.slots))) + uintptr(h.home(k))*size
	return a, a + 4*size
}

// runLinesOf writes the runLines of each canonical of p into dst, two addresses a block
// (len(dst) = 2*len(p)), for one prefetch.Lines call; the table must have slots.
func (h *holderTable) runLinesOf(dst []uintptr, p []prepared) {
	for i := range p {
		dst[2*i], dst[2*i+1] = h.runLines(uint64(p[i].canon))
	}
}

// upsert returns k's slot, inserting k first when absent; the value of a new entry is 0 and the
// caller must set the value (non-zero) before the table's next
// operation, since 0 marks the slot empty. The pointer is valid until the next upsert or
// deleteAt.
func (h *holderTable) upsert(k uint64) *holderSlot {
	if h.live >= h.growAt {
		h.resize(max(2*h.homes, holderMinHomes))
	}
	for {
		slots, seed, shift := h.slots, h.seed, h.shift // locals: the writes would make the loop reload them
		for i, d := mixHome(k, seed, shift), uint64(0); i < uint64(len(slots)); i, d = i+1, d+1 {
			s := &slots[i]
			if s.val == 0 {
				binary.LittleEndian.PutUint64(s.key[:], k) // an empty slot is all zeros, run too
				h.live++
				return s
			}
			sk := s.k()
			if sk == k {
				return s
			}
			if i-mixHome(sk, seed, shift) < d {
				// k is absent and belongs here: the run from i to the next empty slot moves one
				// slot on (Robin Hood order stays intact), k takes slot i.
				e := i + 1
				for e < uint64(len(slots)) && slots[e].val != 0 {
					e++
				}
				if e == uint64(len(slots)) {
					break // the run would pass the tail
				}
				for m := e; m > i; m-- {
					slots[m] = slots[m-1]
				}
				*s = holderSlot{}
				binary.LittleEndian.PutUint64(s.key[:], k)
				h.live++
				return s
			}
		}
		h.resize(2 * h.homes)
	}
}

// deleteAt removes the entry in slot i (an index from find or the slot of a live key): the
// following entries of its run move back one slot each until one sits at its home or a slot is
// empty, so no tombstone is left.
func (h *holderTable) deleteAt(i int) {
	slots, seed, shift := h.slots, h.seed, h.shift // locals: the moves would make the loop reload them
	j := i + 1
	for ; j < len(slots) && slots[j].val != 0 && mixHome(slots[j].k(), seed, shift) != uint64(j); j++ {
		slots[j-1] = slots[j]
	}
	slots[j-1] = holderSlot{}
	h.live--
	if h.homes > 64 && h.live < int(h.homes/16) {
		h.resize(homesFor(2 * h.live))
	}
}

// all yields every entry, in an unspecified order; the table must not change meanwhile.
func (h *holderTable) all() iter.Seq2[ckf.CanonicalHash, uint32] {
	return func(yield func(ckf.CanonicalHash, uint32) bool) {
		for i := range h.slots {
			if s := &h.slots[i]; s.val != 0 && !yield(ckf.CanonicalHash(s.k()), s.val) {
				return
			}
		}
	}
}

// homesFor is the fewest homes (a power of two) that hold n entries without growing.
func homesFor(n int) uint64 {
	need := max(uint64(holderMinHomes), (uint64(n)*8+6)/7)
	return 1 << bits.Len64(need-1)
}

// resize moves every entry into a table of homes home positions (a power of two), growing it
// further should a run pass the tail.
func (h *holderTable) resize(homes uint64) {
	old := h.slots
	if old == nil {
		h.seed = rand.Uint64()
	}
	for !h.rehash(old, homes) {
		homes *= 2
	}
}

func (h *holderTable) rehash(old []holderSlot, homes uint64) bool {
	h.slots = make([]holderSlot, homes+min(homes, holderTail))
	hugepage.Advise(h.slots)
	h.homes, h.shift, h.growAt, h.live = homes, uint8(64-bits.TrailingZeros64(homes)), int(homes*7/8), 0
	for j := range old {
		if old[j].val != 0 && !h.place(old[j]) {
			return false
		}
	}
	return true
}

// place inserts c, whose key is absent, in Robin Hood order; false when its run passes the tail.
func (h *holderTable) place(c holderSlot) bool {
	slots := h.slots
	for i, d := h.home(c.k()), uint64(0); i < uint64(len(slots)); i, d = i+1, d+1 {
		s := &slots[i]
		if s.val == 0 {
			*s = c
			h.live++
			return true
		}
		if sd := i - h.home(s.k()); sd < d {
			c, *s = *s, c
			d = sd
		}
	}
	return false
}

// probeFrom is probe's scan from slot i on (k's home, or a slot of k's run whose predecessors
// the caller has already read), not inlined: the walk's loops call it rarely, and a call keeps
// those loops small.
//
//go:noinline
func probeFrom(slots []holderSlot, i int, k uint64) uint32 {
	for ; i < len(slots); i++ {
		if s := &slots[i]; s.val == 0 || s.k() == k {
			return s.val
		}
	}
	return 0
}

// probe is the lookup of k in slots (a holderTable's, with its seed and shift): k's holder
// value, 0 when absent: probeFrom from k's home, a scan to k or to an empty slot without find's
// Robin Hood early exit for an absent key (a walk misses once, where it ends).
func probe(slots []holderSlot, seed uint64, shift uint8, k uint64) uint32 {
	return probeFrom(slots, int(mixHome(k, seed, shift)), k)
}
