package schemas

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/ckf-stream/ckf-stream/ckf"
)

// TestBlockExtraKeysWireItems: each block_extra_keys item is the block's canonical encoding,
// byte for byte what the local hash appends after the block's tokens (ckf.ExtraKeys.
// AppendCanonical), and an empty item is a block without keys.
func TestBlockExtraKeysWireItems(t *testing.T) {
	q := testQueryRequests()["extra-keys"]
	body := appendBlockExtraKeys(nil, q.BlockExtraKeys)
	r := reader{b: body}
	if !r.optIndex() {
		t.Fatal("null for a request with keys")
	}
	var items [][]byte
	for n := r.blockCount(1); n > 0; n = r.blockCount(1) {
		for ; n > 0; n-- {
			items = append(items, r.bytes())
		}
	}
	if r.failed() || r.remaining() != 0 || len(items) != len(q.BlockExtraKeys) {
		t.Fatalf("items %d of %d, %d bytes left, %v", len(items), len(q.BlockExtraKeys), r.remaining(), r.kind)
	}
	for i, k := range q.BlockExtraKeys {
		if want := k.AppendCanonical(nil); !bytes.Equal(items[i], want) {
			t.Errorf("item %d: % x, want % x", i, items[i], want)
		}
	}
	if len(items[1]) != 0 {
		t.Errorf("a block without keys: % x, want empty", items[1])
	}
	if got := appendBlockExtraKeys(nil, nil); !bytes.Equal(got, []byte{0}) {
		t.Errorf("no keys: % x, want null", got)
	}
}

// TestBlockExtraKeysRules: an item that is not a canonical encoding, and keys the request
// rules refuse, are refused by both decoders (ErrInvalidField on block_extra_keys, the reason
// named) and by the encoder; none is read as another prompt's keys.
func TestBlockExtraKeysRules(t *testing.T) {
	codecs := map[string]*Codec{"fast": newTestCodec(t), "goavro": newTestCodec(t, disableFastPath())}
	base := testQueryRequests()["extra-keys"]
	id := newTestCodec(t).SchemaID(TypeQueryRequest)
	// frameWith writes base with its block_extra_keys replaced by items, as a writer that does
	// not check them would.
	frameWith := func(items ...[]byte) []byte {
		q := base
		q.BlockExtraKeys = nil
		b := appendQueryRequestBody(AppendHeader(nil, id), &q)
		b = append(b[:len(b)-2], 2) // replace the null block_extra_keys (and lane_mask64's after it)
		b = appendLong(b, int64(len(items)))
		for _, it := range items {
			b = appendBytes(b, it)
		}
		return append(b, 0, 0) // the array's end, lane_mask64 null
	}
	str := func(s string) []byte { return append([]byte{5, byte(len(s)), 0, 0, 0}, s...) }
	tuple := func(vals ...[]byte) []byte {
		out := []byte{7, byte(len(vals)), 0, 0, 0}
		for _, v := range vals {
			out = append(out, v...)
		}
		return out
	}
	deep := str("x")
	for range ckf.MaxExtraDepth + 1 { // the block's own tuple is depth 1
		deep = tuple(deep)
	}
	for name, tc := range map[string]struct {
		item   []byte
		detail string
	}{
		"not a tuple":     {str("salt"), "not the tuple tag"},
		"empty tuple":     {tuple(), "an empty tuple"},
		"trailing byte":   {append(tuple(str("a")), 0), "1 bytes after the tuple"},
		"bool byte":       {tuple([]byte{1, 2}), "bool byte 2"},
		"small uint":      {tuple([]byte{3, 1, 0, 0, 0, 0, 0, 0, 0}), "below 2^63"},
		"not UTF-8":       {tuple(str("\xff")), "not UTF-8"},
		"unknown tag":     {tuple([]byte{8}), "unknown tag"},
		"too deep":        {deep, "nested deeper"},
		"cut string":      {tuple([]byte{5, 9, 0, 0, 0, 'a'}), "needs 9 bytes"},
		"count too large": {[]byte{7, 0xff, 0xff, 0xff, 0x7f, 0}, "values in"},
	} {
		for cn, c := range codecs {
			_, err := c.DecodeQueryRequest(frameWith(tc.item))
			var de *DecodeError
			if !errors.Is(err, ErrInvalidField) || !errors.As(err, &de) || de.Field != "block_extra_keys" || !strings.Contains(err.Error(), tc.detail) {
				t.Errorf("%s, %s: %v, want ErrInvalidField on block_extra_keys saying %q", name, cn, err, tc.detail)
			}
		}
	}
	// A valid item decodes, so the frames above differ from a good one only by the item.
	for cn, c := range codecs {
		got, err := c.DecodeQueryRequest(frameWith(tuple(str("salt"))))
		if err != nil || len(got.BlockExtraKeys) != 1 || !got.BlockExtraKeys[0][0].Equal(ckf.ExtraStringValue("salt")) {
			t.Errorf("%s: a valid item: %+v, %v", cn, got.BlockExtraKeys, err)
		}
	}
	// The request rules, on both sides: keys go with token ids, at most one entry per block
	// (a trailing partial block counted), values that read back as themselves.
	hashes := testQueryRequests()["hashes"]
	hashes.BlockExtraKeys = []ckf.ExtraKeys{{ckf.ExtraStringValue("s")}}
	tooMany := base
	tooMany.BlockExtraKeys = append(append([]ckf.ExtraKeys{}, base.BlockExtraKeys...), nil)
	badUint := base
	badUint.BlockExtraKeys = []ckf.ExtraKeys{{{Kind: ckf.ExtraUint, Bits: 5}}}
	for name, q := range map[string]QueryRequest{"with hashes": hashes, "too many entries": tooMany, "uint below 2^63": badUint} {
		for cn, c := range codecs {
			if _, err := c.EncodeQueryRequest(q); !errors.Is(err, ErrInvalidField) || !strings.Contains(err.Error(), "block_extra_keys") {
				t.Errorf("encode %s, %s: %v, want ErrInvalidField on block_extra_keys", name, cn, err)
			}
			frame := appendQueryRequestBody(AppendHeader(nil, id), &q)
			if _, err := c.DecodeQueryRequest(frame); !errors.Is(err, ErrInvalidField) || !strings.Contains(err.Error(), "block_extra_keys") {
				t.Errorf("decode %s, %s: %v, want ErrInvalidField on block_extra_keys", name, cn, err)
			}
		}
	}
	// The worker stage's request applies the same rules.
	wq := testWorkerQueryRequests()["hashes"]
	wq.BlockExtraKeys = hashes.BlockExtraKeys
	if _, err := newTestCodec(t).EncodeWorkerQueryRequest(wq); !errors.Is(err, ErrInvalidField) || !strings.Contains(err.Error(), "block_extra_keys") {
		t.Errorf("worker request with hashes and keys: %v, want ErrInvalidField on block_extra_keys", err)
	}
}
