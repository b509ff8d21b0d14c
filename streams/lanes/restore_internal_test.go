package lanes

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/testenv"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/uber-go/tally/v4"
)

// TestIndexerRestartRestoresFromIndex: a restarted indexer (a new consumer instance) restores
// every lane from the snapshot index and the log, without asking the producers for anything.
// Whole indexers on an in-process broker (fakeKafka): the restore reads the index topic whole,
// so compaction plays no part.
func TestIndexerRestartRestoresFromIndex(t *testing.T) {
	t.Parallel()
	f := newFakeKafka(t, 4096)
	laneNums := []uint8{1, 2, 5, 9}
	var ps []*rigProducer
	for _, l := range laneNums {
		p := f.producer(l, 1)
		p.storeChain(5, nil, 0)
		p.snapshot()
		p.storeChain(8, nil, 0)
		ps = append(ps, p)
	}
	first := f.start(f.manifest(21, laneNums...), f.cfg, nil)
	for _, p := range ps {
		first.waitLane(t, p)
	}
	first.stop()
	requestsBefore := f.endOffset(f.cfg.Topics.Control, 0)
	var positions []int64
	for _, p := range ps {
		p.storeChain(7, p.Chains[0], 3)
		positions = append(positions, p.snapshot()) // the index now points here
		p.storeChain(4, nil, 0)
	}
	second := f.start(f.manifest(22, laneNums...), f.cfg, nil)
	for i, p := range ps {
		second.waitLane(t, p)
		// The lane status is published after a record's effects, a snapshot request included, so
		// at convergence it counts every request the restore made.
		st := second.status(p.lane)
		if st.SnapshotOffset != positions[i] {
			t.Errorf("lane %d restored from snapshot at %d, want the indexed %d", p.lane, st.SnapshotOffset, positions[i])
		}
		if st.SnapshotRequests != 0 {
			t.Errorf("lane %d: the restarted indexer asked for %d snapshots; want none (the lane was indexed)", p.lane, st.SnapshotRequests)
		}
	}
	compareQueries(t, second.ix.g, referenceIndexer(t, f.manifest(22, laneNums...), ps...), ps...)
	second.stop() // its outputs are flushed: every request it made is on the control topic
	if n := f.endOffset(f.cfg.Topics.Control, 0) - requestsBefore; n != 0 {
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
// (fakeKafka) answers them as a real one does.
func TestIndexerCommitsAppliedOffsetsToLagGroup(t *testing.T) {
	t.Parallel()
	f := newFakeKafka(t, 4096)
	const instance = ckf.ConsumerInstanceID(0x5eed0001)
	laneNums := []uint8{2, 9}
	m := f.manifest(instance, laneNums...)
	var ps []*rigProducer
	for _, l := range laneNums {
		p := f.producer(l, 1)
		p.snapshot()
		p.storeChain(10, nil, 0)
		ps = append(ps, p)
	}
	cfg := f.cfg
	cfg.LagCommitInterval = 50 * time.Millisecond
	ri := f.start(m, cfg, nil)
	group := ri.ix.LagGroup()
	if want := fmt.Sprintf("ckf-indexer-%016x", uint64(instance)); group != want || IndexerLagGroup("", instance) != want {
		t.Fatalf("lag group %q; want the derived %q", group, want)
	}
	for _, p := range ps {
		ri.waitLane(t, p)
	}
	adm := kadm.NewClient(f.client())
	lanesTopic := cfg.Topics.Lanes
	// Periodic: the group reaches every lane's applied position while the indexer runs.
	testenv.WaitUntil(t, time.Minute, "the lag group holds the applied positions", func() bool {
		c := committedLanes(t, adm, group, lanesTopic)
		for _, l := range laneNums {
			if c[int32(l)] != ri.status(l).AppliedOffset+1 {
				return false
			}
		}
		return len(c) == len(laneNums)
	}, func() string { return fmt.Sprintf("committed %v", committedLanes(t, adm, group, lanesTopic)) })

	// At a graceful stop: with an interval no test reaches, only the stop's commit can move the
	// group past the records written after the restart.
	ri.stop()
	cfg.LagCommitInterval = time.Hour
	scope := tally.NewTestScope("", nil)
	ri = f.start(m, cfg, func(ix *Indexer) { SetMetrics(ix, scope) })
	for _, p := range ps {
		p.storeChain(6, nil, 0)
		ri.waitLane(t, p)
	}
	applied := map[int32]int64{}
	for _, l := range laneNums {
		applied[int32(l)] = ri.status(l).AppliedOffset + 1
	}
	ri.stop()
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
