package streamtest

// End-to-end benchmarks for `make bench-e2e` (real broker; each benchmark runs its own
// repetitions, so run them with -benchtime 1x). They report; nothing asserts a time.
//
//	KAFKA_BROKERS=127.0.0.1:9092 go test -run '^$' -bench E2E -benchtime 1x -p 1 ./streams/lanes/ ./streams/query/ ./streams/relay/
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
//   - E2ERelay: relay.Relay turning KV events into lane deltas (live), in KV events/s and
//     block operations/s; baseline: a bare consumer reading the same KV records.

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/ckf/index"
	"github.com/ckf-stream/ckf-stream/streams/lanes"
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

func PerfReps() int { return pfEnvInt("CKF_E2E_REPS", 5) }

// PerfWarmups is how many unrecorded raw + ingest pairs BenchmarkE2EIngestVsRaw runs before its
// timed repetitions: CKF_E2E_WARMUP, default 1, 0 allowed. A broker started just before the run
// (make bench-e2e starts one when none is running) spends its first seconds compiling hot paths
// and filling the page cache; without a warm-up the first pairs measure the JVM, not the
// consumers. Both sides of a pair see the same warm-up.
func PerfWarmups() int {
	if v, err := strconv.Atoi(os.Getenv("CKF_E2E_WARMUP")); err == nil && v >= 0 {
		return v
	}
	return 1
}

// PerfIndexerGCPercent is the GC target the ingest phase runs with: CKF_E2E_INDEXER_GOGC, default
// 400, the indexer's default indexer.gc_percent (app/config.DefaultIndexerGCPercent).
func PerfIndexerGCPercent() int { return pfEnvInt("CKF_E2E_INDEXER_GOGC", 400) }

// PerfScaled divides a record count by CKF_E2E_DIVIDE (default 1; a quick smoke run uses 10).
func PerfScaled(n int) int           { return max(1000, n/pfEnvInt("CKF_E2E_DIVIDE", 1)) }
func PerfPhase() time.Duration       { return time.Duration(pfEnvInt("CKF_E2E_SECONDS", 4)) * time.Second }
func PerfMedian(v []float64) float64 { return pfQuantile(v, 0.5) }

func PerfLoadAvg() [3]float64 {
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

// PerfCPU returns the CPU time (user+system) used so far by this process and by the test
// broker's process (0 when its pid file is not found), from /proc at 100 ticks/s.
func PerfCPU() (self, broker time.Duration) {
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

func PerfDurQuantile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

// PerfWrite writes v as JSON to $CKF_PERF_DIR/name (nothing when the variable is unset).
func PerfWrite(b *testing.B, name string, v any) {
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

// PerfCDF returns at most points quantile points of ds in milliseconds (for CDF plots).
func PerfCDF(ds []time.Duration, points int) [][2]float64 {
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

// PerfStartIndexer starts an indexer like StartIndexer, with a silent logger (the benchmarks
// must not pay for, or print, the test logger's lines); opts are added to its clients' options
// (a benchmark's hooks).
func PerfStartIndexer(b *testing.B, e *Env, m index.Manifest, opts ...kgo.Opt) *RunningIndexer {
	b.Helper()
	g, err := index.NewGlobalIndexer(m, ckf.DefaultSearchConfig())
	if err != nil {
		b.Fatal(err)
	}
	cfg := e.IndexerConfig()
	ix, err := lanes.NewIndexer(lanes.IndexerParams{
		Config: cfg, Indexer: g, Codec: e.Codec,
		ClientOpts: append([]kgo.Opt{kgo.SeedBrokers(testenv.Brokers(b)...)}, opts...),
		Log:        zap.NewNop(),
	})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ri := &RunningIndexer{Indexer: ix, cancel: cancel, done: make(chan error, 1)}
	go func() { ri.done <- ix.Run(ctx) }()
	b.Cleanup(ri.Stop)
	select {
	case <-ix.Started():
	case err := <-ri.done:
		b.Fatalf("indexer stopped at start-up: %v", err)
	case <-time.After(time.Minute):
		b.Fatal("indexer did not start")
	}
	return ri
}

// PerfRawConsume reads records records from the given partitions of topic with a bare franz-go
// consumer (read-committed, the lane consumer's fetch sizes) and returns the time taken,
// client creation included.
func PerfRawConsume(b *testing.B, topic string, partitions []int32, records int64) time.Duration {
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

// PerfEndOffsets returns the sum of the end offsets of topic's partitions ps.
func PerfEndOffsets(b testing.TB, topic string, ps []int32) int64 {
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
