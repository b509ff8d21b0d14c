package streamtest

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
	"github.com/ckf-stream/ckf-stream/streams/lanes"
	"github.com/ckf-stream/ckf-stream/testenv"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap/zaptest"
)

// The harness of the indexer integration tests: real topics on the test broker, producers
// written in the test (ckf.DcState + ckf.Publisher + streams.LaneWriter), and an observer of the
// lane-events topic.

var Domain = ckf.IndexerDomainID{
	CacheSemantics: ckf.CacheSemanticsID{Digest: ckf.Digest128{0xC5}, Source: ckf.IdentityExplicit},
	RoutingScope:   ckf.RoutingScopeID{Digest: ckf.Digest128{0x5C}, Source: ckf.IdentityExplicit},
}

func Pool(dc uint64) ckf.PoolID { return ckf.PoolID{Domain: Domain, Dc: ckf.DcID(dc)} }

// Env is one test's set of topics and the codec.
type Env struct {
	T       testing.TB
	Cluster *testenv.Cluster
	Topics  lanes.IndexerTopics
	// LanePartitions is the partition count of the lane and lane-events topics NewEnv makes:
	// ckf.MaxLanes, so that a test may use any lane 0..63 (partition p is lane p, consumer §16).
	// A 64-partition topic costs the broker no more to create than a 16-partition one (measured
	// on the shared broker: 5.2 s for two topics either way) and the indexer fetches only the
	// partitions of its configured lanes.
	LanePartitions int32
	Codec          *schemas.Codec
	Format         ckf.FormatIdentity
	Blocks         uint64 // expected blocks per DC of the producers
	// chunkWords is the producers' snapshot chunk size (small, so snapshots have several chunks).
	ChunkWords int
	// WriteTimeout, when positive, bounds each of the producers' writes instead of the lane
	// writer's default (30 s): a test that restarts its broker under writing producers needs
	// more on a loaded machine, where the restart alone can take longer.
	WriteTimeout time.Duration
}

func NewEnv(t testing.TB, expectedBlocks uint64) *Env {
	t.Helper()
	return NewEnvOn(t, testenv.Default(t), expectedBlocks)
}

