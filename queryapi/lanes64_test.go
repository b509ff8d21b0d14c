package queryapi

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/schemas"
)

// TestLaneMasksBeyond16 (consumer §16): the JSON and binary requests take a lane mask of up to 64
// bits (within lanes 0..15 the Kafka form's 16-bit lane_mask, beyond them its lane_mask64), which
// RequestOf writes back; Widen makes any request one of a reader of 64 lanes.
func TestLaneMasksBeyond16(t *testing.T) {
	t.Parallel()
	for body, want := range map[string]schemas.QueryRequest{
		`{"local_block_hashes":[1]}`:                                  {Input: schemas.InputLocalBlockHashes},
		`{"local_block_hashes":[1],"lane_mask":5}`:                    {Input: schemas.InputLocalBlockHashes, LaneMask: schemas.Some[uint16](5)},
		`{"local_block_hashes":[1],"lane_mask":65536}`:                {Input: schemas.InputLocalBlockHashes, LaneMask64: schemas.Some[uint64](1 << 16)},
		`{"local_block_hashes":[1],"lane_mask":1099511627777}`:        {Input: schemas.InputLocalBlockHashes, LaneMask64: schemas.Some[uint64](1<<40 | 1)},
		`{"local_block_hashes":[1],"lane_mask":18446744073709551615}`: {Input: schemas.InputLocalBlockHashes, LaneMask64: schemas.Some(schemas.AllLanes64)},
	} {
		got, _, err := DecodeRequest([]byte(body))
		if err != nil || got.LaneMask != want.LaneMask || got.LaneMask64 != want.LaneMask64 {
			t.Errorf("%s: %+v, %v; want lane_mask %v, lane_mask64 %v", body, got, err, want.LaneMask, want.LaneMask64)
		}
		out := RequestOf(&got)
		switch m, wide := got.Lanes(); {
		case m == schemas.AllLanes64 && out.LaneMask != nil:
			t.Errorf("%s: RequestOf writes lane_mask %d for every lane", body, *out.LaneMask)
		case m != schemas.AllLanes64 && (out.LaneMask == nil || *out.LaneMask != m):
			t.Errorf("%s: RequestOf writes lane_mask %v, want %d (wide %v)", body, out.LaneMask, m, wide)
		}
	}
	if _, _, err := DecodeRequest([]byte(`{"local_block_hashes":[1],"lane_mask":18446744073709551616}`)); !errors.Is(err, ErrBadRequest) {
		t.Errorf("lane_mask 2^64: %v, want ErrBadRequest", err)
	}
	req, err := DecodeBinaryRequest(make([]byte, 8), nil, "lane_mask=1099511627776&reply=3")
	if err != nil || req.LaneMask.Valid || req.LaneMask64 != schemas.Some[uint64](1<<40) {
		t.Errorf("binary lane_mask 2^40: %+v, %v", req, err)
	}
	for _, tc := range []struct {
		in   schemas.QueryRequest
		want uint64
	}{
		{schemas.QueryRequest{}, schemas.AllLanes64},
		{schemas.QueryRequest{LaneMask: schemas.Some[uint16](6)}, 6},
		{schemas.QueryRequest{LaneMask64: schemas.Some[uint64](1 << 50)}, 1 << 50},
	} {
		q := tc.in
		Widen(&q)
		if m, wide := q.Lanes(); !wide || m != tc.want || q.LaneMask.Valid {
			t.Errorf("Widen(%+v): %+v, lanes %#x wide %v; want %#x", tc.in, q, m, wide, tc.want)
		}
	}
}

// wideReply is an OK reply over lanes 3, 40 and 63, lane 40 incomplete.
func wideReply() schemas.QueryReply {
	r := schemas.QueryReply{CorrelationID: "w", Status: schemas.QueryOK, QueryBlocks: 9, ReplyTime: time.UnixMicro(1_780_000_000_000_000).UTC(),
		Lanes:      []schemas.LaneMatch{{Lane: 3, DcID: 3, Pool: "p3", Depth: 9}, {Lane: 40, DcID: 40, Pool: "p40", Depth: 4}, {Lane: 63, DcID: 63, Pool: "p63", Depth: 0}},
		LaneStates: []schemas.LaneState{{Lane: 3, State: schemas.LaneExact}, {Lane: 40, State: schemas.LaneIncomplete}, {Lane: 63, State: schemas.LaneExact}}}
	r.SetMasks(1<<3|1<<40|1<<63, 1<<40)
	return r
}

// TestWideAnswers (consumer §16): the JSON answer of a reply beyond lane 15 carries the 64-bit
// masks (exactly as encoding/json writes them) and reads back to the same reply; a reader of
// today's shape (16-bit masks) refuses it rather than read a mask cut short. The binary reply=3
// layout carries the same answer; reply=1 is refused for a selection beyond lane 15.
func TestWideAnswers(t *testing.T) {
	t.Parallel()
	r := wideReply()
	resp := ResponseOf(&r, nil)
	if resp.ReadyLanes != 1<<3|1<<40|1<<63 || resp.IncompleteLanes != 1<<40 || len(resp.Matches) != 3 ||
		!resp.Matches[1].Incomplete || resp.Matches[1].Lane != 40 || resp.Matches[2].Lane != 63 {
		t.Fatalf("ResponseOf: %+v", resp)
	}
	plain, err := AppendResponse(nil, &resp)
	if err != nil {
		t.Fatal(err)
	}
	std, _ := json.Marshal(resp)
	if string(plain) != string(std) || !strings.Contains(string(plain), `"ready_lanes":9223373136366403592`) {
		t.Fatalf("plain %s\nencoding/json %s", plain, std)
	}
	var back PrefixMatchResponse
	if err := json.Unmarshal(plain, &back); err != nil {
		t.Fatal(err)
	}
	got, err := back.Reply()
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, r) {
		t.Fatalf("read back %+v\nwant %+v", got, r)
	}
	var today struct {
		ReadyLanes uint16 `json:"ready_lanes"`
	}
	if err := json.Unmarshal(plain, &today); err == nil {
		t.Fatalf("a reader of 16-bit masks read %#x", today.ReadyLanes)
	}

	bin, err := DecodeBinaryReply(AppendBinaryReplyWide(nil, &r))
	if err != nil || bin.ReadyLanes != r.ReadyMask() || bin.IncompleteLanes != 1<<40 {
		t.Fatalf("wide binary reply: %+v, %v", bin, err)
	}
	for _, m := range r.Lanes {
		if d, ok := bin.Depth(m.Lane); !ok || d != m.Depth {
			t.Errorf("wide binary reply, lane %d: %d, %v; want %d", m.Lane, d, ok, m.Depth)
		}
	}
	if err := CheckBinaryReplyLanes(BinaryReplyVersion, 1<<3|1<<40); !errors.Is(err, ErrBadRequest) || !errors.Is(err, ErrBinaryReplyLanes) ||
		!strings.Contains(err.Error(), "reply=3") || !strings.Contains(err.Error(), "up to 40") {
		t.Errorf("reply=1 beyond lane 15: %v", err)
	}
	for _, tc := range []struct {
		version  uint8
		selected uint64
	}{{BinaryReplyVersion, 0xFFFF}, {BinaryReplyWideVersion, 1 << 63}, {BinaryReplyStatesVersion, 1 << 63}} {
		if err := CheckBinaryReplyLanes(tc.version, tc.selected); err != nil {
			t.Errorf("reply %d, lanes %#x: %v", tc.version, tc.selected, err)
		}
	}
}
