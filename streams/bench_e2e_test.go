package streams_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/testenv"
	"github.com/twmb/franz-go/pkg/kgo"
)

// End-to-end benchmarks against the real broker (make bench-e2e). They report; nothing here
// asserts a time.

// writeSyntheticDeltas writes a snapshot of an empty filter and n deltas of k random images each
// to lane, as a relay would, and returns the producer's final words.
func writeSyntheticDeltas(b *testing.B, e *testEnv, lane uint8, n, k int) []uint64 {
	b.Helper()
	p := e.producer(lane, 1)
	p.snapshot()
	bc := p.state.BucketCount()
	words := p.state.CopyWords()
	rng := rand.New(rand.NewPCG(uint64(lane), 7))
	batch := make([]ckf.Delta, 0, 256)
	seq := p.pub.LastSequence()
	flush := func() {
		if err := p.w.WriteDeltas(context.Background(), batch); err != nil {
			b.Fatal(err)
		}
		batch = batch[:0]
	}
	for i := 0; i < n; i++ {
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
		batch = append(batch, ckf.Delta{Identity: p.id, BaseSequence: seq, Sequence: seq + 1, Images: imgs})
		seq++
		if len(batch) == cap(batch) {
			flush()
		}
	}
	flush()
	return words
}

// BenchmarkLaneIngestVsRawConsume compares, on the same records, a bare franz-go consumer reading
// one lane partition with the indexer ingesting it (decode, pool, table writes). The ratio
// ingest/raw is the figure of merit (target >= 0.8 for deltas of <= 64 images).
func BenchmarkLaneIngestVsRawConsume(b *testing.B) {
	for _, k := range []int{16, 64, 256} {
		b.Run(fmt.Sprintf("images=%d", k), func(b *testing.B) {
			e := newTestEnv(b, 1<<16)
			const lane = 3
			const n = 50_000
			words := writeSyntheticDeltas(b, e, lane, n, k)
			b.ResetTimer()
			var rawTotal, ixTotal time.Duration
			for i := 0; i < b.N; i++ {
				rawTotal += rawConsume(b, e, lane, n+3) // snapshot chunks + deltas
				ixTotal += indexerIngest(b, e, lane, words)
			}
			b.ReportMetric(float64(n*b.N)/rawTotal.Seconds(), "raw-records/s")
			b.ReportMetric(float64(n*b.N)/ixTotal.Seconds(), "ingest-records/s")
			b.ReportMetric(float64(n*k*b.N)/ixTotal.Seconds(), "ingest-images/s")
			b.ReportMetric(rawTotal.Seconds()/ixTotal.Seconds(), "ingest/raw")
		})
	}
}

func rawConsume(b *testing.B, e *testEnv, lane uint8, records int) time.Duration {
	b.Helper()
	start := time.Now()
	cl, err := kgo.NewClient(kgo.SeedBrokers(testenv.Brokers(b)...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{e.topics.Lanes: {int32(lane): kgo.NewOffset().AtStart()}}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.FetchMaxPartitionBytes(8<<20), kgo.FetchMaxBytes(32<<20))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	got := 0
	for got < records {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			b.Fatalf("raw consume: %d of %d records", got, records)
		}
		got += fs.NumRecords()
	}
	return time.Since(start)
}

func indexerIngest(b *testing.B, e *testEnv, lane uint8, words []uint64) time.Duration {
	b.Helper()
	ri := e.startIndexer(e.manifest(ckf.ConsumerInstanceID(time.Now().UnixNano()), lane), e.indexerConfig())
	defer ri.stop()
	// Timed from the moment the lanes' consumer starts (after the restore plan), like rawConsume
	// is timed from its client's creation.
	start := time.Now()
	for {
		g := ri.ix.GlobalIndexer()
		if g.ReadyLanes() != 0 && laneStatus(ri, lane).AppliedOffset >= laneHWM(ri, lane)-1 {
			if equalWords(g.LaneWords(lane), words) {
				return time.Since(start)
			}
		}
		if time.Since(start) > 5*time.Minute {
			b.Fatal("indexer did not ingest the lane")
		}
		time.Sleep(time.Millisecond)
	}
}

func laneHWM(ri *runningIndexer, lane uint8) int64 { return laneStatus(ri, lane).HighWatermark }

func equalWords(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// BenchmarkRestoreFourLanes2to20 measures how long a starting indexer takes to make four lanes
// of 2^20 buckets ready from their indexed snapshots (8 MiB each, 70 chunks).
func BenchmarkRestoreFourLanes2to20(b *testing.B) {
	e := newTestEnv(b, 2_000_000) // 2^20 buckets
	e.chunkWords = 0              // the production chunk size
	lanes := []uint8{0, 5, 10, 15}
	for _, l := range lanes {
		p := e.producer(l, 1)
		fill(p, 1_500_000, uint64(l))
		p.snapshot()
	}
	b.ResetTimer()
	var total time.Duration
	for i := 0; i < b.N; i++ {
		start := time.Now()
		ri := e.startIndexer(e.manifest(ckf.ConsumerInstanceID(1000+i), lanes...), e.indexerConfig())
		for ri.ix.GlobalIndexer().ReadyLanes() != 1|1<<5|1<<10|1<<15 {
			if time.Since(start) > 5*time.Minute {
				b.Fatal("lanes not restored")
			}
			time.Sleep(time.Millisecond)
		}
		total += time.Since(start)
		ri.stop()
	}
	b.ReportMetric(total.Seconds()*1000/float64(b.N), "ms/restore")
}

// fill stores n random single-block chains directly in the producer state (no publication).
func fill(p *testProducer, n int, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 99))
	for i := 0; i < n; i += 16 {
		blocks := make([]ckf.StoredBlock, 16)
		for j := range blocks {
			blocks[j] = ckf.StoredBlock{BlockHash: ckf.ExternalBlockHash(p.nextID), TokensHash: ckf.LocalBlockHash(rng.Uint64())}
			p.nextID++
		}
		p.state.ApplyEvent(ckf.RouterEvent{WorkerID: 1, Event: ckf.KvCacheEvent{Kind: ckf.KvEventStored, Stored: ckf.StoreData{Blocks: blocks}}})
	}
	p.state.Flush()
}
