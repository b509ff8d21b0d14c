// Command processor is ckf-stream's single binary. Usage:
//
//	processor <command> [flags]
//
// Commands:
//
//	demo          everything in one process: relays for 4 DCs, the indexer and the load
//	              generator, with a live lane table, sample answers and a closing summary; on
//	              the embedded broker when no Kafka cluster is configured
//	indexer       the global indexer: lanes, Kafka query service, HTTP API
//	relay         one DC pool's relay: KV events in, its CKF lane (snapshots, deltas) out
//	workers       one replica of a DC's worker stage: KV events in, per-worker answers out
//	              (POST /v1/worker-matches)
//	bridge        engines' KV events (vLLM, SGLang over ZeroMQ) into the KV-events topic: one
//	              engine, or the list bridge.engines_file names
//	loadgen       synthetic engines (KV events) and routers (queries), with a report
//	query         one prefix-match query over Kafka or HTTP, printed as per-DC depths
//	replay        a request trace through the whole pipeline, routed by the index, with the report
//	config print  print the effective configuration, secrets redacted (--format yaml|json)
//	help          this text; "help config" lists every setting with its variable, default,
//	              one-line description and the commands that use it
//	version       the version, commit and Go release
//
// With no command, processor prints this usage and exits with status 2. "processor <command>
// --help" prints the command's flags and the settings it reads, with descriptions;
// "processor --version" the version (set with -ldflags "-X main.version=...", else the build's
// module version and VCS stamp). Every command takes --config FILE and one flag per setting (see
// package app/config for the layering of file, environment and flags).
//
// Exit status: 0 on success or a signalled stop, 2 for a usage or configuration error, 1 for
// any other failure.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/ckf-stream/ckf-stream/app/config"
	"go.uber.org/fx"
	"go.uber.org/zap/zapcore"
)

// Exit statuses.
const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr, os.LookupEnv))
}

// run executes one command line and returns the exit status. lookupEnv reads the environment
// (os.LookupEnv in main), so tests can run commands in-process with an environment of their own.
func run(args []string, stdout, stderr io.Writer, lookupEnv func(string) (string, bool)) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		fmt.Fprintln(stderr, "\nprocessor: no command given (the demo is \"processor demo\", or make run)")
		return exitUsage
	}
	cmd, rest := args[0], args[1:]
	switch {
	case cmd == "-h" || cmd == "--help" || cmd == "-help":
		cmd, rest = "help", nil
	case cmd == "--version" || cmd == "-version" || cmd == "version" || wantsVersion(rest):
		fmt.Fprintln(stdout, versionString())
		return exitOK
	case strings.HasPrefix(cmd, "-"):
		fmt.Fprintf(stderr, "processor: %s before a command (try: processor help)\n", cmd)
		return exitUsage
	}
	switch cmd {
	case "demo":
		return runDemo(rest, stdout, stderr, lookupEnv)
	case "config":
		if len(rest) == 0 || rest[0] != "print" {
			fmt.Fprintln(stderr, "processor: config: want \"config print\" (try: processor help)")
			return exitUsage
		}
		return runConfigPrint(rest[1:], stdout, stderr, lookupEnv)
	case "indexer":
		return runIndexer(rest, stdout, stderr, lookupEnv)
	case "query":
		return runQuery(rest, stdout, stderr, lookupEnv)
	case "loadgen":
		return runLoadgen(rest, stdout, stderr, lookupEnv)
	case "relay":
		return runRelay(rest, stdout, stderr, lookupEnv)
	case "workers":
		return runWorkers(rest, stdout, stderr, lookupEnv)
	case "bridge":
		return runBridge(rest, stdout, stderr, lookupEnv)
	case "replay":
		return runReplay(rest, stdout, stderr, lookupEnv)
	case "help":
		switch {
		case len(rest) > 0 && rest[0] == "config":
			printConfigHelp(stdout)
		case len(rest) > 0 && knownCommand(rest[0]):
			return run([]string{rest[0], "--help"}, stdout, stderr, lookupEnv)
		default:
			fmt.Fprint(stdout, usage)
		}
		return exitOK
	default:
		fmt.Fprintf(stderr, "processor: unknown command %q (try: processor help)\n", cmd)
		return exitUsage
	}
}

const usage = `usage: processor <command> [--config FILE] [--<setting>=<value> ...]

commands:
  demo          relays for 4 DCs, the indexer and synthetic load in one process, with a live
                lane table and a summary; embedded broker when none is configured
                (--duration, --dcs, --event-rate, --query-rate, ...; see demo --help)
  indexer       the global indexer: lanes, Kafka query service, HTTP API (needs
                indexer.domain and indexer.lanes)
  relay         one DC pool's relay: KV events in, its CKF lane out
  workers       one replica of a DC's worker stage: the DC's KV events in, per-worker
                answers out (POST /v1/worker-matches; needs workers.dc_id, topics.kv_events)
  bridge        engines' KV events (vLLM, SGLang over ZeroMQ) into the KV-events topic: one
                engine, or the list bridge.engines_file names
  loadgen       synthetic engines and routers, then a report (see loadgen -h)
  query         one prefix-match query: --hashes H,... or --tokens T,... --block-size N,
                over Kafka, or --http URL; --workers --http URL asks a worker stage
  replay        a request trace (--trace FILE) through the whole pipeline, with the routing
                report of every policy (see replay --help, docs/EVALUATION.md)
  config print  print the effective configuration, secrets redacted [--format yaml|json]
  help [config] this text, or every setting with its variable, default, description
                and the commands that use it; help <command> is <command> --help
  version       the version, commit and Go release (also --version)

"processor <command> --help" lists the command's flags and the settings it reads, with their
descriptions.

Settings come from defaults < the --config file (YAML or JSON; or $CKF_CONFIG) < environment
(CKF_<PATH>, and KAFKA_BROKERS) < flags (--<path>=value).
`

