package query_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/ckf/index"
	"github.com/ckf-stream/ckf-stream/ckf/producer"
	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/ckf-stream/ckf-stream/streams/internal/streamtest"
	"github.com/ckf-stream/ckf-stream/streams/query"
	"github.com/ckf-stream/ckf-stream/testenv"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/uber-go/tally/v4"
)

// Query path tests: a ckf.GlobalIndexer filled in the test (producer DcStates snapshotted into
// claimed lanes), the QueryService on an in-process kfake cluster (its group membership, batches,
// replies, dead letters and commits need nothing a real broker alone shows), and observers of the
// reply and dead-letter topics. TestQueryRoundTripLatency alone runs on the shared broker.

const qConsumer ckf.ConsumerInstanceID = 77

var qDomain = ckf.IndexerDomainID{
	CacheSemantics: ckf.CacheSemanticsID{Digest: ckf.Digest128{0xA1, 0x51}, Source: ckf.IdentityExplicit},
	RoutingScope:   ckf.RoutingScopeID{Digest: ckf.Digest128{0x1A, 0x15}, Source: ckf.IdentityExplicit},
}

// qIndex is a GlobalIndexer whose lanes are fed by in-test producers: each lane has a DcState
// (the relay's exact state) and its claimed ingestor; activate snapshots the producer into the
// lane, which makes it ready.
type qIndex struct {
	t         testing.TB
	g         *index.GlobalIndexer
	cfg       ckf.CkfConfig
	format    ckf.FormatIdentity
	pools     [ckf.MaxLanes]ckf.PoolID
	states    [ckf.MaxLanes]*producer.DcState
	ingestors [ckf.MaxLanes]*index.LaneIngestor
	epochs    [ckf.MaxLanes]uint64
	nextExt   uint64
}

func newQIndex(t testing.TB, lanes ...uint8) *qIndex {
	t.Helper()
	x := &qIndex{t: t, cfg: ckf.NewCkfConfig(8192)}
	format, err := x.cfg.Format()
	if err != nil {
		t.Fatal(err)
	}
	x.format = format
	var ml index.ManifestLanes
	for _, l := range lanes {
		x.pools[l] = ckf.PoolID{Domain: qDomain, Dc: ckf.DcID(1000 + uint64(l))}
		p := x.pools[l]
		ml[l] = &p
	}
	m, _, err := index.NewManifest(qConsumer, qDomain, format, ml)
	if err != nil {
		t.Fatal(err)
	}
	if x.g, err = index.NewGlobalIndexer(m, ckf.SearchConfig{VerificationWindow: 2}); err != nil {
		t.Fatal(err)
	}
	for _, l := range lanes {
		if x.states[l], err = producer.NewDcState(x.cfg); err != nil {
			t.Fatal(err)
		}
		if x.ingestors[l], err = x.g.ClaimLane(l); err != nil {
			t.Fatal(err)
		}
	}
	return x
}

// store makes lane's pool cache the prompt whose local block hashes are local (one stored
// event, no parent: the chain starts at the root).
func (x *qIndex) store(lane uint8, local []uint64) {
	x.t.Helper()
	blocks := make([]producer.StoredBlock, len(local))
	for i, h := range local {
		x.nextExt++
		blocks[i] = producer.StoredBlock{BlockHash: ckf.ExternalBlockHash(x.nextExt), TokensHash: ckf.LocalBlockHash(h)}
	}
	ev := producer.RouterEvent{WorkerID: 1, Event: producer.KvCacheEvent{Kind: producer.KvEventStored, Stored: producer.StoreData{Blocks: blocks}}}
	if out := x.states[lane].ApplyEvent(ev); out.FirstError != nil {
		x.t.Fatalf("lane %d: store: %v", lane, out.FirstError)
	}
}

// activate installs a barrier snapshot of lane's producer under a new lease; the lane is ready
// afterwards.
func (x *qIndex) activate(lanes ...uint8) {
	x.t.Helper()
	for _, l := range lanes {
		_, words, err := x.states[l].BarrierSnapshot()
		if err != nil {
			x.t.Fatal(err)
		}
		id := ckf.ProducerIdentity{Pool: x.pools[l], Incarnation: 1, LayoutGeneration: 1, Format: x.format}
		x.epochs[l]++
		lease := ckf.LaneLease{Consumer: qConsumer, Lane: l, Epoch: x.epochs[l]}
		if err := x.ingestors[l].Assign(id, lease); err != nil {
			x.t.Fatalf("lane %d: assign: %v", l, err)
		}
		if out := x.ingestors[l].InstallSnapshot(&ckf.Snapshot{Identity: id, Lease: lease, Sequence: 1, Buckets: words}); out.Kind != index.OutcomeSnapshotInstalled {
			x.t.Fatalf("lane %d: install: %v", l, out)
		}
	}
}

// retire makes lanes unready.
func (x *qIndex) retire(lanes ...uint8) {
	for _, l := range lanes {
		x.ingestors[l].Retire()
	}
}

// qPrompts are the test prompts: several share prefixes, and the lanes cache different parts.
type qPrompts struct {
	a, b, c, tokHashes []uint64
	tokens             []uint32
}

const (
	qBlockSize = 16
	qLora      = "lora-q"
	qNamespace = "ns-q"
)

func newQPrompts(seed uint64) qPrompts {
	rng := rand.New(rand.NewPCG(seed, seed^0x9E3779B97F4A7C15))
	rnd := func(n int) []uint64 {
		out := make([]uint64, n)
		for i := range out {
			out[i] = rng.Uint64()
		}
		return out
	}
	var p qPrompts
	p.a = rnd(128)
	p.b = append(append([]uint64{}, p.a[:40]...), rnd(88)...) // shares 40 blocks with a
	p.c = rnd(64)
	p.tokens = make([]uint32, 128*qBlockSize+7) // a trailing partial block is dropped
	for i := range p.tokens {
		p.tokens[i] = rng.Uint32N(150_000)
	}
	for _, h := range ckf.TokenBlockHashes(p.tokens, qBlockSize, ckf.BlockSaltSeed(qLora, qNamespace)) {
		p.tokHashes = append(p.tokHashes, uint64(h))
	}
	return p
}

