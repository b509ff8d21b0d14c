package relay_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/ckf/index"
	"github.com/ckf-stream/ckf-stream/ckf/producer"
	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/ckf-stream/ckf-stream/streams"
	"github.com/ckf-stream/ckf-stream/streams/internal/streamtest"
	"github.com/ckf-stream/ckf-stream/streams/query"
	"github.com/ckf-stream/ckf-stream/streams/relay"
	"github.com/ckf-stream/ckf-stream/testenv"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/zap/zaptest"
)

// The relay's integration tests: KV events are produced to a real KV-events topic, a relay
// publishes its lane, and the lead's indexer consumes it. The reference is an in-process
// ckf.DcState fed the same events.

// relayEnv adds a KV-events topic and a KV producer to streamtest.Env.
type relayEnv struct {
	*streamtest.Env
	kvTopic string
	kv      *kgo.Client
}

// newRelayEnv is the relay's environment on an in-process cluster of the test's own
// (testenv.FakeCluster): the relay's logic (publication, sequences, snapshots, checkpoints,
// dead letters, limits, replay) does not depend on a real broker, and a test on it may run in
// parallel with the others.
func newRelayEnv(t *testing.T, expectedBlocks uint64, kvPartitions int32) *relayEnv {
	t.Helper()
	return relayEnvOn(t, testenv.FakeCluster(t), expectedBlocks, kvPartitions)
}

// newBrokerRelayEnv is the relay's environment on the shared test broker, for what only a real
// broker shows: each caller says what in a comment.
func newBrokerRelayEnv(t *testing.T, expectedBlocks uint64, kvPartitions int32) *relayEnv {
	t.Helper()
	return relayEnvOn(t, testenv.Default(t), expectedBlocks, kvPartitions)
}

func relayEnvOn(t *testing.T, c *testenv.Cluster, expectedBlocks uint64, kvPartitions int32) *relayEnv {
	t.Helper()
	return &relayEnv{Env: streamtest.NewEnvOn(t, c, expectedBlocks), kvTopic: c.NewTopic(t, kvPartitions), kv: c.Client(t)}
}

// relayConfig returns the configuration of the relay of lane (pool streamtest.Pool(100+lane)), with
// short timers and a transactional id unique to the test.
func (e *relayEnv) relayConfig(lane uint8, txnID string) relay.RelayConfig {
	cfg := relay.DefaultRelayConfig()
	cfg.Topics = relay.RelayTopics{KVEvents: e.kvTopic, Lanes: e.Topics.Lanes, SnapshotIndex: e.Topics.SnapshotIndex,
		Control: e.Topics.Control, DeadLetter: e.Topics.DeadLetter}
	cfg.Pool = streamtest.Pool(100 + uint64(lane))
	cfg.Lane = lane
	cfg.CKF = ckf.NewCkfConfig(e.Blocks)
	cfg.SnapshotEveryDeltas = 1 << 40
	cfg.SnapshotInterval = time.Hour
	cfg.SnapshotRequestMinInterval = 50 * time.Millisecond
	cfg.HeartbeatInterval = 200 * time.Millisecond
	cfg.TransactionalID = txnID
	cfg.ChunkWords = 700
	return cfg
}

// runningRelay is a relay started by startRelay.
type runningRelay struct {
	r      *relay.Relay
	cancel context.CancelFunc
	done   chan error
	err    error
}

func (e *relayEnv) startRelay(cfg relay.RelayConfig, wait bool) *runningRelay {
	e.T.Helper()
	return e.startRelayWith(relay.RelayParams{Config: cfg, ClientOpts: []kgo.Opt{kgo.SeedBrokers(e.Cluster.Seeds()...)}}, wait)
}

