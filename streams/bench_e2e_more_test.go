package streams_test

// End-to-end benchmarks for `make bench-e2e` (real broker; each benchmark runs its own
// repetitions, so run them with -benchtime 1x). They report; nothing asserts a time.
//
//	KAFKA_BROKERS=127.0.0.1:9092 go test -run '^$' -bench E2E -benchtime 1x ./streams/
//
// With CKF_PERF_DIR set, each writes its raw figures (JSON, CSV) there for tools/plots.
// CKF_E2E_REPS (default 5) sets the alternating raw/ingest repetitions, CKF_E2E_SECONDS
// (default 4) the length of each timed load phase, CKF_E2E_INDEXER_GOGC (default 400, the
// indexer's indexer.gc_percent) the GC target of the ingest phases.
//
//   - E2EIngestVsRaw: bare franz-go consume of a lane partition vs the indexer's lane ingest of
//     the same records, alternating, median of the repetitions (T9, design §6).
//   - E2EDeltaVisibleLatency: a producer writes deltas at a fixed rate (a fraction of the
//     measured ingest capacity); a prober queries each delta's marker block and records when it
//     becomes visible to queries (T9 apply lag).
//   - E2EQueryKafka / E2EQueryHTTP / E2EQueryInProcess: 128-block queries on 16 lanes of 2^20
//     buckets through QueryService+QueryClient, through the indexer's HTTP endpoint
//     (app/indexer API, loopback) and through Answerer directly; closed loops of 1..64 callers.
//     Same-run baselines: a bare franz-go echo (Kafka floor) and the in-process Answer.
//   - E2ERestore16Lanes2to20: a starting indexer makes 16 lanes of 2^20 buckets ready from
//     their indexed snapshots; baseline: a bare consumer reading the same records.
//   - E2ERelay: streams.Relay turning KV events into lane deltas (live), in KV events/s and
//     block operations/s; baseline: a bare consumer reading the same KV records.

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/app/indexer"
	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/ckf/index"
	"github.com/ckf-stream/ckf-stream/ckf/producer"
	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/ckf-stream/ckf-stream/streams"
	"github.com/ckf-stream/ckf-stream/testenv"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"
)

// ---- helpers -----------------------------------------------------------------------------

func pfEnvInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

func pfReps() int { return pfEnvInt("CKF_E2E_REPS", 5) }

// pfWarmups is how many unrecorded raw + ingest pairs BenchmarkE2EIngestVsRaw runs before its
// timed repetitions: CKF_E2E_WARMUP, default 1, 0 allowed. A broker started just before the run
// (make bench-e2e starts one when none is running) spends its first seconds compiling hot paths
// and filling the page cache; without a warm-up the first pairs measure the JVM, not the
// consumers. Both sides of a pair see the same warm-up.
func pfWarmups() int {
	if v, err := strconv.Atoi(os.Getenv("CKF_E2E_WARMUP")); err == nil && v >= 0 {
		return v
	}
	return 1
}

// pfIndexerGCPercent is the GC target the ingest phase runs with: CKF_E2E_INDEXER_GOGC, default
// 400, the indexer's default indexer.gc_percent (app/config.DefaultIndexerGCPercent).
func pfIndexerGCPercent() int { return pfEnvInt("CKF_E2E_INDEXER_GOGC", 400) }

// pfScaled divides a record count by CKF_E2E_DIVIDE (default 1; a quick smoke run uses 10).
func pfScaled(n int) int           { return max(1000, n/pfEnvInt("CKF_E2E_DIVIDE", 1)) }
func pfPhase() time.Duration       { return time.Duration(pfEnvInt("CKF_E2E_SECONDS", 4)) * time.Second }
func pfMedian(v []float64) float64 { return pfQuantile(v, 0.5) }

func pfLoadAvg() [3]float64 {
	var out [3]float64
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return out
	}
	f := strings.Fields(string(b))
	for i := 0; i < 3 && i < len(f); i++ {
		out[i], _ = strconv.ParseFloat(f[i], 64)
	}
	return out
}

// pfCPU returns the CPU time (user+system) used so far by this process and by the test
// broker's process (0 when its pid file is not found), from /proc at 100 ticks/s.
func pfCPU() (self, broker time.Duration) {
	read := func(path string) time.Duration {
		b, err := os.ReadFile(path)
		if err != nil {
			return 0
		}
		s := string(b)
		if i := strings.LastIndexByte(s, ')'); i >= 0 {
			s = s[i+1:]
		}
		f := strings.Fields(s) // f[0] is field 3 (state); utime, stime are fields 14, 15
		if len(f) < 13 {
			return 0
		}
		u, _ := strconv.ParseInt(f[11], 10, 64)
		st, _ := strconv.ParseInt(f[12], 10, 64)
		return time.Duration(u+st) * 10 * time.Millisecond
	}
	self = read("/proc/self/stat")
	dir := os.Getenv("KAFKA_RUN_DIR")
	if dir == "" {
		dir = testenv.DefaultRunDir()
	}
	if pid, err := os.ReadFile(filepath.Join(dir, "kafka.pid")); err == nil {
		broker = read("/proc/" + strings.TrimSpace(string(pid)) + "/stat")
	}
	return self, broker
}

// pfQuantile returns the q-quantile of v (sorted copy; nearest rank).
func pfQuantile(v []float64, q float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	i := int(q * float64(len(s)))
	return s[min(len(s)-1, max(0, i))]
}

func pfDurQuantile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

// pfWrite writes v as JSON to $CKF_PERF_DIR/name (nothing when the variable is unset).
func pfWrite(b *testing.B, name string, v any) {
	dir := os.Getenv("CKF_PERF_DIR")
	if dir == "" {
		return
	}
	buf, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		b.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), append(buf, '\n'), 0o644); err != nil {
		b.Fatal(err)
	}
}

