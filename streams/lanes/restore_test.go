package lanes_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/streams/internal/streamtest"
	"github.com/ckf-stream/ckf-stream/streams/lanes"
	"github.com/ckf-stream/ckf-stream/testenv"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/uber-go/tally/v4"
)

// endOffset returns the end offset of topic's partition on e's cluster.
func endOffset(t *testing.T, e *streamtest.Env, topic string, partition int32) int64 {
	t.Helper()
	ends, err := e.Cluster.Admin(t).ListEndOffsets(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	o, _ := ends.Lookup(topic, partition)
	return o.Offset
}

// TestIndexerRestartRestoresFromIndex: a restarted indexer (a new consumer instance) restores
// every lane from the snapshot index and the log, without asking the producers for anything.
// Whole indexers on an in-process broker (testenv.FakeCluster): the restore reads the index topic whole,
// so compaction plays no part.
func TestIndexerRestartRestoresFromIndex(t *testing.T) {
	t.Parallel()
	e := streamtest.NewEnvOn(t, testenv.FakeCluster(t), 4096)
	laneNums := []uint8{1, 2, 5, 9}
	var ps []*streamtest.Producer
	for _, l := range laneNums {
		p := e.Producer(l, 1)
		p.StoreChain(5, nil, 0)
		p.Snapshot()
		p.StoreChain(8, nil, 0)
		ps = append(ps, p)
	}
	cfg := e.IndexerConfig()
	first := e.StartIndexer(e.Manifest(21, laneNums...), cfg)
	for _, p := range ps {
		streamtest.WaitLane(t, first, p, time.Minute)
	}
	first.Stop()
	requestsBefore := endOffset(t, e, cfg.Topics.Control, 0)
	var positions []int64
	for _, p := range ps {
		p.StoreChain(7, p.Chains[0], 3)
		positions = append(positions, p.Snapshot().FirstOffset) // the index now points here
		p.StoreChain(4, nil, 0)
	}
	second := e.StartIndexer(e.Manifest(22, laneNums...), cfg)
	for i, p := range ps {
		streamtest.WaitLane(t, second, p, time.Minute)
		// The lane status is published after a record's effects, a snapshot request included, so
		// at convergence it counts every request the restore made.
		st := streamtest.LaneStatus(second, p.Lane)
		if st.SnapshotOffset != positions[i] {
			t.Errorf("lane %d restored from snapshot at %d, want the indexed %d", p.Lane, st.SnapshotOffset, positions[i])
		}
		if st.SnapshotRequests != 0 {
			t.Errorf("lane %d: the restarted indexer asked for %d snapshots; want none (the lane was indexed)", p.Lane, st.SnapshotRequests)
		}
	}
	streamtest.CompareQueries(t, second.Indexer.GlobalIndexer(), streamtest.ReferenceIndexer(t, e.Manifest(22, laneNums...), ps...), ps...)
	second.Stop() // its outputs are flushed: every request it made is on the control topic
	if n := endOffset(t, e, cfg.Topics.Control, 0) - requestsBefore; n != 0 {
		t.Errorf("restarted indexer sent %d snapshot requests; want none (every lane was indexed)", n)
	}
}

// committedLanes fetches group's committed offsets on the lane topic, by partition.
func committedLanes(t *testing.T, adm *kadm.Client, group, topic string) map[int32]int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	got, err := adm.FetchOffsets(ctx, group)
	if err == nil {
		err = got.Error()
	}
	out := map[int32]int64{}
	if errors.Is(err, kerr.GroupIDNotFound) {
		return out // kfake knows a group only from its first commit; a real broker answers with no offsets
	}
	if err != nil {
		t.Fatal(err)
	}
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
// shows exactly where the replica stopped. Lanes outside the manifest get no commit. The
// commits are plain OffsetCommit requests of a group without members: an in-process broker
// (testenv.FakeCluster) answers them as a real one does.
func TestIndexerCommitsAppliedOffsetsToLagGroup(t *testing.T) {
	t.Parallel()
	e := streamtest.NewEnvOn(t, testenv.FakeCluster(t), 4096)
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
		streamtest.WaitLane(t, ri, p, time.Minute)
	}
	adm := e.Cluster.Admin(t)
	lanesTopic := cfg.Topics.Lanes
	// Periodic: the group reaches every lane's applied position while the indexer runs.
	testenv.WaitUntil(t, time.Minute, "the lag group holds the applied positions", func() bool {
		c := committedLanes(t, adm, group, lanesTopic)
		for _, l := range laneNums {
			if c[int32(l)] != streamtest.LaneStatus(ri, l).AppliedOffset+1 {
				return false
			}
		}
		return len(c) == len(laneNums)
	}, func() string { return fmt.Sprintf("committed %v", committedLanes(t, adm, group, lanesTopic)) })

	// At a graceful stop: with an interval no test reaches, only the stop's commit can move the
	// group past the records written after the restart.
	ri.Stop()
	cfg.LagCommitInterval = time.Hour
	scope := tally.NewTestScope("", nil)
	ri = e.StartIndexerWith(m, cfg, func(ix *lanes.Indexer) { lanes.SetMetrics(ix, scope) })
	for _, p := range ps {
		p.StoreChain(6, nil, 0)
		streamtest.WaitLane(t, ri, p, time.Minute)
	}
	applied := map[int32]int64{}
	for _, l := range laneNums {
		applied[int32(l)] = streamtest.LaneStatus(ri, l).AppliedOffset + 1
	}
	ri.Stop()
	c := committedLanes(t, adm, group, lanesTopic)
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
