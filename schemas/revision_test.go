package schemas

import (
	"errors"
	"reflect"
	"testing"
	"time"
)

// TestPreviousRevisionBodies: bodies written with the previous revision of a v1 schema (before
// the appended trailing fields) under the shared built-in id are read by both decoders, the
// appended fields as their defaults; bodies of the current revision keep them.
func TestPreviousRevisionBodies(t *testing.T) {
	for _, tr := range []RecordType{TypeLaneRecord, TypeLaneEvent, TypeQueryRequest, TypeQueryReply} {
		if builtins[tr].previous == nil {
			t.Fatalf("%s: no previous revision", tr)
		}
	}
	// revisions calls fn with each earlier revision's body of native (the appended fields from
	// the k-th on left out, k counted from the last) and the names left out.
	revisions := func(t *testing.T, tr RecordType, native func() map[string]any, fn func(b []byte, without []string)) {
		t.Helper()
		all := appendedFields[tr]
		rev := &builtins[tr]
		for k := len(all) - 1; k >= 0; k-- {
			rev = rev.previous
			n := native()
			for _, f := range all[k:] {
				delete(n, f)
			}
			b, err := rev.codec.BinaryFromNative(AppendHeader(nil, BuiltinID(tr)), n)
			if err != nil {
				t.Fatal(err)
			}
			fn(b, all[k:])
		}
	}
	codecs := map[string]*Codec{"fast": newTestCodec(t), "goavro": newTestCodec(t, disableFastPath())}
	for name, r := range testLaneRecords() {
		revisions(t, TypeLaneRecord, func() map[string]any { return laneRecordNative(&r) }, func(b []byte, without []string) {
			want := r
			for _, f := range without {
				switch f {
				case "capacity":
					want.Capacity = Optional[CapacityState]{}
				case "sources":
					want.Sources = Optional[SourceHealth]{}
				case "as_of":
					want.AsOf = time.Time{}
				default:
					t.Fatalf("lane record field %s not handled", f)
				}
			}
			for cn, c := range codecs {
				got, err := c.DecodeLaneRecord(b)
				if err != nil || !reflect.DeepEqual(got, want) {
					t.Errorf("lane record %s without %v, %s: %v\n got  %+v\n want %+v", name, without, cn, err, got, want)
				}
			}
		})
	}
	for name, e := range testLaneEvents() {
		revisions(t, TypeLaneEvent, func() map[string]any { return laneEventNative(&e) }, func(b []byte, without []string) {
			want := e
			want.Capacity = Optional[CapacityState]{}
			for cn, c := range codecs {
				got, err := c.DecodeLaneEvent(b)
				if err != nil || !reflect.DeepEqual(got, want) {
					t.Errorf("lane event %s, %s: %v\n got  %+v\n want %+v", name, cn, err, got, want)
				}
			}
		})
	}
	for name, q := range testQueryRequests() {
		revisions(t, TypeQueryRequest, func() map[string]any { return queryRequestNative(&q) }, func(b []byte, without []string) {
			want := q
			want.MaxAgeMillis = Optional[int64]{}
			for cn, c := range codecs {
				got, err := c.DecodeQueryRequest(b)
				if err != nil || !reflect.DeepEqual(got, want) {
					t.Errorf("query request %s, %s: %v\n got  %+v\n want %+v", name, cn, err, got, want)
				}
			}
		})
	}
	for name, q := range testQueryReplies() {
		revisions(t, TypeQueryReply, func() map[string]any { return queryReplyNative(&q) }, func(b []byte, without []string) {
			want := q
			for _, f := range without {
				switch f {
				case "incomplete_lanes":
					want.IncompleteLanes = 0
				case "lane_states":
					want.LaneStates = nil
				default:
					t.Fatalf("query reply field %s not handled", f)
				}
			}
			for cn, c := range codecs {
				got, err := c.DecodeQueryReply(b)
				if err != nil || !reflect.DeepEqual(got, want) {
					t.Errorf("query reply %s without %v, %s: %v\n got  %+v\n want %+v", name, without, cn, err, got, want)
				}
			}
		})
	}
	// A first-revision body cut short is still truncated, not read as something shorter.
	r := testLaneRecords()["delta"]
	revisions(t, TypeLaneRecord, func() map[string]any { return laneRecordNative(&r) }, func(b []byte, without []string) {
		if len(without) != len(appendedFields[TypeLaneRecord]) {
			return
		}
		for cn, c := range codecs {
			if _, err := c.DecodeLaneRecord(b[:len(b)-1]); !errors.Is(err, ErrTruncated) {
				t.Errorf("%s: cut first-revision body: %v, want ErrTruncated", cn, err)
			}
		}
	})
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
	bad := append(good[:len(good)-laneTrailerNulls:len(good)-laneTrailerNulls], 2)
	bad = append(append(appendLong(appendLong(appendLong(bad, 5), -1), 0), 0), 0)
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
	bad = append(good[:len(good)-2:len(good)-2], 2)
	bad = append(appendLong(appendLong(bad, -3), 0), 0)
	for cn, cc := range map[string]*Codec{"fast": c, "goavro": newTestCodec(t, disableFastPath())} {
		_, err := cc.DecodeLaneRecord(bad)
		var de *DecodeError
		if !errors.Is(err, ErrInvalidField) || !errors.As(err, &de) || de.Field != "sources.degraded_sources" {
			t.Errorf("%s: negative degraded_sources: %v, want ErrInvalidField on sources.degraded_sources", cn, err)
		}
	}
}
