package streams_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/ckf/index"
	"github.com/ckf-stream/ckf-stream/ckf/producer"
	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/ckf-stream/ckf-stream/streams"
	"github.com/ckf-stream/ckf-stream/testenv"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap/zaptest"
)

// The harness of the indexer integration tests: real topics on the test broker, producers
// written in the test (ckf.DcState + ckf.Publisher + streams.LaneWriter), and an observer of the
// lane-events topic.

var testDomain = ckf.IndexerDomainID{
	CacheSemantics: ckf.CacheSemanticsID{Digest: ckf.Digest128{0xC5}, Source: ckf.IdentityExplicit},
	RoutingScope:   ckf.RoutingScopeID{Digest: ckf.Digest128{0x5C}, Source: ckf.IdentityExplicit},
}

func testPool(dc uint64) ckf.PoolID { return ckf.PoolID{Domain: testDomain, Dc: ckf.DcID(dc)} }

// testEnv is one test's set of topics and the codec.
type testEnv struct {
	t       testing.TB
	cluster *testenv.Cluster
	topics  streams.IndexerTopics
	codec   *schemas.Codec
	format  ckf.FormatIdentity
	blocks  uint64 // expected blocks per DC of the producers
	// chunkWords is the producers' snapshot chunk size (small, so snapshots have several chunks).
	chunkWords int
}

func newTestEnv(t testing.TB, expectedBlocks uint64) *testEnv {
	t.Helper()
	return newTestEnvOn(t, testenv.Default(t), expectedBlocks)
}

