package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/ckf-stream/ckf-stream/app"
	"github.com/ckf-stream/ckf-stream/app/config"
	"go.uber.org/fx"
)

// runService runs one of the long-running commands (indexer, relay, bridge, workers) until a
// signal (a graceful stop: the component drains, flushes and commits) or a fatal error (exit
// status 1): it loads the configuration, applies the component's own rules (check) before
// anything starts, refuses to start without kafka.brokers, and runs the application of module.
func runService(cmd string, module fx.Option, check func(config.Config) error, args []string, stdout, stderr io.Writer, lookupEnv func(string) (string, bool)) int {
	cfg, code, ok := load(flag.NewFlagSet(cmd, flag.ContinueOnError), args, stdout, stderr, lookupEnv)
	if !ok {
		return code
	}
	if err := check(cfg); err != nil {
		return refused(cmd, err, stderr)
	}
	if code, ok := requireBrokers(cfg, cmd, stderr); !ok {
		return code
	}
	code, err := app.Run(app.New(cfg, module, logTo(stderr)))
	if err != nil {
		fmt.Fprintf(stderr, "processor: %s: %v\n", cmd, err)
	}
	return code
}

// refused reports err, a component's refusal of its configuration before anything started,
// and returns the exit status: a configuration error (config.ErrInvalid) line by line, naming
// the setting, with status 2; anything else with status 1.
func refused(cmd string, err error, stderr io.Writer) int {
	if !errors.Is(err, config.ErrInvalid) {
		fmt.Fprintf(stderr, "processor: %s: %v\n", cmd, err)
		return exitFailure
	}
	for _, line := range strings.Split(err.Error(), "\n") {
		fmt.Fprintln(stderr, "processor:", line)
	}
	return exitUsage
}
