package index

// The 64-lane probe and query with each kernel of wide rows in the same run
// (performance §4.1): kernel=swar is the portable SWAR kernel
// (probeWideAVX2 off), kernel=avx2 the AVX2 one where the build and the CPU
// have it. "x-slower" is the AVX2 time over the SWAR time of the same run.
//
//	go test -run '^$' -bench 'BenchmarkProbe64|BenchmarkLaneQuery128Kernel' ./ckf/index/

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/ckf"
)

// probe64Kernels are the kernels a benchmark runs, the baseline first.
func probe64Kernels() []bool {
	if probeWideAVX2 {
		return []bool{false, true}
	}
	return []bool{false}
}

func kernelName(avx2 bool) string {
	if avx2 {
		return "avx2"
	}
	return "swar"
}

// probe64Fixture is a 64-lane table of 2^10 buckets (512 KiB, cache
// resident: the kernel, not the memory) with about half the slots used,
// and probes over it. With hit, 512 probes of disjoint rows, each
// fingerprint written into every lane of row A or row B, so every lane hits
// and the settled probe reads each row once; without, 4096 probes of random
// rows and fingerprints, whose lanes miss, so the settled probe reads row A
// again.
func probe64Fixture(b *testing.B, hit bool) (*transposedTable, []ckf.Probe) {
	const buckets = 1 << 10
	tb, err := newTransposedTable(buckets, ckf.MaxLanes)
	if err != nil {
		b.Fatal(err)
	}
	r := rand.New(rand.NewPCG(64, 37))
	for i := range tb.words {
		tb.words[i] = halfFullWord(r)
	}
	probes := make([]ckf.Probe, 4096)
	perm := r.Perm(buckets)
	if hit {
		probes = probes[:buckets/2] // disjoint rows: no probe overwrites another's fingerprint
	}
	for i := range probes {
		a := r.Uint64N(buckets)
		bb := (a + 1 + r.Uint64N(buckets-1)) % buckets
		if hit {
			a, bb = uint64(perm[2*i]), uint64(perm[2*i+1])
		}
		p := ckf.Probe{Fingerprint: uint16(r.Uint32()) | 1, BucketA: a, BucketB: bb}
		if hit {
			for l := 0; l < ckf.MaxLanes; l++ {
				bk := a
				if r.IntN(2) == 0 {
					bk = bb
				}
				tb.store(bk, l, uint64(ckf.Bucket(tb.load(bk, l)).WithSlot(r.IntN(4), p.Fingerprint)))
			}
		}
		probes[i] = p
	}
	return &tb, probes
}

// BenchmarkProbe64: transposedTable.probeSettled (the 64-lane query's probe)
// with every lane decided (misses: A, B and A again; hits: A and B only) and
// with lanes 0..31 decided (one block of the row).
func BenchmarkProbe64(b *testing.B) {
	for _, c := range []struct {
		name    string
		hit     bool
		decided uint64
	}{
		{"all-lanes/miss", false, ^uint64(0)},
		{"all-lanes/hit", true, ^uint64(0)},
		{"lanes0-31/miss", false, 0xFFFF_FFFF},
	} {
		tb, probes := probe64Fixture(b, c.hit)
		for _, avx2 := range probe64Kernels() {
			b.Run(c.name+"/kernel="+kernelName(avx2), func(b *testing.B) {
				withProbeKernel(avx2, func() {
					mask := len(probes) - 1
					var acc uint64
					b.ResetTimer()
					for i := 0; i < b.N; i++ {
						p := &probes[i&mask]
						acc ^= tb.probeSettled(p.Fingerprint, p.BucketA, p.BucketB, c.decided)
					}
					b.StopTimer()
					consumerBenchSink = uint16(acc)
				})
				if avx2 {
					reportRatio(b, "probe64/"+c.name, nsPerOp(b))
				} else {
					setRef("probe64/"+c.name, nsPerOp(b))
				}
			})
		}
	}
}