// NewEnvOn is NewEnv on a given cluster (a private broker the test may restart).
func NewEnvOn(t testing.TB, c *testenv.Cluster, expectedBlocks uint64) *Env {
	t.Helper()
	codec, err := schemas.NewCodec(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	buckets, err := ckf.BucketCountFor(expectedBlocks)
	if err != nil {
		t.Fatal(err)
	}
	return &Env{
		T:       t,
		Cluster: c,
		Topics: lanes.IndexerTopics{
			Lanes:         c.NewTopic(t, ckf.MaxLanes),
			SnapshotIndex: c.NewTopic(t, 1, testenv.TopicConfig("cleanup.policy", "compact")),
			Control:       c.NewTopic(t, 1),
			LaneEvents:    c.NewTopic(t, ckf.MaxLanes),
			DeadLetter:    c.NewTopic(t, 1),
		},
		LanePartitions: ckf.MaxLanes,
		Codec:          codec,
		Format:         ckf.NewFormatIdentity(ckf.DefaultSeed, buckets),
		Blocks:         expectedBlocks,
		ChunkWords:     700,
	}
}

// Manifest returns a manifest with lane l owned by DC 100+l for each given lane: a table of 16
// lanes for lanes 0..15, else of the highest lane + 1 (index.NewManifest).
func (e *Env) Manifest(consumer ckf.ConsumerInstanceID, lanes ...uint8) index.Manifest {
	e.T.Helper()
	var ml index.ManifestLanes
	for _, l := range lanes {
		p := Pool(100 + uint64(l))
		ml[l] = &p
	}
	m, _, err := index.NewManifest(consumer, Domain, e.Format, ml)
	if err != nil {
		e.T.Fatal(err)
	}
	return m
}

// RunningIndexer is an indexer started by StartIndexer.
type RunningIndexer struct {
	Indexer *lanes.Indexer
	cancel  context.CancelFunc
	done    chan error
}

// IndexerConfig returns the indexer configuration of the tests: the defaults on the test's
// topics, with freshness bounds no test reaches by accident and no periodic progress events.
func (e *Env) IndexerConfig() lanes.IndexerConfig {
	cfg := lanes.DefaultIndexerConfig()
	cfg.Topics = e.Topics
	cfg.Freshness = lanes.FreshnessPolicy{MaxRecordLag: 1 << 40, MaxTimeLag: time.Hour}
	cfg.ProgressInterval = 0
	return cfg
}

func (e *Env) StartIndexer(m index.Manifest, cfg lanes.IndexerConfig) *RunningIndexer {
	e.T.Helper()
	return e.StartIndexerWith(m, cfg, nil)
}

// StartIndexerWith is StartIndexer with setup applied to the Indexer before it runs (test hooks).
func (e *Env) StartIndexerWith(m index.Manifest, cfg lanes.IndexerConfig, setup func(*lanes.Indexer)) *RunningIndexer {
	e.T.Helper()
	g, err := index.NewGlobalIndexer(m, ckf.DefaultSearchConfig())
	if err != nil {
		e.T.Fatal(err)
	}
	ix, err := lanes.NewIndexer(lanes.IndexerParams{
		Config: cfg, Indexer: g, Codec: e.Codec,
		ClientOpts: []kgo.Opt{kgo.SeedBrokers(e.Cluster.Seeds()...)},
		Log:        zaptest.NewLogger(e.T).Named("ix"),
	})
	if err != nil {
		e.T.Fatal(err)
	}
	if setup != nil {
		setup(ix)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ri := &RunningIndexer{Indexer: ix, cancel: cancel, done: make(chan error, 1)}
	go func() { ri.done <- ix.Run(ctx) }()
	e.T.Cleanup(ri.Stop)
	select {
	case <-ix.Started():
	case err := <-ri.done:
		e.T.Fatalf("indexer stopped at start-up: %v", err)
	case <-time.After(time.Minute):
		e.T.Fatal("indexer did not start")
	}
	return ri
}

func (ri *RunningIndexer) Stop() {
	if ri.cancel == nil {
		return
	}
	ri.cancel()
	<-ri.done
	ri.cancel = nil
}

// Producer is one lane's producer: exact state, publisher, and writer.
type Producer struct {
	t         testing.TB
	Lane      uint8
	ID        ckf.ProducerIdentity
	State     *producer.DcState
	Publisher *producer.Publisher
	Writer    *streams.LaneWriter
	epoch     uint64
	rng       *rand.Rand
	// chains are the token-hash chains stored so far (for queries).
	Chains [][]uint64
	NextID uint64
}

func (e *Env) Producer(lane uint8, incarnation uint64) *Producer {
	e.T.Helper()
	id, state := e.ProducerState(lane, incarnation)
	return e.ProducerWithIdentity(lane, id, state)
}

// TransactionalProducer is producer with a transactional writer, as a relay's: every write is
// one transaction, so the lane partition holds commit markers.
func (e *Env) TransactionalProducer(lane uint8, incarnation uint64) *Producer {
	e.T.Helper()
	id, state := e.ProducerState(lane, incarnation)
	cl := e.Cluster.Client(e.T, append(streams.LaneWriterClientOpts(), kgo.TransactionalID(testenv.UniqueName(e.T, "txn")))...)
	return e.producerOn(cl, true, lane, id, state)
}

// ProducerState is a fresh exact state of the env's size and the identity of lane's pool at
// incarnation.
func (e *Env) ProducerState(lane uint8, incarnation uint64) (ckf.ProducerIdentity, *producer.DcState) {
	e.T.Helper()
	state, err := producer.NewDcState(ckf.NewCkfConfig(e.Blocks))
	if err != nil {
		e.T.Fatal(err)
	}
	return ckf.ProducerIdentity{Pool: Pool(100 + uint64(lane)), Incarnation: incarnation, LayoutGeneration: 1, Format: state.Format()}, state
}

func (e *Env) ProducerWithIdentity(lane uint8, id ckf.ProducerIdentity, state *producer.DcState) *Producer {
	e.T.Helper()
	return e.producerOn(e.Cluster.Client(e.T, streams.LaneWriterClientOpts()...), false, lane, id, state)
}

func (e *Env) producerOn(cl *kgo.Client, transactional bool, lane uint8, id ckf.ProducerIdentity, state *producer.DcState) *Producer {
	e.T.Helper()
	p := &Producer{t: e.T, Lane: lane, ID: id, State: state,
		rng: rand.New(rand.NewPCG(uint64(lane), id.Incarnation)), NextID: 1}
	cfg := streams.DefaultLaneWriterConfig()
	cfg.LaneTopic, cfg.IndexTopic, cfg.Lane, cfg.Transactional = e.Topics.Lanes, e.Topics.SnapshotIndex, lane, transactional
	if e.ChunkWords > 0 {
		cfg.ChunkWords = e.ChunkWords
	}
	if e.WriteTimeout > 0 {
		cfg.WriteTimeout = e.WriteTimeout
	}
	w, err := streams.NewLaneWriter(cl, e.Codec, id, cfg)
	if err != nil {
		e.T.Fatal(err)
	}
	p.Writer = w
	p.Publisher = producer.NewPublisher(id, 0, p.Writer)
	return p
}

// Snapshot publishes a barrier snapshot (tail first, on the old wire lease).
func (p *Producer) Snapshot() streams.SnapshotPosition {
	p.t.Helper()
	p.epoch++
	snap, err := p.Publisher.SnapshotAfterBarrier(p.State, ckf.LaneLease{Lane: p.Lane, Epoch: p.epoch})
	if err != nil {
		p.t.Fatalf("lane %d: snapshot: %v", p.Lane, err)
	}
	pos, err := p.Writer.WriteSnapshot(context.Background(), &snap)
	if err != nil {
		p.t.Fatalf("lane %d: write snapshot: %v", p.Lane, err)
	}
	return pos
}

// StoreChain stores a chain of n new blocks, optionally continuing the first k blocks of an
// existing chain (a shared prefix), and publishes the delta.
func (p *Producer) StoreChain(n int, prefixOf []uint64, k int) []uint64 {
	p.t.Helper()
	tokens := append([]uint64(nil), prefixOf[:k]...)
	for i := 0; i < n; i++ {
		tokens = append(tokens, p.rng.Uint64())
	}
	// Store the whole chain as one event of fresh external ids (the canonical hashes depend only
	// on the token hashes).
	blocks := make([]producer.StoredBlock, len(tokens))
	for i, tok := range tokens {
		blocks[i] = producer.StoredBlock{BlockHash: ckf.ExternalBlockHash(p.NextID), TokensHash: ckf.LocalBlockHash(tok)}
		p.NextID++
	}
	p.apply(producer.RouterEvent{WorkerID: 1, Event: producer.KvCacheEvent{Kind: producer.KvEventStored, Stored: producer.StoreData{Blocks: blocks}}})
	p.Chains = append(p.Chains, tokens)
	return tokens
}

// apply applies one event and publishes its publication, if any.
func (p *Producer) apply(ev producer.RouterEvent) {
	p.t.Helper()
	out := p.State.ApplyEvent(ev)
	if out.FirstError != nil && !errorsIsCapacity(out.FirstError) {
		p.t.Fatalf("lane %d: apply: %v", p.Lane, out.FirstError)
	}
	if len(out.Publication) > 0 {
		if _, err := p.Publisher.Publish(out.Publication); err != nil {
			p.t.Fatalf("lane %d: publish: %v", p.Lane, err)
		}
	}
}

func errorsIsCapacity(err error) bool { return errors.Is(err, ckf.ErrCapacityExhausted) }

// ClearWorker clears everything worker 1 stored.
func (p *Producer) ClearWorker() {
	p.apply(producer.RouterEvent{WorkerID: 1, Event: producer.KvCacheEvent{Kind: producer.KvEventCleared}})
	p.Chains = nil
}

// WaitLane waits until the indexer's words of the lane equal the producer's words and the lane
// is ready at the producer's last sequence.
func WaitLane(t *testing.T, ri *RunningIndexer, p *Producer, timeout time.Duration) {
	t.Helper()
	want := p.State.CopyWords()
	g := ri.Indexer.GlobalIndexer()
	testenv.WaitUntil(t, timeout, fmt.Sprintf("lane %d converges to the producer", p.Lane), func() bool {
		return g.ReadyLanes64()&(1<<p.Lane) != 0 && slices.Equal(g.LaneWords(p.Lane), want) &&
			LaneStatus(ri, p.Lane).InstalledSequence == p.Publisher.LastSequence()
	}, func() string {
		return fmt.Sprintf("ready=%v words equal=%v status=%+v producer sequence %d", g.ReadyLanes64()&(1<<p.Lane) != 0,
			slices.Equal(g.LaneWords(p.Lane), want), LaneStatus(ri, p.Lane), p.Publisher.LastSequence())
	})
}

func LaneStatus(ri *RunningIndexer, lane uint8) lanes.LaneStatus {
	for _, s := range ri.Indexer.Lanes() {
		if s.Lane == lane {
			return s
		}
	}
	return lanes.LaneStatus{}
}

// EventLog collects the lane events of a topic.
type EventLog struct {
	mu     sync.Mutex
	events []schemas.LaneEvent
}

func (e *Env) WatchEvents() *EventLog {
	e.T.Helper()
	assign := map[int32]kgo.Offset{}
	for p := int32(0); p < e.LanePartitions; p++ {
		assign[p] = kgo.NewOffset().AtStart()
	}
	cl := e.Cluster.Client(e.T, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{e.Topics.LaneEvents: assign}))
	log := &EventLog{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	e.T.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			fs.EachRecord(func(r *kgo.Record) {
				ev, err := e.Codec.DecodeLaneEvent(r.Value)
				if err != nil {
					e.T.Errorf("undecodable lane event at %d: %v", r.Offset, err)
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

// WaitFor returns the first event of lane matching match, waiting up to timeout.
func (l *EventLog) WaitFor(t *testing.T, lane uint8, timeout time.Duration, what string, match func(ev schemas.LaneEvent) bool) schemas.LaneEvent {
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

// Count returns how many events of lane seen so far match.
func (l *EventLog) Count(lane uint8, match func(ev schemas.LaneEvent) bool) int {
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

func KindIs(k schemas.LaneEventKind) func(schemas.LaneEvent) bool {
	return func(ev schemas.LaneEvent) bool { return ev.Kind == k }
}

func FaultIs(k schemas.LaneEventKind, f schemas.LaneFaultKind) func(schemas.LaneEvent) bool {
	return func(ev schemas.LaneEvent) bool { return ev.Kind == k && ev.Fault != nil && ev.Fault.Kind == f }
}
