package queryapi_test

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/queryapi"
	"github.com/ckf-stream/ckf-stream/schemas"
)

// TestRequestOfCarriesEveryField: RequestOf gives the JSON body every field of a token-id and of
// a hash query.
func TestRequestOfCarriesEveryField(t *testing.T) {
	req := schemas.QueryRequest{CorrelationID: "c1", Input: schemas.InputTokenIDs, Tokens: schemas.AppendU32s(nil, []uint32{1, 2, 3}),
		BlockSize: 2, LoraName: "l", CacheNamespace: "n", LaneMask: schemas.Some(uint16(6))}
	got := queryapi.RequestOf(&req)
	mask := uint64(6)
	want := queryapi.PrefixMatchRequest{CorrelationID: "c1", TokenIDs: []uint32{1, 2, 3}, BlockSize: 2, LoraName: "l", CacheNamespace: "n", LaneMask: &mask}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%+v, want %+v", got, want)
	}
	got = queryapi.RequestOf(&schemas.QueryRequest{Input: schemas.InputLocalBlockHashes, Hashes: schemas.AppendU64s(nil, []uint64{7, 8})})
	if !reflect.DeepEqual(got.LocalBlockHashes, []uint64{7, 8}) || got.TokenIDs != nil || got.LaneMask != nil {
		t.Fatalf("hashes: %+v", got)
	}
}

// TestRequestOfAnEmptyQuery: an empty hash query is written as an empty list, not as null
// (which the server reads as no input).
func TestRequestOfAnEmptyQuery(t *testing.T) {
	b, err := json.Marshal(queryapi.RequestOf(&schemas.QueryRequest{Input: schemas.InputLocalBlockHashes}))
	if err != nil || !strings.Contains(string(b), `"local_block_hashes":[]`) || !strings.Contains(string(b), `"token_ids":null`) {
		t.Fatalf("%s, %v", b, err)
	}
}

// TestRequestOfDecodesBack: what a client writes with RequestOf, the server's DecodeRequest reads
// back as the same query (the fields the JSON form carries).
func TestRequestOfDecodesBack(t *testing.T) {
	for _, q := range []schemas.QueryRequest{
		{CorrelationID: "h", Input: schemas.InputLocalBlockHashes, Hashes: schemas.AppendU64s(nil, []uint64{1, 1 << 63, 0}), LaneMask: schemas.Some(uint16(5))},
		{CorrelationID: "e", Input: schemas.InputLocalBlockHashes, Hashes: schemas.AppendU64s(nil, nil)},
		{CorrelationID: "t", Input: schemas.InputTokenIDs, Tokens: schemas.AppendU32s(nil, []uint32{9, 8, 7, 6, 5}), BlockSize: 2, LoraName: "l", CacheNamespace: "n"},
		{CorrelationID: "x", Input: schemas.InputTokenIDs, Tokens: schemas.AppendU32s(nil, []uint32{9, 8, 7, 6, 5}), BlockSize: 2,
			BlockExtraKeys: []ckf.ExtraKeys{{ckf.ExtraStringValue("salt-1"), ckf.ExtraTupleValue(ckf.ExtraStringValue("img"), ckf.ExtraIntValue(-1))}, nil, {ckf.ExtraBytesValue([]byte{1})}},
			MaxAgeMillis:   schemas.Some[int64](20)},
	} {
		body, err := json.Marshal(queryapi.RequestOf(&q))
		if err != nil {
			t.Fatal(err)
		}
		got, extra, err := queryapi.DecodeRequest(body)
		if err != nil || !reflect.DeepEqual(extra, q.BlockExtraKeys) {
			t.Fatalf("%s: %v, extra %v", body, err, extra)
		}
		if len(q.Hashes) == 0 && q.Input == schemas.InputLocalBlockHashes {
			q.Hashes = schemas.PackedU64{} // the JSON form's empty list reads as empty, not nil
		}
		if !reflect.DeepEqual(got, q) {
			t.Fatalf("%s:\nread %+v\nwant %+v", body, got, q)
		}
		rq := queryapi.RequestOf(&q)
		if back, err := rq.Request(); err != nil || !reflect.DeepEqual(back, got) {
			t.Fatalf("%s: Request gives %+v, %v; DecodeRequest %+v", body, back, err, got)
		}
	}
}

