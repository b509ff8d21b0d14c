package peer

// The worker-stage rows of make bench-peer (issue 39): ckf/workers against the crate's
// device indexers (RadixTree, ConcurrentRadixTreeCompressed), same fixtures on both sides
// (bench/peer-dynamo/src/workers.rs builds them from the same SplitMix64 streams).
//
//   - workers-apply/1M, workers-apply/10M: the index holds 1 M (10 M) memberships of the
//     prompt fixture (16-block prompts over 64 workers, every fourth held by 4 workers, rank 0,
//     device tier, external ids = the sequence hashes); each window stores the next 256
//     prompts' events (store-ns/block) and removes the oldest 256 prompts' blocks, leaf first,
//     one event per holder (remove-ns/block); the index stays at its size. Events are built
//     before the timer. rss-B/membership (10M) is the whole process's resident memory grown
//     by the fill, measured after a collection that returns free memory to the OS, per
//     membership.
//   - workers-match128/8, /64, /512: a 128-block prompt held in full by 8, 64, 512 workers;
//     one query per op (every worker's answer), timed one by one for p50/p99. The query is the
//     prompt's local hashes, as the crate takes them: MatchLocal finds the sequence hashes (from
//     its memo of the stores' chains, comparing local hashes) and, as the replica's answers
//     call it, does not keep them; match-p50-ns: Match alone, on precomputed ones.

import (
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/ckf/producer"
	"github.com/ckf-stream/ckf-stream/ckf/workers"
)

const (
	workersPromptStream = 0x5045_4552_574B_5052 // "PEERWKPR"
	workersMatchStream  = 0x5045_4552_574B_4D54 // "PEERWKMT"
	workersCount        = 64
	workersPromptBlocks = 16
	workersWindow       = 256 // prompts per window
	splitMixGamma       = 0x9E3779B97F4A7C15
)

// promptLocals returns prompt p's 16 local hashes: draws 16p+1 … 16p+16 of SplitMix64 from
// workersPromptStream (computed directly, so the oldest prompts need not be kept).
func promptLocals(p uint64) [workersPromptBlocks]uint64 {
	var out [workersPromptBlocks]uint64
	s := splitMix(workersPromptStream + workersPromptBlocks*p*splitMixGamma)
	for i := range out {
		out[i] = s.next()
	}
	return out
}

// promptHolders returns prompt p's workers: (p+h) mod 64 for h < 4 when p is a multiple of 4,
// else p mod 64.
func promptHolders(p uint64) int {
	if p%4 == 0 {
		return 4
	}
	return 1
}

// promptEvents returns prompt p's store events (one per holder, no parent), its removals (the
// 16 ids leaf first, one event per holder) and its sequence hashes.
func promptEvents(p uint64) (stores, removals []producer.RouterEvent, seq []uint64) {
	locals := promptLocals(p)
	seq = ckf.AppendSequenceHashes(make([]uint64, 0, workersPromptBlocks), locals[:])
	blocks := make([]producer.StoredBlock, workersPromptBlocks)
	ids := make([]ckf.ExternalBlockHash, workersPromptBlocks)
	for i := range blocks {
		blocks[i] = producer.StoredBlock{BlockHash: ckf.ExternalBlockHash(seq[i]), TokensHash: ckf.LocalBlockHash(locals[i])}
		ids[workersPromptBlocks-1-i] = ckf.ExternalBlockHash(seq[i])
	}
	for h := range uint64(promptHolders(p)) {
		var st, rm producer.RouterEvent
		st.WorkerID = ckf.WorkerID((p + h) % workersCount)
		st.Event.Kind = producer.KvEventStored
		st.Event.Stored.Blocks = blocks
		rm.WorkerID = st.WorkerID
		rm.Event.Kind = producer.KvEventRemoved
		rm.Event.Removed = ids
		stores, removals = append(stores, st), append(removals, rm)
	}
	return stores, removals, seq
}

// processRSS is the resident set of the process in bytes (/proc/self/statm), 0 where there is
// none.
func processRSS() uint64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0
	}
	pages, _ := strconv.ParseUint(f[1], 10, 64)
	return pages * uint64(os.Getpagesize())
}

// settledRSS collects, returns free memory to the OS and reads the resident set.
func settledRSS() uint64 {
	runtime.GC()
	debug.FreeOSMemory()
	return processRSS()
}

