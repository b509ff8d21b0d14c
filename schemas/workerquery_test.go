package schemas

import (
	"errors"
	"strings"
	"testing"

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
			BlockExtraKeys: []ckf.ExtraKeys{{ckf.ExtraStringValue("salt-1")}},
		},
		"no-dc": {CorrelationID: "x", Input: InputLocalBlockHashes, Hashes: PackedU64{}, DcIDs: []uint64{}, TopK: MaxWorkerTopK, ReplyPartition: Some[int32](0)},
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
			AgeMillis: Some[int64](12), LagRecords: 3, ReplyTime: testTime(1_780_000_000_000_900),
		},
		"ok-empty":    {CorrelationID: "wq-3", Status: QueryOK, DcID: 2, QueryBlocks: 0, AgeMillis: Some[int64](0), ReplyTime: testTime(3)},
		"unavailable": {CorrelationID: "wq-2", Status: QueryUnavailable, ErrorMessage: "restoring", DcID: 1, QueryBlocks: 4, LagRecords: 1 << 40, ReplyTime: testTime(5)},
		"invalid":     {CorrelationID: "", Status: QueryInvalidRequest, ErrorMessage: "schemas: truncated input", ReplyTime: testTime(6)},
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