// pfCDF returns at most points quantile points of ds in milliseconds (for CDF plots).
func pfCDF(ds []time.Duration, points int) [][2]float64 {
	if len(ds) == 0 {
		return nil
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	var out [][2]float64
	step := max(1, len(s)/points)
	for i := 0; i < len(s); i += step {
		out = append(out, [2]float64{float64(s[i].Nanoseconds()) / 1e6, float64(i+1) / float64(len(s))})
	}
	out = append(out, [2]float64{float64(s[len(s)-1].Nanoseconds()) / 1e6, 1})
	return out
}

// pfStartIndexer starts an indexer like startIndexer, with a silent logger (the benchmarks
// must not pay for, or print, the test logger's lines).
func pfStartIndexer(b *testing.B, e *testEnv, m index.Manifest) *runningIndexer {
	b.Helper()
	g, err := index.NewGlobalIndexer(m, ckf.DefaultSearchConfig())
	if err != nil {
		b.Fatal(err)
	}
	cfg := e.indexerConfig()
	ix, err := streams.NewIndexer(streams.IndexerParams{
		Config: cfg, Indexer: g, Codec: e.codec,
		ClientOpts: []kgo.Opt{kgo.SeedBrokers(testenv.Brokers(b)...)},
		Log:        zap.NewNop(),
	})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ri := &runningIndexer{ix: ix, cancel: cancel, done: make(chan error, 1)}
	go func() { ri.done <- ix.Run(ctx) }()
	b.Cleanup(ri.stop)
	select {
	case <-ix.Started():
	case err := <-ri.done:
		b.Fatalf("indexer stopped at start-up: %v", err)
	case <-time.After(time.Minute):
		b.Fatal("indexer did not start")
	}
	return ri
}

// pfRawConsume reads records records from the given partitions of topic with a bare franz-go
// consumer (read-committed, the lane consumer's fetch sizes) and returns the time taken,
// client creation included.
func pfRawConsume(b *testing.B, topic string, partitions []int32, records int64) time.Duration {
	b.Helper()
	start := time.Now()
	assign := map[int32]kgo.Offset{}
	for _, p := range partitions {
		assign[p] = kgo.NewOffset().AtStart()
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(testenv.Brokers(b)...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: assign}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.FetchMaxPartitionBytes(8<<20), kgo.FetchMaxBytes(32<<20))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var got int64
	for got < records {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			b.Fatalf("raw consume: %d of %d records", got, records)
		}
		got += int64(fs.NumRecords())
	}
	return time.Since(start)
}

// pfEndOffsets returns the sum of the end offsets of topic's partitions ps.
func pfEndOffsets(b testing.TB, topic string, ps []int32) int64 {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ends, err := testenv.Admin(b).ListEndOffsets(ctx, topic)
	if err != nil {
		b.Fatal(err)
	}
	var n int64
	for _, p := range ps {
		o, _ := ends.Lookup(topic, p)
		n += o.Offset
	}
	return n
}

// ---- 1. lane ingest vs raw consume -------------------------------------------------------

// pfIngestOnce starts a fresh indexer on lane and returns the time from its start until the
// lane holds words (timed like indexerIngest: from the consumer's start, after the plan).
func pfIngestOnce(b *testing.B, e *testEnv, lane uint8, words []uint64, hwm int64) time.Duration {
	b.Helper()
	// The indexer process runs with its configured GC target (indexer.gc_percent, default 400);
	// the bare consumer before it keeps the runtime default, as a plain consumer process would.
	defer debug.SetGCPercent(debug.SetGCPercent(pfIndexerGCPercent()))
	ri := pfStartIndexer(b, e, e.manifest(ckf.ConsumerInstanceID(time.Now().UnixNano()), lane))
	defer ri.stop()
	start := time.Now()
	testenv.WaitUntil(b, 5*time.Minute, fmt.Sprintf("the indexer ingests lane %d", lane), func() bool {
		return ri.ix.GlobalIndexer().ReadyLanes() != 0 && laneStatus(ri, lane).AppliedOffset >= hwm-1 &&
			equalWords(ri.ix.GlobalIndexer().LaneWords(lane), words)
	}, func() string { return fmt.Sprintf("status %+v, high watermark %d", laneStatus(ri, lane), hwm) })
	return time.Since(start)
}

// pfCapacity16 is the median lane ingest rate (records/s) of 16-image deltas measured by
// BenchmarkE2EIngestVsRaw in this process (0 when it did not run).
var pfCapacity16 atomic.Uint64

type pfIngestResult struct {
	Images              int       `json:"images"`
	Records             int       `json:"records"`
	Reps                int       `json:"reps"`
	RawRecordsPerSec    []float64 `json:"raw_records_per_sec"`
	IngestRecordsPerSec []float64 `json:"ingest_records_per_sec"`
	MedianRaw           float64   `json:"median_raw_records_per_sec"`
	MedianIngest        float64   `json:"median_ingest_records_per_sec"`
	MedianImagesPerSec  float64   `json:"median_ingest_images_per_sec"`
	RatioOfMedians      float64   `json:"ingest_over_raw"`
	// CPU per record (µs), this process and the broker's, during the raw and ingest phases.
	RawSelfCPUus, RawBrokerCPUus       []float64
	IngestSelfCPUus, IngestBrokerCPUus []float64
	MedianPairRatio                    float64 `json:"median_pair_ratio"`
	LoadAvg                            [3]float64
	IndexerGCPercent                   int `json:"indexer_gc_percent"` // GC target of the ingest phase
	WarmupPairs                        int `json:"warmup_pairs"`       // unrecorded pairs run first
}

