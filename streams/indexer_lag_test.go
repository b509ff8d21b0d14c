package streams_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/streams"
	"github.com/ckf-stream/ckf-stream/testenv"
	"github.com/twmb/franz-go/pkg/kadm"
)

// committedLanes fetches group's committed offsets on the lane topic, by partition.
func committedLanes(t *testing.T, adm *kadm.Client, group, topic string) map[int32]int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), converge)
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
func TestIndexerCommitsAppliedOffsetsToLagGroup(t *testing.T) {
	e := newTestEnv(t, 4096)
	const instance = ckf.ConsumerInstanceID(0x5eed0001)
	lanes := []uint8{2, 9}
	m := e.manifest(instance, lanes...)
	var ps []*testProducer
	for _, l := range lanes {
		p := e.producer(l, 1)
		p.snapshot()
		p.storeChain(10, nil, 0)
		ps = append(ps, p)
	}
	cfg := e.indexerConfig()
	cfg.LagCommitInterval = 50 * time.Millisecond
	ri := e.startIndexer(m, cfg)
	group := ri.ix.LagGroup()
	if want := fmt.Sprintf("ckf-indexer-%016x", uint64(instance)); group != want || streams.IndexerLagGroup("", instance) != want {
		t.Fatalf("lag group %q; want the derived %q", group, want)
	}
	for _, p := range ps {
		waitLane(t, ri, p, converge)
	}
	adm := testenv.Admin(t)
	// Periodic: the group reaches every lane's applied position while the indexer runs.
	testenv.WaitUntil(t, converge, "the lag group holds the applied positions", func() bool {
		c := committedLanes(t, adm, group, e.topics.Lanes)
		for _, l := range lanes {
			if c[int32(l)] != laneStatus(ri, l).AppliedOffset+1 {
				return false
			}
		}
		return len(c) == len(lanes)
	}, func() string { return fmt.Sprintf("committed %v", committedLanes(t, adm, group, e.topics.Lanes)) })

	// At a graceful stop: with an interval no test reaches, only the stop's commit can move the
	// group past the records written after the restart.
	ri.stop()
	cfg.LagCommitInterval = time.Hour
	ri = e.startIndexer(m, cfg)
	for _, p := range ps {
		p.storeChain(6, nil, 0)
		waitLane(t, ri, p, converge)
	}
	applied := map[int32]int64{}
	for _, l := range lanes {
		applied[int32(l)] = laneStatus(ri, l).AppliedOffset + 1
	}
	ri.stop()
	c := committedLanes(t, adm, group, e.topics.Lanes)
	for _, l := range lanes {
		if c[int32(l)] != applied[int32(l)] {
			t.Errorf("lane %d: committed %d after the stop, want %d (the offset after the last applied record)", l, c[int32(l)], applied[int32(l)])
		}
	}
	if len(c) != len(lanes) {
		t.Errorf("committed partitions %v; want exactly the configured lanes %v", c, lanes)
	}
	if n := ri.ix.LagCommits(); n != 1 {
		t.Errorf("%d lag commits in the second run; want 1 (the stop's)", n)
	}
}
