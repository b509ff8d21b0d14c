package lanes_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/streams/internal/streamtest"
	"github.com/ckf-stream/ckf-stream/streams/lanes"
	"github.com/ckf-stream/ckf-stream/testenv"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/uber-go/tally/v4"
)

// committedLanes fetches group's committed offsets on the lane topic, by partition.
func committedLanes(t *testing.T, adm *kadm.Client, group, topic string) map[int32]int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), streamtest.Converge)
	defer cancel()
	got, err := adm.FetchOffsets(ctx, group)
	if err == nil {
		err = got.Error()
	}
	if err != nil {
		t.Fatal(err)
	}
	out := map[int32]int64{}
	got.Each(func(o kadm.OffsetResponse) {
		if o.Topic == topic {
			out[o.Partition] = o.At
		}
	})
	return out
}

// TestIndexerCommitsAppliedOffsetsToLagGroup: the indexer commits, per lane partition, the
// offset after the last record it applied into IndexerLagGroup("", instance) (the name derived
// when LagGroup is empty): periodically while it runs, and at a graceful stop, so that the group
// shows exactly where the replica stopped. Lanes outside the manifest get no commit.
// Broker: the commits land in a consumer group that standard lag tools read (OffsetFetch).
func TestIndexerCommitsAppliedOffsetsToLagGroup(t *testing.T) {
	t.Parallel()
	e := streamtest.NewEnv(t, 4096)
	const instance = ckf.ConsumerInstanceID(0x5eed0001)
	laneNums := []uint8{2, 9}
	m := e.Manifest(instance, laneNums...)
	var ps []*streamtest.Producer
	for _, l := range laneNums {
		p := e.Producer(l, 1)
		p.Snapshot()
		p.StoreChain(10, nil, 0)
		ps = append(ps, p)
	}
	cfg := e.IndexerConfig()
	cfg.LagCommitInterval = 50 * time.Millisecond
	ri := e.StartIndexer(m, cfg)
	group := ri.Indexer.LagGroup()
	if want := fmt.Sprintf("ckf-indexer-%016x", uint64(instance)); group != want || lanes.IndexerLagGroup("", instance) != want {
		t.Fatalf("lag group %q; want the derived %q", group, want)
	}
	for _, p := range ps {
		streamtest.WaitLane(t, ri, p, streamtest.Converge)
	}
	adm := testenv.Admin(t)
	// Periodic: the group reaches every lane's applied position while the indexer runs.
	testenv.WaitUntil(t, streamtest.Converge, "the lag group holds the applied positions", func() bool {
		c := committedLanes(t, adm, group, e.Topics.Lanes)
		for _, l := range laneNums {
			if c[int32(l)] != streamtest.LaneStatus(ri, l).AppliedOffset+1 {
				return false
			}
		}
		return len(c) == len(laneNums)
	}, func() string { return fmt.Sprintf("committed %v", committedLanes(t, adm, group, e.Topics.Lanes)) })

	// At a graceful stop: with an interval no test reaches, only the stop's commit can move the
	// group past the records written after the restart.
	ri.Stop()
	cfg.LagCommitInterval = time.Hour
	scope := tally.NewTestScope("", nil)
	ri = e.StartIndexerWith(m, cfg, func(ix *lanes.Indexer) { lanes.SetMetrics(ix, scope) })
	for _, p := range ps {
		p.StoreChain(6, nil, 0)
		streamtest.WaitLane(t, ri, p, streamtest.Converge)
	}
	applied := map[int32]int64{}
	for _, l := range laneNums {
		applied[int32(l)] = streamtest.LaneStatus(ri, l).AppliedOffset + 1
	}
	ri.Stop()
	c := committedLanes(t, adm, group, e.Topics.Lanes)
	for _, l := range laneNums {
		if c[int32(l)] != applied[int32(l)] {
			t.Errorf("lane %d: committed %d after the stop, want %d (the offset after the last applied record)", l, c[int32(l)], applied[int32(l)])
		}
	}
	if len(c) != len(laneNums) {
		t.Errorf("committed partitions %v; want exactly the configured lanes %v", c, laneNums)
	}
	if n := scope.Snapshot().Counters()["indexer.lag_commits_total+"].Value(); n != 1 {
		t.Errorf("%d lag commits in the second run; want 1 (the stop's)", n)
	}
}
