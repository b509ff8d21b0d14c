package workers

import (
	"slices"

	"github.com/ckf-stream/ckf-stream/ckf"

	"github.com/ckf-stream/ckf-stream/ckf/internal/u64map"
)

// A holder value is what a slab block keeps for the device tier, and a lower tier's map per
// canonical hash (workers §8):
//
//   - 0: no holder (never stored: the entry is deleted instead);
//   - singleBit|i: exactly the source of dense index i;
//   - any other value: the id of an interned holder set (two or more sources).
//
// Interning makes equal holder sets one id, so a query compares ids instead of sets.
const (
	singleBit  = uint32(1) << 31
	maxSources = int(singleBit) - 1 // dense source indexes are below 2^31
)

func single(i uint32) uint32      { return singleBit | i }
func isSingle(v uint32) bool      { return v&singleBit != 0 }
func singleIndex(v uint32) uint32 { return v &^ singleBit }

// holderSet is one interned set of two or more dense source indexes.
//
// Members are kept in the order of their sources' keys (ckf.SourceKey.Compare), not of their
// dense indexes: a query whose sources all leave at the same position lists them in that order
// straight from the set (workers §5.4). The order is stable while the set lives, because a set
// only names live sources and a live source's key never changes; a dense index is reused only
// after its source is gone, and then no set names it.
type holderSet struct {
	members  []uint32 // by source key ascending, no duplicates, len >= 2
	hash     uint64   // sum of memberMix over members
	refs     uint32   // slab blocks and tier-map entries whose value is this set's id
	interned bool     // listed in setTable.byHash (false after a hash collision)
}

// setTable owns the interned holder sets. Invariants: a live set has refs > 0; a set whose refs
// drop to 0 is freed at once (its id goes to free and its members' slice is kept for reuse);
// byHash maps a hash to at most one live, interned set with that hash.
type setTable struct {
	sets    []holderSet // index = id; id 0 is never used
	free    []uint32
	byHash  u64map.Map[uint64, uint32]
	scratch []uint32
	// The last interned transitions: with(v, i) and without(v, i) gave nv. A store or removal
	// changes the same holder value the same way block after block (a prompt's blocks share
	// their holders), so a hit skips the merge, the hash lookup and the comparison. Holder sets
	// are immutable while live, so a transition stays true until a set id is freed and may be
	// reused: release forgets both then.
	lastWith, lastWithout transition
}

// transition is one remembered with or without: from holder value v, source i, to set nv.
type transition struct{ v, i, nv uint32 }

// memberMix spreads a dense index over 64 bits; a set's hash is the sum over its members, so
// adding or removing one member updates it in O(1).
func memberMix(i uint32) uint64 {
	z := uint64(i) + 0x9E3779B97F4A7C15
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
	z = (z ^ (z >> 27)) * 0x94D049BB133111EB
	return z ^ (z >> 31)
}

// members returns v's holders; buf backs a single holder.
func (t *setTable) members(v uint32, buf *[1]uint32) []uint32 {
	switch {
	case v == 0:
		return nil
	case isSingle(v):
		buf[0] = singleIndex(v)
		return buf[:]
	}
	return t.sets[v].members
}

