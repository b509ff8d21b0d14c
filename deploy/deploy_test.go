//go:build linux

// Package deploy_test checks the operator-facing files under deploy/ against the real processes:
// a relay, an indexer replica and a load generator run as separate processor processes on the
// real broker (KAFKA_BROKERS). It checks that the consumer groups standard lag tools read agree
// with the exported lag gauges, and that the dashboard and the alerts name only metrics the
// processes export.
package deploy_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/app/config"
	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/streams/lanes"
	"github.com/ckf-stream/ckf-stream/testenv"
	"gopkg.in/yaml.v3"
)

// processorBin is the processor binary TestMain builds once.
var processorBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "ckf-deploy-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "deploy:", err)
		os.Exit(1)
	}
	processorBin, err = testenv.BuildProcessor(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "deploy:", err)
		_ = os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// proc is one processor process (testenv.Process), logging to a file in the test's temporary
// folder and killed when the test ends.
type proc struct{ *testenv.Process }

// startProc starts the processor with args and env.
func startProc(t *testing.T, name string, env []string, args ...string) *proc {
	t.Helper()
	p := &proc{testenv.NewProcess(t, processorBin, t.TempDir(), name, env, args...)}
	p.Start()
	return p
}

// deployment is one relay (DC 0xdc01 on lane 0) and one indexer replica on the real broker, under
// a topic prefix of their own.
type deployment struct {
	prefix   string
	domain   string
	topics   config.Topics
	instance ckf.ConsumerInstanceID
	common   []string
	relay    *proc
	indexer  *proc
}

const (
	dc   = 0xdc01
	lane = 0
	// lagCommitInterval is the indexer's indexer.lag_commit_interval here; reportInterval its
	// metrics.report_interval.
	lagCommitInterval = 200 * time.Millisecond
	reportInterval    = 100 * time.Millisecond
)

func startDeployment(t *testing.T) *deployment {
	t.Helper()
	seeds := testenv.Brokers(t)
	var d [32]byte
	if _, err := rand.Read(d[:]); err != nil {
		t.Fatal(err)
	}
	dep := &deployment{prefix: testenv.UniqueName(t, "ckfdeploy") + "-", instance: 0x4242}
	dep.topics = config.DefaultTopics(dep.prefix)
	dep.domain = hex.EncodeToString(d[:16]) + ":" + hex.EncodeToString(d[16:])
	dep.common = []string{
		"KAFKA_BROKERS=" + strings.Join(seeds, ","),
		"CKF_TOPIC_PREFIX=" + dep.prefix,
		"CKF_INDEXER_DOMAIN=" + dep.domain,
		fmt.Sprintf("CKF_INDEXER_LANES=%d=%#x", lane, dc),
		"CKF_INDEXER_EXPECTED_BLOCKS_PER_DC=65536",
		"CKF_RELAY_EXPECTED_BLOCKS=65536",
		"CKF_METRICS_REPORT_INTERVAL=" + reportInterval.String(),
		"CKF_SHUTDOWN_TIMEOUT=10s",
	}
	dep.relay = startProc(t, "relay", append(dep.common, fmt.Sprintf("CKF_RELAY_DC_ID=%#x", dc), "CKF_RELAY_LANE="+strconv.Itoa(lane)), "relay")
	dep.relay.WaitReady(2 * time.Minute)
	dep.indexer = startProc(t, "indexer", append(dep.common,
		fmt.Sprintf("CKF_INDEXER_CONSUMER_INSTANCE_ID=%d", uint64(dep.instance)),
		"CKF_INDEXER_QUERY_GROUP="+dep.prefix+"queries",
		"CKF_INDEXER_LAG_COMMIT_INTERVAL="+lagCommitInterval.String()), "indexer")
	dep.indexer.WaitReady(2 * time.Minute)
	return dep
}

// load runs the load generator (KV events and Kafka queries) for d and returns its process.
func (dep *deployment) load(t *testing.T, d time.Duration) *proc {
	return startProc(t, "loadgen", dep.common, "loadgen", "-duration", d.String(), "-event-rate", "3000",
		"-query-rate", "100", "-progress", "10s")
}

// lagSample is one comparison of the indexer's lag group with its exported gauges.
type lagSample struct {
	at         time.Duration // since the load started
	end, lso   int64         // the lane partition's end offset (high watermark) and last stable offset
	committed  int64         // the lag group's committed offset
	groupLag   int64         // kadm's Lag: end - committed
	gauge      float64       // ckf_indexer_lane_lag_records{lane="0"}
	gaugeTime  float64       // ckf_indexer_lane_lag_seconds{lane="0"}
	tolerance  int64
	groupFound bool
	start      time.Time // when the sample started
	// The relay's group on the KV-events topic (all partitions summed) and its gauge.
	kvEnd, relayLag int64
	relayGauge      float64
	relayTolerance  int64
	relayGroupFound bool
}

