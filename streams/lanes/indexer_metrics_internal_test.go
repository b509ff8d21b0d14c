package lanes

import (
	"strings"
	"testing"
	"time"

	"github.com/uber-go/tally/v4"
)

// TestIndexerMetricsOnlyConfiguredLanes: lanes outside the manifest export no series, so the
// lane-not-ready alert cannot fire for a lane nobody configured; configured lanes export theirs.
func TestIndexerMetricsOnlyConfiguredLanes(t *testing.T) {
	scope := tally.NewTestScope("", nil)
	m := newIndexerMetrics(scope, func(l uint8) bool { return l == 3 || l == 12 })
	for l := uint8(0); l < 16; l++ {
		newLaneLedger(LaneStatus{Lane: l}, &m.lanes[l]).update(func(s *LaneStatus) {
			s.HighWatermark, s.AppliedOffset, s.LagRecords, s.LagTime = 10, 4, 5, time.Second
			s.Deltas, s.Images = 1, 1
		})
	}
	lanes := map[string]bool{}
	for _, g := range scope.Snapshot().Gauges() {
		if g.Name() == "indexer.lane_ready" {
			lanes[g.Tags()["lane"]] = true
		}
	}
	var got []string
	for l := range lanes {
		got = append(got, l)
	}
	if len(lanes) != 2 || !lanes["3"] || !lanes["12"] {
		t.Fatalf("lane_ready exported for lanes %s; want exactly 3 and 12", strings.Join(got, ","))
	}
	for _, c := range scope.Snapshot().Counters() {
		if l := c.Tags()["lane"]; l != "" && l != "3" && l != "12" {
			t.Errorf("counter %s exported for unconfigured lane %s", c.Name(), l)
		}
	}
}
