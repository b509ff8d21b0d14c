package lanes

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/ckf/index"
	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/ckf-stream/ckf-stream/streams"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"
)

// TestLaneDeltaPathAllocations: decoding a run of delta records and applying it allocates
// nothing in the steady state: the decode stage parses each record in place and unpacks the
// images into its run's reusable buffer, and the owner applies them to the table. (The lane path
// before the single-owner design allocated slab chunks for deltas in flight to a pool worker.)
func TestLaneDeltaPathAllocations(t *testing.T) {
	const deltas, images = 512, 16
	dl := newDeltaLane(t, 1024, deltas, images, func(i, j int) uint64 { return uint64((i*images + j) % 1024) })
	l, in, recs := dl.lane, dl.in, dl.recs
	run := <-dl.dec.free
	n := 0
	allocs := testing.AllocsPerRun(1, func() {
		if k := dl.dec.fill(run, 0, recs[n*deltas/2:(n+1)*deltas/2]); k != deltas/2 {
			t.Fatalf("a run took %d of %d records", k, deltas/2)
		}
		for i := range run.recs {
			l.handle(&run.recs[i])
		}
		n++
	})
	if s, _ := in.InstalledSequence(); s != deltas {
		t.Fatalf("installed sequence %d, want %d: not every delta applied", s, deltas)
	}
	if perDelta := allocs / (deltas / 2); perDelta > 0 {
		t.Fatalf("%.3f allocations per applied delta, want 0", perDelta)
	}
}

// deltaLane is a lane of a one-lane indexer, ready on an installed all-zero snapshot, with its
// ingestor, a decode stage (no feed), and encoded delta records that follow the snapshot in
// sequence.
type deltaLane struct {
	*lane
	in   *index.LaneIngestor
	dec  *laneDecoder
	recs []*kgo.Record
	// rewind reassigns the lane (a greater lease epoch) and installs an all-zero snapshot at
	// sequence 0 again, so recs apply once more.
	rewind func()
}

// newDeltaLane builds a deltaLane of bucketCount buckets whose record i holds images images,
// image j at bucket(i, j).
func newDeltaLane(tb testing.TB, bucketCount uint64, deltas, images int, bucket func(i, j int) uint64) *deltaLane {
	tb.Helper()
	g, codec, pool := oneLaneIndexer(tb, bucketCount)
	in, err := g.ClaimLane(0)
	if err != nil {
		tb.Fatal(err)
	}
	ix := &Indexer{g: g, codec: codec, metrics: newIndexerMetrics(nil, func(uint8) bool { return true }), log: zap.NewNop()}
	ix.eligibility.init(0)
	dl := &deltaLane{lane: newLane(ix, 0, pool, in, -1), in: in, dec: newLaneDecoder(nil, codec, 0)}
	tb.Cleanup(dl.close)

	id := ckf.ProducerIdentity{Pool: pool, Incarnation: 1, LayoutGeneration: 1, Format: g.Manifest().Format()}
	epoch := uint64(0)
	dl.rewind = func() {
		epoch++
		lease := ckf.LaneLease{Consumer: 7, Lane: 0, Epoch: epoch}
		if err := in.Assign(id, lease); err != nil {
			tb.Fatal(err)
		}
		if out := in.InstallSnapshot(&ckf.Snapshot{Identity: id, Lease: lease, Buckets: make([]uint64, bucketCount)}); out.Kind != index.OutcomeSnapshotInstalled {
			tb.Fatalf("install: %v", out)
		}
	}
	dl.rewind()
	dl.recs = make([]*kgo.Record, deltas)
	for i := range dl.recs {
		var packed []byte
		for j := range images {
			packed = schemas.AppendImage(packed, bucket(i, j), uint64(i+1))
		}
		v, err := codec.EncodeLaneRecord(schemas.LaneRecord{Identity: streams.WireIdentity(id), Kind: schemas.LaneDelta,
			Delta: schemas.Delta{BaseSequence: uint64(i), Sequence: uint64(i + 1), Images: packed}})
		if err != nil {
			tb.Fatal(err)
		}
		dl.recs[i] = &kgo.Record{Offset: int64(i), Value: v}
	}
	return dl
}

// oneLaneIndexer is a GlobalIndexer with lane 0 owned by the pool of DC 1 (consumer instance 7,
// bucketCount buckets, the default search), and a codec with the built-in schemas.
func oneLaneIndexer(t testing.TB, bucketCount uint64) (*index.GlobalIndexer, *schemas.Codec, ckf.PoolID) {
	t.Helper()
	pool := ckf.PoolID{Dc: 1}
	m, _, err := index.NewManifest(7, pool.Domain, ckf.NewFormatIdentity(ckf.DefaultSeed, bucketCount), index.ManifestLanes{0: &pool})
	if err != nil {
		t.Fatal(err)
	}
	g, err := index.NewGlobalIndexer(m, ckf.DefaultSearchConfig())
	if err != nil {
		t.Fatal(err)
	}
	codec, err := schemas.NewCodec(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return g, codec, pool
}

// BenchmarkLaneDecodeApply is the lane's own work per delta record, in process and on one
// goroutine: the decode stage fills runs of up to decodeRunRecords records and the owner handles
// them, on a table of 2^16 buckets (as BenchmarkE2EIngestVsRaw) with distinct random buckets in
// each delta. It is the part of the ingest path that BenchmarkE2EIngestVsRaw adds to a bare
// consumer, without the broker or the client.
func BenchmarkLaneDecodeApply(b *testing.B) {
	for _, images := range []int{16, 64} {
		b.Run(fmt.Sprintf("images=%d", images), func(b *testing.B) {
			const buckets, deltas = 1 << 16, 1 << 14
			r := rand.New(rand.NewPCG(1, uint64(images)))
			chosen := make([][]uint64, deltas)
			for i := range chosen {
				for len(chosen[i]) < images {
					if k := r.Uint64N(buckets); !slices.Contains(chosen[i], k) {
						chosen[i] = append(chosen[i], k)
					}
				}
			}
			dl := newDeltaLane(b, buckets, deltas, images, func(i, j int) uint64 { return chosen[i][j] })
			run := <-dl.dec.free
			next := 0
			b.ReportAllocs()
			b.ResetTimer()
			for done := 0; done < b.N; {
				if next == deltas {
					b.StopTimer()
					dl.rewind()
					next = 0
					b.StartTimer()
				}
				end := min(next+decodeRunRecords, deltas, next+b.N-done)
				k := dl.dec.fill(run, 0, dl.recs[next:end])
				dl.handleRun(context.Background(), run)
				next += k
				done += k
			}
			b.StopTimer()
			if s, _ := dl.in.InstalledSequence(); s != uint64(next) {
				b.Fatalf("installed sequence %d, want %d", s, next)
			}
			b.ReportMetric(float64(b.N*images)/b.Elapsed().Seconds()/1e6, "M-images/s")
		})
	}
}