// BenchmarkE2EIngestVsRaw alternates a bare franz-go consumer and a fresh indexer over the same
// lane records, CKF_E2E_REPS times each after CKF_E2E_WARMUP unrecorded pairs, and reports the
// medians and their ratio. It
// supersedes BenchmarkLaneIngestVsRawConsume (same measurement, more records, alternation,
// medians instead of sums, silent logger, 0.2 ms polling instead of 1 ms).
func BenchmarkE2EIngestVsRaw(b *testing.B) {
	for _, c := range []struct{ images, records int }{{16, 300_000}, {64, 150_000}, {256, 40_000}} {
		b.Run(fmt.Sprintf("images=%d", c.images), func(b *testing.B) {
			e := newTestEnv(b, 1<<16)
			const lane = 3
			c.records = pfScaled(c.records)
			words := writeSyntheticDeltas(b, e, lane, c.records, c.images)
			hwm := pfEndOffsets(b, e.topics.Lanes, []int32{lane})
			reps := pfReps()
			res := pfIngestResult{Images: c.images, Records: c.records, Reps: reps,
				IndexerGCPercent: pfIndexerGCPercent(), WarmupPairs: pfWarmups()}
			for range res.WarmupPairs {
				pfRawConsume(b, e.topics.Lanes, []int32{lane}, hwm)
				pfIngestOnce(b, e, lane, words, hwm)
			}
			var pair []float64
			b.ResetTimer()
			for range b.N {
				for range reps {
					perRec := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 / float64(c.records) }
					s0, b0 := pfCPU()
					raw := pfRawConsume(b, e.topics.Lanes, []int32{lane}, hwm)
					s1, b1 := pfCPU()
					ing := pfIngestOnce(b, e, lane, words, hwm)
					s2, b2 := pfCPU()
					res.RawSelfCPUus = append(res.RawSelfCPUus, perRec(s1-s0))
					res.RawBrokerCPUus = append(res.RawBrokerCPUus, perRec(b1-b0))
					res.IngestSelfCPUus = append(res.IngestSelfCPUus, perRec(s2-s1))
					res.IngestBrokerCPUus = append(res.IngestBrokerCPUus, perRec(b2-b1))
					r, i := float64(c.records)/raw.Seconds(), float64(c.records)/ing.Seconds()
					res.RawRecordsPerSec = append(res.RawRecordsPerSec, r)
					res.IngestRecordsPerSec = append(res.IngestRecordsPerSec, i)
					pair = append(pair, i/r)
				}
			}
			b.StopTimer()
			res.MedianRaw, res.MedianIngest = pfMedian(res.RawRecordsPerSec), pfMedian(res.IngestRecordsPerSec)
			res.MedianImagesPerSec = res.MedianIngest * float64(c.images)
			res.RatioOfMedians, res.MedianPairRatio = res.MedianIngest/res.MedianRaw, pfMedian(pair)
			res.LoadAvg = pfLoadAvg()
			if c.images == 16 {
				pfCapacity16.Store(uint64(res.MedianIngest))
			}
			b.ReportMetric(res.MedianRaw, "raw-records/s")
			b.ReportMetric(res.MedianIngest, "ingest-records/s")
			b.ReportMetric(res.MedianImagesPerSec, "ingest-images/s")
			b.ReportMetric(res.RatioOfMedians, "ingest/raw")
			b.ReportMetric(res.MedianPairRatio, "pair-ratio-median")
			b.ReportMetric(pfMedian(res.RawSelfCPUus), "raw-cpu-µs/rec")
			b.ReportMetric(pfMedian(res.IngestSelfCPUus), "ingest-cpu-µs/rec")
			b.ReportMetric(pfMedian(res.RawBrokerCPUus), "raw-broker-cpu-µs/rec")
			b.ReportMetric(pfMedian(res.IngestBrokerCPUus), "ingest-broker-cpu-µs/rec")
			b.ReportMetric(res.LoadAvg[0], "load1")
			pfWrite(b, fmt.Sprintf("e2e-ingest-images=%d.json", c.images), res)
		})
	}
}

// ---- 2. delta produced -> visible to queries -----------------------------------------------

type pfLagResult struct {
	LoadFraction    float64      `json:"load_fraction"`
	CapacityRecPerS float64      `json:"capacity_records_per_sec"`
	OfferedRecPerS  float64      `json:"offered_records_per_sec"`
	AchievedRecPerS float64      `json:"achieved_records_per_sec"`
	Images          int          `json:"images_per_delta"`
	Samples         int          `json:"samples"`
	P50ms           float64      `json:"p50_ms"`
	P90ms           float64      `json:"p90_ms"`
	P99ms           float64      `json:"p99_ms"`
	P999ms          float64      `json:"p999_ms"`
	MaxMs           float64      `json:"max_ms"`
	SchedP50ms      float64      `json:"from_schedule_p50_ms"`
	SchedP99ms      float64      `json:"from_schedule_p99_ms"`
	AckP50ms        float64      `json:"produce_ack_p50_ms"`
	AckP99ms        float64      `json:"produce_ack_p99_ms"`
	AckVisP50ms     float64      `json:"ack_to_visible_p50_ms"`
	AckVisP99ms     float64      `json:"ack_to_visible_p99_ms"`
	CDF             [][2]float64 `json:"cdf_ms"`
	LoadAvg         [3]float64
	CapacitySource  string    `json:"capacity_source"`
	RunsP50ms       []float64 `json:"runs_p50_ms,omitempty"`
	RunsP99ms       []float64 `json:"runs_p99_ms,omitempty"`
}

// pfMarker is one delta's marker block: a one-block query of Local is answered with depth >= 1
// on the lane once the delta's image of Bucket (= the probe's bucket A) is applied.
type pfMarker struct {
	local  uint64
	bucket uint64
	value  uint64
}

