package schemas

import (
	"errors"
	"reflect"
	"testing"
)

// TestPreviousRevisionBodies: bodies written with the previous revision of a v1 schema (before
// the appended trailing fields) under the shared built-in id are read by both decoders, the
// appended fields as their defaults; bodies of the current revision keep them.
func TestPreviousRevisionBodies(t *testing.T) {
	for _, tr := range []RecordType{TypeLaneRecord, TypeLaneEvent, TypeQueryReply} {
		if builtins[tr].previous == nil {
			t.Fatalf("%s: no previous revision", tr)
		}
	}
	// previousBody encodes native with the first revision's schema, without any appended field.
	previousBody := func(t *testing.T, tr RecordType, native map[string]any) []byte {
		t.Helper()
		for _, f := range appendedFields[tr] {
			delete(native, f)
		}
		first := builtins[tr].previous
		for first.previous != nil {
			first = first.previous
		}
		b, err := first.codec.BinaryFromNative(AppendHeader(nil, BuiltinID(tr)), native)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	codecs := map[string]*Codec{"fast": newTestCodec(t), "goavro": newTestCodec(t, disableFastPath())}
	for name, r := range testLaneRecords() {
		// The revision between: capacity, but no sources.
		mid := r
		mid.Capacity, mid.Sources = Some(CapacityState{ResidentBlocks: 9, OmittedBlocks: 2, CapacityOmissions: 3}), Optional[SourceHealth]{}
		native := laneRecordNative(&mid)
		delete(native, "sources")
		mb, err := builtins[TypeLaneRecord].previous.codec.BinaryFromNative(AppendHeader(nil, BuiltinID(TypeLaneRecord)), native)
		if err != nil {
			t.Fatal(err)
		}
		for cn, c := range codecs {
			got, err := c.DecodeLaneRecord(mb)
			if err != nil || !reflect.DeepEqual(got, mid) {
				t.Errorf("lane record %s of the capacity revision, %s: %v\n got  %+v\n want %+v", name, cn, err, got, mid)
			}
		}
		old := r
		old.Capacity, old.Sources = Optional[CapacityState]{}, Optional[SourceHealth]{}
		b := previousBody(t, TypeLaneRecord, laneRecordNative(&r))
		for cn, c := range codecs {
			got, err := c.DecodeLaneRecord(b)
			if err != nil || !reflect.DeepEqual(got, old) {
				t.Errorf("lane record %s, %s: %v\n got  %+v\n want %+v", name, cn, err, got, old)
			}
		}
	}
	for name, e := range testLaneEvents() {
		old := e
		old.Capacity = Optional[CapacityState]{}
		b := previousBody(t, TypeLaneEvent, laneEventNative(&e))
		for cn, c := range codecs {
			got, err := c.DecodeLaneEvent(b)
			if err != nil || !reflect.DeepEqual(got, old) {
				t.Errorf("lane event %s, %s: %v\n got  %+v\n want %+v", name, cn, err, got, old)
			}
		}
	}
	for name, q := range testQueryReplies() {
		old := q
		old.IncompleteLanes = 0
		b := previousBody(t, TypeQueryReply, queryReplyNative(&q))
		for cn, c := range codecs {
			got, err := c.DecodeQueryReply(b)
			if err != nil || !reflect.DeepEqual(got, old) {
				t.Errorf("query reply %s, %s: %v\n got  %+v\n want %+v", name, cn, err, got, old)
			}
		}
	}
	// A first-revision body cut short is still truncated, not read as something shorter.
	r := testLaneRecords()["delta"]
	b := previousBody(t, TypeLaneRecord, laneRecordNative(&r))
	for cn, c := range codecs {
		if _, err := c.DecodeLaneRecord(b[:len(b)-1]); !errors.Is(err, ErrTruncated) {
			t.Errorf("%s: cut previous-revision body: %v, want ErrTruncated", cn, err)
		}
	}
}

// TestCapacityFieldRules: capacity values must fit an Avro long (encode) and be non-negative
// (decode), and incomplete_lanes must be a subset of ready_lanes.
func TestCapacityFieldRules(t *testing.T) {
	c := newTestCodec(t)
	r := testDelta(2)
	r.Capacity = Some(CapacityState{OmittedBlocks: 1 << 63})
	if _, err := c.EncodeLaneRecord(r); !errors.Is(err, ErrInvalidField) {
		t.Errorf("omitted_blocks 2^63: encode %v, want ErrInvalidField", err)
	}
	ev := testLaneEvents()["progress"]
	ev.Capacity = Some(CapacityState{CapacityOmissions: 1 << 63})
	if _, err := c.EncodeLaneEvent(ev); !errors.Is(err, ErrInvalidField) {
		t.Errorf("lane event capacity_omissions 2^63: encode %v, want ErrInvalidField", err)
	}
	q := testQueryReplies()["incomplete"]
	q.IncompleteLanes = 0b10
	if _, err := c.EncodeQueryReply(q); !errors.Is(err, ErrInvalidField) {
		t.Errorf("incomplete lane outside ready_lanes: encode %v, want ErrInvalidField", err)
	}
	// A negative long on the wire: hand-append the capacity branch (and a null sources) to a
	// delta body.
	r = testDelta(2)
	good, err := c.EncodeLaneRecord(r)
	if err != nil {
		t.Fatal(err)
	}
	bad := append(good[:len(good)-2:len(good)-2], 2)
	bad = append(appendLong(appendLong(appendLong(bad, 5), -1), 0), 0)
	for cn, cc := range map[string]*Codec{"fast": c, "goavro": newTestCodec(t, disableFastPath())} {
		_, err := cc.DecodeLaneRecord(bad)
		var de *DecodeError
		if !errors.Is(err, ErrInvalidField) || !errors.As(err, &de) || de.Field != "capacity.omitted_blocks" {
			t.Errorf("%s: negative omitted_blocks: %v, want ErrInvalidField on capacity.omitted_blocks", cn, err)
		}
	}
	// Sources the same: above 2^63 refused at encode, negative at decode.
	r = testDelta(2)
	r.Sources = Some(SourceHealth{LostHistoryClears: 1 << 63})
	if _, err := c.EncodeLaneRecord(r); !errors.Is(err, ErrInvalidField) {
		t.Errorf("lost_history_clears 2^63: encode %v, want ErrInvalidField", err)
	}
	bad = append(good[:len(good)-1:len(good)-1], 2)
	bad = appendLong(appendLong(bad, -3), 0)
	for cn, cc := range map[string]*Codec{"fast": c, "goavro": newTestCodec(t, disableFastPath())} {
		_, err := cc.DecodeLaneRecord(bad)
		var de *DecodeError
		if !errors.Is(err, ErrInvalidField) || !errors.As(err, &de) || de.Field != "sources.degraded_sources" {
			t.Errorf("%s: negative degraded_sources: %v, want ErrInvalidField on sources.degraded_sources", cn, err)
		}
	}
}
