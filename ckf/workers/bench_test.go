package workers

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/ckf/producer"
)

// fillFixture stores prompts of 16 blocks over 64 workers, a quarter of them held by 4 workers
// (the shape of the peer rows), until at least n memberships.
func fillFixture(n int) *Index {
	ix := New()
	var ev producer.RouterEvent
	ev.Event.Kind = producer.KvEventStored
	ev.Event.Stored.Blocks = make([]producer.StoredBlock, 16)
	for p, members := uint64(0), 0; members < n; p++ {
		var prev ckf.CanonicalHash
		for i := range 16 {
			l := ckf.LocalBlockHash(p<<8 | uint64(i) | 1<<40)
			if i == 0 {
				prev = ckf.CanonicalRoot(l)
			} else {
				prev = ckf.CanonicalChild(prev, l)
			}
			ev.Event.Stored.Blocks[i] = producer.StoredBlock{BlockHash: ckf.ExternalBlockHash(prev), TokensHash: l}
		}
		holders := 1
		if p%4 == 0 {
			holders = 4
		}
		for h := range holders {
			ev.WorkerID = ckf.WorkerID((p + uint64(h)) % 64)
			if err := ix.Apply(ev); err != nil {
				panic(err)
			}
			members += 16
		}
	}
	return ix
}

// BenchmarkMembershipMemory reports the heap per (block, holder) membership after a GC, at 1 M
// and 10 M memberships (workers §8; the target is at most 48 B at 10 M).
func BenchmarkMembershipMemory(b *testing.B) {
	for _, n := range []int{1 << 20, 10 << 20} {
		b.Run(fmt.Sprintf("%dM", n>>20), func(b *testing.B) {
			if testing.Short() && n > 1<<20 {
				b.Skip("10 M memberships: skipped with -short")
			}
			for range b.N {
				var before, after runtime.MemStats
				runtime.GC()
				debug.FreeOSMemory()
				runtime.ReadMemStats(&before)
				ix := fillFixture(n)
				runtime.GC()
				debug.FreeOSMemory()
				runtime.ReadMemStats(&after)
				st := ix.Stats()
				m := st.Memberships[0]
				b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/float64(m), "B/membership")
				b.ReportMetric(float64(st.Bytes)/float64(m), "table-B/membership")
				runtime.KeepAlive(ix)
			}
		})
	}
}

// BenchmarkMatch128 answers a 128-block prompt that N workers hold in full (every worker's
// answer, no early exit), the shape of the match rows.
func BenchmarkMatch128(b *testing.B) {
	for _, n := range []int{8, 64, 512} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			ix := New()
			chain := make([]ckf.LocalBlockHash, 128)
			for i := range chain {
				chain[i] = ckf.LocalBlockHash(i + 1)
			}
			for w := range n {
				if err := ix.Apply(src{w: ckf.WorkerID(w)}.store(nil, chain...)); err != nil {
					b.Fatal(err)
				}
			}
			q := canonicals(chain)
			var r Result
			b.Run("Match", func(b *testing.B) {
				ix.Match(q, Options{}, &r)
				b.ResetTimer()
				for range b.N {
					ix.Match(q, Options{}, &r)
				}
			})
			b.Run("MatchLocal", func(b *testing.B) { // as the replica's answers call it, without the chain
				ix.MatchLocal(chain, Options{}, &r, nil)
				b.ResetTimer()
				for range b.N {
					ix.MatchLocal(chain, Options{}, &r, nil)
				}
			})
		})
	}
}

// BenchmarkChain128 is the canonical chain of a 128-block prompt: read from the slab, where a
// store of it is (slab: slab.chainOf), or hashed (hash: ckf.AppendSequenceHashes; miss: chainOf
// on a prompt the slab holds nothing of).
func BenchmarkChain128(b *testing.B) {
	local := make([]ckf.LocalBlockHash, 128)
	for i := range local {
		local[i] = ckf.LocalBlockHash(i + 1)
	}
	ix := New()
	if err := ix.Apply(src{w: 1}.store(nil, local...)); err != nil {
		b.Fatal(err)
	}
	out := make([]ckf.CanonicalHash, len(local))
	b.Run("slab", func(b *testing.B) {
		for range b.N {
			ix.slab.chainOf(local, out)
		}
	})
	b.Run("hash", func(b *testing.B) {
		w := asWords(out[:0])
		for range b.N {
			w = ckf.AppendSequenceHashes(w[:0], asWords(local))
		}
	})
	other := make([]ckf.LocalBlockHash, len(local))
	for i := range other {
		other[i] = local[i] + 1000
	}
	b.Run("miss", func(b *testing.B) {
		for range b.N {
			ix.slab.chainOf(other, out)
		}
	})
}