// BenchmarkE2EDeltaVisibleLatency measures, per delta, the time from its produce call to the
// moment a query sees the delta's marker block, at 10, 25, 50 and 75 % of the capacity.
//
// Capacity is measured first in the same setting (producer, broker and indexer on this machine
// at once): a burst of pre-encoded 16-image deltas produced as fast as possible, timed until the
// last one is visible, then a paced run offered at that rate; its achieved rate (the sustained
// capacity) is the 100 % of the load levels. The producer is a bare asynchronous franz-go producer of pre-encoded lane
// records (LaneWriter's encoding and client options, linger 0), so the offered rate is exact and
// the producer's own cost stays small; LaneWriter itself is synchronous per call (acks=all) and
// tops out below the indexer's ingest rate on this machine.
func BenchmarkE2EDeltaVisibleLatency(b *testing.B) {
	const images = 16
	// The indexer runs with its configured GC target, as in E2EIngestVsRaw. The producer shares
	// the process and so the setting; its own allocation is small (pre-encoded records).
	defer debug.SetGCPercent(debug.SetGCPercent(pfIndexerGCPercent()))
	// Capacity: first a burst (every delta produced at once, large batches), then a paced run
	// offered at the burst rate; what that paced run achieves is the sustained capacity with a
	// steady producer (smaller batches cost the broker and the consumer more per record than a
	// burst does), and the load levels are fractions of it.
	burst := pfLagRun(b, 0, images, pfScaled(200_000))
	steady := pfLagRun(b, burst.AchievedRecPerS, images, int(burst.AchievedRecPerS*pfPhase().Seconds())+1)
	capacity := min(steady.AchievedRecPerS, burst.AchievedRecPerS)
	b.Logf("capacity: burst of %d deltas %.0f deltas/s; paced at that rate: %.0f deltas/s achieved; lane ingest alone (E2EIngestVsRaw, same run): %d records/s",
		burst.Samples, burst.AchievedRecPerS, steady.AchievedRecPerS, pfCapacity16.Load())
	burst.CapacitySource = "burst"
	steady.CapacitySource = "paced at the burst rate"
	pfWrite(b, "e2e-lag-capacity.json", burst)
	pfWrite(b, "e2e-lag-capacity-steady.json", steady)
	b.Run("capacity", func(b *testing.B) {
		b.ReportMetric(capacity, "deltas/s")
		b.ReportMetric(burst.AchievedRecPerS, "burst-deltas/s")
		b.ReportMetric(steady.AchievedRecPerS, "steady-deltas/s")
		b.ReportMetric(float64(pfCapacity16.Load()), "ingest-only-records/s")
		b.ReportMetric(steady.LoadAvg[0], "load1")
	})
	for _, frac := range []float64{0.10, 0.25, 0.50, 0.75} {
		b.Run(fmt.Sprintf("load=%d%%", int(frac*100)), func(b *testing.B) {
			// The 50 % point (the T9 figure) runs three times; the run with the median p99 is
			// reported, and every run's p50/p99 is kept in the JSON.
			reps := 1
			if frac == 0.50 {
				reps = 3
			}
			var runs []pfLagResult
			for range b.N {
				for range reps {
					rate := capacity * frac
					runs = append(runs, pfLagRun(b, rate, images, int(rate*pfPhase().Seconds())+1))
				}
			}
			slices.SortFunc(runs, func(x, y pfLagResult) int { return cmp.Compare(x.P99ms, y.P99ms) })
			res := runs[len(runs)/2]
			for _, r := range runs {
				res.RunsP50ms = append(res.RunsP50ms, r.P50ms)
				res.RunsP99ms = append(res.RunsP99ms, r.P99ms)
			}
			res.LoadFraction, res.CapacityRecPerS, res.CapacitySource = frac, capacity, "sustained (paced at the burst rate, this benchmark)"
			b.ReportMetric(res.OfferedRecPerS, "offered-deltas/s")
			b.ReportMetric(res.AchievedRecPerS, "achieved-deltas/s")
			b.ReportMetric(res.P50ms, "p50-ms")
			b.ReportMetric(res.P99ms, "p99-ms")
			b.ReportMetric(res.P999ms, "p99.9-ms")
			b.ReportMetric(res.AckP99ms, "ack-p99-ms")
			b.ReportMetric(res.AckVisP99ms, "ack-to-visible-p99-ms")
			b.ReportMetric(res.SchedP99ms, "sched-p99-ms")
			b.ReportMetric(res.LoadAvg[0], "load1")
			pfWrite(b, fmt.Sprintf("e2e-lag-load=%d.json", int(frac*100)), res)
		})
	}
}

