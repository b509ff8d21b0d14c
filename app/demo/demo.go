// Package demo wires processor demo: relays for every configured lane (one per DC), the global
// indexer and the synthetic load generator in one process, on the embedded broker when no Kafka
// cluster is configured. While the load runs it prints a live lane table with sample answers to
// Options.Out, and at the end a summary (events and queries per second, query latency over Kafka
// and over HTTP), then stops the application: with exit status 0 when events were acknowledged
// and queries answered OK, 1 otherwise.
//
// cmd/processor parses the command line into Options and the configuration, and runs
// app.New(cfg, demo.Module(cfg, opts)); everything else the demo does lives here.
package demo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/ckf-stream/ckf-stream/app/config"
	"github.com/ckf-stream/ckf-stream/app/httpserver"
	"github.com/ckf-stream/ckf-stream/app/indexer"
	"github.com/ckf-stream/ckf-stream/app/kafka"
	"github.com/ckf-stream/ckf-stream/app/lifecycle"
	appload "github.com/ckf-stream/ckf-stream/app/loadgen"
	"github.com/ckf-stream/ckf-stream/app/relay"
	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/loadgen"
	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/ckf-stream/ckf-stream/streams/query"
	streamrelay "github.com/ckf-stream/ckf-stream/streams/relay"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/uber-go/tally/v4"
	"go.uber.org/fx"
	"go.uber.org/zap"
)

// exitFailure is the status the demo stops the application with when a built-in engine's bridge
// fails (fx.Shutdowner); lifecycle.Driver gives the load's.
const exitFailure = 1

// Domain is the indexer domain of the demo's pools when indexer.domain is not set.
const Domain = "64656d6f2d63616368652d73656d616e:64656d6f2d726f7574696e672d73636f"

// Options are the demo's own settings, besides the process configuration. processor demo sets
// each from the flag named in its comment.
type Options struct {
	// Load is the synthetic load: workload (seed, workers per DC, block size), event and query
	// rates, duration (0: until the application stops) and routers. Load.Workload.DCs is
	// ignored: the demo's DCs are the configured lanes' (see Configure).
	Load loadgen.RunConfig
	// DCs is the number of DCs, one relay each on lanes 0..DCs-1, when indexer.lanes is not
	// set; in [1, ckf.MaxLanes] (--dcs, default 4; consumer §16).
	DCs int
	// ExpectedBlocks sizes every filter, the indexer's and the relays' alike (--expected-blocks,
	// default 65,536: a demo's DCs hold far fewer blocks than a production DC).
	ExpectedBlocks uint64
	// TableEvery is how often the lane table and two sample answers are printed; positive
	// (--table-every, default 3s).
	TableEvery time.Duration
	// ReadyTimeout bounds the wait for the relays' start-up snapshots and the indexer's lanes;
	// the demo fails after it (--ready-timeout, default 60s).
	ReadyTimeout time.Duration
	// HTTPSamples is the number of sequential queries of the closing HTTP latency measurement;
	// 0 measures nothing (--http-samples, default 2,000).
	HTTPSamples int
	// Engines is the number of built-in engine emulators per DC (bridge/engineemu, vLLM's
	// ZeroMQ wire protocol on loopback ports), each feeding its DC through a bridge, the path of a
	// real engine (processor bridge); their resident chains are checked at the end (--engines,
	// default 0: none).
	Engines int
	// EngineRate is the batches per second each built-in engine publishes (--engine-rate,
	// default 100).
	EngineRate float64
	// Out receives the layout, the live table, the sample answers and the summary.
	Out io.Writer
	// DeleteTopics deletes the demo's topics (the layout's and the KV-events topics) when it
	// stops: processor demo sets it when it chose a topic prefix of its own on a real broker.
	DeleteTopics bool
}

// Validate reports the first option out of its range, naming it by its processor demo flag.
func (o Options) Validate() error {
	switch {
	case o.DCs < 1 || o.DCs > ckf.MaxLanes:
		return fmt.Errorf("--dcs %d is not in [1,%d]", o.DCs, ckf.MaxLanes)
	case o.TableEvery <= 0:
		return fmt.Errorf("--table-every %v is not positive", o.TableEvery)
	case o.ReadyTimeout <= 0:
		return fmt.Errorf("--ready-timeout %v is not positive", o.ReadyTimeout)
	case o.HTTPSamples < 0:
		return fmt.Errorf("--http-samples %d is negative", o.HTTPSamples)
	case o.Engines < 0 || o.Engines > 16:
		return fmt.Errorf("--engines %d is not in [0,16]", o.Engines)
	case o.Engines > 0 && o.EngineRate <= 0:
		return fmt.Errorf("--engine-rate %v is not positive", o.EngineRate)
	case o.Out == nil:
		return errors.New("no output for the demo's table and summary")
	}
	return nil
}

