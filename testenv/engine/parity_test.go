package engine

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ckf-stream/ckf-stream/bridge/engineemu"
	"github.com/ckf-stream/ckf-stream/ckf"
)

// parityScript encodes the batches described on stdin with engine_emulator.Wire (msgspec) and
// prints each payload in hex, one a line.
const parityScript = `
import json, sys
sys.path.insert(0, sys.argv[1])
import engine_emulator as e
for case in json.load(sys.stdin):
    w = e.Wire(case["wire"])
    fmt = case["hash_format"]
    h = lambda x: None if x is None else e.wire_hash(bytes.fromhex(x), fmt)
    evs = []
    for ev in case["events"]:
        group = e.SLIDING_GROUP if ev["group"] else None
        if ev["kind"] == "BlockStored":
            evs.append(w.stored([h(x) for x in ev["hashes"]], h(ev["parent"]), ev["tokens"],
                                ev["block_size"], ev["lora_id"], ev["medium"],
                                ev["lora_name"] or None, group, ev.get("extra_keys")))
        elif ev["kind"] == "BlockRemoved":
            evs.append(w.removed([h(x) for x in ev["hashes"]], ev["medium"], group))
        else:
            evs.append(w.cleared())
    print(w.batch(case["ts"], evs, case["rank"]).hex())
`

type parityEvent struct {
	Kind      string   `json:"kind"`
	Hashes    []string `json:"hashes"`
	Parent    *string  `json:"parent"`
	Tokens    []uint32 `json:"tokens"`
	BlockSize int      `json:"block_size"`
	LoRAID    *int     `json:"lora_id"`
	LoRAName  string   `json:"lora_name"`
	Medium    string   `json:"medium"`
	Group     bool     `json:"group"`
	// ExtraKeys is one entry per block: null, or the block's keys (strings, integers and
	// [string, integer] pairs, as vLLM's multimodal identifiers with their offsets).
	ExtraKeys []any `json:"extra_keys,omitempty"`
}

type parityCase struct {
	Wire       string        `json:"wire"`
	HashFormat string        `json:"hash_format"`
	TS         float64       `json:"ts"`
	Rank       int           `json:"rank"`
	Events     []parityEvent `json:"events"`
}

func digest(i int) engineemu.Digest {
	var d engineemu.Digest
	for k := range d {
		d[k] = byte(i*37 + k*11 + 0x80) // high bits set: negative as a signed integer
	}
	return d
}

