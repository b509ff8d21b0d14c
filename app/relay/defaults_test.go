package relay_test

import (
	"testing"

	"github.com/ckf-stream/ckf-stream/app/kafka"
	"github.com/ckf-stream/ckf-stream/app/relay"
	streamrelay "github.com/ckf-stream/ckf-stream/streams/relay"
	"github.com/ckf-stream/ckf-stream/testenv"
)

// TestDefaultsAreStreams: the relay section's defaults, converted by StreamsConfig, are
// streamrelay.DefaultRelayConfig field by field, except the fields that have no streams default (the
// topics, the pool, the lane and its map) and the filter size, which the deployment chooses:
// every relay default (snapshot triggers, idle interval, heartbeat, publication delay and
// cadence, seed, and the timers the configuration does not expose) has one value.
func TestDefaultsAreStreams(t *testing.T) {
	cfg := load(t, "--indexer.domain="+domain, "--relay.dc_id=0x2a", "--relay.lane=3")
	sc, err := relay.StreamsConfig(cfg.Relay, cfg.Indexer, cfg.Topics)
	if err != nil {
		t.Fatal(err)
	}
	want := streamrelay.DefaultRelayConfig()
	want.Topics, want.Pool, want.Lane, want.LaneOwners = sc.Topics, sc.Pool, sc.Lane, sc.LaneOwners
	want.CKF.ExpectedBlocksPerDC = cfg.Relay.ExpectedBlocks
	for _, d := range testenv.FieldDiffs(sc, want, "configuration", "streams") {
		t.Error(d)
	}
	codec, err := kafka.NewCodec(cfg.Topics)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := streamrelay.NewRelay(streamrelay.RelayParams{Config: sc, Codec: codec}); err != nil {
		t.Fatalf("the default configuration's relay: %v", err)
	}
}

// TestSeedZeroIsKept: relay.seed=0 is seed 0 for the relay, as indexer.seed=0 is for the
// indexers (streams once read a zero seed as "the default seed", which made such a relay's
// format differ from its indexers').
func TestSeedZeroIsKept(t *testing.T) {
	cfg := load(t, "--indexer.domain="+domain, "--relay.dc_id=0x2a", "--relay.seed=0")
	sc, err := relay.StreamsConfig(cfg.Relay, cfg.Indexer, cfg.Topics)
	if err != nil {
		t.Fatal(err)
	}
	codec, err := kafka.NewCodec(cfg.Topics)
	if err != nil {
		t.Fatal(err)
	}
	r, err := streamrelay.NewRelay(streamrelay.RelayParams{Config: sc, Codec: codec})
	if err != nil {
		t.Fatal(err)
	}
	if seed := r.Config().CKF.Seed; seed != 0 {
		t.Fatalf("relay.seed=0 runs the relay with seed %#x", seed)
	}
}
