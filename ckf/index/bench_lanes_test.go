package index

// Lane-count benchmarks (consumer §16, performance §4.1): 128-block queries,
// one-lane snapshot installs and 23-image deltas on tables of 4, 16 and 64
// lanes of 2^20 buckets, each lane about half full plus 512 shared and 512
// divergent chains (the shapes of BenchmarkConsumerQuery128). The same
// benchmark names, built on the 16-lane code of the commit before the
// change, are the "today" baseline of performance §4.1; benchLaneFixture is
// the only part that differs.
//
//	go test -run '^$' -bench 'BenchmarkLane' -benchtime 20000x ./ckf/index/

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/ckf-stream/ckf-stream/ckf"
)

// benchLaneFixture is a table of width lanes, all configured.
func benchLaneFixture(b *testing.B, width int, buckets uint64) *fixture {
	return newFixtureN(b, width, width, buckets, ckf.DefaultVerificationWindow)
}

// benchLaneQuery is the query each width runs: FindPrefixMatches, the API
// of today, up to 16 lanes; FindPrefixMatches64 beyond.
func benchLaneQuery(g *GlobalIndexer, width int, scratch *[]uint64) func(c []uint64) error {
	if width <= ckf.LaneCount {
		return func(c []uint64) error { _, err := g.FindPrefixMatchesScratch(c, scratch); return err }
	}
	return func(c []uint64) error { _, err := g.FindPrefixMatches64(c, scratch); return err }
}

type laneBenchTable struct {
	f      *fixture
	chains [][]uint64
}

var laneBenchTables = map[int]*laneBenchTable{}

func getLaneBenchTable(b *testing.B, width int) *laneBenchTable {
	if bt, ok := laneBenchTables[width]; ok {
		return bt
	}
	const buckets = 1 << 20
	f := benchLaneFixture(b, width, buckets)
	r := rand.New(rand.NewPCG(uint64(width), 1))
	lanes := make([][]uint64, width)
	for l := range lanes {
		w := make([]uint64, buckets)
		for i := range w {
			w[i] = halfFullWord(r)
		}
		lanes[l] = w
	}
	bt := &laneBenchTable{f: f}
	for c := 0; c < 2*benchChains; c++ {
		chain := make([]uint64, benchChainLen)
		for i := range chain {
			chain[i] = r.Uint64()
		}
		seqs := ckf.SequenceHashes(chain)
		for l := 0; l < width; l++ {
			depth := benchChainDepth(c, l, r)
			for i := 0; i < depth; i++ {
				p := f.g.addr.Probe(seqs[i])
				bk := p.BucketA
				if r.IntN(2) == 0 {
					bk = p.BucketB
				}
				lanes[l][bk] = uint64(ckf.Bucket(lanes[l][bk]).WithSlot(r.IntN(4), p.Fingerprint))
			}
		}
		bt.chains = append(bt.chains, chain)
	}
	installBenchLanes(b, f, lanes)
	laneBenchTables[width] = bt
	return bt
}

// halfFullWord is a random bucket word with each slot used with
// probability 1/2 (a used slot's fingerprint is never 0).
func halfFullWord(r *rand.Rand) uint64 {
	v := r.Uint64()
	keep := v & 0x0001_0001_0001_0001 * 0xFFFF
	return (v | 0x0001_0001_0001_0001) & keep
}

// benchChainDepth is how deep lane l caches benchmark chain c: chains
// [0, benchChains) share their prefix (even: every lane the whole chain;
// odd: lanes 0, 5, 10, ... to 64 + l), chains [benchChains, 2·benchChains)
// diverge (an independent uniform depth per lane, drawn from r).
func benchChainDepth(c, l int, r *rand.Rand) int {
	switch {
	case c < benchChains && c%2 == 1 && l%5 == 0:
		return 64 + l
	case c >= benchChains:
		return r.IntN(benchChainLen + 1)
	}
	return benchChainLen
}

// installBenchLanes installs lanes[l] as lane l's snapshot (lease epoch 1,
// sequence 0) and drops the caller's copy of it.
func installBenchLanes(b *testing.B, f *fixture, lanes [][]uint64) {
	for l := range lanes {
		in := f.claim(uint8(l))
		if err := in.Assign(f.identity(uint8(l)), f.lease(uint8(l), 1)); err != nil {
			b.Fatal(err)
		}
		if out := in.InstallSnapshot(f.snapshot(uint8(l), 1, 0, lanes[l])); out.Kind != OutcomeSnapshotInstalled {
			b.Fatal(out)
		}
		lanes[l] = nil
	}
}

