// Package replay wires processor replay: a request trace (package eval) replayed through the
// whole system. One simulated fleet (D DCs × W workers with finite KV caches) runs in real time
// under the ckf policy: its engines' KV events go as Avro KvEvent records onto each DC's KV-events
// topic, keyed by worker id as real producers key them, through one relay per DC and the lanes
// into the indexer, and its router asks the indexer (over Kafka or HTTP) for the DC before
// placing each request, then the DC's worker stage (one replica per DC beside the relays, over
// HTTP) for the worker inside it: two-stage routing from the one stream. Every other policy (the
// two oracles, load, round-robin, random, and the ckf rule on an index with an injected
// visibility delay) replays the same requests in simulated time, choosing the worker inside the
// DC by the DC's exact knowledge. The run ends with a report: printed, and with Options.OutDir as
// report.json (tools/evalplots draws the plots from it).
//
// Like app/demo, it runs relays, the worker stages, the indexer and the driver in one process, on the embedded
// broker when no Kafka cluster is configured. docs/EVALUATION.md describes the method.
package replay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/ckf-stream/ckf-stream/app/config"
	"github.com/ckf-stream/ckf-stream/app/indexer"
	"github.com/ckf-stream/ckf-stream/app/kafka"
	"github.com/ckf-stream/ckf-stream/app/lifecycle"
	appload "github.com/ckf-stream/ckf-stream/app/loadgen"
	"github.com/ckf-stream/ckf-stream/app/relay"
	"github.com/ckf-stream/ckf-stream/eval"
	"github.com/ckf-stream/ckf-stream/loadgen"
	"github.com/ckf-stream/ckf-stream/schemas"
	streamworkers "github.com/ckf-stream/ckf-stream/streams/workers"
	"github.com/uber-go/tally/v4"
	"go.uber.org/fx"
	"go.uber.org/zap"
)

// Domain is the indexer domain of the replay's pools when indexer.domain is not set.
const Domain = "7265706c61792d63616368652d73656d:7265706c61792d726f7574696e672d73"

// Query paths the ckf router may take.
const (
	QueryKafka = "kafka"
	QueryHTTP  = "http"
)

// Options are the replay's own settings, besides the process configuration. processor replay
// sets each from the flag named in its comment.
type Options struct {
	// Trace names the trace in the report (--trace); Requests are its requests in the replayed
	// window, their times already divided by Compress; Stats describe the whole trace.
	Trace    string
	Requests []eval.Request
	Stats    eval.TraceStats
	// From and Window are the replayed window of trace time (--from, --window; 0: to the end).
	From, Window time.Duration
	// Speedup is how much faster than real time the live replay runs (--speedup, default 1):
	// simulated second t happens Speedup times sooner on the wall clock, arrivals, prefills and
	// decodes alike. The simulated fleet does the same work (its results do not depend on it);
	// the pipeline sees Speedup times the event and query rates, and the index's staleness,
	// counted in simulated time, grows by the same factor.
	Speedup float64
	// Compress divides the trace's arrival times (--compress, default 1), Requests' times
	// included: the same requests in 1/Compress of the time, so the fleet is that much busier.
	Compress float64
	// Fleet is the simulated fleet and service model (--dcs, --workers, --cache-blocks,
	// --prefill-rate, --decode-rate, --load-weight, --cold, --seed).
	Fleet eval.Config
	// Seeds is the number of seeds each simulated policy runs with (Fleet.Seed, Fleet.Seed+1,
	// ...), for the seed-to-seed spread (--seeds, default 3).
	Seeds int
	// Delays are the injected visibility delays of the staleness runs, in trace time (--delays,
	// default 1s,10s,60s; delay 0 is the cost oracle).
	Delays []time.Duration
	// Query is the ckf router's path to the indexer: QueryKafka or QueryHTTP (--query).
	Query string
	// ViaBridge sends the engines' KV events through processor bridge's path (--via-bridge):
	// each simulated worker publishes vLLM's ZeroMQ wire protocol on a loopback socket, read by a
	// bridge (package bridge) that writes the KvEvent records; otherwise they are produced as
	// KvEvent records directly.
	ViaBridge bool
	// QueryTimeout bounds one query of the ckf router; a request whose query fails is placed by
	// load alone and counted (--query-timeout, default 1s).
	QueryTimeout time.Duration
	// ExpectedBlocks sizes every filter (--expected-blocks; 0: twice a DC's cache blocks).
	ExpectedBlocks uint64
	// ReadyTimeout bounds the wait for the relays and the lanes (--ready-timeout, default 60s).
	ReadyTimeout time.Duration
	// VisibleTimeout is how long the visibility prober waits for one event to show in the
	// index before counting it as never seen (--visible-timeout, default 10s).
	VisibleTimeout time.Duration
	// Regions splits the DCs over this many regions (--regions, default 1), each with its own
	// embedded Kafka cluster holding its DCs' KV topics, relays, worker stages and an indexer
	// of every lane, the lanes copied between the clusters by an in-process mirror in
	// MirrorMaker's place (mirror.go, design §8); region i's DCs are a contiguous block of DC
	// indices. 0 reads as 1: one cluster, no mirror.
	Regions int
	// WANDelay is the one-way delay the mirror adds to every record between two regions
	// (--wan-delay).
	WANDelay time.Duration
	// OutDir receives report.json when set (--out).
	OutDir string
	// DeleteTopics names topics to delete at the end (the run's own, when processor replay chose
	// a fresh topic prefix).
	DeleteTopics bool
	// Out receives the progress lines and the report.
	Out io.Writer
	// Done, when set, receives the report before the application stops (tests).
	Done func(*Report)
}

