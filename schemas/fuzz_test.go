package schemas

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

var errorKinds = []error{ErrUnknownMagic, ErrUnknownSchemaID, ErrSchemaMismatch, ErrTruncated, ErrMalformed, ErrInvalidField, ErrRegistry}

func kindOf(t *testing.T, err error) error {
	t.Helper()
	var de *DecodeError
	if !errors.As(err, &de) {
		t.Fatalf("error %T is not a *DecodeError: %v", err, err)
	}
	for _, k := range errorKinds {
		if de.Kind == k {
			return k
		}
	}
	t.Fatalf("error with unknown kind: %v", err)
	return nil
}

// fuzzDecoder checks the contract every decoder keeps on arbitrary input: no
// panic, a typed error or a record that re-encodes to a record that decodes
// to itself. For a type with a hand-written codec it also checks that the
// goavro path agrees: the same record or the same error kind. If also is set,
// it checks more of the decoder's contract on each input and its result.
func fuzzDecoder[T any](f *testing.F, rt RecordType, seeds map[string]T, enc func(*Codec, T) ([]byte, error), dec func(*Codec, []byte) (T, error),
	also func(t *testing.T, c *Codec, data []byte, v T, err error)) {
	c, slow := newTestCodec(f), newTestCodec(f, disableFastPath())
	for _, s := range seeds {
		b, err := enc(c, s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
		f.Add(b[:len(b)/2])
	}
	f.Add([]byte{})
	f.Add([]byte{0, 0x43, 0x4B, 0x01, 0x01})
	f.Fuzz(func(t *testing.T, data []byte) {
		v, err := dec(c, data)
		if also != nil {
			also(t, c, data, v, err)
		}
		if hasFastPath(rt) {
			v2, err2 := dec(slow, data)
			if (err == nil) != (err2 == nil) {
				t.Fatalf("paths disagree: fast %v, goavro %v", err, err2)
			}
			if err != nil && kindOf(t, err) != kindOf(t, err2) {
				t.Fatalf("error kinds differ: fast %v, goavro %v", err, err2)
			}
			if err == nil && !reflect.DeepEqual(v, v2) {
				t.Fatalf("paths decode differently:\n fast %+v\n avro %+v", v, v2)
			}
		}
		if err != nil {
			kindOf(t, err)
			return
		}
		b, err := enc(c, v)
		if err != nil {
			t.Fatalf("decoded record does not re-encode: %v", err)
		}
		v2, err := dec(c, b)
		if err != nil {
			t.Fatalf("re-encoded record does not decode: %v", err)
		}
		if !reflect.DeepEqual(v, v2) {
			t.Fatalf("re-encoding changed the record:\n%+v\n%+v", v, v2)
		}
	})
}

// FuzzDecodeLaneRecord also checks that the hand-written lane decoder and the
// goavro path agree on every input: the same record or the same error kind.
func FuzzDecodeLaneRecord(f *testing.F) {
	fast, slow := newTestCodec(f), newTestCodec(f, disableFastPath())
	for _, rec := range testLaneRecords() {
		if rec.Kind == LaneSnapshotChunk {
			rec.Snapshot.Words = rec.Snapshot.Words[:64]
		}
		b, err := fast.EncodeLaneRecord(rec)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
		f.Add(b[:len(b)-3])
	}
	f.Add([]byte{0, 0x43, 0x4B, 0x01, 0x01, 2})
	f.Fuzz(func(t *testing.T, data []byte) {
		r1, err1 := fast.DecodeLaneRecord(data)
		r2, err2 := slow.DecodeLaneRecord(data)
		if (err1 == nil) != (err2 == nil) {
			t.Fatalf("paths disagree: fast %v, goavro %v", err1, err2)
		}
		if err1 != nil {
			if k1, k2 := kindOf(t, err1), kindOf(t, err2); k1 != k2 {
				t.Fatalf("error kinds differ: fast %v, goavro %v", err1, err2)
			}
			return
		}
		if !reflect.DeepEqual(r1, r2) {
			t.Fatalf("paths decode differently:\n fast %+v\n avro %+v", r1, r2)
		}
		b, err := fast.EncodeLaneRecord(r1)
		if err != nil {
			t.Fatalf("decoded record does not re-encode: %v", err)
		}
		r3, err := fast.DecodeLaneRecord(b)
		if err != nil || !reflect.DeepEqual(r1, r3) {
			t.Fatalf("re-encoding changed the record: %v", err)
		}
	})
}

// FuzzDecodeQueryRequest also holds QueryRoute to the decoder: a valid
// request routes to its own address, a request that only breaks a contract
// rule routes unless its correlation id is unusable, anything else does not.
func FuzzDecodeQueryRequest(f *testing.F) {
	fuzzDecoder(f, TypeQueryRequest, testQueryRequests(), (*Codec).EncodeQueryRequest, (*Codec).DecodeQueryRequest, checkQueryRoute)
}

func checkQueryRoute(t *testing.T, c *Codec, data []byte, q QueryRequest, err error) {
	rt, ok := c.QueryRoute(data)
	switch {
	case err == nil:
		want := QueryRoute{CorrelationID: q.CorrelationID, ReplyPartition: q.ReplyPartition}
		if len(q.ReplyTopic) <= maxTopicNameBytes && utf8.ValidString(q.ReplyTopic) {
			want.ReplyTopic = q.ReplyTopic
		}
		if !ok || rt != want {
			t.Fatalf("valid request %+v routes to %+v, %v", q, rt, ok)
		}
	case errors.Is(err, ErrInvalidField):
		_, body, _ := ParseHeader(data)
		r := reader{b: body}
		cid := r.bytes()
		usable := !r.failed() && len(cid) > 0 && utf8.Valid(cid)
		long := len(cid) > MaxCorrelationIDBytes
		if ok != usable || ok && (rt.IDTruncated != long || !strings.HasPrefix(string(cid), rt.CorrelationID) ||
			!utf8.ValidString(rt.CorrelationID) || len(rt.CorrelationID) > MaxCorrelationIDBytes ||
			len(rt.CorrelationID) < MaxCorrelationIDBytes-utf8.UTFMax+1 && long || !long && rt.CorrelationID != string(cid)) {
			t.Fatalf("request rejected with %v: route %+v, %v; correlation id %q", err, rt, ok, cid)
		}
		if p, has := rt.ReplyPartition.Get(); has && p < 0 {
			t.Fatalf("negative reply partition routed: %+v", rt)
		}
	default:
		if ok {
			t.Fatalf("request rejected with %v routes to %+v", err, rt)
		}
	}
}

func FuzzDecodeQueryReply(f *testing.F) {
	fuzzDecoder(f, TypeQueryReply, testQueryReplies(), (*Codec).EncodeQueryReply, (*Codec).DecodeQueryReply, nil)
}

func FuzzDecodeLaneEvent(f *testing.F) {
	fuzzDecoder(f, TypeLaneEvent, testLaneEvents(), (*Codec).EncodeLaneEvent, (*Codec).DecodeLaneEvent, nil)
}

func FuzzDecodeControlRecord(f *testing.F) {
	fuzzDecoder(f, TypeControlRecord, testControlRecords(), (*Codec).EncodeControlRecord, (*Codec).DecodeControlRecord, nil)
}

func FuzzDecodeDeadLetter(f *testing.F) {
	fuzzDecoder(f, TypeDeadLetter, testDeadLetters(), (*Codec).EncodeDeadLetter, (*Codec).DecodeDeadLetter, nil)
}

func FuzzDecodeKvEvent(f *testing.F) {
	fuzzDecoder(f, TypeKvEvent, testKvEvents(), (*Codec).EncodeKvEvent, (*Codec).DecodeKvEvent, nil)
}

func FuzzUnpackImages(f *testing.F) {
	f.Add([]byte(testImages(3, 1<<20)))
	f.Add(make([]byte, 15))
	f.Fuzz(func(t *testing.T, data []byte) {
		imgs, err := UnpackImages(nil, data)
		if err != nil {
			if len(data)%ImageSize == 0 || !errors.Is(err, ErrInvalidField) {
				t.Fatalf("unexpected error %v for %d bytes", err, len(data))
			}
			return
		}
		if len(imgs) != PackedImages(data).Len() || !bytes.Equal(AppendImages(nil, imgs), data) {
			t.Fatal("unpack/pack is not the identity")
		}
		for i, im := range imgs {
			if PackedImages(data).At(i) != im {
				t.Fatalf("At(%d) disagrees with UnpackImages", i)
			}
		}
	})
}

func FuzzUnpackU64s(f *testing.F) {
	f.Add([]byte(testWords(3)))
	f.Add(make([]byte, 9))
	f.Fuzz(func(t *testing.T, data []byte) {
		vs, err := UnpackU64s(nil, data)
		if err != nil {
			if len(data)%WordSize == 0 || !errors.Is(err, ErrInvalidField) {
				t.Fatalf("unexpected error %v for %d bytes", err, len(data))
			}
			return
		}
		if !bytes.Equal(AppendU64s(nil, vs), data) {
			t.Fatal("unpack/pack is not the identity")
		}
	})
}

func FuzzUnpackU32s(f *testing.F) {
	f.Add(AppendU32s(nil, []uint32{1, 2, 3}))
	f.Add(make([]byte, 5))
	f.Fuzz(func(t *testing.T, data []byte) {
		vs, err := UnpackU32s(nil, data)
		if err != nil {
			if len(data)%TokenSize == 0 || !errors.Is(err, ErrInvalidField) {
				t.Fatalf("unexpected error %v for %d bytes", err, len(data))
			}
			return
		}
		if !bytes.Equal(AppendU32s(nil, vs), data) {
			t.Fatal("unpack/pack is not the identity")
		}
	})
}
