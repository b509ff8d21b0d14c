package indexer_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/ckf-stream/ckf-stream/ckf"
)

// TestPrefixMatchesWithBlockExtraKeys: a prompt whose blocks 1 and 2 hold an image, cached on
// lane 5 under the hashes the bridge computes for it (ckf.TokenBlockHashExtra), is found whole
// by a token query giving the same block_extra_keys; without them, or with another image, the
// match stops before the image. Malformed block_extra_keys are refused with 400.
func TestPrefixMatchesWithBlockExtraKeys(t *testing.T) {
	tb := newTable(t)
	toks := testTokens(4, 4)
	image := func(id string) []ckf.ExtraKeys {
		pair := func(off int64) ckf.ExtraKeys {
			return ckf.ExtraKeys{ckf.ExtraTupleValue(ckf.ExtraStringValue(id), ckf.ExtraIntValue(off))}
		}
		return []ckf.ExtraKeys{nil, pair(2), pair(-2), nil}
	}
	var chain []uint64
	for _, h := range ckf.TokenBlockHashesExtra(toks, 4, image("img-a"), ckf.BlockSaltSeed("a", "")) {
		chain = append(chain, uint64(h))
	}
	tb.install(t, 5, [][]uint64{chain})
	tb.eligible.Store(tb.g.ReadyLanes64())
	depth := func(body string) uint32 {
		t.Helper()
		code, resp := tb.post(t, body)
		if code != http.StatusOK {
			t.Fatalf("POST %s: %d %+v", body, code, resp)
		}
		for _, m := range resp.Matches {
			if m.Lane == 5 {
				return m.Depth
			}
		}
		t.Fatalf("POST %s: no lane 5 in %+v", body, resp)
		return 0
	}
	query := func(extra any) string {
		m := map[string]any{"token_ids": append(toks, 1, 2), "block_size": 4, "lora_name": "a"}
		if extra != nil {
			m["block_extra_keys"] = extra
		}
		b, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	if d := depth(query(image("img-a"))); d != 4 {
		t.Fatalf("the cached image: depth %d, want 4", d)
	}
	// The JSON form written by hand, with an entry for the partial block.
	if d := depth(`{"token_ids": ` + jsonOf(t, append(toks, 1, 2)) +
		`, "block_size": 4, "lora_name": "a", "block_extra_keys": [null, [["img-a", 2]], [["img-a", -2]], [], null]}`); d != 4 {
		t.Fatalf("hand-written block_extra_keys: depth %d, want 4", d)
	}
	if d := depth(query(image("img-b"))); d != 1 {
		t.Fatalf("another image: depth %d, want 1", d)
	}
	if d := depth(query(nil)); d != 1 {
		t.Fatalf("no extra keys: depth %d, want 1", d)
	}

	for _, tc := range []struct{ body, want string }{
		{`{"local_block_hashes": [1], "block_extra_keys": [null]}`, "go with token_ids"},
		{`{"token_ids": [1, 2, 3, 4, 5], "block_size": 4, "block_extra_keys": [null, null, null]}`, "block_extra_keys has 3 entries for 5 token ids in blocks of 4"},
		{`{"token_ids": [1, 2, 3, 4], "block_size": 4, "block_extra_keys": [[{"x": 1}]]}`, `field block_extra_keys: {"x":1} is not an extra key`},
		{`{"token_ids": [1, 2, 3, 4], "block_size": 4, "block_extra_keys": [[{"bytes": "xyz"}]]}`, "field block_extra_keys"},
		{`{"token_ids": [1, 2, 3, 4], "block_size": 4, "block_extra_keys": ["img"]}`, "field block_extra_keys"},
		{`{"token_ids": [1, 2, 3, 4], "block_size": 4, "block_extra_keys": [[1]], "block_extra_keys": [[2]]}`, `duplicate key "block_extra_keys"`},
	} {
		code, resp := tb.post(t, tc.body)
		if code != http.StatusBadRequest || resp.Status != "INVALID_REQUEST" || !strings.Contains(resp.Error, tc.want) {
			t.Errorf("POST %.80q: %d %+v; want 400 INVALID_REQUEST with %q", tc.body, code, resp, tc.want)
		}
	}
}

func jsonOf(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
