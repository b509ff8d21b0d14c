package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/ckf-stream/ckf-stream/app"
	"github.com/ckf-stream/ckf-stream/app/bridge"
	"github.com/ckf-stream/ckf-stream/app/config"
)

// runBridge runs the bridge of one engine worker (or of every engine bridge.engines_file lists)
// until a signal (graceful stop: the producer is
// flushed) or a fatal error (exit status 1).
func runBridge(args []string, stdout, stderr io.Writer, lookupEnv func(string) (string, bool)) int {
	cfg, code, ok := load(flag.NewFlagSet("bridge", flag.ContinueOnError), args, stdout, stderr, lookupEnv)
	if !ok {
		return code
	}
	if _, err := bridge.BridgeConfigs(cfg.Bridge, cfg.Topics); err != nil {
		if !errors.Is(err, config.ErrInvalid) {
			fmt.Fprintln(stderr, "processor: bridge:", err)
			return exitFailure
		}
		for _, line := range strings.Split(err.Error(), "\n") {
			fmt.Fprintln(stderr, "processor:", line)
		}
		return exitUsage
	}
	if code, ok := requireBrokers(cfg, "bridge", stderr); !ok {
		return code
	}
	code, err := app.Run(app.New(cfg, bridge.Module, logTo(stderr)))
	if err != nil {
		fmt.Fprintln(stderr, "processor: bridge:", err)
	}
	return code
}
