package lanes

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/ckf/index"
	"github.com/ckf-stream/ckf-stream/ckf/producer"
	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/ckf-stream/ckf-stream/streams"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/uber-go/tally/v4"
	"go.uber.org/zap/zaptest"
)

// The in-process rig of the lane owner's tests. A lane's partition is a slice of records the test
// appends to; drain hands them to the lane's owner through the decode stage's fill, in offset
// order, on the test's goroutine, and carries out the owner's seeks the way the feed's poller
// does before its next poll (the rest of a run fetched before a seek is dropped by the owner,
// then records resume at the seek's offset). The side records the owner writes (lane events,
// dead letters, snapshot requests) are encoded with the codec, as streams.Outputs does, decoded
// back and kept. What only a broker shows (read_committed and the last stable offset under a
// relay's transactions, a broker restart, the lag group) stays in the broker tests.

// rigDomain is streamtest.Domain's value, written again: streamtest imports this package, so its
// internal tests cannot import streamtest.
var rigDomain = ckf.IndexerDomainID{
	CacheSemantics: ckf.CacheSemanticsID{Digest: ckf.Digest128{0xC5}, Source: ckf.IdentityExplicit},
	RoutingScope:   ckf.RoutingScopeID{Digest: ckf.Digest128{0x5C}, Source: ckf.IdentityExplicit},
}

// rigPool is the pool that owns lane l in the rig's manifest (DC 100+l).
func rigPool(dc uint64) ckf.PoolID { return ckf.PoolID{Domain: rigDomain, Dc: ckf.DcID(dc)} }

// rigChunkWords is the snapshot chunk size of the rig's producers: small, so that a snapshot of a
// 2,048-bucket lane has three chunks.
const rigChunkWords = 700

type laneRig struct {
	t      *testing.T
	ix     *Indexer
	lane   uint8
	l      *lane
	dec    *laneDecoder
	codec  *schemas.Codec
	blocks uint64
	out    *keptOutputs
	// metrics is the scope the indexer reports to: the lane's ledger is checked against it
	// (ledgerAgrees).
	metrics tally.TestScope

	log   []*kgo.Record // the lane's partition: record i is at offset i
	pos   int64         // next offset the owner reads
	epoch uint64        // seek epoch of the records handed over
	// now is the wall clock of the rig: record timestamps and freshness checks read it.
	now time.Time
	// panicAt, when it says so for an offset, makes handling the record at that offset panic
	// (as a decoder or ingestor bug would): the owner must turn it into a WORKER_FAILURE fault.
	panicAt func(offset int64) bool
}

// keptOutputs keeps what the owner writes to its side topics.
type keptOutputs struct {
	t        *testing.T
	codec    *schemas.Codec
	events   []schemas.LaneEvent
	dead     []schemas.DeadLetter
	requests []schemas.SnapshotRequest
	// panicOn, when set, makes the next event it matches panic instead of being kept (once): a
	// panic raised by the owner's own code while it handles a record.
	panicOn func(schemas.LaneEvent) bool
}

func (o *keptOutputs) LaneEvent(ev schemas.LaneEvent) {
	o.t.Helper()
	if o.panicOn != nil && o.panicOn(ev) {
		o.panicOn = nil
		panic("injected panic while producing a " + ev.Kind.String() + " event")
	}
	ev.EventTime = time.Unix(1, 0)
	b, err := o.codec.EncodeLaneEvent(ev)
	if err != nil {
		o.t.Fatalf("lane event %+v not encodable: %v", ev, err)
	}
	back, err := o.codec.DecodeLaneEvent(b)
	if err != nil {
		o.t.Fatalf("lane event not decodable: %v", err)
	}
	o.events = append(o.events, back)
}

func (o *keptOutputs) DeadLetter(r *kgo.Record, code schemas.DeadLetterReason, reason, component string) {
	o.t.Helper()
	b, err := o.codec.EncodeDeadLetter(schemas.DeadLetter{SourceTopic: r.Topic, SourcePartition: r.Partition, SourceOffset: r.Offset,
		SourceTimestamp: r.Timestamp, Key: r.Key, Value: r.Value, ReasonCode: code, Reason: reason, Component: component,
		DeadLetterTime: time.Unix(1, 0)})
	if err != nil {
		o.t.Fatalf("dead letter not encodable: %v", err)
	}
	d, err := o.codec.DecodeDeadLetter(b)
	if err != nil {
		o.t.Fatalf("dead letter not decodable: %v", err)
	}
	o.dead = append(o.dead, d)
}

func (o *keptOutputs) RequestSnapshot(lane uint8, pool ckf.PoolID, reason schemas.SnapshotRequestReason, detail string, afterOffset int64) {
	o.requests = append(o.requests, schemas.SnapshotRequest{Lane: lane, Pool: streams.WirePool(pool), Reason: reason,
		Detail: detail, AfterOffset: afterOffset})
}

