// Package metrics owns the process's metrics: one tally root scope reporting into one Prometheus
// registry, which franz-go's kprom plugin shares for every Kafka client, served at GET /metrics.
//
// Code records through tally (Scope, SubScope, Tagged). Follow the Prometheus reporter's rules:
// one set of tag keys per metric name (a second set is a registration error), bounded tag values
// (a lane number, never a request id), and cached handles on hot paths (keep the tally.Counter,
// do not look it up per event).
package metrics

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/ckf-stream/ckf-stream/app/config"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kprom"
	tally "github.com/uber-go/tally/v4"
	tallyprom "github.com/uber-go/tally/v4/prometheus"
	"go.uber.org/fx"
	"go.uber.org/zap"
)

// Prefix starts every metric name that tally reports (ckf_relay_events_total).
const Prefix = "ckf"

// KafkaNamespace starts every franz-go client metric (ckf_kafka_produce_records_total).
const KafkaNamespace = "ckf_kafka"

// TimerBuckets are the Prometheus histogram buckets, in seconds, of every tally timer and of
// tally histograms created without buckets of their own: 5µs to 10s, so that the HTTP query
// path (well under a millisecond) and a snapshot install (seconds) both land inside the range.
// Timers are histograms, not the reporter's default summaries: histograms aggregate across
// replicas and summaries do not.
func TimerBuckets() []float64 {
	return []float64{
		0.000005, 0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005,
		0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
		1, 2.5, 5, 10,
	}
}

// kafkaBuckets are the buckets of the franz-go request-latency histograms, in seconds.
var kafkaBuckets = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}

// Params are New's inputs.
type Params struct {
	fx.In

	Config config.Metrics
	Logger *zap.Logger `optional:"true"`
}

// Metrics is the registry, the tally root scope that reports into it, and the factory of Kafka
// client hooks that share it. Close it once, after everything that records has stopped.
type Metrics struct {
	// Scope is the root scope; components take a SubScope of their own.
	Scope tally.Scope
	// Registry holds every metric the process exports: tally's, franz-go's, and the Go runtime
	// and process collectors.
	Registry *prometheus.Registry

	kafka  *KafkaHooks
	closer io.Closer
	log    *zap.Logger
}

// New builds the registry, registers the Go runtime and process collectors, and starts the
// tally root scope, which reports counters and gauges every p.Config.ReportInterval.
//
// A metric registered twice with different tag keys is a programming error; the reporter's
// default is to panic, which would take a serving indexer down over a metric. New's reporter
// logs the error instead (and drops that metric); tests catch it in the log.
func New(p Params) (*Metrics, error) {
	if p.Config.ReportInterval <= 0 {
		return nil, fmt.Errorf("metrics: metrics.report_interval: %v is not positive", p.Config.ReportInterval)
	}
	log := p.Logger
	if log == nil {
		log = zap.NewNop()
	}
	log = log.Named("metrics")
	reg := prometheus.NewRegistry()
	if err := errors.Join(
		reg.Register(collectors.NewGoCollector()),
		reg.Register(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})),
	); err != nil {
		return nil, fmt.Errorf("metrics: runtime collectors: %w", err)
	}
	reporter := tallyprom.NewReporter(tallyprom.Options{
		Registerer:              reg,
		Gatherer:                reg,
		DefaultTimerType:        tallyprom.HistogramTimerType,
		DefaultHistogramBuckets: TimerBuckets(),
		OnRegisterError: func(err error) {
			log.Error("metric registration failed; the metric is dropped", zap.Error(err))
		},
	})
	scope, closer := tally.NewRootScope(tally.ScopeOptions{
		Prefix:                 Prefix,
		CachedReporter:         reporter,
		Separator:              tallyprom.DefaultSeparator,
		SanitizeOptions:        &tallyprom.DefaultSanitizerOpts,
		DefaultBuckets:         tally.ValueBuckets(TimerBuckets()),
		OmitCardinalityMetrics: true,
	}, p.Config.ReportInterval)
	return &Metrics{
		Scope:    scope,
		Registry: reg,
		kafka:    &KafkaHooks{reg: reg, kpromReg: &renamingRegisterer{Registerer: reg, renames: kpromRenames, wrapped: map[prometheus.Collector]prometheus.Collector{}}, inUse: map[string]bool{}},
		closer:   closer,
		log:      log,
	}, nil
}

