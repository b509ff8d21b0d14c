package workers

import (
	"encoding/binary"
	"slices"
	"testing"

	"pgregory.net/rapid"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/ckf/producer"
)

// TestChainMemoIsExact: whatever the memo holds (runs of stores with and without parents, of
// any length, over few token hashes so that chains share prefixes and branch, in a table kept
// so small that runs overwrite each other), fill gives every prompt's canonical chain, stored
// or not, diverging from a run anywhere, with each block's own slot hint outside the spans
// that run summaries cover, and spans in order inside the prompt; follow, given the chain,
// finds fill's spans (or their first ones) and hints. (That a summary is true is
// TestIndexMatchesModel's check, checkSummaries.)
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
			var dev *holderTable
			if rapid.Bool().Draw(t, "device") {
				dev = hintTable(p)
			}
			m.recordStore(from > 0, blocks, p, dev)
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
			spans := m.fill(got, hints, q, nil, true)
			if want := canonicals(q); !slices.Equal(got, want) {
				t.Fatalf("fill(%v) = %v, want %v", q, got, want)
			}
			covered := make([]bool, len(q))
			end := uint32(0)
			for _, sp := range spans {
				if sp.from < end || sp.end <= sp.from || int(sp.end) > len(q) || sp.val != 1 {
					t.Fatalf("fill(%v): spans %v out of order, empty, past the query or of another value", q, spans)
				}
				for i := sp.from; i < sp.end; i++ {
					covered[i] = true
				}
				end = sp.end
			}
			for i, h := range hints {
				if !covered[i] && h != noHint && h != hintOf(got[i]) { // a covered block's hint is not read
					t.Fatalf("fill(%v): hint %d of block %d is another block's", q, h, i)
				}
			}
			// follow on the canonical chain: its spans are fill's (it may stop looking sooner),
			// and outside them each block's own hint or none.
			fh := make([]uint32, len(q))
			fs := m.follow(got, fh, nil)
			for j, sp := range fs {
				if j >= len(spans) || sp != spans[j] {
					t.Fatalf("follow(%v): spans %v, fill's %v", q, fs, spans)
				}
			}
			followed := make([]bool, len(q))
			for _, sp := range fs {
				for i := sp.from; i < sp.end; i++ {
					followed[i] = true
				}
			}
			for i, h := range fh {
				if !followed[i] && h != noHint && h != hintOf(got[i]) {
					t.Fatalf("follow(%v): hint %d of block %d is another block's", q, h, i)
				}
			}
			// Not full: the same spans, and the same canonicals outside them.
			part := make([]ckf.CanonicalHash, len(q))
			if ps := m.fill(part, hints, q, nil, false); !slices.Equal(ps, spans) {
				t.Fatalf("fill(%v) not full: spans %v, full %v", q, ps, spans)
			}
			for i := range q {
				if !covered[i] && part[i] != got[i] {
					t.Fatalf("fill(%v) not full: block %d is %#x, want %#x", q, i, uint64(part[i]), uint64(got[i]))
				}
			}
		}
	})
}

// hintOf is TestChainMemoIsExact's slot of canonical c: any value but noHint.
func hintOf(c ckf.CanonicalHash) uint32 { return uint32(c) % 1000 }

// hintTable is a device tier map for TestChainMemoIsExact's store p that holds each block's
// canonical in its hintOf slot, so that the store's summaries (chainMemo.summarize) keep the
// hints; its lookups find nothing (no homes), so a block whose slot is another's ends a summary
// and keeps its hint too.
func hintTable(p []prepared) *holderTable {
	h := &holderTable{slots: make([]holderSlot, 1000), live: 1}
	for _, q := range p {
		s := &h.slots[hintOf(q.canon)]
		binary.LittleEndian.PutUint64(s.key[:], uint64(q.canon))
		s.val = 1
	}
	return h
}

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

