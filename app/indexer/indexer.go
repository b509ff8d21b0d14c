// Package indexer wires the global indexer (processor indexer) into an fx application: the
// manifest from config.Indexer, the ckf.GlobalIndexer, the lanes on Kafka (lanes.Indexer), the
// Kafka query service (query.QueryService, a consumer group on the query topic, joined only
// while the replica is ready; see Indexer.QueryGroupMember) and the HTTP endpoints, which share one query.Answerer, so a query gets the same answer on either path.
//
// HTTP routes (registered with the process's HTTP server):
//
//	GET  /v1/lanes            the lane status table as JSON (LanesView)
//	GET  / and GET /lanes     the same table as a page for people, reloading itself
//	POST /v1/prefix-matches   a prefix-match query (queryapi.PrefixMatchRequest ->
//	                          queryapi.PrefixMatchResponse, or the binary form)
//
// The query route's contract (bodies, rules, codecs) is the package queryapi; this package holds
// its handler (query_handler.go) and the wiring.
//
// plus the "lanes" readiness check of /readyz (API.Ready says when a replica is ready).
//
// Metrics: the lanes report per lane under ckf_indexer_lane_* (lanes.Indexer); both query
// paths report under ckf_query_* tagged path="kafka" or path="http" (requests, replies by
// status, latency_seconds histograms); this package adds ckf_indexer_configured_lanes,
// ckf_indexer_eligible_lanes, ckf_indexer_degraded_lanes and ckf_indexer_query_group_member.
package indexer

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"os"
	"runtime/debug"
	"sync/atomic"
	"time"

	"github.com/ckf-stream/ckf-stream/app/config"
	"github.com/ckf-stream/ckf-stream/app/httpserver"
	"github.com/ckf-stream/ckf-stream/app/kafka"
	"github.com/ckf-stream/ckf-stream/app/lifecycle"
	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/ckf/index"
	"github.com/ckf-stream/ckf-stream/streams/lanes"
	"github.com/ckf-stream/ckf-stream/streams/query"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/uber-go/tally/v4"
	"go.uber.org/fx"
	"go.uber.org/zap"
)

// Params are New's inputs.
type Params struct {
	fx.In

	Config config.Indexer
	// All is the whole configuration; its topic_prefix starts the replica's lag group name.
	All        config.Config
	Kafka      config.Kafka
	Connection *kafka.Connection
	Scope      tally.Scope   `optional:"true"`
	Logger     *zap.Logger   `optional:"true"`
	Shutdowner fx.Shutdowner `optional:"true"`
}

// Indexer is one global indexer replica: its table, its lanes on Kafka, its Kafka query service
// and its HTTP API. Build it with New, then Start and Stop it (Module does both with fx).
type Indexer struct {
	log        *zap.Logger
	shutdowner fx.Shutdowner
	g          *index.GlobalIndexer
	lanes      *lanes.Indexer
	// newQueries builds a fresh query service (a QueryService runs once) each time the replica
	// joins the query group.
	newQueries func() (*query.QueryService, error)
	leaveAfter time.Duration // config.Indexer.QueryLeaveAfter
	// member is true while the replica's query service is in the query group (or joining it).
	member    atomic.Bool
	ans       *query.Answerer
	api       *API
	gauges    struct{ configured, eligible, degraded, member tally.Gauge }
	gcPercent int // config.Indexer.GCPercent, applied at Start

	// run runs the query service, the lanes and the lane watcher from Start to Stop, and stops
	// them in that order.
	run *lifecycle.Group
}