//go:generate go run genhelp.go

// Handler serves the registry in the Prometheus exposition formats, each ckf_ metric with the
// help text of docs/metrics.md (help_gen.go) where its reporter gave none of its own (tally's
// reporter writes only "<name> <type>").
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(prometheus.GathererFunc(m.gather), promhttp.HandlerOpts{
		ErrorLog:      zap.NewStdLog(m.log),
		ErrorHandling: promhttp.ContinueOnError,
	})
}

// gather is the registry's Gather with the documented help texts filled in.
func (m *Metrics) gather() ([]*dto.MetricFamily, error) {
	mfs, err := m.Registry.Gather()
	for _, mf := range mfs {
		name := mf.GetName()
		text, ok := helpText[name]
		if !ok {
			continue
		}
		if h := mf.GetHelp(); h == "" || strings.HasPrefix(h, name+" ") || h == name {
			mf.Help = &text
		}
	}
	return mfs, err
}

// Kafka returns the factory of franz-go client hooks that record into Registry.
func (m *Metrics) Kafka() *KafkaHooks { return m.kafka }

// Close stops the root scope after a last report, so the final counts reach the registry.
func (m *Metrics) Close() error {
	if err := m.closer.Close(); err != nil {
		return fmt.Errorf("metrics: close root scope: %w", err)
	}
	return nil
}

// KafkaHooks makes the kprom hooks of franz-go clients. kprom keeps one client's collectors in
// one *kprom.Metrics, so every client needs its own; they share the registry and differ by the
// "client" label.
type KafkaHooks struct {
	reg      *prometheus.Registry
	kpromReg *renamingRegisterer // reg, with kprom's misnamed gauges renamed
	mu       sync.Mutex
	inUse    map[string]bool
}

// Opt returns the kgo.WithHooks option that records one client's metrics, labelled
// client=<name>. Name the client by its role ("lanes", "queries", "admin"): a bounded label.
// A name already in use by an open client gets a numeric suffix ("lanes-2"), since two clients
// cannot register the same series; the name is free again when its client closes.
func (h *KafkaHooks) Opt(name string) kgo.Opt {
	h.mu.Lock()
	label := name
	for n := 2; h.inUse[label]; n++ {
		label = name + "-" + strconv.Itoa(n)
	}
	h.inUse[label] = true
	h.mu.Unlock()
	m := kprom.NewMetrics(KafkaNamespace,
		kprom.Registerer(h.kpromReg),
		kprom.Gatherer(h.reg),
		kprom.WithStaticLabel(prometheus.Labels{"client": label}),
		kprom.FetchAndProduceDetail(kprom.ByNode, kprom.ByTopic, kprom.Records, kprom.Batches, kprom.UncompressedBytes, kprom.CompressedBytes, kprom.ConsistentNaming),
		kprom.Histograms(kprom.RequestDurationE2E, kprom.RequestThrottled),
		kprom.Buckets(kafkaBuckets),
	)
	return kgo.WithHooks(&clientHooks{Metrics: m, release: func() {
		h.mu.Lock()
		delete(h.inUse, label)
		h.mu.Unlock()
	}})
}

// clientHooks is kprom's hook set plus the release of the client's label when it closes.
type clientHooks struct {
	*kprom.Metrics
	release func()
}

// OnClientClosed unregisters the client's collectors and frees its label.
func (c *clientHooks) OnClientClosed(cl *kgo.Client) {
	c.Metrics.OnClientClosed(cl)
	c.release()
}

// Result is what Provide returns to the fx graph.
type Result struct {
	fx.Out

	Metrics *Metrics
	// Scope is the root scope (Metrics.Scope).
	Scope tally.Scope
	// Kafka is the factory of Kafka client hooks (Metrics.Kafka()).
	Kafka *KafkaHooks
}

// Provide is Module's constructor: New, with the scope's Close appended to lc's stop hooks.
func Provide(lc fx.Lifecycle, p Params) (Result, error) {
	m, err := New(p)
	if err != nil {
		return Result{}, err
	}
	// Appended when the metrics are built, before anything that records: so it runs after
	// everything that records has stopped, and the last report includes their final counts.
	lc.Append(fx.StopHook(m.Close))
	return Result{
		Metrics: m,
		Scope:   m.Scope,
		Kafka:   m.kafka,
	}, nil
}

