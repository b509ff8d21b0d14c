package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/ckf-stream/ckf-stream/app"
	"github.com/ckf-stream/ckf-stream/app/replay"
	"github.com/ckf-stream/ckf-stream/eval"
)

// replayUsage is processor replay's description (processor replay -h prints it before the flags).
const replayUsage = `usage: processor replay --trace FILE [flags] [--<setting>=<value> ...]

Replays a request trace (JSON lines {timestamp, input_length, output_length, hash_ids}, as the
Mooncake traces of traces/) through a simulated fleet and the real pipeline, and reports what
each routing policy gains: ckf live in two stages (its KV events through relays, lanes and the
indexer, which choose the DC, and through each DC's worker stage, which chooses the worker), the
oracles, load, round-robin and random simulated on the same requests. docs/EVALUATION.md has
the method. --regions N splits the DCs over N regions, each on an embedded cluster of its own with
the lanes mirrored between them (docs/regions.md), and reports each region's answers, local and
remote event-to-visible latency and the bytes crossing the WAN. Without topic_prefix set (flag or CKF_TOPIC_PREFIX) the run uses topics of its own,
deleted at the end. --simulate-only runs the simulated policies alone, without a broker. Flags:
`

// runReplay parses processor replay's flags and configuration, reads the trace and runs the
// replay (package app/replay).
func runReplay(args []string, stdout, stderr io.Writer, lookupEnv func(string) (string, bool)) int {
	fs := flag.NewFlagSet("replay", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), replayUsage)
		fs.PrintDefaults()
	}
	o := replay.Options{Out: stdout, Fleet: eval.DefaultConfig()}
	trace := fs.String("trace", "", "the trace `file` (JSON lines); required")
	fs.DurationVar(&o.From, "from", 0, "replay the trace from this long after its first request")
	fs.DurationVar(&o.Window, "window", 0, "replay this much trace time (0: to the end)")
	fs.Float64Var(&o.Speedup, "speedup", 1, "run the live replay this many times faster than real time (the simulated fleet does the same work)")
	fs.Float64Var(&o.Compress, "compress", 1, "divide the trace's arrival times by this factor: the same requests in less time, a busier fleet")
	fs.IntVar(&o.Fleet.DCs, "dcs", o.Fleet.DCs, "simulated DCs (one relay and lane each), 1..64")
	fs.IntVar(&o.Fleet.Workers, "workers", o.Fleet.Workers, "simulated workers per DC")
	fs.IntVar(&o.Fleet.CacheBlocks, "cache-blocks", o.Fleet.CacheBlocks, "KV cache of one worker in blocks")
	fs.IntVar(&o.Fleet.BlockTokens, "block-tokens", o.Fleet.BlockTokens, "tokens per block of the trace's hash ids")
	fs.Float64Var(&o.Fleet.PrefillRate, "prefill-rate", o.Fleet.PrefillRate, "prefill tokens per second of one worker")
	fs.Float64Var(&o.Fleet.DecodeRate, "decode-rate", o.Fleet.DecodeRate, "decode tokens per second of one request")
	fs.Float64Var(&o.Fleet.LoadWeight, "load-weight", o.Fleet.LoadWeight, "λ: weight of a DC's mean queue against its uncached prefill in the ckf cost")
	cold := fs.Bool("cold", false, "start the live run and the headline from empty caches (default: warm, the trace's shared prefix on every worker)")
	fs.Uint64Var(&o.Fleet.Seed, "seed", 1, "seed of the random choices (ties, the random policy); seeds seed.. seed+seeds-1 for the simulated policies")
	fs.IntVar(&o.Seeds, "seeds", 3, "seeds of every simulated policy (the seed-to-seed spread)")
	delays := fs.String("delays", "1s,10s,60s", "injected visibility delays (trace time) of the simulated stale-index ckf runs, comma-separated (10ms, 1s, ...); empty for none")
	simulateOnly := fs.Bool("simulate-only", false, "run the simulated policies and stale-index runs alone: no pipeline, no broker, no live run")
	fs.StringVar(&o.Query, "query", replay.QueryKafka, "the ckf router's path to the indexer: kafka or http")
	fs.BoolVar(&o.ViaBridge, "via-bridge", false, "send the engines' KV events through processor bridge's path: vLLM's ZeroMQ protocol on loopback sockets, one bridge per worker")
	fs.DurationVar(&o.QueryTimeout, "query-timeout", time.Second, "bound on one query; a request whose query fails is placed by load alone (and counted)")
	fs.Uint64Var(&o.ExpectedBlocks, "expected-blocks", 0, "expected blocks per DC: sizes every filter (0: twice a DC's cache blocks)")
	fs.DurationVar(&o.ReadyTimeout, "ready-timeout", 60*time.Second, "give up when the lanes are not ready after this long")
	fs.DurationVar(&o.VisibleTimeout, "visible-timeout", 10*time.Second, "count a KV event as never seen when the index does not show it after this long")
	fs.IntVar(&o.Regions, "regions", 1, "split the DCs over this many regions, each its own embedded Kafka cluster, the lanes mirrored between them (docs/regions.md); above 1 needs no kafka.brokers")
	fs.DurationVar(&o.WANDelay, "wan-delay", 0, "one-way delay the mirror adds between two regions (with --regions)")
	fs.StringVar(&o.OutDir, "out", "", "write report.json into this `directory` (tools/evalplots draws the plots from it)")

	ownTopics := !settingSet(args, lookupEnv, "topic_prefix")
	if ownTopics {
		args = append([]string{"--topic_prefix=ckf-replay-" + strconv.FormatInt(time.Now().UnixNano(), 36) + "."}, args...)
	}
	if !settingSet(args, lookupEnv, "http.listen") {
		// The process's own HTTP server (health, metrics) on a port of the system's choosing:
		// a replay is a batch job, and must not fail on a port another process holds.
		args = append([]string{"--http.listen=127.0.0.1:0"}, args...)
	}
	cfg, code, ok := load(fs, args, stdout, stderr, lookupEnv)
	if !ok {
		return code
	}
	o.DeleteTopics = ownTopics
	o.Fleet.Warm = !*cold
	if *trace == "" {
		fmt.Fprintln(stderr, "processor: replay: --trace is required")
		return exitUsage
	}
	for _, s := range strings.Split(*delays, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		d, err := time.ParseDuration(s)
		if err != nil {
			fmt.Fprintf(stderr, "processor: replay: --delays: %v\n", err)
			return exitUsage
		}
		o.Delays = append(o.Delays, d)
	}
	f, err := os.Open(*trace)
	if err != nil {
		fmt.Fprintln(stderr, "processor: replay:", err)
		return exitUsage
	}
	reqs, st, err := eval.ReadTrace(f)
	_ = f.Close()
	if err != nil {
		var te *eval.TraceError
		if errors.As(err, &te) {
			fmt.Fprintf(stderr, "processor: replay: %s: %v\n", *trace, err)
			return exitUsage
		}
		fmt.Fprintln(stderr, "processor: replay:", err)
		return exitFailure
	}
	reqs = eval.Window(reqs, float64(o.From.Milliseconds()), float64(o.Window.Milliseconds()))
	if o.Compress > 0 {
		for i := range reqs {
			reqs[i].Time /= o.Compress
		}
	}
	o.Trace, o.Requests, o.Stats = *trace, reqs, st
	if err := o.Validate(); err != nil {
		fmt.Fprintln(stderr, "processor: replay:", err)
		return exitUsage
	}
	if *simulateOnly {
		if _, err := replay.Simulate(o); err != nil {
			fmt.Fprintln(stderr, "processor: replay:", err)
			return exitFailure
		}
		return exitOK
	}
	if o.Regions > 1 && len(cfg.Kafka.Brokers) > 0 {
		fmt.Fprintln(stderr, "processor: replay:", replay.ErrRegionsNeedEmbedded)
		return exitUsage
	}
	replay.Configure(&cfg, o)
	if !logLevelSet(args, lookupEnv) {
		cfg.Log.Level = "warn"
	}
	if code, ok := checkIndexerConfig(cfg.Indexer, stderr); !ok {
		return code
	}
	code, err = app.Run(app.New(cfg, replay.Module(cfg, o), logTo(stderr)))
	if err != nil {
		fmt.Fprintln(stderr, "processor: replay:", err)
	}
	return code
}

// settingSet reports whether the setting at path (topic_prefix, http.listen) is set by its
// variable (CKF_<PATH>) or a flag.
func settingSet(args []string, lookupEnv func(string) (string, bool), path string) bool {
	env := "CKF_" + strings.ToUpper(strings.ReplaceAll(path, ".", "_"))
	if v, ok := lookupEnv(env); ok && v != "" {
		return true
	}
	for _, a := range args {
		if strings.HasPrefix(strings.TrimLeft(a, "-"), path) {
			return true
		}
	}
	return false
}