// New builds the replica: manifest (a random consumer instance id when the configured one is 0,
// logged), table, lanes, query service and API. Nothing connects until Start.
func New(p Params) (*Indexer, error) {
	log := p.Logger
	if log == nil {
		log = zap.NewNop()
	}
	log = log.Named("indexer")
	scope := p.Scope
	if scope == nil {
		scope = tally.NoopScope
	}
	consumer, err := ConsumerInstance(p.Config.ConsumerInstanceID)
	if err != nil {
		return nil, err
	}
	m, warnings, err := BuildManifest(p.Config, consumer)
	if err != nil {
		return nil, err
	}
	for _, w := range warnings {
		log.Warn(w.String())
	}
	g, err := index.NewGlobalIndexer(m, ckf.SearchConfig{VerificationWindow: p.Config.VerificationWindow})
	if err != nil {
		return nil, fmt.Errorf("indexer: global indexer: %w", err)
	}
	topics := p.Connection.Topics
	codec, err := p.Connection.Codec()
	if err != nil {
		return nil, err
	}
	laneCfg := p.Config.LaneSettings(topics)
	laneCfg.LagGroup = lanes.IndexerLagGroup(p.All.TopicPrefix, consumer)
	lanes, err := lanes.NewIndexer(lanes.IndexerParams{
		Config:  laneCfg,
		Indexer: g,
		Codec:   codec,
		// One option set per client: each gets its own kprom collectors (client=<role>).
		ClientOptsFor: func(role string) []kgo.Opt { return p.Connection.Opts(role) },
		Metrics:       scope,
		Log:           log,
	})
	if err != nil {
		return nil, fmt.Errorf("indexer: lanes: %w", err)
	}
	firstBlocks := new(query.FirstBlockStats)
	ans := query.NewAnswerer(g, lanes.EligibleLanes, query.IncompleteLanes(lanes.IncompleteLanes), query.LaneAsOf(lanes.LaneAsOf), query.CheckBlockSize(lanes.CheckBlockSize),
		query.CountFirstBlocks(firstBlocks, lanes.HoldingLanes))
	newQueries := func() (*query.QueryService, error) {
		qs, err := query.NewQueryService(query.QueryServiceParams{
			Config:     p.Config.QuerySettings(topics),
			Answerer:   ans,
			Codec:      codec,
			ClientOpts: p.Connection.QueryOpts("queries"),
			Metrics:    scope.Tagged(map[string]string{"path": PathKafka}),
			Log:        log,
		})
		if err != nil {
			return nil, fmt.Errorf("indexer: query service: %w", err)
		}
		return qs, nil
	}
	// Build one now, so that a configuration the query service refuses fails New.
	if _, err := newQueries(); err != nil {
		return nil, err
	}
	api, err := NewAPI(APIParams{Answerer: ans, Lanes: lanes.Lanes, Eligible: lanes.EligibleLanes, Metrics: scope})
	if err != nil {
		return nil, err
	}
	api.neverMatch = newNeverMatchWatch(firstBlocks, m.ConfiguredLanes64(), scope, log)
	ix := &Indexer{log: log, shutdowner: p.Shutdowner, g: g, lanes: lanes, newQueries: newQueries, ans: ans, api: api,
		gcPercent: p.Config.GCPercent, leaveAfter: p.Config.QueryLeaveAfter}
	s := scope.SubScope("indexer")
	ix.gauges.configured = s.Gauge("configured_lanes")
	ix.gauges.eligible = s.Gauge("eligible_lanes")
	ix.gauges.degraded = s.Gauge("degraded_lanes")
	ix.gauges.member = s.Gauge("query_group_member")
	ix.gauges.member.Update(0)
	log.Info("indexer built",
		zap.String("consumer_instance", fmt.Sprintf("%016x", uint64(consumer))),
		zap.Bool("consumer_instance_random", p.Config.ConsumerInstanceID == 0),
		zap.String("lag_group", laneCfg.LagGroup),
		zap.String("domain", m.IndexerDomain().String()),
		zap.Stringer("lanes", p.Config.Lanes),
		zap.Uint64("bucket_count", m.Format().BucketCount),
		zap.Int("verification_window", p.Config.VerificationWindow))
	ix.run = &lifecycle.Group{Name: "indexer", Tasks: []lifecycle.Task{
		{Name: "query service", Waiting: "the query service", Run: ix.serveQueries},
		{Name: "lanes", Waiting: "the lanes", Run: lanes.Run},
		{Name: "lane watcher", Waiting: "the lane watcher", Run: func(ctx context.Context) error { ix.watch(ctx); return nil }},
		{Name: "never-match watch", Waiting: "the never-match watch", Run: api.neverMatch.run},
	}, OnExit: func(i int, err error) { ix.fail(ix.run.Tasks[i].Name, err) }}
	return ix, nil
}

// GlobalIndexer returns the table.
func (ix *Indexer) GlobalIndexer() *index.GlobalIndexer { return ix.g }

