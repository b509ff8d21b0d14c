package engineemu_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/bridge"
	"github.com/ckf-stream/ckf-stream/bridge/engineemu"
	"github.com/ckf-stream/ckf-stream/bridge/kvevents"
	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/ckf/producer"
	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/ckf-stream/ckf-stream/streams/relay"
)

// replayAll reads every batch the replay socket at endpoint holds, in sequence order, with the
// bridge's own replay client.
func replayAll(t *testing.T, endpoint string) [][]byte {
	t.Helper()
	replies, complete, err := bridge.NewReplayer(endpoint, "kv@", 30*time.Second).Replay(context.Background(), 0)
	if err != nil || !complete {
		t.Fatalf("replay from %s: complete %v, %v", endpoint, complete, err)
	}
	out := make([][]byte, len(replies))
	for i, r := range replies {
		if r.Seq != int64(i) {
			t.Fatalf("replayed sequence %d, want %d", r.Seq, i)
		}
		out[i] = r.Payload
	}
	return out
}

// The bridge's decoder and converter, fed every batch the Go emulator makes in every shape and
// hash format (half of them with the replay framing of vLLM 0.26 and SGLang's CPU medium),
// leave an exact producer state (the relay's) holding exactly the blocks of the emulator's
// model: every resident chain, nothing of the chains stored on the CPU tier, in the
// sliding-window group or evicted, and no event refused. A third of the new chains carry an
// image (extra_keys, in the shapes that have them), hashed with their blocks' extra keys; in
// SGLang's shapes a third of the new text chains are salted (the cache salt on every store of
// the sequence), hashed with the salt in their first block.
// Broker-free, so a decoder regression shows here first; the end-to-end test (testenv/engine)
// runs the same path through Kafka. Every KvStored carries the engine's block size, in every
// wire shape (vLLM's and SGLang's).
func TestBridgeConverterHoldsTheModel(t *testing.T) {
	const blockSize, ranks, batches = 4, 2, 400
	for _, w := range engineemu.Wires() {
		for _, h := range []engineemu.HashFormat{engineemu.HashInt, engineemu.HashSigned, engineemu.HashBytes} {
			t.Run(w.String()+"-"+h.String(), func(t *testing.T) {
				odd := (int(w)+int(h))%2 == 1
				cpu := "CPU"
				if odd {
					cpu = "CPU_PINNED"
				}
				e, err := engineemu.New(engineemu.Endpoint("tcp://127.0.0.1:0"), engineemu.ReplayEndpoint("tcp://127.0.0.1:0"),
					engineemu.Mode(engineemu.PubBind), engineemu.Ranks(1), engineemu.Shape(w), engineemu.Hashes(h),
					engineemu.ReplayTopicFrame(odd), engineemu.CPUMedium(cpu), engineemu.Topic("kv@emu"),
					engineemu.BlockSize(blockSize), engineemu.Capacity(64), engineemu.Hybrid(true), engineemu.DupFraction(0.1),
					engineemu.MMFraction(0.3), engineemu.SaltFraction(0.3),
					engineemu.Seed(uint64(100+10*int(w)+int(h))))
				if err != nil {
					t.Fatal(err)
				}
				defer e.Close()
				// Only the replay socket carries the batches here.
				if err := e.Publish(batches, func(int, uint64) bool { return true }); err != nil {
					t.Fatal(err)
				}
				state, err := producer.NewDcState(ckf.NewCkfConfig(1 << 14))
				if err != nil {
					t.Fatal(err)
				}
				conv := bridge.NewConverter(7, blockSize, map[int64]string{1: "adapter-a"})
				_, replay := e.Endpoints(0)
				// The same stream as two ranks of one worker: the converter and the state keep
				// ranks apart, so each rank must hold the model on its own.
				var id uint64
				stores := 0
				for r := range uint32(ranks) {
					for _, p := range replayAll(t, replay) {
						b, err := kvevents.Decode(p)
						if err != nil {
							t.Fatalf("decode: %v", err)
						}
						recs, _, err := conv.Convert(nil, &b, r, id)
						if err != nil {
							t.Fatalf("convert: %v", err)
						}
						id += uint64(len(recs))
						for i := range recs {
							if recs[i].Kind == schemas.KvStoredEvent {
								stores++
								if recs[i].Stored.BlockSize != blockSize { // every wire shape carries the engine's block size
									t.Fatalf("a KvStored carries block size %d, the engine's is %d", recs[i].Stored.BlockSize, blockSize)
								}
							}
							if out := state.ApplyEvent(relay.RouterEventOf(&recs[i])); out.FirstError != nil || out.UnknownRemovals != 0 {
								t.Fatalf("the relay's state refused %v: %v, %d unknown removals", recs[i].Kind, out.FirstError, out.UnknownRemovals)
							}
						}
					}
				}
				if stores == 0 {
					t.Fatal("no KvStored converted")
				}
				m := e.Model().Ranks[0]
				want := map[ckf.CanonicalHash]bool{}
				salted := 0
				for _, c := range m.Resident {
					if len(c.ExtraKeys) > 0 && len(c.ExtraKeys[0]) > 0 {
						if v := c.ExtraKeys[0][len(c.ExtraKeys[0])-1]; v.Kind == ckf.ExtraString && strings.HasPrefix(v.Str, "tenant-") {
							salted++
						}
					}
				}
				if sglang := w == engineemu.WireArray6 || w == engineemu.WireMapEvents; sglang != (salted > 0) {
					t.Fatalf("%d resident salted chains in shape %v", salted, w)
				}
				for _, c := range m.Resident {
					for _, k := range ckf.TokenSequenceHashesExtra(c.Tokens, blockSize, c.ExtraKeys, ckf.BlockSaltSeed(c.LoRAName, "")) {
						want[k] = true
						if !state.Contains(k) {
							t.Fatalf("a block of a resident chain is not held")
						}
					}
				}
				if len(want) != m.ResidentBlocks || state.ResidentCount() != uint64(len(want)) {
					t.Fatalf("state holds %d blocks, the model %d (%d distinct)", state.ResidentCount(), m.ResidentBlocks, len(want))
				}
				for _, c := range m.Absent {
					for _, k := range ckf.TokenSequenceHashesExtra(c.Tokens, blockSize, c.ExtraKeys, ckf.BlockSaltSeed(c.LoRAName, "")) {
						if state.Contains(k) != want[k] {
							t.Fatalf("a block not resident on GPU is held")
						}
					}
				}
				if conv.HeldBlocks(0) != m.ResidentBlocks || conv.HeldBlocks(1) != m.ResidentBlocks {
					t.Fatalf("converter holds %d and %d blocks, the model %d", conv.HeldBlocks(0), conv.HeldBlocks(1), m.ResidentBlocks)
				}
			})
		}
	}
}

