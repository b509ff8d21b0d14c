package schemas

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/linkedin/goavro/v2"
	"github.com/twmb/franz-go/pkg/sr"

	"github.com/ckf-stream/ckf-stream/ckf"
)

func testWorkerQueryRequests() map[string]WorkerQueryRequest {
	return map[string]WorkerQueryRequest{
		"hashes": {
			CorrelationID: "wq-1", Input: InputLocalBlockHashes,
			Hashes: AppendU64s(nil, []uint64{0x0123456789ABCDEF, 0xDEADBEEFCAFEBABE}),
		},
		"tokens-full": {
			CorrelationID: "wq-2 ✓", Input: InputTokenIDs,
			Tokens: AppendU32s(nil, []uint32{1, 2, 3, 4, 5, 0xFFFFFFFF}), BlockSize: 64,
			LoraName: "adapter-a", CacheNamespace: "tenant-7", DcIDs: []uint64{1, 1<<64 - 1}, TopK: 3,
			ReplyTopic: "router-3-worker-replies", ReplyPartition: Some[int32](3), RequestTime: testTime(1_780_000_000_000_001),
			BlockExtraKeys: []ckf.ExtraKeys{{ckf.ExtraStringValue("salt-1")}}, MaxAgeMillis: Some[int64](250),
		},
		"max-age-0": {CorrelationID: "wq-4", Input: InputLocalBlockHashes, Hashes: PackedU64{}, MaxAgeMillis: Some[int64](0)},
		"no-dc":     {CorrelationID: "x", Input: InputLocalBlockHashes, Hashes: PackedU64{}, DcIDs: []uint64{}, TopK: MaxWorkerTopK, ReplyPartition: Some[int32](0)},
	}
}

func testWorkerQueryReplies() map[string]WorkerQueryReply {
	return map[string]WorkerQueryReply{
		"ok": {
			CorrelationID: "wq-1", Status: QueryOK, DcID: 1<<64 - 3, QueryBlocks: 12,
			Sources: []WorkerSource{
				{WorkerID: 1<<64 - 1, DpRank: 1<<32 - 1, Device: 12},
				{WorkerID: 7, DpRank: 2, Device: 4, HostPinned: 3, Disk: 2, External: 1},
			},
			AgeMillis: Some[int64](12), LagRecords: 3, ReplyTime: testTime(1_780_000_000_000_900), State: LaneExact,
		},
		"ok-empty":    {CorrelationID: "wq-3", Status: QueryOK, DcID: 2, QueryBlocks: 0, AgeMillis: Some[int64](0), ReplyTime: testTime(3), State: LaneExact},
		"unavailable": {CorrelationID: "wq-2", Status: QueryUnavailable, ErrorMessage: "restoring", DcID: 1, QueryBlocks: 4, LagRecords: 1 << 40, ReplyTime: testTime(5), State: LaneUnavailable},
		"stale": {CorrelationID: "wq-5", Status: QueryUnavailable, ErrorMessage: "the DC is older than max_age_ms", DcID: 1, QueryBlocks: 4,
			AgeMillis: Some[int64](9_000), LagRecords: 70, ReplyTime: testTime(7), State: LaneStale},
		"invalid": {CorrelationID: "", Status: QueryInvalidRequest, ErrorMessage: "schemas: truncated input", ReplyTime: testTime(6)},
	}
}

func TestRoundTripWorkerQueryRequest(t *testing.T) {
	for name, q := range testWorkerQueryRequests() {
		roundTrip(t, name, q, (*Codec).EncodeWorkerQueryRequest, (*Codec).DecodeWorkerQueryRequest)
	}
}

func TestRoundTripWorkerQueryReply(t *testing.T) {
	for name, r := range testWorkerQueryReplies() {
		roundTrip(t, name, r, (*Codec).EncodeWorkerQueryReply, (*Codec).DecodeWorkerQueryReply)
	}
}

