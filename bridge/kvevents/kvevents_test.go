package kvevents

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/vmihailenco/msgpack/v5"
	"github.com/zeebo/xxh3"
)

func shape(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "shapes", name+".msgpack"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

var tokens = []uint32{100, 101, 102, 103, 104, 105, 106, 107}

func bytesHash(b byte) BlockHash {
	buf := make([]byte, 32)
	for i := range buf {
		buf[i] = b
	}
	return BlockHash(xxh3.Hash(buf))
}

// The shapes are written by testdata/gen_shapes.py with msgspec, mirroring each engine
// version's structs and encoder options.
func TestDecodeEngineShapes(t *testing.T) {
	u := func(v int64) BlockHash { return BlockHash(uint64(v)) }
	cases := []struct {
		name string
		want Batch
	}{
		{"vllm_map_bytes", Batch{TS: 1.5, Rank: 2, HasRank: true, Events: []Event{
			{Kind: KindStored, BlockHashes: []BlockHash{bytesHash(1), bytesHash(2)}, Parent: bytesHash(0), HasParent: true,
				TokenIDs: tokens, BlockSize: 4, Medium: "GPU", LoraName: "adapter-a", HasGroup: true, GroupIdx: 0, SpecKind: "full_attention",
				ExtraKeys: []ckf.ExtraKeys{nil, {ckf.ExtraStringValue("salt")}}},
			{Kind: KindStored, BlockHashes: []BlockHash{bytesHash(1)}, TokenIDs: tokens[:4], BlockSize: 4, Medium: "GPU",
				HasGroup: true, GroupIdx: 1, SpecKind: "sliding_window"},
			{Kind: KindRemoved, BlockHashes: []BlockHash{bytesHash(2)}, Medium: "CPU", HasGroup: true},
			{Kind: KindCleared},
		}}},
		{"vllm_map_future_fields", Batch{TS: 2, Events: []Event{
			{Kind: KindStored, BlockHashes: []BlockHash{7, 8}, TokenIDs: tokens, BlockSize: 4, LoraID: 3, HasLoraID: true},
		}}},
		{"vllm_array_ints", Batch{TS: 3.25, Rank: 1, HasRank: true, Events: []Event{
			{Kind: KindStored, BlockHashes: []BlockHash{u(-5), BlockHash(1<<63 + 9)}, Parent: u(-1), HasParent: true,
				TokenIDs: tokens, BlockSize: 4, Medium: "GPU"},
			{Kind: KindRemoved, BlockHashes: []BlockHash{u(-5)}, Medium: "GPU"},
			{Kind: KindCleared},
		}}},
		{"vllm_array_trailing", Batch{TS: 4, Events: []Event{
			{Kind: KindStored, BlockHashes: []BlockHash{11}, TokenIDs: tokens[:4], BlockSize: 4, Medium: "GPU", LoraName: "a",
				HasGroup: true, SpecKind: "full_attention"},
		}}},
		{"sglang_array", Batch{TS: 5, Events: []Event{
			{Kind: KindStored, BlockHashes: []BlockHash{21, 22}, Parent: 20, HasParent: true, TokenIDs: tokens, BlockSize: 4},
			{Kind: KindRemoved, BlockHashes: []BlockHash{21, 22}},
			{Kind: KindCleared},
		}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := Decode(shape(t, c.name))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Fatalf("got  %+v\nwant %+v", got, c.want)
			}
		})
	}
}

func TestDecodeUnknownEventIsTyped(t *testing.T) {
	_, err := Decode(shape(t, "unknown_event"))
	var de *DecodeError
	if !errors.As(err, &de) || !errors.Is(err, ErrUnknownEvent) {
		t.Fatalf("err = %v, want a *DecodeError matching ErrUnknownEvent", err)
	}
	if de.Path != "events[0]" {
		t.Fatalf("path %q", de.Path)
	}
}