// Configure fills what the demo needs and cfg leaves open: the indexer domain (Domain, explicit)
// when none is set, one lane per DC (appload.DefaultDCs(o.DCs) on lanes 0..DCs-1) when
// indexer.lanes is empty, and o.ExpectedBlocks as the filter size of the indexer and the relays,
// with the relays on the indexer's seed.
func Configure(cfg *config.Config, o Options) {
	if cfg.Indexer.Domain == "" {
		cfg.Indexer.Domain, cfg.Indexer.DomainSource = Domain, "explicit"
	}
	if len(cfg.Indexer.Lanes) == 0 {
		cfg.Indexer.Lanes = config.LaneMap{}
		for i, dc := range appload.DefaultDCs(o.DCs) {
			cfg.Indexer.Lanes[i] = dc
		}
	}
	cfg.Indexer.BucketCount, cfg.Indexer.ExpectedBlocksPerDC = 0, o.ExpectedBlocks
	cfg.Relay.ExpectedBlocks, cfg.Relay.Seed = o.ExpectedBlocks, cfg.Indexer.Seed
}

// Module returns the demo's components for app.New: the indexer (with its HTTP routes and
// readiness check), one relay per lane of cfg.Indexer.Lanes, each reading its own DC's KV-events
// topic, and the driver that waits for them, runs the load, prints, and stops the application.
// cfg is the configuration after Configure; invalid options fail the application's build.
func Module(cfg config.Config, o Options) fx.Option {
	if err := o.Validate(); err != nil {
		return fx.Error(fmt.Errorf("demo: %w", err))
	}
	d := &demo{cfg: cfg, opts: o, out: o.Out}
	return d.module()
}

// demo runs relays for every configured lane, the indexer and the load generator in one process,
// prints a live lane table with sample answers, and ends with a summary.
type demo struct {
	cfg  config.Config
	opts Options
	out  io.Writer

	conn   *kafka.Connection
	log    *zap.Logger
	sd     fx.Shutdowner
	ix     *indexer.Indexer
	codec  *schemas.Codec
	relays []*relay.LaneRelay
	// engines are the built-in engines and their bridges (Options.Engines per DC).
	engines []*demoEngine

	// http is the process's HTTP listener (lane page, query API, metrics), when there is one.
	http *httpserver.Early
	// triedByHand is set once a cached prompt to try by hand has been printed.
	triedByHand bool
}

func (d *demo) kvTopic(dc uint64) string { return loadgen.KVTopic(d.cfg.Topics.KVEvents, dc) }

// module wires the demo. Hook order matters (fx starts hooks in the order they are appended and
// stops them in reverse): topics -> relays -> indexer -> driver, so that the relays find their
// topics, and on shutdown the load stops first, then the indexer, then the relays.
func (d *demo) module() fx.Option {
	return fx.Module("demo",
		fx.Provide(indexer.Provide),
		fx.Invoke(d.wireRelays),
		fx.Invoke(d.wireEngines),
		// Requesting the indexer here, after wireRelays, appends its hooks after the relays'.
		fx.Invoke(func(lc fx.Lifecycle, ix *indexer.Indexer, h struct {
			fx.In
			Early *httpserver.Early `optional:"true"`
		}) {
			d.ix, d.http = ix, h.Early
			load := d.load()
			lc.Append(fx.Hook{OnStart: load.Start, OnStop: load.Stop})
		}),
	)
}

