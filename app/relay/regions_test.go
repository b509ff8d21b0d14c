package relay_test

import (
	"slices"
	"testing"

	"github.com/ckf-stream/ckf-stream/app/relay"
)

// TestRelayReadsMirroredControl: relay.remote_regions gives the relay the copies of the other
// regions' control topics to read beside its own (design §8).
func TestRelayReadsMirroredControl(t *testing.T) {
	cfg := load(t, "--relay.dc_id=0x2a", "--relay.lane=2", "--indexer.domain="+domain, "--indexer.lanes=2=0x2a,3=0x2b",
		"--relay.remote_regions=eu,us")
	sc, err := relay.StreamsConfig(cfg.Relay, cfg.Indexer, cfg.Topics)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"eu." + cfg.Topics.Control, "us." + cfg.Topics.Control}; !slices.Equal(sc.Topics.MirroredControl, want) || sc.Topics.Control != cfg.Topics.Control {
		t.Fatalf("control topics: own %q, mirrored %v; want %q and %v", sc.Topics.Control, sc.Topics.MirroredControl, cfg.Topics.Control, want)
	}
}
