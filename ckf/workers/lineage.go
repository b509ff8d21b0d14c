package workers

import (
	"encoding/binary"
	"iter"
	"math/bits"
	"math/rand/v2"
	"unsafe"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/ckf/internal/hugepage"
	"github.com/ckf-stream/ckf-stream/ckf/internal/prefetch"
)

// lineageTable is one source's lineage (workers §2.1): external id → lineageEntry, an
// open-addressing table with linear probing in Robin Hood order and backward-shift deletion, as
// holderTable, specialised to this one use where ckf/internal/u64map's generic map served before
// (workers §8):
//
//   - a slot is the id's eight bytes and the entry's nine (17 bytes, no padding), and a live
//     entry always holds at least one tier (workers §2.1), so tiers 0 marks an empty slot and
//     every 64-bit id, 0 included, is an ordinary key (u64map keeps the id 0 in a side slot and
//     tests every key against it);
//   - operations hand out slot indexes, so a removal reads an entry, takes its tier off and
//     deletes it when no tier is left in one probe (find, then deleteAt), where u64map's Find and
//     Delete probe twice;
//   - a lookup (find) scans from the id's home to the id or an empty slot, without the Robin
//     Hood early exit, which computes the home of every key it passes: the ids a removal or a
//     store's parent names are almost always present, and a present id is found at the same
//     slot either way;
//   - homes are a power of two and an id's home is the top bits of its mixed hash (mixHome, as
//     holderTable's), where u64map scales the mixed hash into the homes with a second multiply;
//   - an insertion and a deletion move the run's slots one by one (runs are a few slots long),
//     not through copy, whose call costs more than the moves.
//
// Growth and shrinking are holderTable's: the table doubles at 7/8 full and shrinks when a
// deletion leaves it under 1/16 full; probe runs do not wrap (a tail of up to holderTail slots
// follows the last home, and an insertion whose run would pass it grows the table). Each table
// draws a random seed, mixed into every home, so ids cannot be aimed at one run; no result
// depends on it.
//
// Memory: the load is 7/16–7/8 between growths, as a u64map's up to 2^18 homes (the fixture's
// sources at 10 M memberships, 94 K and 187 K ids, take 2^17 and 2^18 homes either way, 0.71
// full); past 2^18 homes u64map grows by a quarter and then an eighth, so a source with more than
// about 230 K ids can take up to twice the bytes a u64map would (right after a doubling).
type lineageTable struct {
	slots  []lineageSlot // homes slots, then the tail
	homes  uint64        // a power of two, or 0 before the first insertion
	shift  uint8         // home(k) = mixHome(k, seed, shift)
	live   int
	growAt int
	seed   uint64
}

type lineageSlot struct {
	key [8]byte // the external id, little-endian (bytes, so the slot is 17 bytes)
	lineageEntry
}

func (s *lineageSlot) k() uint64 { return binary.LittleEndian.Uint64(s.key[:]) }

// home is k's first probe position.
func (l *lineageTable) home(k uint64) uint64 {
	return mixHome(k, l.seed, l.shift)
}

// Len is the number of ids.
func (l *lineageTable) Len() int { return l.live }

// Bytes is the memory the slots take.
func (l *lineageTable) Bytes() uint64 {
	if l == nil {
		return 0
	}
	return uint64(len(l.slots)) * uint64(unsafe.Sizeof(lineageSlot{}))
}

// find returns id's slot index, or -1 (also for a nil table: a source the index does not know).
// An index is valid until the next upsert or deleteAt.
//
// It scans from id's home to id or an empty slot, without the Robin Hood early exit (which
// computes the home of every key it passes): the ids a removal or a store's parent names are
// almost always present, and a present id costs the same slots either way, fewer instructions
// this way. An absent id costs the rest of its run.
func (l *lineageTable) find(id ckf.ExternalBlockHash) int {
	if l == nil || l.live == 0 {
		return -1
	}
	k, slots := uint64(id), l.slots
	for i := l.home(k); i < uint64(len(slots)); i++ {
		s := &slots[i]
		if s.tiers == 0 {
			return -1
		}
		if s.k() == k {
			return int(i)
		}
	}
	return -1
}

// at returns the entry in slot i (an index from find).
func (l *lineageTable) at(i int) *lineageEntry { return &l.slots[i].lineageEntry }

