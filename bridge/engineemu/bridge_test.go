package engineemu_test

import (
	"context"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/bridge"
	"github.com/ckf-stream/ckf-stream/bridge/engineemu"
	"github.com/ckf-stream/ckf-stream/bridge/kvevents"
	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/ckf/producer"
	"github.com/ckf-stream/ckf-stream/streams"
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
// hash format (half of them with the replay framing of vLLM 0.26 and SGLang's CPU medium), leave an exact producer state (the relay's) holding exactly the blocks of the
// emulator's model: every resident chain, nothing of the chains stored on the CPU tier, in the
// sliding-window group or evicted, and no event refused. Broker-free, so a decoder regression
// shows here first; the end-to-end test (testenv/engine) runs the same path through Kafka.
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
							if out := state.ApplyEvent(streams.RouterEventOf(&recs[i])); out.FirstError != nil || out.UnknownRemovals != 0 {
								t.Fatalf("the relay's state refused %v: %v, %d unknown removals", recs[i].Kind, out.FirstError, out.UnknownRemovals)
							}
						}
					}
				}
				m := e.Model().Ranks[0]
				want := map[ckf.CanonicalHash]bool{}
				for _, c := range m.Resident {
					for _, k := range ckf.TokenSequenceHashes(c.Tokens, blockSize, ckf.BlockSaltSeed(c.LoRAName, "")) {
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
					for _, k := range ckf.TokenSequenceHashes(c.Tokens, blockSize, ckf.BlockSaltSeed(c.LoRAName, "")) {
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
