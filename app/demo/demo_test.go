package demo_test

import (
	"io"
	"strings"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/app/config"
	"github.com/ckf-stream/ckf-stream/app/demo"
	"github.com/ckf-stream/ckf-stream/ckf"
	"go.uber.org/fx"
)

func validOptions() demo.Options {
	return demo.Options{DCs: 4, ExpectedBlocks: 1 << 16, TableEvery: time.Second, ReadyTimeout: time.Minute, HTTPSamples: 10, Out: io.Discard}
}

func TestOptionsValidate(t *testing.T) {
	if err := validOptions().Validate(); err != nil {
		t.Fatalf("valid options: %v", err)
	}
	for _, tc := range []struct {
		change func(*demo.Options)
		want   string
	}{
		{func(o *demo.Options) { o.DCs = 0 }, "--dcs 0 is not in [1,64]"},
		{func(o *demo.Options) { o.DCs = ckf.MaxLanes + 1 }, "--dcs 65 is not in [1,64]"},
		{func(o *demo.Options) { o.TableEvery = 0 }, "--table-every 0s is not positive"},
		{func(o *demo.Options) { o.ReadyTimeout = -time.Second }, "--ready-timeout -1s is not positive"},
		{func(o *demo.Options) { o.HTTPSamples = -1 }, "--http-samples -1 is negative"},
		{func(o *demo.Options) { o.Out = nil }, "no output"},
		{func(o *demo.Options) { o.Engines = -1 }, "--engines -1 is not in [0,16]"},
		{func(o *demo.Options) { o.Engines = 17 }, "--engines 17 is not in [0,16]"},
		{func(o *demo.Options) { o.Engines, o.EngineRate = 1, 0 }, "--engine-rate 0 is not positive"},
	} {
		o := validOptions()
		tc.change(&o)
		err := o.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", o, err, tc.want)
		}
		// The module refuses them too: the application fails to build instead of the demo
		// panicking on a zero ticker period later.
		app := fx.New(fx.NopLogger, demo.Module(config.Default(), o))
		if err := app.Err(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Module with %+v: %v", o, err)
		}
	}
}

func TestConfigure(t *testing.T) {
	// Nothing configured: the demo's domain, DCs 0xdc01.. on lanes 0..n-1, its filter size for
	// the indexer and the relays, the relays on the indexer's seed.
	cfg := config.Default()
	cfg.Indexer.BucketCount, cfg.Relay.Seed = 64, 99
	o := validOptions()
	o.DCs, o.ExpectedBlocks = 3, 4096
	demo.Configure(&cfg, o)
	if cfg.Indexer.Domain != demo.Domain || cfg.Indexer.DomainSource != "explicit" {
		t.Errorf("domain %q (%s)", cfg.Indexer.Domain, cfg.Indexer.DomainSource)
	}
	if want := (config.LaneMap{0: 0xdc01, 1: 0xdc02, 2: 0xdc03}); cfg.Indexer.Lanes.String() != want.String() {
		t.Errorf("lanes %v, want %v", cfg.Indexer.Lanes, want)
	}
	if cfg.Indexer.BucketCount != 0 || cfg.Indexer.ExpectedBlocksPerDC != 4096 || cfg.Relay.ExpectedBlocks != 4096 || cfg.Relay.Seed != cfg.Indexer.Seed {
		t.Errorf("sizing: indexer %+v, relay %+v", cfg.Indexer, cfg.Relay)
	}
	if err := cfg.Validate(); err != nil {
		t.Errorf("configured demo does not validate: %v", err)
	}
	// What the configuration sets is kept.
	cfg = config.Default()
	cfg.Indexer.Domain, cfg.Indexer.DomainSource = "c5000000000000000000000000000000:5c000000000000000000000000000000", "default_derived"
	cfg.Indexer.Lanes = config.LaneMap{7: 0x77}
	demo.Configure(&cfg, o)
	if cfg.Indexer.DomainSource != "default_derived" || cfg.Indexer.Domain == demo.Domain || len(cfg.Indexer.Lanes) != 1 || cfg.Indexer.Lanes[7] != 0x77 {
		t.Errorf("configured domain or lanes replaced: %+v", cfg.Indexer)
	}
	if _, err := cfg.Indexer.DomainID(); err != nil {
		t.Error(err)
	}
	if _, err := ckf.ParseIndexerDomainID(demo.Domain, ckf.IdentityExplicit); err != nil {
		t.Errorf("demo.Domain: %v", err)
	}
}
