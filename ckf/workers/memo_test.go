package workers

import (
	"slices"
	"testing"

	"pgregory.net/rapid"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/ckf/producer"
)

// TestChainMemoIsExact: whatever the memo holds (runs of stores with and without parents, of
// any length, over few token hashes so that chains share prefixes and branch, in a table kept
// so small that runs overwrite each other), fill gives every prompt's canonical chain, stored
// or not, diverging from a run anywhere.
func TestChainMemoIsExact(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var m chainMemo
		places := 1 << rapid.IntRange(1, 3).Draw(t, "places") // one to four pairs
		tok := rapid.Custom(func(t *rapid.T) ckf.LocalBlockHash {
			return ckf.LocalBlockHash(rapid.IntRange(1, 3).Draw(t, "tok"))
		})
		var stored [][]ckf.LocalBlockHash
		for range rapid.IntRange(0, 12).Draw(t, "stores") {
			var prompt []ckf.LocalBlockHash
			if len(stored) > 0 && rapid.Bool().Draw(t, "extend") {
				base := stored[rapid.IntRange(0, len(stored)-1).Draw(t, "base")]
				prompt = slices.Clone(base[:rapid.IntRange(0, len(base)).Draw(t, "cut")])
			}
			from := len(prompt)
			prompt = append(prompt, rapid.SliceOfN(tok, 1, 40).Draw(t, "blocks")...)
			canon := canonicals(prompt)
			var blocks []producer.StoredBlock
			var p []prepared
			for i := from; i < len(prompt); i++ {
				blocks = append(blocks, producer.StoredBlock{BlockHash: ckf.ExternalBlockHash(canon[i]), TokensHash: prompt[i]})
				// Each block's slot is a function of its canonical, so that a hint read back can be
				// checked against the block it is read for.
				p = append(p, prepared{ext: ckf.ExternalBlockHash(canon[i]), canon: canon[i], slot: hintOf(canon[i])})
			}
			var parent ckf.CanonicalHash
			if from > 0 {
				parent = canon[from-1]
			}
			m.recordStore(from > 0, parent, blocks, p, rapid.Bool().Draw(t, "device"))
			if len(m.runs) > places {
				m.resize(places)
			}
			stored = append(stored, prompt)
		}
		for range rapid.IntRange(1, 8).Draw(t, "queries") {
			var q []ckf.LocalBlockHash
			if len(stored) > 0 && rapid.Bool().Draw(t, "fromStored") {
				base := stored[rapid.IntRange(0, len(stored)-1).Draw(t, "qbase")]
				q = slices.Clone(base[:rapid.IntRange(0, len(base)).Draw(t, "qcut")])
			}
			q = append(q, rapid.SliceOfN(tok, 0, 20).Draw(t, "qtail")...)
			if len(q) == 0 {
				continue
			}
			got, hints := make([]ckf.CanonicalHash, len(q)), make([]uint32, len(q))
			m.fill(got, hints, q)
			if want := canonicals(q); !slices.Equal(got, want) {
				t.Fatalf("fill(%v) = %v, want %v", q, got, want)
			}
			for i, h := range hints {
				if h != noHint && h != hintOf(got[i]) {
					t.Fatalf("fill(%v): hint %d of block %d is another block's", q, h, i)
				}
			}
		}
	})
}

// hintOf is TestChainMemoIsExact's slot of canonical c: any value but noHint.
func hintOf(c ckf.CanonicalHash) uint32 { return uint32(c) % 1000 }

// TestChainMemoRecordsStores: a store's chain is read back from the memo by local hashes
// alone, for a root store, a store with a parent and one longer than a run, and a query that
// diverges inside a run continues from another store's run.
func TestChainMemoRecordsStores(t *testing.T) {
	ix := New()
	long := make([]ckf.LocalBlockHash, 40)
	for i := range long {
		long[i] = ckf.LocalBlockHash(100 + i)
	}
	mustApply(t, ix, src{w: 1}.store(nil, long[:20]...), src{w: 1}.store(long[:20], long[20:]...))
	branch := append(slices.Clone(long[:10]), 7, 8, 9)
	mustApply(t, ix, src{w: 1}.store(long[:10], 7, 8, 9))
	for _, q := range [][]ckf.LocalBlockHash{long, branch, long[:1], append(slices.Clone(long[:30]), 1, 2)} {
		var r Result
		var c []ckf.CanonicalHash
		ix.MatchLocal(q, Options{}, &r, &c)
		if want := canonicals(q); !slices.Equal(c, want) {
			t.Fatalf("MatchLocal(%v) chain %v, want %v", q, c, want)
		}
	}
}
