package streams_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/ckf/producer"
	"github.com/ckf-stream/ckf-stream/testenv"
)

// End-to-end benchmarks against the real broker (make bench-e2e). They report; nothing here
// asserts a time.

// writeSyntheticDeltas writes a snapshot of an empty filter and n deltas of k random images each
// to lane, as a relay would, and returns the producer's final words.
func writeSyntheticDeltas(b testing.TB, e *testEnv, lane uint8, n, k int) []uint64 {
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
		testenv.WaitUntil(b, 5*time.Minute, "the four lanes are restored", func() bool {
			return ri.ix.GlobalIndexer().ReadyLanes() == 1|1<<5|1<<10|1<<15
		}, func() string { return fmt.Sprintf("ready lanes %016b", ri.ix.GlobalIndexer().ReadyLanes()) })
		total += time.Since(start)
		ri.stop()
	}
	b.ReportMetric(total.Seconds()*1000/float64(b.N), "ms/restore")
}

// fill stores n random single-block chains directly in the producer state (no publication).
func fill(p *testProducer, n int, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 99))
	for i := 0; i < n; i += 16 {
		blocks := make([]producer.StoredBlock, 16)
		for j := range blocks {
			blocks[j] = producer.StoredBlock{BlockHash: ckf.ExternalBlockHash(p.nextID), TokensHash: ckf.LocalBlockHash(rng.Uint64())}
			p.nextID++
		}
		p.state.ApplyEvent(producer.RouterEvent{WorkerID: 1, Event: producer.KvCacheEvent{Kind: producer.KvEventStored, Stored: producer.StoreData{Blocks: blocks}}})
	}
	p.state.Flush()
}
