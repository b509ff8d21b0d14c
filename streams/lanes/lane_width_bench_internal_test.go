package lanes

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/ckf/index"
	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/ckf-stream/ckf-stream/streams"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"
)

// widthLanes are the owners of every lane of a table of one width, driven on the benchmark's
// goroutine: what BenchmarkE2EDeltaVisibleLanes's indexer does per delta once the broker and the
// client are taken away.
type widthLanes struct {
	ix     *Indexer
	owners []*lane
	decs   []*laneDecoder
	recs   [][]*kgo.Record // recs[l][k]: lane l's delta k (base k, sequence k+1)
	rewind func()
}

// newWidthLanes builds a table of width lanes of buckets buckets, every lane owned, its owner
// and decode stage built as Indexer.Run builds them (without their goroutines), every lane ready
// on an empty snapshot, and perLane deltas of images images (distinct random buckets) per lane.
func newWidthLanes(tb testing.TB, width int, buckets uint64, perLane, images int) *widthLanes {
	tb.Helper()
	var ml index.ManifestLanes
	var feedLanes []int32
	for l := range width {
		pool := rigPool(100 + uint64(l))
		ml[l], feedLanes = &pool, append(feedLanes, int32(l))
	}
	format := ckf.NewFormatIdentity(ckf.DefaultSeed, buckets)
	m, _, err := index.NewManifest(ckf.ConsumerInstanceID(0x51), rigDomain, format, ml)
	if err != nil {
		tb.Fatal(err)
	}
	g, err := index.NewGlobalIndexer(m, ckf.DefaultSearchConfig())
	if err != nil {
		tb.Fatal(err)
	}
	codec, err := schemas.NewCodec(context.Background())
	if err != nil {
		tb.Fatal(err)
	}
	ix, err := NewIndexer(IndexerParams{Config: testConfig(), Indexer: g, Codec: codec, Log: zap.NewNop()})
	if err != nil {
		tb.Fatal(err)
	}
	if ix.feed, err = NewLaneFeed(nil, ix.cfg.Topics.Lanes, feedLanes, ix.cfg.Feed); err != nil {
		tb.Fatal(err)
	}
	ix.out = discardOutputs{}
	w := &widthLanes{ix: ix, recs: make([][]*kgo.Record, width)}
	ids := make([]ckf.ProducerIdentity, width)
	r := rand.New(rand.NewPCG(uint64(width), 37))
	now := time.Now()
	for l := range width {
		in, err := g.ClaimLane(uint8(l))
		if err != nil {
			tb.Fatal(err)
		}
		ix.lanes[l] = newLane(ix, uint8(l), *ml[l], in, -1)
		w.owners = append(w.owners, ix.lanes[l])
		w.decs = append(w.decs, newLaneDecoder(ix.feed, codec, uint8(l)))
		ids[l] = ckf.ProducerIdentity{Pool: *ml[l], Incarnation: 1, LayoutGeneration: 1, Format: format}
		for k := range perLane {
			var chosen []uint64
			for len(chosen) < images {
				if b := r.Uint64N(buckets); !slices.Contains(chosen, b) {
					chosen = append(chosen, b)
				}
			}
			var packed []byte
			for _, b := range chosen {
				packed = schemas.AppendImage(packed, b, r.Uint64()|1)
			}
			v, err := codec.EncodeLaneRecord(schemas.LaneRecord{Identity: streams.WireIdentity(ids[l]), Kind: schemas.LaneDelta,
				Delta: schemas.Delta{BaseSequence: uint64(k), Sequence: uint64(k + 1), Images: packed}})
			if err != nil {
				tb.Fatal(err)
			}
			w.recs[l] = append(w.recs[l], &kgo.Record{Topic: ix.cfg.Topics.Lanes, Partition: int32(l), Offset: int64(k), Value: v, Timestamp: now})
		}
	}
	epoch := uint64(0)
	w.rewind = func() {
		epoch++
		for l, o := range w.owners {
			lease := ckf.LaneLease{Consumer: 0x51, Lane: uint8(l), Epoch: epoch}
			if err := o.in.Assign(ids[l], lease); err != nil {
				tb.Fatal(err)
			}
			if out := o.in.InstallSnapshot(&ckf.Snapshot{Identity: ids[l], Lease: lease, Buckets: make([]uint64, buckets)}); out.Kind != index.OutcomeSnapshotInstalled {
				tb.Fatalf("install on lane %d: %v", l, out)
			}
		}
	}
	w.rewind()
	close(ix.started)
	tb.Cleanup(ix.closeLanes)
	return w
}

