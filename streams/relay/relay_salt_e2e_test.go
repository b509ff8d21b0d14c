package relay_test

import (
	"testing"

	"github.com/ckf-stream/ckf-stream/bridge/engineemu"
	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/ckf-stream/ckf-stream/streams/query"
	"github.com/ckf-stream/ckf-stream/testenv"
)

// TestSGLangCacheSaltFromEngineToQuery (producer §2.2, "Extra keys") runs SGLang's cache_salt
// through the whole path: the bridge's test engine publishing SGLang's map events, half its
// text chains salted (every store of a salted chain carries the salt), the bridge's decoding and
// conversion, the KV events on Kafka, the relay and the indexer's lane, and the answerer. A
// token query of a salted resident prompt finds its whole depth only with the salt as its first
// block's last extra key; without the salt it finds nothing of it, so an unsalted router can
// never be told about a tenant's salted cache (before the bridge hashed the salt, it found all
// of it). An unsalted prompt is found without keys.
func TestSGLangCacheSaltFromEngineToQuery(t *testing.T) {
	t.Parallel()
	const blockSize, lane = 16, 10
	e := newRelayEnv(t, 4096, 1)
	eng, err := engineemu.New(engineemu.Endpoint("tcp://127.0.0.1:0"), engineemu.ReplayEndpoint("tcp://127.0.0.1:0"),
		engineemu.Mode(engineemu.PubBind), engineemu.Ranks(1), engineemu.Topic("kv@emu"), engineemu.Shape(engineemu.WireMapEvents),
		engineemu.BlockSize(blockSize), engineemu.Capacity(64), engineemu.Seed(23), engineemu.SaltFraction(0.5))
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	if err := eng.Publish(60, func(int, uint64) bool { return true }); err != nil {
		t.Fatal(err)
	}
	bridgeToKafka(t, e, eng, blockSize)

	ri := e.StartIndexer(e.Manifest(62, lane), e.IndexerConfig())
	rr := e.startRelay(e.relayConfig(lane, testenv.UniqueName(t, "relay")), true)
	waitRelayLane(t, ri, rr, lane)
	ix := ri.Indexer

	// The salted and the plain resident chains of the model: a salted chain's keys are the salt
	// alone, on its first block.
	var salted, plain *engineemu.Chain
	for _, c := range eng.Model().Ranks[0].Resident {
		switch {
		case c.LoRAName != "" || c.Blocks < 2:
		case len(c.ExtraKeys) == 0 && (plain == nil || c.Blocks > plain.Blocks):
			plain = &c
		case len(c.ExtraKeys) > 0 && len(c.ExtraKeys[0]) == 1 && (salted == nil || c.Blocks > salted.Blocks):
			onlySalt := true
			for _, k := range c.ExtraKeys[1:] {
				onlySalt = onlySalt && len(k) == 0
			}
			if onlySalt {
				salted = &c
			}
		}
	}
	if salted == nil || plain == nil {
		t.Fatalf("the engine holds no salted (%v) or no plain (%v) resident text chain", salted != nil, plain != nil)
	}
	ans := query.NewAnswerer(ix.GlobalIndexer(), ix.EligibleLanes)
	depth := func(c *engineemu.Chain, keys []ckf.ExtraKeys) uint32 {
		t.Helper()
		req := schemas.QueryRequest{CorrelationID: "q", Input: schemas.InputTokenIDs, Tokens: schemas.AppendU32s(nil, c.Tokens), BlockSize: blockSize}
		if keys != nil {
			req.BlockExtraKeys = keys
		}
		r := ans.Answer(&req, nil)
		if r.Status != schemas.QueryOK || len(r.Lanes) != 1 {
			t.Fatalf("query: %v %q, lanes %+v", r.Status, r.ErrorMessage, r.Lanes)
		}
		return r.Lanes[0].Depth
	}
	saltKeys := make([]ckf.ExtraKeys, salted.Blocks)
	for i, k := range salted.ExtraKeys {
		saltKeys[i] = ckf.ExtraKeys(k)
	}
	if got := depth(salted, saltKeys); got != uint32(salted.Blocks) {
		t.Errorf("salted prompt with its salt: depth %d, want %d", got, salted.Blocks)
	}
	if got := depth(salted, nil); got != 0 {
		t.Errorf("salted prompt without the salt: depth %d, want 0", got)
	}
	if got := depth(plain, nil); got != uint32(plain.Blocks) {
		t.Errorf("plain prompt: depth %d, want %d", got, plain.Blocks)
	}
}