// Validate reports the first option out of its range, naming it by its processor replay flag.
func (o Options) Validate() error {
	switch {
	case len(o.Requests) == 0:
		return errors.New("no request in the replayed window (--from, --window)")
	case !(o.Speedup > 0):
		return fmt.Errorf("--speedup %v is not positive", o.Speedup)
	case !(o.Compress > 0):
		return fmt.Errorf("--compress %v is not positive", o.Compress)
	case o.Seeds < 1:
		return fmt.Errorf("--seeds %d is not positive", o.Seeds)
	case o.Query != QueryKafka && o.Query != QueryHTTP:
		return fmt.Errorf("--query %q is neither %q nor %q", o.Query, QueryKafka, QueryHTTP)
	case o.QueryTimeout <= 0:
		return fmt.Errorf("--query-timeout %v is not positive", o.QueryTimeout)
	case o.ReadyTimeout <= 0:
		return fmt.Errorf("--ready-timeout %v is not positive", o.ReadyTimeout)
	case o.VisibleTimeout <= 0:
		return fmt.Errorf("--visible-timeout %v is not positive", o.VisibleTimeout)
	case o.Out == nil:
		return errors.New("no output for the report")
	case o.Regions < 0:
		return fmt.Errorf("--regions %d is negative", o.Regions)
	case o.WANDelay < 0:
		return fmt.Errorf("--wan-delay %v is negative", o.WANDelay)
	case o.regions() > 1 && o.ViaBridge:
		return fmt.Errorf("--regions %d with --via-bridge: the bridges write to one cluster; run the regions without --via-bridge", o.Regions)
	}
	for _, d := range o.Delays {
		if d < 0 {
			return fmt.Errorf("--delays: %v is negative", d)
		}
	}
	if err := o.Fleet.Validate(); err != nil {
		return err
	}
	if o.regions() > o.Fleet.DCs {
		return fmt.Errorf("--regions %d is above --dcs %d: every region holds at least one DC", o.Regions, o.Fleet.DCs)
	}
	if o.regions() > maxRegions {
		return fmt.Errorf("--regions %d is above %d", o.Regions, maxRegions)
	}
	return nil
}

// regions is the number of regions: Regions, or 1 when it is 0.
func (o Options) regions() int { return max(1, o.Regions) }

// Configure fills what the replay needs and cfg leaves open: the indexer domain (Domain) when
// none is set, one lane per simulated DC (appload.DefaultDCs on lanes 0..DCs-1; a configured
// lane map is replaced, since lane d must be DC d), and the filter size of the indexer and the
// relays (Options.ExpectedBlocks, or twice a DC's cache), with the relays on the indexer's seed.
func Configure(cfg *config.Config, o Options) {
	if cfg.Indexer.Domain == "" {
		cfg.Indexer.Domain, cfg.Indexer.DomainSource = Domain, "explicit"
	}
	cfg.Indexer.Lanes = config.LaneMap{}
	for i, dc := range appload.DefaultDCs(o.Fleet.DCs) {
		cfg.Indexer.Lanes[i] = dc
	}
	n := o.ExpectedBlocks
	if n == 0 {
		n = uint64(2 * o.Fleet.Workers * o.Fleet.CacheBlocks)
	}
	cfg.Indexer.BucketCount, cfg.Indexer.ExpectedBlocksPerDC = 0, n
	cfg.Relay.ExpectedBlocks, cfg.Relay.Seed = n, cfg.Indexer.Seed
	// The application's own components are region 0's: its remote lanes and regions.
	*cfg = regionConfig(*cfg, o, 0)
}

