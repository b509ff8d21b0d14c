package index

// Consumer benchmarks (design §6.2 targets T3–T8, T11). Every
// benchmark reports its own baseline in the same run where one exists, so
// ratios are meaningful on a noisy shared VM; no benchmark asserts a
// wall-clock threshold.
//
//	go test -run '^$' -bench 'Consumer(Probe|Query|Delta)' -benchtime 20000x -count 3 ./ckf/
//	go test -run '^$' -bench 'ConsumerSnapshotInstall' -benchtime 20x -count 3 ./ckf/
//
// (A snapshot install of 2^20 buckets takes ~15 ms, so never give it a
// large fixed iteration count.) Baselines run after the measured variant in
// the same process and report "x-slower" = baseline / measured.
//
// Targets: probe <= 30 ns in cache (T3), <= 100 ns per block at 2^20
// buckets batched with prefetch (T4), 128-block query p50 <= 8 us with
// shared prefixes (T5), >= 30 M images/s (T7), one-lane snapshot install
// of 2^20 buckets <= 15 ms (T8), 0 allocations per query (T11).

import (
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/ckf"
)

// benchTable is a populated indexer shared by the benchmarks of one size.
type benchTable struct {
	f      *fixture
	probes []ckf.Probe // random probes, half of them hits in random lanes
	chains [][]uint64  // local-hash chains inserted at staggered depths
}

var (
	benchTablesMu sync.Mutex
	benchTables   = map[uint64]*benchTable{}
)

const (
	benchChainLen = 128
	benchChains   = 512
)