// fill caches the prompts on lanes 0, 1 and 5: lane 0 has a and c; lane 1 has a's first 90
// blocks and b; lane 5 has b's first 20 blocks and the token prompt's first 100.
func (p qPrompts) fill(x *qIndex) {
	x.store(0, p.a)
	x.store(0, p.c)
	x.store(1, p.a[:90])
	x.store(1, p.b)
	x.store(5, p.b[:20])
	x.store(5, p.tokHashes[:100])
}

// queries returns the hash queries of the test: whole prompts, prefixes, a divergent mix, an
// empty query and one nobody caches.
func (p qPrompts) queries() map[string][]uint64 {
	mixed := append(append([]uint64{}, p.a[:50]...), p.c[:30]...)
	return map[string][]uint64{
		"a": p.a, "b": p.b, "c": p.c, "a10": p.a[:10], "b30": p.b[:30], "mixed": mixed,
		"tok": p.tokHashes, "empty": {}, "none": {1, 2, 3, 4},
	}
}

func qHashRequest(id string, hashes []uint64) schemas.QueryRequest {
	return schemas.QueryRequest{CorrelationID: id, Input: schemas.InputLocalBlockHashes, Hashes: schemas.AppendU64s(nil, hashes)}
}

func qTokenRequest(id string, tokens []uint32, blockSize uint32, lora, ns string) schemas.QueryRequest {
	return schemas.QueryRequest{CorrelationID: id, Input: schemas.InputTokenIDs, Tokens: schemas.AppendU32s(nil, tokens),
		BlockSize: blockSize, LoraName: lora, CacheNamespace: ns}
}

// qWantReply is the reply FindPrefixMatches implies for hashes restricted to mask.
func qWantReply(t testing.TB, g *index.GlobalIndexer, hashes []uint64, mask uint16) schemas.QueryReply {
	t.Helper()
	res, err := g.FindPrefixMatches(hashes)
	want := schemas.QueryReply{QueryBlocks: uint32(len(hashes))}
	if errors.Is(err, index.ErrUnavailable) || res.ReadyLanes&mask == 0 {
		want.Status = schemas.QueryUnavailable
		return want
	}
	if err != nil {
		t.Fatal(err)
	}
	want.ReadyLanes = res.ReadyLanes & mask
	for l := uint8(0); l < ckf.LaneCount; l++ {
		if m, ok := res.Match(l); ok && mask&(1<<l) != 0 {
			want.Lanes = append(want.Lanes, schemas.LaneMatch{Lane: l, DcID: uint64(m.Pool.Dc), Pool: m.Pool.String(), Depth: m.Depth})
		}
	}
	return want
}

// qSameAnswer compares everything but the correlation id, message and reply time.
func qSameAnswer(got, want schemas.QueryReply) error {
	if got.Status != want.Status || got.ReadyLanes != want.ReadyLanes || got.QueryBlocks != want.QueryBlocks || len(got.Lanes) != len(want.Lanes) {
		return fmt.Errorf("got %s ready %#x blocks %d lanes %v, want %s ready %#x blocks %d lanes %v",
			got.Status, got.ReadyLanes, got.QueryBlocks, got.Lanes, want.Status, want.ReadyLanes, want.QueryBlocks, want.Lanes)
	}
	for i := range got.Lanes {
		if got.Lanes[i] != want.Lanes[i] {
			return fmt.Errorf("lane entry %d: got %+v, want %+v", i, got.Lanes[i], want.Lanes[i])
		}
	}
	return nil
}

// newQServed is how the service and client tests start: an index whose lanes 0, 1 and 5 hold
// the prompts of seed and are ready, the prompts, the codec, and query topics on k with
// requestPartitions request partitions.
func newQServed(t testing.TB, k *streamtest.Kafka, seed uint64, requestPartitions int32) (*qIndex, qPrompts, *schemas.Codec, qTopics) {
	t.Helper()
	x := newQIndex(t, 0, 1, 5)
	p := newQPrompts(seed)
	p.fill(x)
	x.activate(0, 1, 5)
	return x, p, qCodec(t), newQTopics(t, k, requestPartitions)
}

// qTopics are one test's query topics.
type qTopics struct {
	k                              *streamtest.Kafka
	requests, replies, deadLetters string
}

func newQTopics(t testing.TB, k *streamtest.Kafka, requestPartitions int32) qTopics {
	return qTopics{k: k, requests: k.NewTopic(t, requestPartitions), replies: k.NewTopic(t, 4), deadLetters: k.NewTopic(t, 1)}
}

func qCodec(t testing.TB) *schemas.Codec {
	t.Helper()
	codec, err := schemas.NewCodec(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return codec
}

// qConfig is the service configuration of the tests: the defaults on the test's topics and group.
func qConfig(tp qTopics, group string) query.QueryConfig {
	cfg := query.DefaultQueryConfig()
	cfg.RequestTopic, cfg.ReplyTopic, cfg.DeadLetterTopic, cfg.Group = tp.requests, tp.replies, tp.deadLetters, group
	cfg.ReplyTopicPrefixes = []string{tp.replies + "-ok-"}
	return cfg
}

// qNewService builds a service; the caller starts and closes it.
func qNewService(t *testing.T, k *streamtest.Kafka, ans *query.Answerer, codec *schemas.Codec, cfg query.QueryConfig, scope tally.Scope, extra ...kgo.Opt) *query.QueryService {
	t.Helper()
	svc, err := query.NewQueryService(query.QueryServiceParams{
		Config: cfg, Answerer: ans, Codec: codec, Metrics: scope,
		ClientOpts: append([]kgo.Opt{kgo.SeedBrokers(k.Seeds()...)}, extra...),
	})
	if err != nil {
		t.Fatal(err)
	}
	return svc
}

// qStartService builds and starts a service that is closed (and must stop cleanly) when the
// test ends.
func qStartService(t *testing.T, k *streamtest.Kafka, ans *query.Answerer, codec *schemas.Codec, cfg query.QueryConfig, scope tally.Scope) *query.QueryService {
	t.Helper()
	svc := qNewService(t, k, ans, codec, cfg, scope)
	if err := svc.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := svc.Close(ctx); err != nil {
			t.Errorf("query service close: %v", err)
		}
	})
	return svc
}

// qObserver reads a whole topic from its start and keeps every decoded record by key.
type qObserver[T any] struct {
	k    *streamtest.Kafka
	mu   sync.Mutex
	byID map[string][]T
	recs map[string][]*kgo.Record
	bad  int
	// next is, per partition, the offset after the last record read (decodable or not).
	next map[int32]int64
}

