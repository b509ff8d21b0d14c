package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/ckf-stream/ckf-stream/app"
	"github.com/ckf-stream/ckf-stream/app/config"
	"github.com/ckf-stream/ckf-stream/app/indexer"
	"github.com/ckf-stream/ckf-stream/ckf"
)

func runIndexer(args []string, stdout, stderr io.Writer, lookupEnv func(string) (string, bool)) int {
	cfg, code, ok := load(flag.NewFlagSet("indexer", flag.ContinueOnError), args, stdout, stderr, lookupEnv)
	if !ok {
		return code
	}
	if code, ok := checkIndexerConfig(cfg.Indexer, stderr); !ok {
		return code
	}
	if code, ok := requireBrokers(cfg, "indexer", stderr); !ok {
		return code
	}
	code, err := app.Run(app.New(cfg, indexer.Module, logTo(stderr)))
	if err != nil {
		fmt.Fprintln(stderr, "processor: indexer:", err)
	}
	return code
}

// checkIndexerConfig applies the indexer's own requirements (a domain, at least one lane, a
// manifest ckf accepts) before anything starts, so that a configuration error exits with
// status 2 and a message naming the field, like every other configuration error.
func checkIndexerConfig(ix config.Indexer, stderr io.Writer) (int, bool) {
	_, _, err := indexer.BuildManifest(ix, ckf.ConsumerInstanceID(max(ix.ConsumerInstanceID, 1)))
	if err == nil {
		return exitOK, true
	}
	if !errors.Is(err, config.ErrInvalid) {
		fmt.Fprintln(stderr, "processor: indexer:", err)
		return exitFailure, false
	}
	for _, line := range strings.Split(err.Error(), "\n") {
		fmt.Fprintln(stderr, "processor:", line)
	}
	return exitUsage, false
}
