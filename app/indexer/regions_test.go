package indexer_test

import (
	"testing"

	"github.com/ckf-stream/ckf-stream/app/config"
	"github.com/ckf-stream/ckf-stream/streams"
)

// TestRemoteLanesReachTheLanes: indexer.remote_lanes becomes the lanes' sources (design §8): a
// remote lane from MirrorMaker's copies of its region's lane topic and snapshot index, marked
// mirrored so its snapshot is found by time; the other lanes from topics.lanes.
func TestRemoteLanesReachTheLanes(t *testing.T) {
	cfg := config.Default()
	cfg.Indexer.Lanes = config.LaneMap{0: 0xdc01, 1: 0xdc02}
	cfg.Indexer.RemoteLanes = config.LaneRegions{1: "eu"}
	sc := cfg.Indexer.LaneSettings(cfg.Topics)
	want := streams.LaneSource{Region: "eu", Topic: "eu." + cfg.Topics.Lanes, SnapshotIndex: "eu." + cfg.Topics.SnapshotIndex, Mirrored: true}
	if got := sc.Source(1); got != want {
		t.Fatalf("lane 1: %+v, want %+v", got, want)
	}
	if got := sc.Source(0); got != (streams.LaneSource{Topic: cfg.Topics.Lanes, SnapshotIndex: cfg.Topics.SnapshotIndex}) {
		t.Fatalf("lane 0: %+v, want the local topics", got)
	}
}