func qObserve[T any](t *testing.T, k *streamtest.Kafka, topic string, decode func([]byte) (T, error), key func(T, *kgo.Record) string) *qObserver[T] {
	t.Helper()
	o := &qObserver[T]{k: k, byID: map[string][]T{}, recs: map[string][]*kgo.Record{}, next: map[int32]int64{}}
	cl := k.Client(t, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(200*time.Millisecond))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			fs.EachRecord(func(r *kgo.Record) {
				v, err := decode(r.Value)
				o.mu.Lock()
				defer o.mu.Unlock()
				o.next[r.Partition] = r.Offset + 1
				if err != nil {
					o.bad++
					return
				}
				k := key(v, r)
				o.byID[k] = append(o.byID[k], v)
				o.recs[k] = append(o.recs[k], r)
			})
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return o
}

func (o *qObserver[T]) get(id string) []T {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]T(nil), o.byID[id]...)
}

func (o *qObserver[T]) records(id string) []*kgo.Record {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]*kgo.Record(nil), o.recs[id]...)
}

func (o *qObserver[T]) undecodable() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.bad
}

func (o *qObserver[T]) count() (ids, total int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, v := range o.byID {
		total += len(v)
	}
	return len(o.byID), total
}

// waitIDs waits until every id has at least one record (a liveness bound, not a performance
// assertion).
func (o *qObserver[T]) waitIDs(t *testing.T, ids []string, within time.Duration) {
	t.Helper()
	missing, first := 0, ""
	testenv.WaitUntil(t, within, fmt.Sprintf("a record for each of %d ids", len(ids)), func() bool {
		o.mu.Lock()
		defer o.mu.Unlock()
		missing, first = 0, ""
		for _, id := range ids {
			if len(o.byID[id]) == 0 {
				if missing == 0 {
					first = id
				}
				missing++
			}
		}
		return missing == 0
	}, func() string { return fmt.Sprintf("%d ids have no record (first: %q)", missing, first) })
}

// waitCaughtUp waits until the observer has read every partition of topic up to the end offset
// it has now: every record written to the topic before the call has then been seen.
func (o *qObserver[T]) waitCaughtUp(t *testing.T, topic string, partitions int32, within time.Duration) {
	t.Helper()
	ends := qEndOffsets(t, o.k, topic, partitions)
	testenv.WaitUntil(t, within, "the observer reads "+topic+" to its end", func() bool {
		o.mu.Lock()
		defer o.mu.Unlock()
		for p, end := range ends {
			if end > 0 && o.next[int32(p)] < end {
				return false
			}
		}
		return true
	}, func() string {
		o.mu.Lock()
		defer o.mu.Unlock()
		return fmt.Sprintf("read up to %v, end offsets %v", o.next, ends)
	})
}

func qReplies(t *testing.T, k *streamtest.Kafka, codec *schemas.Codec, topic string) *qObserver[schemas.QueryReply] {
	return qObserve(t, k, topic, codec.DecodeQueryReply, func(r schemas.QueryReply, _ *kgo.Record) string { return r.CorrelationID })
}

// qDeadLetters keys dead letters by source coordinates "partition/offset".
func qDeadLetters(t *testing.T, k *streamtest.Kafka, codec *schemas.Codec, topic string) *qObserver[schemas.DeadLetter] {
	return qObserve(t, k, topic, codec.DecodeDeadLetter, func(d schemas.DeadLetter, _ *kgo.Record) string {
		return fmt.Sprintf("%d/%d", d.SourcePartition, d.SourceOffset)
	})
}

// qProduce produces raw request values keyed by key and returns the acknowledged records.
func qProduce(t *testing.T, cl *kgo.Client, topic string, keys []string, values [][]byte) []*kgo.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rs := make([]*kgo.Record, len(values))
	for i := range values {
		rs[i] = &kgo.Record{Topic: topic, Key: []byte(keys[i]), Value: values[i]}
	}
	if err := cl.ProduceSync(ctx, rs...).FirstErr(); err != nil {
		t.Fatalf("produce requests: %v", err)
	}
	return rs
}