// TestRequestRulesAreDecodeRequests: PrefixMatchRequest.Request refuses what DecodeRequest
// refuses of the same body, in the same words (one copy of the rules), and accepts what it
// accepts.
func TestRequestRulesAreDecodeRequests(t *testing.T) {
	mask, age, bigAge := uint64(1<<40|1), uint64(5), uint64(1<<63)
	for name, r := range map[string]queryapi.PrefixMatchRequest{
		"no input":              {},
		"both inputs":           {LocalBlockHashes: []uint64{1}, TokenIDs: []uint32{1}, BlockSize: 1},
		"block size of hashes":  {LocalBlockHashes: []uint64{1}, BlockSize: 4},
		"lora of hashes":        {LocalBlockHashes: []uint64{1}, LoraName: "l"},
		"extra keys of hashes":  {LocalBlockHashes: []uint64{1}, BlockExtraKeys: []ckf.ExtraKeys{nil}},
		"no block size":         {TokenIDs: []uint32{1, 2}},
		"block size too large":  {TokenIDs: []uint32{1, 2}, BlockSize: schemas.MaxBlockSize + 1},
		"extra keys past end":   {TokenIDs: []uint32{1, 2}, BlockSize: 2, BlockExtraKeys: []ckf.ExtraKeys{nil, nil}},
		"age too large":         {LocalBlockHashes: []uint64{1}, MaxAgeMillis: &bigAge},
		"fine, wide mask":       {LocalBlockHashes: []uint64{1, 2}, LaneMask: &mask, MaxAgeMillis: &age},
		"fine, empty":           {LocalBlockHashes: []uint64{}},
		"fine, tokens and keys": {TokenIDs: []uint32{1, 2, 3}, BlockSize: 2, LoraName: "l", BlockExtraKeys: []ckf.ExtraKeys{{ckf.ExtraIntValue(1)}}},
	} {
		body, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		want, _, werr := queryapi.DecodeRequest(body)
		got, gerr := r.Request()
		if fmt.Sprint(gerr) != fmt.Sprint(werr) || (werr == nil && !reflect.DeepEqual(got, want)) {
			t.Errorf("%s: Request gives %+v, %v; DecodeRequest %+v, %v", name, got, gerr, want, werr)
		}
		if strings.HasPrefix(name, "fine") != (gerr == nil) {
			t.Errorf("%s: error %v", name, gerr)
		}
	}
}

// TestResponseReply: Reply reads a JSON answer back into the reply the Kafka path gives, and
// refuses an unknown status or a DC id that is not hexadecimal.
func TestResponseReply(t *testing.T) {
	resp := queryapi.PrefixMatchResponse{CorrelationID: "x", Status: "OK", QueryBlocks: 4, ReadyLanes: 1,
		Matches: []queryapi.DCMatch{{Lane: 0, DcID: "000000000000dc01", Pool: "p", Depth: 3}}}
	r, err := resp.Reply()
	want := schemas.QueryReply{CorrelationID: "x", Status: schemas.QueryOK, QueryBlocks: 4, ReadyLanes: 1,
		Lanes: []schemas.LaneMatch{{Lane: 0, DcID: 0xdc01, Pool: "p", Depth: 3}}}
	if err != nil || !reflect.DeepEqual(r, want) {
		t.Fatalf("%+v, %v", r, err)
	}
	if _, err := (&queryapi.PrefixMatchResponse{Status: "MAYBE"}).Reply(); err == nil {
		t.Fatal("an unknown status was accepted")
	}
	if _, err := (&queryapi.PrefixMatchResponse{Status: "OK", Matches: []queryapi.DCMatch{{DcID: "zz"}}}).Reply(); err == nil {
		t.Fatal("a bad DC id was accepted")
	}
}