// TestWorkerQueryRules: the encoder refuses what the decoder would, naming the field.
func TestWorkerQueryRules(t *testing.T) {
	c := newTestCodec(t)
	reqs := map[string]struct {
		q     WorkerQueryRequest
		field string
	}{
		"top_k":      {WorkerQueryRequest{CorrelationID: "a", Input: InputLocalBlockHashes, TopK: MaxWorkerTopK + 1}, "top_k"},
		"block_size": {WorkerQueryRequest{CorrelationID: "a", Input: InputTokenIDs, BlockSize: 0}, "input.block_size"},
		"id":         {WorkerQueryRequest{Input: InputLocalBlockHashes}, "correlation_id"},
		"partition":  {WorkerQueryRequest{CorrelationID: "a", Input: InputLocalBlockHashes, ReplyPartition: Some[int32](-1)}, "reply_partition"},
		"max_age_ms": {WorkerQueryRequest{CorrelationID: "a", Input: InputLocalBlockHashes, MaxAgeMillis: Some[int64](-1)}, "max_age_ms"},
	}
	for name, tc := range reqs {
		_, err := c.EncodeWorkerQueryRequest(tc.q)
		var ee *EncodeError
		if !errors.As(err, &ee) || ee.Field != tc.field {
			t.Errorf("%s: %v, want an invalid %s", name, err, tc.field)
		}
	}
	reps := map[string]struct {
		r     WorkerQueryReply
		field string
	}{
		"deep":     {WorkerQueryReply{Status: QueryOK, QueryBlocks: 3, Sources: []WorkerSource{{Device: 2, Disk: 2}}}, "sources"},
		"sources":  {WorkerQueryReply{Status: QueryUnavailable, QueryBlocks: 3, Sources: []WorkerSource{{Device: 1}}}, "sources"},
		"age":      {WorkerQueryReply{AgeMillis: Some[int64](-1)}, "age_ms"},
		"lag":      {WorkerQueryReply{LagRecords: -1}, "lag_records"},
		"status":   {WorkerQueryReply{Status: 3}, "status"},
		"state":    {WorkerQueryReply{Status: QueryUnavailable, State: LaneUnavailable + 1}, "state"},
		"ok stale": {WorkerQueryReply{Status: QueryOK, State: LaneStale}, "state"},
		"ok unav":  {WorkerQueryReply{Status: QueryOK, State: LaneUnavailable}, "state"},
		"too long": {WorkerQueryReply{CorrelationID: strings.Repeat("x", MaxCorrelationIDBytes+1)}, "correlation_id"},
	}
	for name, tc := range reps {
		_, err := c.EncodeWorkerQueryReply(tc.r)
		var ee *EncodeError
		if !errors.As(err, &ee) || ee.Field != tc.field {
			t.Errorf("%s: %v, want an invalid %s", name, err, tc.field)
		}
	}
}

