package schemas

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestPreviousRevisionBodies: bodies written with the previous revision of a v1 schema (before
// the appended trailing fields) under the shared built-in id are read by both decoders, the
// appended fields as their defaults; bodies of the current revision keep them.
func TestPreviousRevisionBodies(t *testing.T) {
	for _, tr := range []RecordType{TypeKvEvent, TypeLaneRecord, TypeLaneEvent, TypeQueryRequest, TypeQueryReply, TypeWorkerQueryRequest, TypeWorkerQueryReply} {
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
				if path := strings.Split(f, "/"); len(path) == 3 { // a field of a record branch of the last field's union
					if d, _ := n[path[0]].(map[string]any); d != nil {
						if rec, _ := d[nsName(path[1])].(map[string]any); rec != nil {
							delete(rec, path[2])
						}
					}
					continue
				}
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
				case "block_size":
					want.BlockSize = 0
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
	for name, e := range testKvEvents() {
		revisions(t, TypeKvEvent, func() map[string]any { return kvEventNative(&e) }, func(b []byte, without []string) {
			want := e
			want.Stored.BlockSize = 0
			for cn, c := range codecs {
				got, err := c.DecodeKvEvent(b)
				if err != nil || !reflect.DeepEqual(got, want) {
					t.Errorf("kv event %s without %v, %s: %v\n got  %+v\n want %+v", name, without, cn, err, got, want)
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
			for _, f := range without {
				switch f {
				case "max_age_ms":
					want.MaxAgeMillis = Optional[int64]{}
				case "block_extra_keys":
					want.BlockExtraKeys = nil
				case "lane_mask64": // the earlier revision's lane_mask: its low 16 bits
					if m, ok := want.LaneMask64.Get(); ok {
						want.LaneMask, want.LaneMask64 = Some(uint16(m)), Optional[uint64]{}
					}
				default:
					t.Fatalf("query request field %s not handled", f)
				}
			}
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
				case "ready_lanes64":
					want.ReadyLanes64 = 0
				case "incomplete_lanes64":
					want.IncompleteLanes64 = 0
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
	for name, q := range testWorkerQueryRequests() {
		revisions(t, TypeWorkerQueryRequest, func() map[string]any { return workerQueryRequestNative(&q) }, func(b []byte, without []string) {
			want := q
			for _, f := range without {
				switch f {
				case "block_extra_keys":
					want.BlockExtraKeys = nil
				case "max_age_ms":
					want.MaxAgeMillis = Optional[int64]{}
				default:
					t.Fatalf("worker query request field %s not handled", f)
				}
			}
			c := newTestCodec(t)
			got, err := c.DecodeWorkerQueryRequest(b)
			if err != nil || !reflect.DeepEqual(got, want) {
				t.Errorf("worker query request %s without %v: %v\n got  %+v\n want %+v", name, without, err, got, want)
			}
		})
	}
	for name, r := range testWorkerQueryReplies() {
		revisions(t, TypeWorkerQueryReply, func() map[string]any { return workerQueryReplyNative(&r) }, func(b []byte, without []string) {
			want := r
			for _, f := range without {
				switch f {
				case "state":
					want.State = LaneStateUnknown
				default:
					t.Fatalf("worker query reply field %s not handled", f)
				}
			}
			got, err := newTestCodec(t).DecodeWorkerQueryReply(b)
			if err != nil || !reflect.DeepEqual(got, want) {
				t.Errorf("worker query reply %s without %v: %v\n got  %+v\n want %+v", name, without, err, got, want)
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
	bad = append(appendLong(appendLong(appendLong(bad, 5), -1), 0), 0, 0, 0) // sources, as_of, block_size: null
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
	bad = append(good[:len(good)-3:len(good)-3], 2)
	bad = append(appendLong(appendLong(bad, -3), 0), 0, 0) // as_of, block_size: null
	for cn, cc := range map[string]*Codec{"fast": c, "goavro": newTestCodec(t, disableFastPath())} {
		_, err := cc.DecodeLaneRecord(bad)
		var de *DecodeError
		if !errors.Is(err, ErrInvalidField) || !errors.As(err, &de) || de.Field != "sources.degraded_sources" {
			t.Errorf("%s: negative degraded_sources: %v, want ErrInvalidField on sources.degraded_sources", cn, err)
		}
	}
}

// TestBlockSizeFieldRules: a block size written on the wire must be a u32 above 0: a written 0
// (a writer that meant null) and a negative one are refused by both decoders, naming the field.
func TestBlockSizeFieldRules(t *testing.T) {
	c := newTestCodec(t)
	codecs := map[string]*Codec{"fast": c, "goavro": newTestCodec(t, disableFastPath())}
	r := testDelta(2)
	good, err := c.EncodeLaneRecord(r)
	if err != nil {
		t.Fatal(err)
	}
	ev := testKvEvents()["stored-root"]
	goodEv, err := c.EncodeKvEvent(ev)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []int64{0, -1, 1 << 32} {
		badLane := appendLong(append(good[:len(good)-1:len(good)-1], 2), v)
		badEv := appendLong(append(goodEv[:len(goodEv)-1:len(goodEv)-1], 2), v)
		for cn, cc := range codecs {
			var de *DecodeError
			if _, err := cc.DecodeLaneRecord(badLane); !errors.Is(err, ErrInvalidField) || !errors.As(err, &de) || de.Field != "block_size" {
				t.Errorf("%s: lane record block_size %d: %v, want ErrInvalidField on block_size", cn, v, err)
			}
			if _, err := cc.DecodeKvEvent(badEv); !errors.Is(err, ErrInvalidField) || !errors.As(err, &de) || de.Field != "data.block_size" {
				t.Errorf("%s: kv event block_size %d: %v, want ErrInvalidField on data.block_size", cn, v, err)
			}
		}
	}
}
