package relay_test

import (
	"reflect"
	"testing"

	"github.com/ckf-stream/ckf-stream/app/kafka"
	"github.com/ckf-stream/ckf-stream/app/relay"
	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/streams"
)

// TestDefaultsAreStreams: the relay section's defaults, converted by StreamsConfig, give the
// relay streams builds from a configuration holding only its topics, pool, lane and filter size:
// every relay default (snapshot triggers, idle interval, heartbeat, publication delay and
// cadence, seed) has one value.
func TestDefaultsAreStreams(t *testing.T) {
	cfg := load(t, "--indexer.domain="+domain, "--relay.dc_id=0x2a", "--relay.lane=3")
	sc, err := relay.StreamsConfig(cfg.Relay, cfg.Indexer, cfg.Topics)
	if err != nil {
		t.Fatal(err)
	}
	codec, err := kafka.NewCodec(cfg.Topics)
	if err != nil {
		t.Fatal(err)
	}
	fromConfig, err := streams.NewRelay(streams.RelayParams{Config: sc, Codec: codec})
	if err != nil {
		t.Fatal(err)
	}
	bare := streams.RelayConfig{Topics: sc.Topics, Pool: sc.Pool, Lane: sc.Lane,
		CKF: ckf.CkfConfig{ExpectedBlocksPerDC: cfg.Relay.ExpectedBlocks}}
	fromZero, err := streams.NewRelay(streams.RelayParams{Config: bare, Codec: codec})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := fromConfig.Config(), fromZero.Config(); !reflect.DeepEqual(got, want) {
		t.Errorf("relay from the configuration's defaults:\n%+v\nrelay from streams' defaults:\n%+v", got, want)
	}
}
