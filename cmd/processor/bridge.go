package main

import (
	"io"

	"github.com/ckf-stream/ckf-stream/app/bridge"
	"github.com/ckf-stream/ckf-stream/app/config"
)

// runBridge runs the bridge of one engine worker (or of every engine bridge.engines_file lists):
// the bridge library's rules are checked before anything starts (bridge.BridgeConfigs).
func runBridge(args []string, stdout, stderr io.Writer, lookupEnv func(string) (string, bool)) int {
	check := func(cfg config.Config) error { _, err := bridge.BridgeConfigs(cfg.Bridge, cfg.Topics); return err }
	return runService("bridge", bridge.Module, check, args, stdout, stderr, lookupEnv)
}