// printConfigHelp lists every setting: its path (file key and flag name), its variables and
// default, then an indented line with its description and the commands that use it.
func printConfigHelp(w io.Writer) {
	fmt.Fprintln(w, "settings: file key and flag name, environment variables, default;")
	fmt.Fprintln(w, "then what the setting is, and [the commands that use it]. demo, indexer, relay and")
	fmt.Fprintln(w, "loadgen all create (or verify) every topic at start; a topic lists its readers and writers.")
	for _, f := range config.Fields() {
		def := f.Default
		if def == "" {
			def = `""`
		}
		fmt.Fprintf(w, "  %-38s %-44s %s\n", f.Path, strings.Join(f.Env, ", "), def)
		fmt.Fprintf(w, "      %s [%s]\n", f.Description, strings.Join(f.UsedBy, " "))
	}
}

// load parses the command's flags (its own, registered on fs by the caller, and the
// configuration's) and loads the configuration. On failure it reports to stderr and returns the
// exit status; ok is false, and cfg is the loaded configuration when only validation failed.
//
// --help (-h) prints the command's help (printCommandHelp) to stdout; a flag error prints the
// error and one line pointing to --help, never the whole flag list.
func load(fs *flag.FlagSet, args []string, stdout, stderr io.Writer, lookupEnv func(string) (string, bool)) (cfg config.Config, code int, ok bool) {
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	cfg, err := config.Load(config.Sources{Args: args, FlagSet: fs, LookupEnv: lookupEnv,
		Warn: func(msg string) { fmt.Fprintln(stderr, "processor: warning:", msg) }})
	var flagErr *config.FlagError
	switch {
	case errors.Is(err, flag.ErrHelp):
		printCommandHelp(stdout, fs)
		return cfg, exitOK, false
	case errors.As(err, &flagErr):
		fmt.Fprintf(stderr, "processor: %s: %v\n", fs.Name(), flagErr.Err)
		fmt.Fprintln(stderr, flagErrorHint(fs.Name()))
		return cfg, exitUsage, false
	case err != nil:
		for _, line := range strings.Split(err.Error(), "\n") {
			fmt.Fprintln(stderr, "processor:", line)
		}
		return cfg, exitUsage, false
	case fs.NArg() > 0:
		fmt.Fprintf(stderr, "processor: %s: unexpected argument %q\n", fs.Name(), fs.Arg(0))
		return cfg, exitUsage, false
	}
	return cfg, exitOK, true
}

func runConfigPrint(args []string, stdout, stderr io.Writer, lookupEnv func(string) (string, bool)) int {
	fs := flag.NewFlagSet("config print", flag.ContinueOnError)
	format := fs.String("format", "yaml", "output `format`: yaml or json")
	cfg, code, ok := load(fs, args, stdout, stderr, lookupEnv)
	if !ok && !loadedButInvalid(cfg) {
		return code
	}
	// An invalid configuration is still printed, before the exit status says it is invalid:
	// seeing what the layers added up to is how one finds the layer that set the bad value.
	out, err := cfg.Marshal(*format)
	if err != nil {
		fmt.Fprintln(stderr, "processor:", err)
		return exitUsage
	}
	if _, err := stdout.Write(out); err != nil {
		fmt.Fprintln(stderr, "processor:", err)
		return exitFailure
	}
	return code
}

// requireBrokers refuses to start cmd (indexer, relay, loadgen, bridge) without kafka.brokers: with none, the
// process would run on a private embedded broker that no other process can reach, and every
// other process of the deployment would wait for it in vain. Only demo runs on the embedded one.
func requireBrokers(cfg config.Config, cmd string, stderr io.Writer) (int, bool) {
	if len(cfg.Kafka.Brokers) > 0 {
		return exitOK, true
	}
	fmt.Fprintf(stderr, "processor: config: kafka.brokers: is required by %s (set KAFKA_BROKERS=host:port or --kafka.brokers); "+
		"only demo and replay run on an embedded in-process broker, which no other process can reach\n", cmd)
	return exitUsage, false
}

// loadedButInvalid reports whether load got as far as a whole configuration that then failed
// validation (Load returns it with the error), rather than failing to parse a file or flag: Load
// fills every topic name of a configuration it returns, and returns the zero Config otherwise.
func loadedButInvalid(cfg config.Config) bool { return cfg.Topics.Lanes != "" }

// logTo sends the process log to w (standard error in main; a buffer in tests).
func logTo(w io.Writer) fx.Option {
	return fx.Supply(fx.Annotate(zapcore.Lock(zapcore.AddSync(w)), fx.As(new(zapcore.WriteSyncer))))
}