func (d *demo) wireRelays(lc fx.Lifecycle, conn *kafka.Connection, scope tally.Scope, log *zap.Logger, sd fx.Shutdowner) error {
	d.conn, d.log, d.sd = conn, log.Named("demo"), sd
	codec, err := conn.Codec()
	if err != nil {
		return err
	}
	d.codec = codec
	// processor relay's configuration for each lane's DC; only the KV-events topic differs (the
	// demo gives every DC its own).
	if d.relays, err = relay.PerLane("demo", d.cfg, conn, codec, scope, log, d.kvTopic); err != nil {
		return err
	}
	lc.Append(fx.StartHook(d.prepare))
	// Appended before the relays' hook, so it runs once they stopped.
	lc.Append(fx.StopHook(func(ctx context.Context) error {
		if !d.opts.DeleteTopics {
			return nil
		}
		var names []string
		for _, r := range d.relays {
			names = append(names, d.kvTopic(r.Dc))
		}
		if err := d.conn.DeleteRunTopics(ctx, "demo-admin", names...); err != nil {
			return fmt.Errorf("demo: %w", err)
		}
		return nil
	}))
	relay.RunPerLane(lc, "demo", d.relays, d.log, sd)
	return nil
}

// prepare prints the cluster and the topic layout, and creates the demo's own topics: one
// KV-events topic per DC (a relay reads every partition of its DC's topic).
func (d *demo) prepare(ctx context.Context) error {
	if err := printLayout(ctx, d.out, d.conn); err != nil {
		return err
	}
	var names []string
	for _, r := range d.relays {
		names = append(names, d.kvTopic(r.Dc))
	}
	if err := appload.EnsureTopics(ctx, d.conn, names, appload.KVPartitions, nil); err != nil {
		return err
	}
	// The engines write each DC's events to a topic of its own, which its relay reads.
	fmt.Fprintf(d.out, "KV events flow on one topic per DC (%d partitions each; %s itself stays empty):\n  %s\n",
		appload.KVPartitions, d.cfg.Topics.KVEvents, strings.Join(names, "  "))
	return nil
}

func printLayout(ctx context.Context, out io.Writer, conn *kafka.Connection) error {
	cl, err := conn.NewClient("demo")
	if err != nil {
		return err
	}
	defer cl.Close()
	details, err := kadm.NewClient(cl).ListTopics(ctx)
	if err != nil {
		return fmt.Errorf("demo: list topics: %w", err)
	}
	fmt.Fprintln(out, "ckf-stream: using", conn.Cluster.Describe())
	fmt.Fprintln(out, "topic layout:")
	for _, spec := range kafka.TopicLayout(conn.Topics) {
		fmt.Fprintf(out, "  %-22s %2d partitions\n", spec.Name, len(details[spec.Name].Partitions))
	}
	return nil
}

// load is the demo's driver, run from the application's start until its stop: drive, then stop
// the application with drive's exit status. An interrupted drive is the application stopping
// already; Stop reports nothing of it but a stop that runs out of time.
func (d *demo) load() *lifecycle.Group {
	return lifecycle.Driver("demo", "the load", d.out, d.drive, func(code int) { _ = d.sd.Shutdown(fx.ExitCode(code)) })
}

