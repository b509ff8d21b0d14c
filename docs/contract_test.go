package docs

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/schemas"
)

// contractPage is the page for producers and routers; its worked example is computed here with
// the project's own hashing and codec, so the page cannot drift from the code.
const contractPage = "producers-and-routers.md"

// exampleTokens, exampleBlockSize and the salts are the worked example's inputs.
var exampleTokens = []uint32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}

const (
	exampleBlockSize = 4
	exampleLora      = "sql-adapter"
	exampleNamespace = "tenant-42"
)

// workedExampleHashes renders the hashing part of the worked example: salt seeds, tokens_hash
// values and canonical chain for no salt, a LoRA name, and a LoRA name plus a cache namespace.
func workedExampleHashes() (string, []uint64) {
	type column struct {
		head        string
		lora, space string
	}
	cols := []column{{"no salt", "", ""}, {`lora "` + exampleLora + `"`, exampleLora, ""},
		{`lora + namespace "` + exampleNamespace + `"`, exampleLora, exampleNamespace}}
	var b strings.Builder
	fmt.Fprintf(&b, "block_size %d, tokens %s: two blocks (9 and 10 fill no block and are dropped)\n\n",
		exampleBlockSize, strings.Trim(fmt.Sprint(exampleTokens), "[]"))
	row := func(label string, cells ...string) {
		line := fmt.Sprintf("%-22s", label)
		for _, c := range cells {
			line += fmt.Sprintf("  %-28s", c)
		}
		b.WriteString(strings.TrimRight(line, " ") + "\n")
	}
	var heads, seeds []string
	local := make([][]uint64, len(cols))
	for i, c := range cols {
		heads = append(heads, c.head)
		seed := ckf.BlockSaltSeed(c.lora, c.space)
		seeds = append(seeds, fmt.Sprintf("%#016x", seed))
		for _, h := range ckf.TokenBlockHashes(exampleTokens, exampleBlockSize, seed) {
			local[i] = append(local[i], uint64(h))
		}
	}
	row("", heads...)
	row("salt seed", seeds...)
	for blk := range local[0] {
		var cells []string
		for i := range cols {
			cells = append(cells, fmt.Sprintf("%#016x", local[i][blk]))
		}
		row(fmt.Sprintf("tokens_hash, block %d", blk), cells...)
	}
	for blk := range local[0] {
		var cells []string
		for i := range cols {
			cells = append(cells, fmt.Sprintf("%#016x", ckf.SequenceHashes(local[i])[blk]))
		}
		row(fmt.Sprintf("canonical, block %d", blk), cells...)
	}
	return strings.TrimRight(b.String(), "\n") + "\n", local[0]
}

// hexLines renders b as lowercase hex bytes, sixteen to a line, each line indented.
func hexLines(b []byte) string {
	var out strings.Builder
	for i := 0; i < len(b); i += 16 {
		line := b[i:min(i+16, len(b))]
		parts := make([]string, len(line))
		for j, x := range line {
			parts[j] = fmt.Sprintf("%02x", x)
		}
		out.WriteString("  " + strings.Join(parts, " ") + "\n")
	}
	return out.String()
}

// workedExampleRecords renders the wire part: the unsalted blocks stored by worker 7 as a
// KvEvent, and queried by local block hashes as a QueryRequest, each value in full.
func workedExampleRecords(t *testing.T, local []uint64) string {
	t.Helper()
	codec, err := schemas.NewCodec(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	ev := schemas.KvEvent{WorkerID: 7, EventID: 1, StorageTier: schemas.TierDevice, Kind: schemas.KvStoredEvent,
		Stored: schemas.KvStored{Blocks: []schemas.KvBlock{{BlockHash: 0x100, TokensHash: local[0]}, {BlockHash: 0x101, TokensHash: local[1]}},
			BlockSize: 4}}
	kv, err := codec.EncodeKvEvent(ev)
	if err != nil {
		t.Fatal(err)
	}
	packed := make([]byte, 0, 8*len(local))
	for _, h := range local {
		packed = binary.LittleEndian.AppendUint64(packed, h)
	}
	q := schemas.QueryRequest{CorrelationID: "q1", Input: schemas.InputLocalBlockHashes, Hashes: schemas.AppendU64s(nil, local),
		ReplyPartition: schemas.Some[int32](0)}
	qb, err := codec.EncodeQueryRequest(q)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "KvEvent to the DC's KV-events topic, key \"7\"; worker_id 7, dp_rank 0, event_id 1, DEVICE,\n")
	fmt.Fprintf(&b, "KvStored with no parent, blocks {block_hash 0x100, tokens_hash block 0}, {0x101, block 1}\n")
	fmt.Fprintf(&b, "and block_size 4:\n")
	b.WriteString(hexLines(kv))
	fmt.Fprintf(&b, "\nQueryRequest, key \"q1\": correlation_id \"q1\", LocalBlockHashes of the same two blocks\n")
	fmt.Fprintf(&b, "(hashes = %d bytes, little-endian u64 each), no lane mask, reply_partition 0:\n", len(packed))
	b.WriteString(hexLines(qb))
	return b.String()
}