// TestLagGroupsMatchExportedLag: while the load generator writes, kadm's group lag (what
// kafka-consumer-groups.sh, kminion and Burrow show) of the indexer's lag group equals the
// exported ckf_indexer_lane_lag_records, and that of the relay's lag group on the KV topic equals
// ckf_relay_input_lag_records, within the tolerance below; once the load stops, all four are 0 and
// the indexer's committed offset is the lane partition's last stable offset and high watermark.
//
// Tolerance: kadm's lag counts to the high watermark, the gauges to the last stable offset (the
// difference is the open transaction's records), the groups' offsets are up to one commit
// interval old (the indexer's 200 ms here, the relay's 1 s), and the gauges up to one report
// interval (100 ms) plus one freshness check (at most 250 ms) or, for the relay, one commit
// interval. On this shared 2-core machine a process may also wait for CPU, so each comparison
// allows the records the partition (or the KV topic) grew by in the toleranceWindow (5 s) before
// it, from end offsets the test samples itself; comparisons start once the samples cover a window.
func TestLagGroupsMatchExportedLag(t *testing.T) {
	dep := startDeployment(t)
	adm := testenv.Admin(t)
	group := lanes.IndexerLagGroup(dep.prefix, dep.instance)
	// The relay's group: relay.RelayConfig.LagGroup's derivation, "ckf-relay-" + KV topic +
	// "-" + pool (domain/dc in 16 hex digits).
	relayGroup := fmt.Sprintf("ckf-relay-%s-%s/%016x", dep.topics.KVEvents, dep.domain, dc)
	const toleranceWindow = 5 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	type endAt struct {
		at       time.Time
		end, kvs int64 // lane partition end; KV topic's ends summed
	}
	var history []endAt
	endBefore := func(t0 time.Time) endAt { // the latest sample at or before t0 (else the first)
		e := history[0]
		for _, h := range history {
			if h.at.After(t0) {
				break
			}
			e = h
		}
		return e
	}
	listEnds := func() (endAt, error) {
		at := time.Now()
		ends, err := adm.ListEndOffsets(ctx, dep.topics.Lanes, dep.topics.KVEvents)
		if err != nil {
			return endAt{}, err
		}
		e, _ := ends.Lookup(dep.topics.Lanes, lane)
		var kvs int64
		for _, o := range ends[dep.topics.KVEvents] {
			kvs += o.Offset
		}
		return endAt{at, e.Offset, kvs}, nil
	}
	sample := func(start time.Time) (lagSample, error) {
		var s lagSample
		first, err := listEnds()
		if err != nil {
			return s, err
		}
		t0 := first.at
		history = append(history, first)
		lags, err := adm.Lag(ctx, group, relayGroup)
		if err != nil {
			return s, err
		}
		lsos, err := adm.ListCommittedOffsets(ctx, dep.topics.Lanes)
		if err != nil {
			return s, err
		}
		m, err := dep.indexer.Metrics()
		if err != nil {
			return s, err
		}
		rm, err := dep.relay.Metrics()
		if err != nil {
			return s, err
		}
		last, err := listEnds()
		if err != nil {
			return s, err
		}
		history = append(history, last)
		l, _ := lsos.Lookup(dep.topics.Lanes, lane)
		s = lagSample{at: t0.Sub(start), start: t0, end: last.end, lso: l.Offset,
			gauge:          m[fmt.Sprintf(`ckf_indexer_lane_lag_records{lane="%d"}`, lane)],
			gaugeTime:      m[fmt.Sprintf(`ckf_indexer_lane_lag_seconds{lane="%d"}`, lane)],
			tolerance:      last.end - endBefore(t0.Add(-toleranceWindow)).end,
			kvEnd:          last.kvs,
			relayGauge:     rm["ckf_relay_input_lag_records"],
			relayTolerance: last.kvs - endBefore(t0.Add(-toleranceWindow)).kvs}
		if gl, ok := lags[relayGroup]; ok && gl.Error() == nil && len(gl.Lag) > 0 {
			s.relayGroupFound, s.relayLag = true, gl.Lag.Total()
		}
		if gl, ok := lags[group]; ok && gl.Error() == nil {
			if ml, ok := gl.Lag.Lookup(dep.topics.Lanes, lane); ok && ml.Err == nil && ml.Commit.At >= 0 {
				s.groupFound, s.committed, s.groupLag = true, ml.Commit.At, ml.Lag
			}
		}
		return s, nil
	}

	start := time.Now()
	if _, err := sample(start); err != nil { // the ends before the load: the history's start
		t.Fatal(err)
	}
	gen := dep.load(t, 12*time.Second)
	var samples []lagSample
	busy := 0
	tick := time.NewTicker(150 * time.Millisecond)
	defer tick.Stop()
	for !gen.Exited() {
		<-tick.C
		s, err := sample(start)
		if err != nil {
			t.Fatal(err)
		}
		if !s.groupFound || history[0].at.After(s.start.Add(-toleranceWindow)) {
			continue // no commit yet, or the sampled history does not cover the tolerance window
		}
		samples = append(samples, s)
		if s.groupLag > 0 || s.gauge > 0 {
			busy++
		}
		if d := s.groupLag - int64(s.gauge); d > s.tolerance || -d > s.tolerance {
			t.Errorf("at %v: group lag %d (end %d - committed %d), gauge %v: differ by %d, tolerance %d records",
				s.at.Round(time.Millisecond), s.groupLag, s.end, s.committed, s.gauge, d, s.tolerance)
		}
		if d := s.relayLag - int64(s.relayGauge); s.relayGroupFound && (d > s.relayTolerance || -d > s.relayTolerance) {
			t.Errorf("at %v: relay group lag %d, ckf_relay_input_lag_records %v: differ by %d, tolerance %d records",
				s.at.Round(time.Millisecond), s.relayLag, s.relayGauge, d, s.relayTolerance)
		}
	}
	if gen.ExitError() != nil {
		t.Fatalf("loadgen: %v\n%s", gen.ExitError(), testenv.Tail(gen.LogPath(1), 20))
	}
	if len(samples) < 5 {
		t.Fatalf("%d comparisons under load, want at least 5", len(samples))
	}
	logSamples(t, "under load", samples)
	if busy == 0 {
		t.Log("note: the indexer kept up with the load at every comparison (lag 0 on both sides)")
	}

	// Idle: the load generator has exited; the relay still writes a heartbeat transaction every
	// second, so wait for an instant where the indexer has applied everything (the event), then
	// check both sides at that instant.
	var idle lagSample
	testenv.WaitUntil(t, time.Minute, "the indexer's group lag and gauges reach 0 at idle", func() bool {
		s, err := sample(start)
		if err != nil {
			t.Fatal(err)
		}
		idle = s
		return s.groupFound && s.groupLag == 0 && s.gauge == 0 && s.lso == s.end && s.committed == s.lso &&
			s.relayGroupFound && s.relayLag == 0 && s.relayGauge == 0
	}, func() string { return fmt.Sprintf("last sample %+v", idle) })
	logSamples(t, "idle", []lagSample{idle})
}

