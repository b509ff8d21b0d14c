package schemas

import (
	"bytes"
	"reflect"
	"testing"
)

// roundTrip encodes v with both the default codec and the goavro-only codec,
// checks both produce identical bytes and decode back to v with either
// codec.
func roundTrip[T any](t *testing.T, name string, v T, enc func(*Codec, T) ([]byte, error), dec func(*Codec, []byte) (T, error)) {
	t.Helper()
	fast, slow := newTestCodec(t), newTestCodec(t, disableFastPath())
	b1, err := enc(fast, v)
	if err != nil {
		t.Fatalf("%s: encode: %v", name, err)
	}
	b2, err := enc(slow, v)
	if err != nil {
		t.Fatalf("%s: goavro encode: %v", name, err)
	}
	if !bytes.Equal(b1, b2) {
		t.Fatalf("%s: encodings differ:\n fast %x\n avro %x", name, b1, b2)
	}
	for _, c := range []*Codec{fast, slow} {
		got, err := dec(c, b1)
		if err != nil {
			t.Fatalf("%s: decode: %v", name, err)
		}
		if !reflect.DeepEqual(got, v) {
			t.Fatalf("%s: round trip changed the record:\n got  %+v\n want %+v", name, got, v)
		}
	}
}

func TestRoundTripLaneRecord(t *testing.T) {
	for name, rec := range testLaneRecords() {
		roundTrip(t, name, rec, (*Codec).EncodeLaneRecord, (*Codec).DecodeLaneRecord)
	}
}

func TestRoundTripQueryRequest(t *testing.T) {
	for name, q := range testQueryRequests() {
		roundTrip(t, name, q, (*Codec).EncodeQueryRequest, (*Codec).DecodeQueryRequest)
	}
}

func TestRoundTripQueryReply(t *testing.T) {
	for name, r := range testQueryReplies() {
		roundTrip(t, name, r, (*Codec).EncodeQueryReply, (*Codec).DecodeQueryReply)
	}
}

func TestRoundTripLaneEvent(t *testing.T) {
	for name, e := range testLaneEvents() {
		roundTrip(t, name, e, (*Codec).EncodeLaneEvent, (*Codec).DecodeLaneEvent)
	}
}

func TestRoundTripControlRecord(t *testing.T) {
	for name, r := range testControlRecords() {
		roundTrip(t, name, r, (*Codec).EncodeControlRecord, (*Codec).DecodeControlRecord)
	}
}

func TestRoundTripDeadLetter(t *testing.T) {
	for name, d := range testDeadLetters() {
		roundTrip(t, name, d, (*Codec).EncodeDeadLetter, (*Codec).DecodeDeadLetter)
	}
}

func TestRoundTripKvEvent(t *testing.T) {
	for name, e := range testKvEvents() {
		roundTrip(t, name, e, (*Codec).EncodeKvEvent, (*Codec).DecodeKvEvent)
	}
}

// The hand-written lane codec must agree with goavro on the embedded schema
// in both directions, including the union branch order and u64 values above
// 2^63.
func TestLaneRecordMatchesGoavro(t *testing.T) {
	for name, rec := range testLaneRecords() {
		body := appendLaneRecordBody(nil, &rec)
		want, err := builtins[TypeLaneRecord].codec.BinaryFromNative(nil, laneRecordNative(&rec))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !bytes.Equal(body, want) {
			t.Fatalf("%s: fast body differs from goavro:\n fast %x\n avro %x", name, body, want)
		}
		got, err := decodeLaneRecordBody(want)
		if err != nil || !reflect.DeepEqual(got, rec) {
			t.Fatalf("%s: fast decode of goavro bytes: %v\n got  %+v\n want %+v", name, err, got, rec)
		}
	}
}