// TestContractPageWorkedExample fails when the worked example of docs/producers-and-routers.md
// differs from what ckf's hashing and the schemas codec compute; the message holds the text to
// paste.
func TestContractPageWorkedExample(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(repoRoot, "docs", contractPage))
	if err != nil {
		t.Fatal(err)
	}
	page := string(raw)
	hashes, local := workedExampleHashes()
	records := workedExampleRecords(t, local)
	for name, want := range map[string]string{"hashes": hashes, "records": records} {
		if !strings.Contains(page, want) {
			t.Errorf("docs/%s: the worked example's %s are not (or no longer) these:\n%s", contractPage, name, want)
		}
	}
	// The built-in ids the page names are the codec's.
	for _, rt := range []schemas.RecordType{schemas.TypeKvEvent, schemas.TypeQueryRequest, schemas.TypeQueryReply} {
		if id := fmt.Sprintf("%#08X", schemas.BuiltinID(rt)); !strings.Contains(page, strings.Replace(id, "0X", "0x", 1)) {
			t.Errorf("docs/%s does not name %v's built-in id %s", contractPage, rt, id)
		}
	}
}

// workedExampleExtraKeys renders the extra-keys part of the worked example: the same two blocks
// with an image over tokens 2..7 ("img-a" or "img-b"), and with a cache salt on block 0, their
// extra keys as a router gives them (block_extra_keys), block 0's canonical encoding and the
// tokens_hash and canonical hashes, unsalted (seed 1337).
func workedExampleExtraKeys() string {
	img := func(id string, offset int64) ckf.ExtraValue {
		return ckf.ExtraTupleValue(ckf.ExtraStringValue(id), ckf.ExtraIntValue(offset))
	}
	type column struct {
		head  string
		extra []ckf.ExtraKeys
	}
	cols := []column{
		{"no extra keys", nil},
		{`image "img-a"`, []ckf.ExtraKeys{{img("img-a", 1)}, {img("img-a", -3)}}},
		{`image "img-b"`, []ckf.ExtraKeys{{img("img-b", 1)}, {img("img-b", -3)}}},
		{`"img-a" + cache_salt "salt-1"`, []ckf.ExtraKeys{{img("img-a", 1), ckf.ExtraStringValue("salt-1")}, {img("img-a", -3)}}},
	}
	var b strings.Builder
	fmt.Fprintf(&b, "block_size %d, tokens %s, no LoRA, no namespace (salt seed 0x539); the image covers\n",
		exampleBlockSize, strings.Trim(fmt.Sprint(exampleTokens), "[]"))
	b.WriteString("tokens 2..7 (offset 1 in block 0, -3 in block 1)\n\n")
	row := func(label string, cells ...string) {
		line := fmt.Sprintf("%-22s", label)
		for _, c := range cells {
			line += fmt.Sprintf("  %-30s", c)
		}
		b.WriteString(strings.TrimRight(line, " ") + "\n")
	}
	var heads []string
	local := make([][]ckf.LocalBlockHash, len(cols))
	for i, c := range cols {
		heads = append(heads, c.head)
		local[i] = ckf.TokenBlockHashesExtra(exampleTokens, exampleBlockSize, c.extra, ckf.BlockSaltSeed("", ""))
	}
	row("", heads...)
	for blk := range local[0] {
		var cells []string
		for i := range cols {
			cells = append(cells, fmt.Sprintf("%#016x", uint64(local[i][blk])))
		}
		row(fmt.Sprintf("tokens_hash, block %d", blk), cells...)
	}
	for blk := range local[0] {
		var cells []string
		for i := range cols {
			seq := make([]uint64, len(local[i]))
			for j, h := range local[i] {
				seq[j] = uint64(h)
			}
			cells = append(cells, fmt.Sprintf("%#016x", ckf.SequenceHashes(seq)[blk]))
		}
		row(fmt.Sprintf("canonical, block %d", blk), cells...)
	}
	last := cols[len(cols)-1].extra
	js, _ := json.Marshal(last)
	fmt.Fprintf(&b, "\nblock_extra_keys of the last column: %s\n", js)
	fmt.Fprintf(&b, "its block 0, encoded (appended after the 16 token bytes):\n")
	b.WriteString(hexLines(last[0].AppendCanonical(nil)))
	return b.String()
}

// TestContractPageExtraKeysExample fails when the extra-keys worked example of
// docs/producers-and-routers.md differs from what ckf computes; the message holds the text.
func TestContractPageExtraKeysExample(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(repoRoot, "docs", contractPage))
	if err != nil {
		t.Fatal(err)
	}
	if want := workedExampleExtraKeys(); !strings.Contains(string(raw), want) {
		t.Errorf("docs/%s: the extra-keys worked example is not (or no longer) this:\n%s", contractPage, want)
	}
}