// step is what lane l's decode stage and owner do for a run of one record, the run of a lane
// that receives one delta per fetch: decode it, apply it, give the run back, and, caught up,
// publish the lane's status and apply the freshness policy (lane.run).
//
//go:noinline
func (w *widthLanes) step(l, k int, now time.Time) {
	o, d := w.owners[l], w.decs[l]
	run := <-d.free
	d.fill(run, 0, w.recs[l][k:k+1])
	o.handleRun(context.Background(), run)
	d.release(run)
	o.publish()
	o.checkFreshness(now, false)
}

// BenchmarkLaneRunWidth is the indexer's own work per delta when each fetch brings one delta of
// each of the table's lanes in turn (deltas round-robin over every lane, as in
// BenchmarkE2EDeltaVisibleLanes), at 16 and at 64 lanes of 2^16 buckets, on one goroutine: the
// per-run cost of a lane (decode, apply, status, freshness) and how it grows with the lane count
// (the lanes' state and rows touched between two deltas of a lane). width=16 and width=64 run
// b.N deltas each (for instruction counts, lane.step alone); alternating runs the two widths in
// turn, three rounds of b.N deltas each, and reports the median ns per delta of each and the
// median per-round ratio 64 / 16.
func BenchmarkLaneRunWidth(b *testing.B) {
	const buckets, images, perLane16 = 1 << 16, 16, 1024
	ws := map[int]*widthLanes{}
	get := func(width int) *widthLanes {
		if ws[width] == nil {
			ws[width] = newWidthLanes(b, width, buckets, perLane16*16/width, images)
		}
		return ws[width]
	}
	// run applies n deltas and returns the time they took (the rewinds between passes over the
	// deltas are not timed).
	run := func(w *widthLanes, n int) time.Duration {
		width := len(w.owners)
		total := len(w.recs[0]) * width
		now := time.Now()
		var spent time.Duration
		for done := 0; done < n; {
			w.rewind()
			m := min(total, n-done)
			t0 := time.Now()
			for i := range m {
				w.step(i%width, i/width, now)
			}
			spent += time.Since(t0)
			done += m
		}
		return spent
	}
	for _, width := range []int{16, 64} {
		b.Run(fmt.Sprintf("width=%d", width), func(b *testing.B) {
			w := get(width)
			b.ResetTimer()
			spent := run(w, b.N)
			b.StopTimer()
			b.ReportMetric(float64(spent.Nanoseconds())/float64(b.N), "ns/delta")
		})
	}
	b.Run("alternating", func(b *testing.B) {
		w16, w64 := get(16), get(64)
		var ns16, ns64, ratio []float64
		for round := range 3 {
			var a, c float64
			if round%2 == 0 {
				a = float64(run(w16, b.N).Nanoseconds()) / float64(b.N)
				c = float64(run(w64, b.N).Nanoseconds()) / float64(b.N)
			} else {
				c = float64(run(w64, b.N).Nanoseconds()) / float64(b.N)
				a = float64(run(w16, b.N).Nanoseconds()) / float64(b.N)
			}
			ns16, ns64, ratio = append(ns16, a), append(ns64, c), append(ratio, c/a)
		}
		med := func(v []float64) float64 { s := slices.Clone(v); slices.Sort(s); return s[len(s)/2] }
		b.ReportMetric(med(ns16), "ns/delta-16")
		b.ReportMetric(med(ns64), "ns/delta-64")
		b.ReportMetric(med(ratio), "64/16")
	})
}

// discardOutputs drops the side records (the benchmark's lanes write none: no fault, no
// freshness change).
type discardOutputs struct{}

func (discardOutputs) LaneEvent(schemas.LaneEvent)                                      {}
func (discardOutputs) DeadLetter(*kgo.Record, schemas.DeadLetterReason, string, string) {}
func (discardOutputs) RequestSnapshot(uint8, ckf.PoolID, schemas.SnapshotRequestReason, string, int64) {
}