func qEncode(t testing.TB, codec *schemas.Codec, req schemas.QueryRequest) []byte {
	t.Helper()
	b, err := codec.EncodeQueryRequest(req)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Hand-written Avro for requests the encoder refuses to write.

func qAvroLong(b []byte, v int64) []byte { return binary.AppendUvarint(b, uint64(v<<1)^uint64(v>>63)) }

func qAvroBytes(b []byte, v []byte) []byte { return append(qAvroLong(b, int64(len(v))), v...) }

// qRawTokenRequest encodes a TokenIds request with any block size, replying to topic/partition.
func qRawTokenRequest(codec *schemas.Codec, id string, tokens []uint32, blockSize int64, replyTopic string, replyPartition int32) []byte {
	b := schemas.AppendHeader(nil, codec.SchemaID(schemas.TypeQueryRequest))
	b = qAvroBytes(b, []byte(id))
	b = qAvroLong(b, 1) // input: TokenIds
	b = qAvroBytes(b, schemas.AppendU32s(nil, tokens))
	b = qAvroLong(b, blockSize)
	b = qAvroLong(b, 0) // lora_name: null
	b = qAvroLong(b, 0) // cache_namespace: null
	b = qAvroLong(b, 0) // lane_mask: null
	b = qAvroLong(b, 1)
	b = qAvroBytes(b, []byte(replyTopic))
	b = qAvroLong(b, 1)
	b = qAvroLong(b, int64(replyPartition))
	b = qAvroLong(b, 0) // request_time: null
	return b
}

// qCounter sums a counter of a test scope over its tags.
func qCounter(s tally.TestScope, name string, tags map[string]string) int64 {
	var n int64
	for _, c := range s.Snapshot().Counters() {
		if c.Name() != name {
			continue
		}
		match := true
		for k, v := range tags {
			if c.Tags()[k] != v {
				match = false
			}
		}
		if match {
			n += c.Value()
		}
	}
	return n
}

// TestQueryAnswerMatchesIndexer checks the answer function alone (the code path HTTP shares):
// depths equal FindPrefixMatches, token input equals hash input, masks filter, unavailability is
// explicit, and a reused scratch makes it allocation-free.
func TestQueryAnswerMatchesIndexer(t *testing.T) {
	x := newQIndex(t, 0, 1, 5)
	p := newQPrompts(1)
	p.fill(x)
	var eligible atomic.Uint32
	eligible.Store(0xFFFF)
	ans := query.NewAnswerer(x.g, func() uint64 { return uint64(eligible.Load()) })
	var sc query.QueryScratch

	req := qHashRequest("q", p.a)
	if r := ans.Answer(&req, &sc); r.Status != schemas.QueryUnavailable || r.ErrorMessage == "" || len(r.Lanes) != 0 {
		t.Fatalf("no lane ready: got %+v, want UNAVAILABLE", r)
	}
	x.activate(0, 1, 5)

	for name, hashes := range p.queries() {
		req := qHashRequest(name, hashes)
		got := ans.Answer(&req, &sc)
		if err := qSameAnswer(got, qWantReply(t, x.g, hashes, 0xFFFF)); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		if got.CorrelationID != name || got.ReplyTime.IsZero() {
			t.Errorf("%s: correlation id %q, reply time %v", name, got.CorrelationID, got.ReplyTime)
		}
	}
	// The designed depths, as a check on the fixture itself (false positives could only add):
	// lane 5 holds b[:20], which is a[:20].
	req = qHashRequest("a", p.a)
	if r := ans.Answer(&req, &sc); r.Lanes[0].Depth != 128 || r.Lanes[1].Depth < 90 || r.Lanes[2].Depth < 20 {
		t.Fatalf("fixture depths for a: %+v", r.Lanes)
	}

	tok := qTokenRequest("tok", p.tokens, qBlockSize, qLora, qNamespace)
	got := ans.Answer(&tok, &sc)
	if err := qSameAnswer(got, qWantReply(t, x.g, p.tokHashes, 0xFFFF)); err != nil {
		t.Fatalf("token query: %v", err)
	}
	if got.QueryBlocks != 128 || got.Lanes[2].Lane != 5 || got.Lanes[2].Depth < 100 {
		t.Fatalf("token query: blocks %d lanes %+v", got.QueryBlocks, got.Lanes)
	}
	unsalted := qTokenRequest("tok", p.tokens, qBlockSize, "", "")
	if r := ans.Answer(&unsalted, &sc); r.Lanes[2].Depth >= 100 {
		t.Fatalf("salts ignored: depth %d without salts", r.Lanes[2].Depth)
	}

	mask := func(m uint16) schemas.Optional[uint16] { return schemas.Some(m) }
	req = qHashRequest("masked", p.b)
	req.LaneMask = mask(1<<1 | 1<<5)
	if err := qSameAnswer(ans.Answer(&req, &sc), qWantReply(t, x.g, p.b, 1<<1|1<<5)); err != nil {
		t.Fatalf("lane mask: %v", err)
	}
	eligible.Store(1<<0 | 1<<5)
	if err := qSameAnswer(ans.Answer(&req, &sc), qWantReply(t, x.g, p.b, 1<<5)); err != nil {
		t.Fatalf("lane mask & eligibility: %v", err)
	}
	req.LaneMask = mask(1 << 1)
	if r := ans.Answer(&req, &sc); r.Status != schemas.QueryUnavailable || r.ReadyLanes != 0 || len(r.Lanes) != 0 {
		t.Fatalf("mask excludes every eligible lane: %+v", r)
	}
	eligible.Store(0xFFFF)
	req.LaneMask = mask(1 << 9) // a lane not in the manifest
	if r := ans.Answer(&req, &sc); r.Status != schemas.QueryUnavailable {
		t.Fatalf("mask of an unconfigured lane: %+v", r)
	}

	bad := qTokenRequest("bad", p.tokens, 0, "", "")
	if r := ans.Answer(&bad, &sc); r.Status != schemas.QueryInvalidRequest || r.CorrelationID != "bad" || r.ErrorMessage == "" {
		t.Fatalf("block size 0: %+v", r)
	}
	odd := schemas.QueryRequest{CorrelationID: "odd", Input: schemas.InputLocalBlockHashes, Hashes: make([]byte, 12)}
	if r := ans.Answer(&odd, &sc); r.Status != schemas.QueryInvalidRequest {
		t.Fatalf("12 bytes of hashes: %+v", r)
	}

	// The pooled form gives the same answer and owns its lanes.
	req = qHashRequest("pooled", p.a)
	pooled := ans.AnswerPooled(&req)
	if err := qSameAnswer(pooled, ans.Answer(&req, &sc)); err != nil {
		t.Fatalf("AnswerPooled: %v", err)
	}
	other := qHashRequest("other", p.c)
	ans.AnswerPooled(&other)
	if err := qSameAnswer(pooled, qWantReply(t, x.g, p.a, 0xFFFF)); err != nil {
		t.Fatalf("AnswerPooled reply changed by a later answer: %v", err)
	}

	// Allocation-free with a warm scratch, for both inputs (128 blocks each).
	req = qHashRequest("alloc", p.a)
	if n := testing.AllocsPerRun(200, func() { ans.Answer(&req, &sc) }); n != 0 {
		t.Errorf("hash query: %.1f allocations per answer, want 0", n)
	}
	if n := testing.AllocsPerRun(200, func() { ans.Answer(&tok, &sc) }); n != 0 {
		t.Errorf("token query: %.1f allocations per answer, want 0", n)
	}
	x.retire(0, 1, 5)
	req = qHashRequest("gone", p.a)
	if r := ans.Answer(&req, &sc); r.Status != schemas.QueryUnavailable {
		t.Fatalf("after retiring every lane: %+v", r)
	}
}

// TestQueryServiceAnswersOverKafka runs the service on an in-process cluster and checks replies against
// FindPrefixMatches for hash and token queries, lane and eligibility masks, UNAVAILABLE, the
// reply routing (request's topic and partition) and the invalid and undecodable paths with their
// dead letters.
func TestQueryServiceAnswersOverKafka(t *testing.T) {
	t.Parallel() // its own in-process cluster
	k := streamtest.NewFakeKafka(t)
	x, p, codec, tp := newQServed(t, k, 2, 2)
	var eligible atomic.Uint32
	eligible.Store(0xFFFF)
	ans := query.NewAnswerer(x.g, func() uint64 { return uint64(eligible.Load()) })
	altReplies := tp.k.NewTopic(t, 2, testenv.TopicName(tp.replies+"-ok-alt"))
	scope := tally.NewTestScope("", nil)
	group := testenv.UniqueName(t, "g")
	qStartService(t, k, ans, codec, qConfig(tp, group), scope)
	replies := qReplies(t, k, codec, tp.replies)
	alt := qReplies(t, k, codec, altReplies)
	dlq := qDeadLetters(t, k, codec, tp.deadLetters)
	prod := k.Client(t)

	// 1. Hash and token queries, all lanes eligible.
	var keys []string
	var values [][]byte
	want := map[string]schemas.QueryReply{}
	for name, hashes := range p.queries() {
		keys = append(keys, name)
		values = append(values, qEncode(t, codec, qHashRequest(name, hashes)))
		want[name] = qWantReply(t, x.g, hashes, 0xFFFF)
	}
	keys = append(keys, "tokens")
	values = append(values, qEncode(t, codec, qTokenRequest("tokens", p.tokens, qBlockSize, qLora, qNamespace)))
	want["tokens"] = qWantReply(t, x.g, p.tokHashes, 0xFFFF)
	// Lane mask.
	masked := qHashRequest("masked", p.b)
	masked.LaneMask = schemas.Some[uint16](1<<1 | 1<<5)
	keys, values = append(keys, "masked"), append(values, qEncode(t, codec, masked))
	want["masked"] = qWantReply(t, x.g, p.b, 1<<1|1<<5)
	none := qHashRequest("mask-none", p.b)
	none.LaneMask = schemas.Some[uint16](1 << 3)
	keys, values = append(keys, "mask-none"), append(values, qEncode(t, codec, none))
	want["mask-none"] = schemas.QueryReply{Status: schemas.QueryUnavailable, QueryBlocks: uint32(len(p.b))}
	// Routed by the request: an allowed topic, and an explicit partition of the default topic.
	routed := qHashRequest("routed", p.c)
	routed.ReplyTopic, routed.ReplyPartition = altReplies, schemas.Some[int32](1)
	keys, values = append(keys, "routed"), append(values, qEncode(t, codec, routed))
	onPart := qHashRequest("on-partition-3", p.c)
	onPart.ReplyPartition = schemas.Some[int32](3)
	keys, values = append(keys, "on-partition-3"), append(values, qEncode(t, codec, onPart))
	qProduce(t, prod, tp.requests, keys, values)

	ids := make([]string, 0, len(want))
	for id := range want {
		ids = append(ids, id)
	}
	replies.waitIDs(t, append(ids, "on-partition-3"), time.Minute)
	alt.waitIDs(t, []string{"routed"}, time.Minute)
	for id, w := range want {
		got := replies.get(id)[0]
		if err := qSameAnswer(got, w); err != nil {
			t.Errorf("%s: %v", id, err)
		}
	}
	if r := alt.records("routed")[0]; r.Partition != 1 || string(r.Key) != "routed" {
		t.Errorf("routed reply on %s[%d] key %q, want partition 1 key \"routed\"", r.Topic, r.Partition, r.Key)
	}
	if r := replies.records("on-partition-3")[0]; r.Partition != 3 {
		t.Errorf("reply on partition %d, want 3", r.Partition)
	}
	if err := qSameAnswer(alt.get("routed")[0], qWantReply(t, x.g, p.c, 0xFFFF)); err != nil {
		t.Errorf("routed: %v", err)
	}

	// 2. Eligibility excludes lane 0; then every lane; then no lane is ready.
	eligible.Store(1<<1 | 1<<5)
	r1 := qProduce(t, prod, tp.requests, []string{"elig"}, [][]byte{qEncode(t, codec, qHashRequest("elig", p.a))})
	_ = r1
	replies.waitIDs(t, []string{"elig"}, time.Minute)
	if err := qSameAnswer(replies.get("elig")[0], qWantReply(t, x.g, p.a, 1<<1|1<<5)); err != nil {
		t.Errorf("eligibility: %v", err)
	}
	eligible.Store(0)
	qProduce(t, prod, tp.requests, []string{"elig-none"}, [][]byte{qEncode(t, codec, qHashRequest("elig-none", p.a))})
	replies.waitIDs(t, []string{"elig-none"}, time.Minute)
	if r := replies.get("elig-none")[0]; r.Status != schemas.QueryUnavailable || r.ErrorMessage == "" {
		t.Errorf("nothing eligible: %+v", r)
	}
	eligible.Store(0xFFFF)
	x.retire(0, 1, 5)
	qProduce(t, prod, tp.requests, []string{"unready"}, [][]byte{qEncode(t, codec, qHashRequest("unready", p.a))})
	replies.waitIDs(t, []string{"unready"}, time.Minute)
	if r := replies.get("unready")[0]; r.Status != schemas.QueryUnavailable || r.QueryBlocks != 128 {
		t.Errorf("no lane ready: %+v", r)
	}

	// 3. Invalid requests: a block size of 0 (routed to partition 2 of the allowed topic: the
	// INVALID_REQUEST reply must follow the request's routing), a refused reply topic, and
	// undecodable bytes.
	rs := qProduce(t, prod, tp.requests,
		[]string{"bad-block", "bad-topic", "garbage", "bad-magic"},
		[][]byte{
			qRawTokenRequest(codec, "bad-block", p.tokens, 0, altReplies, 0),
			qEncode(t, codec, schemas.QueryRequest{CorrelationID: "bad-topic", Input: schemas.InputLocalBlockHashes, ReplyTopic: tp.deadLetters}),
			append(schemas.AppendHeader(nil, codec.SchemaID(schemas.TypeQueryRequest)), 0xFF, 0xFF, 0xFF),
			[]byte("not a framed record"),
		})
	coord := func(r *kgo.Record) string { return fmt.Sprintf("%d/%d", r.Partition, r.Offset) }
	dlq.waitIDs(t, []string{coord(rs[0]), coord(rs[1]), coord(rs[2]), coord(rs[3])}, time.Minute)
	alt.waitIDs(t, []string{"bad-block"}, time.Minute)
	replies.waitIDs(t, []string{"bad-topic"}, time.Minute)
	if r := alt.get("bad-block")[0]; r.Status != schemas.QueryInvalidRequest || r.ErrorMessage == "" {
		t.Errorf("bad block size: %+v", r)
	}
	if rec := alt.records("bad-block")[0]; rec.Partition != 0 {
		t.Errorf("invalid reply on partition %d, want the requested 0", rec.Partition)
	}
	if r := replies.get("bad-topic")[0]; r.Status != schemas.QueryInvalidRequest {
		t.Errorf("refused reply topic: %+v", r)
	}
	wantCodes := []schemas.DeadLetterReason{schemas.DeadLetterInvalidField, schemas.DeadLetterRejected, schemas.DeadLetterTruncated, schemas.DeadLetterUnknownMagic}
	for i, r := range rs {
		d := dlq.get(coord(r))[0]
		if d.SourceTopic != tp.requests || d.SourcePartition != r.Partition || d.SourceOffset != r.Offset ||
			string(d.Value) != string(r.Value) || string(d.Key) != string(r.Key) || d.Reason == "" || d.Component != "indexer" {
			t.Errorf("dead letter %d: %+v", i, d)
		}
		if d.ReasonCode != wantCodes[i] && !(i == 2 && d.ReasonCode == schemas.DeadLetterMalformed) {
			t.Errorf("dead letter %d: reason %s, want %s (%s)", i, d.ReasonCode, wantCodes[i], d.Reason)
		}
	}
	// Undecodable records have no reply at all (nothing to address it to). The service commits a
	// request only once its reply or dead letter is acknowledged, so when the group's committed
	// offsets reach the end of the request topic, every reply it will ever write for these
	// requests is on the reply topics; the observers then read those topics to their end.
	qWaitCommitted(t, k, group, tp.requests, 2)
	replies.waitCaughtUp(t, tp.replies, 4, time.Minute)
	alt.waitCaughtUp(t, altReplies, 2, time.Minute)
	if n, _ := replies.count(); n != len(want)+1+3+1 {
		t.Errorf("%d distinct correlation ids on the reply topic, want %d", n, len(want)+1+3+1)
	}
	if a, b, c := replies.undecodable(), alt.undecodable(), dlq.undecodable(); a+b+c != 0 {
		t.Errorf("undecodable records on the output topics: %d %d %d", a, b, c)
	}

	total := int64(len(values) + 3 + len(rs))
	waitCounter := func(name string, tags map[string]string, want int64) {
		t.Helper()
		testenv.WaitUntil(t, 10*time.Second, fmt.Sprintf("counter %s %v reaches %d", name, tags, want),
			func() bool { return qCounter(scope, name, tags) == want },
			func() string { return fmt.Sprintf("it is %d", qCounter(scope, name, tags)) })
	}
	waitCounter("query.requests_total", nil, total)
	waitCounter("query.invalid_requests_total", nil, 4)
	waitCounter("query.dead_letters_total", nil, 4)
	waitCounter("query.replies_total", map[string]string{"status": "invalid_request"}, 2)
	waitCounter("query.replies_total", map[string]string{"status": "unavailable"}, 3)
	waitCounter("query.replies_total", nil, total-2)
	if h := scope.Snapshot().Histograms(); len(h) == 0 {
		t.Error("no latency histograms recorded")
	}
}

// qRequests encodes n hash requests "<prefix>-<i>" over the prompts and returns ids and values.
func qRequests(t testing.TB, codec *schemas.Codec, p qPrompts, prefix string, from, n int) ([]string, [][]byte) {
	qs := [][]uint64{p.a, p.b, p.c, p.a[:10], p.tokHashes}
	ids := make([]string, n)
	values := make([][]byte, n)
	for i := range n {
		ids[i] = fmt.Sprintf("%s-%d", prefix, from+i)
		values[i] = qEncode(t, codec, qHashRequest(ids[i], qs[(from+i)%len(qs)]))
	}
	return ids, values
}

// qCommitted returns the group's committed offset per partition of topic (-1 when none).
func qCommitted(t *testing.T, k *streamtest.Kafka, group, topic string, partitions int32) []int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	got, err := k.Admin(t).FetchOffsets(ctx, group)
	if err != nil {
		t.Fatalf("fetch offsets of %s: %v", group, err)
	}
	out := make([]int64, partitions)
	for p := range partitions {
		out[p] = -1
		if o, ok := got.Lookup(topic, p); ok && o.Err == nil {
			out[p] = o.At
		}
	}
	return out
}