// logSamples logs a table: kadm's group lag next to the exported gauges.
func logSamples(t *testing.T, what string, ss []lagSample) {
	var b strings.Builder
	fmt.Fprintf(&b, "%s (indexer group on lane %d | relay group on the KV topic):\n%8s %6s %6s %9s %9s %9s %9s %9s | %7s %9s %11s %9s\n",
		what, lane, "t", "end", "lso", "committed", "group_lag", "gauge_lag", "lag_sec", "tolerance", "kv_end", "group_lag", "input_lag", "tolerance")
	step := max(len(ss)/12, 1)
	for i := 0; i < len(ss); i += step {
		s := ss[i]
		fmt.Fprintf(&b, "%8s %6d %6d %9d %9d %9.0f %9.3f %9d | %7d %9d %11.0f %9d\n", s.at.Round(100*time.Millisecond), s.end, s.lso,
			s.committed, s.groupLag, s.gauge, s.gaugeTime, s.tolerance, s.kvEnd, s.relayLag, s.relayGauge, s.relayTolerance)
	}
	t.Log(b.String())
}

// TestDeployFilesNameExportedMetrics: every metric the dashboard and the alerts name is exported
// by a running relay or indexer (a bridge's, documented in docs/metrics.md and served in
// app/bridge's module test) (scraped after a short load, so that every series with labels has
// its first value), and every ckf_ metric they export is listed in docs/metrics.md.
func TestDeployFilesNameExportedMetrics(t *testing.T) {
	dep := startDeployment(t)
	gen := dep.load(t, 3*time.Second)
	<-gen.Done() // the load ran its course: the event that the series below have values
	if gen.ExitError() != nil {
		t.Fatalf("loadgen: %v\n%s", gen.ExitError(), testenv.Tail(gen.LogPath(1), 20))
	}
	exported := map[string]bool{}
	for _, p := range []*proc{dep.relay, dep.indexer} {
		var m map[string]float64
		// After the load, counters reach /metrics within one report interval: wait for the
		// relay's and the indexer's work to show rather than for time to pass.
		testenv.WaitUntil(t, time.Minute, p.Name+" metrics show the load", func() bool {
			var err error
			if m, err = p.Metrics(); err != nil {
				return false
			}
			return m["ckf_relay_events_total"] > 0 || testenv.SumSeries(m, "ckf_indexer_lane_images_total") > 0
		})
		for series := range m {
			name, _, _ := strings.Cut(series, "{")
			exported[name] = true
		}
		// Every ckf_ metric has help text: its meaning from docs/metrics.md, not the reporter's
		// "<name> <type>".
		resp, err := http.Get("http://" + p.HTTP + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		raw, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(raw), "\n") {
			name, help, ok := strings.Cut(strings.TrimPrefix(line, "# HELP "), " ")
			if !ok || !strings.HasPrefix(line, "# HELP ckf_") {
				continue
			}
			if help == "" || strings.HasPrefix(help, name) {
				t.Errorf("%s: %s has no help text: %q", p.Name, name, line)
			}
		}
	}

	uses := map[string][]string{} // metric name -> where it is used
	var dash struct {
		Panels []dashPanel `json:"panels"`
	}
	b, err := os.ReadFile("grafana/ckf-stream.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("grafana/ckf-stream.json: %v", err)
	}
	exprs := 0
	var walk func(ps []dashPanel)
	walk = func(ps []dashPanel) {
		for _, p := range ps {
			for _, tg := range p.Targets {
				exprs++
				for _, n := range metricNames(tg.Expr) {
					uses[n] = append(uses[n], "dashboard panel "+strconv.Quote(p.Title))
				}
			}
			walk(p.Panels)
		}
	}
	walk(dash.Panels)
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert string `yaml:"alert"`
				Expr  string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	b, err = os.ReadFile("prometheus/alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &rules); err != nil {
		t.Fatalf("prometheus/alerts.yml: %v", err)
	}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			exprs++
			for _, n := range metricNames(r.Expr) {
				uses[n] = append(uses[n], "alert "+r.Alert)
			}
		}
	}
	if exprs < 10 || len(uses) < 10 {
		t.Fatalf("read %d expressions naming %d metrics; the files were not parsed as expected", exprs, len(uses))
	}
	var names []string
	for n := range uses {
		names = append(names, n)
	}
	sort.Strings(names)
	doc, err := os.ReadFile("../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	// documented: n is in docs/metrics.md's tables, or is a series of a histogram that is.
	documented := func(n string) bool {
		if strings.Contains(string(doc), "`"+n+"`") {
			return true
		}
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if base, ok := strings.CutSuffix(n, suffix); ok && strings.Contains(string(doc), "| `"+base+"` | histogram |") {
				return true
			}
		}
		return false
	}
	for _, n := range names {
		switch {
		case n == "up": // Prometheus's own series of every scrape target
		case strings.HasPrefix(n, "ckf_bridge_"):
			// No bridge runs here: app/bridge's module test checks that a bridge serves the
			// series the alerts name; here they must at least be documented.
			if !documented(n) {
				t.Errorf("%s (used by %s) is not in docs/metrics.md", n, strings.Join(uses[n], ", "))
			}
		case strings.HasPrefix(n, "ckf_workers_"):
			// No worker stage runs here: cmd/processor's TestWorkerStageBesideRelay checks that
			// processor workers serves its ckf_workers_ series and that docs/metrics.md lists them.
			if !documented(n) {
				t.Errorf("%s (used by %s) is not in docs/metrics.md", n, strings.Join(uses[n], ", "))
			}
		case !exported[n]:
			t.Errorf("%s (used by %s) is exported by neither the relay nor the indexer", n, strings.Join(uses[n], ", "))
		}
	}
	t.Logf("%d expressions name %d metrics", exprs, len(names))

	for n := range exported {
		base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(n, "_bucket"), "_sum"), "_count")
		if strings.HasPrefix(n, "ckf_") && !strings.Contains(string(doc), "`"+n+"`") && !strings.Contains(string(doc), "`"+base+"`") {
			t.Errorf("%s is exported but not listed in docs/metrics.md", n)
		}
	}
}

type dashPanel struct {
	Title   string `json:"title"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
	Panels []dashPanel `json:"panels"` // rows hold panels
}
