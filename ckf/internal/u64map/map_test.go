package u64map

import (
	"maps"
	"testing"

	"pgregory.net/rapid"
)

// checkInvariant verifies Map's documented invariants: the live count, the load bound, that
// every key is reachable from its home over live slots only, and the Robin Hood order.
func checkInvariant[K ~uint64, V any](t *rapid.T, m *Map[K, V]) {
	live := 0
	for i := range m.slots {
		s := &m.slots[i]
		if s.k() == 0 {
			continue
		}
		live++
		h := m.home(s.k())
		if h >= m.homes || h > uint64(i) {
			t.Fatalf("key %#x at slot %d: home %d (of %d) is not at or before it", s.k(), i, h, m.homes)
		}
		for j := h; j != uint64(i); j++ {
			if m.slots[j].k() == 0 {
				t.Fatalf("key %#x at slot %d: empty slot %d on its probe run", s.k(), i, j)
			}
		}
		// Robin Hood order: the next key sits at most one slot further from its home.
		if next := uint64(i) + 1; next < uint64(len(m.slots)) {
			if kn := m.slots[next].k(); kn != 0 {
				d, dn := uint64(i)-h, next-m.home(kn)
				if dn > d+1 {
					t.Fatalf("slot %d at distance %d is followed by distance %d", i, d, dn)
				}
			}
		}
	}
	if live != m.live {
		t.Fatalf("live count %d, slots hold %d", m.live, live)
	}
	if len(m.slots) > 0 && m.live > m.growAt {
		t.Fatalf("%d live keys above the growth bound %d of %d slots", m.live, m.growAt, len(m.slots))
	}
}

// TestMapMatchesGoMap runs random operation sequences against a Go map. Keys come from a small
// range (plus 0 and the all-ones key) so that probe runs collide, reach the tail of the slot
// array and get shifted back by deletions.
func TestMapMatchesGoMap(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var m Map[uint64, uint32]
		if rapid.Bool().Draw(t, "reserved") {
			m.Reserve(rapid.IntRange(0, 300).Draw(t, "reserve"))
		}
		ref := map[uint64]uint32{}
		key := rapid.OneOf(rapid.Uint64Range(0, 64), rapid.Just(^uint64(0)), rapid.Uint64())
		for i := range rapid.IntRange(1, 400).Draw(t, "ops") {
			k := key.Draw(t, "key")
			switch rapid.IntRange(0, 4).Draw(t, "op") {
			case 0, 1:
				m.Put(k, uint32(i))
				ref[k] = uint32(i)
			case 2:
				p, existed := m.Upsert(k)
				if _, ok := ref[k]; ok != existed {
					t.Fatalf("Upsert(%#x) existed=%v, reference %v", k, existed, ok)
				}
				*p += 7
				ref[k] += 7
			case 3, 4:
				_, ok := ref[k]
				if got := m.Delete(k); got != ok {
					t.Fatalf("Delete(%#x)=%v, reference %v", k, got, ok)
				}
				delete(ref, k)
			}
			v, ok := m.Get(k)
			if rv, rok := ref[k]; ok != rok || v != rv {
				t.Fatalf("Get(%#x)=%d,%v reference %d,%v", k, v, ok, rv, rok)
			}
			if m.Len() != len(ref) {
				t.Fatalf("Len %d, reference %d", m.Len(), len(ref))
			}
		}
		checkInvariant(t, &m)
		if got := maps.Collect(m.All()); !maps.Equal(got, ref) {
			t.Fatalf("All yields %d keys, reference %d", len(got), len(ref))
		}
		for k := range ref {
			if !m.Has(k) {
				t.Fatalf("key %#x lost", k)
			}
		}
	})
}

// TestMapOneHomeRun puts every key on the same home slot (the seed is fixed and the keys are
// chosen for it), the worst case an adversary could aim for: the map stays correct, only slow.
func TestMapOneHomeRun(t *testing.T) {
	m := New[uint64, uint64](200)
	var keys []uint64
	for k := uint64(1); len(keys) < 150; k++ {
		if m.home(k) == 5 {
			keys = append(keys, k)
		}
	}
	for _, k := range keys {
		m.Put(k, k*3)
	}
	for i, k := range keys {
		if i%2 == 0 && !m.Delete(k) {
			t.Fatalf("Delete(%#x) missed", k)
		}
	}
	for i, k := range keys {
		v, ok := m.Get(k)
		if want := i%2 == 1; ok != want || (ok && v != k*3) {
			t.Fatalf("Get(%#x) = %d,%v want present=%v", k, v, ok, want)
		}
	}
	if m.Len() != len(keys)/2 {
		t.Fatalf("Len %d, want %d", m.Len(), len(keys)/2)
	}
}

