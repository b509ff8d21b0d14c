package workers

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"testing"

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
			ix.Match(q, Options{}, &r)
			b.ResetTimer()
			for range b.N {
				ix.Match(q, Options{}, &r)
			}
		})
	}
}
