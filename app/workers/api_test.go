package workers

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/ckf/producer"
	ckfworkers "github.com/ckf-stream/ckf-stream/ckf/workers"
	"github.com/ckf-stream/ckf-stream/queryapi"
	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/ckf-stream/ckf-stream/streams/relay"
	streamworkers "github.com/ckf-stream/ckf-stream/streams/workers"
	"github.com/ckf-stream/ckf-stream/testenv"
	"github.com/ckf-stream/ckf-stream/workerapi"
	"github.com/twmb/franz-go/pkg/kgo"
)

const testDC = ckf.DcID(0xdc07)

// store is a one-chain store event of worker w on tier t: blocks local[0..n) as ids base+i.
func store(w ckf.WorkerID, t producer.StorageTier, local []ckf.LocalBlockHash, base uint64) producer.RouterEvent {
	ev := producer.RouterEvent{WorkerID: w, StorageTier: t, Residency: producer.ResidencyWorker, Event: producer.KvCacheEvent{Kind: producer.KvEventStored}}
	for i, l := range local {
		ev.Event.Stored.Blocks = append(ev.Event.Stored.Blocks, producer.StoredBlock{BlockHash: ckf.ExternalBlockHash(base + uint64(i)), TokensHash: l})
	}
	return ev
}

// startReplica runs a replica of testDC on a kfake topic holding evs and waits until it is ready.
func startReplica(t *testing.T, evs []producer.RouterEvent) *streamworkers.Replica {
	t.Helper()
	kvs := make([]schemas.KvEvent, len(evs))
	for i, ev := range evs {
		kvs[i] = relay.KvEventOf(ev)
	}
	return startReplicaOf(t, kvs)
}