// promptEvents appends prompt p's store events (16 blocks, one holder, or four for every
// fourth prompt, over 64 workers: fillFixture's shape) to stores and their removals (the 16
// blocks leaf first, the order engines evict in) to removals.
func promptEvents(p uint64, stores, removals []producer.RouterEvent) ([]producer.RouterEvent, []producer.RouterEvent) {
	blocks := make([]producer.StoredBlock, 16)
	var prev ckf.CanonicalHash
	for i := range 16 {
		l := ckf.LocalBlockHash(p<<8 | uint64(i) | 1<<40)
		if i == 0 {
			prev = ckf.CanonicalRoot(l)
		} else {
			prev = ckf.CanonicalChild(prev, l)
		}
		blocks[i] = producer.StoredBlock{BlockHash: ckf.ExternalBlockHash(prev), TokensHash: l}
	}
	ids := make([]ckf.ExternalBlockHash, 16)
	for i := range ids {
		ids[i] = blocks[15-i].BlockHash
	}
	holders := 1
	if p%4 == 0 {
		holders = 4
	}
	for h := range holders {
		var ev producer.RouterEvent
		ev.WorkerID = ckf.WorkerID((p + uint64(h)) % 64)
		ev.Event.Kind = producer.KvEventStored
		ev.Event.Stored.Blocks = blocks
		stores = append(stores, ev)
		ev.Event.Kind = producer.KvEventRemoved
		ev.Event.Stored = producer.StoreData{}
		ev.Event.Removed = ids
		removals = append(removals, ev)
	}
	return stores, removals
}

// windowPrompts is the number of prompts a timed window of BenchmarkApply stores and removes
// (448 events, 7,168 memberships).
const windowPrompts = 256

// BenchmarkApply holds an index at 1 M and 10 M memberships (the fixture's prompts in order)
// and, per window, stores the next windowPrompts prompts (store/…) and removes the oldest
// windowPrompts (remove/…), so the index stays at its size; ns/block is per membership stored
// or removed, the unit of the event-apply rows. Events are built before the timer.
func BenchmarkApply(b *testing.B) {
	for _, n := range []int{1 << 20, 10 << 20} {
		if testing.Short() && n > 1<<20 {
			continue
		}
		ix := New()
		next := uint64(0)
		for m := 0; m < n; next++ {
			st, _ := promptEvents(next, nil, nil)
			for _, ev := range st {
				if err := ix.Apply(ev); err != nil {
					b.Fatal(err)
				}
				m += 16
			}
		}
		oldest := uint64(0)
		var storeNs, removeNs, storeBlocks, removeBlocks float64
		window := func() {
			var st, rm []producer.RouterEvent
			for p := next; p < next+windowPrompts; p++ {
				st, _ = promptEvents(p, st, nil)
			}
			for p := oldest; p < oldest+windowPrompts; p++ {
				_, rm = promptEvents(p, nil, rm)
			}
			t0 := time.Now()
			for i := range st {
				if err := ix.Apply(st[i]); err != nil {
					b.Fatal(err)
				}
			}
			t1 := time.Now()
			for i := range rm {
				ix.Apply(rm[i])
			}
			t2 := time.Now()
			storeNs += float64(t1.Sub(t0))
			removeNs += float64(t2.Sub(t1))
			storeBlocks += float64(16 * len(st))
			removeBlocks += float64(16 * len(rm))
			next += windowPrompts
			oldest += windowPrompts
		}
		b.Run(fmt.Sprintf("%dM", n>>20), func(b *testing.B) {
			storeNs, removeNs, storeBlocks, removeBlocks = 0, 0, 0, 0
			for range b.N {
				window()
			}
			b.ReportMetric(storeNs/storeBlocks, "store-ns/block")
			b.ReportMetric(removeNs/removeBlocks, "remove-ns/block")
		})
	}
}

