package queryapi

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/schemas"
)

// plainBodies are requests parsePlainRequest must read itself.
var plainBodies = []string{
	`{}`,
	`{"local_block_hashes":[1,2,3]}`,
	" \t\r\n{ \"local_block_hashes\" : [ 0 , 18446744073709551615 ] , \"lane_mask\" : 65535 } \n",
	`{"local_block_hashes":[]}`,
	`{"correlation_id":"router-7 / req 12","local_block_hashes":[42],"lane_mask":0}`,
	`{"correlation_id":""}`,
	`{"token_ids":[0,4294967295,7],"block_size":16,"lora_name":"adapter-a","cache_namespace":"ns"}`,
	`{"token_ids":[],"block_size":4294967295}`,
	`{"lane_mask":18446744073709551615}`,
	`{"local_block_hashes":[1,2],"token_ids":null}`,
	`{"local_block_hashes":null}`,
	`{"correlation_id":null,"lane_mask":null,"block_size":null,"lora_name":null,"cache_namespace":null,"token_ids":[9]}`,
	`{"lane_mask" : null , "local_block_hashes" : [ 3 ] }`,
	`{"local_block_hashes":[5],"max_age_ms":250}`,
	`{"max_age_ms":0,"token_ids":[1],"block_size":1}`,
	`{"max_age_ms":null}`,
}

// declinedBodies are requests outside the plain shape: parsePlainRequest must leave them to
// encoding/json (which accepts some and refuses others).
var declinedBodies = []string{
	``,
	` `,
	`[]`,
	`null`,
	`{`,
	`{"local_block_hashes":[1,2]`,
	`{"local_block_hashes":[1,2]} {}`,
	`{"local_block_hashes":[1,2]} x`,
	`{"local_block_hashes":[1,2],}`,
	`{"local_block_hashes":[1,2,]}`,
	`{"local_block_hashes":[,]}`,
	`{"LOCAL_BLOCK_HASHES":[1]}`,
	`{"local_block_hashes":[1],"local_block_hashes":[2]}`,
	`{"lane_mask":1,"lane_mask":2}`,
	`{"local_block_hashes":[1,null]}`,
	`{"local_block_hashes":nul}`,
	`{"local_block_hashes":nullx}`,
	`{"local_block_hashes":null,"local_block_hashes":[1]}`,
	`{"local_block_hashes":[-1]}`,
	`{"local_block_hashes":[1.0]}`,
	`{"local_block_hashes":[1e3]}`,
	`{"local_block_hashes":[01]}`,
	`{"local_block_hashes":[18446744073709551616]}`,
	`{"local_block_hashes":[99999999999999999999]}`,
	`{"local_block_hashes":["1"]}`,
	`{"local_block_hashes":1}`,
	`{"token_ids":[4294967296],"block_size":1}`,
	`{"token_ids":[1],"block_size":4294967296}`,
	`{"block_size":-1}`,
	`{"max_age_ms":-1}`,
	`{"max_age_ms":1,"max_age_ms":2}`,
	`{"correlation_id":"a\"b"}`,
	`{"correlation_id":"tab\there"}`,
	`{"correlation_id":"é"}`,
	`{"correlation_id":5}`,
	`{"correlati\u006fn_id":"x"}`,
	`{"block_extra_keys":[]}`,
	`{"unknown":1}`,
	"\xef\xbb\xbf{}",
	`{"local_block_hashes":[1]}` + "\x00",
}

// TestPlainRequestMatchesEncodingJSON: a plain request reads as encoding/json reads it (the
// same fields, an empty list as an empty list, not an absent one); anything else is declined.
func TestPlainRequestMatchesEncodingJSON(t *testing.T) {
	for _, body := range plainBodies {
		got, ok := parsePlainRequest([]byte(body))
		if !ok {
			t.Errorf("%q: declined, want read", body)
			continue
		}
		want, err := decodeRequestJSON([]byte(body))
		if err != nil {
			t.Errorf("%q: encoding/json refuses it (%v); the plain shape must be a subset", body, err)
			continue
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%q:\nplain         %+v\nencoding/json %+v", body, got, want)
		}
	}
	for _, body := range declinedBodies {
		if got, ok := parsePlainRequest([]byte(body)); ok {
			t.Errorf("%q: read as %+v, want declined", body, got)
		}
	}
}