// drive waits for the relays and the lanes, runs the load while printing the lane table and
// sample answers, and prints the summary.
func (d *demo) drive(ctx context.Context) error {
	t0 := time.Now()
	if err := relay.AwaitStarted(ctx, d.relays, t0, d.opts.ReadyTimeout); err != nil {
		return err
	}
	fmt.Fprintf(d.out, "relays: %d DCs published their start-up snapshots after %v\n", len(d.relays), time.Since(t0).Round(time.Millisecond))
	if err := d.ix.AwaitReady(ctx, t0, d.opts.ReadyTimeout); err != nil {
		return err
	}
	fmt.Fprintf(d.out, "indexer: all %d lanes ready after %v; running the load for %v (%.0f events/s, %.0f queries/s over Kafka)\n",
		len(d.relays), time.Since(t0).Round(time.Millisecond), d.opts.Load.Duration, d.opts.Load.EventRate, d.opts.Load.QueryRate)
	if base := d.baseURL(); base != "" {
		fmt.Fprintf(d.out, "while it runs, look at: the lane page %s/  the lane table as JSON %s/v1/lanes  the metrics %s/metrics\n"+
			"  and ask the query API yourself: POST %s/v1/prefix-matches (a cached prompt to paste follows)\n",
			base, base, base, base)
	}

	var dcs []uint64
	for _, r := range d.relays {
		dcs = append(dcs, r.Dc)
	}
	prod, err := d.conn.NewClient("demo-events", appload.ProducerOpts()...)
	if err != nil {
		return err
	}
	defer prod.Close()
	// The query client's two clients (requests, replies) each get their own options.
	qcOpts := func(role string) []kgo.Opt { return d.conn.QueryOpts("demo-" + role) }
	qc, err := query.NewQueryClient(ctx, query.QueryClientParams{Config: query.DefaultQueryClientConfig(),
		Codec: d.codec, ClientOptsFor: qcOpts, Log: d.log})
	if err != nil {
		return err
	}
	defer qc.Close()
	run := d.opts.Load
	run.Workload.DCs = dcs
	runner, err := loadgen.NewRunner(loadgen.RunnerParams{
		Config: run, Producer: prod, Codec: d.codec, Topic: d.kvTopic, Query: qc.Query,
	})
	if err != nil {
		return err
	}
	before := d.relayTotals()
	lanesBefore := d.laneTotals()
	engineCtx, stopEngines := context.WithCancel(ctx)
	defer stopEngines()
	waitEngines, err := d.runEngines(engineCtx)
	if err != nil {
		return err
	}
	runStart := time.Now()
	var rep loadgen.Report
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); rep, _ = runner.Run(ctx) }()
	stats := d.live(ctx, runner.Workload(), &wg)
	wg.Wait()
	stopEngines()
	if err := waitEngines(); err != nil {
		return fmt.Errorf("built-in engines: %w", err)
	}
	elapsed := time.Since(runStart)
	// Interrupted (the application is stopping): summarise what ran, without waiting for the
	// lanes to settle or measuring HTTP; the indexer stops only after this returns.
	interrupted := ctx.Err() != nil
	if !interrupted {
		// Let the relays and lanes settle so the totals cover every acknowledged event.
		d.settle(ctx, before.events+rep.EventAcks)
	}
	after := d.relayTotals()
	lanesAfter := d.laneTotals()
	d.printTable(time.Since(t0))
	var httpP50, httpP99 time.Duration
	var httpErr error
	if !interrupted {
		httpP50, httpP99, httpErr = d.measureHTTP(runner.Workload())
	}
	d.summary(elapsed, rep, before, after, lanesBefore, lanesAfter, stats, httpP50, httpP99, httpErr, interrupted)
	if interrupted {
		return ctx.Err()
	}
	if len(d.engines) > 0 {
		ec := d.checkEngines(ctx)
		printEngineCheck(d.out, ec, len(d.engines), elapsed.Seconds())
		if ec.short > 0 {
			return fmt.Errorf("%d resident chains of the built-in engines were answered short", ec.short)
		}
	}
	switch {
	case rep.EventAcks == 0 && d.opts.Load.EventRate > 0:
		return errors.New("no KV event was acknowledged")
	case rep.OK == 0 && d.opts.Load.QueryRate > 0:
		return errors.New("no query was answered OK")
	}
	return nil
}

type relayTotals struct{ events, deltas, images, snapshots uint64 }

func (d *demo) relayTotals() relayTotals {
	var t relayTotals
	for _, r := range d.relays {
		s := r.Relay.Stats()
		t.events += s.Events
		t.deltas += s.Deltas
		t.images += s.Images
		t.snapshots += s.Snapshots
	}
	return t
}

type laneTotals struct{ deltas, images uint64 }

func (d *demo) laneTotals() laneTotals {
	var t laneTotals
	for _, s := range d.ix.Lanes().Lanes() {
		t.deltas += s.Deltas
		t.images += s.Images
	}
	return t
}

