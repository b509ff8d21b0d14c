package schemas

import (
	"encoding/binary"
	"errors"
	"strings"
	"testing"
)

func wantKind(t *testing.T, name string, err error, kind error) *DecodeError {
	t.Helper()
	if !errors.Is(err, kind) {
		t.Fatalf("%s: got %v, want kind %v", name, err, kind)
	}
	var de *DecodeError
	if !errors.As(err, &de) {
		t.Fatalf("%s: %T is not a *DecodeError", name, err)
	}
	return de
}

// body returns the framed lane record's Avro body with a given header.
func frame(id int, body []byte) []byte { return append(AppendHeader(nil, id), body...) }

func TestDecodeFrameErrors(t *testing.T) {
	c := newTestCodec(t)
	good, err := c.EncodeLaneRecord(testDelta(2))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		in   []byte
		kind error
	}{
		{"empty", nil, ErrUnknownMagic},
		{"short header", []byte{0, 0, 0}, ErrUnknownMagic},
		{"magic 1", append([]byte{1}, good[1:]...), ErrUnknownMagic},
		{"unknown id", frame(12345, good[HeaderSize:]), ErrUnknownSchemaID},
		{"query id on lane topic", frame(BuiltinID(TypeQueryRequest), good[HeaderSize:]), ErrSchemaMismatch},
		{"header only", good[:HeaderSize], ErrTruncated},
		{"cut in identity", good[:HeaderSize+20], ErrTruncated},
		// The last bytes are the nulls of the appended optional fields: cutting them leaves an
		// earlier revision's body (TestPreviousRevisionBodies), so cut into the images.
		{"cut in images", good[:len(good)-laneTrailerNulls-1], ErrTruncated},
		{"trailing byte", append(append([]byte{}, good...), 0), ErrMalformed},
	}
	for _, tc := range cases {
		for _, cc := range []*Codec{c, newTestCodec(t, disableFastPath())} {
			_, err := cc.DecodeLaneRecord(tc.in)
			de := wantKind(t, tc.name, err, tc.kind)
			if de.Type != TypeLaneRecord {
				t.Fatalf("%s: error type %v", tc.name, de.Type)
			}
		}
	}
}

// laneBody hand-builds a lane record body so tests can put any value in any
// field.
type laneBody struct {
	identityVersion, formatVersion, fpBits, slots int64
	bucketCount, layout                           int64
	branch                                        int64
	tail                                          func([]byte) []byte
}

func (l laneBody) bytes() []byte {
	var b []byte
	b = appendLong(b, l.identityVersion)
	b = append(b, make([]byte, 16)...)
	b = appendLong(b, 0)
	b = append(b, make([]byte, 16)...)
	b = appendLong(b, 1)
	b = appendLong(b, 7) // dc
	b = appendLong(b, 1) // incarnation
	b = appendLong(b, l.layout)
	b = appendLong(b, l.formatVersion)
	b = appendLong(b, 99) // seed
	b = appendLong(b, l.bucketCount)
	b = appendLong(b, l.fpBits)
	b = appendLong(b, l.slots)
	b = appendLong(b, l.branch)
	return l.tail(b)
}

func okLane() laneBody {
	return laneBody{identityVersion: 1, formatVersion: 1, fpBits: 16, slots: 4, bucketCount: 1024, layout: 1, branch: 1,
		tail: func(b []byte) []byte {
			b = appendLong(b, 1)
			b = appendLong(b, 2)
			return appendBytes(b, AppendImage(nil, 5, 6))
		}}
}

func snapshotTail(seq, idx, count, first, total int64, words []byte) func([]byte) []byte {
	return func(b []byte) []byte {
		b = appendLong(b, seq)
		b = appendLong(b, idx)
		b = appendLong(b, count)
		b = appendLong(b, first)
		b = appendLong(b, total)
		return appendBytes(b, words)
	}
}

