package relay_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/ckf/producer"
	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/ckf-stream/ckf-stream/streams/internal/streamtest"
	"github.com/ckf-stream/ckf-stream/streams/relay"
	"github.com/ckf-stream/ckf-stream/testenv"
	"github.com/twmb/franz-go/pkg/kgo"
)

// ---- 5. relay throughput ------------------------------------------------------------------

type pfRelayResult struct {
	Events           int       `json:"events"`
	BlockOps         int64     `json:"block_ops"`
	EventsPerSec     []float64 `json:"events_per_sec"`
	RawEventsPerSec  []float64 `json:"raw_events_per_sec"`
	MedianEvents     float64   `json:"median_events_per_sec"`
	MedianBlockOps   float64   `json:"median_block_ops_per_sec"`
	MedianRaw        float64   `json:"median_raw_events_per_sec"`
	RelayOverRaw     float64   `json:"relay_over_raw"`
	Deltas, Images   uint64
	Transactions     uint64
	ImagesPerDelta   float64
	LoadAvg          [3]float64
	ProduceSecsFirst float64
	Window           uint64  `json:"window"`
	Snapshots        uint64  `json:"snapshots"`
	SnapshotShare    float64 `json:"snapshot_share"`
}

// pfKvEvents generates n KV events of 8 workers: 70 % stores of new 4..16-block chains (half
// continuing an earlier chain of the worker), 30 % removals of a chain's tail; it returns the
// encoded records and the block operations they carry.
func pfKvEvents(b *testing.B, codec *schemas.Codec, topic string, n int) ([]*kgo.Record, int64) {
	rng := rand.New(rand.NewPCG(21, 22))
	type chain struct{ ids []ckf.ExternalBlockHash }
	held := map[ckf.WorkerID][]*chain{}
	next := uint64(1)
	var ops int64
	recs := make([]*kgo.Record, 0, n)
	for len(recs) < n {
		w := ckf.WorkerID(1 + rng.IntN(8))
		cs := held[w]
		var ev producer.RouterEvent
		if rng.IntN(100) < 70 || len(cs) == 0 {
			k := 4 + rng.IntN(13)
			blocks := make([]producer.StoredBlock, k)
			for i := range blocks {
				blocks[i] = producer.StoredBlock{BlockHash: ckf.ExternalBlockHash(next), TokensHash: ckf.LocalBlockHash(rng.Uint64())}
				next++
			}
			sd := producer.StoreData{Blocks: blocks}
			c := &chain{}
			if len(cs) > 0 && rng.IntN(2) == 0 {
				parent := cs[rng.IntN(len(cs))]
				if len(parent.ids) > 0 {
					sd.HasParent, sd.ParentHash = true, parent.ids[len(parent.ids)-1]
				}
			}
			for _, bl := range blocks {
				c.ids = append(c.ids, bl.BlockHash)
			}
			held[w] = append(cs, c)
			ev = producer.RouterEvent{WorkerID: w, Event: producer.KvCacheEvent{Kind: producer.KvEventStored, Stored: sd}}
			ops += int64(k)
		} else {
			i := rng.IntN(len(cs))
			c := cs[i]
			k := 1 + rng.IntN(len(c.ids))
			ids := make([]ckf.ExternalBlockHash, k)
			for j := range ids {
				ids[j] = c.ids[len(c.ids)-1-j]
			}
			c.ids = c.ids[:len(c.ids)-k]
			if len(c.ids) == 0 {
				held[w] = slices.Delete(cs, i, i+1)
			}
			ev = producer.RouterEvent{WorkerID: w, Event: producer.KvCacheEvent{Kind: producer.KvEventRemoved, Removed: ids}}
			ops += int64(k)
		}
		v, err := codec.EncodeKvEvent(relay.KvEventOf(ev))
		if err != nil {
			b.Fatal(err)
		}
		recs = append(recs, &kgo.Record{Topic: topic, Key: []byte(strconv.FormatUint(uint64(w), 10)), Value: v})
	}
	return recs, ops
}

// BenchmarkE2ERelay: per publication window (KV events per delta: 1, the spec's default, then
// 16, 64 = DefaultRelayPublishEveryEvents, and 256) and per repetition, a fresh relay (own KV
// topic, own lane topic, default snapshot triggers) starts on an empty KV topic; then n events
// are produced as fast as possible and the relay's live throughput is timed from the first
// produce to the last event applied and its deltas committed. Baseline: a bare consumer reading
// the same n KV records, in the same repetition. snapshot-share is the snapshots' part of the
// bytes the relay wrote to its lane (snapshot words against delta images and records).
func BenchmarkE2ERelay(b *testing.B) {
	for _, window := range []uint64{1, 16, 64, 256} {
		b.Run(fmt.Sprintf("window=%d", window), func(b *testing.B) { pfRelayThroughput(b, window) })
	}
}

