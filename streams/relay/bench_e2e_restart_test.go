package relay_test

import (
	"fmt"
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

// pfRestartHistory generates history KV events of 8 workers whose state ends with resident
// blocks held: stores of new 10-block chains until resident is reached, then churn (a removal of
// a worker's oldest chain followed by a store of a new one) until the history is complete. The
// last tail events are more churn, written after the checkpoint. It returns the encoded records
// of the history and of the tail.
func pfRestartHistory(b *testing.B, codec *schemas.Codec, topic string, resident, history, tail int) (hist, tl []*kgo.Record) {
	const chainLen, workers = 10, 8
	next := uint64(1)
	held := make([][][]ckf.ExternalBlockHash, workers)
	enc := func(w int, ev producer.KvCacheEvent) *kgo.Record {
		v, err := codec.EncodeKvEvent(relay.KvEventOf(producer.RouterEvent{WorkerID: ckf.WorkerID(w + 1), Event: ev}))
		if err != nil {
			b.Fatal(err)
		}
		return &kgo.Record{Topic: topic, Key: []byte(strconv.Itoa(w + 1)), Value: v}
	}
	store := func(w int) *kgo.Record {
		blocks := make([]producer.StoredBlock, chainLen)
		ids := make([]ckf.ExternalBlockHash, chainLen)
		for i := range blocks {
			ids[i] = ckf.ExternalBlockHash(next)
			blocks[i] = producer.StoredBlock{BlockHash: ids[i], TokensHash: ckf.LocalBlockHash(next * 0x9E3779B97F4A7C15)}
			next++
		}
		held[w] = append(held[w], ids)
		return enc(w, producer.KvCacheEvent{Kind: producer.KvEventStored, Stored: producer.StoreData{Blocks: blocks}})
	}
	remove := func(w int) *kgo.Record {
		ids := held[w][0]
		held[w] = held[w][1:]
		return enc(w, producer.KvCacheEvent{Kind: producer.KvEventRemoved, Removed: ids})
	}
	var out []*kgo.Record
	for i := 0; len(out) < history+tail; i++ {
		w := i % workers
		if int(next-1) < resident || len(held[w]) == 0 { // next-1 blocks stored so far
			out = append(out, store(w))
			continue
		}
		out = append(out, remove(w))
		if len(out) < history+tail {
			out = append(out, store(w))
		}
	}
	return out[:history], out[history:]
}

type pfRestartPoint struct {
	History          int       `json:"history_events"`
	Tail             int       `json:"tail_events"`
	ResidentBlocks   uint64    `json:"resident_blocks"`
	CheckpointBytes  uint64    `json:"checkpoint_bytes"`
	RestartSecs      []float64 `json:"restart_secs"`     // restored from the checkpoint + tail
	FullReplaySecs   []float64 `json:"full_replay_secs"` // the same start without a checkpoint topic
	MedianRestart    float64   `json:"median_restart_secs"`
	MedianFullReplay float64   `json:"median_full_replay_secs"`
}

type pfRestartResult struct {
	Points              []pfRestartPoint `json:"points"`
	RestartGrowth       float64          `json:"restart_10x_history_ratio"`
	FullReplayGrowth    float64          `json:"full_replay_10x_history_ratio"`
	RestartOverFullLong float64          `json:"restart_over_full_replay_long_history"`
	LoadAvg             [3]float64       `json:"loadavg"`
}

// BenchmarkE2ERelayRestart: with about 1M resident blocks, a relay restarts after 10^5 and
// after 10^6 KV events of history (the same resident state, reached with ten times more churn).
// Per history: a relay applies the history live and checkpoints once at its end, 10,000 more
// events follow (the tail), the relay stops; then, alternately, a relay restarts from the
// checkpoint (restore + tail replay + start-up snapshot: timed from Run to Started) and, as the
// same-run baseline, a relay without a checkpoint topic replays the whole history. The restart
// time must not grow with history: restart_10x_history_ratio is the 10^6 time over the 10^5
// time.
func BenchmarkE2ERelayRestart(b *testing.B) {
	resident := streamtest.PerfScaled(1_000_000)
	histories := []int{streamtest.PerfScaled(100_000), streamtest.PerfScaled(1_000_000)}
	tail := streamtest.PerfScaled(10_000) // below the shorter history: the tail triggers no second checkpoint
	var res pfRestartResult
	b.ResetTimer()
	for range b.N {
		for _, h := range histories {
			pt := pfRestartPoint{History: h, Tail: tail}
			e := streamtest.NewEnv(b, uint64(resident)*2)
			kvTopic := testenv.NewTopic(b, 4)
			ckTopic := testenv.NewTopic(b, ckf.LaneCount)
			hist, tl := pfRestartHistory(b, e.Codec, kvTopic, resident, h, tail)
			const lane = 3
			cfg := relay.DefaultRelayConfig()
			cfg.Topics = relay.RelayTopics{KVEvents: kvTopic, Lanes: e.Topics.Lanes, SnapshotIndex: e.Topics.SnapshotIndex,
				Control: e.Topics.Control, Checkpoints: ckTopic}
			cfg.Pool, cfg.Lane, cfg.CKF = streamtest.Pool(100+lane), lane, ckf.NewCkfConfig(e.Blocks)
			cfg.SnapshotEveryDeltas, cfg.SnapshotInterval = 1<<40, time.Hour
			cfg.CheckpointInterval, cfg.CheckpointEveryEvents = 0, uint64(h)
			run := func(cfg relay.RelayConfig, name string) (*relay.Relay, func(), time.Duration) {
				cfg.TransactionalID = testenv.UniqueName(b, name)
				return pfStartRelay(b, e, cfg)
			}
			// The history, applied live, and its one checkpoint; then the tail.
			r, stop, _ := run(cfg, "restart-writer")
			pfProduceAll(b, hist)
			testenv.WaitUntil(b, 10*time.Minute, fmt.Sprintf("the relay applies %d events and checkpoints them", h), func() bool {
				return r.Stats().Checkpoints >= 1
			}, func() string { return fmt.Sprintf("stats %+v", r.Stats()) })
			pt.CheckpointBytes = r.Stats().CheckpointBytes
			pt.ResidentBlocks = r.Stats().ResidentBlocks
			pfProduceAll(b, tl)
			testenv.WaitUntil(b, 5*time.Minute, "the relay applies the tail", func() bool {
				s := r.Stats()
				return s.Events+s.ReplayedEvents >= uint64(h+tail)
			}, func() string { return fmt.Sprintf("stats %+v", r.Stats()) })
			stop()

			noCkpt := cfg
			noCkpt.Topics.Checkpoints = ""
			for rep := range min(streamtest.PerfReps(), 3) {
				r, stop, took := run(cfg, "restart-"+strconv.Itoa(rep))
				s := r.Stats()
				stop()
				if s.RestoredCheckpoint == 0 || s.ReplayedEvents != uint64(tail) {
					b.Fatalf("restart %d: %+v; want the checkpoint restored and the %d tail events replayed", rep, s, tail)
				}
				pt.RestartSecs = append(pt.RestartSecs, took.Seconds())
				r, stop, took = run(noCkpt, "full-"+strconv.Itoa(rep))
				s = r.Stats()
				stop()
				if s.ReplayedEvents < uint64(h+tail) {
					b.Fatalf("full replay %d: %+v", rep, s)
				}
				pt.FullReplaySecs = append(pt.FullReplaySecs, took.Seconds())
			}
			pt.MedianRestart, pt.MedianFullReplay = streamtest.PerfMedian(pt.RestartSecs), streamtest.PerfMedian(pt.FullReplaySecs)
			res.Points = append(res.Points, pt)
			b.ReportMetric(pt.MedianRestart, fmt.Sprintf("restart-s/h%d", h))
			b.ReportMetric(pt.MedianFullReplay, fmt.Sprintf("full-replay-s/h%d", h))
		}
	}
	b.StopTimer()
	short, long := res.Points[0], res.Points[len(res.Points)-1]
	res.RestartGrowth = long.MedianRestart / short.MedianRestart
	res.FullReplayGrowth = long.MedianFullReplay / short.MedianFullReplay
	res.RestartOverFullLong = long.MedianRestart / long.MedianFullReplay
	res.LoadAvg = streamtest.PerfLoadAvg()
	b.ReportMetric(res.RestartGrowth, "restart-10x-history-ratio")
	b.ReportMetric(res.FullReplayGrowth, "full-replay-10x-history-ratio")
	b.ReportMetric(float64(long.CheckpointBytes), "checkpoint-bytes")
	streamtest.PerfWrite(b, "e2e-relay-restart.json", res)
}