// pfLagRun writes total deltas of images images each to a fresh lane at rate deltas/s (rate 0:
// all at once) and measures when each becomes visible to queries.
func pfLagRun(b *testing.B, rate float64, images, total int) pfLagResult {
	e := newTestEnv(b, 1<<20) // 2^18 buckets: fewer marker overwrites
	const lane = 6
	p := e.producer(lane, 1)
	p.snapshot()
	ri := pfStartIndexer(b, e, e.manifest(ckf.ConsumerInstanceID(time.Now().UnixNano()), lane))
	defer ri.stop()
	g := ri.ix.GlobalIndexer()
	testenv.WaitUntil(b, time.Minute, fmt.Sprintf("lane %d is ready", lane), func() bool { return g.ReadyLanes()&(1<<lane) != 0 })
	addr := g.Addressing()
	bc := g.BucketCount()
	rng := rand.New(rand.NewPCG(11, uint64(rate)))
	// Filler images: every slot's fingerprint has its top bit set; markers' fingerprints have
	// it clear, so a filler never makes a marker visible early.
	const ring = 4096
	fill := make([][]ckf.BucketImage, ring)
	for i := range fill {
		seen := map[uint64]bool{}
		for len(fill[i]) < images-1 {
			bk := rng.Uint64N(bc)
			if seen[bk] {
				continue
			}
			seen[bk] = true
			fill[i] = append(fill[i], ckf.BucketImage{Bucket: bk, Value: rng.Uint64() | 0x8000_8000_8000_8000})
		}
	}
	// Pre-encode every delta (as LaneWriter does) with its marker image last.
	markers := make([]pfMarker, total)
	recs := make([]*kgo.Record, total)
	wireID := streams.WireIdentity(p.id)
	key := []byte(p.id.Pool.String())
	seq := p.pub.LastSequence()
	var packed []byte
	for i := range markers {
		for {
			h := rng.Uint64()
			pr := addr.Probe(ckf.SequenceHashes([]uint64{h})[0])
			if pr.Fingerprint&0x8000 != 0 || slices.ContainsFunc(fill[i%ring], func(im ckf.BucketImage) bool { return im.Bucket == pr.BucketA }) {
				continue
			}
			markers[i] = pfMarker{local: h, bucket: pr.BucketA, value: uint64(pr.Fingerprint)}
			break
		}
		packed = packed[:0]
		for _, im := range fill[i%ring] {
			packed = schemas.AppendImage(packed, im.Bucket, im.Value)
		}
		packed = schemas.AppendImage(packed, markers[i].bucket, markers[i].value)
		v, err := e.codec.EncodeLaneRecord(schemas.LaneRecord{Identity: wireID, Kind: schemas.LaneDelta,
			Delta: schemas.Delta{BaseSequence: seq, Sequence: seq + 1, Images: append(schemas.PackedImages(nil), packed...)}})
		if err != nil {
			b.Fatal(err)
		}
		seq++
		recs[i] = &kgo.Record{Topic: e.topics.Lanes, Partition: lane, Key: key, Value: v}
	}
	cl := testenv.Client(b, append(streams.LaneWriterClientOpts(), kgo.ProducerLinger(0))...)
	handoff := make([]int64, total) // unix ns, written before produced.Store
	sched := make([]int64, total)
	acked := make([]int64, total)
	visible := make([]int64, total)
	var produced atomic.Int64
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	// Prober: looks for the newest produced delta whose marker a query sees. Deltas are
	// applied in sequence order, so that delta and every older one are visible now. (A marker
	// can be overwritten by a later delta's image of the same bucket, so the prober never waits
	// on one particular marker: the newest applied delta's marker is always intact.)
	proberDone := make(chan struct{})
	go func() {
		defer close(proberDone)
		next := 0
		q := make([]uint64, 1)
		for next < total {
			n := int(produced.Load())
			for j := n - 1; j >= next; j-- {
				q[0] = markers[j].local
				res, err := g.FindPrefixMatches(q)
				if err != nil {
					break
				}
				if m, ok := res.Match(lane); ok && m.Depth > 0 {
					now := time.Now().UnixNano()
					for i := next; i <= j; i++ {
						visible[i] = now
					}
					next = j + 1
					break
				}
			}
			if ctx.Err() != nil {
				return
			}
			// The prober's sampling period (the resolution of the measured visibility), not a
			// wait for an outcome: proberDone is what the benchmark waits for.
			time.Sleep(50 * time.Microsecond)
		}
	}()

	var produceErr atomic.Value
	produce := func(i int) {
		handoff[i] = time.Now().UnixNano()
		cl.Produce(ctx, recs[i], func(_ *kgo.Record, err error) {
			acked[i] = time.Now().UnixNano()
			if err != nil {
				produceErr.Store(err)
			}
		})
	}
	start := time.Now()
	if rate <= 0 {
		for i := range total {
			sched[i] = start.UnixNano()
			produce(i)
			if i%256 == 255 {
				produced.Store(int64(i + 1))
			}
		}
		produced.Store(int64(total))
	} else {
		// Every 500 µs, produce the deltas due by now.
		interval := float64(time.Second) / rate
		sent := 0
		tick := time.NewTicker(500 * time.Microsecond)
		for sent < total {
			<-tick.C
			due := min(total, int(float64(time.Since(start))/interval)+1)
			for ; sent < due; sent++ {
				sched[sent] = start.Add(time.Duration(float64(sent) * interval)).UnixNano()
				produce(sent)
			}
			produced.Store(int64(sent))
		}
		tick.Stop()
	}
	if err := cl.Flush(context.Background()); err != nil {
		b.Fatal(err)
	}
	if err, _ := produceErr.Load().(error); err != nil {
		b.Fatal(err)
	}
	select {
	case <-proberDone:
	case <-time.After(time.Minute):
		b.Fatalf("not every delta became visible within a minute (%d deltas)", total)
	}
	elapsed := time.Duration(visible[total-1] - start.UnixNano())
	// Skip the first 10 % (connection warm-up).
	from := total / 10
	var lat, fromSched, ack, ackVis []time.Duration
	for i := from; i < total; i++ {
		lat = append(lat, time.Duration(visible[i]-handoff[i]))
		ackVis = append(ackVis, time.Duration(visible[i]-acked[i]))
		fromSched = append(fromSched, time.Duration(visible[i]-sched[i]))
		ack = append(ack, time.Duration(acked[i]-handoff[i]))
	}
	ms := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e6 }
	return pfLagResult{
		OfferedRecPerS: rate, AchievedRecPerS: float64(total) / elapsed.Seconds(), Images: images, Samples: total,
		P50ms: ms(pfDurQuantile(lat, 0.5)), P90ms: ms(pfDurQuantile(lat, 0.9)), P99ms: ms(pfDurQuantile(lat, 0.99)),
		P999ms: ms(pfDurQuantile(lat, 0.999)), MaxMs: ms(pfDurQuantile(lat, 1)),
		SchedP50ms: ms(pfDurQuantile(fromSched, 0.5)), SchedP99ms: ms(pfDurQuantile(fromSched, 0.99)),
		AckP50ms: ms(pfDurQuantile(ack, 0.5)), AckP99ms: ms(pfDurQuantile(ack, 0.99)),
		AckVisP50ms: ms(pfDurQuantile(ackVis, 0.5)), AckVisP99ms: ms(pfDurQuantile(ackVis, 0.99)),
		CDF: pfCDF(lat, 400), LoadAvg: pfLoadAvg(),
	}
}

// ---- 3. queries over Kafka, HTTP and in process ---------------------------------------------

var pfQueryDomain = ckf.IndexerDomainID{
	CacheSemantics: ckf.CacheSemanticsID{Digest: ckf.Digest128{0xBE}, Source: ckf.IdentityExplicit},
	RoutingScope:   ckf.RoutingScopeID{Digest: ckf.Digest128{0xEB}, Source: ckf.IdentityExplicit},
}

type pfQueryIndex struct {
	g      *index.GlobalIndexer
	ans    *streams.Answerer
	chains [][]uint64 // 128-block chains: even ones cached by every lane to the end
	reqs   []schemas.QueryRequest
	bodies [][]byte // HTTP bodies of the same chains
}

var (
	pfQIOnce sync.Once
	pfQI     *pfQueryIndex
)