func TestDecodeLaneRecordFieldErrors(t *testing.T) {
	fast, slow := newTestCodec(t), newTestCodec(t, disableFastPath())
	id := BuiltinID(TypeLaneRecord)
	if _, err := fast.DecodeLaneRecord(frame(id, okLane().bytes())); err != nil {
		t.Fatalf("baseline: %v", err)
	}
	type tc struct {
		name  string
		body  laneBody
		kind  error
		field string
	}
	var cases []tc
	add := func(name string, kind error, field string, mod func(*laneBody)) {
		l := okLane()
		mod(&l)
		cases = append(cases, tc{name, l, kind, field})
	}
	add("negative identity version", ErrInvalidField, "identity.pool.identity_version", func(l *laneBody) { l.identityVersion = -1 })
	add("format version over u16", ErrInvalidField, "identity.format.format_version", func(l *laneBody) { l.formatVersion = 1 << 16 })
	add("fingerprint bits over u8", ErrInvalidField, "identity.format.fingerprint_bits", func(l *laneBody) { l.fpBits = 256 })
	add("int over 32 bits", ErrMalformed, "", func(l *laneBody) { l.slots = 1 << 31 })
	add("layout generation 0", ErrInvalidField, "identity.layout_generation", func(l *laneBody) { l.layout = 0 })
	add("bucket count not a power of two", ErrInvalidField, "identity.format.bucket_count", func(l *laneBody) { l.bucketCount = 1000 })
	add("bucket count 1", ErrInvalidField, "identity.format.bucket_count", func(l *laneBody) { l.bucketCount = 1 })
	add("bucket count over max", ErrInvalidField, "identity.format.bucket_count", func(l *laneBody) { l.bucketCount = MaxBucketCount * 2 })
	add("union index 4", ErrMalformed, "", func(l *laneBody) { l.branch = 4 })
	add("union index -1", ErrMalformed, "", func(l *laneBody) { l.branch = -1 })
	add("images not multiple of 16", ErrInvalidField, "body.images", func(l *laneBody) {
		l.tail = func(b []byte) []byte { return appendBytes(appendLong(appendLong(b, 1), 2), make([]byte, 17)) }
	})
	add("image bucket out of range", ErrInvalidField, "body.images", func(l *laneBody) {
		l.tail = func(b []byte) []byte { return appendBytes(appendLong(appendLong(b, 1), 2), AppendImage(nil, 1024, 1)) }
	})
	add("images length beyond input", ErrTruncated, "", func(l *laneBody) {
		l.tail = func(b []byte) []byte { return appendLong(appendLong(appendLong(b, 1), 2), 1<<40) }
	})
	add("negative images length", ErrMalformed, "", func(l *laneBody) {
		l.tail = func(b []byte) []byte { return appendLong(appendLong(appendLong(b, 1), 2), -16) }
	})
	add("varint overflow", ErrMalformed, "", func(l *laneBody) {
		l.tail = func(b []byte) []byte {
			return append(b, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f)
		}
	})
	add("varint longer than 10 bytes", ErrMalformed, "", func(l *laneBody) {
		l.tail = func(b []byte) []byte { return append(b, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0) }
	})
	snap := func(name string, kind error, field string, tail func([]byte) []byte) {
		add(name, kind, field, func(l *laneBody) { l.branch, l.tail = 0, tail })
	}
	snap("good snapshot", nil, "", snapshotTail(5, 0, 1, 0, 1024, make([]byte, 8*1024)))
	snap("chunk index = count", ErrInvalidField, "body.chunk_index", snapshotTail(5, 2, 2, 0, 1024, make([]byte, 8)))
	snap("chunk count 0", ErrInvalidField, "body.chunk_count", snapshotTail(5, 0, 0, 0, 1024, make([]byte, 8)))
	snap("negative chunk index", ErrInvalidField, "body.chunk_index", snapshotTail(5, -1, 2, 0, 1024, make([]byte, 8)))
	snap("total differs from format", ErrInvalidField, "body.total_buckets", snapshotTail(5, 0, 1, 0, 2048, make([]byte, 8)))
	snap("words not multiple of 8", ErrInvalidField, "body.words", snapshotTail(5, 0, 1, 0, 1024, make([]byte, 12)))
	snap("no words", ErrInvalidField, "body.words", snapshotTail(5, 0, 1, 0, 1024, nil))
	snap("words past the end", ErrInvalidField, "body.first_bucket", snapshotTail(5, 0, 1, 1020, 1024, make([]byte, 8*5)))
	snap("first bucket past the end", ErrInvalidField, "body.first_bucket", snapshotTail(5, 0, 1, 1024, 1024, make([]byte, 8)))
	snap("first bucket wraps", ErrInvalidField, "body.first_bucket", snapshotTail(5, 0, 1, -1, 1024, make([]byte, 8)))

	for _, c := range cases {
		for _, cc := range []*Codec{fast, slow} {
			_, err := cc.DecodeLaneRecord(frame(id, c.body.bytes()))
			if c.kind == nil {
				if err != nil {
					t.Fatalf("%s: %v", c.name, err)
				}
				continue
			}
			de := wantKind(t, c.name, err, c.kind)
			if de.Field != c.field {
				t.Fatalf("%s: field %q, want %q (%v)", c.name, de.Field, c.field, err)
			}
			if de.SchemaID != id {
				t.Fatalf("%s: schema id %d", c.name, de.SchemaID)
			}
		}
	}
}

