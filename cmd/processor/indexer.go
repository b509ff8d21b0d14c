package main

import (
	"io"

	"github.com/ckf-stream/ckf-stream/app/config"
	"github.com/ckf-stream/ckf-stream/app/indexer"
	"github.com/ckf-stream/ckf-stream/ckf"
)

// runIndexer runs the global indexer: its lane map and manifest are checked before anything
// starts (checkIndexer).
func runIndexer(args []string, stdout, stderr io.Writer, lookupEnv func(string) (string, bool)) int {
	return runService("indexer", indexer.Module, func(cfg config.Config) error { return checkIndexer(cfg.Indexer) },
		args, stdout, stderr, lookupEnv)
}

// checkIndexer applies the indexer's own requirements (a domain, at least one lane, a manifest
// ckf accepts), so that a configuration error exits with status 2 and a message naming the
// field, like every other configuration error.
func checkIndexer(ix config.Indexer) error {
	_, _, err := indexer.BuildManifest(ix, ckf.ConsumerInstanceID(max(ix.ConsumerInstanceID, 1)))
	return err
}

// checkIndexerConfig is checkIndexer for the commands that run an indexer in process (demo,
// replay): it reports a refusal and returns the exit status.
func checkIndexerConfig(ix config.Indexer, stderr io.Writer) (int, bool) {
	if err := checkIndexer(ix); err != nil {
		return refused("indexer", err, stderr), false
	}
	return exitOK, true
}