// TestResponseOfRoundTrip: ResponseOf and Reply are inverse on every status, the incomplete
// lanes marked on their matches, and a reply without lanes has an empty list of matches, never
// null.
func TestResponseOfRoundTrip(t *testing.T) {
	for _, r := range []schemas.QueryReply{
		{CorrelationID: "ok", Status: schemas.QueryOK, QueryBlocks: 9, ReadyLanes: 0b1001, IncompleteLanes: 0b1000,
			Lanes: []schemas.LaneMatch{{Lane: 0, DcID: 0xdc01, Pool: "d/000000000000dc01", Depth: 9}, {Lane: 3, DcID: 0xdc04, Pool: "d/000000000000dc04", Depth: 2}}},
		{CorrelationID: "u", Status: schemas.QueryUnavailable, ErrorMessage: "no eligible lane is ready", QueryBlocks: 3},
		{Status: schemas.QueryInvalidRequest, ErrorMessage: "bad"},
		{CorrelationID: "states", Status: schemas.QueryOK, QueryBlocks: 4, ReadyLanes: 0b10, ReplyTime: time.UnixMicro(1_780_000_000_123_456).UTC(),
			Lanes: []schemas.LaneMatch{{Lane: 1, DcID: 0xdc02, Pool: "d/000000000000dc02", Depth: 0}},
			LaneStates: []schemas.LaneState{{Lane: 0, State: schemas.LaneStale, AgeMillis: schemas.Some[int64](70_000)},
				{Lane: 1, State: schemas.LaneExact, AgeMillis: schemas.Some[int64](0)}, {Lane: 4, State: schemas.LaneUnavailable}}},
	} {
		resp := queryapi.ResponseOf(&r, nil)
		for i, la := range resp.Lanes {
			s := r.LaneStates[i]
			if la.Lane != s.Lane || la.State != queryapi.LaneStateName(s.State) || (la.AgeMillis != nil) != s.AgeMillis.Valid ||
				(la.Depth != nil) != s.State.HasDepth() {
				t.Errorf("%s: lane answer %d %+v for state %+v", r.CorrelationID, i, la, s)
			}
			if la.Depth != nil && (*la.Depth != 0 || la.DcID != "000000000000dc02") {
				t.Errorf("%s: lane 1's depth %d, DC %q", r.CorrelationID, *la.Depth, la.DcID)
			}
		}
		if resp.Matches == nil {
			t.Fatalf("%+v: matches are null", r)
		}
		for _, m := range resp.Matches {
			if m.Incomplete != (r.IncompleteLanes&(1<<m.Lane) != 0) {
				t.Fatalf("lane %d: incomplete %v, mask %#x", m.Lane, m.Incomplete, r.IncompleteLanes)
			}
		}
		back, err := resp.Reply()
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Lanes) == 0 {
			back.Lanes = r.Lanes
		}
		if !reflect.DeepEqual(back, r) {
			t.Fatalf("round trip:\n%+v\n%+v", back, r)
		}
		if got := queryapi.StatusCode(r.Status); got != []int{200, 503, 400}[r.Status] {
			t.Fatalf("%s: status code %d", r.Status, got)
		}
	}
}

// TestDecodeErrorsNameNoGoType: an error about a value of the wrong JSON type names the type the
// API documents, never a Go type of the server (the messages once read "[]indexer.wireHash" and
// "indexer.prefixMatchWire").
func TestDecodeErrorsNameNoGoType(t *testing.T) {
	for body, want := range map[string]string{
		`{"local_block_hashes":1}`:           "field local_block_hashes: number is not a valid []uint64",
		`{"token_ids":"x","block_size":2}`:   "field token_ids: string is not a valid []uint32",
		`[]`:                                 "the body is a JSON array, not an object",
		`"x"`:                                "the body is a JSON string, not an object",
		`{"local_block_hashes":[1],"x":1}`:   `unknown field "x"`,
		`{"token_ids":[1],"block_size":"4"}`: "field block_size: string is not a valid uint32",
	} {
		_, _, err := queryapi.DecodeRequest([]byte(body))
		if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "wire") || strings.Contains(err.Error(), "queryapi.") {
			t.Errorf("%s: %v, want %q", body, err, want)
		}
	}
}

