package workerapi

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/queryapi"
	"github.com/ckf-stream/ckf-stream/schemas"
)

// prefixBodies are prefix-match bodies, valid and not: this route reads each as that route does.
var prefixBodies = []string{
	`{"local_block_hashes":[1,2,3]}`,
	`{"local_block_hashes":[]}`,
	`{"correlation_id":"c1","local_block_hashes":[18446744073709551615]}`,
	`{"token_ids":[1,2,3,4,5],"block_size":2,"lora_name":"a","cache_namespace":"n"}`,
	`{"token_ids":[1,2,3,4],"block_size":2,"block_extra_keys":[null,[["img",3]]]}`,
	`{"local_block_hashes":[1],"token_ids":[1]}`,
	`{"token_ids":[1,2]}`,
	`{"token_ids":[1,2],"block_size":0}`,
	`{"local_block_hashes":[1],"block_size":2}`,
	`{"local_block_hashes":[null]}`,
	`{"local_block_hashes":[1],"local_block_hashes":[2]}`,
	`{"local_block_hashes":[-1]}`,
	`{"unknown":1,"local_block_hashes":[1]}`,
	`{}`, `[]`, `null`, ``, `{"local_block_hashes":[1]} x`, `{"local_block_hashes":[1]`,
	`{"token_ids":[1,2,3],"block_size":1,"block_extra_keys":[[],[],[],[]]}`,
}

// TestDecodeRequestIsThePrefixMatchRoutes: with none of this route's keys, a body is accepted or
// refused exactly as queryapi.DecodeRequest accepts or refuses it, with the same query; with
// them, the prompt is still read by the same rules.
func TestDecodeRequestIsThePrefixMatchRoutes(t *testing.T) {
	t.Parallel()
	for _, body := range prefixBodies {
		wq, wextra, werr := queryapi.DecodeRequest([]byte(body))
		got, err := DecodeRequest([]byte(body))
		if (err == nil) != (werr == nil) {
			t.Errorf("%s: error %v, the prefix-match route's %v", body, err, werr)
			continue
		}
		if err != nil {
			if !errors.Is(err, queryapi.ErrBadRequest) || err.Error() != werr.Error() {
				t.Errorf("%s: error %q, want the prefix-match route's %q", body, err, werr)
			}
			continue
		}
		if !reflect.DeepEqual(got.Query, wq) || !reflect.DeepEqual(got.Extra, wextra) || got.TopK != 0 || got.DCs != nil {
			t.Errorf("%s: %+v, want query %+v", body, got, wq)
		}
		// The same prompt with this route's options.
		opt := strings.Replace(body, "{", `{"top_k":3,"dcs":["dc01","000000000000DC02"],`, 1)
		got, err = DecodeRequest([]byte(opt))
		if err != nil || !reflect.DeepEqual(got.Query, wq) || got.TopK != 3 || !reflect.DeepEqual(got.DCs, []ckf.DcID{0xdc01, 0xdc02}) {
			t.Errorf("%s: %+v, %v", opt, got, err)
		}
	}
}

// TestDecodeRequestRefusals: this route's own refusals, each with its reason.
func TestDecodeRequestRefusals(t *testing.T) {
	t.Parallel()
	for body, reason := range map[string]string{
		`{"local_block_hashes":[1],"lane_mask":1}`:           "lane_mask is the prefix-match route's",
		`{"local_block_hashes":[1],"top_k":-1}`:              "top_k -1 is not a number",
		`{"local_block_hashes":[1],"top_k":1.5}`:             "top_k 1.5 is not a number",
		`{"local_block_hashes":[1],"top_k":1,"TOP_K":2}`:     "top_k given twice",
		`{"local_block_hashes":[1],"top_k":2000000}`:         "top_k 2000000",
		`{"local_block_hashes":[1],"dcs":"dc01"}`:            "dcs is not a list",
		`{"local_block_hashes":[1],"dcs":[null]}`:            "dcs holds a null",
		`{"local_block_hashes":[1],"dcs":["xyz"]}`:           `DC id "xyz" is not 1 to 16 hex digits`,
		`{"local_block_hashes":[1],"dcs":["1"],"dcs":["2"]}`: "dcs given twice",
		`{"top_k":1}`: "give local_block_hashes, or token_ids",
	} {
		_, err := DecodeRequest([]byte(body))
		if !errors.Is(err, queryapi.ErrBadRequest) || !strings.Contains(err.Error(), reason) {
			t.Errorf("%s: %v, want a bad request saying %q", body, err, reason)
		}
	}
	if r, err := DecodeRequest([]byte(`{"local_block_hashes":[1],"dcs":null,"top_k":0}`)); err != nil || r.DCs != nil || r.TopK != 0 {
		t.Errorf("dcs null, top_k 0: %+v %v", r, err)
	}
	if r, err := DecodeRequest([]byte(`{"local_block_hashes":[1],"dcs":[]}`)); err != nil || r.DCs == nil || r.Selects(1) {
		t.Errorf("dcs []: %+v %v; want no DC selected", r, err)
	}
}