// pfQueryIndexOf builds (once) 16 ready lanes of 2^20 buckets: about 50 % random slot
// occupancy, plus 512 128-block chains; even chains are cached whole by every lane (shared
// prefixes), odd ones by a few lanes to depth 64+lane.
func pfQueryIndexOf(b *testing.B) *pfQueryIndex {
	pfQIOnce.Do(func() {
		const buckets = 1 << 20
		format := ckf.NewFormatIdentity(ckf.DefaultSeed, buckets)
		var ml index.ManifestLanes
		for l := range ckf.LaneCount {
			p := ckf.PoolID{Domain: pfQueryDomain, Dc: ckf.DcID(500 + l)}
			ml[l] = &p
		}
		m, _, err := index.NewManifest(91, pfQueryDomain, format, ml)
		if err != nil {
			b.Fatal(err)
		}
		g, err := index.NewGlobalIndexer(m, ckf.DefaultSearchConfig())
		if err != nil {
			b.Fatal(err)
		}
		addr := g.Addressing()
		rng := rand.New(rand.NewPCG(77, 78))
		lanes := make([][]uint64, ckf.LaneCount)
		for l := range lanes {
			w := make([]uint64, buckets)
			for i := range w {
				v := rng.Uint64()
				// keep about half of the slots: clear slots whose selector bit is 0
				sel := rng.Uint32()
				for s := 0; s < 4; s++ {
					if sel&(1<<s) == 0 {
						v &^= 0xFFFF << (16 * s)
					}
				}
				w[i] = v
			}
			lanes[l] = w
		}
		x := &pfQueryIndex{g: g}
		for c := 0; c < 512; c++ {
			chain := make([]uint64, 128)
			for i := range chain {
				chain[i] = rng.Uint64()
			}
			seqs := ckf.SequenceHashes(chain)
			for l := 0; l < ckf.LaneCount; l++ {
				depth := 128
				if c%2 == 1 && l%5 == 0 {
					depth = 64 + l
				}
				for i := 0; i < depth; i++ {
					pr := addr.Probe(seqs[i])
					placed := false
					for _, bk := range []uint64{pr.BucketA, pr.BucketB} {
						if s, ok := ckf.Bucket(lanes[l][bk]).FreeSlot(); ok && !placed {
							lanes[l][bk] = uint64(ckf.Bucket(lanes[l][bk]).WithSlot(s, pr.Fingerprint))
							placed = true
						}
					}
					if !placed {
						lanes[l][pr.BucketA] = uint64(ckf.Bucket(lanes[l][pr.BucketA]).WithSlot(rng.IntN(4), pr.Fingerprint))
					}
				}
			}
			x.chains = append(x.chains, chain)
			x.reqs = append(x.reqs, schemas.QueryRequest{Input: schemas.InputLocalBlockHashes, Hashes: schemas.AppendU64s(nil, chain)})
			body, _ := json.Marshal(indexer.PrefixMatchRequest{LocalBlockHashes: chain})
			x.bodies = append(x.bodies, body)
		}
		for l := range ckf.LaneCount {
			in, err := g.ClaimLane(uint8(l))
			if err != nil {
				b.Fatal(err)
			}
			id := ckf.ProducerIdentity{Pool: *ml[l], Incarnation: 1, LayoutGeneration: 1, Format: format}
			lease := ckf.LaneLease{Consumer: 91, Lane: uint8(l), Epoch: 1}
			if err := in.Assign(id, lease); err != nil {
				b.Fatal(err)
			}
			if out := in.InstallSnapshot(&ckf.Snapshot{Identity: id, Lease: lease, Sequence: 1, Buckets: lanes[l]}); out.Kind != index.OutcomeSnapshotInstalled {
				b.Fatal(out)
			}
		}
		x.ans = streams.NewAnswerer(g, nil)
		pfQI = x
	})
	if pfQI == nil {
		b.Fatal("query index not built")
	}
	return pfQI
}

type pfLoadPoint struct {
	Path       string       `json:"path"`
	Callers    int          `json:"callers"`
	Queries    int          `json:"queries"`
	Seconds    float64      `json:"seconds"`
	QPS        float64      `json:"queries_per_sec"`
	P50us      float64      `json:"p50_us"`
	P99us      float64      `json:"p99_us"`
	P999us     float64      `json:"p999_us"`
	CDF        [][2]float64 `json:"cdf_ms"`
	LoadAvg    [3]float64
	Errors     int64   `json:"errors"`
	BaselineUs float64 `json:"baseline_p50_us,omitempty"`
	Baseline   string  `json:"baseline,omitempty"`
}

// pfClosedLoop runs callers goroutines, each calling call(i) back to back for the phase
// (after a short warm-up), and returns the throughput and latency quantiles.
func pfClosedLoop(b *testing.B, path string, callers int, call func(worker, i int) error) pfLoadPoint {
	warm := time.Now().Add(300 * time.Millisecond)
	stopAt := warm.Add(pfPhase())
	lat := make([][]time.Duration, callers)
	var errs atomic.Int64
	var measStart, measEnd atomic.Int64
	var wg sync.WaitGroup
	for w := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				t0 := time.Now()
				if t0.After(stopAt) {
					return
				}
				if err := call(w, i); err != nil {
					errs.Add(1)
					if errs.Load() > 100 {
						return
					}
					continue
				}
				if t0.After(warm) {
					lat[w] = append(lat[w], time.Since(t0))
				}
			}
		}()
	}
	measStart.Store(warm.UnixNano())
	wg.Wait()
	measEnd.Store(time.Now().UnixNano())
	var all []time.Duration
	for _, l := range lat {
		all = append(all, l...)
	}
	secs := float64(min(measEnd.Load(), stopAt.UnixNano())-measStart.Load()) / 1e9
	us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
	if errs.Load() > 0 {
		b.Logf("%s callers=%d: %d errors", path, callers, errs.Load())
	}
	return pfLoadPoint{Path: path, Callers: callers, Queries: len(all), Seconds: secs, QPS: float64(len(all)) / secs,
		P50us: us(pfDurQuantile(all, 0.5)), P99us: us(pfDurQuantile(all, 0.99)), P999us: us(pfDurQuantile(all, 0.999)),
		CDF: pfCDF(all, 400), LoadAvg: pfLoadAvg(), Errors: errs.Load()}
}

func pfReportPoint(b *testing.B, pt pfLoadPoint) {
	b.ReportMetric(pt.QPS, "queries/s")
	b.ReportMetric(pt.P50us, "p50-µs")
	b.ReportMetric(pt.P99us, "p99-µs")
	b.ReportMetric(pt.P999us, "p99.9-µs")
	b.ReportMetric(pt.LoadAvg[0], "load1")
	if pt.BaselineUs > 0 {
		b.ReportMetric(pt.P50us/pt.BaselineUs, "p50/baseline")
	}
}

