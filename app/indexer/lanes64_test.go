package indexer_test

import (
	"errors"
	"testing"

	"github.com/ckf-stream/ckf-stream/app/config"
	"github.com/ckf-stream/ckf-stream/app/indexer"
)

// TestManifestFollowsTheLaneMap (consumer §16): the manifest's table holds the lane map's highest
// lane + 1 lanes, so a 4-lane map builds a 4-lane table and lanes up to 63 are served; a lane
// beyond 63 is refused naming indexer.lanes.
func TestManifestFollowsTheLaneMap(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		lanes config.LaneMap
		count int
		mask  uint64
	}{
		{config.LaneMap{0: 0x10, 1: 0x11, 2: 0x12, 3: 0x13}, 4, 0xF},
		{config.LaneMap{0: 0x10, 15: 0x1f}, 16, 1 | 1<<15},
		{config.LaneMap{0: 0x10, 40: 0x38}, 41, 1 | 1<<40},
		{config.LaneMap{63: 0x3f}, 64, 1 << 63},
	} {
		ix := testConfig()
		ix.Lanes = tc.lanes
		m, _, err := indexer.BuildManifest(ix, 1)
		if err != nil {
			t.Fatalf("%v: %v", tc.lanes, err)
		}
		if m.LaneCount() != tc.count || m.ConfiguredLanes64() != tc.mask {
			t.Errorf("%v: %d lanes, configured %#x; want %d, %#x", tc.lanes, m.LaneCount(), m.ConfiguredLanes64(), tc.count, tc.mask)
		}
	}
	ix := testConfig()
	ix.Lanes = config.LaneMap{64: 1}
	var fe *config.FieldError
	if _, _, err := indexer.BuildManifest(ix, 1); !errors.As(err, &fe) || fe.Field != "indexer.lanes" {
		t.Errorf("lane 64: %v, want a refusal naming indexer.lanes", err)
	}
}