// FuzzPlainRequest: whatever parsePlainRequest reads, encoding/json reads the same way.
func FuzzPlainRequest(f *testing.F) {
	for _, b := range append(append([]string{}, plainBodies...), declinedBodies...) {
		f.Add([]byte(b))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		got, ok := parsePlainRequest(body)
		if !ok {
			return
		}
		want, err := decodeRequestJSON(body)
		if err != nil {
			t.Fatalf("%q: read as plain, refused by encoding/json: %v", body, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%q:\nplain         %+v\nencoding/json %+v", body, got, want)
		}
	})
}

// TestLeadingDigits: every byte value at every position of the word, the bytes before it digits
// and the bytes after it random (among them the values that carry), against a byte-by-byte count.
func TestLeadingDigits(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for pos := range 8 {
		for v := range 256 {
			for range 8 {
				var w [8]byte
				for k := range w {
					switch {
					case k < pos:
						w[k] = '0' + byte(r.IntN(10))
					case k == pos:
						w[k] = byte(v)
					default:
						w[k] = byte(r.IntN(256))
					}
				}
				want := 0
				for want < 8 && w[want]-'0' <= 9 {
					want++
				}
				if got := leadingDigits(binary.LittleEndian.Uint64(w[:])); got != want {
					t.Fatalf("leadingDigits(%q) = %d, want %d", w[:], got, want)
				}
			}
		}
	}
}

// TestEightDigits: eight ASCII digits, from all zeros to all nines, against strconv.
func TestEightDigits(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for i := range 100_000 {
		n := uint64(r.IntN(100_000_000))
		switch i {
		case 0:
			n = 0
		case 1:
			n = 99_999_999
		}
		s := fmt.Sprintf("%08d", n)
		if got := eightDigits(binary.LittleEndian.Uint64([]byte(s))); got != n {
			t.Fatalf("eightDigits(%q) = %d", s, got)
		}
	}
}