// qEndOffsets returns the end offset of every partition of topic.
func qEndOffsets(t *testing.T, k *streamtest.Kafka, topic string, partitions int32) []int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ends, err := k.Admin(t).ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]int64, partitions)
	for p := range partitions {
		o, _ := ends.Lookup(topic, p)
		out[p] = o.Offset
	}
	return out
}

// TestQueryServiceCommitsOnlyAfterReplies: a service whose replies cannot be delivered (its
// reply topic does not exist) fails its first batch and stops with a QueryBatchError, having
// committed nothing; a healthy service in the same group then answers every request, the failed
// batch included (at-least-once: nothing is lost).
func TestQueryServiceCommitsOnlyAfterReplies(t *testing.T) {
	t.Parallel() // its own in-process cluster
	k := streamtest.NewFakeKafka(t)
	x, p, codec, tp := newQServed(t, k, 3, 2)
	ans := query.NewAnswerer(x.g, nil)
	group := testenv.UniqueName(t, "g")
	ids, values := qRequests(t, codec, p, "r", 0, 60)
	qProduce(t, k.Client(t), tp.requests, ids, values)

	broken := qConfig(tp, group)
	broken.ReplyTopic = tp.replies + "-missing" // auto-creation is off on the test broker
	broken.ReplyTimeout = 3 * time.Second
	broken.MaxBatchRecords = 16
	a := qNewService(t, k, ans, codec, broken, nil, kgo.UnknownTopicRetries(1))
	errc := make(chan error, 1)
	go func() { errc <- a.Run(context.Background()) }()
	var err error
	select {
	case err = <-errc:
	case <-time.After(2 * time.Minute):
		t.Fatal("the service with an undeliverable reply topic did not stop")
	}
	var be *query.QueryBatchError
	if !errors.Is(err, query.ErrQueryBatchFailed) || !errors.As(err, &be) || be.Failed == 0 || be.Topic != broken.ReplyTopic {
		t.Fatalf("Run returned %v, want a QueryBatchError for %s", err, broken.ReplyTopic)
	}
	t.Logf("first service stopped as expected: %v", err)
	for part, off := range qCommitted(t, k, group, tp.requests, 2) {
		if off >= 0 {
			t.Fatalf("partition %d: offset %d committed although no reply was acknowledged", part, off)
		}
	}

	replies := qReplies(t, k, codec, tp.replies)
	qStartService(t, k, ans, codec, qConfig(tp, group), nil)
	replies.waitIDs(t, ids, time.Minute)
	for _, id := range ids {
		if r := replies.get(id)[0]; r.Status != schemas.QueryOK {
			t.Fatalf("%s: %+v", id, r)
		}
	}
	qWaitCommitted(t, k, group, tp.requests, 2)
}