// TestClientBodyMatchesEncodingJSON: what a client writes with encoding/json is read back as
// written, and as encoding/json reads it.
func TestClientBodyMatchesEncodingJSON(t *testing.T) {
	t.Parallel()
	for _, in := range []WorkerMatchRequest{
		{LocalBlockHashes: []uint64{1, 1 << 63}, TopK: 2, DCs: []string{"000000000000dc01"}},
		{CorrelationID: "x", TokenIDs: []uint32{1, 2, 3}, BlockSize: 1, LoraName: "l", CacheNamespace: "n"},
	} {
		b, _ := json.Marshal(in)
		r, err := DecodeRequest(b)
		if err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		var back WorkerMatchRequest
		if err := json.Unmarshal(b, &back); err != nil || !reflect.DeepEqual(back, in) {
			t.Fatalf("%s: encoding/json reads %+v", b, back)
		}
		if r.TopK != in.TopK || len(r.DCs) != len(in.DCs) || r.Query.CorrelationID != in.CorrelationID {
			t.Fatalf("%s: %+v", b, r)
		}
		if in.TokenIDs != nil {
			want := ckf.TokenBlockHashes(in.TokenIDs, int(in.BlockSize), ckf.BlockSaltSeed(in.LoraName, in.CacheNamespace))
			if got := r.LocalHashes(); !reflect.DeepEqual(got, want) {
				t.Fatalf("local hashes %v, want %v", got, want)
			}
		} else if got := r.LocalHashes(); len(got) != 2 || uint64(got[1]) != 1<<63 {
			t.Fatalf("local hashes %v", got)
		}
	}
}

// TestResponseJSONIsEncodingJSONs: the response is plain encoding/json; Sources is [] when empty.
func TestResponseJSONIsEncodingJSONs(t *testing.T) {
	t.Parallel()
	r := WorkerMatchResponse{Status: StatusOK, DcID: ckf.DcID(0xdc).String(), DcSelected: true, Sources: SourcesOf(nil)}
	b, _ := json.Marshal(r)
	if !strings.Contains(string(b), `"sources":[]`) || !strings.Contains(string(b), `"age":{"age_ms":0,"lag_records":0}`) {
		t.Fatalf("%s", b)
	}
}

// TestBinaryReplyRoundTrip: a reply decodes to the answer it was written from.
func TestBinaryReplyRoundTrip(t *testing.T) {
	t.Parallel()
	r := WorkerMatchResponse{Status: StatusOK, DcID: ckf.DcID(0xdc01).String(), DcSelected: true, QueryBlocks: 9, State: StateExact,
		Age:     ReplicaAge{AgeMs: -1, LagRecords: 5},
		Sources: []SourceMatch{{WorkerID: 7, DpRank: 1, Device: 4, HostPinned: 2, Disk: 1, External: 0}, {WorkerID: 1 << 60, Device: 1}}}
	incomplete := r
	incomplete.State, incomplete.Age.AgeMs = StateIncomplete, 12
	if b, err := AppendBinaryReply(nil, &incomplete); err != nil || b[1] != 3 {
		t.Fatalf("incomplete: flags %#x, %v", b[1], err)
	} else if back, err := DecodeBinaryReply(b); err != nil || !reflect.DeepEqual(back, incomplete) {
		t.Fatalf("incomplete: %+v %v", back, err)
	}
	b, err := AppendBinaryReply(nil, &r)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) != BinaryReplyHeaderBytes+2*BinarySourceBytes {
		t.Fatalf("%d bytes", len(b))
	}
	back, err := DecodeBinaryReply(b)
	if err != nil || !reflect.DeepEqual(back, r) {
		t.Fatalf("%+v %v, want %+v", back, err, r)
	}
	for _, bad := range [][]byte{b[:len(b)-1], append(append([]byte{}, b...), 0), append([]byte{2}, b[1:]...)} {
		if _, err := DecodeBinaryReply(bad); !errors.Is(err, ErrBinaryReply) {
			t.Fatalf("damaged reply: %v", err)
		}
	}
}