// TestWorkerQueryRoute: a request that breaks a contract rule still yields its reply address;
// a body that is not valid Avro, another record type and an unusable id yield none.
func TestWorkerQueryRoute(t *testing.T) {
	c := newTestCodec(t)
	full := testWorkerQueryRequests()["tokens-full"]
	native := workerQueryRequestNative(&full)
	native["input"] = union(nsName("TokenIds"), map[string]any{"tokens": []byte{1, 2, 3}, "block_size": int32(0), "lora_name": nil, "cache_namespace": nil})
	bad, err := builtins[TypeWorkerQueryRequest].codec.BinaryFromNative(AppendHeader(nil, c.SchemaID(TypeWorkerQueryRequest)), native)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.DecodeWorkerQueryRequest(bad); !errors.Is(err, ErrInvalidField) {
		t.Fatalf("decode of a bad block size: %v, want ErrInvalidField", err)
	}
	rt, ok := c.WorkerQueryRoute(bad)
	want := QueryRoute{CorrelationID: full.CorrelationID, ReplyTopic: full.ReplyTopic, ReplyPartition: full.ReplyPartition}
	if !ok || rt != want {
		t.Fatalf("route %+v %v, want %+v", rt, ok, want)
	}
	long := full
	long.CorrelationID = strings.Repeat("é", MaxCorrelationIDBytes)
	native = workerQueryRequestNative(&long)
	b, _ := builtins[TypeWorkerQueryRequest].codec.BinaryFromNative(AppendHeader(nil, c.SchemaID(TypeWorkerQueryRequest)), native)
	if rt, ok := c.WorkerQueryRoute(b); !ok || !rt.IDTruncated || len(rt.CorrelationID) != MaxCorrelationIDBytes {
		t.Fatalf("long id: %+v %v", rt, ok)
	}
	query, err := c.EncodeQueryRequest(testQueryRequests()["hashes"])
	if err != nil {
		t.Fatal(err)
	}
	for name, frame := range map[string][]byte{
		"truncated": bad[:len(bad)-2],
		"query":     query,
		"empty":     nil,
	} {
		if rt, ok := c.WorkerQueryRoute(frame); ok {
			t.Errorf("%s: route %+v, want none", name, rt)
		}
	}
}

func FuzzDecodeWorkerQueryRequest(f *testing.F) {
	fuzzDecoder(f, TypeWorkerQueryRequest, testWorkerQueryRequests(), (*Codec).EncodeWorkerQueryRequest, (*Codec).DecodeWorkerQueryRequest,
		func(t *testing.T, c *Codec, data []byte, _ WorkerQueryRequest, err error) {
			// Every request the decoder accepts has a route, and the route agrees with it.
			if err == nil {
				if _, ok := c.WorkerQueryRoute(data); !ok {
					t.Fatal("a decodable request has no route")
				}
			}
		})
}

func FuzzDecodeWorkerQueryReply(f *testing.F) {
	fuzzDecoder(f, TypeWorkerQueryReply, testWorkerQueryReplies(), (*Codec).EncodeWorkerQueryReply, (*Codec).DecodeWorkerQueryReply, nil)
}

// TestWorkerReplyOfMostSourcesFitsAMessage: a reply of MaxWorkerReplySources sources with the
// longest correlation id and an error-free status fits Kafka's default max.message.bytes
// (1,048,588) with room for the key and the batch framing.
func TestWorkerReplyOfMostSourcesFitsAMessage(t *testing.T) {
	r := WorkerQueryReply{CorrelationID: strings.Repeat("x", MaxCorrelationIDBytes), Status: QueryOK, DcID: 1<<64 - 1, QueryBlocks: 1 << 20,
		Sources: make([]WorkerSource, MaxWorkerReplySources), AgeMillis: Some[int64](1 << 40), LagRecords: 1 << 40, ReplyTime: testTime(1_780_000_000_000_000)}
	for i := range r.Sources {
		r.Sources[i] = WorkerSource{WorkerID: 1<<64 - 1 - uint64(i), DpRank: 1<<32 - 1, Device: 1 << 20}
	}
	b, err := newTestCodec(t).EncodeWorkerQueryReply(r)
	if err != nil {
		t.Fatal(err)
	}
	if limit := 1_048_588 - 2*MaxCorrelationIDBytes - 1024; len(b) > limit {
		t.Fatalf("%d bytes, over %d", len(b), limit)
	}
}