// Module provides the *Metrics, its root tally.Scope and the *KafkaHooks; it closes the scope
// when the application stops. The HTTP server (app/httpserver) serves GET /metrics from the
// *Metrics when the application has one.
var Module = fx.Module("metrics", fx.Provide(Provide))

// kpromRenames are the kprom gauges whose names end in _total, which Prometheus reserves for
// counters (dashboards and recording rules apply rate() to such names), and the names they are
// exported under instead. kprom has no option to name them.
var kpromRenames = map[string]renamedGauge{
	KafkaNamespace + "_buffered_fetch_records_total": {
		name: KafkaNamespace + "_buffered_fetch_records", help: "Records buffered in the client, fetched and not yet polled",
	},
	KafkaNamespace + "_buffered_produce_records_total": {
		name: KafkaNamespace + "_buffered_produce_records", help: "Records buffered in the client, waiting to be produced",
	},
}

type renamedGauge struct{ name, help string }

// renamingRegisterer registers collectors into Registerer, except that a collector exporting one
// gauge named in renames is registered wrapped, under the new name; Unregister finds the wrapper
// from the original, so kprom's unregistration at client close still works. A collector that
// cannot be read at registration (not exactly one description, or its first sample is not a
// gauge) is registered as it is.
type renamingRegisterer struct {
	prometheus.Registerer
	renames map[string]renamedGauge

	mu      sync.Mutex
	wrapped map[prometheus.Collector]prometheus.Collector
}

// Register registers c, renamed when renames names its gauge.
func (r *renamingRegisterer) Register(c prometheus.Collector) error {
	if w := r.wrap(c); w != nil {
		if err := r.Registerer.Register(w); err != nil {
			return err
		}
		r.mu.Lock()
		r.wrapped[c] = w
		r.mu.Unlock()
		return nil
	}
	return r.Registerer.Register(c)
}

// MustRegister registers cs, panicking on the first error (prometheus.Registerer's contract).
func (r *renamingRegisterer) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

// Unregister unregisters c, or the wrapper registered for it.
func (r *renamingRegisterer) Unregister(c prometheus.Collector) bool {
	r.mu.Lock()
	if w, ok := r.wrapped[c]; ok {
		delete(r.wrapped, c)
		c = w
	}
	r.mu.Unlock()
	return r.Registerer.Unregister(c)
}

// wrap returns c renamed, or nil when c is not one of the renamed gauges.
func (r *renamingRegisterer) wrap(c prometheus.Collector) prometheus.Collector {
	descs := make(chan *prometheus.Desc)
	go func() { c.Describe(descs); close(descs) }()
	var all []*prometheus.Desc
	for d := range descs {
		all = append(all, d)
	}
	if len(all) != 1 {
		return nil
	}
	// A Desc does not expose its name; its String form does: Desc{fqName: "…", help: …}.
	_, rest, ok := strings.Cut(all[0].String(), `fqName: "`)
	name, _, _ := strings.Cut(rest, `"`)
	to, renamed := r.renames[name]
	if !ok || !renamed {
		return nil
	}
	metrics := make(chan prometheus.Metric, 1)
	go func() { c.Collect(metrics); close(metrics) }()
	var first *dto.Metric
	for m := range metrics {
		if first == nil {
			first = &dto.Metric{}
			if m.Write(first) != nil {
				first = nil
			}
		}
	}
	if first == nil || first.Gauge == nil {
		return nil
	}
	labels := prometheus.Labels{}
	for _, l := range first.Label {
		labels[l.GetName()] = l.GetValue()
	}
	return &renamedCollector{inner: c, desc: prometheus.NewDesc(to.name, to.help, nil, labels)}
}

// renamedCollector exports inner's one gauge under desc.
type renamedCollector struct {
	inner prometheus.Collector
	desc  *prometheus.Desc
}

func (c *renamedCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *renamedCollector) Collect(ch chan<- prometheus.Metric) {
	metrics := make(chan prometheus.Metric, 1)
	go func() { c.inner.Collect(metrics); close(metrics) }()
	for m := range metrics {
		var v dto.Metric
		if m.Write(&v) == nil && v.Gauge != nil {
			ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, v.Gauge.GetValue())
		}
	}
}
