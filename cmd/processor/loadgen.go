package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/ckf-stream/ckf-stream/app"
	appload "github.com/ckf-stream/ckf-stream/app/loadgen"
	"github.com/ckf-stream/ckf-stream/loadgen"
	"go.uber.org/fx"
)

// loadFlags are the load flags processor loadgen and processor demo share.
type loadFlags struct {
	eventRate, queryRate float64
	duration             time.Duration
	seed                 uint64
	workers              int
	blockSize            int
	routers              int
	namespace            string
}

func (f *loadFlags) register(fs *flag.FlagSet, duration time.Duration, eventRate, queryRate float64) {
	fs.Float64Var(&f.eventRate, "event-rate", eventRate, "KV events per second over all DCs (0: none)")
	fs.Float64Var(&f.queryRate, "query-rate", queryRate, "queries per second over all routers (0: none)")
	fs.DurationVar(&f.duration, "duration", duration, "run this long (0: until interrupted)")
	fs.Uint64Var(&f.seed, "seed", 1, "workload seed: the same seed gives the same event stream")
	fs.IntVar(&f.workers, "workers", 4, "engine workers per DC")
	fs.IntVar(&f.blockSize, "block-size", 16, "tokens per KV block")
	fs.IntVar(&f.routers, "routers", 32, "queries in flight at most")
	fs.StringVar(&f.namespace, "namespace", "", "cache namespace salting every block and token query (default: one of this run's own, loadgen-<id>, so no earlier run's state answers its queries)")
}

func (f *loadFlags) validate() error {
	switch {
	case f.eventRate < 0 || f.queryRate < 0:
		return errors.New("--event-rate and --query-rate must not be negative")
	case f.duration < 0:
		return errors.New("--duration must not be negative")
	case f.workers < 1 || f.routers < 1:
		return errors.New("--workers and --routers must be at least 1")
	case f.blockSize < 1 || f.blockSize > 1<<16:
		return errors.New("--block-size must be in [1,65536]")
	}
	return nil
}

func (f *loadFlags) runConfig(dcs []uint64) loadgen.RunConfig {
	return loadgen.RunConfig{
		Workload:  loadgen.Config{Seed: f.seed, DCs: dcs, WorkersPerDC: f.workers, BlockSize: f.blockSize, Namespace: f.namespace},
		EventRate: f.eventRate, QueryRate: f.queryRate, Duration: f.duration, Routers: f.routers,
	}
}

func runLoadgen(args []string, stdout, stderr io.Writer, lookupEnv func(string) (string, bool)) int {
	var lf loadFlags
	fs := flag.NewFlagSet("loadgen", flag.ContinueOnError)
	lf.register(fs, 30*time.Second, 2000, 200)
	dcList := fs.String("dcs", "", "comma-separated DC `ids` of the engines (default: the DCs of indexer.lanes, else 0xdc01..0xdc04)")
	httpURL := fs.String("http", "", "send the queries to the indexer at this `URL` (http://host:port) instead of over Kafka")
	perDC := fs.String("kv-topic-per-dc", "auto", "send DC d's events to <topics.kv_events>.dc-<d in hex> (true), to topics.kv_events (false), or per DC when there are several (auto)")
	progress := fs.Duration("progress", time.Second, "print a progress line this often")
	var httpCreds httpClientFlags
	httpCreds.register(fs)
	cfg, code, ok := load(fs, args, stdout, stderr, lookupEnv)
	if !ok {
		return code
	}
	if err := lf.validate(); err != nil {
		fmt.Fprintln(stderr, "processor: loadgen:", err)
		return exitUsage
	}
	namespaceGiven := false
	fs.Visit(func(fl *flag.Flag) { namespaceGiven = namespaceGiven || fl.Name == "namespace" })
	if !namespaceGiven {
		// A namespace of this run's own: an earlier run's blocks on the same lanes (the same seed
		// gives the same prompts) cannot answer this run's queries, so a hit is this run's.
		lf.namespace = "loadgen-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	}
	if code, ok := requireBrokers(cfg, "loadgen", stderr); !ok {
		return code
	}
	fmt.Fprintf(stdout, "loadgen: blocks salted with the cache namespace %q (--namespace)\n", lf.namespace)
	dcs := appload.DefaultDCs(4)
	if len(cfg.Indexer.Lanes) > 0 {
		dcs = dcs[:0]
		for _, l := range cfg.Indexer.Lanes.Lanes() {
			dcs = append(dcs, cfg.Indexer.Lanes[l])
		}
	}
	if *dcList != "" {
		var err error
		if dcs, err = parseList(*dcList, 64); err != nil {
			fmt.Fprintln(stderr, "processor: loadgen: --dcs:", err)
			return exitUsage
		}
	}
	opts := appload.Options{Run: lf.runConfig(dcs), HTTP: *httpURL, Out: stdout}
	if *httpURL != "" {
		cl, err := httpCreds.client(10 * time.Second)
		if err != nil {
			fmt.Fprintln(stderr, "processor: loadgen:", err)
			return exitUsage
		}
		opts.HTTPClient = cl
	}
	opts.Run.Progress, opts.Run.ProgressInterval = stdout, *progress
	switch *perDC {
	case "auto":
		opts.TopicPerDC = len(dcs) > 1
	case "true":
		opts.TopicPerDC = true
	case "false":
	default:
		fmt.Fprintf(stderr, "processor: loadgen: --kv-topic-per-dc %q is not one of auto, true, false\n", *perDC)
		return exitUsage
	}
	// An indexer on this machine likely holds the default port, or the one a deployment's shared
	// configuration file gives (one file may serve every process): serve /metrics on a free one
	// unless http.listen is given to this command itself, by its flag or variable.
	if !settingSet(args, lookupEnv, "http.listen") {
		cfg.HTTP.Listen = "127.0.0.1:0"
	}
	code, err := app.Run(app.New(cfg, fx.Supply(opts), appload.Module, logTo(stderr)))
	if err != nil {
		fmt.Fprintln(stderr, "processor: loadgen:", err)
	}
	return code
}
