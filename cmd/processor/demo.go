package main

import (
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/ckf-stream/ckf-stream/app"
	"github.com/ckf-stream/ckf-stream/app/demo"
)

// runDemo parses processor demo's flags and configuration and runs the demo (package app/demo).
func runDemo(args []string, stdout, stderr io.Writer, lookupEnv func(string) (string, bool)) int {
	var lf loadFlags
	o := demo.Options{Out: stdout}
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	lf.register(fs, 30*time.Second, 5000, 500)
	fs.IntVar(&o.DCs, "dcs", 4, "DCs (one relay each, on lanes 0..n-1) when indexer.lanes is not set, 1..64")
	fs.Uint64Var(&o.ExpectedBlocks, "expected-blocks", 1<<16, "expected blocks per DC: sizes every filter (indexer and relays)")
	fs.DurationVar(&o.TableEvery, "table-every", 3*time.Second, "print the lane table and sample answers this often")
	fs.DurationVar(&o.ReadyTimeout, "ready-timeout", 60*time.Second, "give up when the lanes are not ready after this long")
	fs.IntVar(&o.HTTPSamples, "http-samples", 2000, "sequential queries of the closing HTTP latency measurement (0: none)")
	fs.IntVar(&o.Engines, "engines", 0, "built-in engine emulators per DC, each feeding its DC through a bridge (vLLM's ZeroMQ protocol), 0..16")
	fs.Float64Var(&o.EngineRate, "engine-rate", 100, "batches per second each built-in engine publishes")
	// On a real broker, which other processes may use (the README's relay and indexer among
	// them), the demo takes topics of its own, deleted at the end, unless topic_prefix is set:
	// on the default names its relays would meet lanes another pool owns.
	ownTopics := (settingSet(args, lookupEnv, "kafka.brokers") || envSet(lookupEnv, "KAFKA_BROKERS")) && !settingSet(args, lookupEnv, "topic_prefix")
	if ownTopics {
		args = append([]string{"--topic_prefix=ckf-demo-" + strconv.FormatInt(time.Now().UnixNano(), 36) + "."}, args...)
	}
	cfg, code, ok := load(fs, args, stdout, stderr, lookupEnv)
	if !ok {
		return code
	}
	if err := lf.validate(); err != nil {
		fmt.Fprintln(stderr, "processor: demo:", err)
		return exitUsage
	}
	if err := o.Validate(); err != nil {
		fmt.Fprintln(stderr, "processor: demo:", err)
		return exitUsage
	}
	o.Load = lf.runConfig(nil)
	o.DeleteTopics = ownTopics
	if ownTopics {
		fmt.Fprintf(stdout, "demo: on the broker at %s, on topics of its own (prefix %s), deleted at the end; set topic_prefix to choose and keep them\n",
			strings.Join(cfg.Kafka.Brokers, ","), cfg.TopicPrefix)
	}
	demo.Configure(&cfg, o)
	// A quieter log (warnings and errors) unless log.level is set by variable or flag, so that
	// the live table stays readable.
	if !logLevelSet(args, lookupEnv) {
		cfg.Log.Level = "warn"
	}
	if code, ok := checkIndexerConfig(cfg.Indexer, stderr); !ok {
		return code
	}
	code, err := app.Run(app.New(cfg, demo.Module(cfg, o), logTo(stderr)))
	if err != nil {
		fmt.Fprintln(stderr, "processor: demo:", err)
	}
	return code
}

// logLevelSet reports whether log.level is set by the environment or a flag (a file's setting
// is the demo's to override).
func logLevelSet(args []string, lookupEnv func(string) (string, bool)) bool {
	if v, ok := lookupEnv("CKF_LOG_LEVEL"); ok && v != "" {
		return true
	}
	for _, a := range args {
		if strings.HasPrefix(strings.TrimLeft(a, "-"), "log.level") {
			return true
		}
	}
	return false
}

// envSet reports whether the variable name is set to a non-empty value.
func envSet(lookupEnv func(string) (string, bool), name string) bool {
	v, ok := lookupEnv(name)
	return ok && v != ""
}
