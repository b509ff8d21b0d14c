// Package u64map is an open-addressing hash map keyed by 64-bit integers, built for the producer's
// exact state (lineage and ownership: 10^5–10^7 entries, one lookup or more per block of every
// KV event).
//
// Why not a Go map: a Go map lookup walks a directory, a table and a control group before it
// reaches the slot, which is two or three cache misses on a map far larger than the caches;
// here the key and its value share one slot and a lookup usually costs one miss. Every key is
// mixed by one 64×64→128-bit multiply, which is all the hashing that uniform canonical hashes
// need and enough to spread sequential external ids, and scaled into the table by a second
// (multiply-high); deletion shifts entries back instead of leaving tombstones, so a long-running
// map never degrades and never needs a clean-up rehash.
//
// Layout: linear probing with Robin Hood ordering over one slice of {key, value} slots. The key
// 0 marks an empty slot; the real key 0 lives in a side slot of its own. A slot holds its key as
// eight bytes, not as a K, so that a small value is not padded to the key's alignment: a 4-byte
// value makes a 12-byte slot, the ownership record's 5 bytes a 13-byte one. Nothing in a slot is
// a pointer, so the garbage collector never scans a table, whatever its size.
//
// Memory: the producer keeps 10^6–10^7 keys per table, so the load factor is the memory. A table
// has any number of home positions, not a power of two (a key's home is its mixed hash scaled
// into the range by a multiply-high), it fills to 7/8 before it grows, and from 2^18 homes it
// grows by 1/4 instead of doubling, from 2^20 by 1/8: a table of 2^20 homes or more is always
// 77.8–87.5 % full (the price: an insertion shifts the rest of its run, which is longer at this
// load). Probe runs do not wrap around: a short tail of slots after the last home takes the runs
// that start near the end, and an insertion that would run past the tail grows the table
// instead.
//
// Each map draws a random seed (with its first table) that is mixed into every home position,
// so a producer of adversarial keys cannot aim them at one run of slots (they would have to guess
// the seed). The seed changes no result: every operation's outcome is independent of it, and
// iteration order, which does depend on it, is unspecified as for Go maps.
//
// Concurrency: none. A Map is owned by one goroutine.
package u64map

import (
	"encoding/binary"
	"iter"
	"math/bits"
	"math/rand/v2"
	"unsafe"

	"github.com/ckf-stream/ckf-stream/ckf/internal/hugepage"
	"github.com/ckf-stream/ckf-stream/ckf/internal/prefetch"
)

// fold is the multiplier of the home-position mix: 2^64 divided by the golden ratio, odd.
const fold = 0x9E3779B97F4A7C15

// minSlots is the fewest home positions a non-empty map allocates.
const minSlots = 8

// maxTail is the most slots a table has after its last home position (see Map).
const maxTail = 64

// quarterGrowthFrom and eighthGrowthFrom are the table sizes (home positions) from which a table
// grows by a quarter, then by an eighth, instead of doubling: the larger the table, the more its
// load factor is the process's memory, while a smaller step rehashes each key more often (a
// table filled from empty moves each key about 1/step times in all, but the moves are a
// sequential stream, see rehash). Below 2^18 homes (a table of at most 3.5 MiB) doubling wins:
// a producer state filled from empty to 131,072 keys took 0.79x the time with quarter steps from
// 2^18 instead of 2^16, and 10 M memberships held 37.95 B each instead of 38.17
// (BenchmarkDcStateMembershipMemory; at 1 M, 41.25 B instead of 39.98, the sizes the two growth
// paths reach).
const (
	quarterGrowthFrom = 1 << 18
	eighthGrowthFrom  = 1 << 20
)

// shrinkFloor is the table size at or below which deletions never shrink the table. Above it, a
// deletion that leaves the table less than 1/16 full moves the keys to a table sized for twice
// as many, so memory follows the live keys after a mass removal (a worker's clear) while a table
// that oscillates around a size never rehashes back and forth: from one shrink, the next growth
// needs the keys to double at least, the next shrink to fall by 7×.
const shrinkFloor = 64