func pfRelayThroughput(b *testing.B, window uint64) {
	n := streamtest.PerfScaled(100_000)
	var res pfRelayResult
	res.Events = n
	res.Window = window
	b.ResetTimer()
	for range b.N {
		for rep := range min(streamtest.PerfReps(), 3) {
			e := streamtest.NewEnv(b, 1<<20)
			kvTopic := testenv.NewTopic(b, 4)
			recs, ops := pfKvEvents(b, e.Codec, kvTopic, n)
			res.BlockOps = ops
			const lane = 2
			cfg := relay.DefaultRelayConfig()
			cfg.Topics = relay.RelayTopics{KVEvents: kvTopic, Lanes: e.Topics.Lanes, SnapshotIndex: e.Topics.SnapshotIndex,
				Control: e.Topics.Control, DeadLetter: e.Topics.DeadLetter}
			cfg.Pool, cfg.Lane, cfg.CKF = streamtest.Pool(100+lane), lane, ckf.NewCkfConfig(e.Blocks)
			cfg.CKF.PublishEveryNEvents = window
			cfg.TransactionalID = testenv.UniqueName(b, "bench-relay") + strconv.Itoa(rep)
			r, stopRelay, _ := pfStartRelay(b, e, cfg)
			before := r.Stats()
			start := time.Now()
			pfProduceAll(b, recs)
			res.ProduceSecsFirst = time.Since(start).Seconds()
			// Done when every event is applied and everything the relay published is committed:
			// read on the relay's goroutine between two events, no publication is pending (the
			// open window was flushed) and the publisher's last sequence is the committed one.
			testenv.WaitUntil(b, 5*time.Minute, fmt.Sprintf("the relay applies and commits %d events", n), func() bool {
				s := r.Stats()
				if s.Events+s.Undecodable < uint64(n) || s.Events == before.Events {
					return false
				}
				committed := false
				if err := r.Inspect(context.Background(), func(st *producer.DcState, pub *producer.Publisher) {
					committed = !st.HasPendingPublication() && pub.LastSequence() == r.Stats().LastSequence
				}); err != nil {
					b.Fatalf("relay: %v", err)
				}
				return committed
			}, func() string { return fmt.Sprintf("stats %+v", r.Stats()) })
			el := time.Since(start)
			s := r.Stats()
			stopRelay()
			res.EventsPerSec = append(res.EventsPerSec, float64(n)/el.Seconds())
			res.Deltas, res.Images, res.Transactions = s.Deltas-before.Deltas, s.Images-before.Images, s.Transactions-before.Transactions
			res.Snapshots = s.Snapshots - before.Snapshots
			snapBytes := float64(res.Snapshots) * 8 * float64(s.BucketCount)
			deltaBytes := float64(res.Images)*16 + float64(res.Deltas)*128
			res.SnapshotShare = snapBytes / (snapBytes + deltaBytes)
			raw := streamtest.PerfRawConsume(b, kvTopic, []int32{0, 1, 2, 3}, int64(n))
			res.RawEventsPerSec = append(res.RawEventsPerSec, float64(n)/raw.Seconds())
		}
	}
	b.StopTimer()
	res.MedianEvents, res.MedianRaw = streamtest.PerfMedian(res.EventsPerSec), streamtest.PerfMedian(res.RawEventsPerSec)
	res.MedianBlockOps = res.MedianEvents * float64(res.BlockOps) / float64(n)
	res.RelayOverRaw = res.MedianEvents / res.MedianRaw
	if res.Deltas > 0 {
		res.ImagesPerDelta = float64(res.Images) / float64(res.Deltas)
	}
	res.LoadAvg = streamtest.PerfLoadAvg()
	b.ReportMetric(res.MedianEvents, "events/s")
	b.ReportMetric(res.MedianBlockOps, "block-ops/s")
	b.ReportMetric(res.MedianRaw, "raw-events/s")
	b.ReportMetric(res.RelayOverRaw, "relay/raw")
	b.ReportMetric(res.ImagesPerDelta, "images/delta")
	b.ReportMetric(res.SnapshotShare, "snapshot-share")
	b.ReportMetric(res.LoadAvg[0], "load1")
	streamtest.PerfWrite(b, fmt.Sprintf("e2e-relay-window=%d.json", window), res)
}