func TestQueryCodecsMatchGoavro(t *testing.T) {
	for name, q := range testQueryRequests() {
		want, err := builtins[TypeQueryRequest].codec.BinaryFromNative(nil, queryRequestNative(&q))
		if err != nil {
			t.Fatal(err)
		}
		if got := appendQueryRequestBody(nil, &q); !bytes.Equal(got, want) {
			t.Fatalf("%s: request bodies differ:\n fast %x\n avro %x", name, got, want)
		}
		if got, err := decodeQueryRequestBody(want); err != nil || !reflect.DeepEqual(got, q) {
			t.Fatalf("%s: fast decode of goavro bytes: %v", name, err)
		}
	}
	for name, r := range testQueryReplies() {
		want, err := builtins[TypeQueryReply].codec.BinaryFromNative(nil, queryReplyNative(&r))
		if err != nil {
			t.Fatal(err)
		}
		if got := appendQueryReplyBody(nil, &r); !bytes.Equal(got, want) {
			t.Fatalf("%s: reply bodies differ:\n fast %x\n avro %x", name, got, want)
		}
		if got, err := decodeQueryReplyBody(want); err != nil || !reflect.DeepEqual(got, r) {
			t.Fatalf("%s: fast decode of goavro bytes: %v", name, err)
		}
	}
}

func TestKvCodecMatchesGoavro(t *testing.T) {
	for name, e := range testKvEvents() {
		want, err := builtins[TypeKvEvent].codec.BinaryFromNative(nil, kvEventNative(&e))
		if err != nil {
			t.Fatal(err)
		}
		if got := appendKvEventBody(nil, &e); !bytes.Equal(got, want) {
			t.Fatalf("%s: bodies differ:\n fast %x\n avro %x", name, got, want)
		}
		if got, err := decodeKvEventBody(want); err != nil || !reflect.DeepEqual(got, e) {
			t.Fatalf("%s: fast decode of goavro bytes: %v", name, err)
		}
	}
}

func TestDecodeLaneRecordAliasesInput(t *testing.T) {
	c := newTestCodec(t)
	b, err := c.EncodeLaneRecord(testDelta(4))
	if err != nil {
		t.Fatal(err)
	}
	rec, err := c.DecodeLaneRecord(b)
	if err != nil {
		t.Fatal(err)
	}
	if &rec.Delta.Images[0] != &b[len(b)-laneTrailerNulls-len(rec.Delta.Images)] { // the images, then the nulls of the appended fields
		t.Fatal("images were copied; the lane path relies on aliasing")
	}
	allocs := testing.AllocsPerRun(100, func() { _, _ = c.DecodeLaneRecord(b) })
	if allocs != 0 {
		t.Fatalf("DecodeLaneRecord allocates %v times per delta, want 0", allocs)
	}
}

func TestAppendReusesBuffer(t *testing.T) {
	c := newTestCodec(t)
	rec := testDelta(64)
	buf := make([]byte, 0, 4096)
	allocs := testing.AllocsPerRun(100, func() {
		out, err := c.AppendLaneRecord(buf[:0], rec)
		if err != nil || &out[0] != &buf[:1][0] {
			t.Fatal("AppendLaneRecord did not reuse dst")
		}
	})
	if allocs != 0 {
		t.Fatalf("AppendLaneRecord allocates %v times with a large enough dst, want 0", allocs)
	}
}