// Lanes returns the lanes on Kafka.
func (ix *Indexer) Lanes() *lanes.Indexer { return ix.lanes }

// Answerer returns the answerer both query paths share.
func (ix *Indexer) Answerer() *query.Answerer { return ix.ans }

// API returns the HTTP API.
func (ix *Indexer) API() *API { return ix.api }

// AwaitReady waits until the API's readiness check (/readyz) passes, ctx ends, or timeout has
// passed since start; the error then wraps the check's last answer. It polls the check every
// 20 ms, for the in-process commands (processor demo, processor replay) that drive a load once
// the index is ready.
func (ix *Indexer) AwaitReady(ctx context.Context, start time.Time, timeout time.Duration) error {
	for {
		err := ix.api.Ready(ctx)
		if err == nil {
			return nil
		}
		if time.Since(start) > timeout {
			return fmt.Errorf("the indexer is not ready after %v: %w", timeout, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond): // polling the readiness check, which has no signal of its own
		}
	}
}

// Start schedules the lanes, the query service and the lane watcher on goroutines of their own
// and returns. A lane or query failure after start stops the application with exit status 1
// through fx.Shutdowner (when there is one), so the replica restarts rather than serving a table
// that no longer moves.
func (ix *Indexer) Start(ctx context.Context) error {
	if ix.run.Started() {
		return errors.New("indexer: already started")
	}
	ix.applyGCPercent(os.LookupEnv)
	return ix.run.Start(ctx)
}

// QueryGroupMember reports whether the replica's query service is in the query group (joined
// or joining): true from the moment the replica is ready until it leaves (see serveQueries).
func (ix *Indexer) QueryGroupMember() bool { return ix.member.Load() }

// serveQueries runs the Kafka query service only while the replica is ready: it waits for the
// "lanes" readiness check (API.Ready) to pass, joins the query group with a fresh
// query.QueryService, and leaves the group gracefully (the batch in flight answered and
// committed) once the check has failed continuously for longer than leaveAfter; then it waits
// for readiness again. A replica that is not ready thus never holds query partitions it would
// answer UNAVAILABLE, beyond that bound. The check depends only on the lanes' eligibility, so it
// is evaluated when eligibility changes (lanes.Indexer.EligibilityChanged), not on a timer. It
// returns when ctx ends (nil, or the service's error) or when the service fails (its error,
// which stops the process).
func (ix *Indexer) serveQueries(ctx context.Context) error {
	for {
		for {
			changed := ix.lanes.EligibilityChanged() // before the check: no change in between is missed
			if ix.api.Ready(ctx) == nil {
				break
			}
			select {
			case <-ctx.Done():
				return nil
			case <-changed:
			}
		}
		qs, err := ix.newQueries()
		if err != nil {
			return err
		}
		qctx, leave := context.WithCancel(ctx)
		done := make(chan error, 1)
		ix.member.Store(true)
		ix.gauges.member.Update(1)
		ix.log.Info("ready: joining the query group")
		go func() { done <- qs.Run(qctx) }()
		if err := ix.serveWhileReady(ctx, done, leave); err != nil || ctx.Err() != nil {
			return err
		}
	}
}

// serveWhileReady watches readiness while the query service runs. It returns nil after leaving
// the group because the replica was not ready for longer than leaveAfter, or the service's error
// (or, when the service stopped on its own, an error saying so) once the service ended.
func (ix *Indexer) serveWhileReady(ctx context.Context, done <-chan error, leave context.CancelFunc) error {
	stopped := func() {
		ix.member.Store(false)
		ix.gauges.member.Update(0)
	}
	var unready *time.Timer // runs while the check fails; stopped when it passes again
	defer func() {
		if unready != nil {
			unready.Stop()
		}
	}()
	var leaveDue <-chan time.Time
	for {
		changed := ix.lanes.EligibilityChanged()
		switch err := ix.api.Ready(ctx); {
		case err == nil:
			if unready != nil {
				unready.Stop()
				unready, leaveDue = nil, nil
			}
		case unready == nil:
			unready = time.NewTimer(ix.leaveAfter)
			leaveDue = unready.C
		}
		select {
		case err := <-done:
			leave()
			stopped()
			if err == nil && ctx.Err() == nil {
				err = errors.New("indexer: query service stopped on its own")
			}
			return err
		case <-changed:
		case <-leaveDue:
			err := ix.api.Ready(ctx)
			if err == nil { // ready again at the moment the bound passed
				unready, leaveDue = nil, nil
				continue
			}
			ix.log.Warn("not ready for longer than indexer.query_leave_after: leaving the query group",
				zap.Duration("query_leave_after", ix.leaveAfter), zap.Error(err))
			leave()
			err = <-done
			stopped()
			return err
		}
	}
}

