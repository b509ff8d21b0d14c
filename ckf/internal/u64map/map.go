// Package u64map is an open-addressing hash map keyed by 64-bit integers, built for the producer's
// exact state (lineage and ownership: 10^5–10^7 entries, one lookup or more per block of every
// KV event).
//
// Why not a Go map: a Go map lookup walks a directory, a table and a control group before it
// reaches the slot, which is two or three cache misses on a map far larger than the caches;
// here the key and its value share one slot and a lookup usually costs one miss. Every key is
// mixed by one 64×64→128-bit multiply, which is all the hashing that uniform canonical hashes
// need and enough to spread sequential external ids; probes use power-of-two masks, and
// deletion shifts entries back instead of leaving tombstones, so a long-running map never
// degrades and never needs a clean-up rehash.
//
// Layout: linear probing with Robin Hood ordering over one slice of {key, value} slots. The key
// 0 marks an empty slot; the real key 0 lives in a side slot of its own. Each map draws a random
// seed (with its first table) that is mixed into every home position, so a producer of
// adversarial keys cannot aim them at one run of slots (they would have to guess the seed). The
// seed changes no result: every operation's outcome is independent of it, and iteration order,
// which does depend on it, is unspecified as for Go maps.
//
// Concurrency: none. A Map is owned by one goroutine.
package u64map

import (
	"iter"
	"math/bits"
	"math/rand/v2"
	"unsafe"

	"github.com/ckf-stream/ckf-stream/ckf/internal/hugepage"
	"github.com/ckf-stream/ckf-stream/ckf/internal/prefetch"
)

// fold is the multiplier of the home-position mix: 2^64 divided by the golden ratio, odd.
const fold = 0x9E3779B97F4A7C15

// minSlots is the smallest slot array a non-empty map allocates.
const minSlots = 8

// shrinkFloor is the table size at or below which deletions never shrink the table. Above it, a
// deletion that leaves the table less than 1/16 full moves the keys to a table sized for twice
// as many (load 1/4 to 3/8), so memory follows the live keys after a mass removal (a worker's
// clear) while a table that oscillates around a size never rehashes back and forth: from one
// shrink, the next growth needs the keys to double at least, the next shrink to fall by 4×.
const shrinkFloor = 64

// Map is a hash map from K (a 64-bit integer type) to V. The zero value is an empty map, ready
// to use.
//
// Invariants (Robin Hood linear probing; dist(i) is how far the key in slot i sits past its
// home): every live key k sits at a slot reachable from home(k) by stepping forward
// (cyclically) over live slots only, and along any run of live slots dist grows by at most one
// per step. So a lookup may stop at the first slot whose key sits closer to its home than the
// sought key would: an absent key costs about as few reads as a present one (2–3 slots at 3/4
// load, against ~8 for plain linear probing), which matters because every stored block looks up
// an id that is not there yet. Insertion keeps the order by displacing closer keys forward;
// Delete shifts the following keys back until one is at its home (no tombstones).
//
// Load: the table doubles when an insert would take it above 3/4 full, so between growths the
// load is in (3/8, 3/4] (until deletions lower it; see shrinkFloor).
type Map[K ~uint64, V any] struct {
	slots   []slot[K, V]
	mask    uint64 // len(slots) - 1; len(slots) is a power of two
	seed    uint64
	live    int // keys in slots (the zero key is counted in hasZero)
	growAt  int // live count above which an insert doubles the table
	hasZero bool
	zero    V
}

type slot[K ~uint64, V any] struct {
	key K // 0 = empty
	val V
}

// New returns a map sized to hold n keys without growing.
func New[K ~uint64, V any](n int) *Map[K, V] {
	m := &Map[K, V]{}
	m.Reserve(n)
	return m
}

// home is k's first probe position.
func (m *Map[K, V]) home(k K) uint64 {
	hi, lo := bits.Mul64(uint64(k)^m.seed, fold)
	return (hi ^ lo) & m.mask
}

// Len returns the number of keys. The read-only methods (Len, Get, Has, Find, All, Keys, Bytes)
// accept a nil map as an empty one.
func (m *Map[K, V]) Len() int {
	if m == nil {
		return 0
	}
	if m.hasZero {
		return m.live + 1
	}
	return m.live
}

// Get returns k's value and whether k is present.
func (m *Map[K, V]) Get(k K) (V, bool) {
	if p := m.Find(k); p != nil {
		return *p, true
	}
	var z V
	return z, false
}

// Has reports whether k is present.
func (m *Map[K, V]) Has(k K) bool { return m.Find(k) != nil }

// Find returns a pointer to k's value, or nil when k is absent. The pointer is valid until the
// next insertion, deletion or Reserve on m.
func (m *Map[K, V]) Find(k K) *V {
	if m == nil {
		return nil
	}
	if k == 0 {
		if m.hasZero {
			return &m.zero
		}
		return nil
	}
	if m.live == 0 {
		return nil
	}
	slots, mask := m.slots, m.mask
	i := m.home(k)
	for d := uint64(0); ; d++ {
		s := &slots[i]
		if s.key == k {
			return &s.val
		}
		if s.key == 0 || (i-m.home(s.key))&mask < d {
			return nil
		}
		i = (i + 1) & mask
	}
}