var pfCallers = []int{1, 4, 16, 64}

// pfInProcessP50 is the in-process Answer p50 (µs) of this run, the baseline of the HTTP path.
var pfInProcessP50 atomic.Uint64

// BenchmarkE2EQueryInProcess is the same-run baseline of the query paths: Answerer.Answer on
// the caller's goroutine (no transport).
func BenchmarkE2EQueryInProcess(b *testing.B) {
	x := pfQueryIndexOf(b)
	for _, callers := range []int{1, 2} {
		b.Run(fmt.Sprintf("callers=%d", callers), func(b *testing.B) {
			var pt pfLoadPoint
			for range b.N {
				scratch := make([]streams.QueryScratch, callers)
				reqs := slices.Clone(x.reqs)
				for i := range reqs {
					reqs[i].CorrelationID = "in-process-" + strconv.Itoa(i)
				}
				pt = pfClosedLoop(b, "in-process", callers, func(w, i int) error {
					r := x.ans.Answer(&reqs[(i*7+w)%len(reqs)], &scratch[w])
					if r.Status != schemas.QueryOK {
						return fmt.Errorf("status %v", r.Status)
					}
					return nil
				})
			}
			if callers == 1 {
				pfInProcessP50.Store(uint64(pt.P50us * 1000))
			}
			pfReportPoint(b, pt)
			pfWrite(b, fmt.Sprintf("e2e-query-inprocess-callers=%d.json", callers), pt)
		})
	}
}