// count returns how many kept events match.
func (o *keptOutputs) count(match func(schemas.LaneEvent) bool) int {
	n := 0
	for _, ev := range o.events {
		if match(ev) {
			n++
		}
	}
	return n
}

// find returns the first kept event that matches, or fails the test listing the events kept.
func (o *keptOutputs) find(t *testing.T, what string, match func(schemas.LaneEvent) bool) schemas.LaneEvent {
	t.Helper()
	for _, ev := range o.events {
		if match(ev) {
			return ev
		}
	}
	t.Fatalf("no %s event; events: %s", what, o.kinds())
	return schemas.LaneEvent{}
}

func (o *keptOutputs) kinds() string {
	var ks []string
	for _, ev := range o.events {
		s := ev.Kind.String()
		if ev.Fault != nil {
			s += "(" + ev.Fault.Kind.String() + ")"
		}
		ks = append(ks, s)
	}
	return fmt.Sprint(ks)
}

func kindIs(k schemas.LaneEventKind) func(schemas.LaneEvent) bool {
	return func(ev schemas.LaneEvent) bool { return ev.Kind == k }
}

func faultIs(k schemas.LaneEventKind, f schemas.LaneFaultKind) func(schemas.LaneEvent) bool {
	return func(ev schemas.LaneEvent) bool { return ev.Kind == k && ev.Fault != nil && ev.Fault.Kind == f }
}

// testConfig is the indexer configuration of the rig: freshness bounds no test reaches by
// accident and no periodic progress events.
func testConfig() IndexerConfig {
	cfg := DefaultIndexerConfig()
	cfg.Topics = IndexerTopics{Lanes: "lanes", Control: "control", LaneEvents: "lane-events", DeadLetter: "dead-letter"}
	cfg.Freshness = FreshnessPolicy{MaxRecordLag: 1 << 40, MaxTimeLag: time.Hour}
	cfg.ProgressInterval = 0
	return cfg
}

// newLaneRig returns a rig for lane, owned by pool DC 100+lane, of a filter sized for
// expectedBlocks, with the indexer's format (indexerBlocks, when not 0, sizes the indexer's
// filter differently from the producers').
func newLaneRig(t *testing.T, lane uint8, expectedBlocks uint64, cfg IndexerConfig) *laneRig {
	return newLaneRigSized(t, lane, expectedBlocks, expectedBlocks, cfg)
}

func newLaneRigSized(t *testing.T, lane uint8, expectedBlocks, indexerBlocks uint64, cfg IndexerConfig) *laneRig {
	t.Helper()
	return newLaneRigs(t, expectedBlocks, indexerBlocks, cfg, lane)[0]
}