// The Go emulator's payloads are byte for byte the Python emulator's, which msgspec writes from
// the engines' struct declarations: the two emulators speak the same wire in every shape and
// hash format, with every field kind (none and set parents, LoRA, media, groups, large token ids).
func TestGoPayloadsEqualMsgspec(t *testing.T) {
	py := python(t)
	one := 1
	events := func() ([]parityEvent, []engineemu.Event) {
		d0, d1, d2 := digest(0), digest(1), digest(2)
		h := func(d engineemu.Digest) string { return hex.EncodeToString(d[:]) }
		p := h(d0)
		tokens := []uint32{0, 1, 127, 128, 255, 256, 65535, 65536, 31999, 4294967295, 7, 8}
		pe := []parityEvent{
			{Kind: "BlockStored", Hashes: []string{h(d0)}, Tokens: tokens[:4], BlockSize: 4, Medium: "GPU"},
			{Kind: "BlockStored", Hashes: []string{h(d1), h(d2)}, Parent: &p, Tokens: tokens[4:], BlockSize: 4,
				LoRAID: &one, LoRAName: "adapter-a", Medium: "GPU"},
			{Kind: "BlockStored", Hashes: []string{h(d2)}, Tokens: tokens[:4], BlockSize: 4, Medium: "GPU", Group: true},
			{Kind: "BlockStored", Hashes: []string{h(d1)}, Parent: &p, Tokens: tokens[4:8], BlockSize: 4, Medium: "CPU"},
			{Kind: "BlockRemoved", Hashes: []string{h(d1), h(d0)}, Medium: "GPU"},
			{Kind: "BlockRemoved", Hashes: []string{h(d2)}, Medium: "GPU", Group: true},
			{Kind: "AllBlocksCleared"},
			// An image-bearing store: the first block's keys are an image with its offset and the
			// request's cache salt, the second block has none.
			{Kind: "BlockStored", Hashes: []string{h(d0), h(d1)}, Tokens: tokens[:8], BlockSize: 4, Medium: "GPU",
				ExtraKeys: []any{[]any{[]any{"img-a", 3}, "salt-1"}, nil}},
		}
		group := &engineemu.Group{Index: 1, Kind: "sliding_window", SlidingWindow: 128}
		ge := []engineemu.Event{
			{Kind: engineemu.BlockStored, Hashes: []engineemu.Digest{d0}, Tokens: tokens[:4], BlockSize: 4, Medium: "GPU"},
			{Kind: engineemu.BlockStored, Hashes: []engineemu.Digest{d1, d2}, Parent: &d0, Tokens: tokens[4:], BlockSize: 4,
				LoRAID: &one, LoRAName: "adapter-a", Medium: "GPU"},
			{Kind: engineemu.BlockStored, Hashes: []engineemu.Digest{d2}, Tokens: tokens[:4], BlockSize: 4, Medium: "GPU", Group: group},
			{Kind: engineemu.BlockStored, Hashes: []engineemu.Digest{d1}, Parent: &d0, Tokens: tokens[4:8], BlockSize: 4, Medium: "CPU"},
			{Kind: engineemu.BlockRemoved, Hashes: []engineemu.Digest{d1, d0}, Medium: "GPU"},
			{Kind: engineemu.BlockRemoved, Hashes: []engineemu.Digest{d2}, Medium: "GPU", Group: group},
			{Kind: engineemu.AllBlocksCleared},
			{Kind: engineemu.BlockStored, Hashes: []engineemu.Digest{d0, d1}, Tokens: tokens[:8], BlockSize: 4, Medium: "GPU",
				ExtraKeys: []engineemu.ExtraKeys{{ckf.ExtraTupleValue(ckf.ExtraStringValue("img-a"), ckf.ExtraIntValue(3)), ckf.ExtraStringValue("salt-1")}, nil}},
		}
		return pe, ge
	}
	var cases []parityCase
	var want [][]byte
	for _, w := range engineemu.Wires() {
		for _, hf := range []engineemu.HashFormat{engineemu.HashInt, engineemu.HashSigned, engineemu.HashBytes} {
			pe, ge := events()
			if w == engineemu.WireArray5 {
				// The five-field shape has no media and no groups.
				pe, ge = append(pe[:2], pe[4:5]...), append(ge[:2], ge[4:5]...)
				pe = append(pe, parityEvent{Kind: "AllBlocksCleared"})
				ge = append(ge, engineemu.Event{Kind: engineemu.AllBlocksCleared})
			}
			ts := 1764720000.123456
			cases = append(cases, parityCase{Wire: w.String(), HashFormat: hf.String(), TS: ts, Rank: 3, Events: pe})
			b, err := engineemu.EncodeBatch(w, hf, ts, ge, 3)
			if err != nil {
				t.Fatal(err)
			}
			want = append(want, b)
		}
	}
	in, err := json.Marshal(cases)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(py, "-c", parityScript, filepath.Join(here(t)))
	cmd.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("python: %v: %s", err, stderr.String())
	}
	lines := strings.Fields(string(out))
	if len(lines) != len(cases) {
		t.Fatalf("python printed %d payloads for %d cases", len(lines), len(cases))
	}
	for i, c := range cases {
		got, err := hex.DecodeString(lines[i])
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want[i]) {
			t.Errorf("%s/%s: msgspec wrote\n%x\nthe Go encoder\n%x", c.Wire, c.HashFormat, got, want[i])
		}
	}
}