// A few bytes must not make goavro preallocate a huge array: the bounds
// checker rejects the count first.
func TestDecodeOversizeArrayCount(t *testing.T) {
	c := newTestCodec(t)
	var b []byte
	b = appendLong(b, 1) // worker
	b = appendLong(b, 0) // dp rank
	b = appendLong(b, 0) // event id
	b = appendLong(b, 1) // DEVICE
	b = appendLong(b, 0) // residency null
	b = appendLong(b, 1) // KvRemoved
	b = appendLong(b, 1<<31-1)
	_, err := c.DecodeKvEvent(frame(BuiltinID(TypeKvEvent), b))
	wantKind(t, "array count", err, ErrTruncated)

	// The same with a negative count and a block size, and for a reply's lanes.
	b2 := append(b[:len(b)-4:len(b)-4], appendLong(appendLong(nil, -(1<<40)), 8)...)
	_, err = c.DecodeKvEvent(frame(BuiltinID(TypeKvEvent), b2))
	wantKind(t, "negative block count", err, ErrTruncated)

	var r []byte
	r = appendBytes(r, []byte("id"))
	r = appendLong(r, 0) // OK
	r = appendLong(r, 0) // no error message
	r = appendLong(r, 1) // ready lanes
	r = appendLong(r, 1) // query blocks
	r = appendLong(r, 1<<30)
	_, err = c.DecodeQueryReply(frame(BuiltinID(TypeQueryReply), r))
	wantKind(t, "reply lanes", err, ErrTruncated)
}

