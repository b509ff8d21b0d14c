package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/ckf-stream/ckf-stream/app"
	"github.com/ckf-stream/ckf-stream/app/config"
	"github.com/ckf-stream/ckf-stream/app/workers"
)

// runWorkers runs one replica of a DC's worker stage until a signal or a fatal error (exit
// status 1).
func runWorkers(args []string, stdout, stderr io.Writer, lookupEnv func(string) (string, bool)) int {
	cfg, code, ok := load(flag.NewFlagSet("workers", flag.ContinueOnError), args, stdout, stderr, lookupEnv)
	if !ok {
		return code
	}
	if _, err := workers.StreamsConfig(cfg.Workers, cfg.Topics); err != nil {
		if !errors.Is(err, config.ErrInvalid) {
			fmt.Fprintln(stderr, "processor: workers:", err)
			return exitFailure
		}
		for _, line := range strings.Split(err.Error(), "\n") {
			fmt.Fprintln(stderr, "processor:", line)
		}
		return exitUsage
	}
	if code, ok := requireBrokers(cfg, "workers", stderr); !ok {
		return code
	}
	code, err := app.Run(app.New(cfg, workers.Module, logTo(stderr)))
	if err != nil {
		fmt.Fprintln(stderr, "processor: workers:", err)
	}
	return code
}