// Prefetch starts loading the cache line of k's first probe slot, so that a lookup of k issued
// shortly after finds it in cache. Prefetching the keys of a batch before looking them up lets
// their cache misses overlap. It changes nothing and never faults.
func (m *Map[K, V]) Prefetch(k K) {
	if m != nil && m.live != 0 {
		prefetch.Line(unsafe.Pointer(&m.slots[m.home(k)]))
	}
}

// Put sets k's value to v.
func (m *Map[K, V]) Put(k K, v V) {
	p, _ := m.Upsert(k)
	*p = v
}

// Upsert returns a pointer to k's value, inserting k with the zero value first when absent, and
// whether k was already present. The pointer is valid until the next insertion, deletion or
// Reserve on m.
func (m *Map[K, V]) Upsert(k K) (p *V, existed bool) {
	if k == 0 {
		existed = m.hasZero
		m.hasZero = true
		return &m.zero, existed
	}
	if m.live >= m.growAt {
		m.grow(2 * max(len(m.slots), minSlots/2))
	}
	slots, mask := m.slots, m.mask
	i := m.home(k)
	for d := uint64(0); ; d++ {
		s := &slots[i]
		if s.key == k {
			return &s.val, true
		}
		if s.key == 0 {
			s.key = k
			m.live++
			return &s.val, false
		}
		if sd := (i - m.home(s.key)) & mask; sd < d {
			// k is absent (a present k would sit here or earlier): k takes this slot and
			// the key it displaces moves on.
			carry := *s
			*s = slot[K, V]{key: k}
			m.live++
			m.place(carry, (i+1)&mask, sd+1)
			return &s.val, false
		}
		i = (i + 1) & mask
	}
}

// place puts c, which belongs d slots before slot i, at slot i or further, displacing forward
// every key that sits closer to its home than the carried one (Robin Hood insertion). c's key
// must be absent.
func (m *Map[K, V]) place(c slot[K, V], i, d uint64) {
	slots, mask := m.slots, m.mask
	for ; ; d++ {
		s := &slots[i]
		if s.key == 0 {
			*s = c
			return
		}
		if sd := (i - m.home(s.key)) & mask; sd < d {
			c, *s = *s, c
			d = sd
		}
		i = (i + 1) & mask
	}
}

// Delete removes k and reports whether it was present. Later entries of k's probe run move back
// so that no tombstone is left (see Map's invariant).
func (m *Map[K, V]) Delete(k K) bool {
	if k == 0 {
		if !m.hasZero {
			return false
		}
		var z V
		m.hasZero, m.zero = false, z
		return true
	}
	if m.live == 0 {
		return false
	}
	slots, mask := m.slots, m.mask
	i := m.home(k)
	for d := uint64(0); slots[i].key != k; d++ {
		if kj := slots[i].key; kj == 0 || (i-m.home(kj))&mask < d {
			return false
		}
		i = (i + 1) & mask
	}
	// Slot i is the hole: the following keys move back one slot each until a key already at
	// its home (or an empty slot) ends the run. That keeps every key reachable and dist
	// growing by at most one per step.
	for {
		j := (i + 1) & mask
		kj := slots[j].key
		if kj == 0 || m.home(kj) == j {
			break
		}
		slots[i] = slots[j]
		i = j
	}
	slots[i] = slot[K, V]{}
	m.live--
	if m.live < len(slots)/16 && len(slots) > shrinkFloor {
		m.grow(slotsFor(2 * m.live))
	}
	return true
}

// Reserve makes room for n keys in total without further growth.
func (m *Map[K, V]) Reserve(n int) {
	if need := slotsFor(n); need > len(m.slots) {
		m.grow(need)
	}
}

// slotsFor is the smallest table that holds n keys without growing.
func slotsFor(n int) int {
	need := minSlots
	for need/4*3 < n {
		need *= 2
	}
	return need
}

// All yields every key and its value, in an unspecified order. The map must not be changed
// during the iteration.
func (m *Map[K, V]) All() iter.Seq2[K, V] {
	return func(yield func(K, V) bool) {
		if m == nil {
			return
		}
		if m.hasZero && !yield(0, m.zero) {
			return
		}
		for i := range m.slots {
			if s := &m.slots[i]; s.key != 0 && !yield(s.key, s.val) {
				return
			}
		}
	}
}

// Keys yields every key, in an unspecified order. The map must not be changed during the
// iteration.
func (m *Map[K, V]) Keys() iter.Seq[K] {
	return func(yield func(K) bool) {
		for k := range m.All() {
			if !yield(k) {
				return
			}
		}
	}
}

// Bytes returns the memory the map's slots take.
func (m *Map[K, V]) Bytes() uint64 {
	if m == nil {
		return 0
	}
	return uint64(len(m.slots)) * uint64(unsafe.Sizeof(slot[K, V]{}))
}

// grow moves every entry into a table of n slots (a power of two). The seed is drawn with the
// first table and then kept, so that a key's home in the new table is its old home with one
// more (or one fewer) high bit: walking the old slots in order writes the new table in order
// too (two interleaved runs when doubling), a stream the hardware prefetcher follows, instead
// of one cache miss per entry.
func (m *Map[K, V]) grow(n int) {
	old := m.slots
	if old == nil {
		m.seed = rand.Uint64()
	}
	m.slots = make([]slot[K, V], n)
	hugepage.Advise(m.slots)
	m.mask = uint64(n - 1)
	m.growAt = n / 4 * 3
	for j := range old {
		if s := &old[j]; s.key != 0 {
			m.place(*s, m.home(s.key), 0)
		}
	}
}