// BenchmarkLineageRows is a replica's checkpoint of the index at 1 M and 10 M memberships
// (workers §2.2): take the lineage's snapshot (snapshot-ns/row, what a replica's loop waits for),
// then the copies it costs the index later (cow-ns/row: one one-block store to every source, each
// the source's first write since the snapshot, so each copies the source's buckets;
// cow-max-ms: the longest of those events, the most one event waits), read every source's rows
// from the snapshot (read-ns/row) and restore them into an empty index
// (restore-ns/row), beside two baselines of the same run: building the index from the
// fixture's 16-block stores (fill-ns/row: one row per membership here, every block on one
// tier), and restoring the rows as one-block stores through Apply, one row an event
// (apply-ns/row).
func BenchmarkLineageRows(b *testing.B) {
	for _, n := range []int{1 << 20, 10 << 20} {
		b.Run(fmt.Sprintf("%dM", n>>20), func(b *testing.B) {
			if testing.Short() && n > 1<<20 {
				b.Skip("10 M memberships: skipped with -short")
			}
			var fill, snapshot, cow, cowMax, read, restore, apply time.Duration
			var rows int
			for range b.N {
				t0 := time.Now()
				ix := fillFixture(n)
				t1 := time.Now()
				snap := ix.SnapshotLineage()
				ts := time.Now()
				srcs := snap.Sources()
				one := producer.RouterEvent{Event: producer.KvCacheEvent{Kind: producer.KvEventStored,
					Stored: producer.StoreData{Blocks: make([]producer.StoredBlock, 1)}}}
				for k, src := range srcs {
					one.WorkerID, one.Event.DpRank = src.Worker, src.Rank
					one.Event.Stored.Blocks[0] = producer.StoredBlock{BlockHash: ckf.ExternalBlockHash(1<<63 | uint64(k)), TokensHash: 1}
					tw := time.Now()
					if err := ix.Apply(one); err != nil {
						b.Fatal(err)
					}
					d := time.Since(tw)
					cow, cowMax = cow+d, max(cowMax, d)
				}
				ts2 := time.Now()
				all := make([][]LineageRow, len(srcs))
				for i, src := range srcs {
					all[i] = snap.AppendLineage(nil, src)
				}
				t2 := time.Now()
				snapshot += ts.Sub(t1)
				rx := New()
				for i, src := range srcs {
					if err := rx.RestoreLineage(src, all[i]); err != nil {
						b.Fatal(err)
					}
				}
				t3 := time.Now()
				rx = nil
				ax := New()
				ev := producer.RouterEvent{Event: producer.KvCacheEvent{Kind: producer.KvEventStored,
					Stored: producer.StoreData{Blocks: make([]producer.StoredBlock, 1)}}}
				t4 := time.Now()
				for i, src := range srcs {
					ev.WorkerID, ev.Event.DpRank = src.Worker, src.Rank
					for _, r := range all[i] {
						ev.Event.Stored.Blocks[0] = producer.StoredBlock{BlockHash: r.ID, TokensHash: ckf.LocalBlockHash(r.Canonical)}
						if err := ax.Apply(ev); err != nil {
							b.Fatal(err)
						}
					}
				}
				t5 := time.Now()
				_, r := ax.LineageSize()
				fill, read, restore, rows = fill+t1.Sub(t0), read+t2.Sub(ts2), restore+t3.Sub(t2), rows+r
				apply += t5.Sub(t4)
			}
			per := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / float64(rows) }
			b.ReportMetric(per(fill), "fill-ns/row")
			b.ReportMetric(per(snapshot), "snapshot-ns/row")
			b.ReportMetric(per(cow), "cow-ns/row")
			b.ReportMetric(float64(cowMax.Nanoseconds())/1e6, "cow-max-ms")
			b.ReportMetric(per(read), "read-ns/row")
			b.ReportMetric(per(restore), "restore-ns/row")
			b.ReportMetric(per(apply), "apply-ns/row")
		})
	}
}
