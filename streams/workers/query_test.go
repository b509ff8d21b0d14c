package workers

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/ckf-stream/ckf-stream/streams/query"
	"github.com/ckf-stream/ckf-stream/testenv"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The worker query service on an in-process cluster (kfake): the DC filter across two DCs' groups,
// the reply routing, bad requests and the commit rule. The answers come from a stub AnswerFunc
// (the seam app/workers fills with the HTTP route's Answer, tested there and on the broker by
// cmd/processor), which names the DC it answers for in its only source.

type queryRig struct {
	t       *testing.T
	c       *testenv.Cluster
	codec   *schemas.Codec
	cl      *kgo.Client
	req     string
	reply   string
	allowed string // a reply topic under the allowed prefix
	dlq     string
}

func newQueryRig(t *testing.T) *queryRig {
	t.Helper()
	c := testenv.FakeCluster(t)
	codec, err := schemas.NewCodec(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	rig := &queryRig{t: t, c: c, codec: codec, req: c.NewTopic(t, 1), reply: c.NewTopic(t, 2), dlq: c.NewTopic(t, 1)}
	rig.allowed = "router-a-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	if _, err := c.Admin(t).CreateTopic(context.Background(), 2, 1, nil, rig.allowed); err != nil {
		t.Fatal(err)
	}
	rig.cl = c.Client(t, kgo.ConsumeTopics(rig.reply, rig.allowed, rig.dlq), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	return rig
}

// serve starts DC dc's query service, answering with one source whose worker id is the DC.
func (rig *queryRig) serve(dc ckf.DcID) *query.QueryService {
	rig.t.Helper()
	cfg := DefaultQueryConfig(dc, rig.codec)
	cfg.RequestTopic, cfg.ReplyTopic, cfg.DeadLetterTopic = rig.req, rig.reply, rig.dlq
	cfg.ReplyTopicPrefixes = []string{"router-a-"}
	answer := func(q *schemas.WorkerQueryRequest) schemas.WorkerQueryReply {
		// The source's dp rank reports the top k the answer was asked with.
		return schemas.WorkerQueryReply{CorrelationID: q.CorrelationID, Status: schemas.QueryOK, DcID: uint64(dc), QueryBlocks: uint32(q.Hashes.Len()),
			Sources: []schemas.WorkerSource{{WorkerID: uint64(dc), DpRank: q.TopK, Device: uint32(q.Hashes.Len())}}, AgeMillis: schemas.Some[int64](0), ReplyTime: time.Now()}
	}
	s, err := NewQueryService(QueryServiceParams{DC: dc, Config: cfg, Answer: answer, Codec: rig.codec,
		ClientOpts: []kgo.Opt{kgo.SeedBrokers(rig.c.Seeds()...)}})
	if err != nil {
		rig.t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		rig.t.Fatal(err)
	}
	rig.t.Cleanup(func() { _ = s.Close(context.Background()) })
	return s
}

func (rig *queryRig) send(q schemas.WorkerQueryRequest) {
	rig.t.Helper()
	b, err := rig.codec.EncodeWorkerQueryRequest(q)
	if err != nil {
		rig.t.Fatal(err)
	}
	rig.sendRaw(q.CorrelationID, b)
}

func (rig *queryRig) sendRaw(key string, value []byte) {
	rig.t.Helper()
	if err := rig.cl.ProduceSync(context.Background(), &kgo.Record{Topic: rig.req, Key: []byte(key), Value: value}).FirstErr(); err != nil {
		rig.t.Fatal(err)
	}
}

// output is one record read back: a reply (on any reply topic) or a dead letter.
type output struct {
	topic     string
	partition int32
	reply     schemas.WorkerQueryReply
	dead      schemas.DeadLetter
}

// readUntil reads outputs until done says the ones so far are enough.
func (rig *queryRig) readUntil(done func([]output) bool) []output {
	rig.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out []output
	for !done(out) {
		fs := rig.cl.PollFetches(ctx)
		if ctx.Err() != nil {
			rig.t.Fatalf("outputs so far: %+v", out)
		}
		for _, r := range fs.Records() {
			o := output{topic: r.Topic, partition: r.Partition}
			var err error
			if r.Topic == rig.dlq {
				o.dead, err = rig.codec.DecodeDeadLetter(r.Value)
			} else {
				o.reply, err = rig.codec.DecodeWorkerQueryReply(r.Value)
			}
			if err != nil {
				rig.t.Fatalf("%s: %v", r.Topic, err)
			}
			out = append(out, o)
		}
	}
	return out
}

func repliesTo(out []output, id string) []output {
	var r []output
	for _, o := range out {
		if o.topic != "" && o.reply.CorrelationID == id && o.dead.SourceTopic == "" {
			r = append(r, o)
		}
	}
	return r
}

func hashes(n int) schemas.PackedU64 {
	v := make([]uint64, n)
	for i := range v {
		v[i] = uint64(i + 1)
	}
	return schemas.AppendU64s(nil, v)
}

// TestWorkerQueryDCFilter: two DCs' services on one request topic; a request reaches every DC it
// selects once, and no other.
func TestWorkerQueryDCFilter(t *testing.T) {
	rig := newQueryRig(t)
	const a, b = ckf.DcID(0xa), ckf.DcID(0xb)
	rig.serve(a)
	rig.serve(b)
	reqs := []schemas.WorkerQueryRequest{
		{CorrelationID: "every", Input: schemas.InputLocalBlockHashes, Hashes: hashes(3)},
		{CorrelationID: "only-a", Input: schemas.InputLocalBlockHashes, Hashes: hashes(2), DcIDs: []uint64{uint64(a)}, TopK: 3},
		{CorrelationID: "only-b-and-c", Input: schemas.InputLocalBlockHashes, Hashes: hashes(2), DcIDs: []uint64{uint64(b), 0xc}},
		{CorrelationID: "none", Input: schemas.InputLocalBlockHashes, Hashes: hashes(2), DcIDs: []uint64{}},
		// The request topic has one partition, so both DCs answer this one after the others.
		{CorrelationID: "last", Input: schemas.InputLocalBlockHashes, Hashes: hashes(1)},
	}
	for _, q := range reqs {
		rig.send(q)
	}
	out := rig.readUntil(func(o []output) bool { return len(repliesTo(o, "last")) == 2 })
	want := map[string][]ckf.DcID{"every": {a, b}, "only-a": {a}, "only-b-and-c": {b}, "none": nil, "last": {a, b}}
	// The answers are asked with the request's top k, capped at what a reply holds.
	for id, k := range map[string]uint32{"every": schemas.MaxWorkerReplySources, "only-a": 3} {
		for _, o := range repliesTo(out, id) {
			if o.reply.Sources[0].DpRank != k {
				t.Errorf("%s: answered with top k %d, want %d", id, o.reply.Sources[0].DpRank, k)
			}
		}
	}
	for id, dcs := range want {
		got := map[ckf.DcID]int{}
		for _, o := range repliesTo(out, id) {
			got[ckf.DcID(o.reply.DcID)]++
			if o.reply.Status != schemas.QueryOK || len(o.reply.Sources) != 1 || o.reply.Sources[0].WorkerID != o.reply.DcID {
				t.Errorf("%s: reply %+v", id, o.reply)
			}
		}
		if len(got) != len(dcs) {
			t.Errorf("%s: replies from %v, want %v", id, got, dcs)
		}
		for _, dc := range dcs {
			if got[dc] != 1 {
				t.Errorf("%s: %d replies from DC %v, want 1", id, got[dc], dc)
			}
		}
	}
}

// TestWorkerQueryRoutingAndBadRequests: reply topics and partitions follow the prefix-match path's
// rules; a request that breaks a rule is answered INVALID_REQUEST (naming the DC) and
// dead-lettered; an undecodable one is dead-lettered; the group commits past every one of them
// once their outputs are acknowledged.
func TestWorkerQueryRoutingAndBadRequests(t *testing.T) {
	rig := newQueryRig(t)
	const dc = ckf.DcID(0xdc)
	rig.serve(dc)
	rig.send(schemas.WorkerQueryRequest{CorrelationID: "own-topic", Input: schemas.InputLocalBlockHashes, Hashes: hashes(2),
		ReplyTopic: rig.allowed, ReplyPartition: schemas.Some[int32](1)})
	rig.send(schemas.WorkerQueryRequest{CorrelationID: "partition", Input: schemas.InputLocalBlockHashes, Hashes: hashes(2), ReplyPartition: schemas.Some[int32](1)})
	rig.send(schemas.WorkerQueryRequest{CorrelationID: "foreign-topic", Input: schemas.InputLocalBlockHashes, Hashes: hashes(2), ReplyTopic: rig.dlq})
	// block_size 0: valid Avro that breaks a rule, so its reply address is recovered.
	bad := schemas.WorkerQueryRequest{CorrelationID: "bad-block", Input: schemas.InputTokenIDs, BlockSize: 16, Tokens: schemas.AppendU32s(nil, []uint32{1, 2})}
	b, err := rig.codec.EncodeWorkerQueryRequest(bad)
	if err != nil {
		t.Fatal(err)
	}
	b = badBlockSize(t, rig.codec, b)
	rig.sendRaw("bad-block", b)
	rig.sendRaw("garbage", []byte("not a framed record"))
	rig.send(schemas.WorkerQueryRequest{CorrelationID: "last", Input: schemas.InputLocalBlockHashes, Hashes: hashes(1)})
	out := rig.readUntil(func(o []output) bool {
		dead := 0
		for _, x := range o {
			if x.topic == rig.dlq {
				dead++
			}
		}
		return len(repliesTo(o, "last")) == 1 && dead == 3
	})
	one := func(id string) output {
		t.Helper()
		r := repliesTo(out, id)
		if len(r) != 1 {
			t.Fatalf("%s: %d replies, want 1: %+v", id, len(r), out)
		}
		return r[0]
	}
	if o := one("own-topic"); o.topic != rig.allowed || o.partition != 1 || o.reply.Status != schemas.QueryOK {
		t.Errorf("own-topic: %s[%d] %v", o.topic, o.partition, o.reply.Status)
	}
	if o := one("partition"); o.topic != rig.reply || o.partition != 1 {
		t.Errorf("partition: %s[%d]", o.topic, o.partition)
	}
	if o := one("foreign-topic"); o.topic != rig.reply || o.reply.Status != schemas.QueryInvalidRequest || o.reply.DcID != uint64(dc) {
		t.Errorf("foreign-topic: %s %+v", o.topic, o.reply)
	}
	if o := one("bad-block"); o.reply.Status != schemas.QueryInvalidRequest || o.reply.DcID != uint64(dc) || o.reply.ErrorMessage == "" {
		t.Errorf("bad-block: %+v", o.reply)
	}
	reasons := map[string]schemas.DeadLetterReason{}
	for _, o := range out {
		if o.topic == rig.dlq {
			reasons[string(o.dead.Key)] = o.dead.ReasonCode
			if o.dead.Component != "workers" || o.dead.SourceTopic != rig.req {
				t.Errorf("dead letter %+v", o.dead)
			}
		}
	}
	if len(reasons) != 3 || reasons["garbage"] == 0 || reasons["foreign-topic"] != schemas.DeadLetterRejected || reasons["bad-block"] == 0 {
		t.Errorf("dead letters by key: %v", reasons)
	}
	// The commit rule: every request's outputs are acknowledged (read back above), so the group
	// commits up to the end of the request topic (asynchronously: wait for it).
	adm := kadm.NewClient(rig.cl)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for {
		offs, err := adm.FetchOffsets(ctx, QueryGroup(dc))
		if err == nil {
			if o, ok := offs.Lookup(rig.req, 0); ok && o.At == 6 {
				break
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("group %s never committed offset 6 on %s: %v %v", QueryGroup(dc), rig.req, offs, err)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// badBlockSize rewrites the block size of an encoded token-id request to 0, which the encoder
// refuses to write.
func badBlockSize(t *testing.T, codec *schemas.Codec, frame []byte) []byte {
	t.Helper()
	q, err := codec.DecodeWorkerQueryRequest(frame)
	if err != nil {
		t.Fatal(err)
	}
	// The body's block_size is the zig-zag varint 32 (16); it is the only byte of that value
	// after the tokens, so find the tokens and rewrite the byte after them.
	tok := []byte(q.Tokens)
	for i := schemas.HeaderSize; i+len(tok) < len(frame); i++ {
		if string(frame[i:i+len(tok)]) == string(tok) && frame[i+len(tok)] == 32 {
			out := append([]byte(nil), frame...)
			out[i+len(tok)] = 0
			return out
		}
	}
	t.Fatal("block size not found")
	return nil
}