func TestDecodeFieldErrorsOtherTypes(t *testing.T) {
	c := newTestCodec(t)
	// Encode invalid values by going through goavro directly, as a foreign
	// writer would.
	enc := func(rt RecordType, native map[string]any) []byte {
		b, err := builtins[rt].codec.BinaryFromNative(AppendHeader(nil, BuiltinID(rt)), native)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	q := testQueryRequests()["tokens-full"]
	qn := queryRequestNative(&q)
	qn["input"] = union(nsName("TokenIds"), map[string]any{"tokens": []byte{1, 2, 3}, "block_size": int32(64), "lora_name": nil, "cache_namespace": nil})
	_, err := c.DecodeQueryRequest(enc(TypeQueryRequest, qn))
	if de := wantKind(t, "tokens length", err, ErrInvalidField); de.Field != "input.tokens" {
		t.Fatalf("field %q", de.Field)
	}
	qn = queryRequestNative(&q)
	qn["lane_mask"] = union("int", int32(1<<16))
	_, err = c.DecodeQueryRequest(enc(TypeQueryRequest, qn))
	wantKind(t, "lane mask", err, ErrInvalidField)
	qn = queryRequestNative(&q)
	qn["correlation_id"] = ""
	_, err = c.DecodeQueryRequest(enc(TypeQueryRequest, qn))
	wantKind(t, "empty correlation id", err, ErrInvalidField)

	r := testQueryReplies()["ok"]
	rn := queryReplyNative(&r)
	rn["query_blocks"] = int32(2)
	_, err = c.DecodeQueryReply(enc(TypeQueryReply, rn))
	wantKind(t, "depth over query blocks", err, ErrInvalidField)

	ev := testLaneEvents()["progress"]
	en := laneEventNative(&ev)
	en["lane"] = int32(64)
	_, err = c.DecodeLaneEvent(enc(TypeLaneEvent, en))
	wantKind(t, "lane 64", err, ErrInvalidField)

	k := testKvEvents()["stored"]
	kn := kvEventNative(&k)
	kn["dp_rank"] = int64(1 << 32)
	_, err = c.DecodeKvEvent(enc(TypeKvEvent, kn))
	wantKind(t, "dp rank over u32", err, ErrInvalidField)

	d := testDeadLetters()["full"]
	dn := deadLetterNative(&d)
	dn["source_offset"] = int64(-1)
	_, err = c.DecodeDeadLetter(enc(TypeDeadLetter, dn))
	wantKind(t, "negative offset", err, ErrInvalidField)

	cr := testControlRecords()["any-snapshot"]
	cn := controlRecordNative(&cr)
	cn["body"].(map[string]any)[nsName("SnapshotRequest")].(map[string]any)["after_offset"] = int64(-2)
	_, err = c.DecodeControlRecord(enc(TypeControlRecord, cn))
	wantKind(t, "after offset", err, ErrInvalidField)
}

func TestEncodeErrors(t *testing.T) {
	c := newTestCodec(t)
	check := func(name string, err error, field string) {
		t.Helper()
		var ee *EncodeError
		if !errors.As(err, &ee) || !errors.Is(err, ErrInvalidField) || ee.Field != field {
			t.Fatalf("%s: got %v, want an ErrInvalidField EncodeError on %q", name, err, field)
		}
	}
	rec := testDelta(1)
	rec.Delta.Images = rec.Delta.Images[:15]
	_, err := c.EncodeLaneRecord(rec)
	check("short image", err, "body.images")

	rec = testSnapshot(4)
	rec.Snapshot.ChunkIndex = rec.Snapshot.ChunkCount
	_, err = c.EncodeLaneRecord(rec)
	check("chunk index", err, "body.chunk_index")

	rec = testDelta(1)
	rec.Kind = 0
	_, err = c.EncodeLaneRecord(rec)
	check("no kind", err, "body")

	rec = testDelta(1)
	rec.Identity.Pool.IdentityVersion = 1 << 31
	dst := []byte("keep")
	out, err := c.AppendLaneRecord(dst, rec)
	check("identity version", err, "identity.pool.identity_version")
	if string(out) != "keep" {
		t.Fatal("dst changed on error")
	}

	q := testQueryRequests()["hashes"]
	q.CorrelationID = strings.Repeat("x", MaxCorrelationIDBytes+1)
	_, err = c.EncodeQueryRequest(q)
	check("long correlation id", err, "correlation_id")

	r := testQueryReplies()["ok"]
	r.Lanes[1], r.Lanes[2] = r.Lanes[2], r.Lanes[1]
	_, err = c.EncodeQueryReply(r)
	check("unordered lanes", err, "lanes")

	e := testLaneEvents()["progress"]
	e.Kind = 200
	_, err = c.EncodeLaneEvent(e)
	check("event kind", err, "kind")

	k := testKvEvents()["cleared"]
	k.StorageTier = 9
	_, err = c.EncodeKvEvent(k)
	check("tier", err, "storage_tier")
}

func TestUnpackErrors(t *testing.T) {
	_, err := UnpackImages(nil, make([]byte, 15))
	wantKind(t, "images", err, ErrInvalidField)
	_, err = UnpackU64s(nil, make([]byte, 9))
	wantKind(t, "words", err, ErrInvalidField)
	_, err = UnpackU32s(nil, make([]byte, 3))
	wantKind(t, "tokens", err, ErrInvalidField)
}

func TestDeadLetterReasonOf(t *testing.T) {
	c := newTestCodec(t)
	_, err := c.DecodeLaneRecord([]byte{9})
	if DeadLetterReasonOf(err) != DeadLetterUnknownMagic {
		t.Fatal(err)
	}
	_, err = c.DecodeLaneRecord(frame(1, nil))
	if DeadLetterReasonOf(err) != DeadLetterUnknownSchemaID {
		t.Fatal(err)
	}
	_, err = c.DecodeLaneRecord(frame(BuiltinID(TypeLaneRecord), nil))
	if DeadLetterReasonOf(err) != DeadLetterTruncated {
		t.Fatal(err)
	}
	if DeadLetterReasonOf(errors.New("x")) != DeadLetterUnknown || DeadLetterReasonOf(nil) != DeadLetterUnknown {
		t.Fatal("foreign errors")
	}
}

func TestDecodeErrorMessage(t *testing.T) {
	c := newTestCodec(t)
	rec := testDelta(1)
	b, _ := c.EncodeLaneRecord(rec)
	binary.BigEndian.PutUint32(b[1:], 77)
	_, err := c.DecodeLaneRecord(b)
	want := "schemas: unknown schema id: LaneRecord (schema id 77): not a built-in id and no registry is configured"
	if err.Error() != want {
		t.Fatalf("message %q\nwant    %q", err.Error(), want)
	}
}
