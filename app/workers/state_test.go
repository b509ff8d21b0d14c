package workers

import (
	"context"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/ckf/producer"
	"github.com/ckf-stream/ckf-stream/queryapi"
	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/ckf-stream/ckf-stream/streams/relay"
	streamworkers "github.com/ckf-stream/ckf-stream/streams/workers"
	"github.com/ckf-stream/ckf-stream/testenv"
	"github.com/ckf-stream/ckf-stream/workerapi"
	"github.com/twmb/franz-go/pkg/kgo"
)

// stateRig is a replica of testDC on a kfake cluster of its own, with that cluster and a way to
// stop the replica's loop (as a replica whose input stalled: it keeps answering from what it
// read).
type stateRig struct {
	c     *testenv.Cluster
	codec *schemas.Codec
	r     *streamworkers.Replica
	stop  func()
}

// newStateRig writes evs (an hour old when hourOld), then, for each of lost, a clear of that
// worker marked as written in place of lost engine history, and starts the replica.
func newStateRig(t *testing.T, evs []producer.RouterEvent, hourOld bool, lost ...ckf.WorkerID) *stateRig {
	t.Helper()
	c := testenv.FakeCluster(t)
	kv := c.NewTopic(t, 2)
	codec, err := schemas.NewCodec(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	cl := c.Client(t)
	var ts time.Time
	if hourOld {
		ts = time.Now().Add(-time.Hour)
	}
	for _, ev := range evs {
		b, err := codec.EncodeKvEvent(relay.KvEventOf(ev))
		if err != nil {
			t.Fatal(err)
		}
		rec := &kgo.Record{Topic: kv, Key: []byte(strconv.FormatUint(uint64(ev.WorkerID), 10)), Value: b, Timestamp: ts}
		if err := cl.ProduceSync(context.Background(), rec).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	for _, w := range lost {
		b, err := codec.EncodeKvEvent(relay.KvEventOf(producer.RouterEvent{WorkerID: w, Residency: producer.ResidencyWorker,
			Event: producer.KvCacheEvent{Kind: producer.KvEventCleared}}))
		if err != nil {
			t.Fatal(err)
		}
		rec := &kgo.Record{Topic: kv, Key: []byte(strconv.FormatUint(uint64(w), 10)), Value: b,
			Headers: []kgo.RecordHeader{{Key: schemas.HeaderLostHistory, Value: make([]byte, 16)}}}
		if err := cl.ProduceSync(context.Background(), rec).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	cfg := streamworkers.DefaultConfig()
	cfg.DC, cfg.Topics.KVEvents, cfg.LagCommitInterval = testDC, kv, 0
	r, err := streamworkers.New(streamworkers.Params{Config: cfg, Codec: codec, ClientOptsFor: func(string) []kgo.Opt { return []kgo.Opt{kgo.SeedBrokers(c.Seeds()...)} }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			cancel()
			<-done
		}
	}
	t.Cleanup(stop)
	select {
	case <-r.WaitReady():
	case err := <-done:
		t.Fatalf("replica stopped: %v", err)
	case <-time.After(time.Minute):
		t.Fatal("replica not ready")
	}
	return &stateRig{c: c, codec: codec, r: r, stop: stop}
}

// TestWorkerMatchesStateAndAge: a DC whose engines last wrote an hour ago and whose replica has
// read its topic to the end answers exact and fresh (its as_of no earlier than the moment it was
// seen caught up), under max_age_ms 60000, over HTTP (JSON and binary) and Kafka (counted from the
// newest event, the age was an hour); the same replica once it stopped reading,
// asked an hour later, answers stale without sources under max_age_ms 60000 (UNAVAILABLE, 503,
// as the prefix-match route answers a lane too old), and exact with its hour-old age without a
// waitCaughtUp waits until the replica waits caught up with its topic and returns a time read
// just before it was seen so: its as_of is no earlier.
func (rig *stateRig) waitCaughtUp(t *testing.T) time.Time {
	t.Helper()
	var caught time.Time
	testenv.WaitUntil(t, time.Minute, "the replica caught up and waiting", func() bool {
		caught = time.Now()
		return rig.r.Status().CaughtUpNow
	})
	return caught
}

// bound.
func TestWorkerMatchesStateAndAge(t *testing.T) {
	t.Parallel()
	local := []ckf.LocalBlockHash{11, 12, 13, 14}
	rig := newStateRig(t, []producer.RouterEvent{store(1, producer.StorageTierDevice, local, 100)}, true)
	caught := rig.waitCaughtUp(t)
	a := NewAPI(rig.r, nil)
	h := a.MatchHandler()
	// fresh: the age at the reply is no more than the time since the replica was seen caught up.
	fresh := func(age int64, reply time.Time) bool { return age >= 0 && age <= reply.Sub(caught).Milliseconds() }

	rec, resp := post(t, h, "", workerapi.Path, []byte(`{"local_block_hashes":[11,12,13,14],"max_age_ms":60000}`))
	if rec.Code != 200 || resp.Status != workerapi.StatusOK || resp.State != workerapi.StateExact || !fresh(resp.Age.AgeMs, resp.ReplyTime) ||
		len(resp.Sources) != 1 || !strings.Contains(rec.Body.String(), `"state":"exact"`) {
		t.Fatalf("idle DC under max_age_ms 60000: %d %s", rec.Code, rec.Body)
	}
	rec, _ = post(t, h, queryapi.BinaryContentType, workerapi.Path+"?max_age_ms=60000", queryapi.AppendBinaryRequest(nil, []uint64{11, 12, 13, 14}))
	if bin, err := workerapi.DecodeBinaryReply(rec.Body.Bytes()); rec.Code != 200 || err != nil || bin.State != workerapi.StateExact || !fresh(bin.Age.AgeMs, time.Now()) {
		t.Fatalf("binary, idle DC under max_age_ms 60000: %d %v %+v", rec.Code, err, bin)
	}
	q := schemas.WorkerQueryRequest{CorrelationID: "k0", Input: schemas.InputLocalBlockHashes, Hashes: schemas.AppendU64s(nil, []uint64{11, 12, 13, 14}),
		MaxAgeMillis: schemas.Some[int64](60000)}
	if reply := a.AnswerKafka(&q); reply.Status != schemas.QueryOK || reply.State != schemas.LaneExact || !fresh(reply.AgeMillis.Value, reply.ReplyTime) || len(reply.Sources) != 1 {
		t.Fatalf("Kafka, idle DC under max_age_ms 60000: %+v", reply)
	}

	rig.stop()
	hourLater := time.Now().Add(time.Hour)
	a.now = func() time.Time { return hourLater }
	rec, resp = post(t, h, "", workerapi.Path, []byte(`{"local_block_hashes":[11,12,13,14],"max_age_ms":60000}`))
	if rec.Code != 503 || rec.Header().Get("Retry-After") != "1" || resp.Status != workerapi.StatusUnavailable || resp.State != workerapi.StateStale ||
		len(resp.Sources) != 0 || resp.Age.AgeMs < time.Hour.Milliseconds() || !strings.Contains(resp.Error, "older than max_age_ms 60000") {
		t.Fatalf("lagging DC under max_age_ms 60000: %d %s", rec.Code, rec.Body)
	}
	rec, resp = post(t, h, queryapi.BinaryContentType, workerapi.Path+"?max_age_ms=60000", queryapi.AppendBinaryRequest(nil, []uint64{11, 12, 13, 14}))
	if rec.Code != 503 || resp.State != workerapi.StateStale {
		t.Fatalf("binary, lagging DC: %d %s", rec.Code, rec.Body)
	}
	rec, resp = post(t, h, "", workerapi.Path, []byte(`{"local_block_hashes":[11,12,13,14]}`))
	if rec.Code != 200 || resp.State != workerapi.StateExact || len(resp.Sources) != 1 || resp.Age.AgeMs < time.Hour.Milliseconds() {
		t.Fatalf("lagging DC without a bound: %d %s", rec.Code, rec.Body)
	}
	q.CorrelationID, q.MaxAgeMillis = "k1", schemas.Some[int64](60000)
	_, want := post(t, h, "", workerapi.Path, []byte(`{"correlation_id":"k1","local_block_hashes":[11,12,13,14],"max_age_ms":60000}`))
	reply := a.AnswerKafka(&q)
	if reply.Status != schemas.QueryUnavailable || reply.State != schemas.LaneStale || len(reply.Sources) != 0 {
		t.Fatalf("Kafka, lagging DC: %+v", reply)
	}
	if _, err := rig.codec.EncodeWorkerQueryReply(reply); err != nil {
		t.Fatalf("stale reply not encodable: %v", err)
	}
	if got := workerapi.FromKafkaReply(&reply); !reflect.DeepEqual(got, want) {
		t.Fatalf("Kafka %+v, HTTP %+v", got, want)
	}
}

// TestWorkerQueryStateOverKafka: a router's QueryClient asks the worker stage through the real
// query service (kfake): the request's max_age_ms reaches the replica and the reply's state and
// age come back through the codec: exact and fresh (no older than the moment it was seen caught
// up, where the newest event is an hour old) from a replica caught up with a silent topic,
// stale without sources from the same replica asked an hour later once it stopped reading.
func TestWorkerQueryStateOverKafka(t *testing.T) {
	t.Parallel()
	local := []ckf.LocalBlockHash{11, 12, 13, 14}
	rig := newStateRig(t, []producer.RouterEvent{store(1, producer.StorageTierDevice, local, 100)}, true)
	caught := rig.waitCaughtUp(t)
	a := NewAPI(rig.r, nil)
	var shift atomic.Int64 // the API's clock ahead of the wall clock, read by the service's goroutines
	a.now = func() time.Time { return time.Now().Add(time.Duration(shift.Load())) }
	reqTopic, replyTopic := rig.c.NewTopic(t, 1), rig.c.NewTopic(t, 1)
	opts := []kgo.Opt{kgo.SeedBrokers(rig.c.Seeds()...)}
	qcfg := streamworkers.DefaultQueryConfig(testDC, rig.codec)
	qcfg.RequestTopic, qcfg.ReplyTopic, qcfg.DeadLetterTopic = reqTopic, replyTopic, ""
	svc, err := streamworkers.NewQueryService(streamworkers.QueryServiceParams{DC: testDC, Config: qcfg, Answer: a.AnswerKafka, Codec: rig.codec, ClientOpts: opts})
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Close(context.Background()) })
	ccfg := streamworkers.DefaultQueryClientConfig(rig.codec)
	ccfg.RequestTopic, ccfg.ReplyTopic, ccfg.CallTimeout = reqTopic, replyTopic, time.Minute
	client, err := streamworkers.NewQueryClient(context.Background(), streamworkers.QueryClientParams{Config: ccfg, Codec: rig.codec, ClientOpts: opts})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.Close)
	ask := func(maxAge int64) schemas.WorkerQueryReply {
		t.Helper()
		replies, err := client.Ask(context.Background(), schemas.WorkerQueryRequest{Input: schemas.InputLocalBlockHashes,
			Hashes: schemas.AppendU64s(nil, []uint64{11, 12, 13, 14}), MaxAgeMillis: schemas.Some(maxAge)}, 1)
		if err != nil || len(replies) != 1 {
			t.Fatalf("ask: %v %+v", err, replies)
		}
		return replies[0]
	}
	if r := ask(60000); r.Status != schemas.QueryOK || r.State != schemas.LaneExact || !r.AgeMillis.Valid || r.AgeMillis.Value > r.ReplyTime.Sub(caught).Milliseconds() || len(r.Sources) != 1 {
		t.Fatalf("caught-up replica under max_age_ms 60000: %+v (seen caught up at %v)", r, caught)
	}
	rig.stop()
	shift.Store(int64(time.Hour))
	r := ask(60000)
	if r.Status != schemas.QueryUnavailable || r.State != schemas.LaneStale || len(r.Sources) != 0 || r.AgeMillis.Value < time.Hour.Milliseconds() ||
		!strings.Contains(r.ErrorMessage, "older than max_age_ms 60000") {
		t.Fatalf("stopped replica asked an hour later under max_age_ms 60000: %+v", r)
	}
}

