package workers

import (
	"bytes"
	"context"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/ckf/producer"
	ckfworkers "github.com/ckf-stream/ckf-stream/ckf/workers"
	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/ckf-stream/ckf-stream/streams/relay"
	"github.com/ckf-stream/ckf-stream/testenv"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The read model's logic on an in-process cluster (kfake), each test on a cluster of its own.

const testDC = ckf.DcID(0xdc01)

type env struct {
	t     *testing.T
	c     *testenv.Cluster
	codec *schemas.Codec
	kv    string
	ckpt  string
	dlq   string
	cl    *kgo.Client
}

func newEnv(t *testing.T) *env {
	t.Helper()
	c := testenv.FakeCluster(t)
	codec, err := schemas.NewCodec(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return &env{t: t, c: c, codec: codec, kv: c.NewTopic(t, 3), ckpt: c.NewTopic(t, 4, testenv.TopicConfig("cleanup.policy", "compact")),
		dlq: c.NewTopic(t, 1), cl: c.Client(t)}
}

func (e *env) config() Config {
	cfg := DefaultConfig()
	cfg.DC = testDC
	cfg.Topics = Topics{KVEvents: e.kv, Checkpoints: e.ckpt, DeadLetter: e.dlq}
	cfg.CheckpointInterval = 0
	cfg.LagCommitInterval = 0
	cfg.CheckpointChunkBytes = 1024 // several chunks per checkpoint
	return cfg
}

// produce writes events to the KV topic keyed by worker, as engines do.
func (e *env) produce(evs []producer.RouterEvent) {
	e.t.Helper()
	var recs []*kgo.Record
	for _, ev := range evs {
		b, err := e.codec.EncodeKvEvent(relay.KvEventOf(ev))
		if err != nil {
			e.t.Fatal(err)
		}
		recs = append(recs, &kgo.Record{Topic: e.kv, Key: []byte(strconv.FormatUint(uint64(ev.WorkerID), 10)), Value: b})
	}
	if err := e.cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) produceRaw(key string, value []byte) {
	e.t.Helper()
	if err := e.cl.ProduceSync(context.Background(), &kgo.Record{Topic: e.kv, Key: []byte(key), Value: value}).FirstErr(); err != nil {
		e.t.Fatal(err)
	}
}

type running struct {
	r      *Replica
	cancel context.CancelFunc
	done   chan error
}

func (e *env) start(cfg Config) *running {
	e.t.Helper()
	r, err := New(Params{Config: cfg, Codec: e.codec, ClientOptsFor: func(string) []kgo.Opt { return []kgo.Opt{kgo.SeedBrokers(e.c.Seeds()...)} }})
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	run := &running{r: r, cancel: cancel, done: make(chan error, 1)}
	go func() { run.done <- r.Run(ctx) }()
	e.t.Cleanup(run.stop)
	return run
}

func (run *running) stop() {
	run.cancel()
	<-run.done
	run.done <- nil // later stops return at once
}

func (run *running) waitReady(t *testing.T) {
	t.Helper()
	select {
	case <-run.r.WaitReady():
	case err := <-run.done:
		t.Fatalf("replica stopped before ready: %v", err)
	case <-time.After(time.Minute):
		t.Fatalf("replica not ready: %+v", run.r.Status())
	}
}

// oracle applies evs to a fresh index.
func oracle(evs []producer.RouterEvent) *ckfworkers.Index {
	ix := ckfworkers.New()
	for _, ev := range evs {
		_ = ix.Apply(ev)
	}
	return ix
}

func (run *running) match(q []ckf.CanonicalHash, opt ckfworkers.Options, res *ckfworkers.Result) {
	run.r.Match(q, opt, res)
}

// waitApplied waits until the replica applied n records in this process.
func (run *running) waitApplied(t *testing.T, n uint64) {
	t.Helper()
	testenv.WaitUntil(t, time.Minute, "records applied", func() bool { return run.r.Status().Applied >= n },
		func() string { return strconv.FormatUint(run.r.Status().Applied, 10) })
}

// TestReadyExactlyAtListedEnd: an empty topic is ready at once; a topic of n records is ready
// once exactly those n are applied, and records written after the listing are live, not
// waited for.
func TestReadyExactlyAtListedEnd(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	empty := e.start(e.config())
	empty.waitReady(t)
	if s := empty.r.Status(); s.ReadyAfter != 0 || s.Restored {
		t.Fatalf("empty topic: %+v", s)
	}
	empty.stop()

	g := newTraceGen(5)
	evs := g.trace(300)
	e.produce(evs)
	run := e.start(e.config())
	run.waitReady(t)
	if s := run.r.Status(); s.ReadyAfter != uint64(len(evs)) {
		t.Fatalf("ready after %d records, want exactly the %d listed at start", s.ReadyAfter, len(evs))
	}
	more := g.trace(100)
	e.produce(more)
	run.waitApplied(t, uint64(len(evs)+len(more)))
	all := append(evs, more...)
	qs := g.queries()
	a, b := answers(run.match, qs), answers(oracle(all).Match, qs)
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("answers differ from the oracle fed the same events")
	}
	if l := localAnswers(t, run.r, g, qs); !reflect.DeepEqual(l, b) {
		t.Fatalf("MatchLocal's answers differ from the oracle's")
	}
	// Every answer's device walk is counted (ckf_workers_match_blocks_total and _followed_).
	if walked, passed := run.r.l.matchBlocks.load(), run.r.l.matchFollowed.load(); walked == 0 || passed > walked {
		t.Fatalf("the matches' walks decided %d positions and passed %d by summaries", walked, passed)
	}
	if s := run.r.Status(); s.Age.NewestEventMs == 0 || s.Age.LagRecords != 0 {
		t.Fatalf("age after catching up: %+v", s.Age)
	}
}

// TestRestoreFromCheckpointPlusTail: a replica that checkpointed its state stops; the next one
// restores the checkpoint, reads only the records after it and answers as the oracle fed the
// whole history.
func TestRestoreFromCheckpointPlusTail(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	g := newTraceGen(9)
	first := g.trace(400)
	e.produce(first)
	cfg := e.config()
	cfg.CheckpointInterval = time.Millisecond
	a := e.start(cfg)
	a.waitReady(t)
	testenv.WaitUntil(t, time.Minute, "a checkpoint of every record", func() bool {
		return a.r.Status().CheckpointApplied == uint64(len(first))
	}, func() string { return strconv.FormatUint(a.r.Status().CheckpointApplied, 10) })
	a.stop()

	tail := g.trace(150)
	e.produce(tail)
	b := e.start(e.config())
	b.waitReady(t)
	s := b.r.Status()
	if !s.Restored || s.ReadyAfter != uint64(len(tail)) || s.CheckpointsRejected != 0 {
		t.Fatalf("restart: %+v; want restored and exactly the %d tail records read", s, len(tail))
	}
	qs := g.queries()
	x, y := answers(b.match, qs), answers(oracle(append(first, tail...)).Match, qs)
	if !reflect.DeepEqual(x, y) {
		t.Fatalf("checkpoint + tail answers differ from the whole history's")
	}
	// The restored index's memo holds only the tail's chains: MatchLocal hashes the rest.
	if l := localAnswers(t, b.r, g, qs); !reflect.DeepEqual(l, y) {
		t.Fatalf("checkpoint + tail: MatchLocal's answers differ from the whole history's")
	}
}

// TestDamagedCheckpointFallsBack: a damaged newest checkpoint is rejected loudly (counted,
// dead-lettered) and the one before it used; with none usable the replica replays the topic from
// its log start. Answers equal the oracle's either way.
func TestDamagedCheckpointFallsBack(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	g := newTraceGen(11)
	first := g.trace(300)
	e.produce(first)
	cfg := e.config()
	cfg.CheckpointInterval = time.Millisecond
	a := e.start(cfg)
	a.waitReady(t)
	testenv.WaitUntil(t, time.Minute, "a checkpoint", func() bool { return a.r.Status().CheckpointApplied == uint64(len(first)) })
	a.stop()

	// A newer manifest whose payload hash is wrong, on the DC's partition.
	part := e.ckptPartition()
	recs := e.c.PartitionRecords(t, e.ckpt, part)
	var good *kgo.Record
	for _, r := range recs {
		if bytes.Equal(r.Key, manifestKey(testDC)) {
			good = r
		}
	}
	if good == nil {
		t.Fatal("no manifest written")
	}
	m, err := decodeManifest(good.Value)
	if err != nil {
		t.Fatal(err)
	}
	m.PayloadHash++
	e.produceTo(e.ckpt, part, manifestKey(testDC), encodeManifest(&m))

	tail := g.trace(100)
	e.produce(tail)
	qs := g.queries()
	want := answers(oracle(append(first, tail...)).Match, qs)

	b := e.start(e.config())
	b.waitReady(t)
	if s := b.r.Status(); !s.Restored || s.CheckpointsRejected != 1 || s.ReadyAfter != uint64(len(tail)) || s.DeadLetters != 1 {
		t.Fatalf("one damaged checkpoint: %+v; want the older one restored", s)
	}
	if got := answers(b.match, qs); !reflect.DeepEqual(got, want) {
		t.Fatal("answers after falling back to the older checkpoint differ from the oracle's")
	}
	b.stop()

	// A checkpoint topic holding only damaged checkpoints (a manifest whose chunks are missing,
	// then one that is not JSON): a replay of the whole topic.
	cfg = e.config()
	cfg.Topics.Checkpoints = e.c.NewTopic(t, 4, testenv.TopicConfig("cleanup.policy", "compact"))
	e.produceTo(cfg.Topics.Checkpoints, part, manifestKey(testDC), good.Value)
	e.produceTo(cfg.Topics.Checkpoints, part, manifestKey(testDC), append([]byte(manifestMagic), "{not json"...))
	c := e.start(cfg)
	c.waitReady(t)
	if s := c.r.Status(); s.Restored || s.CheckpointsRejected != 2 || s.ReadyAfter != uint64(len(first)+len(tail)) {
		t.Fatalf("no usable checkpoint: %+v; want a replay of every record", s)
	}
	if got := answers(c.match, qs); !reflect.DeepEqual(got, want) {
		t.Fatal("answers after a full replay differ from the oracle's")
	}
	testenv.WaitUntil(t, time.Minute, "a dead letter per rejected checkpoint", func() bool { return len(e.c.PartitionRecords(t, e.dlq, 0)) == 3 })
}

// TestBadRecordsCounted: an undecodable record and events the index refuses are counted and,
// read live, dead-lettered; removals of blocks never stored and events of unknown sources are
// counted; nothing stops the replica.
func TestBadRecordsCounted(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	run := e.start(e.config())
	run.waitReady(t)
	e.produceRaw("1", []byte("not a KV event"))
	g := newTraceGen(2)
	bad := g.ev(ckf.SourceKey{Worker: 3}, producer.StorageTierDevice, producer.KvEventStored)
	bad.Event.Stored.HasParent, bad.Event.Stored.ParentHash = true, 42
	bad.Event.Stored.Blocks = []producer.StoredBlock{{BlockHash: 1, TokensHash: 1}}
	unknown := g.ev(ckf.SourceKey{Worker: 4}, producer.StorageTierDevice, producer.KvEventRemoved)
	unknown.Event.Removed = []ckf.ExternalBlockHash{7}
	store := g.ev(ckf.SourceKey{Worker: 5}, producer.StorageTierDevice, producer.KvEventStored)
	store.Event.Stored.Blocks = []producer.StoredBlock{{BlockHash: 8, TokensHash: 8}}
	notHeld := g.ev(ckf.SourceKey{Worker: 5}, producer.StorageTierDevice, producer.KvEventRemoved)
	notHeld.Event.Removed = []ckf.ExternalBlockHash{9}
	e.produce([]producer.RouterEvent{bad, unknown, store, notHeld})
	run.waitApplied(t, 5)
	s := run.r.Status()
	// The unknown source's removal counts as an unknown source and its id as an unknown removal.
	if s.Undecodable != 1 || s.Rejected != 1 || s.UnknownSources != 1 || s.UnknownRemovals != 2 || s.DeadLetters != 2 {
		t.Fatalf("status %+v; want 1 undecodable, 1 rejected, 1 unknown source, 2 unknown removals, 2 dead letters", s)
	}
	testenv.WaitUntil(t, time.Minute, "two dead letters", func() bool { return len(e.c.PartitionRecords(t, e.dlq, 0)) == 2 })
}

func (e *env) ckptPartition() int32 { return checkpointPartition(testDC, 4) }

func (e *env) produceTo(topic string, p int32, key, value []byte) {
	e.t.Helper()
	cl := e.c.Client(e.t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err := cl.ProduceSync(context.Background(), &kgo.Record{Topic: topic, Partition: p, Key: key, Value: value}).FirstErr(); err != nil {
		e.t.Fatal(err)
	}
}
