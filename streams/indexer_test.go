package streams_test

import (
	"context"
	"fmt"
	"math/bits"
	"slices"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/ckf/index"
	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/ckf-stream/ckf-stream/streams"
	"github.com/ckf-stream/ckf-stream/testenv"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

const converge = 45 * time.Second

// referenceIndexer builds the in-process reference: a GlobalIndexer with the same manifest whose
// lanes are installed directly from the producers' exact words.
func referenceIndexer(t *testing.T, m index.Manifest, ps ...*testProducer) *index.GlobalIndexer {
	t.Helper()
	g, err := index.NewGlobalIndexer(m, ckf.DefaultSearchConfig())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ps {
		in, err := g.ClaimLane(p.lane)
		if err != nil {
			t.Fatal(err)
		}
		lease := ckf.LaneLease{Consumer: m.ConsumerInstance(), Lane: p.lane, Epoch: 1}
		if err := in.Assign(p.id, lease); err != nil {
			t.Fatal(err)
		}
		out := in.InstallSnapshot(&ckf.Snapshot{Identity: p.id, Lease: lease, Sequence: p.pub.LastSequence(), Buckets: p.state.CopyWords()})
		if out.Kind != index.OutcomeSnapshotInstalled {
			t.Fatalf("reference install: %v", out)
		}
	}
	return g
}

// compareQueries checks that the indexer answers every prefix of every producer chain, plus
// divergent variants, exactly like the reference.
func compareQueries(t *testing.T, got, want *index.GlobalIndexer, ps ...*testProducer) {
	t.Helper()
	n := 0
	for _, p := range ps {
		for _, chain := range p.chains {
			for _, q := range [][]uint64{chain, chain[:len(chain)/2], append(slices.Clone(chain[:len(chain)/2]), 12345, 678)} {
				a, errA := got.FindPrefixMatches(q)
				b, errB := want.FindPrefixMatches(q)
				if (errA == nil) != (errB == nil) || a != b {
					t.Fatalf("query of %d blocks: indexer %+v (%v), reference %+v (%v)", len(q), a.Depths(), errA, b.Depths(), errB)
				}
				n++
			}
		}
	}
	if n == 0 {
		t.Fatal("no query compared")
	}
}

// TestIndexerEndToEndFourLanes: four producers publish snapshots and deltas; the indexer's
// tables and answers equal the in-process reference for the same streams, including across a
// producer's second snapshot, removals and clears.
func TestIndexerEndToEndFourLanes(t *testing.T) {
	e := newTestEnv(t, 4096)
	lanes := []uint8{0, 3, 7, 15}
	m := e.manifest(11, lanes...)
	var ps []*testProducer
	for _, l := range lanes {
		p := e.producer(l, 1)
		p.snapshot()
		base := p.storeChain(12, nil, 0)
		for i := 0; i < 20; i++ {
			p.storeChain(3+i%5, base, 1+i%10) // shared prefixes of different lengths
		}
		ps = append(ps, p)
	}
	events := e.watchEvents()
	ri := e.startIndexer(m, e.indexerConfig())
	for _, p := range ps {
		waitLane(t, ri, p, converge)
	}
	// More traffic while running: new chains, a mid-stream snapshot (stale for the indexer),
	// a clear, and new chains after it.
	for i, p := range ps {
		for j := 0; j < 10; j++ {
			p.storeChain(4, p.chains[0], j%6)
		}
		if i%2 == 0 {
			p.snapshot()
		}
		if i == 1 {
			p.clearWorker()
			p.storeChain(6, nil, 0)
		}
	}
	for _, p := range ps {
		waitLane(t, ri, p, converge)
	}
	ref := referenceIndexer(t, m, ps...)
	compareQueries(t, ri.ix.GlobalIndexer(), ref, ps...)
	compareKafkaQueries(t, e, ri, ref, ps...)
	for _, p := range ps {
		events.waitFor(t, p.lane, 10*time.Second, "SNAPSHOT_INSTALLED", kindIs(schemas.EventSnapshotInstalled))
		if st := laneStatus(ri, p.lane); st.Snapshots != 1 || st.Recoveries != 0 {
			t.Errorf("lane %d: %d snapshots installed, %d recoveries; want 1 and 0 (later snapshots are stale for a ready lane)",
				p.lane, st.Snapshots, st.Recoveries)
		}
	}
}

// TestIndexerRestartRestoresFromIndex: a restarted indexer (a new consumer instance) restores
// every lane from the snapshot index and the log, without asking the producers for anything.
func TestIndexerRestartRestoresFromIndex(t *testing.T) {
	e := newTestEnv(t, 4096)
	lanes := []uint8{1, 2, 5, 9}
	var ps []*testProducer
	for _, l := range lanes {
		p := e.producer(l, 1)
		p.storeChain(5, nil, 0)
		p.snapshot()
		p.storeChain(8, nil, 0)
		ps = append(ps, p)
	}
	first := e.startIndexer(e.manifest(21, lanes...), e.indexerConfig())
	for _, p := range ps {
		waitLane(t, first, p, converge)
	}
	first.stop()
	var positions []int64
	for _, p := range ps {
		p.storeChain(7, p.chains[0], 3)
		positions = append(positions, p.snapshot().FirstOffset) // the index now points here
		p.storeChain(4, nil, 0)
	}
	control := e.controlRecords()
	second := e.startIndexer(e.manifest(22, lanes...), e.indexerConfig())
	for i, p := range ps {
		waitLane(t, second, p, converge)
		// The lane status is published after a record's effects, a snapshot request included, so
		// at convergence it counts every request the restore made.
		st := laneStatus(second, p.lane)
		if st.SnapshotOffset != positions[i] {
			t.Errorf("lane %d restored from snapshot at %d, want the indexed %d", p.lane, st.SnapshotOffset, positions[i])
		}
		if st.SnapshotRequests != 0 {
			t.Errorf("lane %d: the restarted indexer asked for %d snapshots; want none (the lane was indexed)", p.lane, st.SnapshotRequests)
		}
	}
	compareQueries(t, second.ix.GlobalIndexer(), referenceIndexer(t, e.manifest(22, lanes...), ps...), ps...)
	if n := control.count(); n != 0 {
		t.Errorf("restarted indexer sent %d snapshot requests; want none (every lane was indexed)", n)
	}
}

// TestIndexerRestartWithoutRetainedSnapshot: when the indexed snapshot is no longer retained,
// the restarted indexer asks the relay for one on the control topic and waits for it.
func TestIndexerRestartWithoutRetainedSnapshot(t *testing.T) {
	e := newTestEnv(t, 4096)
	p := e.producer(4, 1)
	p.snapshot()
	p.storeChain(9, nil, 0)
	p.storeChain(9, nil, 0)
	// Retention removes everything written so far.
	adm := testenv.Admin(t)
	ends, err := adm.ListEndOffsets(context.Background(), e.topics.Lanes)
	if err != nil {
		t.Fatal(err)
	}
	end, _ := ends.Lookup(e.topics.Lanes, 4)
	del := kadm.Offsets{}
	del.Add(kadm.Offset{Topic: e.topics.Lanes, Partition: 4, At: end.Offset})
	if resp, err := adm.DeleteRecords(context.Background(), del); err != nil || resp.Error() != nil {
		t.Fatalf("delete records: %v %v", err, resp.Error())
	}
	control := e.controlRecords()
	events := e.watchEvents()
	ri := e.startIndexer(e.manifest(31, 4), e.indexerConfig())
	req := control.waitLane(t, 4, converge)
	if req.Reason != schemas.ReasonNoSnapshotRetained || req.Requester != 31 {
		t.Errorf("snapshot request %+v: want reason NO_SNAPSHOT_RETAINED from consumer 31", req)
	}
	events.waitFor(t, 4, converge, "SNAPSHOT_REQUESTED", kindIs(schemas.EventSnapshotRequested))
	if ri.ix.GlobalIndexer().ReadyLanes() != 0 {
		t.Fatal("lane ready without a snapshot")
	}
	p.snapshot() // the relay answers the request
	p.storeChain(3, nil, 0)
	waitLane(t, ri, p, converge)
}

// TestIndexerFreshnessExcludesSilentLane: a lane whose producer falls silent is excluded from
// answers after the freshness policy's time bound and readmitted when records flow again.
func TestIndexerFreshnessExcludesSilentLane(t *testing.T) {
	e := newTestEnv(t, 4096)
	p := e.producer(6, 1)
	p.snapshot()
	chain := p.storeChain(5, nil, 0)
	events := e.watchEvents()
	cfg := e.indexerConfig()
	cfg.Freshness.MaxTimeLag = 1500 * time.Millisecond
	ri := e.startIndexer(e.manifest(41, 6), cfg)
	waitLane(t, ri, p, converge)
	events.waitFor(t, 6, converge, "EXCLUDED_FOR_LAG", kindIs(schemas.EventExcludedForLag))
	if ri.ix.EligibleLanes() != 0 {
		t.Fatalf("eligible lanes %016b: the silent lane must be excluded", ri.ix.EligibleLanes())
	}
	if ri.ix.GlobalIndexer().ReadyLanes() == 0 {
		t.Fatal("exclusion must not retire the lane")
	}
	if err := p.w.WriteHeartbeat(context.Background(), p.pub.LastSequence()); err != nil {
		t.Fatal(err)
	}
	events.waitFor(t, 6, converge, "READMITTED", kindIs(schemas.EventReadmitted))
	if ri.ix.EligibleLanes() != 1<<6 {
		t.Fatalf("eligible lanes %016b after a heartbeat, want lane 6", ri.ix.EligibleLanes())
	}
	if m, err := ri.ix.GlobalIndexer().FindPrefixMatches(chain); err != nil || m.Lanes[6].Depth != uint32(len(chain)) {
		t.Fatalf("query after readmission: %+v %v", m, err)
	}
}

// TestIndexerFreshnessZeroBoundsNotChecked: the zero policy checks neither bound: a ready lane
// whose last record ages is reported with its time lag and stays in answers (a zero bound once
// meant "the default bound").
func TestIndexerFreshnessZeroBoundsNotChecked(t *testing.T) {
	e := newTestEnv(t, 4096)
	p := e.producer(7, 1)
	p.snapshot()
	p.storeChain(5, nil, 0)
	cfg := e.indexerConfig()
	cfg.Freshness = streams.FreshnessPolicy{}
	ri := e.startIndexer(e.manifest(42, 7), cfg)
	waitLane(t, ri, p, converge)
	var st streams.LaneStatus
	// Lag, readiness and exclusion are reported together, by the check that decides exclusion.
	testenv.WaitUntil(t, converge, "the lane reports a time lag", func() bool {
		st = laneStatus(ri, 7)
		return st.Ready && st.LagTime > 0
	}, func() string { return fmt.Sprintf("status %+v", st) })
	if st.Excluded {
		t.Fatalf("lane excluded with no bound checked: %+v", st)
	}
	if ri.ix.EligibleLanes() != 1<<7 {
		t.Fatalf("eligible lanes %016b, want lane 7", ri.ix.EligibleLanes())
	}
}

// controlLog collects snapshot requests from the control topic.
type controlLog struct{ *recordLog }

func (e *testEnv) controlRecords() *controlLog {
	return &controlLog{e.records(e.topics.Control, 1)}
}

func (c *controlLog) count() int { return len(c.snapshot()) }

func (c *controlLog) waitLane(t *testing.T, lane uint8, timeout time.Duration) schemas.SnapshotRequest {
	t.Helper()
	var found schemas.SnapshotRequest
	testenv.WaitUntil(t, timeout, fmt.Sprintf("a snapshot request for lane %d", lane), func() bool {
		for _, r := range c.snapshot() {
			rec, err := c.codec.DecodeControlRecord(r.Value)
			if err != nil {
				t.Fatalf("undecodable control record: %v", err)
			}
			if rec.Kind == schemas.ControlSnapshotRequest && rec.SnapshotRequest.Lane == lane {
				found = rec.SnapshotRequest
				return true
			}
		}
		return false
	}, func() string { return fmt.Sprintf("%d control records", c.count()) })
	return found
}

// recordLog collects every record of a topic (all partitions, from the start).
type recordLog struct {
	codec *schemas.Codec
	mu    chan struct{}
	recs  []*kgo.Record
}

func (e *testEnv) records(topic string, partitions int32) *recordLog {
	e.t.Helper()
	assign := map[int32]kgo.Offset{}
	for p := int32(0); p < partitions; p++ {
		assign[p] = kgo.NewOffset().AtStart()
	}
	cl := e.cluster.Client(e.t, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: assign}))
	l := &recordLog{codec: e.codec, mu: make(chan struct{}, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	e.t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
				l.mu <- struct{}{}
				l.recs = append(l.recs, r)
				<-l.mu
			})
		}
	}()
	return l
}

