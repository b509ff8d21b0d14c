package metrics_test

import (
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/app/config"
	"github.com/ckf-stream/ckf-stream/app/metrics"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

func scrape(t *testing.T, m *metrics.Metrics) string {
	t.Helper()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Result().Body)
	return string(body)
}

// TestTallyIntoRegistry: counters reach the registry on the report interval (and at Close),
// timers are histograms with TimerBuckets, and the runtime collectors are registered.
func TestTallyIntoRegistry(t *testing.T) {
	m, err := metrics.New(metrics.Params{Config: config.Metrics{ReportInterval: time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	scope := m.Scope.SubScope("test").Tagged(map[string]string{"lane": "3"})
	scope.Counter("events_total").Inc(5)
	scope.Timer("apply_latency").Record(300 * time.Microsecond)
	body := scrape(t, m)
	for _, want := range []string{
		`ckf_test_apply_latency_bucket{lane="3",le="0.0005"} 1`,
		`ckf_test_apply_latency_bucket{lane="3",le="0.00025"} 0`,
		"go_goroutines ",
		"process_cpu_seconds_total ",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if strings.Contains(body, `ckf_test_events_total{lane="3"} 5`) {
		t.Errorf("a counter update reached the registry before the report interval")
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if body := scrape(t, m); !strings.Contains(body, `ckf_test_events_total{lane="3"} 5`) {
		t.Errorf("the last report at Close lost the counter:\n%s", body)
	}
}

// TestConflictingTagKeysAreLoggedNotPanicked: the reporter's default panics on a metric name
// reused with other tag keys; New's reporter logs and drops the metric.
func TestConflictingTagKeysAreLoggedNotPanicked(t *testing.T) {
	core, logs := observer.New(zap.ErrorLevel)
	m, err := metrics.New(metrics.Params{Config: config.Metrics{ReportInterval: time.Hour}, Logger: zap.New(core)})
	if err != nil {
		t.Fatal(err)
	}
	m.Scope.Tagged(map[string]string{"lane": "1"}).Timer("x").Record(time.Millisecond)
	m.Scope.Tagged(map[string]string{"kind": "a"}).Timer("x").Record(time.Millisecond)
	_ = m.Close()
	if logs.FilterMessage("metric registration failed; the metric is dropped").Len() == 0 {
		t.Errorf("no registration error logged; logs: %v", logs.All())
	}
}

// TestKafkaHooksPerClient: each client gets its own kprom collectors, labelled by role; a role
// in use gets a suffix, and is free again once its client closes.
func TestKafkaHooksPerClient(t *testing.T) {
	m, err := metrics.New(metrics.Params{Config: config.Metrics{ReportInterval: time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	fake, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "t"))
	if err != nil {
		t.Fatal(err)
	}
	defer fake.Close()
	newClient := func(role string) *kgo.Client {
		cl, err := kgo.NewClient(kgo.SeedBrokers(fake.ListenAddrs()...), kgo.DefaultProduceTopic("t"), m.Kafka().Opt(role))
		if err != nil {
			t.Fatal(err)
		}
		if err := cl.ProduceSync(t.Context(), &kgo.Record{Value: []byte("v")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
		return cl
	}
	a, b := newClient("relay"), newClient("relay")
	body := scrape(t, m)
	for _, want := range []string{`client="relay"`, `client="relay-2"`, "ckf_kafka_produce_records_total{", "ckf_kafka_request_duration_e2e_seconds_bucket{"} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	// kprom's two gauges named *_total are exported without the counter suffix.
	for _, want := range []string{`ckf_kafka_buffered_fetch_records{client="relay"} `, `ckf_kafka_buffered_produce_records{client="relay-2"} `,
		"# TYPE ckf_kafka_buffered_fetch_records gauge"} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	for _, line := range strings.Split(body, "\n") {
		if strings.HasPrefix(line, "ckf_kafka_buffered_") && strings.Contains(line, "_total") {
			t.Errorf("a buffered gauge keeps its _total name: %s", line)
		}
	}
	a.Close()
	if body := scrape(t, m); strings.Contains(body, `ckf_kafka_buffered_fetch_records{client="relay"}`) {
		t.Errorf("a closed client's renamed gauge is still exported")
	}
	c := newClient("relay") // takes the freed name, not relay-3; registering its gauges again must not conflict
	defer c.Close()
	defer b.Close()
	if body := scrape(t, m); strings.Contains(body, `client="relay-3"`) || !strings.Contains(body, `ckf_kafka_buffered_fetch_records{client="relay"}`) {
		t.Errorf("freed role not reused")
	}
}

// TestHelpTextFromTheDocs: a ckf_ metric's HELP line is its meaning and unit from docs/metrics.md,
// not the reporter's "<name> <type>" (which 64 of the 81 ckf_ metrics once had).
func TestHelpTextFromTheDocs(t *testing.T) {
	m, err := metrics.New(metrics.Params{Config: config.Metrics{ReportInterval: time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	m.Scope.SubScope("indexer").Gauge("eligible_lanes").Update(2)
	m.Scope.SubScope("query").Tagged(map[string]string{"path": "http"}).Timer("latency_seconds").Record(time.Millisecond)
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	body := scrape(t, m)
	for _, want := range []string{
		"# HELP ckf_indexer_eligible_lanes Lanes a query may use now (ready and fresh) (lanes)\n",
		"# HELP ckf_query_latency_seconds ",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if strings.Contains(body, "# HELP ckf_query_latency_seconds ckf_query_latency_seconds") {
		t.Errorf("ckf_query_latency_seconds has the reporter's help")
	}
}