// TestResponseIntoReusesItsLists: ResponseInto into one response, reply after reply (more lanes,
// then fewer, then none), gives each time what ResponseOf gives, byte for byte in JSON; a
// searched lane's DC id is the reply's even where the lane map names another DC.
func TestResponseIntoReusesItsLists(t *testing.T) {
	pools := queryapi.LanePools(func(l uint8) (ckf.PoolID, bool) {
		switch l {
		case 1:
			return ckf.PoolID{Dc: 0xdc02}, true
		case 3:
			return ckf.PoolID{Dc: 0x9999}, true // not the reply's DC for lane 3
		}
		return ckf.PoolID{}, false
	})
	wide := schemas.QueryReply{CorrelationID: "wide", Status: schemas.QueryOK, QueryBlocks: 4, ReadyLanes: 0b1010,
		Lanes: []schemas.LaneMatch{{Lane: 1, DcID: 0xdc02, Pool: "p1", Depth: 3}, {Lane: 3, DcID: 0xdc04, Pool: "p3", Depth: 1}},
		LaneStates: []schemas.LaneState{{Lane: 0, State: schemas.LaneUnavailable}, {Lane: 1, State: schemas.LaneExact, AgeMillis: schemas.Some[int64](5)},
			{Lane: 3, State: schemas.LaneExact}}}
	narrow := schemas.QueryReply{CorrelationID: "narrow", Status: schemas.QueryOK, QueryBlocks: 2, ReadyLanes: 0b10,
		Lanes: []schemas.LaneMatch{{Lane: 1, DcID: 0xdc02, Pool: "p1", Depth: 2}}, LaneStates: []schemas.LaneState{{Lane: 1, State: schemas.LaneExact}}}
	none := schemas.QueryReply{CorrelationID: "none", Status: schemas.QueryUnavailable, ErrorMessage: "no lane"}
	var into queryapi.PrefixMatchResponse
	for _, r := range []schemas.QueryReply{wide, narrow, none, wide} {
		queryapi.ResponseInto(&into, &r, pools)
		got, _ := json.Marshal(into)
		want, _ := json.Marshal(queryapi.ResponseOf(&r, pools))
		if string(got) != string(want) {
			t.Fatalf("%s:\ninto %s\nof   %s", r.CorrelationID, got, want)
		}
		if r.CorrelationID == "wide" && into.Matches[1].DcID != "000000000000dc04" {
			t.Fatalf("lane 3's DC id %q, want the reply's 000000000000dc04", into.Matches[1].DcID)
		}
	}
}

// TestDecodeRequestBufReusesItsBuffer: DecodeRequestBuf reads as DecodeRequest does, into the
// buffer it is given and hands back, and a second body of the same size packs into it without
// allocating.
func TestDecodeRequestBufReusesItsBuffer(t *testing.T) {
	bodies := [][]byte{[]byte(`{"local_block_hashes":[1,2,3]}`), []byte(`{"token_ids":[4,5,6,7],"block_size":2}`), []byte(`{"local_block_hashes":[9,8,7]}`)}
	var buf []byte
	for _, body := range bodies {
		want, _, werr := queryapi.DecodeRequest(body)
		got, _, b, err := queryapi.DecodeRequestBuf(body, buf)
		if err != nil || werr != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: %+v, %v; DecodeRequest %+v, %v", body, got, err, want, werr)
		}
		buf = b
	}
	if n := testing.AllocsPerRun(10, func() { _, _, buf, _ = queryapi.DecodeRequestBuf(bodies[0], buf[:0]) }); n != 0 {
		t.Fatalf("%v allocations a body, want 0 with a buffer", n)
	}
}