// BenchmarkPeerWorkersApply is workers-apply/1M and workers-apply/10M (see the file comment).
func BenchmarkPeerWorkersApply(b *testing.B) {
	for _, n := range []int{1 << 20, 10 << 20} {
		b.Run(fmt.Sprintf("%dM", n>>20), func(b *testing.B) {
			ix := workers.New()
			before := settledRSS()
			sum := newChecksum()
			next, members := uint64(0), 0
			for ; members < n; next++ {
				st, _, seq := promptEvents(next)
				for _, h := range seq {
					sum.add(h)
				}
				for _, ev := range st {
					if err := ix.Apply(ev); err != nil {
						b.Fatal(err)
					}
					members += workersPromptBlocks
				}
			}
			sum.add(uint64(members))
			rss := float64(settledRSS()-before) / float64(members)
			oldest := uint64(0)
			var storeNs, removeNs, storeBlocks, removeBlocks float64
			window := func() {
				b.StopTimer()
				var stores, removals []producer.RouterEvent
				for p := next; p < next+workersWindow; p++ {
					st, _, _ := promptEvents(p)
					stores = append(stores, st...)
				}
				for p := oldest; p < oldest+workersWindow; p++ {
					_, rm, _ := promptEvents(p)
					removals = append(removals, rm...)
				}
				b.StartTimer()
				t0 := time.Now()
				for i := range stores {
					if err := ix.Apply(stores[i]); err != nil {
						b.Fatal(err)
					}
				}
				t1 := time.Now()
				for i := range removals {
					if err := ix.Apply(removals[i]); err != nil {
						b.Fatal(err)
					}
				}
				t2 := time.Now()
				storeNs += float64(t1.Sub(t0))
				removeNs += float64(t2.Sub(t1))
				storeBlocks += float64(workersPromptBlocks * len(stores))
				removeBlocks += float64(workersPromptBlocks * len(removals))
				next += workersWindow
				oldest += workersWindow
			}
			// Warm-up (untimed, as the Rust side's tenth of its budget): the tables settle at
			// their steady size and the freed pages come back before the first timed window.
			b.StopTimer()
			for range 16 {
				window()
			}
			storeNs, removeNs, storeBlocks, removeBlocks = 0, 0, 0, 0
			b.ResetTimer()
			for range b.N {
				window()
			}
			b.StopTimer()
			if tel := ix.Telemetry(); tel.UnknownRemovals != 0 || tel.DuplicateBlocks != 0 {
				b.Fatalf("the fixture is not what both sides apply: %+v", tel)
			}
			b.ReportMetric(storeNs/storeBlocks, "store-ns/block")
			b.ReportMetric(removeNs/removeBlocks, "remove-ns/block")
			b.ReportMetric(rss, "rss-B/membership")
			b.ReportMetric(float64(sum.fold48()), "fixture-sum")
			runtime.KeepAlive(ix)
		})
		debug.FreeOSMemory()
	}
}

// BenchmarkPeerWorkersMatch128 is workers-match128/8, /64, /512 (see the file comment).
func BenchmarkPeerWorkersMatch128(b *testing.B) {
	rng := splitMix(workersMatchStream)
	locals := make([]ckf.LocalBlockHash, queryChainLen)
	raw := make([]uint64, queryChainLen)
	for i := range locals {
		raw[i] = rng.next()
		locals[i] = ckf.LocalBlockHash(raw[i])
	}
	seq := ckf.AppendSequenceHashes(nil, raw)
	canon := make([]ckf.CanonicalHash, len(seq))
	var ev producer.RouterEvent
	ev.Event.Kind = producer.KvEventStored
	for i, h := range seq {
		canon[i] = ckf.CanonicalHash(h)
		ev.Event.Stored.Blocks = append(ev.Event.Stored.Blocks, producer.StoredBlock{BlockHash: ckf.ExternalBlockHash(h), TokensHash: locals[i]})
	}
	for _, n := range []int{8, 64, 512} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			ix := workers.New()
			sum := newChecksum()
			for _, x := range raw {
				sum.add(x)
			}
			sum.add(uint64(n))
			for w := range n {
				ev.WorkerID = ckf.WorkerID(w)
				if err := ix.Apply(ev); err != nil {
					b.Fatal(err)
				}
			}
			var r workers.Result
			var chain []ckf.CanonicalHash
			ix.MatchLocal(locals, workers.Options{}, &r, &chain)
			if len(r.Matches) != n || r.Matches[0].Device != queryChainLen || !slices.Equal(chain, canon) {
				b.Fatalf("%d matches, first %+v", len(r.Matches), r.Matches[0])
			}
			d := make([]time.Duration, 0, b.N)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				t0 := time.Now()
				ix.MatchLocal(locals, workers.Options{}, &r, nil) // as the replica's answers call it
				d = append(d, time.Since(t0))
			}
			b.StopTimer()
			sink += uint64(len(r.Matches))
			slices.Sort(d)
			b.ReportMetric(float64(d[len(d)/2].Nanoseconds()), "p50-ns")
			b.ReportMetric(float64(d[len(d)*99/100].Nanoseconds()), "p99-ns")
			// Match alone, on the precomputed sequence hashes (the product computes them once
			// for both routing stages).
			m := make([]time.Duration, 0, 4096)
			for range cap(m) {
				t0 := time.Now()
				ix.Match(canon, workers.Options{}, &r)
				m = append(m, time.Since(t0))
			}
			slices.Sort(m)
			b.ReportMetric(float64(m[len(m)/2].Nanoseconds()), "match-p50-ns")
			b.ReportMetric(float64(sum.fold48()), "fixture-sum")
		})
	}
}
