package indexer

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
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