// otherImage returns keys with every (identifier, offset) pair's identifier replaced by id.
func otherImage(keys []engineemu.ExtraKeys, id string) []engineemu.ExtraKeys {
	out := make([]engineemu.ExtraKeys, len(keys))
	for i, k := range keys {
		for _, v := range k {
			if v.Kind == ckf.ExtraTuple && len(v.Items) == 2 {
				v = ckf.ExtraTupleValue(ckf.ExtraStringValue(id), v.Items[1])
			}
			out[i] = append(out[i], v)
		}
	}
	return out
}

// Image-bearing blocks through the bridge's decoder and converter: chains of the same
// placeholder tokens with different images (or cache salts) are different blocks. Every
// resident image chain is held under the hashes a router computes with the chain's block extra
// keys (ckf.TokenSequenceHashesExtra, what POST /v1/prefix-matches with block_extra_keys
// computes), and from its first image block on it is not held under the hashes of the same
// tokens without extra keys or with another image; chains of the same tokens that are not
// resident are not held, and the emulator did make such pairs.
func TestBridgeConverterSeparatesImages(t *testing.T) {
	const blockSize = 4
	for _, w := range []engineemu.Wire{engineemu.WireMap, engineemu.WireArray} {
		t.Run(w.String(), func(t *testing.T) {
			e, err := engineemu.New(engineemu.Endpoint("tcp://127.0.0.1:0"), engineemu.ReplayEndpoint("tcp://127.0.0.1:0"),
				engineemu.Mode(engineemu.PubBind), engineemu.Ranks(1), engineemu.Shape(w), engineemu.Hashes(engineemu.HashBytes),
				engineemu.BlockSize(blockSize), engineemu.Capacity(48), engineemu.MMFraction(0.7), engineemu.LoRA("adapter-a", 1, 0.3),
				engineemu.Seed(uint64(7+w)))
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			if err := e.Publish(300, func(int, uint64) bool { return true }); err != nil {
				t.Fatal(err)
			}
			state, err := producer.NewDcState(ckf.NewCkfConfig(1 << 14))
			if err != nil {
				t.Fatal(err)
			}
			conv := bridge.NewConverter(7, blockSize, nil)
			_, replay := e.Endpoints(0)
			var id uint64
			for _, p := range replayAll(t, replay) {
				b, err := kvevents.Decode(p)
				if err != nil {
					t.Fatalf("decode: %v", err)
				}
				recs, _, err := conv.Convert(nil, &b, 0, id)
				if err != nil {
					t.Fatalf("convert: %v", err)
				}
				id += uint64(len(recs))
				for i := range recs {
					if out := state.ApplyEvent(relay.RouterEventOf(&recs[i])); out.FirstError != nil {
						t.Fatalf("the relay's state refused %v: %v", recs[i].Kind, out.FirstError)
					}
				}
			}
			m := e.Model().Ranks[0]
			held := func(hs []ckf.CanonicalHash) int { // how many leading blocks are held
				n := 0
				for n < len(hs) && state.Contains(hs[n]) {
					n++
				}
				return n
			}
			firstImage := func(c engineemu.Chain) int {
				for i, k := range c.ExtraKeys {
					if len(k) > 0 {
						return i
					}
				}
				return -1
			}
			// first-block tokens → the first-block extra keys (encoded) resident chains have
			residentFirst := map[string]map[string]bool{}
			firstBlock := func(c engineemu.Chain) (string, string) {
				return fmt.Sprint(c.Tokens[:blockSize]), string(c.ExtraKeys[0].AppendCanonical(nil))
			}
			images := 0
			for _, c := range m.Resident {
				if c.ExtraKeys == nil {
					continue
				}
				images++
				tokens, keys := firstBlock(c)
				if residentFirst[tokens] == nil {
					residentFirst[tokens] = map[string]bool{}
				}
				residentFirst[tokens][keys] = true
				seed := ckf.BlockSaltSeed(c.LoRAName, "")
				if n := held(ckf.TokenSequenceHashesExtra(c.Tokens, blockSize, c.ExtraKeys, seed)); n != c.Blocks {
					t.Fatalf("with its extra keys a resident image chain is held to depth %d of %d", n, c.Blocks)
				}
				first := firstImage(c)
				if n := held(ckf.TokenSequenceHashes(c.Tokens, blockSize, seed)); n > first {
					t.Fatalf("without extra keys an image chain is held to depth %d, past its first image block %d", n, first)
				}
				if n := held(ckf.TokenSequenceHashesExtra(c.Tokens, blockSize, otherImage(c.ExtraKeys, "img-other"), seed)); n > first {
					t.Fatalf("with another image an image chain is held to depth %d, past its first image block %d", n, first)
				}
			}
			sameTokens := 0
			for _, c := range m.Absent {
				if c.ExtraKeys == nil {
					continue
				}
				if tokens, keys := firstBlock(c); residentFirst[tokens] != nil && !residentFirst[tokens][keys] {
					sameTokens++ // a resident chain starts with these tokens and another image or salt
				}
			}
			if images == 0 || sameTokens == 0 {
				t.Fatalf("%d resident image chains, %d absent ones with a resident chain's first-block tokens and other extra keys: the workload made no case", images, sameTokens)
			}
			t.Logf("%d resident image chains, %d absent image chains with a resident one's first-block tokens and other extra keys", images, sameTokens)
		})
	}
}