func enc(t *testing.T, v any) []byte {
	t.Helper()
	b, err := msgpack.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestDecodeRejectsMalformed(t *testing.T) {
	good := shape(t, "sglang_array")
	cases := map[string][]byte{
		"empty":                  nil,
		"truncated":              good[:len(good)-3],
		"trailing":               append(append([]byte{}, good...), 0xc0),
		"not a container":        enc(t, 7),
		"one-field batch":        enc(t, []any{1.0}),
		"ts not a number":        enc(t, []any{"x", []any{}}),
		"events not array":       enc(t, []any{1.0, 5}),
		"map without ts":         enc(t, map[string]any{"events": []any{}}),
		"event not tagged":       enc(t, []any{1.0, []any{[]any{5}}}),
		"empty event":            enc(t, []any{1.0, []any{[]any{}}}),
		"map event no type":      enc(t, []any{1.0, []any{map[string]any{"block_hashes": []any{1}}}}),
		"stored missing tokens":  enc(t, []any{1.0, []any{[]any{"BlockStored", []any{1}, nil}}}),
		"removed missing hashes": enc(t, []any{1.0, []any{[]any{"BlockRemoved"}}}),
		"hash is a string":       enc(t, []any{1.0, []any{[]any{"BlockRemoved", []any{"h"}}}}),
		"negative token":         enc(t, []any{1.0, []any{[]any{"BlockStored", []any{1}, nil, []any{-1}, 1, nil}}}),
		"zero block size":        enc(t, []any{1.0, []any{[]any{"BlockStored", []any{1}, nil, []any{1}, 0, nil}}}),
		"negative rank":          enc(t, []any{1.0, []any{}, -1}),
		"extra_keys not a list":  enc(t, []any{1.0, []any{storedWithExtra("x")}}),
		"extra_keys entry a str": enc(t, []any{1.0, []any{storedWithExtra([]any{"x"})}}),
		"extra_keys too short":   enc(t, []any{1.0, []any{storedWithExtra([]any{})}}),
		"extra_keys too long":    enc(t, []any{1.0, []any{storedWithExtra([]any{nil, nil})}}),
		"extra key a map":        enc(t, []any{1.0, []any{storedWithExtra([]any{[]any{map[string]any{"a": 1}}})}}),
		"extra key too deep":     enc(t, []any{1.0, []any{storedWithExtra([]any{[]any{nest(ckf.MaxExtraDepth)}})}}),
		"extra key an ext":       extPayload(t),
		"huge length":            {0x92, 0xcb, 0, 0, 0, 0, 0, 0, 0, 0, 0xdd, 0x7f, 0xff, 0xff, 0xff},
		"duplicate map field": {0x92, 0x01, 0x91, 0x83, 0xa4, 't', 'y', 'p', 'e', 0xac, 'B', 'l', 'o', 'c', 'k', 'R', 'e', 'm', 'o', 'v', 'e', 'd',
			0xa6, 'm', 'e', 'd', 'i', 'u', 'm', 0xc0, 0xa6, 'm', 'e', 'd', 'i', 'u', 'm', 0xc0},
	}
	for name, b := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := Decode(b)
			var de *DecodeError
			if !errors.As(err, &de) || !errors.Is(err, ErrMalformed) {
				t.Fatalf("err = %v, want a *DecodeError matching ErrMalformed", err)
			}
		})
	}
}

func TestParseSeq(t *testing.T) {
	if s, err := ParseSeq(SeqFrame(EndOfReplay)); err != nil || s != EndOfReplay {
		t.Fatalf("end marker: %d %v", s, err)
	}
	if s, err := ParseSeq(SeqFrame(1 << 40)); err != nil || s != 1<<40 {
		t.Fatalf("%d %v", s, err)
	}
	if _, err := ParseSeq([]byte{1, 2}); !errors.Is(err, ErrMalformed) {
		t.Fatalf("short frame: %v", err)
	}
}