// qWaitCommitted waits until the group has committed the end offset of every partition.
func qWaitCommitted(t *testing.T, k *streamtest.Kafka, group, topic string, partitions int32) {
	t.Helper()
	ends := qEndOffsets(t, k, topic, partitions)
	var got []int64
	testenv.WaitUntil(t, 30*time.Second, "group "+group+" commits the end offsets of "+topic, func() bool {
		got = qCommitted(t, k, group, topic, partitions)
		return slices.Equal(got, ends)
	}, func() string { return fmt.Sprintf("committed %v, end offsets %v", got, ends) })
}

// TestQueryServiceRestartMidStream: requests keep arriving while one instance is closed
// gracefully and another takes over. Every request is answered; since Close finishes and
// commits the batch in flight before leaving, none is answered twice.
func TestQueryServiceRestartMidStream(t *testing.T) {
	t.Parallel() // its own in-process cluster
	k := streamtest.NewFakeKafka(t)
	x, p, codec, tp := newQServed(t, k, 4, 4)
	ans := query.NewAnswerer(x.g, nil)
	group := testenv.UniqueName(t, "g")
	cfg := qConfig(tp, group)
	cfg.MaxBatchRecords = 8
	replies := qReplies(t, k, codec, tp.replies)
	prod := k.Client(t, kgo.ProducerLinger(0))

	const total, chunk = 600, 10
	ids, values := qRequests(t, codec, p, "s", 0, total)
	produced := make(chan struct{})
	go func() { // a steady stream of requests, 10 every ~5 ms
		defer close(produced)
		for i := 0; i < total; i += chunk {
			if i > 0 {
				// The pacing of the stream, not a wait for an outcome: requests must keep
				// arriving while the first instance closes and the second takes over.
				time.Sleep(5 * time.Millisecond)
			}
			rs := make([]*kgo.Record, 0, chunk)
			for j := i; j < i+chunk; j++ {
				rs = append(rs, &kgo.Record{Topic: tp.requests, Key: []byte(ids[j]), Value: values[j]})
			}
			if err := prod.ProduceSync(context.Background(), rs...).FirstErr(); err != nil {
				t.Errorf("produce requests: %v", err)
				return
			}
		}
	}()

	a := qNewService(t, k, ans, codec, cfg, nil)
	if err := a.Start(); err != nil {
		t.Fatal(err)
	}
	testenv.WaitUntil(t, time.Minute, "150 replies from the first instance", func() bool {
		n, _ := replies.count()
		return n >= 150
	}, func() string { n, _ := replies.count(); return fmt.Sprintf("%d replies", n) })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	if err := a.Close(ctx); err != nil {
		t.Fatalf("graceful close: %v", err)
	}
	cancel()
	byA, _ := replies.count()
	qStartService(t, k, ans, codec, cfg, nil)
	<-produced
	replies.waitIDs(t, ids, 2*time.Minute)
	nIDs, nReplies := replies.count()
	t.Logf("%d requests: %d answered before the restart, %d distinct replied, %d replies", total, byA, nIDs, nReplies)
	if nIDs != total || nReplies != total {
		t.Fatalf("%d distinct ids and %d replies for %d requests: a graceful restart must neither lose nor repeat", nIDs, nReplies, total)
	}
	qWaitCommitted(t, k, group, tp.requests, 4)
}

