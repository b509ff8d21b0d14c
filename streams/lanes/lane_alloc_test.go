package lanes

import (
	"context"
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
	g, codec, pool := oneLaneIndexer(t, 1024)
	format := g.Manifest().Format()
	in, err := g.ClaimLane(0)
	if err != nil {
		t.Fatal(err)
	}
	ix := &Indexer{g: g, codec: codec, metrics: newIndexerMetrics(nil, func(uint8) bool { return true }), log: zap.NewNop()}
	l := newLane(ix, 0, pool, in, -1)
	defer l.close()

	id := ckf.ProducerIdentity{Pool: pool, Incarnation: 1, LayoutGeneration: 1, Format: format}
	lease := ckf.LaneLease{Consumer: 7, Lane: 0, Epoch: 1}
	if err := in.Assign(id, lease); err != nil {
		t.Fatal(err)
	}
	if out := in.InstallSnapshot(&ckf.Snapshot{Identity: id, Lease: lease, Buckets: make([]uint64, 1024)}); out.Kind != index.OutcomeSnapshotInstalled {
		t.Fatalf("install: %v", out)
	}

	const deltas, images = 512, 16
	recs := make([]*kgo.Record, deltas)
	for i := range recs {
		var packed []byte
		for j := range images {
			packed = schemas.AppendImage(packed, uint64((i*images+j)%1024), uint64(i+1))
		}
		v, err := codec.EncodeLaneRecord(schemas.LaneRecord{Identity: streams.WireIdentity(id), Kind: schemas.LaneDelta,
			Delta: schemas.Delta{BaseSequence: uint64(i), Sequence: uint64(i + 1), Images: packed}})
		if err != nil {
			t.Fatal(err)
		}
		recs[i] = &kgo.Record{Offset: int64(i), Value: v}
	}
	dec := newLaneDecoder(nil, codec, 0)
	run := <-dec.free
	n := 0
	allocs := testing.AllocsPerRun(1, func() {
		if k := dec.fill(run, 0, recs[n*deltas/2:(n+1)*deltas/2]); k != deltas/2 {
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
