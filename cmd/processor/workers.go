package main

import (
	"io"

	"github.com/ckf-stream/ckf-stream/app/config"
	"github.com/ckf-stream/ckf-stream/app/workers"
)

// runWorkers runs one replica of a DC's worker stage: its settings are checked before anything
// starts (workers.StreamsConfig).
func runWorkers(args []string, stdout, stderr io.Writer, lookupEnv func(string) (string, bool)) int {
	check := func(cfg config.Config) error { _, err := workers.StreamsConfig(cfg.Workers, cfg.Topics); return err }
	return runService("workers", workers.Module, check, args, stdout, stderr, lookupEnv)
}
