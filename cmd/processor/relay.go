package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/ckf-stream/ckf-stream/app"
	"github.com/ckf-stream/ckf-stream/app/config"
	"github.com/ckf-stream/ckf-stream/app/relay"
)

// runRelay runs one DC pool's relay until a signal (graceful stop: last delta and drain marker)
// or a fatal error (exit status 1).
func runRelay(args []string, stdout, stderr io.Writer, lookupEnv func(string) (string, bool)) int {
	cfg, code, ok := load(flag.NewFlagSet("relay", flag.ContinueOnError), args, stdout, stderr, lookupEnv)
	if !ok {
		return code
	}
	if code, ok := checkRelayConfig(cfg, stderr); !ok {
		return code
	}
	if code, ok := requireBrokers(cfg, "relay", stderr); !ok {
		return code
	}
	code, err := app.Run(app.New(cfg, relay.Module, logTo(stderr)))
	if err != nil {
		fmt.Fprintln(stderr, "processor: relay:", err)
	}
	return code
}

// checkRelayConfig applies the relay's own requirements (its pool's domain, a lane the lane map
// gives to its DC) before anything starts, so that a configuration error exits with status 2
// and a message naming the field.
func checkRelayConfig(cfg config.Config, stderr io.Writer) (int, bool) {
	_, err := relay.StreamsConfig(cfg.Relay, cfg.Indexer, cfg.Topics)
	if err == nil {
		return exitOK, true
	}
	if !errors.Is(err, config.ErrInvalid) {
		fmt.Fprintln(stderr, "processor: relay:", err)
		return exitFailure, false
	}
	for _, line := range strings.Split(err.Error(), "\n") {
		fmt.Fprintln(stderr, "processor:", line)
	}
	return exitUsage, false
}