func TestPackedHelpers(t *testing.T) {
	words := []uint64{0, 1, 1<<64 - 1, 0x0102030405060708}
	p := AppendU64s(nil, words)
	if len(p) != 32 || p[24] != 0x08 || p[31] != 0x01 {
		t.Fatalf("not little-endian: %x", p)
	}
	got, err := UnpackU64s(make([]uint64, 0, 4), p)
	if err != nil || !reflect.DeepEqual(got, words) {
		t.Fatalf("UnpackU64s = %v, %v", got, err)
	}
	if PackedU64(p).At(2) != 1<<64-1 || PackedU64(p).Len() != 4 {
		t.Fatal("PackedU64 accessors")
	}
	imgs := []BucketImage{{Bucket: 3, Value: 9}, {Bucket: 1<<40 - 1, Value: 1<<64 - 1}}
	pi := AppendImages(nil, imgs)
	if !bytes.Equal(pi, AppendImage(AppendImage(nil, 3, 9), 1<<40-1, 1<<64-1)) {
		t.Fatal("AppendImages and AppendImage disagree")
	}
	gi, err := UnpackImages(nil, pi)
	if err != nil || !reflect.DeepEqual(gi, imgs) || PackedImages(pi).At(1) != imgs[1] {
		t.Fatalf("UnpackImages = %v, %v", gi, err)
	}
	toks := []uint32{7, 1<<32 - 1}
	gt, err := UnpackU32s(nil, AppendU32s(nil, toks))
	if err != nil || !reflect.DeepEqual(gt, toks) {
		t.Fatalf("UnpackU32s = %v, %v", gt, err)
	}
	dst := make([]uint64, 0, 8)
	allocs := testing.AllocsPerRun(100, func() { dst, _ = UnpackU64s(dst[:0], p) })
	if allocs != 0 {
		t.Fatalf("UnpackU64s into a large enough dst allocates %v times", allocs)
	}
}

func TestPoolIDString(t *testing.T) {
	p := PoolID{DcID: 0xAB}
	p.Domain.CacheSemantics.Digest[0] = 0x01
	want := "01000000000000000000000000000000:00000000000000000000000000000000/00000000000000ab"
	if got := p.String(); got != want {
		t.Fatalf("PoolID.String() = %q, want %q", got, want)
	}
}

func TestMaxSnapshotChunkWords(t *testing.T) {
	c := newTestCodec(t)
	budget := 1<<20 - 4096
	n := MaxSnapshotChunkWords(budget)
	rec := testSnapshot(n)
	// Worst case for every varint: huge sequence and bucket numbers.
	rec.Snapshot.Sequence = 1<<64 - 1
	rec.Identity.Incarnation, rec.Identity.Pool.DcID, rec.Identity.Format.Seed = 1<<63, 1<<63, 1<<63
	rec.Identity.Format.BucketCount = MaxBucketCount
	rec.Snapshot.TotalBuckets, rec.Snapshot.FirstBucket = MaxBucketCount, MaxBucketCount-uint64(n)
	b, err := c.EncodeLaneRecord(rec)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > budget {
		t.Fatalf("%d words encode to %d bytes, over the %d budget", n, len(b), budget)
	}
}

// Avro lets a writer split an array into blocks and announce a block's byte
// size with a negative count (Java's blocking encoder does); both decoders
// must accept it.
func TestDecodeBlockedArrays(t *testing.T) {
	r := testQueryReplies()["ok"]
	var b []byte
	b = appendString(b, r.CorrelationID)
	b = appendLong(b, 0)
	b = append(b, 0)
	b = appendLong(b, int64(r.ReadyLanes))
	b = appendLong(b, int64(r.QueryBlocks))
	for _, m := range r.Lanes {
		var item []byte
		item = appendLong(item, int64(m.Lane))
		item = appendU64(item, m.DcID)
		item = appendString(item, m.Pool)
		item = appendLong(item, int64(m.Depth))
		b = appendLong(b, -1)
		b = appendLong(b, int64(len(item)))
		b = append(b, item...)
	}
	b = append(b, 0)
	b = appendLong(b, r.ReplyTime.UnixMicro())
	for _, c := range []*Codec{newTestCodec(t), newTestCodec(t, disableFastPath())} {
		got, err := c.DecodeQueryReply(frame(BuiltinID(TypeQueryReply), b))
		if err != nil || !reflect.DeepEqual(got, r) {
			t.Fatalf("blocked lanes array: %v\n got  %+v\n want %+v", err, got, r)
		}
	}
}