// startReplicaOf is startReplica for KV records as written (a stored event's block size, say).
func startReplicaOf(t *testing.T, evs []schemas.KvEvent) *streamworkers.Replica {
	t.Helper()
	c := testenv.FakeCluster(t)
	kv := c.NewTopic(t, 2)
	codec, err := schemas.NewCodec(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	cl := c.Client(t)
	for _, ev := range evs {
		b, err := codec.EncodeKvEvent(ev)
		if err != nil {
			t.Fatal(err)
		}
		if err := cl.ProduceSync(context.Background(), &kgo.Record{Topic: kv, Key: []byte(strconv.FormatUint(ev.WorkerID, 10)), Value: b}).FirstErr(); err != nil {
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
	t.Cleanup(func() { cancel(); <-done })
	select {
	case <-r.WaitReady():
	case err := <-done:
		t.Fatalf("replica stopped: %v", err)
	case <-time.After(time.Minute):
		t.Fatal("replica not ready")
	}
	return r
}

func post(t *testing.T, h http.Handler, ct, url string, body []byte) (*httptest.ResponseRecorder, workerapi.WorkerMatchResponse) {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if ct != "" {
		req.Header.Set("Content-Type", ct)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	var resp workerapi.WorkerMatchResponse
	if rec.Header().Get("Content-Type") == "application/json" {
		if err := json.Unmarshal(rec.Body.Bytes(), &resp); err != nil {
			t.Fatalf("%s: %v", rec.Body.String(), err)
		}
	}
	return rec, resp
}

// TestWorkerMatchesAnswer: the route answers what an index fed the same events answers, in both
// forms, with its DC, the tiers, top k, the DC filter and the replica's age.
func TestWorkerMatchesAnswer(t *testing.T) {
	t.Parallel()
	local := []ckf.LocalBlockHash{11, 12, 13, 14}
	evs := []producer.RouterEvent{
		store(1, producer.StorageTierDevice, local, 100),
		store(2, producer.StorageTierDevice, local[:2], 200),
		store(2, producer.StorageTierHostPinned, local, 200),
		store(3, producer.StorageTierDisk, local[:1], 300),
	}
	r := startReplica(t, evs)
	h := NewAPI(r, nil).MatchHandler()
	oracle := ckfworkers.New()
	for _, ev := range evs {
		_ = oracle.Apply(ev)
	}
	var want ckfworkers.Result
	var chain []ckf.CanonicalHash
	oracle.MatchLocal(local, ckfworkers.Options{}, &want, &chain)

	rec, resp := post(t, h, "", workerapi.Path, []byte(`{"local_block_hashes":[11,12,13,14]}`))
	if rec.Code != 200 || resp.Status != workerapi.StatusOK || resp.DcID != testDC.String() || !resp.DcSelected || resp.QueryBlocks != 4 {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
	if got := workerapi.Matches(resp.Sources); !reflect.DeepEqual(got, want.Matches) {
		t.Fatalf("sources %+v, the index says %+v", got, want.Matches)
	}
	if resp.Sources[1].WorkerID != 2 || resp.Sources[1].Device != 2 || resp.Sources[1].HostPinned != 2 || resp.Age.AgeMs < 0 || resp.Age.LagRecords != 0 {
		t.Fatalf("worker 2's answer or the age: %s", rec.Body)
	}
	_, resp = post(t, h, "application/json", workerapi.Path, []byte(`{"local_block_hashes":[11,12,13,14],"top_k":1}`))
	if len(resp.Sources) != 1 || resp.Sources[0].WorkerID != 1 {
		t.Fatalf("top_k 1: %+v", resp.Sources)
	}
	rec, resp = post(t, h, "", workerapi.Path, []byte(`{"local_block_hashes":[11],"dcs":["dc08"]}`))
	if rec.Code != 200 || resp.DcSelected || len(resp.Sources) != 0 {
		t.Fatalf("another DC selected: %s", rec.Body)
	}
	rec, _ = post(t, h, queryapi.BinaryContentType, workerapi.Path+"?top_k=2", queryapi.AppendBinaryRequest(nil, []uint64{11, 12, 13, 14}))
	bin, err := workerapi.DecodeBinaryReply(rec.Body.Bytes())
	if rec.Code != 200 || err != nil || !reflect.DeepEqual(workerapi.Matches(bin.Sources), want.Matches[:2]) {
		t.Fatalf("binary: %d %v %+v", rec.Code, err, bin)
	}
}

// TestWorkerMatchesRefusals: every bad request is answered with its status and the reason, the
// prefix-match route's rules included; a replica that is not ready answers 503.
func TestWorkerMatchesRefusals(t *testing.T) {
	t.Parallel()
	r := startReplica(t, nil)
	h := NewAPI(r, nil).MatchHandler()
	for _, tc := range []struct {
		ct, url, body string
		code          int
		reason        string
	}{
		{"text/plain", workerapi.Path, `{}`, 415, "unsupported media type"},
		{"", workerapi.Path, `{"local_block_hashes":[1],"token_ids":[1]}`, 400, "not both"},
		{"", workerapi.Path, `{"token_ids":[1]}`, 400, "block_size 0"},
		{"", workerapi.Path, `{"local_block_hashes":[null]}`, 400, "null"},
		{"", workerapi.Path, `{"local_block_hashes":[1],"lane_mask":3}`, 400, "lane_mask"},
		{"", workerapi.Path, `{"local_block_hashes":[1],"top_k":-2}`, 400, "top_k"},
		{"", workerapi.Path, `{"local_block_hashes":[1],"dcs":["zz"]}`, 400, "DC id"},
		{"", workerapi.Path, `{"local_block_hashes":[1],"extra":1}`, 400, "unknown field"},
		{"", workerapi.Path, `not json`, 400, "bad request"},
		{queryapi.BinaryContentType, workerapi.Path, "1234567", 400, "whole number"},
		{queryapi.BinaryContentType, workerapi.Path + "?lane_mask=1", "12345678", 400, "only top_k, dcs and max_age_ms"},
		{"", workerapi.Path, `{"local_block_hashes":[` + strings.Repeat("1,", queryapi.MaxRequestBytes/2) + `1]}`, 413, "exceeds"},
	} {
		rec, resp := post(t, h, tc.ct, tc.url, []byte(tc.body))
		if rec.Code != tc.code || resp.Status != workerapi.StatusInvalidRequest || !strings.Contains(resp.Error, tc.reason) {
			t.Errorf("%.60s: %d %s; want %d saying %q", tc.body, rec.Code, rec.Body.String(), tc.code, tc.reason)
		}
	}
	notReady, err := streamworkers.New(streamworkers.Params{Config: func() streamworkers.Config {
		c := streamworkers.DefaultConfig()
		c.Topics.KVEvents = "kv"
		return c
	}(), Codec: &schemas.Codec{}})
	if err != nil {
		t.Fatal(err)
	}
	rec, resp := post(t, NewAPI(notReady, nil).MatchHandler(), "", workerapi.Path, []byte(`{"local_block_hashes":[1]}`))
	if rec.Code != 503 || resp.Status != workerapi.StatusUnavailable || rec.Header().Get("Retry-After") != "1" {
		t.Fatalf("not ready: %d %s", rec.Code, rec.Body)
	}
}

// TestAnswerKafkaEqualsHTTP: the Kafka form of a request (WorkerQueryRequest) is answered through
// the HTTP route's seam, so it answers what the route answers, field for field once converted back
// (workerapi.FromKafkaReply); a replica that is not ready answers UNAVAILABLE naming its DC.
func TestAnswerKafkaEqualsHTTP(t *testing.T) {
	t.Parallel()
	local := []ckf.LocalBlockHash{11, 12, 13, 14}
	r := startReplica(t, []producer.RouterEvent{
		store(1, producer.StorageTierDevice, local, 100),
		store(2, producer.StorageTierDevice, local[:2], 200),
		store(2, producer.StorageTierDisk, local, 200),
	})
	a := NewAPI(r, nil)
	fixed := time.Now()
	a.now = func() time.Time { return fixed }
	h := a.MatchHandler()
	for _, tc := range []struct {
		json string
		q    schemas.WorkerQueryRequest
	}{
		{`{"correlation_id":"k1","local_block_hashes":[11,12,13,14]}`, schemas.WorkerQueryRequest{CorrelationID: "k1", Input: schemas.InputLocalBlockHashes,
			Hashes: schemas.AppendU64s(nil, []uint64{11, 12, 13, 14})}},
		{`{"correlation_id":"k2","local_block_hashes":[11,12,13,14],"top_k":1,"dcs":["dc07"]}`, schemas.WorkerQueryRequest{CorrelationID: "k2",
			Input: schemas.InputLocalBlockHashes, Hashes: schemas.AppendU64s(nil, []uint64{11, 12, 13, 14}), TopK: 1, DcIDs: []uint64{uint64(testDC)}}},
		{`{"correlation_id":"k3","token_ids":[1,2,3,4,5,6,7,8],"block_size":4}`, schemas.WorkerQueryRequest{CorrelationID: "k3", Input: schemas.InputTokenIDs,
			Tokens: schemas.AppendU32s(nil, []uint32{1, 2, 3, 4, 5, 6, 7, 8}), BlockSize: 4}},
	} {
		_, want := post(t, h, "", workerapi.Path, []byte(tc.json))
		reply := a.AnswerKafka(&tc.q)
		if _, err := (&schemas.Codec{}).EncodeWorkerQueryReply(reply); err != nil {
			t.Fatalf("%s: reply not encodable: %v", tc.q.CorrelationID, err)
		}
		if got := workerapi.FromKafkaReply(&reply); !reflect.DeepEqual(got, want) || !reply.ReplyTime.Equal(fixed) {
			t.Errorf("%s: Kafka %+v, HTTP %+v", tc.q.CorrelationID, got, want)
		}
	}
}

// TestWorkerMatchesBlockSize: the replica reads each source's block size from its stored events;
// a token query of a size no source publishes is refused over HTTP (400) and over Kafka
// (INVALID_REQUEST) with the prefix-match path's sentence naming both sizes, the engines' size
// is answered, a hash query is not judged, and GET /v1/workers shows the size.
func TestWorkerMatchesBlockSize(t *testing.T) {
	t.Parallel()
	tokens := []uint32{1, 2, 3, 4, 5, 6, 7, 8}
	local := ckf.TokenBlockHashes(tokens, 4, ckf.BlockSaltSeed("", ""))
	ev := relay.KvEventOf(store(1, producer.StorageTierDevice, local, 100))
	ev.Stored.BlockSize = 4
	r := startReplicaOf(t, []schemas.KvEvent{ev})
	a := NewAPI(r, nil)
	h := a.MatchHandler()
	const want = "bad request: block_size 8, but the engines of dc 000000000000dc07 publish blocks of 4 tokens"
	rec, resp := post(t, h, "", workerapi.Path, []byte(`{"correlation_id":"b8","token_ids":[1,2,3,4,5,6,7,8],"block_size":8}`))
	if rec.Code != http.StatusBadRequest || resp.Status != workerapi.StatusInvalidRequest || resp.Error != want || resp.DcID != testDC.String() {
		t.Fatalf("HTTP, block_size 8: %d %+v; want 400 saying %q", rec.Code, resp, want)
	}
	reply := a.AnswerKafka(&schemas.WorkerQueryRequest{CorrelationID: "k8", Input: schemas.InputTokenIDs, Tokens: schemas.AppendU32s(nil, tokens), BlockSize: 8})
	if _, err := (&schemas.Codec{}).EncodeWorkerQueryReply(reply); err != nil || reply.Status != schemas.QueryInvalidRequest || reply.ErrorMessage != want {
		t.Fatalf("Kafka, block_size 8: %+v (%v); want INVALID_REQUEST saying %q", reply, err, want)
	}
	rec, resp = post(t, h, "", workerapi.Path, []byte(`{"correlation_id":"b4","token_ids":[1,2,3,4,5,6,7,8],"block_size":4}`))
	if rec.Code != http.StatusOK || len(resp.Sources) != 1 || resp.Sources[0].Device != 2 {
		t.Fatalf("HTTP, block_size 4: %d %+v; want source 1 at depth 2", rec.Code, resp)
	}
	if rec, resp := post(t, h, "", workerapi.Path, []byte(`{"local_block_hashes":[1,2]}`)); rec.Code != http.StatusOK || resp.Status != workerapi.StatusOK {
		t.Fatalf("a hash query: %d %+v", rec.Code, resp)
	}
	srec := httptest.NewRecorder()
	a.StatusHandler().ServeHTTP(srec, httptest.NewRequest(http.MethodGet, "/v1/workers", nil))
	var st StatusJSON
	if err := json.Unmarshal(srec.Body.Bytes(), &st); err != nil || st.BlockSize != 4 || !reflect.DeepEqual(st.BlockSizes, []uint32{4}) ||
		st.BlockSizesBySource != "4: worker 1 rank 0" {
		t.Fatalf("GET /v1/workers: %s (%v)", srec.Body.Bytes(), err)
	}
}