// keyAt is the binary search of source i among members (ordered by key): the position where i is
// or would be, and whether it is there. Written out rather than slices.BinarySearchFunc, whose
// comparison closure would capture keys on the query path.
func keyAt(members []uint32, i uint32, keys []ckf.SourceKey) (int, bool) {
	k := keys[i]
	lo, hi := 0, len(members)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if keys[members[m]].Less(k) {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo, lo < len(members) && members[lo] == i
}

// intern returns the id of the set with exactly members (in key order, len >= 2) and hash h, creating
// it when absent, and takes one reference on it.
func (t *setTable) intern(h uint64, members []uint32) uint32 {
	id, found := t.byHash.Get(h)
	if found && slices.Equal(t.sets[id].members, members) {
		t.sets[id].refs++
		return id
	}
	if len(t.sets) == 0 {
		t.sets = append(t.sets, holderSet{}) // id 0 stays unused
	}
	nid := reuse(&t.free, &t.sets)
	s := &t.sets[nid]
	s.members = append(s.members[:0], members...)
	s.hash, s.refs, s.interned = h, 1, !found
	if !found {
		t.byHash.Put(h, nid)
	}
	return nid
}

// release drops one reference on v when it is a set id, freeing the set at zero.
func (t *setTable) release(v uint32) {
	if v == 0 || isSingle(v) {
		return
	}
	s := &t.sets[v]
	s.refs--
	if s.refs > 0 {
		return
	}
	if s.interned {
		t.byHash.Delete(s.hash)
	}
	s.interned = false
	t.free = append(t.free, v)
	t.lastWith, t.lastWithout = transition{}, transition{}
}

// with returns the holder value of v plus source i, taking a reference on the result and
// releasing v's, and whether i was already a holder (then v is returned unchanged).
func (t *setTable) with(v, i uint32, keys []ckf.SourceKey) (uint32, bool) {
	if m := t.lastWith; m.nv != 0 && m.v == v && m.i == i {
		t.sets[m.nv].refs++
		t.release(v)
		return m.nv, false
	}
	switch {
	case v == 0:
		return single(i), false
	case isSingle(v):
		o := singleIndex(v)
		if o == i {
			return v, true
		}
		if keys[o].Less(keys[i]) {
			t.scratch = append(t.scratch[:0], o, i)
		} else {
			t.scratch = append(t.scratch[:0], i, o)
		}
		nv := t.intern(memberMix(o)+memberMix(i), t.scratch)
		t.lastWith = transition{v, i, nv}
		return nv, false
	}
	s := &t.sets[v]
	at, found := keyAt(s.members, i, keys)
	if found {
		return v, true
	}
	t.scratch = append(t.scratch[:0], s.members[:at]...)
	t.scratch = append(t.scratch, i)
	t.scratch = append(t.scratch, s.members[at:]...)
	nv := t.intern(s.hash+memberMix(i), t.scratch)
	t.release(v)
	if t.sets[v].refs > 0 { // v is still live: the transition stays true (release above)
		t.lastWith = transition{v, i, nv}
	}
	return nv, false
}

// without returns the holder value of v minus source i (0 when none is left), taking a
// reference on the result and releasing v's, and whether i was a holder (else v is returned
// unchanged).
func (t *setTable) without(v, i uint32, keys []ckf.SourceKey) (uint32, bool) {
	if m := t.lastWithout; m.nv != 0 && m.v == v && m.i == i {
		t.sets[m.nv].refs++
		t.release(v)
		return m.nv, true
	}
	switch {
	case v == 0:
		return 0, false
	case isSingle(v):
		if singleIndex(v) == i {
			return 0, true
		}
		return v, false
	}
	s := &t.sets[v]
	at, found := keyAt(s.members, i, keys)
	if !found {
		return v, false
	}
	var nv uint32
	if len(s.members) == 2 {
		nv = single(s.members[1-at])
	} else {
		t.scratch = append(t.scratch[:0], s.members[:at]...)
		t.scratch = append(t.scratch, s.members[at+1:]...)
		nv = t.intern(s.hash-memberMix(i), t.scratch)
		t.release(v)
		if t.sets[v].refs > 0 {
			t.lastWithout = transition{v, i, nv}
		}
		return nv, true
	}
	t.release(v)
	return nv, true
}

// has reports whether source i holds v.
func (t *setTable) has(v, i uint32, keys []ckf.SourceKey) bool {
	switch {
	case v == 0:
		return false
	case isSingle(v):
		return singleIndex(v) == i
	}
	_, found := keyAt(t.sets[v].members, i, keys)
	return found
}

// live returns the number of live sets.
func (t *setTable) live() int {
	if len(t.sets) == 0 {
		return 0
	}
	return len(t.sets) - 1 - len(t.free)
}

// bytes returns the memory the sets take (slices by capacity).
func (t *setTable) bytes() uint64 {
	n := uint64(cap(t.sets))*48 + uint64(cap(t.free))*4 + t.byHash.Bytes()
	for i := range t.sets {
		n += uint64(cap(t.sets[i].members)) * 4
	}
	return n
}

// reuse returns the index of an item of items to use: the last index of free, taken off it, or a
// zero item appended to items. (The caller overwrites a reused item.)
func reuse[T any](free *[]uint32, items *[]T) uint32 {
	if n := len(*free); n > 0 {
		i := (*free)[n-1]
		*free = (*free)[:n-1]
		return i
	}
	var zero T
	*items = append(*items, zero)
	return uint32(len(*items) - 1)
}
