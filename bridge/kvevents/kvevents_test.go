package kvevents

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"

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
				TokenIDs: tokens, BlockSize: 4, Medium: "GPU", LoraName: "adapter-a", HasGroup: true, GroupIdx: 0, SpecKind: "full_attention"},
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