// laneQueryFixture is the table of width lanes, the chains of shape
// ("shared" or "divergent") and the query of that width over it.
func laneQueryFixture(b *testing.B, width int, shape string) (chains [][]uint64, q func(c []uint64) error) {
	bt := getLaneBenchTable(b, width)
	chains = bt.chains[:benchChains]
	if shape == "divergent" {
		chains = bt.chains[benchChains:]
	}
	scratch := make([]uint64, 0, benchChainLen)
	return chains, benchLaneQuery(bt.f.g, width, &scratch)
}

// BenchmarkLaneQuery128: 128-block queries over every lane of a table of 4,
// 16 and 64 lanes (2^20 buckets), shared and divergent chains.
func BenchmarkLaneQuery128(b *testing.B) {
	for _, width := range []int{4, 16, 64} {
		for _, shape := range []string{"shared", "divergent"} {
			b.Run(fmt.Sprintf("lanes=%d/%s", width, shape), func(b *testing.B) {
				chains, q := laneQueryFixture(b, width, shape)
				benchQueries(b, func(c []uint64) {
					if err := q(c); err != nil {
						b.Fatal(err)
					}
				}, chains)
			})
		}
	}
}

// BenchmarkLaneSnapshotInstall installs a 2^20-bucket snapshot into one lane
// of a table of 4, 16 and 64 lanes.
func BenchmarkLaneSnapshotInstall(b *testing.B) {
	const buckets = 1 << 20
	words := make([]uint64, buckets)
	r := rand.New(rand.NewPCG(5, 6))
	for i := range words {
		words[i] = r.Uint64()
	}
	for _, width := range []int{4, 16, 64} {
		b.Run(fmt.Sprintf("lanes=%d", width), func(b *testing.B) {
			f := benchLaneFixture(b, width, buckets)
			in := f.claim(uint8(width - 1))
			defer in.Close()
			lane := uint8(width - 1)
			// One untimed install first: the table's pages are touched
			// (faulted in) by the first install, not by the timed ones.
			if err := in.Assign(f.identity(lane), f.lease(lane, 1)); err != nil {
				b.Fatal(err)
			}
			if out := in.InstallSnapshot(f.snapshot(lane, 1, 0, words)); out.Kind != OutcomeSnapshotInstalled {
				b.Fatal(out)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				epoch := uint64(i + 2)
				if err := in.Assign(f.identity(lane), f.lease(lane, epoch)); err != nil {
					b.Fatal(err)
				}
				if out := in.InstallSnapshot(f.snapshot(lane, epoch, 0, words)); out.Kind != OutcomeSnapshotInstalled {
					b.Fatal(out)
				}
			}
			b.ReportMetric(b.Elapsed().Seconds()*1e3/float64(b.N), "ms/install")
		})
	}
}

// BenchmarkLaneDeltaApply applies 23-image deltas with random buckets to one
// lane of a 2^20-bucket table of 4, 16 and 64 lanes.
func BenchmarkLaneDeltaApply(b *testing.B) {
	const (
		buckets        = 1 << 20
		imagesPerDelta = 23
		ring           = 1 << 12
	)
	r := rand.New(rand.NewPCG(3, 4))
	images := make([][]ckf.BucketImage, ring)
	for i := range images {
		seen := map[uint64]bool{}
		for len(images[i]) < imagesPerDelta {
			bk := r.Uint64N(buckets)
			if !seen[bk] {
				seen[bk] = true
				images[i] = append(images[i], ckf.BucketImage{Bucket: bk, Value: r.Uint64()})
			}
		}
	}
	for _, width := range []int{4, 16, 64} {
		b.Run(fmt.Sprintf("lanes=%d", width), func(b *testing.B) {
			f := benchLaneFixture(b, width, buckets)
			lane := uint8(width - 1)
			in := f.readyLane(lane, 1, 0, nil)
			defer in.Close()
			deltas := make([]ckf.Delta, ring)
			for i := range deltas {
				deltas[i] = ckf.Delta{Identity: f.identity(lane), Lease: f.lease(lane, 1), Images: images[i]}
			}
			seq := uint64(0)
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
		})
	}
}
