package config_test

import (
	"testing"

	"github.com/ckf-stream/ckf-stream/app/config"
	"github.com/ckf-stream/ckf-stream/ckf"
)

// TestLaneCountFollowsTheMap: the table's lane count is the lane map's highest lane + 1 (a
// 4-lane map builds a 4-lane table), the lane topic's partitions one per lane and never fewer than
// the 16 of every earlier deployment, and the lane owners reach lane 63 (consumer §16).
func TestLaneCountFollowsTheMap(t *testing.T) {
	t.Parallel()
	domain := "0123456789abcdef0123456789abcdef:fedcba9876543210fedcba9876543210"
	for _, tc := range []struct {
		lanes             config.LaneMap
		count, partitions int
	}{
		{nil, 0, 16},
		{config.LaneMap{0: 1, 1: 2, 2: 3, 3: 4}, 4, 16},
		{config.LaneMap{0: 1, 15: 2}, 16, 16},
		{config.LaneMap{0: 1, 16: 2}, 17, 17},
		{config.LaneMap{63: 9}, 64, 64},
	} {
		ix := config.Default().Indexer
		ix.Domain, ix.Lanes = domain, tc.lanes
		if got := ix.LaneCount(); got != tc.count {
			t.Errorf("%v: lane count %d, want %d", tc.lanes, got, tc.count)
		}
		if got := ix.LanePartitions(); got != tc.partitions {
			t.Errorf("%v: lane partitions %d, want %d", tc.lanes, got, tc.partitions)
		}
		owners, err := ix.LaneOwners()
		if err != nil {
			t.Fatalf("%v: %v", tc.lanes, err)
		}
		if owners.Count() != tc.count {
			t.Errorf("%v: owners cover %d lanes, want %d", tc.lanes, owners.Count(), tc.count)
		}
		for l, dc := range tc.lanes {
			if p := owners[l]; p == nil || p.Dc != ckf.DcID(dc) {
				t.Errorf("%v: lane %d owned by %v, want DC %#x", tc.lanes, l, p, dc)
			}
		}
	}
}
