package main

import (
	"flag"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"

	"github.com/ckf-stream/ckf-stream/app/config"
)

// version is the release version, set at build time with
// -ldflags "-X main.version=v1.2.3" (make build sets it from git describe). Empty in a plain
// go build: versionString then uses the module version and the VCS stamp of the build info.
var version string

// versionString is what --version prints: the version, the commit (from the build's VCS stamp,
// "+dirty" for a modified tree) and the Go release and platform.
func versionString() string {
	v, rev, dirty := version, "", false
	if bi, ok := debug.ReadBuildInfo(); ok {
		if v == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			v = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
	}
	if v == "" {
		v = "devel"
	}
	commit := ""
	if rev != "" {
		commit = "commit " + rev[:min(len(rev), 12)]
		if dirty {
			commit += "+dirty"
		}
		commit += ", "
	}
	return fmt.Sprintf("processor %s (%s%s, %s/%s)", v, commit, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

// wantsVersion reports whether args (a command's arguments) ask for the version: --version or
// -version before a "--".
func wantsVersion(args []string) bool {
	for _, a := range args {
		switch a {
		case "--":
			return false
		case "--version", "-version":
			return true
		}
	}
	return false
}

// commandSummary is the first line of each command's help: what it does and what it needs.
var commandSummary = map[string]string{
	config.CommandDemo: "relays for several DCs, the global indexer and synthetic engines and routers in one process, " +
		"with a live lane table, sample answers and a closing summary; on the embedded in-process broker " +
		"when kafka.brokers is empty",
	config.CommandIndexer: "the global indexer: reads every lane of indexer.lanes, answers prefix-match queries over " +
		"Kafka (consumer group indexer.query_group, joined once the replica is ready) and HTTP; " +
		"needs indexer.domain, indexer.lanes and kafka.brokers",
	config.CommandRelay: "one DC pool's relay: reads the DC's KV-events topic (topics.kv_events) and publishes its " +
		"cuckoo-filter lane (relay.lane); needs indexer.domain, relay.dc_id, relay.lane and kafka.brokers (indexer.lanes, when given, is checked against them)",
	config.CommandWorkers: "one replica of a DC's worker stage: reads the DC's KV-events topic (topics.kv_events) into the " +
		"worker-level index, restores from and writes checkpoints (workers.checkpoint_topic), answers POST /v1/worker-matches; " +
		"needs workers.dc_id and kafka.brokers",
	config.CommandBridge: "engines' KV events (vLLM, SGLang over ZeroMQ) into the KV-events topic: the engine of " +
		"bridge.endpoint, or every engine bridge.engines_file lists; needs kafka.brokers",
	config.CommandReplay: "a request trace (--trace FILE) through the whole pipeline in one process, routed by the " +
		"index, the oracles and the baselines, then the report (docs/EVALUATION.md); on the embedded broker " +
		"when kafka.brokers is empty",
	config.CommandLoadgen: "synthetic engines (KV events on <topics.kv_events>.dc-<DC>) and routers (queries), then a report",
	config.CommandQuery:   "one prefix-match query over Kafka, or --http URL, printed as per-DC depths",
}

// printCommandHelp writes a command's help: its summary, its own flags, then every setting the
// command reads (config.Fields' UsedBy) with its flag, variable, default and description. The
// settings other commands read are left out; "processor help config" lists them all.
func printCommandHelp(w io.Writer, fs *flag.FlagSet) {
	name := fs.Name()
	fmt.Fprintf(w, "usage: processor %s [--config FILE] [flags] [--<setting>=<value> ...]\n\n", name)
	if s, ok := commandSummary[name]; ok {
		fmt.Fprintf(w, "%s.\n\n", s)
	}
	settings := map[string]bool{"config": true}
	for _, f := range config.Fields() {
		settings[f.Path] = true
	}
	var own []*flag.Flag
	fs.VisitAll(func(f *flag.Flag) {
		if !settings[f.Name] {
			own = append(own, f)
		}
	})
	if len(own) > 0 {
		fmt.Fprintf(w, "flags of %s:\n", name)
		for _, f := range own {
			arg, usage := flag.UnquoteUsage(f)
			head := "--" + f.Name
			if arg != "" {
				head += " " + arg
			}
			def := ""
			if f.DefValue != "" && f.DefValue != "0" && f.DefValue != "false" {
				def = " (default " + f.DefValue + ")"
			}
			fmt.Fprintf(w, "  %-28s %s%s\n", head, usage, def)
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "settings %s reads (flag --<setting>=value, variable, default):\n", name)
	fmt.Fprintf(w, "  %-28s %s\n", "--config FILE", "YAML or JSON configuration file (else $"+config.EnvConfigFile+")")
	for _, f := range config.Fields() {
		if !slices.Contains(f.UsedBy, name) {
			continue
		}
		def := f.Default
		if def == "" {
			def = `""`
		}
		fmt.Fprintf(w, "  %-38s %s, default %s\n      %s\n", f.Path, strings.Join(f.Env, " or "), def, f.Description)
	}
	fmt.Fprintf(w, "\nSettings come from defaults < --config file < environment < flags. "+
		"\"processor help config\" lists the settings of every command; \"processor --version\" prints the version.\n")
}

// knownCommand reports whether name is a command with a flag set of its own (help <command>).
func knownCommand(name string) bool {
	_, ok := commandSummary[name]
	return ok
}

// flagErrorHint is the line after a flag error, pointing to the command's help.
func flagErrorHint(name string) string {
	return fmt.Sprintf("processor: run %q for the flags and settings of %s", "processor "+name+" --help", name)
}
