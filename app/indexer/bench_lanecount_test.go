package indexer_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/ckf-stream/ckf-stream/app/config"
	"github.com/ckf-stream/ckf-stream/app/indexer"
	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/ckf/index"
	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/ckf-stream/ckf-stream/streams/query"
)

// laneCountTable builds the table a deployment of n lanes (lanes 0..n-1) runs, as the indexer
// builds it (BuildManifest), 2^18 buckets a lane with an eighth of the slots taken, and 64 chains of 128
// blocks cached whole on every lane: the shared prefixes of routing queries.
func laneCountTable(b *testing.B, n int) (*index.GlobalIndexer, [][]uint64) {
	b.Helper()
	ix := config.Default().Indexer
	ix.Domain = testDomain
	ix.BucketCount = 1 << 18
	ix.Lanes = config.LaneMap{}
	for l := 0; l < n; l++ {
		ix.Lanes[l] = uint64(0x100 + l)
	}
	m, _, err := indexer.BuildManifest(ix, 9)
	if err != nil {
		b.Skipf("%d lanes: %v", n, err)
	}
	g, err := index.NewGlobalIndexer(m, ckf.DefaultSearchConfig())
	if err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(uint64(n), 5))
	chains := make([][]uint64, 64)
	for c := range chains {
		chains[c] = make([]uint64, 128)
		for i := range chains[c] {
			chains[c][i] = rng.Uint64()
		}
	}
	addr := g.Addressing()
	for l := 0; l < n; l++ {
		w := make([]uint64, ix.BucketCount)
		for i := range w {
			v := rng.Uint64()
			sel := rng.Uint32()
			for s := 0; s < 4; s++ {
				if sel>>(3*s)&7 != 0 { // an eighth of the slots taken
					v &^= 0xFFFF << (16 * s)
				}
			}
			w[i] = v
		}
		for _, chain := range chains {
			for _, h := range ckf.SequenceHashes(chain) {
				pr := addr.Probe(h)
				placed := false
				for _, bk := range []uint64{pr.BucketA, pr.BucketB} {
					if s, ok := ckf.Bucket(w[bk]).FreeSlot(); ok {
						w[bk] = uint64(ckf.Bucket(w[bk]).WithSlot(s, pr.Fingerprint))
						placed = true
						break
					}
				}
				if !placed {
					b.Fatalf("lane %d: a block of the chains found both its buckets full", l)
				}
			}
		}
		pool, _ := m.PoolOf(uint8(l))
		in, err := g.ClaimLane(uint8(l))
		if err != nil {
			b.Fatal(err)
		}
		id := ckf.ProducerIdentity{Pool: pool, Incarnation: 1, LayoutGeneration: 1, Format: m.Format()}
		lease := ckf.LaneLease{Consumer: m.ConsumerInstance(), Lane: uint8(l), Epoch: 1}
		if err := in.Assign(id, lease); err != nil {
			b.Fatal(err)
		}
		if out := in.InstallSnapshot(&ckf.Snapshot{Identity: id, Lease: lease, Sequence: 1, Buckets: w}); out.Kind != index.OutcomeSnapshotInstalled {
			b.Fatal(out)
		}
	}
	return g, chains
}

// BenchmarkAnswerLaneCount: the in-process answer (query.Answerer.Answer) of 128-block queries
// over the table of a 4-, a 16- and a 64-lane deployment (consumer §16; the 64-lane queries carry
// lane_mask64); ns/op is one answer.
func BenchmarkAnswerLaneCount(b *testing.B) {
	for _, n := range []int{4, 16, 64} {
		b.Run(fmt.Sprintf("lanes=%d", n), func(b *testing.B) {
			g, chains := laneCountTable(b, n)
			ans := query.NewAnswerer(g, nil)
			reqs := make([]schemas.QueryRequest, len(chains))
			for i, c := range chains {
				reqs[i] = schemas.QueryRequest{CorrelationID: "bench", Input: schemas.InputLocalBlockHashes, Hashes: schemas.AppendU64s(nil, c)}
				if n > 16 {
					reqs[i].LaneMask64 = schemas.Some(schemas.AllLanes64)
				}
			}
			var sc query.QueryScratch
			for i := range reqs {
				r := ans.Answer(&reqs[i], &sc)
				if r.Status != schemas.QueryOK || len(r.Lanes) != n {
					b.Fatalf("chain %d: %+v", i, r)
				}
				for _, l := range r.Lanes {
					if l.Depth != 128 {
						b.Fatalf("chain %d lane %d: depth %d, want 128", i, l.Lane, l.Depth)
					}
				}
			}
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				ans.Answer(&reqs[i%len(reqs)], &sc)
			}
		})
	}
}
