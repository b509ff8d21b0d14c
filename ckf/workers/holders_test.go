package workers

import (
	"testing"

	"pgregory.net/rapid"

	"github.com/ckf-stream/ckf-stream/ckf"
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

// walkLookup is the query walk's inlined lookup of k (runFrom without prefetching, which reads
// the home slot and the next one together): runFrom on the one-block query k from a holder
// value no entry has stops at once with k's value.
func walkLookup(h *holderTable, k uint64) uint32 {
	si := 0
	_, v := runFrom(h, []ckf.CanonicalHash{ckf.CanonicalHash(k)}, nil, nil, &si, 0, ^uint32(0), false)
	return v
}

// TestRunFromPaths: the query walk's run scan gives the same position and holder value on all
// four of its paths (with and without prefetching, with and without slot hints), whatever the
// hints say: a block's own slot, another key's slot, an empty slot, a slot past the table's end
// or none; and with spans of known value (run summaries) or without, the spans placed anywhere
// over pieces of one non-zero value, before, around or after from. The reference is the first
// position whose get differs from cur.
func TestRunFromPaths(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var h holderTable
		keyRange := rapid.SampledFrom([]uint64{8, 200}).Draw(t, "range")
		key := func(label string) uint64 {
			return rapid.Uint64Range(0, keyRange).Draw(t, label) * 0x5851F42D4C957F2D // 0 stays 0
		}
		for range rapid.IntRange(1, 400).Draw(t, "inserts") {
			h.upsert(key("k")).val = uint32(rapid.IntRange(1, 3).Draw(t, "v")) // few values: runs of one value
		}
		for range rapid.IntRange(0, 100).Draw(t, "deletes") {
			if i := h.find(key("d")); i >= 0 && h.Len() > 1 {
				h.deleteAt(i)
			}
		}
		n := rapid.IntRange(1, 40).Draw(t, "n")
		query, hints := make([]ckf.CanonicalHash, n), make([]uint32, n)
		for i := range query {
			k := key("q")
			query[i] = ckf.CanonicalHash(k)
			switch rapid.IntRange(0, 3).Draw(t, "hint") {
			case 0:
				hints[i] = noHint
			case 1:
				hints[i] = uint32(max(h.find(k), 0)) // its own slot, or slot 0 when absent
			case 2:
				hints[i] = uint32(rapid.IntRange(0, len(h.slots)-1).Draw(t, "slot"))
			default:
				hints[i] = uint32(len(h.slots) + rapid.IntRange(0, 3).Draw(t, "past"))
			}
		}
		// Spans: pieces of one non-zero value, each starting anywhere after the last and ending
		// anywhere inside its value's stretch.
		var spans []span
		for at := rapid.IntRange(0, n).Draw(t, "gap"); at < n; at += rapid.IntRange(0, 3).Draw(t, "gap") {
			v := h.get(uint64(query[at]))
			end := at + 1
			for end < n && h.get(uint64(query[end])) == v {
				end++
			}
			end = rapid.IntRange(at+1, end).Draw(t, "end")
			if v != 0 {
				spans = append(spans, span{from: uint32(at), end: uint32(end), val: v})
			}
			at = end
		}
		cur := []uint32{^uint32(0), 1, 2, 3}[rapid.IntRange(0, 3).Draw(t, "cur")]
		from := rapid.IntRange(0, n-1).Draw(t, "from")
		wantPos, wantV := n, cur
		for i := from; i < n; i++ {
			if v := h.get(uint64(query[i])); v != cur {
				wantPos, wantV = i, v
				break
			}
		}
		for _, warm := range []bool{false, true} {
			for _, hs := range [][]uint32{nil, hints} {
				for _, sp := range [][]span{nil, spans} {
					si := 0
					if pos, v := runFrom(&h, query, hs, sp, &si, from, cur, warm); pos != wantPos || v != wantV {
						t.Fatalf("warm %v, hints %v, spans %v: runFrom = (%d, %d), want (%d, %d)", warm, hs != nil, sp, pos, v, wantPos, wantV)
					}
				}
			}
		}
	})
}