// TestWorkerQueryRegistryOlderWriters: through a registry, request and reply bodies of a writer
// of the revision before the appended fields (registered under their own ids) are read with the
// fields absent: max_age_ms null, state UNKNOWN; the current writer gets an id of its own.
func TestWorkerQueryRegistryOlderWriters(t *testing.T) {
	reg := newRegistry(t)
	reader := newTestCodec(t, RegistryURLs(reg.URL()))
	older := func(rt RecordType, drop ...string) (*goavro.Codec, int) {
		t.Helper()
		text := mutate(t, rt, func(top map[string]any) {
			fields := top["fields"].([]any)
			for i := len(drop) - 1; i >= 0; i-- {
				if last := fields[len(fields)-1].(map[string]any); last["name"] != drop[i] {
					t.Fatalf("%s: last field is %v, want %s", rt, last["name"], drop[i])
				}
				fields = fields[:len(fields)-1]
			}
			top["fields"] = fields
		})
		id, _, err := reg.RegisterSchema(reader.Subject(rt), sr.Schema{Schema: text, Type: sr.TypeAvro})
		if err != nil {
			t.Fatal(err)
		}
		if id == reader.SchemaID(rt) {
			t.Fatalf("%s: the older revision got the current writer's id %d", rt, id)
		}
		wc, err := goavro.NewCodec(text)
		if err != nil {
			t.Fatal(err)
		}
		return wc, id
	}

	qc, qid := older(TypeWorkerQueryRequest, "block_extra_keys", "max_age_ms")
	q := testWorkerQueryRequests()["tokens-full"]
	qn := workerQueryRequestNative(&q)
	delete(qn, "block_extra_keys")
	delete(qn, "max_age_ms")
	b, err := qc.BinaryFromNative(AppendHeader(nil, qid), qn)
	if err != nil {
		t.Fatal(err)
	}
	gotQ, err := reader.DecodeWorkerQueryRequest(b)
	q.BlockExtraKeys, q.MaxAgeMillis = nil, Optional[int64]{}
	if err != nil || !reflect.DeepEqual(gotQ, q) {
		t.Fatalf("older request: %v\n got  %+v\n want %+v", err, gotQ, q)
	}

	rc, rid := older(TypeWorkerQueryReply, "state")
	r := testWorkerQueryReplies()["ok"]
	rn := workerQueryReplyNative(&r)
	delete(rn, "state")
	b, err = rc.BinaryFromNative(AppendHeader(nil, rid), rn)
	if err != nil {
		t.Fatal(err)
	}
	gotR, err := reader.DecodeWorkerQueryReply(b)
	r.State = LaneStateUnknown
	if err != nil || !reflect.DeepEqual(gotR, r) {
		t.Fatalf("older reply: %v\n got  %+v\n want %+v", err, gotR, r)
	}
	cur, err := reader.EncodeWorkerQueryReply(testWorkerQueryReplies()["stale"])
	if err != nil {
		t.Fatal(err)
	}
	if id, _, _ := ParseHeader(cur); id == rid {
		t.Fatalf("the current writer reused the older schema's id %d", id)
	}
	if got, err := reader.DecodeWorkerQueryReply(cur); err != nil || got.State != LaneStale {
		t.Fatalf("current reply through the registry: %+v, %v", got, err)
	}
}

// TestWorkerQueryAppendedFieldsHaveDefaults: every field appended to the worker query schemas
// has a default of its own (an enum's default symbol is not one), so that a registry under
// BACKWARD or FULL compatibility accepts the revision after the one before it: a reader of this
// revision resolves a body of the previous one by the defaults.
func TestWorkerQueryAppendedFieldsHaveDefaults(t *testing.T) {
	for _, rt := range []RecordType{TypeWorkerQueryRequest, TypeWorkerQueryReply} {
		var top struct {
			Fields []map[string]any `json:"fields"`
		}
		if err := json.Unmarshal([]byte(rt.Schema()), &top); err != nil {
			t.Fatal(err)
		}
		for _, name := range appendedFields[rt] {
			found := false
			for _, f := range top.Fields {
				if f["name"] == name {
					found = true
					if _, ok := f["default"]; !ok {
						t.Errorf("%s.%s has no default", rt, name)
					}
				}
			}
			if !found {
				t.Errorf("%s: appended field %s not in the schema", rt, name)
			}
		}
	}
}
