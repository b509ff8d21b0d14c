package lanes_test

import (
	"context"
	"math/bits"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/ckf/index"
	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/ckf-stream/ckf-stream/streams/internal/streamtest"
	"github.com/ckf-stream/ckf-stream/streams/lanes"
	"github.com/ckf-stream/ckf-stream/streams/query"
	"github.com/ckf-stream/ckf-stream/testenv"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestIndexerEndToEndFourLanes: four producers publish snapshots and deltas; the indexer's
// tables and answers equal the in-process reference for the same streams, including across a
// producer's second snapshot, removals and clears.
// Broker: the whole path, producers' writers and the indexer's clients on real topics, and answers over the query topics.
func TestIndexerEndToEndFourLanes(t *testing.T) {
	t.Parallel()
	e := streamtest.NewEnv(t, 4096)
	lanes := []uint8{0, 3, 7, 15}
	m := e.Manifest(11, lanes...)
	var ps []*streamtest.Producer
	for _, l := range lanes {
		p := e.Producer(l, 1)
		p.Snapshot()
		base := p.StoreChain(12, nil, 0)
		for i := 0; i < 20; i++ {
			p.StoreChain(3+i%5, base, 1+i%10) // shared prefixes of different lengths
		}
		ps = append(ps, p)
	}
	events := e.WatchEvents()
	ri := e.StartIndexer(m, e.IndexerConfig())
	for _, p := range ps {
		streamtest.WaitLane(t, ri, p, streamtest.Converge)
	}
	// More traffic while running: new chains, a mid-stream snapshot (stale for the indexer),
	// a clear, and new chains after it.
	for i, p := range ps {
		for j := 0; j < 10; j++ {
			p.StoreChain(4, p.Chains[0], j%6)
		}
		if i%2 == 0 {
			p.Snapshot()
		}
		if i == 1 {
			p.ClearWorker()
			p.StoreChain(6, nil, 0)
		}
	}
	for _, p := range ps {
		streamtest.WaitLane(t, ri, p, streamtest.Converge)
	}
	ref := streamtest.ReferenceIndexer(t, m, ps...)
	streamtest.CompareQueries(t, ri.Indexer.GlobalIndexer(), ref, ps...)
	compareKafkaQueries(t, e, ri, ref, ps...)
	for _, p := range ps {
		events.WaitFor(t, p.Lane, 10*time.Second, "SNAPSHOT_INSTALLED", streamtest.KindIs(schemas.EventSnapshotInstalled))
		if st := streamtest.LaneStatus(ri, p.Lane); st.Snapshots != 1 || st.Recoveries != 0 {
			t.Errorf("lane %d: %d snapshots installed, %d recoveries; want 1 and 0 (later snapshots are stale for a ready lane)",
				p.Lane, st.Snapshots, st.Recoveries)
		}
	}
}

// TestIndexerRestartWithoutRetainedSnapshot: when the indexed snapshot is no longer retained,
// the restarted indexer asks the relay for one on the control topic and waits for it.
// Broker: retention (DeleteRecords) removes the indexed snapshot from the log.
func TestIndexerRestartWithoutRetainedSnapshot(t *testing.T) {
	t.Parallel()
	e := streamtest.NewEnv(t, 4096)
	p := e.Producer(4, 1)
	p.Snapshot()
	p.StoreChain(9, nil, 0)
	p.StoreChain(9, nil, 0)
	deleteLaneRecords(t, e, 4) // retention removes everything written so far
	control := e.ControlRecords()
	events := e.WatchEvents()
	ri := e.StartIndexer(e.Manifest(31, 4), e.IndexerConfig())
	req := control.WaitLane(t, 4, streamtest.Converge)
	if req.Reason != schemas.ReasonNoSnapshotRetained || req.Requester != 31 {
		t.Errorf("snapshot request %+v: want reason NO_SNAPSHOT_RETAINED from consumer 31", req)
	}
	events.WaitFor(t, 4, streamtest.Converge, "SNAPSHOT_REQUESTED", streamtest.KindIs(schemas.EventSnapshotRequested))
	if ri.Indexer.GlobalIndexer().ReadyLanes() != 0 {
		t.Fatal("lane ready without a snapshot")
	}
	p.Snapshot() // the relay answers the request
	p.StoreChain(3, nil, 0)
	streamtest.WaitLane(t, ri, p, streamtest.Converge)
}

// TestIndexerRestartSnapshotWrittenBeforeTheConsumerStarts: a lane whose indexed snapshot is
// no longer retained starts at the partition's end as listed when the start-up plan was made, so a
// snapshot the relay writes between that plan and the lane consumer's first fetch (a relay quick
// to answer, or one writing its periodic snapshot) is read, not skipped by an end resolved later
// (the lane then waited for a snapshot already written; CI saw it once).
// Broker: retention (DeleteRecords) and the consumer's start offset on a real partition.
func TestIndexerRestartSnapshotWrittenBeforeTheConsumerStarts(t *testing.T) {
	t.Parallel()
	e := streamtest.NewEnv(t, 4096)
	p := e.Producer(6, 1)
	p.Snapshot()
	p.StoreChain(7, nil, 0)
	deleteLaneRecords(t, e, 6)
	ri := e.StartIndexerWith(e.Manifest(32, 6), e.IndexerConfig(), func(ix *lanes.Indexer) {
		lanes.SetAfterPlan(ix, func() {
			p.Snapshot()
			p.StoreChain(3, nil, 0)
		})
	})
	streamtest.WaitLane(t, ri, p, streamtest.Converge)
	if st := streamtest.LaneStatus(ri, p.Lane); st.Snapshots != 1 {
		t.Errorf("lane %d: %d snapshots installed, want 1 (the one written after the plan)", p.Lane, st.Snapshots)
	}
}

// deleteLaneRecords removes every record written so far to lane's partition of the lane topic, as
// retention would (DeleteRecords up to the partition's end).
func deleteLaneRecords(t *testing.T, e *streamtest.Env, lane int32) {
	t.Helper()
	adm := testenv.Admin(t)
	ends, err := adm.ListEndOffsets(context.Background(), e.Topics.Lanes)
	if err != nil {
		t.Fatal(err)
	}
	end, _ := ends.Lookup(e.Topics.Lanes, lane)
	del := kadm.Offsets{}
	del.Add(kadm.Offset{Topic: e.Topics.Lanes, Partition: lane, At: end.Offset})
	if resp, err := adm.DeleteRecords(context.Background(), del); err != nil || resp.Error() != nil {
		t.Fatalf("delete records: %v %v", err, resp.Error())
	}
}

// compareKafkaQueries sends queries over the query topics (QueryService + QueryClient on the real
// broker) and checks every reply against the reference indexer.
func compareKafkaQueries(t *testing.T, e *streamtest.Env, ri *streamtest.RunningIndexer, ref *index.GlobalIndexer, ps ...*streamtest.Producer) {
	t.Helper()
	requests := testenv.NewTopic(t, 2)
	replies := testenv.NewTopic(t, 2)
	opts := []kgo.Opt{kgo.SeedBrokers(testenv.Brokers(t)...)}
	qcfg := query.DefaultQueryConfig()
	qcfg.RequestTopic, qcfg.ReplyTopic, qcfg.DeadLetterTopic = requests, replies, e.Topics.DeadLetter
	qcfg.Group = testenv.UniqueName(t, "g")
	svc, err := query.NewQueryService(query.QueryServiceParams{
		Config:   qcfg,
		Answerer: query.NewAnswerer(ri.Indexer.GlobalIndexer(), ri.Indexer.EligibleLanes), Codec: e.Codec, ClientOpts: opts,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("query service: %v", err)
		}
	}()
	ccfg := query.DefaultQueryClientConfig()
	ccfg.RequestTopic, ccfg.ReplyTopic, ccfg.CallTimeout = requests, replies, 30*time.Second
	cl, err := query.NewQueryClient(context.Background(), query.QueryClientParams{
		Config: ccfg, Codec: e.Codec, ClientOpts: opts,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	n := 0
	for _, p := range ps {
		for _, chain := range p.Chains[:min(5, len(p.Chains))] {
			reply, err := cl.Query(context.Background(), schemas.QueryRequest{Input: schemas.InputLocalBlockHashes,
				Hashes: schemas.AppendU64s(nil, chain)})
			if err != nil {
				t.Fatalf("query over Kafka: %v", err)
			}
			want, err := ref.FindPrefixMatches(chain)
			if err != nil || reply.Status != schemas.QueryOK || reply.ReadyLanes != want.ReadyLanes || len(reply.Lanes) != bits.OnesCount16(want.ReadyLanes) {
				t.Fatalf("reply %+v, reference %+v (%v)", reply, want, err)
			}
			for _, lm := range reply.Lanes {
				if lm.Depth != want.Lanes[lm.Lane].Depth {
					t.Fatalf("lane %d depth %d over Kafka, reference %d", lm.Lane, lm.Depth, want.Lanes[lm.Lane].Depth)
				}
			}
			n++
		}
	}
	t.Logf("%d queries over Kafka matched the reference", n)
}