// BenchmarkPlainRequest reads a 64-block request of random 64-bit hashes, as a router sends it,
// by parsePlainRequest and by encoding/json (decodeRequestJSON, the path it spares).
func BenchmarkPlainRequest(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	hashes := make([]uint64, 64)
	for i := range hashes {
		hashes[i] = r.Uint64()
	}
	body, err := json.Marshal(map[string]any{"correlation_id": "router-1", "local_block_hashes": hashes})
	if err != nil {
		b.Fatal(err)
	}
	b.Run("plain", func(b *testing.B) {
		for b.Loop() {
			if _, ok := parsePlainRequest(body); !ok {
				b.Fatal("declined")
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		for b.Loop() {
			if _, err := decodeRequestJSON(body); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// responseCases are replies appendResponse must encode as encoding/json does (plain ones) or
// leave to it (the others).
func responseCases() []PrefixMatchResponse {
	sixteen := make([]DCMatch, 16)
	for i := range sixteen {
		sixteen[i] = DCMatch{Lane: uint8(i), DcID: fmt.Sprintf("dc-%d", i), Pool: fmt.Sprintf("pool %d/a", i), Depth: uint32(i * 1000), Incomplete: i%3 == 0}
	}
	lanes := make([]LaneAnswer, 16)
	ages, depths := make([]int64, 16), make([]uint32, 16)
	for i := range lanes {
		ages[i], depths[i] = int64(i*i*1000), uint32(i*7)
		lanes[i] = LaneAnswer{Lane: uint8(i), DcID: fmt.Sprintf("dc-%d", i), Pool: fmt.Sprintf("pool %d/a", i),
			State: LaneStateName(schemas.LaneAnswerState(i % 5))}
		if i%4 != 3 {
			lanes[i].AgeMillis = &ages[i]
		}
		if i%5 == 1 || i%5 == 2 {
			lanes[i].Depth = &depths[i]
		}
	}
	replied := time.Date(2026, 12, 6, 11, 30, 0, 123456000, time.UTC)
	return []PrefixMatchResponse{
		{},
		{Status: "OK", Matches: []DCMatch{}, Lanes: []LaneAnswer{}},
		{CorrelationID: "http-7", Status: "OK", QueryBlocks: 4294967295, ReadyLanes: 65535, IncompleteLanes: 9, Matches: sixteen,
			Lanes: lanes, ReplyTime: replied},
		{Status: "OK", Matches: []DCMatch{}, Lanes: lanes[:3], ReplyTime: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)},
		{Status: "UNAVAILABLE", Error: "no requested lane is ready (lanes 0-3 are replaying)"},
		{Status: "INVALID_REQUEST", Error: `bad request: duplicate key "lane_mask"`},
		{Status: "OK", CorrelationID: "a<b"},
		{Status: "OK", CorrelationID: "a&b"},
		{Status: "OK", CorrelationID: "tab\there"},
		{Status: "OK", CorrelationID: "é"},
		{Status: "OK", CorrelationID: "\xff"},
		{Status: "OK", Matches: []DCMatch{{DcID: "back\\slash"}}},
		{Status: "OK", Matches: []DCMatch{{Pool: "\u2028"}}},
		{Status: "OK", Lanes: []LaneAnswer{{State: "exact", Pool: "<p>"}}},
		{Status: "OK", ReplyTime: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)}, // MarshalJSON refuses the year
	}
}

// TestAppendResponseMatchesEncodingJSON: a reply whose strings are plain is encoded byte for byte
// as encoding/json encodes it; any other is left to encoding/json.
func TestAppendResponseMatchesEncodingJSON(t *testing.T) {
	encoded := 0
	for _, r := range responseCases() {
		want, err := json.Marshal(r)
		if err != nil { // what encoding/json refuses, appendResponse leaves to it
			if _, ok := appendResponse(nil, &r); ok {
				t.Errorf("%+v: encoding/json refuses it (%v), appendResponse encoded it", r, err)
			}
			continue
		}
		got, ok := appendResponse([]byte("prefix"), &r)
		if !ok {
			if string(got) != "prefix" {
				t.Errorf("%+v: declined but appended %q", r, got)
			}
			continue
		}
		encoded++
		if string(got) != "prefix"+string(want) {
			t.Errorf("%+v:\nappendResponse %s\nencoding/json  %s", r, got[len("prefix"):], want)
		}
	}
	if encoded != 5 { // the first five; an error quoting a key is not plain
		t.Errorf("encoded %d of the cases, want the 5 plain ones", encoded)
	}
}

// FuzzAppendResponse: whatever appendResponse encodes, encoding/json encodes the same way.
func FuzzAppendResponse(f *testing.F) {
	for _, r := range responseCases() {
		var dc, pool string
		if len(r.Matches) > 0 {
			dc, pool = r.Matches[0].DcID, r.Matches[0].Pool
		}
		f.Add(r.CorrelationID, r.Status, r.Error, dc, pool, r.QueryBlocks, r.ReadyLanes, uint8(len(r.Matches)), r.Matches == nil, r.ReplyTime.UnixNano())
	}
	f.Fuzz(func(t *testing.T, id, status, msg, dc, pool string, blocks uint32, lanes uint64, n uint8, null bool, replied int64) {
		r := PrefixMatchResponse{CorrelationID: id, Status: status, Error: msg, QueryBlocks: blocks, ReadyLanes: lanes, IncompleteLanes: ^lanes << 7}
		if replied != 0 {
			r.ReplyTime = time.Unix(0, replied).UTC()
		}
		if !null {
			r.Matches = make([]DCMatch, n%17)
			for i := range r.Matches {
				r.Matches[i] = DCMatch{Lane: uint8(i), DcID: dc, Pool: pool, Depth: blocks >> i, Incomplete: lanes&(1<<i) != 0}
			}
			age, depth := int64(blocks)-int64(lanes), blocks/3
			r.Lanes = make([]LaneAnswer, n%17)
			for i := range r.Lanes {
				r.Lanes[i] = LaneAnswer{Lane: uint8(i), DcID: dc, Pool: pool, State: LaneStateName(schemas.LaneAnswerState(i % 6))}
				if lanes&(1<<i) != 0 {
					r.Lanes[i].AgeMillis = &age
				}
				if (lanes>>1)&(1<<i) != 0 {
					r.Lanes[i].Depth = &depth
				}
			}
		}
		got, ok := appendResponse(nil, &r)
		if !ok {
			return
		}
		want, err := json.Marshal(r)
		if err != nil {
			t.Fatalf("appendResponse encoded what encoding/json refuses (%v): %s", err, got)
		}
		if string(got) != string(want) {
			t.Fatalf("appendResponse %s\nencoding/json  %s", got, want)
		}
	})
}

// BenchmarkResponseJSON encodes a 16-lane reply by appendResponse and by encoding/json.
func BenchmarkResponseJSON(b *testing.B) {
	r := responseCases()[2]
	b.Run("append", func(b *testing.B) {
		buf := make([]byte, 0, 4096)
		for b.Loop() {
			if _, ok := appendResponse(buf[:0], &r); !ok {
				b.Fatal("declined")
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		for b.Loop() {
			if _, err := json.Marshal(r); err != nil {
				b.Fatal(err)
			}
		}
	})
}
