package bridge_test

import (
	"testing"

	"github.com/ckf-stream/ckf-stream/bridge"
	"github.com/ckf-stream/ckf-stream/bridge/kvevents"
	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/ckf/producer"
	"github.com/ckf-stream/ckf-stream/streams/relay"
)

// queryHashes is what a router computes for a prompt: the canonical chain of the token
// blocks' local hashes (producer §2), with the LoRA salt of the adapter it targets.
func queryHashes(tokens []uint32, bs int, lora string) []ckf.CanonicalHash {
	return ckf.TokenSequenceHashes(tokens, bs, ckf.BlockSaltSeed(lora, ""))
}

func seqTokens(first uint32, n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = first + uint32(i)
	}
	return out
}

// TestConvertedEventsMeetTheRelay applies the bridge's records for an engine-like stream
// (a prompt stored in two steps with its parent, a second copy, a LoRA request, removals of
// one of two copies and of the last copy) to the relay's exact state: no event is rejected, and
// a router's query hashes, computed from the tokens alone, find exactly the blocks the engine
// still holds.
func TestConvertedEventsMeetTheRelay(t *testing.T) {
	const bs = 4
	st, err := producer.NewDcState(ckf.NewCkfConfig(1 << 12))
	if err != nil {
		t.Fatal(err)
	}
	conv := bridge.NewConverter(7, bs, nil)
	prompt := seqTokens(100, 4*bs)
	loraPrompt := seqTokens(500, 2*bs)
	batches := []kvevents.Batch{
		{Events: []kvevents.Event{{Kind: kvevents.KindStored, BlockHashes: []kvevents.BlockHash{1, 2}, TokenIDs: prompt[:2*bs], BlockSize: bs, Medium: "GPU"}}},
		{Events: []kvevents.Event{
			{Kind: kvevents.KindStored, BlockHashes: []kvevents.BlockHash{3, 4}, Parent: 2, HasParent: true, TokenIDs: prompt[2*bs:], BlockSize: bs, Medium: "GPU"},
			// Another request computed block 2 again: a second copy.
			{Kind: kvevents.KindStored, BlockHashes: []kvevents.BlockHash{2}, Parent: 1, HasParent: true, TokenIDs: prompt[bs : 2*bs], BlockSize: bs},
			{Kind: kvevents.KindStored, BlockHashes: []kvevents.BlockHash{11, 12}, TokenIDs: loraPrompt, BlockSize: bs, LoraName: "adapter-a"},
		}},
		{Events: []kvevents.Event{
			{Kind: kvevents.KindRemoved, BlockHashes: []kvevents.BlockHash{4, 2}}, // 2 keeps a copy
			{Kind: kvevents.KindRemoved, BlockHashes: []kvevents.BlockHash{12}},
		}},
	}
	for i := range batches {
		evs, _, err := conv.Convert(nil, &batches[i], 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		for j := range evs {
			out := st.ApplyEvent(relay.RouterEventOf(&evs[j]))
			if out.FirstError != nil || out.UnknownRemovals != 0 {
				t.Fatalf("batch %d record %d (%v) rejected: %v, unknown removals %d", i, j, evs[j].Kind, out.FirstError, out.UnknownRemovals)
			}
		}
	}
	check := func(what string, hashes []ckf.CanonicalHash, want []bool) {
		t.Helper()
		for i, h := range hashes {
			if owners, _ := st.Owners(h); (owners > 0) != want[i] {
				t.Errorf("%s block %d: owned %v, want %v", what, i, owners > 0, want[i])
			}
		}
	}
	check("prompt", queryHashes(prompt, bs, ""), []bool{true, true, true, false})
	check("LoRA prompt", queryHashes(loraPrompt, bs, "adapter-a"), []bool{true, false})
	check("LoRA prompt without the adapter", queryHashes(loraPrompt, bs, ""), []bool{false, false})
}