// BenchmarkLaneQuery128Kernel: BenchmarkLaneQuery128's 64-lane queries
// (FindPrefixMatches64 over a 2^20-bucket table, 512 MiB) with each kernel,
// alternated within the run.
func BenchmarkLaneQuery128Kernel(b *testing.B) {
	const width = ckf.MaxLanes
	for _, shape := range []string{"shared", "divergent"} {
		for _, avx2 := range probe64Kernels() {
			b.Run(fmt.Sprintf("lanes=%d/%s/kernel=%s", width, shape, kernelName(avx2)), func(b *testing.B) {
				chains, q := laneQueryFixture(b, width, shape)
				var p50 float64
				withProbeKernel(avx2, func() {
					p50 = benchQueries(b, func(c []uint64) {
						if err := q(c); err != nil {
							b.Fatal(err)
						}
					}, chains)
				})
				if avx2 {
					reportRatio(b, "query64/"+shape, p50)
				} else {
					setRef("query64/"+shape, p50)
				}
			})
		}
	}
}

// BenchmarkProbe64Interleaved and BenchmarkLaneQuery128Interleaved measure
// the two kernels in alternation at a fine grain (a batch of 256 probes, or
// one query, each), so that both see the same load on a shared machine;
// the order alternates too. They report each kernel's ns per probe (p50 ns
// per query) and avx2/swar. Where the build or the CPU has no AVX2 kernel
// they are skipped.

func BenchmarkProbe64Interleaved(b *testing.B) {
	if !probeWideAVX2 {
		b.Skip("no AVX2 kernel in this build or on this CPU")
	}
	tb, probes := probe64Fixture(b, false)
	mask := len(probes) - 1
	const batch = 256
	var spent [2]time.Duration
	var acc uint64
	run := func(avx2 bool, from int) {
		probeWideAVX2 = avx2
		t0 := time.Now()
		for j := from; j < from+batch; j++ {
			p := &probes[j&mask]
			acc ^= tb.probeSettled(p.Fingerprint, p.BucketA, p.BucketB, ^uint64(0))
		}
		if avx2 {
			spent[1] += time.Since(t0)
		} else {
			spent[0] += time.Since(t0)
		}
	}
	defer func() { probeWideAVX2 = true }()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		first := i%2 == 0
		run(first, i*batch)
		run(!first, i*batch)
	}
	b.StopTimer()
	consumerBenchSink = uint16(acc)
	n := float64(b.N * batch)
	b.ReportMetric(float64(spent[0].Nanoseconds())/n, "swar-ns/probe")
	b.ReportMetric(float64(spent[1].Nanoseconds())/n, "avx2-ns/probe")
	b.ReportMetric(float64(spent[1])/float64(spent[0]), "avx2/swar")
}

func BenchmarkLaneQuery128Interleaved(b *testing.B) {
	if !probeWideAVX2 {
		b.Skip("no AVX2 kernel in this build or on this CPU")
	}
	const width = ckf.MaxLanes
	for _, shape := range []string{"shared", "divergent"} {
		b.Run(fmt.Sprintf("lanes=%d/%s", width, shape), func(b *testing.B) {
			chains, q := laneQueryFixture(b, width, shape)
			d := [2][]time.Duration{make([]time.Duration, 0, b.N), make([]time.Duration, 0, b.N)}
			run := func(avx2 bool, c []uint64) {
				probeWideAVX2 = avx2
				t0 := time.Now()
				if err := q(c); err != nil {
					b.Fatal(err)
				}
				k := 0
				if avx2 {
					k = 1
				}
				d[k] = append(d[k], time.Since(t0))
			}
			defer func() { probeWideAVX2 = true }()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				c := chains[i%len(chains)]
				first := i%2 == 0
				run(first, c)
				run(!first, c)
			}
			b.StopTimer()
			p50 := func(x []time.Duration) float64 {
				slices.Sort(x)
				return float64(x[len(x)/2].Nanoseconds())
			}
			s, a := p50(d[0]), p50(d[1])
			b.ReportMetric(s, "swar-p50-ns")
			b.ReportMetric(a, "avx2-p50-ns")
			b.ReportMetric(a/s, "avx2/swar")
		})
	}
}