// BenchmarkE2EQueryHTTP: POST /v1/prefix-matches of the indexer's API (app/indexer) on a
// loopback server, 128-block queries by local block hashes, keep-alive clients.
func BenchmarkE2EQueryHTTP(b *testing.B) {
	x := pfQueryIndexOf(b)
	api, err := indexer.NewAPI(indexer.APIParams{Answerer: x.ans, Lanes: func() []streams.LaneStatus { return nil }})
	if err != nil {
		b.Fatal(err)
	}
	mux := http.NewServeMux()
	for _, r := range api.Routes() {
		mux.Handle(r.Pattern, r.Handler)
	}
	srv := httptest.NewServer(mux)
	defer srv.Close()
	url := srv.URL + "/v1/prefix-matches"
	for _, callers := range pfCallers {
		b.Run(fmt.Sprintf("callers=%d", callers), func(b *testing.B) {
			cl := &http.Client{Transport: &http.Transport{MaxIdleConns: callers, MaxIdleConnsPerHost: callers}}
			defer cl.CloseIdleConnections()
			var pt pfLoadPoint
			for range b.N {
				pt = pfClosedLoop(b, "http", callers, func(w, i int) error {
					resp, err := cl.Post(url, "application/json", bytes.NewReader(x.bodies[(i*7+w)%len(x.bodies)]))
					if err != nil {
						return err
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != http.StatusOK {
						return fmt.Errorf("status %d", resp.StatusCode)
					}
					return nil
				})
			}
			if base := pfInProcessP50.Load(); base > 0 {
				pt.BaselineUs, pt.Baseline = float64(base)/1000, "in-process Answer p50, 1 caller"
			}
			pfReportPoint(b, pt)
			pfWrite(b, fmt.Sprintf("e2e-query-http-callers=%d.json", callers), pt)
		})
	}
}

// BenchmarkE2EQueryKafka: QueryClient -> ckf-queries -> QueryService (one replica, default
// batching) -> ckf-query-replies -> QueryClient, 128-block queries, one shared client.
func BenchmarkE2EQueryKafka(b *testing.B) {
	x := pfQueryIndexOf(b)
	codec, err := schemas.NewCodec(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	tp := qTopics{requests: testenv.NewTopic(b, 4), replies: testenv.NewTopic(b, 4), deadLetters: testenv.NewTopic(b, 1)}
	qcfg := streams.DefaultQueryConfig()
	qcfg.RequestTopic, qcfg.ReplyTopic, qcfg.DeadLetterTopic = tp.requests, tp.replies, tp.deadLetters
	qcfg.Group = testenv.UniqueName(b, "bench-q")
	svc, err := streams.NewQueryService(streams.QueryServiceParams{
		Config:   qcfg,
		Answerer: x.ans, Codec: codec, ClientOpts: []kgo.Opt{kgo.SeedBrokers(testenv.Brokers(b)...)},
	})
	if err != nil {
		b.Fatal(err)
	}
	if err := svc.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = svc.Close(context.Background()) }()
	c := qNewClient(b, codec, tp, qClientConfig(30*time.Second))
	for i := range 30 { // group join, metadata, connections
		if _, err := c.Query(context.Background(), x.reqs[i%len(x.reqs)]); err != nil {
			b.Fatal(err)
		}
	}
	echo50, echo99 := qEchoFloor(b, 500) // the floor under any request-reply over Kafka
	for _, callers := range pfCallers {
		b.Run(fmt.Sprintf("callers=%d", callers), func(b *testing.B) {
			var pt pfLoadPoint
			for range b.N {
				pt = pfClosedLoop(b, "kafka", callers, func(w, i int) error {
					r, err := c.Query(context.Background(), x.reqs[(i*7+w)%len(x.reqs)])
					if err != nil {
						return err
					}
					if r.Status != schemas.QueryOK || r.QueryBlocks != 128 {
						return fmt.Errorf("reply %v", r.Status)
					}
					return nil
				})
			}
			pt.BaselineUs, pt.Baseline = float64(echo50.Nanoseconds())/1e3, fmt.Sprintf("bare franz-go echo p50 (p99 %v)", echo99)
			pfReportPoint(b, pt)
			b.ReportMetric(float64(echo50.Nanoseconds())/1e3, "echo-p50-µs")
			pfWrite(b, fmt.Sprintf("e2e-query-kafka-callers=%d.json", callers), pt)
		})
	}
}

// ---- 4. restore of 16 lanes of 2^20 buckets ------------------------------------------------

type pfRestoreResult struct {
	Lanes          int       `json:"lanes"`
	Buckets        uint64    `json:"buckets_per_lane"`
	Records        int64     `json:"records"`
	MiB            float64   `json:"snapshot_mib"`
	RestoreMs      []float64 `json:"restore_ms"`
	RawMs          []float64 `json:"raw_consume_ms"`
	MedianRestore  float64   `json:"median_restore_ms"`
	MedianRaw      float64   `json:"median_raw_ms"`
	MsPerLane      float64   `json:"ms_per_lane"`
	RestoreOverRaw float64   `json:"restore_over_raw"`
	LoadAvg        [3]float64
}

// BenchmarkE2ERestore16Lanes2to20 writes one indexed snapshot of 2^20 random words (about half
// of the slots used) per lane on all 16 lanes (production chunk size), then, CKF_E2E_REPS
// times alternately, reads them with a bare consumer and restarts an indexer until all 16 lanes
// are ready.
func BenchmarkE2ERestore16Lanes2to20(b *testing.B) {
	e := newTestEnv(b, 2_000_000) // 2^20 buckets
	e.chunkWords = 0              // the production chunk size
	lanes := make([]uint8, ckf.LaneCount)
	parts := make([]int32, ckf.LaneCount)
	for l := range lanes {
		lanes[l], parts[l] = uint8(l), int32(l)
	}
	var buckets uint64
	rng := rand.New(rand.NewPCG(1, 2))
	for _, l := range lanes {
		p := e.producer(l, 1)
		buckets = p.state.BucketCount()
		words := make([]uint64, buckets)
		for i := range words {
			v := rng.Uint64()
			sel := rng.Uint32()
			for s := 0; s < 4; s++ {
				if sel&(1<<s) == 0 {
					v &^= 0xFFFF << (16 * s)
				}
			}
			words[i] = v
		}
		snap := ckf.Snapshot{Identity: p.id, Lease: ckf.LaneLease{Lane: l, Epoch: 1}, Sequence: 0, Buckets: words}
		if _, err := p.w.WriteSnapshot(context.Background(), &snap); err != nil {
			b.Fatal(err)
		}
		p.state = nil
	}
	records := pfEndOffsets(b, e.topics.Lanes, parts)
	res := pfRestoreResult{Lanes: len(lanes), Buckets: buckets, Records: records, MiB: float64(len(lanes)) * float64(buckets) * 8 / (1 << 20)}
	all := uint16(0xFFFF)
	b.ResetTimer()
	for range b.N {
		for i := range min(pfReps(), 3) {
			raw := pfRawConsume(b, e.topics.Lanes, parts, records)
			res.RawMs = append(res.RawMs, float64(raw.Microseconds())/1e3)
			start := time.Now()
			ri := pfStartIndexer(b, e, e.manifest(ckf.ConsumerInstanceID(5000+i), lanes...))
			testenv.WaitUntil(b, 5*time.Minute, "every lane is restored", func() bool { return ri.ix.GlobalIndexer().ReadyLanes() == all },
				func() string { return fmt.Sprintf("ready lanes %016b", ri.ix.GlobalIndexer().ReadyLanes()) })
			res.RestoreMs = append(res.RestoreMs, float64(time.Since(start).Microseconds())/1e3)
			ri.stop()
		}
	}
	b.StopTimer()
	res.MedianRestore, res.MedianRaw = pfMedian(res.RestoreMs), pfMedian(res.RawMs)
	res.MsPerLane, res.RestoreOverRaw = res.MedianRestore/float64(len(lanes)), res.MedianRestore/res.MedianRaw
	res.LoadAvg = pfLoadAvg()
	b.ReportMetric(res.MedianRestore, "ms/restore")
	b.ReportMetric(res.MsPerLane, "ms/lane")
	b.ReportMetric(res.MedianRaw, "raw-ms")
	b.ReportMetric(res.RestoreOverRaw, "restore/raw")
	b.ReportMetric(res.MiB/(res.MedianRestore/1e3), "MiB/s")
	b.ReportMetric(res.LoadAvg[0], "load1")
	pfWrite(b, "e2e-restore.json", res)
}

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
		v, err := codec.EncodeKvEvent(streams.KvEventOf(ev))
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
	n := pfScaled(100_000)
	var res pfRelayResult
	res.Events = n
	res.Window = window
	b.ResetTimer()
	for range b.N {
		for rep := range min(pfReps(), 3) {
			e := newTestEnv(b, 1<<20)
			kvTopic := testenv.NewTopic(b, 4)
			recs, ops := pfKvEvents(b, e.codec, kvTopic, n)
			res.BlockOps = ops
			const lane = 2
			cfg := streams.DefaultRelayConfig()
			cfg.Topics = streams.RelayTopics{KVEvents: kvTopic, Lanes: e.topics.Lanes, SnapshotIndex: e.topics.SnapshotIndex,
				Control: e.topics.Control, DeadLetter: e.topics.DeadLetter}
			cfg.Pool, cfg.Lane, cfg.CKF = testPool(100+lane), lane, ckf.NewCkfConfig(e.blocks)
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
			raw := pfRawConsume(b, kvTopic, []int32{0, 1, 2, 3}, int64(n))
			res.RawEventsPerSec = append(res.RawEventsPerSec, float64(n)/raw.Seconds())
		}
	}
	b.StopTimer()
	res.MedianEvents, res.MedianRaw = pfMedian(res.EventsPerSec), pfMedian(res.RawEventsPerSec)
	res.MedianBlockOps = res.MedianEvents * float64(res.BlockOps) / float64(n)
	res.RelayOverRaw = res.MedianEvents / res.MedianRaw
	if res.Deltas > 0 {
		res.ImagesPerDelta = float64(res.Images) / float64(res.Deltas)
	}
	res.LoadAvg = pfLoadAvg()
	b.ReportMetric(res.MedianEvents, "events/s")
	b.ReportMetric(res.MedianBlockOps, "block-ops/s")
	b.ReportMetric(res.MedianRaw, "raw-events/s")
	b.ReportMetric(res.RelayOverRaw, "relay/raw")
	b.ReportMetric(res.ImagesPerDelta, "images/delta")
	b.ReportMetric(res.SnapshotShare, "snapshot-share")
	b.ReportMetric(res.LoadAvg[0], "load1")
	pfWrite(b, fmt.Sprintf("e2e-relay-window=%d.json", window), res)
}