// getBenchTable builds (once per size) a 16-lane indexer with buckets
// buckets per lane, about 60 % slot load of random fingerprints, plus
// benchmark chains: chain c is present in lane l up to depth depthOf(c, l).
func getBenchTable(b *testing.B, buckets uint64) *benchTable {
	benchTablesMu.Lock()
	defer benchTablesMu.Unlock()
	if bt, ok := benchTables[buckets]; ok {
		return bt
	}
	f := newFixture(b, ckf.LaneCount, buckets, ckf.DefaultVerificationWindow)
	r := rand.New(rand.NewPCG(uint64(buckets), 1))
	lanes := make([][]uint64, ckf.LaneCount)
	for l := range lanes {
		w := make([]uint64, buckets)
		for i := range w {
			var word uint64
			for s := 0; s < 4; s++ {
				if r.IntN(10) < 5 {
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
	bt := &benchTable{f: f}
	// Chains [0, benchChains): shared prefix (even: all lanes full depth;
	// odd: a few lanes shorter). Chains [benchChains, 2·benchChains):
	// divergent (independent uniform depths). Enough distinct chains that
	// a benchmark loop does not keep its rows cache-resident.
	for c := 0; c < 2*benchChains; c++ {
		chain := make([]uint64, benchChainLen)
		for i := range chain {
			chain[i] = r.Uint64()
		}
		seqs := ckf.SequenceHashes(chain)
		for l := 0; l < ckf.LaneCount; l++ {
			depth := benchChainDepth(c, l, r)
			for i := 0; i < depth; i++ {
				p := f.g.addr.Probe(seqs[i])
				placed := false
				for _, bk := range []uint64{p.BucketA, p.BucketB} {
					for s := 0; s < 4 && !placed; s++ {
						if ckf.Bucket(lanes[l][bk]).Slot(s) == 0 {
							lanes[l][bk] = uint64(ckf.Bucket(lanes[l][bk]).WithSlot(s, p.Fingerprint))
							placed = true
						}
					}
				}
				if !placed { // evict a random slot of bucket A
					lanes[l][p.BucketA] = uint64(ckf.Bucket(lanes[l][p.BucketA]).WithSlot(r.IntN(4), p.Fingerprint))
				}
			}
		}
		bt.chains = append(bt.chains, chain)
	}
	installBenchLanes(b, f, lanes)
	bt.probes = make([]ckf.Probe, 1<<16)
	for i := range bt.probes {
		bt.probes[i] = f.g.addr.Probe(r.Uint64())
	}
	benchTables[buckets] = bt
	return bt
}

var consumerBenchSink uint16

// benchRef remembers the measured variant's per-op figure of a group so the
// baselines of the same run can report their ratio to it.
var benchRef = map[string]float64{}

func setRef(group string, v float64) { benchRef[group] = v }

func reportRatio(b *testing.B, group string, v float64) {
	if ref := benchRef[group]; ref > 0 {
		b.ReportMetric(v/ref, "x-slower")
	}
}

func nsPerOp(b *testing.B) float64 { return float64(b.Elapsed().Nanoseconds()) / float64(b.N) }

// ---- T3 / T4: transposed probe ----------------------------------------------

func benchProbeLoop(b *testing.B, t *transposedTable, probes []ckf.Probe, kernel func(ra, rb *[ckf.LaneCount]uint64, fp uint16) uint16) {
	mask := len(probes) - 1
	var acc uint16
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		p := &probes[i&mask]
		acc ^= kernel(t.row(p.BucketA), t.row(p.BucketB), p.Fingerprint)
	}
	consumerBenchSink = acc
}

// BenchmarkConsumerProbeCache: 2^12 buckets (512 KiB, L2-resident).
// Baseline: the per-lane Bucket.Contains reference kernel.
func BenchmarkConsumerProbeCache(b *testing.B) {
	bt := getBenchTable(b, 1<<12)
	b.Run("kernel="+probeKernel, func(b *testing.B) {
		benchProbeLoop(b, &bt.f.g.table, bt.probes, probeRows)
		setRef("probe", nsPerOp(b))
	})
	if probeKernel != "swar" {
		b.Run("kernel=swar", func(b *testing.B) {
			benchProbeLoop(b, &bt.f.g.table, bt.probes, probeRowsSWAR)
			reportRatio(b, "probe", nsPerOp(b))
		})
	}
	b.Run("baseline=per-lane-contains", func(b *testing.B) {
		benchProbeLoop(b, &bt.f.g.table, bt.probes, probeRowsRef)
		reportRatio(b, "probe", nsPerOp(b))
	})
}

// BenchmarkConsumerProbeDRAM: 2^20 buckets (128 MiB). "plain" probes random
// rows one by one; "batch8-prefetch" prefetches the rows of 8 independent
// probes, then probes them (the T4 shape: ns per probe = ns per block).
func BenchmarkConsumerProbeDRAM(b *testing.B) {
	bt := getBenchTable(b, 1<<20)
	t := &bt.f.g.table
	b.Run("plain", func(b *testing.B) { benchProbeLoop(b, t, bt.probes, probeRows) })
	b.Run("batch8-prefetch", func(b *testing.B) {
		defer func() { b.ReportMetric(nsPerOp(b), "ns/block") }()
		mask := len(bt.probes) - 1
		var acc uint16
		b.ResetTimer()
		for i := 0; i < b.N; i += 8 {
			for j := 0; j < 8; j++ {
				p := &bt.probes[(i+j)&mask]
				t.prefetch(p.BucketA, p.BucketB)
			}
			for j := 0; j < 8; j++ {
				p := &bt.probes[(i+j)&mask]
				acc ^= uint16(t.probe(p.Fingerprint, p.BucketA, p.BucketB))
			}
		}
		consumerBenchSink = acc
	})
}

// ---- T5 / T11: 128-block queries ---------------------------------------------

// laneMajorFilters is the benchmark baseline: sixteen independent per-lane
// filters (lane-major, one []uint64 per lane) searched with the same
// algorithm; one probe touches sixteen separate tables (32 lines instead of
// 4).
type laneMajorFilters struct {
	addr  ckf.Addressing
	lanes [ckf.LaneCount][]uint64
}

func newLaneMajor(g *GlobalIndexer) *laneMajorFilters {
	lm := &laneMajorFilters{addr: g.addr}
	for l := 0; l < ckf.LaneCount; l++ {
		lm.lanes[l] = g.LaneWords(uint8(l))
	}
	return lm
}

func (lm *laneMajorFilters) query(local []uint64, seq []uint64, window int) [ckf.LaneCount]uint32 {
	seq = ckf.AppendSequenceHashes(seq[:0], local)
	probe := func(pos int) uint16 {
		p := lm.addr.Probe(seq[pos])
		var m uint16
		for l := 0; l < ckf.LaneCount; l++ {
			if ckf.Bucket(lm.lanes[l][p.BucketA]).Contains(p.Fingerprint) || ckf.Bucket(lm.lanes[l][p.BucketB]).Contains(p.Fingerprint) {
				m |= 1 << uint(l)
			}
		}
		return m
	}
	return ckf.FindPrefixDepths(len(seq), 0xFFFF, window, probe)
}

// reportQuantiles records p50/p99 of per-op durations.
func reportQuantiles(b *testing.B, d []time.Duration) {
	if len(d) == 0 {
		return
	}
	slices.Sort(d)
	b.ReportMetric(float64(d[len(d)/2].Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(d[len(d)*99/100].Nanoseconds()), "p99-ns")
}

func benchQueries(b *testing.B, run func(chain []uint64), chains [][]uint64) float64 {
	b.ReportAllocs()
	d := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		chain := chains[i%len(chains)]
		t0 := time.Now()
		run(chain)
		d = append(d, time.Since(t0))
	}
	b.StopTimer()
	reportQuantiles(b, d)
	if len(d) == 0 {
		return 0
	}
	return float64(d[len(d)/2].Nanoseconds())
}

// BenchmarkConsumerQuery128: 128-block queries on a 2^20-bucket, 16-lane
// table. shared = 512 chains where all or most lanes share the full
// prefix; divergent = 512 chains with independent uniform depths per lane.
// Consecutive queries use different chains (cold rows). Baseline:
// sixteen lane-major filters with the same search, and the linear scan.
func BenchmarkConsumerQuery128(b *testing.B) {
	bt := getBenchTable(b, 1<<20)
	g := bt.f.g
	lm := newLaneMajor(g)
	for _, shape := range []struct {
		name   string
		chains [][]uint64
	}{{"shared", bt.chains[:benchChains]}, {"divergent", bt.chains[benchChains:]}} {
		group := "query/" + shape.name
		b.Run(shape.name+"/transposed", func(b *testing.B) {
			setRef(group, benchQueries(b, func(c []uint64) {
				if _, err := g.FindPrefixMatches(c); err != nil {
					b.Fatal(err)
				}
			}, shape.chains))
		})
		b.Run(shape.name+"/baseline=lane-major", func(b *testing.B) {
			seq := make([]uint64, 0, benchChainLen)
			reportRatio(b, group, benchQueries(b, func(c []uint64) { lm.query(c, seq, ckf.DefaultVerificationWindow) }, shape.chains))
		})
		b.Run(shape.name+"/baseline=linear-transposed", func(b *testing.B) {
			seq := make([]uint64, 0, benchChainLen)
			reportRatio(b, group, benchQueries(b, func(c []uint64) {
				s := ckf.AppendSequenceHashes(seq[:0], c)
				ckf.LinearPrefixDepths(len(s), 0xFFFF, func(pos int) uint16 {
					p := g.addr.Probe(s[pos])
					return g.table.probeSettled16(p.Fingerprint, p.BucketA, p.BucketB, 0)
				})
			}, shape.chains))
		})
	}
}

// TestQueryDoesNotAllocate pins T11 outside the benchmarks.
func TestQueryDoesNotAllocate(t *testing.T) {
	f := newFixture(t, 4, 1024, 2)
	local := make([]uint64, 200)
	for i := range local {
		local[i] = uint64(i) * 31
	}
	words := make([]uint64, 1024)
	insertChain(f.g.addr, words, local[:100])
	for l := uint8(0); l < 4; l++ {
		in := f.readyLane(l, 1, 0, words)
		defer in.Close()
	}
	allocs := testing.AllocsPerRun(50, func() {
		if _, err := f.g.FindPrefixMatches(local); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("FindPrefixMatches: %v allocs per query", allocs)
	}
	long := make([]uint64, 1000)
	copy(long, local)
	var scratch []uint64
	f.g.FindPrefixMatchesScratch(long, &scratch) // grows once
	allocs = testing.AllocsPerRun(50, func() {
		if _, err := f.g.FindPrefixMatchesScratch(long, &scratch); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("FindPrefixMatchesScratch: %v allocs per query", allocs)
	}
	res, _ := f.g.FindPrefixMatchesScratch(long, &scratch)
	ref, _ := f.g.FindPrefixMatches(long)
	if res != ref || res.Lanes[0].Depth < 100 {
		t.Fatalf("scratch result %v vs %v", res.Depths(), ref.Depths())
	}
}

// ---- T7: delta images applied per second -----------------------------------------

// BenchmarkConsumerDeltaApply applies 23-image deltas (Dynamo's mean) with
// random buckets to one lane of a 2^20-bucket table through
// LaneIngestor.ApplyDelta (validation + atomic stores). Reports images/s.
// Baseline: plain (non-atomic) stores of the same images.
func BenchmarkConsumerDeltaApply(b *testing.B) {
	const imagesPerDelta = 23
	f := newFixture(b, 1, 1<<20, 2)
	in := f.readyLane(0, 1, 0, nil)
	r := rand.New(rand.NewPCG(3, 4))
	const ring = 1 << 12
	deltas := make([]ckf.Delta, ring)
	for i := range deltas {
		imgs := make([]ckf.BucketImage, 0, imagesPerDelta)
		seen := map[uint64]bool{}
		for len(imgs) < imagesPerDelta {
			bk := r.Uint64N(1 << 20)
			if !seen[bk] {
				seen[bk] = true
				imgs = append(imgs, ckf.BucketImage{Bucket: bk, Value: r.Uint64()})
			}
		}
		deltas[i] = ckf.Delta{Identity: f.identity(0), Lease: f.lease(0, 1), Images: imgs}
	}
	b.Run("ingestor", func(b *testing.B) {
		seq, _ := in.InstalledSequence()
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			d := &deltas[i%ring]
			d.BaseSequence, d.Sequence = seq, seq+1
			if out := in.ApplyDelta(d); out.Kind != OutcomeDeltaApplied {
				b.Fatal(out)
			}
			seq++
		}
		b.ReportMetric(float64(b.N)*imagesPerDelta/b.Elapsed().Seconds()/1e6, "M-images/s")
		setRef("delta", nsPerOp(b))
	})
	b.Run("baseline=plain-store", func(b *testing.B) {
		words := f.g.table.words
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			for _, im := range deltas[i%ring].Images {
				words[im.Bucket*ckf.LaneCount] = im.Value
			}
		}
		b.ReportMetric(float64(b.N)*imagesPerDelta/b.Elapsed().Seconds()/1e6, "M-images/s")
		reportRatio(b, "delta", nsPerOp(b))
	})
}

// ---- T8: one-lane snapshot install ------------------------------------------------

// BenchmarkConsumerSnapshotInstall installs a full 2^20-bucket snapshot into
// one lane (strided atomic stores + activation). Baseline: a plain strided
// copy of the same words.
func BenchmarkConsumerSnapshotInstall(b *testing.B) {
	const buckets = 1 << 20
	f := newFixture(b, 1, buckets, 2)
	in := f.claim(0)
	words := make([]uint64, buckets)
	r := rand.New(rand.NewPCG(5, 6))
	for i := range words {
		words[i] = r.Uint64()
	}
	epoch := uint64(0)
	b.Run("ingestor", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			epoch++
			if err := in.Assign(f.identity(0), f.lease(0, epoch)); err != nil {
				b.Fatal(err)
			}
			if out := in.InstallSnapshot(f.snapshot(0, epoch, 0, words)); out.Kind != OutcomeSnapshotInstalled {
				b.Fatal(out)
			}
		}
		b.ReportMetric(b.Elapsed().Seconds()*1e3/float64(b.N), "ms/install")
		setRef("snapshot", nsPerOp(b))
	})
	b.Run("baseline=plain-copy", func(b *testing.B) {
		dst := f.g.table.words
		for i := 0; i < b.N; i++ {
			for j, v := range words {
				dst[j*ckf.LaneCount] = v
			}
		}
		b.ReportMetric(b.Elapsed().Seconds()*1e3/float64(b.N), "ms/install")
		reportRatio(b, "snapshot", nsPerOp(b))
	})
}
