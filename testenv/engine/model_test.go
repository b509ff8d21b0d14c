//go:build linux

package engine

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/bridge"
	"github.com/ckf-stream/ckf-stream/bridge/engineemu"
	"github.com/ckf-stream/ckf-stream/bridge/kvevents"
	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/ckf/producer"
	"github.com/ckf-stream/ckf-stream/streams/relay"
	"github.com/ckf-stream/ckf-stream/testenv"
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

// The Python emulator's model is exact: every batch it made (read back from its replay socket),
// decoded and converted by the bridge's code and applied to the relay's exact state, leaves that
// state holding every block of the model's resident chains and nothing of its absent ones, in
// every engine release line (engineemu.Releases: shape, hashes, replay framing, CPU medium) and
// in the map shape. Where the release's shape can say a request's cache salt (vLLM's extra keys,
// SGLang's cache_salt key), a share of the sequences is salted, and the model's chains hash
// with the salt as their first block's extra key, as a router asks for them. Broker-free, so that an end-to-end failure can be told apart from a wrong
// oracle.
func TestPythonModelIsExact(t *testing.T) {
	runs := [][]string{{"--wire", "map", "--hash-format", "bytes", "--salt-fraction", "0.3"}}
	for _, r := range engineemu.Releases {
		run := []string{"--release", r.Name}
		if r.Wire == engineemu.WireArray || r.Wire == engineemu.WireMapEvents {
			run = append(run, "--salt-fraction", "0.3")
		}
		runs = append(runs, run)
	}
	for i, shape := range runs {
		t.Run(shape[1], func(t *testing.T) {
			base := testenv.FreePortRun(t, 2)
			args := append([]string{"--endpoint", fmt.Sprintf("tcp://*:%d", base), "--replay-endpoint", fmt.Sprintf("tcp://*:%d", base+1),
				"--block-size", "4", "--capacity", "64", "--dup-fraction", "0.1", "--lora-id", "3", "--seed", strconv.Itoa(7 + i),
				"--hybrid", "--topic", "kv@engine"}, shape...)
			e := startEmulator(t, t.TempDir(), "engine", 1, args...)
			// Every batch goes to the replay buffer only.
			drop := make([]int, 600)
			for i := range drop {
				drop[i] = i
			}
			e.do(map[string]any{"cmd": "run", "batches": len(drop), "drop": drop})
			model := readModel(t, e, t.TempDir())
			state, err := producer.NewDcState(ckf.NewCkfConfig(1 << 14))
			if err != nil {
				t.Fatal(err)
			}
			conv := bridge.NewConverter(5, 4, map[int64]string{3: "adapter-a"})
			var id uint64
			for _, p := range replayAll(t, fmt.Sprintf("tcp://127.0.0.1:%d", base+1)) {
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
					if out := state.ApplyEvent(relay.RouterEventOf(&recs[i])); out.FirstError != nil || out.UnknownRemovals != 0 {
						t.Fatalf("the relay's state refused an event: %v, %d unknown removals", out.FirstError, out.UnknownRemovals)
					}
				}
			}
			r := model.Ranks[0]
			want := map[ckf.CanonicalHash]bool{}
			salted := 0
			for _, ch := range r.Resident {
				for _, k := range ckf.TokenSequenceHashesExtra(ch.Tokens, 4, ch.ExtraKeys, ckf.BlockSaltSeed(ch.LoRAName, "")) {
					want[k] = true
				}
				if len(ch.ExtraKeys) > 0 {
					salted++
				}
			}
			if slices.Contains(shape, "--salt-fraction") && salted == 0 {
				t.Fatal("no resident chain is salted: the run did not cover the cache salt")
			}
			if len(want) != r.ResidentBlocks || state.ResidentCount() != uint64(len(want)) {
				t.Fatalf("the state holds %d blocks; the model says %d (%d distinct in its chains)", state.ResidentCount(), r.ResidentBlocks, len(want))
			}
			for k := range want {
				if !state.Contains(k) {
					t.Fatal("a block of a resident chain is not held")
				}
			}
			for _, ch := range r.Absent {
				for _, k := range ckf.TokenSequenceHashesExtra(ch.Tokens, 4, ch.ExtraKeys, ckf.BlockSaltSeed(ch.LoRAName, "")) {
					if state.Contains(k) != want[k] {
						t.Fatal("a block that is not resident on GPU is held")
					}
				}
			}
			if len(r.Absent) == 0 || model.Stats.DuplicateStores == 0 {
				t.Fatalf("the workload had no absent chains (%d) or duplicate stores (%d)", len(r.Absent), model.Stats.DuplicateStores)
			}
		})
	}
}