// applyGCPercent sets the collector's target from the configuration, unless the operator set
// GOGC in the environment (the runtime already applied it) or the configuration says 0. It is a
// process-wide setting: in the demo, the relays sharing the process get it too.
func (ix *Indexer) applyGCPercent(lookupEnv func(string) (string, bool)) {
	if v, ok := lookupEnv("GOGC"); ok {
		ix.log.Info("GOGC set in the environment; indexer.gc_percent not applied", zap.String("GOGC", v))
		return
	}
	if ix.gcPercent == 0 {
		return
	}
	was := debug.SetGCPercent(ix.gcPercent)
	ix.log.Info("garbage collector target set", zap.Int("gc_percent", ix.gcPercent), zap.Int("was", was))
}

// fail reports a component that stopped on its own.
func (ix *Indexer) fail(what string, err error) {
	ix.log.Error(what+" stopped", zap.Error(err))
	if ix.shutdowner != nil {
		_ = ix.shutdowner.Shutdown(fx.ExitCode(1))
	}
}

// watch observes eligibility at every change (so that a lane eligible for a moment counts for
// readiness even when no probe ran then) and updates the lane-count gauges, until ctx ends.
func (ix *Indexer) watch(ctx context.Context) {
	configured := ix.g.Manifest().ConfiguredLanes64()
	for {
		changed := ix.lanes.EligibilityChanged() // before observing: no change in between is missed
		elig := ix.api.Observe() & configured
		ever := ix.api.everEligible.Load()
		ix.gauges.configured.Update(float64(bits.OnesCount64(configured)))
		ix.gauges.eligible.Update(float64(bits.OnesCount64(elig)))
		ix.gauges.degraded.Update(float64(bits.OnesCount64(ever &^ elig & configured)))
		select {
		case <-ctx.Done():
			return
		case <-changed:
		}
	}
}

// Stop stops intake and waits, within ctx: first the query service (its batch in flight is
// answered, flushed and committed, then it leaves the group), then the lanes (they stop reading,
// release their lanes of the table, and lane events are flushed). It returns the first error of either,
// or ctx's error when ctx ends first.
func (ix *Indexer) Stop(ctx context.Context) error {
	if !ix.run.Started() {
		return nil
	}
	// One context stops all three: the query service's graceful stop and the lanes' are both
	// driven by its cancellation, and both finish their work in flight before returning.
	err := ix.run.Stop(ctx)
	if ctx.Err() == nil || err == nil {
		ix.log.Info("indexer stopped")
	}
	return err
}

// Result is what Provide returns to the fx graph.
type Result struct {
	fx.Out

	Indexer *Indexer
	Routes  []httpserver.Route        `group:"routes,flatten"`
	Check   httpserver.ReadinessCheck `group:"readiness"`
}

// Provide is Module's constructor: New, with Start and Stop appended to lc's hooks, the HTTP
// routes and the "lanes" readiness check.
func Provide(lc fx.Lifecycle, p Params) (Result, error) {
	ix, err := New(p)
	if err != nil {
		return Result{}, err
	}
	lc.Append(fx.Hook{OnStart: ix.Start, OnStop: ix.Stop})
	return Result{
		Indexer: ix,
		Routes:  ix.api.Routes(),
		Check:   httpserver.ReadinessCheck{Name: "lanes", Check: ix.api.Ready},
	}, nil
}

// Module runs the global indexer in the application: it provides the *Indexer, starts it after
// the Kafka connection and stops it before (fx stops in reverse order), and adds its routes and
// readiness check to the HTTP server.
var Module = fx.Module("indexer",
	fx.Provide(Provide),
	fx.Invoke(func(*Indexer) {}),
)