// newLaneRigs returns one rig per lane, all on one Indexer (one table, one set of side records),
// each lane owned by pool DC 100+lane.
func newLaneRigs(t *testing.T, expectedBlocks, indexerBlocks uint64, cfg IndexerConfig, laneNums ...uint8) []*laneRig {
	t.Helper()
	codec, err := schemas.NewCodec(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	buckets, err := ckf.BucketCountFor(indexerBlocks)
	if err != nil {
		t.Fatal(err)
	}
	var ml index.ManifestLanes
	var feedLanes []int32
	for _, lane := range laneNums {
		pool := rigPool(100 + uint64(lane))
		ml[lane] = &pool
		feedLanes = append(feedLanes, int32(lane))
	}
	m, _, err := index.NewManifest(ckf.ConsumerInstanceID(0x51), rigDomain, ckf.NewFormatIdentity(ckf.DefaultSeed, buckets), ml)
	if err != nil {
		t.Fatal(err)
	}
	g, err := index.NewGlobalIndexer(m, ckf.DefaultSearchConfig())
	if err != nil {
		t.Fatal(err)
	}
	scope := tally.NewTestScope("", nil)
	ix, err := NewIndexer(IndexerParams{Config: cfg, Indexer: g, Codec: codec, Log: zaptest.NewLogger(t), Metrics: scope})
	if err != nil {
		t.Fatal(err)
	}
	if ix.feed, err = NewLaneFeed(nil, cfg.Topics.Lanes, feedLanes, cfg.Feed); err != nil {
		t.Fatal(err)
	}
	out := &keptOutputs{t: t, codec: codec}
	ix.out = out
	var rigs []*laneRig
	for _, lane := range laneNums {
		in, err := g.ClaimLane(lane)
		if err != nil {
			t.Fatal(err)
		}
		ix.lanes[lane] = newLane(ix, lane, *ml[lane], in, -1)
		rigs = append(rigs, &laneRig{t: t, ix: ix, lane: lane, l: ix.lanes[lane], dec: newLaneDecoder(ix.feed, codec, lane),
			codec: codec, blocks: expectedBlocks, out: out, metrics: scope, now: time.Unix(1_700_000_000, 0)})
	}
	close(ix.started)
	t.Cleanup(ix.closeLanes)
	return rigs
}

// append puts a record with value v at the end of the lane's partition and returns its offset.
func (r *laneRig) append(v []byte) int64 {
	off := int64(len(r.log))
	r.log = append(r.log, &kgo.Record{Topic: r.ix.cfg.Topics.Lanes, Partition: int32(r.lane), Offset: off, Value: v, Timestamp: r.now})
	return off
}

// drain hands every record of the partition to the lane's owner, then lets it publish its status
// and apply the freshness policy at the rig's clock, as the owner does once it caught up.
func (r *laneRig) drain() {
	r.t.Helper()
	ctx := context.Background()
	r.ix.feed.queues[r.lane].observeLastStableOffset(int64(len(r.log)))
	for {
		r.applySeek()
		if r.pos >= int64(len(r.log)) {
			break
		}
		run := <-r.dec.free
		n := r.dec.fill(run, r.epoch, r.log[r.pos:])
		for i := range run.recs {
			if r.panicAt != nil && r.panicAt(run.recs[i].rec.Offset) {
				run.recs[i].panicked = fmt.Sprintf("injected panic at offset %d", run.recs[i].rec.Offset)
			}
		}
		r.l.handleRun(ctx, run)
		r.dec.release(run)
		if !r.seekPending() {
			r.pos += int64(n)
		}
		if r.l.st.stopped {
			r.t.Fatal("the lane stopped: it could not claim its ingestor again")
		}
	}
	r.l.publish()
	r.l.checkFreshness(r.now, false)
}

// seekPending reports whether the owner asked the feed to seek its lane.
func (r *laneRig) seekPending() bool {
	f := r.ix.feed
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.pending[int32(r.lane)]
	return ok
}

// applySeek carries out the owner's pending seek, as the feed's poller does before a poll.
func (r *laneRig) applySeek() {
	f := r.ix.feed
	f.mu.Lock()
	s, ok := f.pending[int32(r.lane)]
	delete(f.pending, int32(r.lane))
	f.mu.Unlock()
	if ok {
		r.pos, r.epoch = s.offset, s.epoch
	}
}

func (r *laneRig) status() LaneStatus { return r.l.stats.snapshot() }
func (r *laneRig) words() []uint64    { return r.ix.g.LaneWords(r.lane) }
func (r *laneRig) ready() bool        { return r.ix.g.ReadyLanes64()&(1<<r.lane) != 0 }

func (r *laneRig) encode(lr schemas.LaneRecord) []byte {
	r.t.Helper()
	b, err := r.codec.EncodeLaneRecord(lr)
	if err != nil {
		r.t.Fatalf("encode: %v", err)
	}
	return b
}

// delta appends a hand-made delta, bypassing every producer-side check.
func (r *laneRig) delta(id ckf.ProducerIdentity, base, seq uint64, images ...[2]uint64) int64 {
	var packed []byte
	for _, im := range images {
		packed = schemas.AppendImage(packed, im[0], im[1])
	}
	return r.append(r.encode(schemas.LaneRecord{Identity: streams.WireIdentity(id), Kind: schemas.LaneDelta,
		Delta: schemas.Delta{BaseSequence: base, Sequence: seq, Images: packed}}))
}

// chunks appends a snapshot of words as chunks of n words, in the given chunk order.
func (r *laneRig) chunks(id ckf.ProducerIdentity, seq uint64, words []uint64, n int, order []int) {
	count := (len(words) + n - 1) / n
	for _, i := range order {
		lo, hi := i*n, min((i+1)*n, len(words))
		r.append(r.encode(schemas.LaneRecord{Identity: streams.WireIdentity(id), Kind: schemas.LaneSnapshotChunk,
			Snapshot: schemas.SnapshotChunk{Sequence: seq, ChunkIndex: uint32(i), ChunkCount: uint32(count),
				FirstBucket: uint64(lo), TotalBuckets: uint64(len(words)), Words: schemas.AppendU64s(nil, words[lo:hi])}}))
	}
}

// rigProducer is a lane's producer: exact state and publisher, its deltas and snapshots encoded
// as a relay's lane writer encodes them and appended to the rig's partition, or, with a writer,
// written by that lane writer to a Kafka partition.
type rigProducer struct {
	r         *laneRig
	t         *testing.T
	lane      uint8
	ID        ckf.ProducerIdentity
	State     *producer.DcState
	Publisher *producer.Publisher
	writer    *streams.LaneWriter
	epoch     uint64
	rng       *rand.Rand
	Chains    [][]uint64
	nextID    uint64
}

func (r *laneRig) producer(incarnation uint64) *rigProducer {
	r.t.Helper()
	p := newRigProducer(r.t, r.lane, r.l.pool, r.blocks, incarnation)
	p.r = r
	p.Publisher = producer.NewPublisher(p.ID, 0, p)
	return p
}

func newRigProducer(t *testing.T, lane uint8, pool ckf.PoolID, blocks, incarnation uint64) *rigProducer {
	t.Helper()
	state, err := producer.NewDcState(ckf.NewCkfConfig(blocks))
	if err != nil {
		t.Fatal(err)
	}
	id := ckf.ProducerIdentity{Pool: pool, Incarnation: incarnation, LayoutGeneration: 1, Format: state.Format()}
	return &rigProducer{t: t, lane: lane, ID: id, State: state, rng: rand.New(rand.NewPCG(uint64(lane), incarnation)), nextID: 1}
}

// Enqueue implements producer.DeltaSink: the delta becomes the partition's next record.
func (p *rigProducer) Enqueue(d ckf.Delta) error {
	if p.writer != nil {
		return p.writer.Enqueue(d)
	}
	var packed []byte
	for _, im := range d.Images {
		packed = schemas.AppendImage(packed, im.Bucket, im.Value)
	}
	p.r.append(p.r.encode(schemas.LaneRecord{Identity: streams.WireIdentity(p.ID), Kind: schemas.LaneDelta,
		Delta: schemas.Delta{BaseSequence: d.BaseSequence, Sequence: d.Sequence, Images: packed}}))
	return nil
}

// snapshot publishes a barrier snapshot (tail first, on the old wire lease) and returns the
// offset of its first chunk.
func (p *rigProducer) snapshot() int64 {
	p.t.Helper()
	p.epoch++
	snap, err := p.Publisher.SnapshotAfterBarrier(p.State, ckf.LaneLease{Lane: p.lane, Epoch: p.epoch})
	if err != nil {
		p.t.Fatalf("snapshot: %v", err)
	}
	if p.writer != nil {
		pos, err := p.writer.WriteSnapshot(context.Background(), &snap)
		if err != nil {
			p.t.Fatalf("write snapshot: %v", err)
		}
		return pos.FirstOffset
	}
	first := int64(len(p.r.log))
	all := make([]int, (len(snap.Buckets)+rigChunkWords-1)/rigChunkWords)
	for i := range all {
		all[i] = i
	}
	p.r.chunks(p.ID, snap.Sequence, snap.Buckets, rigChunkWords, all)
	return first
}

// storeChain stores a chain of n new blocks, optionally continuing the first k blocks of an
// existing chain, and publishes the delta.
func (p *rigProducer) storeChain(n int, prefixOf []uint64, k int) {
	p.t.Helper()
	tokens := append([]uint64(nil), prefixOf[:k]...)
	for range n {
		tokens = append(tokens, p.rng.Uint64())
	}
	blocks := make([]producer.StoredBlock, len(tokens))
	for i, tok := range tokens {
		blocks[i] = producer.StoredBlock{BlockHash: ckf.ExternalBlockHash(p.nextID), TokensHash: ckf.LocalBlockHash(tok)}
		p.nextID++
	}
	out := p.State.ApplyEvent(producer.RouterEvent{WorkerID: 1, Event: producer.KvCacheEvent{Kind: producer.KvEventStored,
		Stored: producer.StoreData{Blocks: blocks}}})
	if out.FirstError != nil {
		p.t.Fatalf("apply: %v", out.FirstError)
	}
	if len(out.Publication) > 0 {
		if _, err := p.Publisher.Publish(out.Publication); err != nil {
			p.t.Fatalf("publish: %v", err)
		}
	}
	p.Chains = append(p.Chains, tokens)
}

// converged reports whether the lane is ready with the producer's words at its last sequence,
// and says how it stands otherwise.
func (r *laneRig) converged(p *rigProducer) (bool, string) {
	st := r.status()
	ok := r.ready() && slices.Equal(r.words(), p.State.CopyWords()) && st.InstalledSequence == p.Publisher.LastSequence()
	return ok, fmt.Sprintf("ready=%v words equal=%v installed %d, producer %d; phase %v; events %s", r.ready(),
		slices.Equal(r.words(), p.State.CopyWords()), st.InstalledSequence, p.Publisher.LastSequence(), st.Phase, r.out.kinds())
}

// mustConverge drains the partition and fails unless the lane converged to p.
func (r *laneRig) mustConverge(p *rigProducer) {
	r.t.Helper()
	r.drain()
	if ok, how := r.converged(p); !ok {
		r.t.Fatalf("lane %d did not converge to the producer: %s", r.lane, how)
	}
}