// TestDecodeBinaryRequest: the parameters and the body's rules.
func TestDecodeBinaryRequest(t *testing.T) {
	t.Parallel()
	body := queryapi.AppendBinaryRequest(nil, []uint64{1, 2})
	r, err := DecodeBinaryRequest(body, []string{"c"}, "top_k=1&dcs=dc01,dc02")
	if err != nil || r.TopK != 1 || !reflect.DeepEqual(r.DCs, []ckf.DcID{0xdc01, 0xdc02}) || r.Query.CorrelationID != "c" || len(r.LocalHashes()) != 2 {
		t.Fatalf("%+v %v", r, err)
	}
	if r, err := DecodeBinaryRequest(body, nil, "max_age_ms=250&top_k=2"); err != nil || r.Query.MaxAgeMillis != schemas.Some[int64](250) || r.TopK != 2 {
		t.Fatalf("max_age_ms: %+v %v", r, err)
	}
	for q, reason := range map[string]string{"lane_mask=1": "takes only top_k, dcs and max_age_ms", "top_k=x": "top_k", "top_k=1&top_k=2": "given 2 times", "dcs=,": "DC id",
		"max_age_ms=-1": "max_age_ms", "max_age_ms=1&max_age_ms=2": "given 2 times"} {
		if _, err := DecodeBinaryRequest(body, nil, q); !errors.Is(err, queryapi.ErrBadRequest) || !strings.Contains(err.Error(), reason) {
			t.Errorf("%s: %v", q, err)
		}
	}
	if _, err := DecodeBinaryRequest(body[:9], nil, ""); !errors.Is(err, queryapi.ErrBadRequest) {
		t.Errorf("9 bytes: %v", err)
	}
}

func FuzzDecodeRequest(f *testing.F) {
	for _, b := range prefixBodies {
		f.Add([]byte(b))
	}
	f.Add([]byte(`{"local_block_hashes":[1],"top_k":3,"dcs":["dc01"]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := DecodeRequest(b)
		if err != nil {
			if !errors.Is(err, queryapi.ErrBadRequest) {
				t.Fatalf("%q: %v is not a bad request", b, err)
			}
			return
		}
		if r.TopK < 0 || r.TopK > MaxTopK {
			t.Fatalf("top_k %d", r.TopK)
		}
		_ = r.LocalHashes()
	})
}

func FuzzDecodeBinaryRequest(f *testing.F) {
	f.Add([]byte{1, 2, 3, 4, 5, 6, 7, 8}, "top_k=2&dcs=1")
	f.Fuzz(func(t *testing.T, body []byte, q string) {
		r, err := DecodeBinaryRequest(body, nil, q)
		if err != nil {
			if !errors.Is(err, queryapi.ErrBadRequest) {
				t.Fatalf("%v is not a bad request", err)
			}
			return
		}
		if len(r.LocalHashes())*8 != len(body) {
			t.Fatalf("%d hashes from %d bytes", len(r.LocalHashes()), len(body))
		}
	})
}

func FuzzDecodeBinaryReply(f *testing.F) {
	r := WorkerMatchResponse{Status: StatusOK, DcID: "00000000000000dc", Sources: []SourceMatch{{WorkerID: 1, Device: 2}}}
	b, _ := AppendBinaryReply(nil, &r)
	f.Add(b)
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := DecodeBinaryReply(b)
		if err != nil {
			return
		}
		again, err := AppendBinaryReply(nil, &r)
		if err != nil || string(again) != string(b) {
			t.Fatalf("decoded reply re-encodes differently: %v", err)
		}
	})
}

// TestFromKafkaCarriesExtraKeys: a Kafka worker request's block_extra_keys reach the answer's
// hashes, as the JSON body's block_extra_keys do: both forms of one salted prompt hash alike.
func TestFromKafkaCarriesExtraKeys(t *testing.T) {
	extra := []ckf.ExtraKeys{{ckf.ExtraStringValue("salt-1")}, nil, {ckf.ExtraTupleValue(ckf.ExtraStringValue("img"), ckf.ExtraIntValue(-1))}}
	q := schemas.WorkerQueryRequest{CorrelationID: "k", Input: schemas.InputTokenIDs, Tokens: schemas.AppendU32s(nil, []uint32{1, 2, 3, 4, 5, 6}),
		BlockSize: 2, LoraName: "l", BlockExtraKeys: extra}
	r := FromKafka(&q)
	want := ckf.TokenBlockHashesExtra([]uint32{1, 2, 3, 4, 5, 6}, 2, extra, ckf.BlockSaltSeed("l", ""))
	if got := r.LocalHashes(); !reflect.DeepEqual(got, want) {
		t.Fatalf("Kafka form: %x, want %x", got, want)
	}
	body, err := json.Marshal(WorkerMatchRequest{CorrelationID: "k", TokenIDs: []uint32{1, 2, 3, 4, 5, 6}, BlockSize: 2, LoraName: "l", BlockExtraKeys: extra})
	if err != nil {
		t.Fatal(err)
	}
	hr, err := DecodeRequest(body)
	if err != nil {
		t.Fatal(err)
	}
	if got := hr.LocalHashes(); !reflect.DeepEqual(got, want) {
		t.Fatalf("JSON form: %x, want %x", got, want)
	}
	if plain := ckf.TokenBlockHashes([]uint32{1, 2, 3, 4, 5, 6}, 2, ckf.BlockSaltSeed("l", "")); reflect.DeepEqual(plain, want) {
		t.Fatal("the keys changed no hash")
	}
}
