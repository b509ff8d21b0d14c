package lanes_test

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/ckf/producer"
	"github.com/ckf-stream/ckf-stream/streams/internal/streamtest"
	"github.com/ckf-stream/ckf-stream/streams/lanes"
	"github.com/ckf-stream/ckf-stream/testenv"
)

// End-to-end benchmarks against the real broker (make bench-e2e). They report; nothing here
// asserts a time.

// writeSyntheticDeltas writes a snapshot of an empty filter and n deltas of k random images each
// to lane, as a relay would, and returns the producer's final words.
func writeSyntheticDeltas(b testing.TB, e *streamtest.Env, lane uint8, n, k int) []uint64 {
	b.Helper()
	p := e.Producer(lane, 1)
	p.Snapshot()
	words := p.State.CopyWords()
	lanes.WriteRandomDeltas(b, p.Writer, p.ID, lane, p.Publisher.LastSequence(), words, n, k)
	return words
}

// BenchmarkRestoreFourLanes2to20 measures how long a starting indexer takes to make four lanes
// of 2^20 buckets ready from their indexed snapshots (8 MiB each, 70 chunks).
func BenchmarkRestoreFourLanes2to20(b *testing.B) {
	e := streamtest.NewEnv(b, 2_000_000) // 2^20 buckets
	e.ChunkWords = 0                     // the production chunk size
	lanes := []uint8{0, 5, 10, 15}
	for _, l := range lanes {
		p := e.Producer(l, 1)
		fill(p, 1_500_000, uint64(l))
		p.Snapshot()
	}
	b.ResetTimer()
	var total time.Duration
	for i := 0; i < b.N; i++ {
		start := time.Now()
		ri := e.StartIndexer(e.Manifest(ckf.ConsumerInstanceID(1000+i), lanes...), e.IndexerConfig())
		testenv.WaitUntil(b, 5*time.Minute, "the four lanes are restored", func() bool {
			return ri.Indexer.GlobalIndexer().ReadyLanes() == 1|1<<5|1<<10|1<<15
		}, func() string { return fmt.Sprintf("ready lanes %016b", ri.Indexer.GlobalIndexer().ReadyLanes()) })
		total += time.Since(start)
		ri.Stop()
	}
	b.ReportMetric(total.Seconds()*1000/float64(b.N), "ms/restore")
}

// fill stores n random single-block chains directly in the producer state (no publication).
func fill(p *streamtest.Producer, n int, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 99))
	for i := 0; i < n; i += 16 {
		blocks := make([]producer.StoredBlock, 16)
		for j := range blocks {
			blocks[j] = producer.StoredBlock{BlockHash: ckf.ExternalBlockHash(p.NextID), TokensHash: ckf.LocalBlockHash(rng.Uint64())}
			p.NextID++
		}
		p.State.ApplyEvent(producer.RouterEvent{WorkerID: 1, Event: producer.KvCacheEvent{Kind: producer.KvEventStored, Stored: producer.StoreData{Blocks: blocks}}})
	}
	p.State.Flush()
}