// TestQueryServiceGroupSharesLoad: two instances in one group split the request partitions and
// every request is answered.
func TestQueryServiceGroupSharesLoad(t *testing.T) {
	t.Parallel() // its own in-process cluster
	k := streamtest.NewFakeKafka(t)
	x, p, codec, tp := newQServed(t, k, 5, 4)
	ans := query.NewAnswerer(x.g, nil)
	group := testenv.UniqueName(t, "g")
	scopes := []tally.TestScope{tally.NewTestScope("", nil), tally.NewTestScope("", nil)}
	for _, s := range scopes {
		qStartService(t, k, ans, codec, qConfig(tp, group), s)
	}
	// Wait until both members hold partitions, so the load can split.
	adm := k.Admin(t)
	var (
		holding int
		state   string
		err     error
	)
	testenv.WaitUntil(t, time.Minute, "group "+group+" has two members holding partitions", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var groups kadm.DescribedGroups
		groups, err = adm.DescribeGroups(ctx, group)
		holding, state = 0, ""
		if err != nil {
			return false
		}
		g := groups[group]
		state = g.State
		for _, m := range g.Members {
			if ca, ok := m.Assigned.AsConsumer(); ok && len(ca.Topics) > 0 && len(ca.Topics[0].Partitions) > 0 {
				holding++
			}
		}
		return state == "Stable" && holding == 2
	}, func() string { return fmt.Sprintf("last: state %q, %d holding, %v", state, holding, err) })
	replies := qReplies(t, k, codec, tp.replies)
	ids, values := qRequests(t, codec, p, "l", 0, 400)
	qProduce(t, k.Client(t), tp.requests, ids, values)
	replies.waitIDs(t, ids, time.Minute)
	a, b := qCounter(scopes[0], "query.requests_total", nil), qCounter(scopes[1], "query.requests_total", nil)
	t.Logf("instance A answered %d requests, instance B %d", a, b)
	if a == 0 || b == 0 || a+b < int64(len(ids)) {
		t.Fatalf("load not shared: %d + %d requests for %d", a, b, len(ids))
	}
	for i, id := range ids {
		want := []uint64{}
		switch i % 5 {
		case 0:
			want = p.a
		case 1:
			want = p.b
		case 2:
			want = p.c
		case 3:
			want = p.a[:10]
		case 4:
			want = p.tokHashes
		}
		if err := qSameAnswer(replies.get(id)[0], qWantReply(t, x.g, want, 0xFFFF)); err != nil {
			t.Fatalf("%s: %v", id, err)
		}
	}
}