// Module returns the replay's components for app.New: the indexer, one relay and one
// worker-stage replica per lane, and the driver that replays the trace, reports and stops the
// application (exit status 0 when every request was placed and both stages answered some of
// their queries, 1 otherwise). cfg is the configuration after Configure.
func Module(cfg config.Config, o Options) fx.Option {
	if err := o.Validate(); err != nil {
		return fx.Error(fmt.Errorf("replay: %w", err))
	}
	r := &replay{cfg: cfg, opts: o, out: o.Out}
	return fx.Module("replay",
		fx.Provide(indexer.Provide),
		fx.Invoke(r.wireRelays),
		fx.Invoke(r.wireWorkers),
		fx.Invoke(func(lc fx.Lifecycle, ix *indexer.Indexer) error {
			r.ix, r.regions[0].ix = ix, ix
			if err := r.wireIndexers(lc); err != nil {
				return err
			}
			driver := r.driver()
			lc.Append(fx.Hook{OnStart: driver.Start, OnStop: driver.Stop})
			return nil
		}),
	)
}

type replay struct {
	cfg  config.Config
	opts Options
	out  io.Writer

	conn    *kafka.Connection
	log     *zap.Logger
	sd      fx.Shutdowner
	ix      *indexer.Indexer
	codec   *schemas.Codec
	relays  []*relay.LaneRelay       // every region's, by lane
	workers []*streamworkers.Replica // the worker stage: one replica per DC, by DC index
	dcs     []uint64                 // DC ids by DC index (= lane)
	// regions are the regions (one without --regions; region 0 is conn and ix), regionOf each
	// DC index's region, mirror the copies between them (nil in one region).
	regions  []*region
	regionOf []int
	mirror   *mirror
}

func (r *replay) kvTopic(dc uint64) string { return loadgen.KVTopic(r.cfg.Topics.KVEvents, dc) }

// wireRelays opens the regions (openRegions) and builds one relay per lane as app/demo does
// (relay.PerLane), on the cluster of the lane's region: processor relay's configuration for the
// lane's DC, reading the DC's own KV-events topic.
func (r *replay) wireRelays(lc fx.Lifecycle, conn *kafka.Connection, scope tally.Scope, log *zap.Logger, sd fx.Shutdowner) error {
	r.conn, r.log, r.sd = conn, log.Named("replay"), sd
	codec, err := conn.Codec()
	if err != nil {
		return err
	}
	r.codec = codec
	if err := r.openRegions(lc, conn); err != nil {
		return err
	}
	for _, reg := range r.regions {
		if reg.relays, err = relay.PerLane("replay", reg.relayConfig(), reg.conn, reg.codec, scope, log, r.kvTopic); err != nil {
			return err
		}
		r.relays = append(r.relays, reg.relays...)
	}
	slices.SortFunc(r.relays, func(a, b *relay.LaneRelay) int { return int(a.Lane) - int(b.Lane) })
	for _, lr := range r.relays {
		r.dcs = append(r.dcs, lr.Dc)
	}
	lc.Append(fx.StartHook(func(ctx context.Context) error {
		for _, reg := range r.regions {
			var names []string
			for _, d := range reg.dcs {
				names = append(names, r.kvTopic(r.dcs[d]))
			}
			if err := appload.EnsureTopics(ctx, reg.conn, names, appload.KVPartitions, nil); err != nil {
				return err
			}
		}
		return nil
	}))
	// Appended before the relays' hook, so it runs once they stopped.
	lc.Append(fx.StopHook(func(ctx context.Context) error {
		if r.opts.DeleteTopics {
			return r.deleteTopics(ctx)
		}
		return nil
	}))
	relay.RunPerLane(lc, "replay", r.relays, r.log, sd)
	return nil
}

// deleteTopics deletes the run's topics (every topic of the layout and the KV-events topics),
// when processor replay chose the topic prefix for this run alone.
func (r *replay) deleteTopics(ctx context.Context) error {
	var names []string
	for _, d := range r.regions[0].dcs {
		names = append(names, r.kvTopic(r.dcs[d]))
	}
	if err := r.conn.DeleteRunTopics(ctx, "replay-admin", names...); err != nil {
		return fmt.Errorf("replay: %w", err)
	}
	return nil
}

// driver runs drive from the application's start until its stop, then stops the application
// with drive's exit status. An interrupted drive is the application stopping already; Stop
// reports nothing of it but a stop that runs out of time.
func (r *replay) driver() *lifecycle.Group {
	return lifecycle.Driver("replay", "the driver", r.out, r.drive, func(code int) { _ = r.sd.Shutdown(fx.ExitCode(code)) })
}

// ready waits for every relay's start-up snapshot, every lane of every region's indexer and
// every DC's worker stage.
func (r *replay) ready(ctx context.Context) error {
	t0 := time.Now()
	if err := relay.AwaitStarted(ctx, r.relays, t0, r.opts.ReadyTimeout); err != nil {
		return err
	}
	for _, reg := range r.regions {
		if err := reg.ix.AwaitReady(ctx, t0, r.opts.ReadyTimeout); err != nil {
			if len(r.regions) > 1 {
				return fmt.Errorf("region %s: %w", reg.alias, err)
			}
			return err
		}
	}
	return r.workersReady(ctx, t0)
}