// TestWorkerMatchesIncomplete: while a source of the DC is degraded by lost engine history, every
// answer says incomplete (its depths may be short: the engine may hold blocks the index no longer
// credits it with): JSON, the binary reply's flag, and the Kafka reply.
func TestWorkerMatchesIncomplete(t *testing.T) {
	t.Parallel()
	local := []ckf.LocalBlockHash{11, 12, 13, 14}
	rig := newStateRig(t, []producer.RouterEvent{store(1, producer.StorageTierDevice, local, 100), store(2, producer.StorageTierDevice, local, 200)}, false, 2)
	a := NewAPI(rig.r, nil)
	h := a.MatchHandler()
	rec, resp := post(t, h, "", workerapi.Path, []byte(`{"local_block_hashes":[11,12,13,14]}`))
	if rec.Code != 200 || resp.State != workerapi.StateIncomplete || len(resp.Sources) != 1 || resp.Sources[0].WorkerID != 1 {
		t.Fatalf("worker 2 lost its history: %d %s", rec.Code, rec.Body)
	}
	rec, _ = post(t, h, queryapi.BinaryContentType, workerapi.Path, queryapi.AppendBinaryRequest(nil, []uint64{11, 12, 13, 14}))
	if bin, err := workerapi.DecodeBinaryReply(rec.Body.Bytes()); err != nil || bin.State != workerapi.StateIncomplete {
		t.Fatalf("binary: %v %+v", err, bin)
	}
	q := schemas.WorkerQueryRequest{CorrelationID: "k", Input: schemas.InputLocalBlockHashes, Hashes: schemas.AppendU64s(nil, []uint64{11, 12, 13, 14})}
	if reply := a.AnswerKafka(&q); reply.State != schemas.LaneIncomplete || reply.Status != schemas.QueryOK {
		t.Fatalf("Kafka: %+v", reply)
	}
	status := httptest.NewRecorder()
	a.StatusHandler().ServeHTTP(status, httptest.NewRequest(http.MethodGet, workerapi.StatusPath, nil))
	if !strings.Contains(status.Body.String(), `"degraded_sources":1`) {
		t.Fatalf("status: %s", status.Body)
	}
}