// startRelayWith is startRelay with the test's own parameters (the codec is added, and a test
// logger unless p has one).
func (e *relayEnv) startRelayWith(p relay.RelayParams, wait bool) *runningRelay {
	e.T.Helper()
	p.Codec = e.Codec
	if p.Log == nil {
		p.Log = zaptest.NewLogger(e.T).Named("relay")
	}
	r, err := relay.NewTestRelay(p)
	if err != nil {
		e.T.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	rr := &runningRelay{r: r, cancel: cancel, done: make(chan error, 1)}
	go func() { rr.done <- r.Run(ctx) }()
	e.T.Cleanup(func() { rr.stop() })
	if wait {
		select {
		case <-r.Started():
		case err := <-rr.done:
			// Run has returned: the cleanup's stop must not wait for it again.
			rr.cancel()
			rr.cancel, rr.err = nil, err
			e.T.Fatalf("relay stopped at start-up: %v", err)
		case <-time.After(time.Minute):
			e.T.Fatal("relay did not start")
		}
	}
	return rr
}

// stop cancels the relay (graceful stop) and returns Run's error.
func (rr *runningRelay) stop() error {
	if rr.cancel != nil {
		rr.cancel()
		rr.err = <-rr.done
		rr.cancel = nil
	}
	return rr.err
}

// inspect returns the relay's words, last sequence and identity, read on its goroutine.
func (rr *runningRelay) inspect(t *testing.T) (words []uint64, seq uint64) {
	t.Helper()
	err := rr.r.Inspect(context.Background(), func(st *producer.DcState, pub *producer.Publisher) {
		words = st.CopyWords()
		if pub != nil {
			seq = pub.LastSequence()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	return words, seq
}

// produce writes the events to the KV topic, keyed by worker, in order.
func (e *relayEnv) produce(evs ...producer.RouterEvent) {
	e.T.Helper()
	rs := make([]*kgo.Record, 0, len(evs))
	for _, ev := range evs {
		b, err := e.Codec.EncodeKvEvent(relay.KvEventOf(ev))
		if err != nil {
			e.T.Fatal(err)
		}
		rs = append(rs, &kgo.Record{Topic: e.kvTopic, Key: []byte(strconv.FormatUint(uint64(ev.WorkerID), 10)), Value: b})
	}
	e.produceRaw(rs...)
}

func (e *relayEnv) produceRaw(rs ...*kgo.Record) {
	e.T.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := e.kv.ProduceSync(ctx, rs...).FirstErr(); err != nil {
		e.T.Fatal(err)
	}
}

// waitApplied waits until the relay applied n KV records (replayed or live, rejected ones
// included).
func waitApplied(t *testing.T, rr *runningRelay, n uint64) {
	t.Helper()
	testenv.WaitUntil(t, streamtest.Converge, fmt.Sprintf("the relay applies %d KV records", n), func() bool {
		s := rr.r.Stats()
		return s.Events+s.ReplayedEvents+s.Undecodable >= n
	}, func() string { return fmt.Sprintf("stats %+v", rr.r.Stats()) })
}

// waitHeartbeats waits until the relay wrote k more heartbeats than it had when called. A
// heartbeat is written by the relay's loop after HeartbeatInterval without any write, on the
// same pass that runs the snapshot triggers: k of them prove that the loop ran its timers for
// at least k intervals with nothing else to write. Tests use it to show that a snapshot that was
// not due did not happen.
func waitHeartbeats(t *testing.T, rr *runningRelay, k uint64) {
	t.Helper()
	from := rr.r.Stats().Heartbeats
	testenv.WaitUntil(t, streamtest.Converge, fmt.Sprintf("%d relay heartbeats", k), func() bool { return rr.r.Stats().Heartbeats >= from+k },
		func() string { return fmt.Sprintf("stats %+v", rr.r.Stats()) })
}

// waitRelayLane waits until the indexer's lane is ready with the relay's identity, at the
// relay's last sequence, with the relay's words.
func waitRelayLane(t *testing.T, ri *streamtest.RunningIndexer, rr *runningRelay, lane uint8) []uint64 {
	t.Helper()
	g := ri.Indexer.GlobalIndexer()
	var words []uint64
	var seq uint64
	testenv.WaitUntil(t, streamtest.Converge, fmt.Sprintf("lane %d converges to the relay", lane), func() bool {
		words, seq = rr.inspect(t)
		st := streamtest.LaneStatus(ri, lane)
		return g.ReadyLanes64()&(1<<lane) != 0 && st.Identity == rr.r.Identity().String() && st.InstalledSequence == seq &&
			slices.Equal(g.LaneWords(lane), words)
	}, func() string {
		return fmt.Sprintf("ready=%v words equal=%v status=%+v relay sequence %d identity %s", g.ReadyLanes64()&(1<<lane) != 0,
			slices.Equal(g.LaneWords(lane), words), streamtest.LaneStatus(ri, lane), seq, rr.r.Identity())
	})
	return words
}

// kvGen generates KV events of several workers and dp ranks: stores (new chains, children of
// a chain of the same source, and chains that share tokens with other sources), evictions of
// chain tails, and clears. It keeps what each source holds so that removals name real blocks.
type kvGen struct {
	rng     *rand.Rand
	nextExt uint64
	held    map[ckf.SourceKey][][]producer.StoredBlock // chains per source
	tokens  [][]uint64                                 // every stored chain's tokens (queries)
}

func newKvGen(seed uint64) *kvGen {
	return &kvGen{rng: rand.New(rand.NewPCG(seed, 7)), nextExt: 1, held: map[ckf.SourceKey][][]producer.StoredBlock{}}
}

func (g *kvGen) source() ckf.SourceKey {
	return ckf.SourceKey{Worker: ckf.WorkerID(1 + g.rng.IntN(4)), Rank: ckf.DpRank(g.rng.IntN(2))}
}

func (g *kvGen) blocks(tokens []uint64) []producer.StoredBlock {
	bs := make([]producer.StoredBlock, len(tokens))
	for i, tok := range tokens {
		bs[i] = producer.StoredBlock{BlockHash: ckf.ExternalBlockHash(g.nextExt), TokensHash: ckf.LocalBlockHash(tok)}
		g.nextExt++
	}
	return bs
}

func storeEvent(src ckf.SourceKey, d producer.StoreData) producer.RouterEvent {
	return producer.RouterEvent{WorkerID: src.Worker, Event: producer.KvCacheEvent{DpRank: src.Rank, Kind: producer.KvEventStored, Stored: d}}
}

func (g *kvGen) next() producer.RouterEvent {
	src := g.source()
	chains := g.held[src]
	switch x := g.rng.IntN(100); {
	case x < 30 || len(chains) == 0: // a new root chain
		tokens := make([]uint64, 2+g.rng.IntN(5))
		for i := range tokens {
			tokens[i] = g.rng.Uint64()
		}
		bs := g.blocks(tokens)
		g.held[src] = append(chains, bs)
		g.tokens = append(g.tokens, tokens)
		return storeEvent(src, producer.StoreData{Blocks: bs})
	case x < 50: // a chain sharing tokens with any stored chain (another source: owners > 1)
		tokens := slices.Clone(g.tokens[g.rng.IntN(len(g.tokens))])
		bs := g.blocks(tokens)
		g.held[src] = append(chains, bs)
		return storeEvent(src, producer.StoreData{Blocks: bs})
	case x < 70: // children of one of this source's chains
		i := g.rng.IntN(len(chains))
		parent := chains[i]
		tokens := make([]uint64, 1+g.rng.IntN(3))
		for j := range tokens {
			tokens[j] = g.rng.Uint64()
		}
		bs := g.blocks(tokens)
		chains[i] = append(slices.Clone(parent), bs...)
		all := make([]uint64, len(chains[i]))
		for j, b := range chains[i] {
			all[j] = uint64(b.TokensHash)
		}
		g.tokens = append(g.tokens, all)
		return storeEvent(src, producer.StoreData{HasParent: true, ParentHash: parent[len(parent)-1].BlockHash, Blocks: bs})
	case x < 95: // evict the tail of one chain
		i := g.rng.IntN(len(chains))
		c := chains[i]
		k := 1 + g.rng.IntN(len(c))
		ids := make([]ckf.ExternalBlockHash, k)
		for j := range ids {
			ids[j] = c[len(c)-1-j].BlockHash
		}
		if k == len(c) {
			g.held[src] = slices.Delete(chains, i, i+1)
		} else {
			chains[i] = c[:len(c)-k]
		}
		return producer.RouterEvent{WorkerID: src.Worker, Event: producer.KvCacheEvent{DpRank: src.Rank, Kind: producer.KvEventRemoved, Removed: ids}}
	default: // clear the source
		delete(g.held, src)
		return producer.RouterEvent{WorkerID: src.Worker, Event: producer.KvCacheEvent{DpRank: src.Rank, Kind: producer.KvEventCleared}}
	}
}

func (g *kvGen) take(n int) []producer.RouterEvent {
	out := make([]producer.RouterEvent, n)
	for i := range out {
		out[i] = g.next()
	}
	return out
}

// newReference returns a reference state fed evs.
func newReference(t *testing.T, e *relayEnv, evs ...[]producer.RouterEvent) *producer.DcState {
	t.Helper()
	ref, err := producer.NewDcState(ckf.NewCkfConfig(e.Blocks))
	if err != nil {
		t.Fatal(err)
	}
	for _, batch := range evs {
		for _, ev := range batch {
			ref.ApplyEvent(ev)
		}
	}
	return ref
}

// compareOwnership checks that the relay's exact state equals the reference's: sources and
// their block counts, every (source, external id) -> canonical mapping the generator knows, the
// owner count and residency of each canonical, and the aggregate counts.
func compareOwnership(t *testing.T, rr *runningRelay, ref *producer.DcState, g *kvGen) {
	t.Helper()
	var problems []string
	err := rr.r.Inspect(context.Background(), func(st *producer.DcState, _ *producer.Publisher) {
		a, b := st.Stats(), ref.Stats()
		if a.MemberCount != b.MemberCount || a.ContributionCount != b.ContributionCount || a.UniqueBlockCount != b.UniqueBlockCount ||
			a.OccupiedSlotCount != b.OccupiedSlotCount || a.CapacityFailures != b.CapacityFailures {
			problems = append(problems, "stats differ")
			t.Errorf("relay stats %+v\nreference stats %+v", a, b)
		}
		if !slices.Equal(st.MemberCounts(), ref.MemberCounts()) {
			problems = append(problems, "member counts differ")
		}
		n := 0
		for src, chains := range g.held {
			for _, c := range chains {
				for _, blk := range c {
					ca, oka := st.Lookup(src, blk.BlockHash)
					cb, okb := ref.Lookup(src, blk.BlockHash)
					if oka != okb || ca != cb {
						problems = append(problems, "lineage of "+src.String()+" differs")
						return
					}
					if !oka {
						continue
					}
					n++
					oa, ra := st.Owners(ca)
					ob, rb := ref.Owners(cb)
					if oa != ob || ra != rb || st.Contains(ca) != ref.Contains(cb) {
						problems = append(problems, "ownership of a canonical differs")
						return
					}
				}
			}
		}
		if n == 0 {
			problems = append(problems, "no block compared")
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(problems) > 0 {
		t.Fatalf("relay state differs from the reference: %v", problems)
	}
}

// TestRelayEndToEnd: KV events of four workers with two dp ranks each, on four partitions, go
// through the relay (some replayed at start, the rest live) to the indexer: the indexer's lane
// equals the relay's words at the relay's sequence, the relay's ownership model equals an
// in-process reference fed the same events, and queries answer like a reference indexer built
// from the relay's words.
func TestRelayEndToEnd(t *testing.T) {
	t.Parallel()
	e := newRelayEnv(t, 4096, 4)
	const lane = 3
	g := newKvGen(1)
	before := g.take(250)
	e.produce(before...)
	ri := e.StartIndexer(e.Manifest(31, lane), e.IndexerConfig())
	rr := e.startRelay(e.relayConfig(lane, testenv.UniqueName(t, "relay")), true)
	// The indexer started first and may already have asked for a snapshot, which the relay
	// answers with one more.
	if s := rr.r.Stats(); s.ReplayedEvents != uint64(len(before)) || s.Snapshots < 1 || s.Snapshots > 1+s.SnapshotRequests {
		t.Fatalf("after start-up: %+v; want %d replayed events and the start-up snapshot (plus answers to requests)", s, len(before))
	}
	waitRelayLane(t, ri, rr, lane)

	after := g.take(400)
	for i := 0; i < len(after); i += 40 {
		e.produce(after[i:min(i+40, len(after))]...)
	}
	waitApplied(t, rr, uint64(len(before)+len(after)))
	words := waitRelayLane(t, ri, rr, lane)

	ref := newReference(t, e, before, after)
	compareOwnership(t, rr, ref, g)
	_, seq := rr.inspect(t)
	// The reference indexer is built from the relay's own words (the physical layout depends on
	// the interleaving of partitions; the ownership model, compared above, does not).
	refIx := referenceIndexerWords(t, e.Manifest(31, lane), lane, rr.r.Identity(), seq, words)
	streamtest.CompareQueries(t, ri.Indexer.GlobalIndexer(), refIx, &streamtest.Producer{Lane: lane, Chains: g.tokens})

	s := rr.r.Stats()
	if s.Deltas == 0 || s.Images == 0 || s.Events != uint64(len(after)) || s.Rejected != 0 || s.DeadLetters != 0 {
		t.Errorf("stats %+v", s)
	}
	t.Logf("relay: %d deltas (%d images) in %d transactions; %d events", s.Deltas, s.Images, s.Transactions, s.Events)
}

// TestRelayIdleLaneSnapshotsLessOften: the time trigger writes a snapshot SnapshotInterval after
// the previous one only when a delta was published since; an idle lane's next snapshot waits
// SnapshotIdleInterval, since it would repeat the previous one word for word.
func TestRelayIdleLaneSnapshotsLessOften(t *testing.T) {
	t.Parallel()
	e := newRelayEnv(t, 4096, 1)
	const lane = 6
	cfg := e.relayConfig(lane, testenv.UniqueName(t, "relay"))
	cfg.SnapshotInterval = 100 * time.Millisecond
	cfg.SnapshotIdleInterval = time.Hour
	cfg.HeartbeatInterval = 50 * time.Millisecond
	rr := e.startRelay(cfg, true)

	// Idle from the start: only the start-up snapshot, even after the relay's loop ran its
	// timers for four heartbeat intervals (twice SnapshotInterval).
	waitHeartbeats(t, rr, 4)
	if s := rr.r.Stats(); s.Snapshots != 1 {
		t.Fatalf("idle lane: %d snapshots; want only the start-up one", s.Snapshots)
	}

	// Busy: the timed snapshot follows the deltas.
	g := newKvGen(3)
	ev := g.take(30)
	e.produce(ev...)
	waitApplied(t, rr, uint64(len(ev)))
	testenv.WaitUntil(t, streamtest.Converge, "a timed snapshot after the deltas", func() bool { return rr.r.Stats().Snapshots >= 2 },
		func() string { return fmt.Sprintf("stats %+v", rr.r.Stats()) })

	// Idle again: at most one more (for deltas published after the snapshot just seen), however
	// many intervals pass.
	n := rr.r.Stats().Snapshots
	waitHeartbeats(t, rr, 8)
	if s := rr.r.Stats(); s.Snapshots > n+1 {
		t.Fatalf("idle lane: %d snapshots after the last delta; want at most 1", s.Snapshots-n)
	}
	if s := rr.r.Stats(); s.Heartbeats == 0 {
		t.Errorf("an idle lane still gets heartbeats: %+v", s)
	}
}

// referenceIndexerWords installs words as lane's snapshot in a fresh GlobalIndexer.
func referenceIndexerWords(t *testing.T, m index.Manifest, lane uint8, id ckf.ProducerIdentity, seq uint64, words []uint64) *index.GlobalIndexer {
	t.Helper()
	g, err := index.NewGlobalIndexer(m, ckf.DefaultSearchConfig())
	if err != nil {
		t.Fatal(err)
	}
	in, err := g.ClaimLane(lane)
	if err != nil {
		t.Fatal(err)
	}
	lease := ckf.LaneLease{Consumer: m.ConsumerInstance(), Lane: lane, Epoch: 1}
	if err := in.Assign(id, lease); err != nil {
		t.Fatal(err)
	}
	if out := in.InstallSnapshot(&ckf.Snapshot{Identity: id, Lease: lease, Sequence: seq, Buckets: words}); out.Kind != index.OutcomeSnapshotInstalled {
		t.Fatalf("reference install: %v", out)
	}
	return g
}

// TestRelayRestartRequestAndDrain: a snapshot request on the control topic yields a snapshot;
// a graceful stop writes the tail and a drain marker that the indexer acknowledges; events
// written while the relay is down are not lost: the restarted relay (a new incarnation) replays
// everything, the indexer switches to its identity through its start-up snapshot, and its
// answers equal those of a reference that never stopped.
func TestRelayRestartRequestAndDrain(t *testing.T) {
	t.Parallel()
	e := newRelayEnv(t, 4096, 1) // one partition: the replay order is the reference's order
	const lane = 5
	g := newKvGen(2)
	events := e.WatchEvents()
	ri := e.StartIndexer(e.Manifest(41, lane), e.IndexerConfig())
	cfg := e.relayConfig(lane, testenv.UniqueName(t, "relay"))
	cfg.CKF.PublishEveryNEvents = 4 // exercise the delayed flush and a non-empty tail at stop
	cfg.PublishMaxDelay = 20 * time.Millisecond
	first := e.startRelay(cfg, true)
	a := g.take(200)
	e.produce(a...)
	waitApplied(t, first, uint64(len(a)))
	waitRelayLane(t, ri, first, lane)

	// A burst of snapshot requests (every replica asking at once) yields a snapshot.
	before := first.r.Stats().Snapshots
	out := streams.NewOutputs(e.Cluster.Client(t), e.Codec, 99, streams.OutputTopics{Control: e.Topics.Control}, nil)
	for i := 0; i < 5; i++ {
		out.RequestSnapshot(lane, streamtest.Pool(100+lane), schemas.ReasonOperator, "test", -1)
	}
	out.RequestSnapshot(lane, streamtest.Pool(1), schemas.ReasonOperator, "a foreign pool: ignored", -1)
	if err := out.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	testenv.WaitUntil(t, streamtest.Converge, "a snapshot after the requests", func() bool {
		return first.r.Stats().SnapshotRequests >= 5 && first.r.Stats().Snapshots > before
	}, func() string { return fmt.Sprintf("stats %+v", first.r.Stats()) })
	// Three idle heartbeat intervals (well past SnapshotRequestMinInterval) with every request
	// read: a request not coalesced would have had its snapshot by now.
	waitHeartbeats(t, first, 3)
	if n := first.r.Stats().Snapshots - before; n > 2 {
		t.Errorf("%d snapshots for one burst of requests; want them coalesced", n)
	}

	// The tail: events whose window is still open at stop.
	tail := g.take(3)
	e.produce(tail...)
	waitApplied(t, first, uint64(len(a)+len(tail)))
	firstID := first.r.Identity()
	if err := first.stop(); err != nil {
		t.Fatalf("graceful stop: %v", err)
	}
	events.WaitFor(t, lane, streamtest.Converge, "DRAIN_ACKNOWLEDGED", streamtest.KindIs(schemas.EventDrainAcknowledged))

	b := g.take(150) // written while no relay runs
	e.produce(b...)
	second := e.startRelay(cfg, true)
	if id := second.r.Identity(); id.Incarnation <= firstID.Incarnation {
		t.Fatalf("incarnation %d after %d; want strictly increasing", id.Incarnation, firstID.Incarnation)
	}
	c := g.take(150)
	e.produce(c...)
	waitApplied(t, second, uint64(len(a)+len(tail)+len(b)+len(c)))
	words := waitRelayLane(t, ri, second, lane)

	ref := newReference(t, e, a, tail, b, c)
	compareOwnership(t, second, ref, g)
	if !slices.Equal(words, ref.CopyWords()) {
		t.Log("note: the restarted relay's words differ from the reference's physical layout (same ownership)")
	}
	_, seq := second.inspect(t)
	m := e.Manifest(41, lane)
	refIx := referenceIndexerWords(t, m, lane, second.r.Identity(), seq, ref.CopyWords())
	streamtest.CompareQueries(t, ri.Indexer.GlobalIndexer(), refIx, &streamtest.Producer{Lane: lane, Chains: g.tokens})
	if s := second.r.Stats(); s.ReplayedEvents != uint64(len(a)+len(tail)+len(b)) {
		t.Errorf("second relay replayed %d events; want %d", s.ReplayedEvents, len(a)+len(tail)+len(b))
	}
}

// TestRelayDeadLettersBadEvents: undecodable records, an unknown parent, an unsupported
// residency domain and a remap of an external id are rejected per the spec's dispositions,
// counted and dead-lettered with their reason, and the relay keeps publishing.
func TestRelayDeadLettersBadEvents(t *testing.T) {
	t.Parallel()
	e := newRelayEnv(t, 4096, 2)
	const lane = 7
	ri := e.StartIndexer(e.Manifest(51, lane), e.IndexerConfig())
	rr := e.startRelay(e.relayConfig(lane, testenv.UniqueName(t, "relay")), true)
	g := newKvGen(3)
	good := g.take(50)
	e.produce(good...)

	src := ckf.SourceKey{Worker: 9, Rank: 1}
	unknownParent := storeEvent(src, producer.StoreData{HasParent: true, ParentHash: 999_999, Blocks: g.blocks([]uint64{1, 2})})
	badResidency := storeEvent(src, producer.StoreData{Blocks: g.blocks([]uint64{3})})
	badResidency.Residency = 0x7F // KvEventOf writes "unknown"
	stored := storeEvent(src, producer.StoreData{Blocks: g.blocks([]uint64{4})})
	remap := storeEvent(src, producer.StoreData{Blocks: []producer.StoredBlock{{BlockHash: stored.Event.Stored.Blocks[0].BlockHash, TokensHash: 5}}})
	e.produce(unknownParent, badResidency, stored, remap)
	e.produceRaw(&kgo.Record{Topic: e.kvTopic, Key: []byte("9"), Value: []byte("not avro")})
	more := g.take(50)
	e.produce(more...)

	waitApplied(t, rr, uint64(len(good)+4+1+len(more)))
	waitRelayLane(t, ri, rr, lane)
	s := rr.r.Stats()
	if s.Rejected != 3 || s.Undecodable != 1 || s.DeadLetters != 4 {
		t.Fatalf("stats %+v; want 3 rejected, 1 undecodable, 4 dead letters", s)
	}
	ref := newReference(t, e, good, []producer.RouterEvent{unknownParent, badResidency, stored, remap}, more)
	compareOwnership(t, rr, ref, g)

	// The dead letters carry the record and the reason.
	cl := e.Cluster.Client(t, kgo.ConsumeTopics(e.Topics.DeadLetter), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	var dls []schemas.DeadLetter
	ctx, cancel := context.WithTimeout(context.Background(), streamtest.Converge)
	defer cancel()
	for len(dls) < 4 && ctx.Err() == nil {
		cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
			d, err := e.Codec.DecodeDeadLetter(r.Value)
			if err != nil {
				t.Fatal(err)
			}
			if d.Component == "relay" {
				dls = append(dls, d)
			}
		})
	}
	if len(dls) != 4 {
		t.Fatalf("%d relay dead letters; want 4", len(dls))
	}
	var reasons []string
	for _, d := range dls {
		reasons = append(reasons, d.ReasonCode.String()+": "+d.Reason)
		if d.SourceTopic != e.kvTopic {
			t.Errorf("dead letter of topic %q", d.SourceTopic)
		}
	}
	for _, want := range []string{"parent block not found", "residency", "invalid block sequence", "undecodable KV event"} {
		found := false
		for _, r := range reasons {
			found = found || containsFold(r, want)
		}
		if !found {
			t.Errorf("no dead letter mentions %q: %q", want, reasons)
		}
	}
}

func containsFold(s, sub string) bool {
	return len(sub) == 0 || len(s) >= len(sub) && (indexFold(s, sub) >= 0)
}

func indexFold(s, sub string) int {
	lower := func(b byte) byte {
		if 'A' <= b && b <= 'Z' {
			return b + 'a' - 'A'
		}
		return b
	}
	for i := 0; i+len(sub) <= len(s); i++ {
		ok := true
		for j := 0; j < len(sub) && ok; j++ {
			ok = lower(s[i+j]) == lower(sub[j])
		}
		if ok {
			return i
		}
	}
	return -1
}

// servedLane starts an indexer replica of lane (consumer id consumer) and the lane's relay (a
// transactional id unique to the test), has the relay apply n events of g and waits until the
// replica serves the relay's state.
func (e *relayEnv) servedLane(t *testing.T, lane uint8, consumer ckf.ConsumerInstanceID, g *kvGen, n int) (*streamtest.RunningIndexer, relay.RelayConfig, *runningRelay) {
	t.Helper()
	ri := e.StartIndexer(e.Manifest(consumer, lane), e.IndexerConfig())
	cfg := e.relayConfig(lane, testenv.UniqueName(t, "relay"))
	rr := e.startRelay(cfg, true)
	e.produce(g.take(n)...)
	waitApplied(t, rr, uint64(n))
	waitRelayLane(t, ri, rr, lane)
	return ri, cfg, rr
}

// waitFencedStop waits for rr's Run to return, and fails t unless it returned ErrRelayFenced.
func waitFencedStop(t *testing.T, rr *runningRelay, who string) {
	t.Helper()
	select {
	case err := <-rr.done:
		rr.err, rr.cancel = err, nil
		if !errors.Is(err, relay.ErrRelayFenced) {
			t.Fatalf("%s: Run returned %v; want ErrRelayFenced", who, err)
		}
	case <-time.After(streamtest.Converge):
		t.Fatalf("%s: Run did not return within %v", who, streamtest.Converge)
	}
}

// TestRelayZombieFenced: a second instance of the same pool (same transactional id) takes the
// lane over with its start-up snapshot. It claims the pool before it initialises the id, so the
// broker's fence of the first instance is followed by that instance reading a newer claim and
// stopping (ErrRelayFenced) without fencing the second, and the indexer follows the second's
// identity.
func TestRelayZombieFenced(t *testing.T) {
	// On the shared broker: the broker fencing the older instance's transactional id (InitProducerID bumping its epoch) is what this test shows.
	t.Parallel()
	e := newBrokerRelayEnv(t, 4096, 2)
	const lane = 9
	g := newKvGen(4)
	ri, cfg, old := e.servedLane(t, lane, 61, g, 80)

	cur := e.startRelay(cfg, true)
	waitFencedStop(t, old, "the zombie")
	if err := old.r.Ready(); err == nil {
		t.Error("a fenced relay reports ready")
	}
	e.produce(g.take(40)...)
	waitApplied(t, cur, 120)
	waitRelayLane(t, ri, cur, lane)
	if err := cur.r.Ready(); err != nil {
		t.Errorf("the new instance is not ready: %v", err)
	}
}

// fenceTransactionalID initialises the transactional id txnID on its coordinator, as a producer
// starting with it does, and writes nothing: the id's holder is fenced at its next transactional
// request, exactly as when the brokers end its transaction and bump the epoch, with no other
// relay in sight. It retries while the coordinator is still ending the holder's open transaction
// (CONCURRENT_TRANSACTIONS).
func fenceTransactionalID(t *testing.T, cl *kgo.Client, txnID string) {
	t.Helper()
	var last error
	testenv.WaitUntil(t, streamtest.Converge, "the coordinator initialises "+txnID, func() bool {
		req := kmsg.NewPtrInitProducerIDRequest()
		req.TransactionalID = &txnID
		req.TransactionTimeoutMillis = 60_000
		req.ProducerID, req.ProducerEpoch = -1, -1
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		resp, err := req.RequestWith(ctx, cl)
		if err == nil {
			err = kerr.ErrorForCode(resp.ErrorCode)
		}
		last = err
		return err == nil
	}, func() string { return fmt.Sprintf("last answer: %v", last) })
}

// TestRelayRecoversFromAFenceNoInstanceCaused: a fence that no newer relay caused (the brokers
// bumped the transactional id's epoch; here InitProducerID from a client that writes nothing and
// claims nothing) is recovered from, under a new incarnation that the indexer follows, as often as
// it comes: the pool's latest claim is still the relay's own.
func TestRelayRecoversFromAFenceNoInstanceCaused(t *testing.T) {
	// On the shared broker: the fence is the transaction coordinator's answer.
	t.Parallel()
	e := newBrokerRelayEnv(t, 4096, 2)
	const lane = 10
	g := newKvGen(5)
	ri, cfg, rr := e.servedLane(t, lane, 62, g, 80)
	cl := e.Cluster.Client(t)
	applied := uint64(80)
	for i := range 2 {
		before := rr.r.Stats()
		fenceTransactionalID(t, cl, cfg.TransactionalID) // the next heartbeat (200 ms) meets the fence
		testenv.WaitUntil(t, streamtest.Converge, fmt.Sprintf("the relay recovers from fence %d", i+1), func() bool {
			s := rr.r.Stats()
			return s.FenceRecoveries == before.FenceRecoveries+1 && s.Recoveries > before.Recoveries && s.Incarnation > before.Incarnation && rr.r.Ready() == nil
		}, func() string {
			return fmt.Sprintf("stats %+v, ready %v, run %v", rr.r.Stats(), rr.r.Ready(), runErr(rr))
		})
		if err := runErr(rr); err != nil {
			t.Fatalf("the relay stopped on fence %d: %v", i+1, err)
		}
		e.produce(g.take(40)...)
		applied += 40
		waitApplied(t, rr, applied)
		waitRelayLane(t, ri, rr, lane) // the indexer follows the new incarnation, whose state is whole
	}
}

// TestRelayRefusesForeignLane: a relay never writes to a lane its pool does not own: the static
// lane map is checked by NewRelay, and the lane's snapshot index by Run.
func TestRelayRefusesForeignLane(t *testing.T) {
	t.Parallel()
	e := newRelayEnv(t, 4096, 1)
	cfg := e.relayConfig(2, testenv.UniqueName(t, "relay"))
	other := streamtest.Pool(500)
	cfg.LaneOwners[2] = &other
	if _, err := relay.NewRelay(relay.RelayParams{Config: cfg, Codec: e.Codec}); !errors.Is(err, relay.ErrLaneNotOwned) {
		t.Fatalf("NewRelay with a lane of another pool: %v; want ErrLaneNotOwned", err)
	}
	// Lane 4's latest snapshot was written by pool 104's producer; a relay of pool 102
	// configured on lane 4 must refuse it.
	p := e.Producer(4, 1)
	p.StoreChain(3, nil, 0)
	p.Snapshot()
	cfg = e.relayConfig(4, testenv.UniqueName(t, "relay"))
	cfg.Pool = streamtest.Pool(102)
	r, err := relay.NewRelay(relay.RelayParams{Config: cfg, Codec: e.Codec,
		ClientOpts: []kgo.Opt{kgo.SeedBrokers(e.Cluster.Seeds()...)}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), streamtest.Converge)
	defer cancel()
	if err := r.Run(ctx); !errors.Is(err, relay.ErrLaneNotOwned) {
		t.Fatalf("Run on a lane indexed by another pool: %v; want ErrLaneNotOwned", err)
	}
}

// TestRelayBoundsTransactions: under a burst, the relay groups the deltas of one input poll
// into one Kafka transaction (the commit cost is paid per transaction), and no transaction
// carries more than MaxDeltasPerTransaction deltas. Counted on the lane partition itself: the
// reader keeps transaction markers, so the deltas between two markers are one transaction.
// (Throughput is measured by BenchmarkE2ERelay, not here.)
func TestRelayBoundsTransactions(t *testing.T) {
	t.Parallel()
	e := newRelayEnv(t, 4096, 2)
	const lane, bound = 12, 16
	cfg := e.relayConfig(lane, testenv.UniqueName(t, "relay"))
	cfg.MaxDeltasPerTransaction = bound
	rr := e.startRelay(cfg, true)
	g := newKvGen(12)
	evs := g.take(3000)
	prod := e.Cluster.Client(t, kgo.ProducerLinger(time.Millisecond))
	for _, ev := range evs { // asynchronously, as fast as the client goes: a burst
		b, err := e.Codec.EncodeKvEvent(relay.KvEventOf(ev))
		if err != nil {
			t.Fatal(err)
		}
		prod.Produce(context.Background(), &kgo.Record{Topic: e.kvTopic, Key: []byte(strconv.FormatUint(uint64(ev.WorkerID), 10)), Value: b},
			func(_ *kgo.Record, err error) {
				if err != nil {
					t.Error(err)
				}
			})
	}
	waitApplied(t, rr, uint64(len(evs)))
	rr.inspect(t) // runs after the loop pass that applied the last event committed its deltas
	s := rr.r.Stats()

	// The end is listed once the last commit marker is written (a commit returns before it is),
	// so that the reader below counts the last transaction too.
	streamtest.WaitTransactionsSettled(t, e.Cluster.Admin(t), e.Topics.Lanes)
	ends, err := e.Cluster.Admin(t).ListEndOffsets(context.Background(), e.Topics.Lanes)
	if err != nil {
		t.Fatal(err)
	}
	end, _ := ends.Lookup(e.Topics.Lanes, lane)
	cl := e.Cluster.Client(t, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{e.Topics.Lanes: {lane: kgo.NewOffset().AtStart()}}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords())
	var deltas, txns, inTxn, largest int
	for next := int64(0); next < end.Offset; {
		fs := cl.PollFetches(context.Background())
		if err := fs.Err0(); err != nil {
			t.Fatal(err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			next = r.Offset + 1
			if r.Attrs.IsControl() {
				if inTxn > 0 {
					txns++
					largest = max(largest, inTxn)
				}
				inTxn = 0
				return
			}
			if lr, err := e.Codec.DecodeLaneRecord(r.Value); err == nil && lr.Kind == schemas.LaneDelta {
				deltas++
				inTxn++
			}
		})
	}
	if uint64(deltas) != s.Deltas || deltas == 0 {
		t.Fatalf("%d deltas on the lane, relay published %d", deltas, s.Deltas)
	}
	if largest > bound {
		t.Fatalf("a transaction carried %d deltas; bound %d", largest, bound)
	}
	if txns >= deltas {
		t.Fatalf("%d deltas in %d transactions: the burst's deltas were not grouped", deltas, txns)
	}
	t.Logf("%d deltas in %d transactions (largest %d, bound %d)", deltas, txns, largest, bound)
}

// TestRelayRecoversFromUncertainWrite: a failed delta transaction makes delivery uncertain; the
// relay does not continue the stream: it fences it, starts a new incarnation whose first record
// is a snapshot (a failed first attempt is retried), and the indexer switches to it and converges
// with the relay's words.
func TestRelayRecoversFromUncertainWrite(t *testing.T) {
	t.Parallel()
	e := newRelayEnv(t, 4096, 2)
	const lane = 12
	ri := e.StartIndexer(e.Manifest(71, lane), e.IndexerConfig())
	rr := e.startRelay(e.relayConfig(lane, testenv.UniqueName(t, "relay")), true)
	g := newKvGen(6)
	a := g.take(60)
	e.produce(a...)
	waitApplied(t, rr, 60)
	waitRelayLane(t, ri, rr, lane)
	firstID := rr.r.Identity()

	// The delta write fails, then the first snapshot after it (the recovery's). In that order: a
	// snapshot the indexer asked for at start may still be written after the fault is set, and it
	// must not take the snapshot's failure.
	failDeltas, failSnapshot := true, false
	injectedCh := make(chan struct{})
	relay.SetRelayWriteFault(rr.r, func(what string) error { // runs on the relay's goroutine
		switch {
		case what == "deltas" && failDeltas:
			failDeltas, failSnapshot = false, true
		case what == "snapshot" && failSnapshot:
			failSnapshot = false
			close(injectedCh)
		default:
			return nil
		}
		return errors.New("injected: broker unreachable")
	})
	b := g.take(60)
	e.produce(b...)
	select {
	case <-injectedCh:
	case <-time.After(streamtest.Converge):
		t.Fatal("the injected faults were not reached")
	}
	waitApplied(t, rr, 120)
	testenv.WaitUntil(t, streamtest.Converge, "the relay recovers", func() bool { return rr.r.Stats().Recoveries > 0 && rr.r.Ready() == nil },
		func() string { return fmt.Sprintf("stats %+v", rr.r.Stats()) })
	if id := rr.r.Identity(); id.Incarnation <= firstID.Incarnation {
		t.Fatalf("recovered under incarnation %d, first %d", id.Incarnation, firstID.Incarnation)
	}
	c := g.take(30)
	e.produce(c...)
	waitApplied(t, rr, 150)
	waitRelayLane(t, ri, rr, lane)
	compareOwnership(t, rr, newReference(t, e, a, b, c), g)
	if s := rr.r.Stats(); s.Recoveries != 1 || s.Fenced {
		t.Errorf("stats %+v; want one recovery, not fenced", s)
	}
}

// TestRelayCountsCapacityOmissions: a filter too small for its blocks omits fingerprints; the
// relay counts the omissions (as the reference does), keeps lineage and ownership, dead-letters
// nothing, retires nothing, and the indexer still converges with its words. The relay's
// capacity state reaches the indexer on the lane records: the lane's status and lane events
// carry it, the lane is marked incomplete, and answers say so.
func TestRelayCountsCapacityOmissions(t *testing.T) {
	t.Parallel()
	e := newRelayEnv(t, 16, 1) // 8 buckets, 32 slots
	const lane = 14
	events := e.WatchEvents()
	icfg := e.IndexerConfig()
	icfg.ProgressInterval = 50 * time.Millisecond // progress events report the capacity state too
	ri := e.StartIndexer(e.Manifest(81, lane), icfg)
	rr := e.startRelay(e.relayConfig(lane, testenv.UniqueName(t, "relay")), true)
	g := newKvGen(8)
	var evs []producer.RouterEvent
	for len(evs) < 40 {
		if ev := g.next(); ev.Event.Kind == producer.KvEventStored {
			evs = append(evs, ev)
		}
	}
	e.produce(evs...)
	waitApplied(t, rr, uint64(len(evs)))
	waitRelayLane(t, ri, rr, lane)
	ref := newReference(t, e, evs)
	s := rr.r.Stats()
	if want := ref.Telemetry().CapacityFailures; want == 0 || s.CapacityOmissions != want {
		t.Fatalf("capacity omissions %d, reference %d (want equal and non-zero)", s.CapacityOmissions, want)
	}
	if s.Rejected != 0 || s.DeadLetters != 0 || s.Fenced || s.Recoveries != 0 {
		t.Fatalf("stats %+v: capacity omissions must not reject, dead-letter or fence", s)
	}
	compareOwnership(t, rr, ref, g)

	// The capacity state on the indexer side: the reference's counts, as of the relay's last
	// record (the relay publishes its state with every record, and the lane has applied them all).
	want := schemas.CapacityState{ResidentBlocks: ref.ResidentCount(), OmittedBlocks: ref.OmittedCount(), CapacityOmissions: ref.LifetimeCapacityOmissions()}
	if want.OmittedBlocks == 0 {
		t.Fatal("the reference omits nothing: the fixture is wrong")
	}
	testenv.WaitUntil(t, streamtest.Converge, "the lane status carries the relay's capacity state", func() bool {
		c := streamtest.LaneStatus(ri, lane).Capacity
		return c.Reported && c.ResidentBlocks == want.ResidentBlocks && c.OmittedBlocks == want.OmittedBlocks &&
			c.CapacityOmissions == want.CapacityOmissions
	}, func() string {
		return fmt.Sprintf("status %+v, want %+v", streamtest.LaneStatus(ri, lane).Capacity, want)
	})
	c := streamtest.LaneStatus(ri, lane).Capacity
	if wantOcc := float64(want.ResidentBlocks) / 32; c.FilterOccupancy != wantOcc {
		t.Errorf("filter occupancy %v, want %v", c.FilterOccupancy, wantOcc)
	}
	if c.OmissionsSinceSnapshot > c.CapacityOmissions {
		t.Errorf("omissions since the snapshot %d exceed all omissions %d", c.OmissionsSinceSnapshot, c.CapacityOmissions)
	}
	if m := ri.Indexer.IncompleteLanes(); m != 1<<lane {
		t.Errorf("incomplete lanes %#x, want lane %d", m, lane)
	}
	// Lane events carry the state the lane knew when they were written.
	events.WaitFor(t, lane, streamtest.Converge, "a lane event with a capacity state", func(ev schemas.LaneEvent) bool {
		got, ok := ev.Capacity.Get()
		return ok && got.OmittedBlocks > 0 && got.ResidentBlocks > 0
	})
	// An answer over the lane marks it incomplete.
	ans := query.NewAnswerer(ri.Indexer.GlobalIndexer(), ri.Indexer.EligibleLanes, query.IncompleteLanes(ri.Indexer.IncompleteLanes))
	reply := ans.Answer(&schemas.QueryRequest{CorrelationID: "c", Input: schemas.InputLocalBlockHashes, Hashes: schemas.AppendU64s(nil, []uint64{1, 2})}, nil)
	if reply.Status != schemas.QueryOK || reply.IncompleteLanes != 1<<lane {
		t.Errorf("reply %+v: want lane %d marked incomplete", reply, lane)
	}
}

// TestRelayAppliesWhileTheLastTransactionCommits: the relay commits a poll's lane transaction in
// the background and goes on applying the next poll. With the commit held in flight (a gate
// between its end and the loop learning the outcome), the relay applies the next event and counts
// no transaction and no sequence of the held one; once released, everything is committed and the
// indexer converges to the state of a relay that saw every event. Single events are produced
// while the gate is armed, so each is a poll of its own.
func TestRelayAppliesWhileTheLastTransactionCommits(t *testing.T) {
	t.Parallel()
	e := newRelayEnv(t, 4096, 1)
	const lane = 13
	ri := e.StartIndexer(e.Manifest(71, lane), e.IndexerConfig())
	cfg := e.relayConfig(lane, testenv.UniqueName(t, "relay"))
	// No write may fall due on a timer while the commit is held (such a write waits for it):
	// every event closes its own window, and heartbeats are an hour apart.
	cfg.CKF.PublishEveryNEvents = 1
	cfg.HeartbeatInterval = time.Hour
	rr := e.startRelay(cfg, true)
	g := newKvGen(13)
	a := g.take(40)
	e.produce(a...)
	waitApplied(t, rr, 40)
	waitRelayLane(t, ri, rr, lane)
	// The relay counts a transaction when its commit's answer reaches the loop, which can be
	// after the indexer has read the records: the counts taken below must include every
	// transaction of a, or the first commit the gate holds can be one of a's.
	testenv.WaitUntil(t, streamtest.Converge, "the relay's counts reach the lane's sequence", func() bool {
		return rr.r.Stats().LastSequence == streamtest.LaneStatus(ri, lane).InstalledSequence
	}, func() string {
		return fmt.Sprintf("relay %+v, lane %+v", rr.r.Stats(), streamtest.LaneStatus(ri, lane))
	})

	held, release := make(chan struct{}), make(chan struct{})
	var holdOnce, releaseOnce sync.Once
	free := func() { releaseOnce.Do(func() { close(release) }) }
	defer free() // a failing test must not leave the commit held (the relay's stop waits for it)
	relay.SetRelayCommitGate(rr.r, func() {
		holdOnce.Do(func() { // only the first background commit is held
			close(held)
			<-release
		})
	})
	before := rr.r.Stats()
	x := g.take(1)
	e.produce(x...)
	select {
	case <-held:
	case <-time.After(streamtest.Converge):
		t.Fatalf("no lane transaction was committed in the background: stats %+v", rr.r.Stats())
	}
	if s := rr.r.Stats(); s.Transactions != before.Transactions || s.LastSequence != before.LastSequence {
		t.Fatalf("the held transaction was counted before it committed: %d transactions at sequence %d, before %d at %d",
			s.Transactions, s.LastSequence, before.Transactions, before.LastSequence)
	}
	y := g.take(1)
	e.produce(y...)
	waitApplied(t, rr, 42) // applied while the previous transaction is still in flight
	if s := rr.r.Stats(); s.Transactions != before.Transactions || s.LastSequence != before.LastSequence {
		t.Fatalf("while held: %d transactions at sequence %d, want %d at %d", s.Transactions, s.LastSequence,
			before.Transactions, before.LastSequence)
	}
	free()
	waitRelayLane(t, ri, rr, lane)
	compareOwnership(t, rr, newReference(t, e, a, x, y), g)
	if s := rr.r.Stats(); s.Fenced || s.Recoveries != 0 || s.LastSequence <= before.LastSequence {
		t.Fatalf("stats %+v; want the held events committed after sequence %d, no recovery", s, before.LastSequence)
	}
}