// Map is a hash map from K (a 64-bit integer type) to V. The zero value is an empty map, ready
// to use.
//
// Invariants (Robin Hood linear probing; dist(i) is how far the key in slot i sits past its
// home): every live key k sits at a slot reachable from home(k) by stepping forward over live
// slots only, and along any run of live slots dist grows by at most one per step. So a lookup may
// stop at the first slot whose key sits closer to its home than the sought key would: an absent
// key costs about as few reads as a present one, which matters because every stored block looks
// up an id that is not there yet. Insertion keeps the order by displacing closer keys forward;
// Delete shifts the following keys back until one is at its home (no tombstones). Runs never wrap
// from the last slot to the first.
//
// Load: the table grows when an insert would take it above 7/8 of its home positions, so between
// growths the load is in (7/16, 7/8] for small tables, in (7/10, 7/8] from quarterGrowthFrom
// homes and in (7/9, 7/8] from eighthGrowthFrom (until deletions lower it; see shrinkFloor).
type Map[K ~uint64, V any] struct {
	slots   []slot[K, V] // homes positions, then the tail
	homes   uint64       // home positions; home(k) < homes
	seed    uint64
	live    int // keys in slots (the zero key is counted in hasZero)
	growAt  int // live count above which an insert grows the table
	hasZero bool
	zero    V
}

type slot[K ~uint64, V any] struct {
	key [8]byte // K, little-endian; 0 = empty (bytes, so that V is not padded to 8-byte alignment)
	val V
}

func (s *slot[K, V]) k() K { return K(binary.LittleEndian.Uint64(s.key[:])) }

func newSlot[K ~uint64, V any](k K) slot[K, V] {
	var s slot[K, V]
	binary.LittleEndian.PutUint64(s.key[:], uint64(k))
	return s
}

// New returns a map sized to hold n keys without growing.
func New[K ~uint64, V any](n int) *Map[K, V] {
	m := &Map[K, V]{}
	m.Reserve(n)
	return m
}

// home is k's first probe position: k's mixed hash scaled into [0, homes). The scaling keeps the
// order of the mixed hashes, so a key's home moves in proportion when the table is resized.
func (m *Map[K, V]) home(k K) uint64 {
	hi, lo := bits.Mul64(uint64(k)^m.seed, fold)
	h, _ := bits.Mul64(hi^lo, m.homes)
	return h
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
	slots := m.slots
	for i, d := m.home(k), uint64(0); i < uint64(len(slots)); i, d = i+1, d+1 {
		s := &slots[i]
		sk := s.k()
		if sk == k {
			return &s.val
		}
		if sk == 0 || i-m.home(sk) < d {
			return nil
		}
	}
	return nil
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
		m.grow(m.grownSize())
	}
	for {
		slots := m.slots
		for i, d := m.home(k), uint64(0); i < uint64(len(slots)); i, d = i+1, d+1 {
			s := &slots[i]
			sk := s.k()
			if sk == k {
				return &s.val, true
			}
			if sk == 0 {
				*s = newSlot[K, V](k)
				m.live++
				return &s.val, false
			}
			if i-m.home(sk) < d {
				// k is absent (a present k would sit here or earlier) and belongs here: the keys
				// from slot i up to the next empty slot move one slot on, k takes slot i. Every
				// run stays ordered by home, which is the Robin Hood invariant.
				e := i + 1
				for e < uint64(len(slots)) && slots[e].k() != 0 {
					e++
				}
				if e == uint64(len(slots)) {
					break // the run reaches past the tail
				}
				copy(slots[i+1:e+1], slots[i:e])
				*s = newSlot[K, V](k)
				m.live++
				return &s.val, false
			}
		}
		// k is absent and its run reaches past the tail.
		m.grow(m.grownSize())
	}
}