// TestMapReserveDoesNotGrow checks that Reserve(n) leaves room for n keys: no insertion of the
// n keys reallocates the slots.
func TestMapReserveDoesNotGrow(t *testing.T) {
	for _, n := range []int{0, 1, 6, 7, 100, 1000, 4097} {
		m := New[uint64, struct{}](n)
		before := len(m.slots)
		for k := range uint64(n) {
			m.Put(k+1, struct{}{})
		}
		if len(m.slots) != before {
			t.Errorf("n=%d: slots grew from %d to %d", n, before, len(m.slots))
		}
	}
}

// TestMapFindDoesNotAllocate: lookups and updates of present keys are allocation-free.
func TestMapFindDoesNotAllocate(t *testing.T) {
	m := New[uint64, uint64](1000)
	for k := range uint64(1000) {
		m.Put(k, k)
	}
	allocs := testing.AllocsPerRun(100, func() {
		for k := range uint64(1000) {
			if p := m.Find(k); p != nil {
				*p++
			}
			m.Put(k, k)
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per run", allocs)
	}
}

// TestNilMapIsEmpty: the read-only methods treat a nil map as empty.
func TestNilMapIsEmpty(t *testing.T) {
	var m *Map[uint64, int]
	if _, ok := m.Get(0); ok || m.Has(3) || m.Find(3) != nil || m.Len() != 0 || m.Bytes() != 0 {
		t.Fatal("nil map is not empty")
	}
	for range m.All() {
		t.Fatal("nil map yields a key")
	}
}

// TestMapShrinksAfterMassDeletion: after most keys are deleted the table follows the live keys
// down, and what is left is intact.
func TestMapShrinksAfterMassDeletion(t *testing.T) {
	m := New[uint64, uint64](0)
	const n = 100_000
	for k := uint64(1); k <= n; k++ {
		m.Put(k, k)
	}
	full := m.Bytes()
	for k := uint64(1); k <= n-10; k++ {
		m.Delete(k)
	}
	if m.Bytes() >= full/100 {
		t.Fatalf("%d bytes for 10 keys (full: %d)", m.Bytes(), full)
	}
	for k := uint64(n - 9); k <= n; k++ {
		if v, ok := m.Get(k); !ok || v != k {
			t.Fatalf("key %d lost in a shrink", k)
		}
	}
}

// TestMapRunPastTailGrows puts more keys on the last home position than the tail has slots: the
// insertion that would run past the end grows the table (in Upsert's probe and in the Robin Hood
// displacement alike), and every key stays reachable with its value.
func TestMapRunPastTailGrows(t *testing.T) {
	m := New[uint64, uint32](200)
	last := m.homes - 1
	var keys []uint64
	for k := uint64(1); len(keys) < 2*maxTail; k++ {
		if m.home(k) == last || m.home(k) == last-1 {
			keys = append(keys, k)
		}
	}
	for i, k := range keys {
		m.Put(k, uint32(i))
	}
	if m.homes == last+1 {
		t.Fatalf("table of %d homes did not grow for %d keys on its last two homes", m.homes, len(keys))
	}
	for i, k := range keys {
		if v, ok := m.Get(k); !ok || v != uint32(i) {
			t.Fatalf("Get(%#x) = %d,%v want %d", k, v, ok, i)
		}
	}
	rapid.Check(t, func(rt *rapid.T) { checkInvariant(rt, m) })
}

// TestMapResizeKeepsInvariant grows and shrinks a map of random keys through many table sizes
// (Reserve, insertions past the growth bound, mass deletions) and checks the invariant and the
// contents after each step: rehash writes the keys in order without probing, and must produce
// the same valid layout as one insertion after another.
func TestMapResizeKeepsInvariant(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var m Map[uint64, uint64]
		ref := map[uint64]uint64{}
		key := rapid.OneOf(rapid.Uint64Range(1, 200), rapid.Uint64())
		for range rapid.IntRange(1, 8).Draw(t, "steps") {
			switch rapid.IntRange(0, 2).Draw(t, "step") {
			case 0:
				m.Reserve(rapid.IntRange(0, 3000).Draw(t, "reserve"))
			case 1:
				for range rapid.IntRange(0, 1500).Draw(t, "puts") {
					k := key.Draw(t, "key")
					m.Put(k, k^7)
					ref[k] = k ^ 7
				}
			case 2:
				for k := range ref {
					if rapid.IntRange(0, 9).Draw(t, "keep") != 0 {
						m.Delete(k)
						delete(ref, k)
					}
				}
			}
			checkInvariant(t, &m)
			if got := maps.Collect(m.All()); !maps.Equal(got, ref) {
				t.Fatalf("map holds %d keys, reference %d", len(got), len(ref))
			}
		}
	})
}