// TestQueryServiceUndeliverableRoutedReply: a reply to a destination the request chose that
// does not exist (an allowed topic that was never created, a partition beyond the topic's) is
// not retried forever: the request is dead-lettered as REJECTED, its caller gets INVALID_REQUEST
// at the next address down (the same topic by key when a partition was named, else the default
// reply topic by key), and the service goes on. A correlation id over the limit is answered
// too, cut to fit.
func TestQueryServiceUndeliverableRoutedReply(t *testing.T) {
	t.Parallel() // its own in-process cluster
	k := streamtest.NewFakeKafka(t)
	x, p, codec, tp := newQServed(t, k, 10, 1)
	cfg := qConfig(tp, testenv.UniqueName(t, "g"))
	altReplies := tp.k.NewTopic(t, 2, testenv.TopicName(tp.replies+"-ok-alt"))
	svc := qNewService(t, k, query.NewAnswerer(x.g, nil), codec, cfg, nil, kgo.UnknownTopicRetries(1))
	if err := svc.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := svc.Close(context.Background()); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	replies := qReplies(t, k, codec, tp.replies)
	alt := qReplies(t, k, codec, altReplies)
	dlq := qDeadLetters(t, k, codec, tp.deadLetters)
	missingTopic := qHashRequest("to-missing-topic", p.a)
	missingTopic.ReplyTopic = tp.replies + "-ok-never-created"
	missingPart := qHashRequest("to-missing-partition", p.a)
	missingPart.ReplyPartition = schemas.Some[int32](99)
	altMissingPart := qHashRequest("to-alt-missing-partition", p.a)
	altMissingPart.ReplyTopic, altMissingPart.ReplyPartition = altReplies, schemas.Some[int32](2)
	missingBoth := qHashRequest("to-missing-topic-and-partition", p.a)
	missingBoth.ReplyTopic, missingBoth.ReplyPartition = tp.replies+"-ok-never-created", schemas.Some[int32](5)
	longID := strings.Repeat("l", 255) + "€" // 258 bytes: cut to the 255 before the euro sign
	rs := qProduce(t, k.Client(t), tp.requests, []string{"a", "b", "c", "d", "e", "f"},
		[][]byte{qEncode(t, codec, missingTopic), qEncode(t, codec, missingPart), qEncode(t, codec, altMissingPart),
			qEncode(t, codec, missingBoth), qRawTokenRequest(codec, longID, p.tokens, 4, altReplies, 1),
			qEncode(t, codec, qHashRequest("after", p.b))})
	coord := func(r *kgo.Record) string { return fmt.Sprintf("%d/%d", r.Partition, r.Offset) }
	dlq.waitIDs(t, []string{coord(rs[0]), coord(rs[1]), coord(rs[2]), coord(rs[3]), coord(rs[4])}, time.Minute)
	replies.waitIDs(t, []string{"after", "to-missing-topic", "to-missing-partition", "to-missing-topic-and-partition"}, time.Minute)
	alt.waitIDs(t, []string{"to-alt-missing-partition", longID[:255]}, time.Minute)
	for i := range 4 {
		d := dlq.get(coord(rs[i]))[0]
		if d.ReasonCode != schemas.DeadLetterRejected || d.Reason == "" || d.SourceOffset != rs[i].Offset {
			t.Errorf("dead letter %d: %+v", i, d)
		}
		t.Logf("dead letter %d: %s", i, d.Reason)
	}
	if d := dlq.get(coord(rs[4]))[0]; d.ReasonCode != schemas.DeadLetterInvalidField {
		t.Errorf("dead letter of the long correlation id: %+v", d)
	}
	if err := qSameAnswer(replies.get("after")[0], qWantReply(t, x.g, p.b, 0xFFFF)); err != nil {
		t.Error(err)
	}
	// Each refused request's reply: INVALID_REQUEST saying why, partitioned by key on the topic
	// of the fallback, exactly once.
	byKey := func(topic, key string, partitions int) int32 {
		return int32(kgo.StickyKeyPartitioner(nil).ForTopic(topic).Partition(&kgo.Record{Key: []byte(key)}, partitions))
	}
	for _, tc := range []struct {
		obs       *qObserver[schemas.QueryReply]
		topic, id string
		parts     int
		why       string
	}{
		{replies, tp.replies, "to-missing-topic", 4, "reply to topic " + missingTopic.ReplyTopic + " (partitioned by key) not delivered"},
		{replies, tp.replies, "to-missing-partition", 4, "reply to topic " + tp.replies + " (partition 99) not delivered"},
		{alt, altReplies, "to-alt-missing-partition", 2, "reply to topic " + altReplies + " (partition 2) not delivered"},
		// Two steps down: the topic by key fails too, then the default reply topic takes it.
		{replies, tp.replies, "to-missing-topic-and-partition", 4, "reply to topic " + missingBoth.ReplyTopic + " (partitioned by key) not delivered"},
	} {
		got, recs := tc.obs.get(tc.id), tc.obs.records(tc.id)
		if len(got) != 1 || got[0].Status != schemas.QueryInvalidRequest || !strings.Contains(got[0].ErrorMessage, tc.why) || len(got[0].Lanes) != 0 {
			t.Errorf("%s: replies %+v; want one INVALID_REQUEST containing %q", tc.id, got, tc.why)
			continue
		}
		if want := byKey(tc.topic, tc.id, tc.parts); recs[0].Partition != want {
			t.Errorf("%s: reply on partition %d, want %d (by key)", tc.id, recs[0].Partition, want)
		}
	}
	if r := alt.get(longID[:255]); len(r) != 1 || r[0].Status != schemas.QueryInvalidRequest ||
		!strings.Contains(r[0].ErrorMessage, "correlation_id longer than 256 bytes cut to its first 255") {
		t.Errorf("long correlation id: %+v", r)
	} else if rec := alt.records(longID[:255])[0]; rec.Partition != 1 {
		t.Errorf("long correlation id: reply on partition %d, want the requested 1", rec.Partition)
	}
}
