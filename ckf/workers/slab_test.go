package workers

import (
	"testing"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/ckf/producer"
)

// TestSlabPageBoundary (workers §8): runs of 16 blocks fill the first page of the slab exactly,
// the last one ending at the page's last position; a chain continued from that block finds no
// room after it and goes on in a run of the next page, which stores and both walks (Match and
// MatchLocal, by canonical and by local hash) reach through the head map. A run whose blocks are
// all removed gives its range back, and the next run of its size takes it.
func TestSlabPageBoundary(t *testing.T) {
	ix := New()
	a, b := src{w: 1}, src{w: 2}
	prompt := func(k, n int) []ckf.LocalBlockHash {
		p := make([]ckf.LocalBlockHash, n)
		for i := range p {
			p[i] = ckf.LocalBlockHash(k<<12 | i + 1)
		}
		return p
	}
	const runs = slabPageSize / 16
	for k := range runs {
		mustApply(t, ix, a.store(nil, prompt(k, 16)...))
	}
	last := prompt(runs-1, 16)
	if got := ix.slab.at(slabPageSize - 1).canon; got != canonicals(last)[15] || ix.slab.next != slabPageSize {
		t.Fatalf("the page's last block is %#x and the next position %d; want the last prompt's last block and %d", uint64(got), ix.slab.next, slabPageSize)
	}
	more := prompt(runs, 8)
	mustApply(t, ix, a.store(last, more...))
	whole := append(last[:16:16], more...)
	q := canonicals(whole)
	head := ix.slab.head(q[16])
	if head == noPos || head < slabPageSize {
		t.Fatalf("the continuation's first block is at %d; want the head of a run in the second page", head)
	}
	mustApply(t, ix, b.store(nil, whole...)) // from the root: across the boundary by the head map
	var r Result
	for _, local := range []bool{false, true} {
		if local {
			ix.MatchLocal(whole, Options{}, &r, nil)
		} else {
			ix.Match(q, Options{}, &r)
		}
		if len(r.Matches) != 2 || r.Matches[0].Device != 24 || r.Matches[1].Device != 24 {
			t.Fatalf("MatchLocal %v: %+v; want both sources at 24", local, r.Matches)
		}
	}
	var chain []ckf.CanonicalHash
	ix.MatchLocal(whole, Options{}, &r, &chain)
	if len(chain) != len(q) || chain[23] != q[23] || chain[16] != q[16] {
		t.Fatalf("MatchLocal's chain %v; want %v", chain, q)
	}
	checkSlab(t, ix)

	// Removed last block first, a prompt's run goes whole and its range is taken again.
	gone := prompt(7, 16)
	start := ix.slab.head(canonicals(gone)[0])
	mustApply(t, ix, a.remove(gone, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0))
	if ix.slab.head(canonicals(gone)[0]) != noPos {
		t.Fatalf("a removed prompt's head is still in the head map")
	}
	if ix.MatchLocal(gone, Options{}, &r, nil); len(r.Matches) != 0 {
		t.Fatalf("a removed prompt answers %+v", r.Matches)
	}
	fresh := prompt(runs+1, 16)
	mustApply(t, ix, a.store(nil, fresh...))
	if got := ix.slab.head(canonicals(fresh)[0]); got != start {
		t.Fatalf("the next 16-block run is at %d; want the freed range at %d", got, start)
	}
	if ix.MatchLocal(fresh, Options{}, &r, nil); len(r.Matches) != 1 || r.Matches[0].Device != 16 {
		t.Fatalf("the new prompt answers %+v", r.Matches)
	}
	checkSlab(t, ix)
}

// TestStoreFindsRestoredBlocks (workers §2.2, §8): rows restored without their parents are
// orphan heads, so a store after a restore looks for its new blocks' children among the heads
// instead of writing them after the new block: a block is still one block of the slab, held by
// both the restored source and the storing one.
func TestStoreFindsRestoredBlocks(t *testing.T) {
	ix := New()
	a, b := src{w: 1}, src{w: 2}
	chain := []ckf.LocalBlockHash{1, 2, 3}
	mustApply(t, ix, a.store(nil, chain...), a.remove(chain, 0)) // a holds the 2nd and 3rd only
	rx := New()
	if err := rx.RestoreLineage(a.key(), ix.AppendLineage(nil, a.key())); err != nil {
		t.Fatal(err)
	}
	if rx.slab.orphans != 2 {
		t.Fatalf("%d orphans after restoring 2 rows; want 2", rx.slab.orphans)
	}
	mustApply(t, rx, b.store(nil, chain...)) // the first block is new, the others restored
	if st := rx.Stats(); st.Canonicals[producer.StorageTierDevice] != 3 || st.Memberships[producer.StorageTierDevice] != 5 {
		t.Fatalf("stats %+v: want 3 canonicals, 5 memberships", st)
	}
	wantDepths(t, depths(rx, chain...), map[ckf.SourceKey]uint32{b.key(): 3})
	checkSlab(t, rx)
}
