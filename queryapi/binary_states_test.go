package queryapi_test

import (
	"errors"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/queryapi"
	"github.com/ckf-stream/ckf-stream/schemas"
)

// TestBinaryStatesReplyRoundTrip: the reply with lane states carries every selected lane with
// its state, its age (absent, or capped below BinaryAbsent) and the searched lanes' depths, and
// decodes back to them; every rule of the layout is checked on decode.
func TestBinaryStatesReplyRoundTrip(t *testing.T) {
	replied := time.UnixMicro(1_780_000_000_123_456).UTC()
	r := schemas.QueryReply{Status: schemas.QueryOK, QueryBlocks: 9, ReadyLanes: 0b10_0001, ReplyTime: replied,
		Lanes: []schemas.LaneMatch{{Lane: 0, Depth: 9}, {Lane: 5, Depth: 2}},
		LaneStates: []schemas.LaneState{
			{Lane: 0, State: schemas.LaneExact, AgeMillis: schemas.Some[int64](12)},
			{Lane: 3, State: schemas.LaneStale, AgeMillis: schemas.Some[int64](1 << 40)},
			{Lane: 5, State: schemas.LaneIncomplete, AgeMillis: schemas.Some[int64](0)},
			{Lane: 9, State: schemas.LaneUnavailable},
		}}
	b := queryapi.AppendBinaryStatesReply(nil, &r)
	if len(b) != queryapi.BinaryStatesHeaderBytes+4*queryapi.BinaryStateEntryBytes {
		t.Fatalf("%d bytes", len(b))
	}
	got, err := queryapi.DecodeBinaryStatesReply(b)
	if err != nil {
		t.Fatal(err)
	}
	const absent = queryapi.BinaryAbsent
	want := []queryapi.BinaryLaneState{
		{Lane: 0, State: schemas.LaneExact, AgeMillis: 12, Depth: 9},
		{Lane: 3, State: schemas.LaneStale, AgeMillis: absent - 1, Depth: absent},
		{Lane: 5, State: schemas.LaneIncomplete, AgeMillis: 0, Depth: 2},
		{Lane: 9, State: schemas.LaneUnavailable, AgeMillis: absent, Depth: absent},
	}
	if got.QueryBlocks != 9 || !got.ReplyTime.Equal(replied) || len(got.Lanes) != len(want) {
		t.Fatalf("decoded %+v", got)
	}
	for i := range want {
		if got.Lanes[i] != want[i] {
			t.Errorf("entry %d: %+v, want %+v", i, got.Lanes[i], want[i])
		}
	}
	for name, mutate := range map[string]func(b []byte) []byte{
		"version 1":           func(b []byte) []byte { b[0] = 1; return b },
		"reserved header":     func(b []byte) []byte { b[3] = 1; return b },
		"one entry short":     func(b []byte) []byte { return b[:len(b)-queryapi.BinaryStateEntryBytes] },
		"a byte long":         func(b []byte) []byte { return append(b, 0) },
		"lanes not ascending": func(b []byte) []byte { b[16+12] = 0; return b },
		"reserved entry":      func(b []byte) []byte { b[16+2] = 1; return b },
		"stale with a depth":  func(b []byte) []byte { b[16+12+8] = 1; return b },
		"exact without depth": func(b []byte) []byte { copy(b[16+8:], []byte{255, 255, 255, 255}); return b },
		"depth above blocks":  func(b []byte) []byte { b[16+8] = 10; return b },
		"lane 64":             func(b []byte) []byte { b[16+3*12] = 64; return b },
		"shorter than header": func(b []byte) []byte { return b[:15] },
	} {
		c := append([]byte(nil), b...)
		if _, err := queryapi.DecodeBinaryStatesReply(mutate(c)); !errors.Is(err, queryapi.ErrBinaryReply) {
			t.Errorf("%s: %v, want ErrBinaryReply", name, err)
		}
	}
	// A state of a later indexer reads as unknown, with or without a depth.
	c := append([]byte(nil), b...)
	c[16+12+1] = 9
	if got, err := queryapi.DecodeBinaryStatesReply(c); err != nil || got.Lanes[1].State != schemas.LaneStateUnknown {
		t.Errorf("a later state: %+v, %v", got.Lanes, err)
	}
}

// TestBinaryRequestParameters: max_age_ms and reply are taken once each, reply only as 1 or 2,
// and BinaryReplyVersionOf gives the layout asked for.
func TestBinaryRequestParameters(t *testing.T) {
	body := queryapi.AppendBinaryRequest(nil, []uint64{7})
	req, err := queryapi.DecodeBinaryRequest(body, nil, "max_age_ms=250&reply=2&lane_mask=3")
	if err != nil || req.MaxAgeMillis != schemas.Some[int64](250) || req.LaneMask != schemas.Some[uint16](3) {
		t.Fatalf("%+v, %v", req, err)
	}
	for q, v := range map[string]uint8{"": 1, "reply=1": 1, "reply=2": 2, "reply=3": 3, "lane_mask=1": 1, "reply=2&max_age_ms=0": 2} {
		if got := queryapi.BinaryReplyVersionOf(q); got != v {
			t.Errorf("BinaryReplyVersionOf(%q) = %d, want %d", q, got, v)
		}
	}
	for _, q := range []string{"reply=4", "reply=0", "reply=2&reply=2", "lane_mask=18446744073709551616", "lane_mask=-1", "max_age_ms=-1", "max_age_ms=x", "max_age_ms=1&max_age_ms=2", "top_k=1"} {
		if _, err := queryapi.DecodeBinaryRequest(body, nil, q); !errors.Is(err, queryapi.ErrBadRequest) {
			t.Errorf("%q: %v, want ErrBadRequest", q, err)
		}
	}
}

// FuzzDecodeBinaryStatesReply: whatever decodes encodes back to the same bytes (the layout has
// one encoding per reply), and nothing panics.
func FuzzDecodeBinaryStatesReply(f *testing.F) {
	r := schemas.QueryReply{QueryBlocks: 3, ReplyTime: time.UnixMicro(5), Lanes: []schemas.LaneMatch{{Lane: 2, Depth: 3}},
		LaneStates: []schemas.LaneState{{Lane: 2, State: schemas.LaneExact}, {Lane: 7, State: schemas.LaneStale, AgeMillis: schemas.Some[int64](4)}}}
	f.Add(queryapi.AppendBinaryStatesReply(nil, &r))
	f.Add([]byte{2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := queryapi.DecodeBinaryStatesReply(b)
		if err != nil {
			return
		}
		back := schemas.QueryReply{QueryBlocks: got.QueryBlocks, ReplyTime: got.ReplyTime}
		for _, l := range got.Lanes {
			if l.State == schemas.LaneStateUnknown {
				return // a later state's byte is not kept
			}
			s := schemas.LaneState{Lane: l.Lane, State: l.State}
			if l.AgeMillis != queryapi.BinaryAbsent {
				s.AgeMillis = schemas.Some(int64(l.AgeMillis))
			}
			back.LaneStates = append(back.LaneStates, s)
			if l.Depth != queryapi.BinaryAbsent {
				back.Lanes = append(back.Lanes, schemas.LaneMatch{Lane: l.Lane, Depth: l.Depth})
			}
		}
		if enc := queryapi.AppendBinaryStatesReply(nil, &back); string(enc) != string(b) {
			t.Fatalf("decoded %+v re-encodes to\n%x, not\n%x", got, enc, b)
		}
	})
}
