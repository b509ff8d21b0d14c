package index

// Cost per query versus query length (design §6.1 "Scaling": the cost of a
// query must grow with log2 of its length per lane, not linearly).
//
//	go test -run '^$' -bench 'QueryCostVsLength' -count 5 ./ckf/
//
// One 16-lane table of 2^20 buckets (128 MiB) with about 50 % random slot
// occupancy holds, for every length L in 8..1024, lenChains chains of L
// blocks in two shapes:
//
//   - shared: every lane caches the whole chain (the agentic / system-prompt
//     case; the search gallops to the end and verifies);
//   - divergent: each lane caches the chain to an independent uniform depth
//     in [0, L] (the worst case for the grouped bisection).
//
// Per (shape, L) three variants run on the same chains:
//
//   - transposed: GlobalIndexer.FindPrefixMatchesScratch, the production
//     query (sequence-hash chain + search). Metrics: probes/query (the
//     search's probe calls) and search-ns/query (the search alone, timed on
//     precomputed sequence hashes in a separate pass).
//   - baseline=linear: the sequence-hash chain plus the linear reference
//     scan (LinearPrefixDepths) on the same transposed table; its cost grows
//     linearly with L.
//
// tools/benchreport fits ns/query and probes/query against log2(L) and
// against L; tools/plots draws docs/perf/query-cost-vs-length.png.

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/ckf/internal/search"
)

func nowNanos() int64 { return time.Now().UnixNano() }

var queryLens = []int{8, 16, 32, 64, 128, 256, 512, 1024}

const lenChains = 64 // chains per (shape, length): consecutive queries hit cold rows

type lenBenchTable struct {
	f      *fixture
	chains map[string][][]uint64 // "shared/128" -> chains
}

var (
	lenBenchOnce sync.Once
	lenBench     *lenBenchTable
)

func getLenBenchTable(b *testing.B) *lenBenchTable {
	lenBenchOnce.Do(func() { lenBench = buildLenBenchTable(b) })
	if lenBench == nil {
		b.Fatal("length benchmark table not built")
	}
	return lenBench
}

func buildLenBenchTable(b *testing.B) *lenBenchTable {
	const buckets = 1 << 20
	f := newFixture(b, ckf.LaneCount, buckets, ckf.DefaultVerificationWindow)
	r := rand.New(rand.NewPCG(0x1e9, 0xbe5c))
	lanes := make([][]uint64, ckf.LaneCount)
	for l := range lanes {
		w := make([]uint64, buckets)
		for i := range w {
			var word uint64
			for s := 0; s < 4; s++ {
				if r.IntN(2) == 0 {
					fp := uint16(r.Uint32())
					if fp == 0 {
						fp = 1
					}
					word |= uint64(fp) << (16 * s)
				}
			}
			w[i] = word
		}
		lanes[l] = w
	}
	place := func(l int, p ckf.Probe) {
		for _, bk := range []uint64{p.BucketA, p.BucketB} {
			if s, ok := ckf.Bucket(lanes[l][bk]).FreeSlot(); ok {
				lanes[l][bk] = uint64(ckf.Bucket(lanes[l][bk]).WithSlot(s, p.Fingerprint))
				return
			}
		}
		// Both buckets full: evict a random filler slot of bucket A, as a
		// relocation would have moved it elsewhere.
		lanes[l][p.BucketA] = uint64(ckf.Bucket(lanes[l][p.BucketA]).WithSlot(r.IntN(4), p.Fingerprint))
	}
	t := &lenBenchTable{f: f, chains: map[string][][]uint64{}}
	for _, n := range queryLens {
		for _, shape := range []string{"shared", "divergent"} {
			key := fmt.Sprintf("%s/%d", shape, n)
			for c := 0; c < lenChains; c++ {
				chain := make([]uint64, n)
				for i := range chain {
					chain[i] = r.Uint64()
				}
				seqs := ckf.SequenceHashes(chain)
				for l := 0; l < ckf.LaneCount; l++ {
					depth := n
					if shape == "divergent" {
						depth = r.IntN(n + 1)
					}
					for i := 0; i < depth; i++ {
						place(l, f.g.addr.Probe(seqs[i]))
					}
				}
				t.chains[key] = append(t.chains[key], chain)
			}
		}
	}
	for l := 0; l < ckf.LaneCount; l++ {
		in := f.claim(uint8(l))
		if err := in.Assign(f.identity(uint8(l)), f.lease(uint8(l), 1)); err != nil {
			b.Fatal(err)
		}
		if out := in.InstallSnapshot(f.snapshot(uint8(l), 1, 0, lanes[l])); out.Kind != OutcomeSnapshotInstalled {
			b.Fatal(out)
		}
	}
	return t
}

func BenchmarkQueryCostVsLength(b *testing.B) {
	t := getLenBenchTable(b)
	g := t.f.g
	for _, shape := range []string{"shared", "divergent"} {
		for _, n := range queryLens {
			chains := t.chains[fmt.Sprintf("%s/%d", shape, n)]
			seqs := make([][]uint64, len(chains))
			for i, c := range chains {
				seqs[i] = ckf.SequenceHashes(c)
			}
			b.Run(fmt.Sprintf("shape=%s/L=%d/transposed", shape, n), func(b *testing.B) {
				b.ReportAllocs()
				scratch := make([]uint64, 0, n)
				for i := 0; i < b.N; i++ {
					if _, err := g.FindPrefixMatchesScratch(chains[i%len(chains)], &scratch); err != nil {
						b.Fatal(err)
					}
				}
				b.StopTimer()
				// Search alone (no hash chain), and probe counts, on the
				// same chains: a fixed number of queries per run so the
				// figure does not depend on b.N.
				const searchRuns = 512
				var st search.Stats
				probes := 0
				t0 := nowNanos()
				for i := 0; i < searchRuns; i++ {
					q := queryProber{table: &g.table, addr: &g.addr, seq: seqs[i%len(seqs)]}
					search.FindWith(n, 0xFFFF, g.window, q.probe, q.prefetch, &st)
					probes += st.Probes
				}
				elapsed := nowNanos() - t0
				b.ReportMetric(float64(probes)/searchRuns, "probes/query")
				b.ReportMetric(float64(elapsed)/searchRuns, "search-ns/query")
				b.ReportMetric(float64(n), "blocks/query")
			})
			b.Run(fmt.Sprintf("shape=%s/L=%d/baseline=linear", shape, n), func(b *testing.B) {
				b.ReportAllocs()
				scratch := make([]uint64, 0, n)
				probes := 0
				for i := 0; i < b.N; i++ {
					s := ckf.AppendSequenceHashes(scratch[:0], chains[i%len(chains)])
					ckf.LinearPrefixDepths(n, 0xFFFF, func(pos int) uint16 {
						probes++
						p := g.addr.Probe(s[pos])
						return g.table.probeSettled16(p.Fingerprint, p.BucketA, p.BucketB, 0)
					})
				}
				b.ReportMetric(float64(n), "blocks/query")
				b.ReportMetric(float64(probes)/float64(b.N), "probes/query")
			})
		}
	}
}
