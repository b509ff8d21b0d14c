package query_test

import (
	"testing"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/ckf-stream/ckf-stream/streams/query"
)

// qImage is vLLM's published form of a multimodal item in a block's extra keys.
func qImage(id string, offset int64) ckf.ExtraValue {
	return ckf.ExtraTupleValue(ckf.ExtraStringValue(id), ckf.ExtraIntValue(offset))
}

// TestQueryAnswerExtraKeys: a prompt of placeholder tokens whose blocks 2..5 hold an image is
// cached under the hashes ckf.TokenBlockHashesExtra gives; a token query with the same block
// extra keys finds all of it, one without (or with another image) stops at the image, and the
// extra-key rules are enforced. With a warm scratch the extra-key path does not allocate.
func TestQueryAnswerExtraKeys(t *testing.T) {
	x := newQIndex(t, 3)
	p := newQPrompts(7)
	tokens := p.tokens[:8*qBlockSize+3] // 8 blocks and a partial one
	imageBlocks := func(id string) []ckf.ExtraKeys {
		extra := make([]ckf.ExtraKeys, 9)
		extra[0] = ckf.ExtraKeys{ckf.ExtraStringValue("salt-1")} // the request's cache_salt
		for b := 2; b < 6; b++ {
			extra[b] = ckf.ExtraKeys{qImage(id, int64(2*qBlockSize+5-b*qBlockSize))}
		}
		return extra
	}
	seed := ckf.BlockSaltSeed(qLora, "")
	var cached []uint64
	for _, h := range ckf.TokenBlockHashesExtra(tokens, qBlockSize, imageBlocks("img-a"), seed) {
		cached = append(cached, uint64(h))
	}
	x.store(3, cached)
	x.activate(3)
	ans := query.NewAnswerer(x.g, nil)
	var sc query.QueryScratch
	depth := func(r schemas.QueryReply) uint32 {
		t.Helper()
		if r.Status != schemas.QueryOK || len(r.Lanes) != 1 {
			t.Fatalf("reply %+v", r)
		}
		return r.Lanes[0].Depth
	}
	req := qTokenRequest("img", tokens, qBlockSize, qLora, "")
	if d := depth(ans.AnswerExtra(&req, imageBlocks("img-a"), &sc)); d != 8 {
		t.Fatalf("the right image: depth %d, want 8", d)
	}
	if d := depth(ans.AnswerPooledExtra(&req, imageBlocks("img-a")[:8])); d != 8 {
		t.Fatalf("pooled, no entry for the partial block: depth %d, want 8", d)
	}
	if d := depth(ans.AnswerExtra(&req, imageBlocks("img-b"), &sc)); d != 2 {
		t.Fatalf("another image: depth %d, want 2 (the blocks before it)", d)
	}
	noSalt := imageBlocks("img-a")
	noSalt[0] = nil
	if d := depth(ans.AnswerExtra(&req, noSalt, &sc)); d != 0 {
		t.Fatalf("without the cache salt: depth %d, want 0", d)
	}
	if d := depth(ans.Answer(&req, &sc)); d != 0 {
		t.Fatalf("without extra keys: depth %d, want 0", d)
	}
	// Blocks without extra keys hash as Answer hashes them.
	plain := qTokenRequest("plain", p.tokens, qBlockSize, qLora, qNamespace)
	x.store(3, p.tokHashes[:50])
	x.activate(3)
	if d := depth(ans.AnswerExtra(&plain, make([]ckf.ExtraKeys, 3), &sc)); d != 50 {
		t.Fatalf("empty entries: depth %d, want 50", d)
	}

	// Rules.
	hashes := qHashRequest("h", cached)
	for name, c := range map[string]struct {
		req   schemas.QueryRequest
		extra []ckf.ExtraKeys
	}{
		"with hashes": {hashes, imageBlocks("img-a")},
		"too many":    {req, append(imageBlocks("img-a"), nil)},
	} {
		if r := ans.AnswerExtra(&c.req, c.extra, &sc); r.Status != schemas.QueryInvalidRequest || r.ErrorMessage == "" {
			t.Fatalf("%s: %+v, want INVALID_REQUEST", name, r)
		}
	}

	extra := imageBlocks("img-a")
	if n := testing.AllocsPerRun(200, func() { ans.AnswerExtra(&req, extra, &sc) }); n != 0 {
		t.Errorf("extra-key query: %.1f allocations per answer, want 0", n)
	}
}