// place puts c, which belongs d slots before slot i, at slot i or further, displacing forward
// every key that sits closer to its home than the carried one (Robin Hood insertion). c's key
// must be absent and an empty slot must follow i (rehash makes sure of it).
func (m *Map[K, V]) place(c slot[K, V], i, d uint64) {
	slots := m.slots
	for ; i < uint64(len(slots)); i, d = i+1, d+1 {
		s := &slots[i]
		sk := s.k()
		if sk == 0 {
			*s = c
			return
		}
		if sd := i - m.home(sk); sd < d {
			c, *s = *s, c
			d = sd
		}
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
	slots := m.slots
	i, d := m.home(k), uint64(0)
	for ; ; i, d = i+1, d+1 {
		if i >= uint64(len(slots)) {
			return false
		}
		sk := slots[i].k()
		if sk == k {
			break
		}
		if sk == 0 || i-m.home(sk) < d {
			return false
		}
	}
	// Slot i is the hole: the following keys move back one slot each until a key already at
	// its home (or an empty slot) ends the run. That keeps every key reachable and dist
	// growing by at most one per step.
	for j := i + 1; j < uint64(len(slots)); j++ {
		kj := slots[j].k()
		if kj == 0 || m.home(kj) == j {
			break
		}
		slots[i] = slots[j]
		i = j
	}
	slots[i] = slot[K, V]{}
	m.live--
	if m.live < int(m.homes/16) && m.homes > shrinkFloor {
		m.grow(homesFor(2 * m.live))
	}
	return true
}

// Reserve makes room for n keys in total without further growth.
func (m *Map[K, V]) Reserve(n int) {
	if need := homesFor(n); need > m.homes {
		m.grow(need)
	}
}

// homesFor is the fewest home positions that hold n keys without growing.
func homesFor(n int) uint64 {
	return max(uint64(minSlots), (uint64(n)*8+6)/7)
}

// grownSize is the table size an insertion into a full table grows to.
func (m *Map[K, V]) grownSize() uint64 {
	if m.homes < quarterGrowthFrom {
		return max(2*m.homes, minSlots)
	}
	if m.homes < eighthGrowthFrom {
		return m.homes + m.homes/4
	}
	return m.homes + m.homes/8
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
			if s := &m.slots[i]; s.k() != 0 && !yield(s.k(), s.val) {
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

// grow moves every entry into a table of n home positions (and its tail). The seed is drawn with
// the first table and then kept, and home() keeps the order of the mixed hashes at every size,
// so walking the old slots in order writes the new table in order too, a stream the hardware
// prefetcher follows, instead of one cache miss per entry. Should a run pass the new tail
// (unlikely: the tail is far longer than the runs at this load), it retries with a larger table.
func (m *Map[K, V]) grow(n uint64) {
	old := m.slots
	if old == nil {
		m.seed = rand.Uint64()
	}
	for !m.rehash(old, n) {
		n += n / 4
	}
}

// rehash makes a table of n home positions holding old's keys and reports whether every key fit.
//
// The old slots come in the order of their keys' homes, and home() keeps that order at any size,
// so the keys arrive nearly sorted by their new homes: each one goes to its home or, when that is
// taken, to the first free slot after the run so far, with no probing. Only a key whose new home
// is below its predecessor's (two keys that shared an old home and are split by the new scale)
// takes the general Robin Hood insertion, which ends at the same first free slot.
func (m *Map[K, V]) rehash(old []slot[K, V], n uint64) bool {
	m.slots = make([]slot[K, V], n+min(n, maxTail))
	hugepage.Advise(m.slots)
	m.homes = n
	m.growAt = int(n * 7 / 8)
	slots := m.slots
	var free, lastHome uint64 // every slot from free on is empty; lastHome: the home of the key at free-1
	for j := range old {
		s := &old[j]
		k := s.k()
		if k == 0 {
			continue
		}
		h := m.home(k)
		switch {
		case h >= free:
			slots[h] = *s
			free, lastHome = h+1, h
		case free >= uint64(len(slots)):
			return false
		case h >= lastHome:
			// lastHome <= h < free: the run from h to free-1 is full.
			slots[free] = *s
			free, lastHome = free+1, h
		default:
			// The displacements end in the first free slot from h: free itself when the run
			// from h is full, and then slot free holds the key of home lastHome again.
			m.place(*s, h, 0)
			if slots[free].k() != 0 {
				free++
			}
		}
	}
	return true
}