// newTestEnvOn is newTestEnv on a given cluster (a private broker the test may restart).
func newTestEnvOn(t testing.TB, c *testenv.Cluster, expectedBlocks uint64) *testEnv {
	t.Helper()
	codec, err := schemas.NewCodec(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	buckets, err := ckf.BucketCountFor(expectedBlocks)
	if err != nil {
		t.Fatal(err)
	}
	return &testEnv{
		t:       t,
		cluster: c,
		topics: streams.IndexerTopics{
			Lanes:         c.NewTopic(t, ckf.LaneCount),
			SnapshotIndex: c.NewTopic(t, 1, testenv.TopicConfig("cleanup.policy", "compact")),
			Control:       c.NewTopic(t, 1),
			LaneEvents:    c.NewTopic(t, ckf.LaneCount),
			DeadLetter:    c.NewTopic(t, 1),
		},
		codec:      codec,
		format:     ckf.NewFormatIdentity(ckf.DefaultSeed, buckets),
		blocks:     expectedBlocks,
		chunkWords: 700,
	}
}

// manifest returns a manifest with lane l owned by DC 100+l for each given lane.
func (e *testEnv) manifest(consumer ckf.ConsumerInstanceID, lanes ...uint8) index.Manifest {
	e.t.Helper()
	var ml index.ManifestLanes
	for _, l := range lanes {
		p := testPool(100 + uint64(l))
		ml[l] = &p
	}
	m, _, err := index.NewManifest(consumer, testDomain, e.format, ml)
	if err != nil {
		e.t.Fatal(err)
	}
	return m
}

// runningIndexer is an indexer started by startIndexer.
type runningIndexer struct {
	ix     *streams.Indexer
	cancel context.CancelFunc
	done   chan error
}

// indexerConfig returns the indexer configuration of the tests: the defaults on the test's
// topics, with freshness bounds no test reaches by accident and no periodic progress events.
func (e *testEnv) indexerConfig() streams.IndexerConfig {
	cfg := streams.DefaultIndexerConfig()
	cfg.Topics = e.topics
	cfg.Freshness = streams.FreshnessPolicy{MaxRecordLag: 1 << 40, MaxTimeLag: time.Hour}
	cfg.ProgressInterval = 0
	return cfg
}

func (e *testEnv) startIndexer(m index.Manifest, cfg streams.IndexerConfig) *runningIndexer {
	e.t.Helper()
	return e.startIndexerWith(m, cfg, nil)
}

// startIndexerWith is startIndexer with setup applied to the Indexer before it runs (test hooks).
func (e *testEnv) startIndexerWith(m index.Manifest, cfg streams.IndexerConfig, setup func(*streams.Indexer)) *runningIndexer {
	e.t.Helper()
	g, err := index.NewGlobalIndexer(m, ckf.DefaultSearchConfig())
	if err != nil {
		e.t.Fatal(err)
	}
	ix, err := streams.NewIndexer(streams.IndexerParams{
		Config: cfg, Indexer: g, Codec: e.codec,
		ClientOpts: []kgo.Opt{kgo.SeedBrokers(e.cluster.Seeds()...)},
		Log:        zaptest.NewLogger(e.t).Named("ix"),
	})
	if err != nil {
		e.t.Fatal(err)
	}
	if setup != nil {
		setup(ix)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ri := &runningIndexer{ix: ix, cancel: cancel, done: make(chan error, 1)}
	go func() { ri.done <- ix.Run(ctx) }()
	e.t.Cleanup(ri.stop)
	select {
	case <-ix.Started():
	case err := <-ri.done:
		e.t.Fatalf("indexer stopped at start-up: %v", err)
	case <-time.After(time.Minute):
		e.t.Fatal("indexer did not start")
	}
	return ri
}

func (ri *runningIndexer) stop() {
	if ri.cancel == nil {
		return
	}
	ri.cancel()
	<-ri.done
	ri.cancel = nil
}

// testProducer is one lane's producer: exact state, publisher, and writer.
type testProducer struct {
	t     testing.TB
	lane  uint8
	id    ckf.ProducerIdentity
	state *producer.DcState
	pub   *producer.Publisher
	w     *streams.LaneWriter
	epoch uint64
	rng   *rand.Rand
	// chains are the token-hash chains stored so far (for queries).
	chains [][]uint64
	nextID uint64
}

func (e *testEnv) producer(lane uint8, incarnation uint64) *testProducer {
	e.t.Helper()
	id, state := e.producerState(lane, incarnation)
	return e.producerWithIdentity(lane, id, state)
}

// transactionalProducer is producer with a transactional writer, as a relay's: every write is
// one transaction, so the lane partition holds commit markers.
func (e *testEnv) transactionalProducer(lane uint8, incarnation uint64) *testProducer {
	e.t.Helper()
	id, state := e.producerState(lane, incarnation)
	cl := e.cluster.Client(e.t, append(streams.LaneWriterClientOpts(), kgo.TransactionalID(testenv.UniqueName(e.t, "txn")))...)
	return e.producerOn(cl, true, lane, id, state)
}

// producerState is a fresh exact state of the env's size and the identity of lane's pool at
// incarnation.
func (e *testEnv) producerState(lane uint8, incarnation uint64) (ckf.ProducerIdentity, *producer.DcState) {
	e.t.Helper()
	state, err := producer.NewDcState(ckf.NewCkfConfig(e.blocks))
	if err != nil {
		e.t.Fatal(err)
	}
	return ckf.ProducerIdentity{Pool: testPool(100 + uint64(lane)), Incarnation: incarnation, LayoutGeneration: 1, Format: state.Format()}, state
}

func (e *testEnv) producerWithIdentity(lane uint8, id ckf.ProducerIdentity, state *producer.DcState) *testProducer {
	e.t.Helper()
	return e.producerOn(e.cluster.Client(e.t, streams.LaneWriterClientOpts()...), false, lane, id, state)
}

func (e *testEnv) producerOn(cl *kgo.Client, transactional bool, lane uint8, id ckf.ProducerIdentity, state *producer.DcState) *testProducer {
	e.t.Helper()
	p := &testProducer{t: e.t, lane: lane, id: id, state: state,
		rng: rand.New(rand.NewPCG(uint64(lane), id.Incarnation)), nextID: 1}
	cfg := streams.DefaultLaneWriterConfig()
	cfg.LaneTopic, cfg.IndexTopic, cfg.Lane, cfg.Transactional = e.topics.Lanes, e.topics.SnapshotIndex, lane, transactional
	if e.chunkWords > 0 {
		cfg.ChunkWords = e.chunkWords
	}
	w, err := streams.NewLaneWriter(cl, e.codec, id, cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	p.w = w
	p.pub = producer.NewPublisher(id, 0, p.w)
	return p
}

// snapshot publishes a barrier snapshot (tail first, on the old wire lease).
func (p *testProducer) snapshot() streams.SnapshotPosition {
	p.t.Helper()
	p.epoch++
	snap, err := p.pub.SnapshotAfterBarrier(p.state, ckf.LaneLease{Lane: p.lane, Epoch: p.epoch})
	if err != nil {
		p.t.Fatalf("lane %d: snapshot: %v", p.lane, err)
	}
	pos, err := p.w.WriteSnapshot(context.Background(), &snap)
	if err != nil {
		p.t.Fatalf("lane %d: write snapshot: %v", p.lane, err)
	}
	return pos
}

// storeChain stores a chain of n new blocks, optionally continuing the first k blocks of an
// existing chain (a shared prefix), and publishes the delta.
func (p *testProducer) storeChain(n int, prefixOf []uint64, k int) []uint64 {
	p.t.Helper()
	tokens := append([]uint64(nil), prefixOf[:k]...)
	for i := 0; i < n; i++ {
		tokens = append(tokens, p.rng.Uint64())
	}
	// Store the whole chain as one event of fresh external ids (the canonical hashes depend only
	// on the token hashes).
	blocks := make([]producer.StoredBlock, len(tokens))
	for i, tok := range tokens {
		blocks[i] = producer.StoredBlock{BlockHash: ckf.ExternalBlockHash(p.nextID), TokensHash: ckf.LocalBlockHash(tok)}
		p.nextID++
	}
	p.apply(producer.RouterEvent{WorkerID: 1, Event: producer.KvCacheEvent{Kind: producer.KvEventStored, Stored: producer.StoreData{Blocks: blocks}}})
	p.chains = append(p.chains, tokens)
	return tokens
}

// apply applies one event and publishes its publication, if any.
func (p *testProducer) apply(ev producer.RouterEvent) {
	p.t.Helper()
	out := p.state.ApplyEvent(ev)
	if out.FirstError != nil && !errorsIsCapacity(out.FirstError) {
		p.t.Fatalf("lane %d: apply: %v", p.lane, out.FirstError)
	}
	if len(out.Publication) > 0 {
		if _, err := p.pub.Publish(out.Publication); err != nil {
			p.t.Fatalf("lane %d: publish: %v", p.lane, err)
		}
	}
}

func errorsIsCapacity(err error) bool { return errors.Is(err, ckf.ErrCapacityExhausted) }

// clearWorker clears everything worker 1 stored.
func (p *testProducer) clearWorker() {
	p.apply(producer.RouterEvent{WorkerID: 1, Event: producer.KvCacheEvent{Kind: producer.KvEventCleared}})
	p.chains = nil
}

// waitLane waits until the indexer's words of the lane equal the producer's words and the lane
// is ready at the producer's last sequence.
func waitLane(t *testing.T, ri *runningIndexer, p *testProducer, timeout time.Duration) {
	t.Helper()
	want := p.state.CopyWords()
	g := ri.ix.GlobalIndexer()
	testenv.WaitUntil(t, timeout, fmt.Sprintf("lane %d converges to the producer", p.lane), func() bool {
		return g.ReadyLanes()&(1<<p.lane) != 0 && slices.Equal(g.LaneWords(p.lane), want) &&
			laneStatus(ri, p.lane).InstalledSequence == p.pub.LastSequence()
	}, func() string {
		return fmt.Sprintf("ready=%v words equal=%v status=%+v producer sequence %d", g.ReadyLanes()&(1<<p.lane) != 0,
			slices.Equal(g.LaneWords(p.lane), want), laneStatus(ri, p.lane), p.pub.LastSequence())
	})
}

func laneStatus(ri *runningIndexer, lane uint8) streams.LaneStatus {
	for _, s := range ri.ix.Lanes() {
		if s.Lane == lane {
			return s
		}
	}
	return streams.LaneStatus{}
}

// eventLog collects the lane events of a topic.
type eventLog struct {
	mu     sync.Mutex
	events []schemas.LaneEvent
}

func (e *testEnv) watchEvents() *eventLog {
	e.t.Helper()
	assign := map[int32]kgo.Offset{}
	for p := int32(0); p < ckf.LaneCount; p++ {
		assign[p] = kgo.NewOffset().AtStart()
	}
	cl := e.cluster.Client(e.t, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{e.topics.LaneEvents: assign}))
	log := &eventLog{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	e.t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			fs.EachRecord(func(r *kgo.Record) {
				ev, err := e.codec.DecodeLaneEvent(r.Value)
				if err != nil {
					e.t.Errorf("undecodable lane event at %d: %v", r.Offset, err)
					return
				}
				log.mu.Lock()
				log.events = append(log.events, ev)
				log.mu.Unlock()
			})
		}
	}()
	return log
}

// waitFor returns the first event of lane matching match, waiting up to timeout.
func (l *eventLog) waitFor(t *testing.T, lane uint8, timeout time.Duration, what string, match func(ev schemas.LaneEvent) bool) schemas.LaneEvent {
	t.Helper()
	var found schemas.LaneEvent
	testenv.WaitUntil(t, timeout, fmt.Sprintf("lane %d: a %s event", lane, what), func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		for _, ev := range l.events {
			if ev.Lane == lane && match(ev) {
				found = ev
				return true
			}
		}
		return false
	}, func() string {
		l.mu.Lock()
		defer l.mu.Unlock()
		var kinds []string
		for _, ev := range l.events {
			if ev.Lane == lane {
				s := ev.Kind.String()
				if ev.Fault != nil {
					s += "(" + ev.Fault.Kind.String() + ")"
				}
				kinds = append(kinds, s)
			}
		}
		return fmt.Sprintf("lane events seen: %v", kinds)
	})
	return found
}

// count returns how many events of lane seen so far match.
func (l *eventLog) count(lane uint8, match func(ev schemas.LaneEvent) bool) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, ev := range l.events {
		if ev.Lane == lane && match(ev) {
			n++
		}
	}
	return n
}

func kindIs(k schemas.LaneEventKind) func(schemas.LaneEvent) bool {
	return func(ev schemas.LaneEvent) bool { return ev.Kind == k }
}

func faultIs(k schemas.LaneEventKind, f schemas.LaneFaultKind) func(schemas.LaneEvent) bool {
	return func(ev schemas.LaneEvent) bool { return ev.Kind == k && ev.Fault != nil && ev.Fault.Kind == f }
}