// lookup returns id's entry, or nil. The pointer is valid until the next upsert or deleteAt.
func (l *lineageTable) lookup(id ckf.ExternalBlockHash) *lineageEntry {
	if i := l.find(id); i >= 0 {
		return l.at(i)
	}
	return nil
}

// Prefetch starts loading the cache line of id's first probe slot.
func (l *lineageTable) Prefetch(id ckf.ExternalBlockHash) {
	if l.live != 0 {
		prefetch.Line(unsafe.Pointer(&l.slots[l.home(uint64(id))]))
	}
}

// upsert returns id's entry and whether it existed, inserting a zero entry first when absent; the
// caller must give a new entry a tier before the table's next operation, since tiers 0 marks the
// slot empty. The pointer is valid until the next upsert or deleteAt.
func (l *lineageTable) upsert(id ckf.ExternalBlockHash) (*lineageEntry, bool) {
	if l.live >= l.growAt {
		l.resize(max(2*l.homes, holderMinHomes))
	}
	k := uint64(id)
	for {
		slots, seed, shift := l.slots, l.seed, l.shift // locals: the writes would make the loop reload them
		for i, d := mixHome(k, seed, shift), uint64(0); i < uint64(len(slots)); i, d = i+1, d+1 {
			s := &slots[i]
			if s.tiers == 0 {
				*s = lineageSlot{}
				binary.LittleEndian.PutUint64(s.key[:], k)
				l.live++
				return &s.lineageEntry, false
			}
			sk := s.k()
			if sk == k {
				return &s.lineageEntry, true
			}
			if i-mixHome(sk, seed, shift) < d {
				// k is absent and belongs here: the run from i to the next empty slot moves one
				// slot on (Robin Hood order stays intact), k takes slot i.
				e := i + 1
				for e < uint64(len(slots)) && slots[e].tiers != 0 {
					e++
				}
				if e == uint64(len(slots)) {
					break // the run would pass the tail
				}
				for m := e; m > i; m-- {
					slots[m] = slots[m-1]
				}
				*s = lineageSlot{}
				binary.LittleEndian.PutUint64(s.key[:], k)
				l.live++
				return &s.lineageEntry, false
			}
		}
		l.resize(2 * l.homes)
	}
}

// deleteAt removes the entry in slot i (an index from find): the following entries of its run
// move back one slot each until one sits at its home or a slot is empty, so no tombstone is left.
func (l *lineageTable) deleteAt(i int) {
	slots, seed, shift := l.slots, l.seed, l.shift // locals: the moves would make the loop reload them
	j := i + 1
	for ; j < len(slots) && slots[j].tiers != 0 && mixHome(slots[j].k(), seed, shift) != uint64(j); j++ {
		slots[j-1] = slots[j]
	}
	slots[j-1] = lineageSlot{}
	l.live--
	if l.homes > 64 && l.live < int(l.homes/16) {
		l.resize(homesFor(2 * l.live))
	}
}

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
		for i := range l.slots {
			if s := &l.slots[i]; s.tiers != 0 && !yield(ckf.ExternalBlockHash(s.k()), s.lineageEntry) {
				return
			}
		}
	}
}

// resize moves every entry into a table of homes home positions (a power of two), growing it
// further should a run pass the tail.
func (l *lineageTable) resize(homes uint64) {
	old := l.slots
	if old == nil {
		l.seed = rand.Uint64()
	}
	for !l.rehash(old, homes) {
		homes *= 2
	}
}

func (l *lineageTable) rehash(old []lineageSlot, homes uint64) bool {
	l.slots = make([]lineageSlot, homes+min(homes, holderTail))
	hugepage.Advise(l.slots)
	l.homes, l.shift, l.growAt, l.live = homes, uint8(64-bits.TrailingZeros64(homes)), int(homes*7/8), 0
	for j := range old {
		if old[j].tiers != 0 && !l.place(old[j]) {
			return false
		}
	}
	return true
}

// place inserts c, whose key is absent, in Robin Hood order; false when its run passes the tail.
func (l *lineageTable) place(c lineageSlot) bool {
	slots := l.slots
	for i, d := l.home(c.k()), uint64(0); i < uint64(len(slots)); i, d = i+1, d+1 {
		s := &slots[i]
		if s.tiers == 0 {
			*s = c
			l.live++
			return true
		}
		if sd := i - l.home(s.k()); sd < d {
			c, *s = *s, c
			d = sd
		}
	}
	return false
}
