package lanes

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/streams"
	"github.com/ckf-stream/ckf-stream/testenv"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap/zaptest"
)

// TestLaneBurstIsBackpressure: a burst of valid deltas far beyond one lane's worth of images (a
// 512-bucket lane receiving 3,000 deltas of 64 images, already in the log when the indexer
// starts) only pauses the lane's partition; it is never a fault. The lane applies every delta
// and ends with the producer's words. The whole indexer runs, with its own clients, against an
// in-process broker (franz-go's kfake): the pause is the client's (PauseFetchPartitions), so no
// real broker is needed to show it.
func TestLaneBurstIsBackpressure(t *testing.T) {
	t.Parallel()
	const lane, deltas, images = 4, 3000, 64
	cfg := testConfig()
	cfg.Feed.PauseBytes = 64 << 10 // 2.3 MB of deltas wait in the log: the partition must pause
	cfg.Feed.ResumeBytes = 16 << 10
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(ckf.LaneCount, cfg.Topics.Lanes, cfg.Topics.LaneEvents),
		kfake.SeedTopics(1, cfg.Topics.Control, cfg.Topics.DeadLetter))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	seeds := kgo.SeedBrokers(c.ListenAddrs()...)

	// The indexer's table and lane, built as the rig builds them, with the burst's filter size.
	r := newLaneRig(t, lane, 1500, cfg) // 512 buckets
	if bc := r.ix.g.Manifest().Format().BucketCount; bc != 512 {
		t.Fatalf("bucket count %d, want 512", bc)
	}
	p := r.producer(1)
	cl, err := kgo.NewClient(append(streams.LaneWriterClientOpts(), seeds)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	wcfg := streams.DefaultLaneWriterConfig()
	wcfg.LaneTopic, wcfg.Lane = cfg.Topics.Lanes, lane
	w, err := streams.NewLaneWriter(cl, r.codec, p.ID, wcfg)
	if err != nil {
		t.Fatal(err)
	}
	words, end := writeBurst(t, w, p, deltas, images)
	r.ix.closeLanes() // the rig's lane; the running indexer claims its own

	ix, err := NewIndexer(IndexerParams{Config: cfg, Indexer: r.ix.g, Codec: r.codec, ClientOpts: []kgo.Opt{seeds},
		Log: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ix.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("indexer: %v", err)
		}
	})
	<-ix.Started()
	status := func() LaneStatus { return ix.lanes[lane].stats.snapshot() }
	testenv.WaitUntil(t, time.Minute, "the lane applies the whole burst", func() bool { return status().AppliedOffset >= end-1 },
		func() string { return fmt.Sprintf("status %+v, end %d", status(), end) })
	st := status()
	if len(st.Faults) != 0 || st.Recoveries != 0 || st.Deltas != deltas || st.Images != deltas*images {
		t.Fatalf("after the burst: faults %v, recoveries %d, %d deltas and %d images applied; want no fault and every delta",
			st.Faults, st.Recoveries, st.Deltas, st.Images)
	}
	if st.FetchPauses == 0 {
		t.Fatalf("the partition was never paused (status %+v): the burst did not exercise backpressure", st)
	}
	g := ix.g
	if g.ReadyLanes() != 1<<lane || !slices.Equal(g.LaneWords(lane), words) {
		t.Fatalf("ready %016b, words equal %v; want the lane ready with the producer's words", g.ReadyLanes(), slices.Equal(g.LaneWords(lane), words))
	}
}

// writeBurst writes p's snapshot, then n deltas of k distinct random images each, through w. It
// returns the words the lane must end with and the partition's end offset.
func writeBurst(t *testing.T, w *streams.LaneWriter, p *rigProducer, n, k int) ([]uint64, int64) {
	t.Helper()
	snap, err := p.Publisher.SnapshotAfterBarrier(p.State, ckf.LaneLease{Lane: p.lane, Epoch: 1})
	if err != nil {
		t.Fatal(err)
	}
	pos, err := w.WriteSnapshot(context.Background(), &snap)
	if err != nil {
		t.Fatal(err)
	}
	words := p.State.CopyWords()
	WriteRandomDeltas(t, w, p.ID, p.lane, p.Publisher.LastSequence(), words, n, k)
	return words, pos.LastOffset + 1 + int64(n) // one record a delta
}

// WriteRandomDeltas writes n deltas of id after sequence seq through w, in batches of 256 as a
// relay does, each of k distinct random images (a generator seeded by lane), and applies them to
// words, the lane's words (one a bucket). Exported for the external benchmarks (bench_e2e_test.go).
func WriteRandomDeltas(t testing.TB, w *streams.LaneWriter, id ckf.ProducerIdentity, lane uint8, seq uint64, words []uint64, n, k int) {
	t.Helper()
	bc := uint64(len(words))
	rng := rand.New(rand.NewPCG(uint64(lane), 7))
	batch := make([]ckf.Delta, 0, 256)
	flush := func() {
		if err := w.WriteDeltas(context.Background(), batch); err != nil {
			t.Fatal(err)
		}
		batch = batch[:0]
	}
	for range n {
		seen := map[uint64]bool{}
		imgs := make([]ckf.BucketImage, 0, k)
		for len(imgs) < k {
			bucket := rng.Uint64N(bc)
			if seen[bucket] {
				continue
			}
			seen[bucket] = true
			v := rng.Uint64() | 1
			imgs = append(imgs, ckf.BucketImage{Bucket: bucket, Value: v})
			words[bucket] = v
		}
		batch = append(batch, ckf.Delta{Identity: id, BaseSequence: seq, Sequence: seq + 1, Images: imgs})
		seq++
		if len(batch) == cap(batch) {
			flush()
		}
	}
	flush()
}