func (l *recordLog) snapshot() []*kgo.Record {
	l.mu <- struct{}{}
	defer func() { <-l.mu }()
	return slices.Clone(l.recs)
}

// compareKafkaQueries sends queries over the query topics (QueryService + QueryClient on the real
// broker) and checks every reply against the reference indexer.
func compareKafkaQueries(t *testing.T, e *testEnv, ri *runningIndexer, ref *index.GlobalIndexer, ps ...*testProducer) {
	t.Helper()
	requests := testenv.NewTopic(t, 2)
	replies := testenv.NewTopic(t, 2)
	opts := []kgo.Opt{kgo.SeedBrokers(testenv.Brokers(t)...)}
	qcfg := streams.DefaultQueryConfig()
	qcfg.RequestTopic, qcfg.ReplyTopic, qcfg.DeadLetterTopic = requests, replies, e.topics.DeadLetter
	qcfg.Group = testenv.UniqueName(t, "g")
	svc, err := streams.NewQueryService(streams.QueryServiceParams{
		Config:   qcfg,
		Answerer: streams.NewAnswerer(ri.ix.GlobalIndexer(), ri.ix.EligibleLanes), Codec: e.codec, ClientOpts: opts,
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
	ccfg := streams.DefaultQueryClientConfig()
	ccfg.RequestTopic, ccfg.ReplyTopic, ccfg.CallTimeout = requests, replies, 30*time.Second
	cl, err := streams.NewQueryClient(context.Background(), streams.QueryClientParams{
		Config: ccfg, Codec: e.codec, ClientOpts: opts,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	n := 0
	for _, p := range ps {
		for _, chain := range p.chains[:min(5, len(p.chains))] {
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