// FuzzDecode: no input crashes the decoder; every failure is a typed *DecodeError; a decoded
// batch's stored events are self-consistent enough for the converter (hashes and tokens set).
func FuzzDecode(f *testing.F) {
	entries, err := os.ReadDir(filepath.Join("testdata", "shapes"))
	if err != nil {
		f.Fatal(err)
	}
	for _, e := range entries {
		f.Add(shape(f, e.Name()[:len(e.Name())-len(".msgpack")]))
	}
	// extra_keys as vLLM publishes them.
	seed, err := msgpack.Marshal([]any{1.0, []any{storedWithExtra([]any{[]any{"lora-x", []any{"img-a", -3}, "salt", []byte{1}, nil, true, 0.5}})}})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(seed)
	f.Fuzz(func(t *testing.T, b []byte) {
		batch, err := Decode(b)
		if err != nil {
			var de *DecodeError
			if !errors.As(err, &de) || !(errors.Is(err, ErrMalformed) || errors.Is(err, ErrUnknownEvent)) {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		for _, ev := range batch.Events {
			switch ev.Kind {
			case KindStored:
				if ev.BlockSize <= 0 {
					t.Fatalf("stored event with block size %d", ev.BlockSize)
				}
				if ev.ExtraKeys != nil && len(ev.ExtraKeys) != len(ev.BlockHashes) {
					t.Fatalf("%d extra-key entries for %d blocks", len(ev.ExtraKeys), len(ev.BlockHashes))
				}
			case KindRemoved, KindCleared:
				if ev.TokenIDs != nil {
					t.Fatalf("%v event with tokens", ev.Kind)
				}
			default:
				t.Fatalf("event of kind %v", ev.Kind)
			}
		}
	})
}

// TestDecodeTokenEncodings: token ids in every integer encoding, the fast path's (fixint,
// uint8/16/32) and the general path's (signed encodings, uint64) mixed in one list, decode alike.
func TestDecodeTokenEncodings(t *testing.T) {
	// [1.0, [["BlockStored", [1], nil, TOKENS, 4, nil]]] with TOKENS written by hand.
	head := []byte{0x92, 0xcb, 0x3f, 0xf0, 0, 0, 0, 0, 0, 0, 0x91, 0x96, 0xab}
	head = append(head, "BlockStored"...)
	head = append(head, 0x91, 0x01, 0xc0, 0x98)
	tokens := []byte{
		0x05,      // fixint 5
		0xcc, 200, // uint8
		0xcd, 0xea, 0x60, // uint16 60000
		0xce, 0x00, 0x01, 0x11, 0x70, // uint32 70000
		0xd1, 0x00, 0x07, // int16 7: the general path from here on
		0x09,                            // fixint 9
		0xcf, 0, 0, 0, 0, 0, 0, 0, 0x0b, // uint64 11
		0xd2, 0x00, 0x00, 0x00, 0x0d, // int32 13
	}
	b := append(append(head, tokens...), 0x04, 0xc0)
	got, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	want := []uint32{5, 200, 60000, 70000, 7, 9, 11, 13}
	if !reflect.DeepEqual(got.Events[0].TokenIDs, want) || got.Events[0].BlockSize != 4 {
		t.Fatalf("%+v", got.Events[0])
	}
	// A token beyond u32 and a truncated uint32 are malformed.
	for _, bad := range [][]byte{{0xcf, 0, 0, 0, 1, 0, 0, 0, 0}, {0xce, 0x00}} {
		b := append(append(append([]byte{}, head...), append(bad, tokens[:7]...)...), 0x04, 0xc0)
		if _, err := Decode(b); !errors.Is(err, ErrMalformed) {
			t.Fatalf("%x: %v", bad, err)
		}
	}
}

// storedWithExtra is an array-form BlockStored of one block (tokens 1..4) whose extra_keys is
// extra.
func storedWithExtra(extra any) []any {
	return []any{"BlockStored", []any{1}, nil, []any{1, 2, 3, 4}, 4, nil, "GPU", "lora-x", extra}
}

// nest returns depth arrays nested in one another, the innermost empty.
func nest(depth int) any {
	var v any = []any{}
	for i := 1; i < depth; i++ {
		v = []any{v}
	}
	return v
}

// extPayload is storedWithExtra with a msgpack extension value (fixext1) as the block's only
// extra key.
func extPayload(t *testing.T) []byte {
	b := enc(t, []any{1.0, []any{storedWithExtra([]any{[]any{true}})}})
	i := len(b) - 1 // the encoding ends with the true (0xc3)
	if b[i] != 0xc3 {
		t.Fatalf("unexpected encoding % x", b)
	}
	return append(b[:i:i], 0xd4, 0x01, 0x00)
}

// extra_keys as vLLM 0.34.0 publishes them (vllm/v1/core/kv_cache_utils.py to_event_extra_keys:
// the LoRA name, (mm identifier, offset) pairs, the cache salt, prompt-embeds digests; None for
// a block without any), in both event forms, decode into typed values.
func TestDecodeExtraKeys(t *testing.T) {
	digest := []byte{0xde, 0xad}
	extra := []any{
		[]any{"lora-x", []any{"img-a", 1}, "salt-1", digest},
		nil,
		[]any{"lora-x", []any{"img-a", -3}, []any{"img-b", 2}, uint64(1 << 63), -7, 0.5, true, nil},
	}
	want := []ckf.ExtraKeys{
		{ckf.ExtraStringValue("lora-x"), ckf.ExtraTupleValue(ckf.ExtraStringValue("img-a"), ckf.ExtraIntValue(1)),
			ckf.ExtraStringValue("salt-1"), ckf.ExtraBytesValue(digest)},
		nil,
		{ckf.ExtraStringValue("lora-x"), ckf.ExtraTupleValue(ckf.ExtraStringValue("img-a"), ckf.ExtraIntValue(-3)),
			ckf.ExtraTupleValue(ckf.ExtraStringValue("img-b"), ckf.ExtraIntValue(2)), ckf.ExtraUintValue(1 << 63),
			ckf.ExtraIntValue(-7), ckf.ExtraFloatValue(0.5), ckf.ExtraBoolValue(true), ckf.ExtraNil()},
	}
	arr := []any{"BlockStored", []any{1, 2, 3}, nil, make([]int, 12), 4, nil, "GPU", "lora-x", extra}
	m := map[string]any{"type": "BlockStored", "block_hashes": []any{1, 2, 3}, "parent_block_hash": nil,
		"token_ids": make([]int, 12), "block_size": 4, "lora_id": nil, "medium": "GPU", "lora_name": "lora-x", "extra_keys": extra}
	for name, ev := range map[string]any{"array": arr, "map": m} {
		t.Run(name, func(t *testing.T) {
			b, err := Decode(enc(t, []any{1.0, []any{ev}}))
			if err != nil {
				t.Fatal(err)
			}
			got := b.Events[0].ExtraKeys
			if len(got) != len(want) || got[1] != nil {
				t.Fatalf("extra keys %v", got)
			}
			for i := range want {
				if len(got[i]) != len(want[i]) {
					t.Fatalf("block %d: %v, want %v", i, got[i], want[i])
				}
				for j := range want[i] {
					if !got[i][j].Equal(want[i][j]) {
						t.Fatalf("block %d key %d: %v, want %v", i, j, got[i][j], want[i][j])
					}
				}
			}
		})
	}
	// null extra_keys, and a removal, leave none.
	b, err := Decode(enc(t, []any{1.0, []any{storedWithExtra(nil), []any{"BlockRemoved", []any{1}}}}))
	if err != nil || b.Events[0].ExtraKeys != nil || b.Events[1].ExtraKeys != nil {
		t.Fatalf("%v: %+v", err, b)
	}
}

// SGLang 0.5.18 and 0.5.19 write a salted store as BlockStoredWithMetadata: the array_like
// BlockStored of its release (block_hashes to medium) with a metadata map appended, under the
// tag "BlockStored". The map stands where vLLM's lora_name stands; its cache_salt is the
// event's CacheSalt (other keys skipped). SGLang 0.5.20 and later send maps, with the salt under
// cache_salt (or the same metadata map); session_id is an unknown field, skipped.
func TestDecodeSGLangMetadataAndMapFields(t *testing.T) {
	arr, err := msgpack.Marshal([]any{1.5, []any{
		[]any{"BlockStored", []any{int64(-7)}, nil, []any{1, 2, 3, 4}, 4, nil, "GPU", map[string]any{"cache_salt": "s", "later": 1}},
	}, 0})
	if err != nil {
		t.Fatal(err)
	}
	b, err := Decode(arr)
	if err != nil || len(b.Events) != 1 || b.Events[0].LoraName != "" || b.Events[0].Medium != "GPU" || b.Events[0].BlockHashes[0] != BlockHash(uint64(1<<64-7)) ||
		!b.Events[0].HasCacheSalt || b.Events[0].CacheSalt != "s" {
		t.Fatalf("0.5.18 metadata: %+v, %v", b, err)
	}
	storedMap := func(extra map[string]any) []byte {
		t.Helper()
		ev := map[string]any{"type": "BlockStored", "block_hashes": []any{3}, "parent_block_hash": nil,
			"token_ids": []any{1, 2, 3, 4}, "block_size": 4, "lora_id": nil, "medium": "GPU"}
		for k, v := range extra {
			ev[k] = v
		}
		m, err := msgpack.Marshal([]any{1.5, []any{ev}, 2})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	for name, tc := range map[string]struct {
		fields map[string]any
		salt   string
		salted bool
	}{
		"cache_salt":        {map[string]any{"cache_salt": "s", "session_id": "x"}, "s", true},
		"metadata":          {map[string]any{"metadata": map[string]any{"cache_salt": "s"}}, "s", true},
		"both, agreeing":    {map[string]any{"cache_salt": "s", "metadata": map[string]any{"cache_salt": "s"}}, "s", true},
		"empty salt":        {map[string]any{"cache_salt": ""}, "", true},
		"null salt":         {map[string]any{"cache_salt": nil}, "", false},
		"null metadata":     {map[string]any{"metadata": nil}, "", false},
		"metadata, no salt": {map[string]any{"metadata": map[string]any{}}, "", false},
		"unsalted":          {nil, "", false},
	} {
		b, err := Decode(storedMap(tc.fields))
		if err != nil || len(b.Events) != 1 || b.Rank != 2 || b.Events[0].HasCacheSalt != tc.salted || b.Events[0].CacheSalt != tc.salt {
			t.Errorf("0.5.20 map, %s: %+v, %v; want salt %q (%v)", name, b, err, tc.salt, tc.salted)
		}
	}
	for name, fields := range map[string]map[string]any{
		"salt not a string":  {"cache_salt": 7},
		"metadata not a map": {"metadata": "s"},
		"two salts":          {"cache_salt": "s", "metadata": map[string]any{"cache_salt": "t"}},
	} {
		if _, err := Decode(storedMap(fields)); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v, want ErrMalformed", name, err)
		}
	}
	// A removal carries no salt, whatever it was sent with.
	rm, err := msgpack.Marshal([]any{1.5, []any{map[string]any{"type": "BlockRemoved", "block_hashes": []any{3}, "cache_salt": "s"}}})
	if err != nil {
		t.Fatal(err)
	}
	if b, err := Decode(rm); err != nil || b.Events[0].HasCacheSalt {
		t.Fatalf("removal: %+v, %v", b, err)
	}
}