// settle waits (at most 10 s) until the relays have applied every acknowledged event and every
// lane of the indexer has installed its relay's last sequence. (A lane's offset lag does not
// reach 0 while a relay writes transactions: the commit marker after its last record holds an
// offset no record carries.)
func (d *demo) settle(ctx context.Context, events uint64) {
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		caughtUp := d.relayTotals().events >= events
		lanes := d.ix.Lanes().Lanes()
		for _, r := range d.relays {
			seq := r.Relay.Stats().LastSequence
			for _, s := range lanes {
				if s.Lane == r.Lane {
					caughtUp = caughtUp && s.InstalledSequence >= seq
				}
			}
		}
		if caughtUp {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// sampleStats counts the sample answers the live view printed.
type sampleStats struct{ asked, nonZero int }

// live prints the lane table and two sample answers every tableEvery until the run (wg) ends.
func (d *demo) live(ctx context.Context, w *loadgen.Workload, wg *sync.WaitGroup) sampleStats {
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	rng := rand.New(rand.NewPCG(d.opts.Load.Workload.Seed, 1234))
	t := time.NewTicker(d.opts.TableEvery)
	defer t.Stop()
	start := time.Now()
	var st sampleStats
	for {
		select {
		case <-finished:
			return st
		case <-ctx.Done():
			return st
		case <-t.C:
		}
		d.printTable(time.Since(start))
		for i := 0; i < 2; i++ {
			q := w.NextQuery(rng)
			q.Request.CorrelationID = fmt.Sprintf("demo-sample-%d", st.asked)
			reply := d.ix.Answerer().AnswerPooled(&q.Request)
			st.asked++
			if d.printSample(q, reply) {
				st.nonZero++
			}
		}
	}
}

// printTable prints one line per lane.
func (d *demo) printTable(at time.Duration) {
	tw := tabwriter.NewWriter(d.out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "t=%.1fs\tlane\tDC\tstate\tseq\tdeltas\timages\tsnapshots\tlag\trelay events\tresident blocks\t\n", at.Seconds())
	view := d.ix.API().View()
	for _, l := range view.Lanes {
		var rs streamrelay.RelayStats
		for _, r := range d.relays {
			if r.Lane == l.Lane {
				rs = r.Relay.Stats()
			}
		}
		fmt.Fprintf(tw, "\t%d\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t\n", l.Lane, strings.TrimLeft(l.DcID, "0"), l.State,
			l.InstalledSequence, l.Deltas, l.Images, l.Snapshots, l.LagRecords, rs.Events, rs.ResidentBlocks)
	}
	_ = tw.Flush()
}

// printSample prints one answer as per-DC depths and reports whether any depth is non-zero.
func (d *demo) printSample(q loadgen.Query, r schemas.QueryReply) bool {
	from := "a new conversation"
	if q.HomeDC >= 0 {
		from = "a conversation of DC " + strings.TrimLeft(ckf.DcID(d.relays[q.HomeDC].Dc).String(), "0")
	}
	var parts []string
	nonZero := false
	for _, l := range r.Lanes {
		parts = append(parts, fmt.Sprintf("%s=%d", strings.TrimLeft(ckf.DcID(l.DcID).String(), "0"), l.Depth))
		nonZero = nonZero || l.Depth > 0
	}
	input := "hashes"
	if q.Request.Input == schemas.InputTokenIDs {
		input = "tokens"
	}
	fmt.Fprintf(d.out, "  sample answer (%s): %d blocks (by %s) from %s -> depth per DC: %s\n",
		r.Status, r.QueryBlocks, input, from, strings.Join(parts, " "))
	if nonZero && !d.triedByHand {
		if cmd := d.curlCommand(q.Request); cmd != "" {
			d.triedByHand = true
			fmt.Fprintf(d.out, "  a cached prompt to try by hand while the demo runs:\n    %s\n", cmd)
		}
	}
	return nonZero
}

// baseURL is the process's HTTP address as a URL, or "" when it serves no HTTP.
func (d *demo) baseURL() string {
	if d.http == nil || d.http.Addr() == nil {
		return ""
	}
	return "http://" + d.http.Addr().String()
}

// curlCommand renders req, a prompt by local block hashes (at most its first 8 blocks: a prefix
// of a cached prompt is cached too), as a curl command for the HTTP query API; "" without HTTP or
// for a prompt by tokens.
func (d *demo) curlCommand(req schemas.QueryRequest) string {
	base := d.baseURL()
	if base == "" {
		return ""
	}
	if req.Input != schemas.InputLocalBlockHashes {
		return "" // token prompts are long to paste: wait for one by hashes
	}
	hashes := req.Hashes.AppendTo(nil)
	b, _ := json.Marshal(map[string]any{"local_block_hashes": hashes[:min(len(hashes), 8)]})
	return fmt.Sprintf("curl -s -H 'Content-Type: application/json' -d '%s' %s/v1/prefix-matches", b, base)
}

// measureHTTP sends sequential queries to the indexer's POST /v1/prefix-matches handler over a
// loopback listener of its own (the same handler the process's HTTP server serves) and returns
// the latency percentiles.
func (d *demo) measureHTTP(w *loadgen.Workload) (p50, p99 time.Duration, err error) {
	if d.opts.HTTPSamples <= 0 {
		return 0, 0, nil
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, 0, err
	}
	srv := &http.Server{Handler: d.ix.API().QueryHandler(), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	query := appload.HTTPQuery(&http.Client{Timeout: 5 * time.Second}, "http://"+ln.Addr().String())
	rng := rand.New(rand.NewPCG(d.opts.Load.Workload.Seed, 77))
	var lat []time.Duration
	for i := 0; i < d.opts.HTTPSamples+100; i++ {
		q := w.NextQuery(rng)
		start := time.Now()
		if _, err := query(context.Background(), q.Request); err != nil {
			return 0, 0, err
		}
		if i >= 100 { // warm-up excluded
			lat = append(lat, time.Since(start))
		}
	}
	slices.Sort(lat)
	return lat[len(lat)/2], lat[len(lat)*99/100], nil
}

func (d *demo) summary(elapsed time.Duration, rep loadgen.Report, before, after relayTotals, lb, la laneTotals,
	st sampleStats, httpP50, httpP99 time.Duration, httpErr error, interrupted bool) {
	secs := elapsed.Seconds()
	events := after.events - before.events
	how := ""
	if interrupted {
		how = " (interrupted)"
	}
	fmt.Fprintf(d.out, "\ndemo summary: %.1fs of load over %d DCs%s\n", secs, len(d.relays), how)
	fmt.Fprintf(d.out, "  KV events produced:          %d acknowledged (%.0f/s), %d failed\n", rep.EventAcks, rep.EventsPerSec, rep.EventErrors)
	fmt.Fprintf(d.out, "  events through the relays:   %d (%.0f/s); %d deltas, %d images published; %d snapshots\n",
		events, float64(events)/secs, after.deltas-before.deltas, after.images-before.images, after.snapshots-before.snapshots)
	fmt.Fprintf(d.out, "  indexer lanes applied:       %d deltas, %d images (%.0f images/s)\n",
		la.deltas-lb.deltas, la.images-lb.images, float64(la.images-lb.images)/secs)
	fmt.Fprintf(d.out, "  queries over Kafka:          %d replies (%.1f/s): ok %d, unavailable %d, invalid %d, errors %d, skipped %d\n",
		rep.OK+rep.Unavailable+rep.Invalid, rep.QueriesPerSec, rep.OK, rep.Unavailable, rep.Invalid, rep.QueryErrors, rep.Skipped)
	fmt.Fprintf(d.out, "  query latency over Kafka:    p50 %v, p90 %v, p99 %v, max %v\n",
		rep.P50.Round(time.Microsecond), rep.P90.Round(time.Microsecond), rep.P99.Round(time.Microsecond), rep.Max.Round(time.Microsecond))
	if rep.OK > 0 {
		fmt.Fprintf(d.out, "  answers with a cached prefix: %.0f%% (mean deepest DC %.1f blocks); the conversation's own DC matched in %.0f%%\n",
			100*float64(rep.Hits)/float64(rep.OK), rep.MeanBestDepth, 100*float64(rep.HomeHits)/float64(max(rep.HomeQueries, 1)))
	}
	fmt.Fprintf(d.out, "  sample answers printed:      %d, %d with a non-zero depth\n", st.asked, st.nonZero)
	switch {
	case httpErr != nil:
		fmt.Fprintf(d.out, "  HTTP query endpoint:         failed: %v\n", httpErr)
	case d.opts.HTTPSamples > 0 && !interrupted:
		fmt.Fprintf(d.out, "  HTTP query endpoint:         p50 %v, p99 %v (loopback, %d sequential queries)\n",
			httpP50.Round(time.Microsecond), httpP99.Round(time.Microsecond), d.opts.HTTPSamples)
	}
	if rep.FirstError != nil {
		fmt.Fprintf(d.out, "  first error:                 %v\n", rep.FirstError)
	}
	ws := rep.Workload
	fmt.Fprintf(d.out, "  workload:                    %d stores (%d blocks), %d removals (%d blocks), %d clears, %d conversations, %d branches\n",
		ws.Stored, ws.StoredBlocks, ws.Removed, ws.Evictions, ws.Cleared, ws.Conversations, ws.Branches)
}
