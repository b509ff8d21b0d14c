package main

import (
	"io"

	"github.com/ckf-stream/ckf-stream/app/config"
	"github.com/ckf-stream/ckf-stream/app/relay"
)

// runRelay runs one DC pool's relay (a graceful stop writes its last delta and a drain marker):
// its own requirements (its pool's domain, a lane the lane map gives to its DC) are checked
// before anything starts.
func runRelay(args []string, stdout, stderr io.Writer, lookupEnv func(string) (string, bool)) int {
	check := func(cfg config.Config) error {
		_, err := relay.StreamsConfig(cfg.Relay, cfg.Indexer, cfg.Topics)
		return err
	}
	return runService("relay", relay.Module, check, args, stdout, stderr, lookupEnv)
}
