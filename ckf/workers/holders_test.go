package workers

import (
	"testing"

	"pgregory.net/rapid"
)

// TestHolderTableMatchesMap: random upserts and deletions (keys from a small range, 0 included,
// so that they collide, runs form and the table grows and shrinks) leave a holderTable with a Go
// map's contents (by get, find, findHeld, probe and the query walk's own lookup, present and
// absent keys), and its Robin Hood order intact (every key reachable from its home over live
// slots, distances growing by at most one per step).
func TestHolderTableMatchesMap(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var h holderTable
		want := map[uint64]uint32{}
		keyRange := rapid.SampledFrom([]uint64{4, 64, 2000}).Draw(t, "range")
		steps := rapid.IntRange(1, 3000).Draw(t, "steps")
		for step := range steps {
			k := rapid.Uint64Range(0, keyRange).Draw(t, "k") * 0x5851F42D4C957F2D // spread, 0 stays 0
			if rapid.IntRange(0, 2).Draw(t, "op") < 2 {
				v := uint32(rapid.IntRange(1, 1<<20).Draw(t, "v"))
				h.upsert(k).val = v
				want[k] = v
			} else if i := h.find(k); i >= 0 {
				h.deleteAt(i)
				delete(want, k)
			} else if _, ok := want[k]; ok {
				t.Fatalf("step %d: %#x is in the map but find misses it", step, k)
			}
		}
		if h.Len() != len(want) {
			t.Fatalf("Len %d, map %d", h.Len(), len(want))
		}
		for k, v := range want {
			if got := h.get(k); got != v {
				t.Fatalf("get(%#x) = %d, want %d", k, got, v)
			}
			if got := probe(h.slots, h.seed, h.shift, k); got != v {
				t.Fatalf("probe(%#x) = %d, want %d", k, got, v)
			}
			if got := walkLookup(&h, k); got != v {
				t.Fatalf("runFrom's lookup of %#x = %d, want %d", k, got, v)
			}
			if i := h.findHeld(k); i != h.find(k) {
				t.Fatalf("findHeld(%#x) = %d, find %d", k, i, h.find(k))
			}
		}
		for x := range keyRange + 1 { // absent keys too: both lookups say 0
			k := x * 0x5851F42D4C957F2D
			if _, ok := want[k]; !ok && (h.get(k) != 0 || h.findHeld(k) != -1 || (h.live > 0 && (probe(h.slots, h.seed, h.shift, k) != 0 || walkLookup(&h, k) != 0))) {
				t.Fatalf("%#x is absent, get %d", k, h.get(k))
			}
		}
		n := 0
		for k, v := range h.all() {
			n++
			if want[uint64(k)] != v {
				t.Fatalf("all yields %#x=%d, map has %d", uint64(k), v, want[uint64(k)])
			}
		}
		if n != len(want) {
			t.Fatalf("all yields %d entries, map has %d", n, len(want))
		}
		prev := -1 // the distance of the previous slot's key; -1 after an empty slot
		for i := range h.slots {
			s := &h.slots[i]
			if s.val == 0 {
				prev = -1
				continue
			}
			home := h.home(s.k())
			if home > uint64(i) || int(uint64(i)-home) > prev+1 {
				t.Fatalf("slot %d: home %d, previous distance %d", i, home, prev)
			}
			prev = int(uint64(i) - home)
		}
	})
}

// walkLookup is the query walk's lookup of k (probe: a scan from k's home without the Robin Hood
// early exit), 0 in an empty table.
func walkLookup(h *holderTable, k uint64) uint32 {
	if h.live == 0 {
		return 0
	}
	return probe(h.slots, h.seed, h.shift, k)
}
