package query_test

import (
	"strings"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/ckf-stream/ckf-stream/streams/internal/streamtest"
	"github.com/ckf-stream/ckf-stream/streams/query"
	"github.com/ckf-stream/ckf-stream/testenv"
	"github.com/uber-go/tally/v4"
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

// TestQueryExtraKeysOverKafka: a QueryRequest with block_extra_keys, sent over Kafka to the
// query service, is answered as AnswerExtra answers the same keys: the image and cache salt the
// engine stored find the whole prompt; the same tokens without the keys, or without the salt,
// find nothing; keys with a hash query are refused with INVALID_REQUEST naming the field.
func TestQueryExtraKeysOverKafka(t *testing.T) {
	t.Parallel() // its own in-process cluster
	k := streamtest.NewFakeKafka(t)
	x := newQIndex(t, 2)
	p := newQPrompts(11)
	tokens := p.tokens[:6*qBlockSize]
	extra := []ckf.ExtraKeys{{qImage("img-a", 3), ckf.ExtraStringValue("salt-1")}, {qImage("img-a", 3-qBlockSize)}}
	var cached []uint64
	for _, h := range ckf.TokenBlockHashesExtra(tokens, qBlockSize, extra, ckf.BlockSaltSeed(qLora, "")) {
		cached = append(cached, uint64(h))
	}
	x.store(2, cached)
	x.activate(2)
	codec := qCodec(t)
	tp := newQTopics(t, k, 1)
	qStartService(t, k, query.NewAnswerer(x.g, nil), codec, qConfig(tp, testenv.UniqueName(t, "g")), tally.NewTestScope("", nil))
	replies := qReplies(t, k, codec, tp.replies)

	withKeys := qTokenRequest("with-keys", tokens, qBlockSize, qLora, "")
	withKeys.BlockExtraKeys = extra
	noKeys := qTokenRequest("no-keys", tokens, qBlockSize, qLora, "")
	noSalt := qTokenRequest("no-salt", tokens, qBlockSize, qLora, "")
	noSalt.BlockExtraKeys = []ckf.ExtraKeys{{qImage("img-a", 3)}, extra[1]}
	keys, values := []string{"with-keys", "no-keys", "no-salt"}, [][]byte{qEncode(t, codec, withKeys), qEncode(t, codec, noKeys), qEncode(t, codec, noSalt)}
	// A hash query with keys, written as a writer that does not check them would.
	bad := qHashRequest("keys-with-hashes", cached)
	body := qEncode(t, codec, bad)
	body = append(body[:len(body)-2], 2, 2, 0, 0, 0) // block_extra_keys: one block, empty item; lane_mask64 null
	keys, values = append(keys, "keys-with-hashes"), append(values, body)
	qProduce(t, k.Client(t), tp.requests, keys, values)
	replies.waitIDs(t, keys, time.Minute)

	for id, want := range map[string]uint32{"with-keys": 6, "no-keys": 0, "no-salt": 0} {
		r := replies.get(id)[0]
		if r.Status != schemas.QueryOK || len(r.Lanes) != 1 || r.Lanes[0].Depth != want {
			t.Errorf("%s: %+v, want depth %d on lane 2", id, r, want)
		}
	}
	if r := replies.get("keys-with-hashes")[0]; r.Status != schemas.QueryInvalidRequest || !strings.Contains(r.ErrorMessage, "block_extra_keys") {
		t.Errorf("keys with hashes: %+v, want INVALID_REQUEST naming block_extra_keys", r)
	}
}