// TestRunSummaries follows one run's summary through a store, a second holder's store, a
// displacement to the second place of its pair, a removal and a store on another tier
// (workers §5.4), checking the summaries' invariant (checkSummaries) and the answers after each
// step; the walk passes a summarised run without a lookup, so a summary left true by mistake
// would show in MatchLocal's answer.
func TestRunSummaries(t *testing.T) {
	ix := New()
	a := []ckf.LocalBlockHash{1, 2, 3, 4, 5}
	b := []ckf.LocalBlockHash{6, 7, 8}
	w1, w2 := src{w: 1}, src{w: 2}
	mustApply(t, ix, w1.store(nil, a...))
	ix.memo.resize(2)         // one pair: the next root store's run displaces a's,
	ix.memo.stored = -1 << 30 // and the table does not grow
	check := func(step string, wantSpan bool, want map[ckf.SourceKey]uint32) {
		t.Helper()
		checkSummaries(t, ix)
		var r Result
		spans := ix.memo.fill(make([]ckf.CanonicalHash, len(a)), make([]uint32, len(a)), a, nil, true)
		if got := len(spans) == 1 && spans[0] == (span{from: 0, end: uint32(len(a)), val: spans[0].val}); got != wantSpan {
			t.Fatalf("%s: spans %v, want one over the run: %v", step, spans, wantSpan)
		}
		ix.MatchLocal(a, Options{}, &r, nil)
		if passed, walked := r.Summarised(); walked != len(a) || (passed == len(a)) != wantSpan {
			t.Fatalf("%s: the walk passed %d of %d positions by summaries", step, passed, walked)
		}
		got := map[ckf.SourceKey]uint32{}
		for _, m := range r.Matches {
			got[m.Source] = m.Device
		}
		wantDepths(t, got, want)
	}
	mustApply(t, ix, w2.store(nil, a...)) // the same run again: summarised, both holders
	check("second holder", true, map[ckf.SourceKey]uint32{w1.key(): 5, w2.key(): 5})
	mustApply(t, ix, w1.store(nil, b...)) // a's run moves to the pair's second place, summary and all
	if ix.memo.runs[1].key != uint64(canonicals(a)[0]) {
		t.Fatalf("a's run is not in the pair's second place")
	}
	check("displaced", true, map[ckf.SourceKey]uint32{w1.key(): 5, w2.key(): 5})
	mustApply(t, ix, w2.remove(a, 4)) // a's last block loses a holder: the pair's summaries go
	check("removal", false, map[ckf.SourceKey]uint32{w1.key(): 5, w2.key(): 4})
	mustApply(t, ix, w2.store(a[:4], a[4])) // a run of a's last block, which displaces a's whole run from the pair
	check("tail store", false, map[ckf.SourceKey]uint32{w1.key(): 5, w2.key(): 5})
	host := src{w: 3, tier: producer.StorageTierHostPinned}
	mustApply(t, ix, w1.store(nil, a...), host.store(nil, a...)) // a device store summarises; a host one changes no device value
	check("host store", true, map[ckf.SourceKey]uint32{w1.key(): 5, w2.key(): 5, host.key(): 0})
}

// TestRunSummaryTakenOver: a run that summarises blocks another pair's summary covers takes
// their references over and voids that summary, so a later change to one of those blocks,
// which voids only the new pair's, leaves no summary that still claims the old value. The
// second run's store changes no holder value: its blocks are duplicates (no slot hints: the
// general path) or aliases, the same canonicals under other external ids (slot hints: the
// usual path).
func TestRunSummaryTakenOver(t *testing.T) {
	for _, alias := range []bool{false, true} {
		t.Run(map[bool]string{false: "duplicates", true: "aliases"}[alias], func(t *testing.T) {
			ix := New()
			a := []ckf.LocalBlockHash{1, 2, 3, 4, 5}
			w1, w2 := src{w: 1}, src{w: 2}
			mustApply(t, ix, w1.store(nil, a...))
			// The run of a and the one from its fourth block on in different pairs.
			ca := canonicals(a)
			for ix.memo.home(uint64(ca[0])) == ix.memo.home(uint64(ca[3])) {
				ix.memo.seed++
				ix.memo.resize(len(ix.memo.runs))
			}
			mustApply(t, ix, w2.store(nil, a...)) // run A (all of a) summarised: both holders
			b := w1.store(a[:3], a[3:]...)        // run B (a[3:]): takes a[3:]'s references
			if alias {
				for i := range b.Event.Stored.Blocks {
					b.Event.Stored.Blocks[i].BlockHash ^= 0x5A5A
				}
			}
			mustApply(t, ix, b)
			checkSummaries(t, ix)
			mustApply(t, ix, w2.remove(a, 4))
			checkSummaries(t, ix)
			var r Result
			ix.MatchLocal(a, Options{}, &r, nil)
			got := map[ckf.SourceKey]uint32{}
			for _, m := range r.Matches {
				got[m.Source] = m.Device
			}
			wantDepths(t, got, map[ckf.SourceKey]uint32{w1.key(): 5, w2.key(): 4})
		})
	}
}
