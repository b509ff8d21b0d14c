package bridge

import (
	"errors"
	"reflect"
	"testing"

	"github.com/ckf-stream/ckf-stream/bridge/kvevents"
	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/vmihailenco/msgpack/v5"
)

const testBS = 4

func toks(first uint32, blocks int) []uint32 {
	out := make([]uint32, blocks*testBS)
	for i := range out {
		out[i] = first + uint32(i)
	}
	return out
}

func stored(parent kvevents.BlockHash, hasParent bool, first uint32, hashes ...kvevents.BlockHash) kvevents.Event {
	return kvevents.Event{Kind: kvevents.KindStored, BlockHashes: hashes, Parent: parent, HasParent: hasParent,
		TokenIDs: toks(first, len(hashes)), BlockSize: testBS, Medium: MediumGPU}
}

func removed(hashes ...kvevents.BlockHash) kvevents.Event {
	return kvevents.Event{Kind: kvevents.KindRemoved, BlockHashes: hashes}
}

func convert(t *testing.T, c *Converter, rank uint32, evs ...kvevents.Event) ([]schemas.KvEvent, ConvertStats) {
	t.Helper()
	out, stats, err := c.Convert(nil, &kvevents.Batch{Events: evs}, rank, 100)
	if err != nil {
		t.Fatal(err)
	}
	return out, stats
}

func local(first uint32, salt uint64) uint64 {
	return uint64(ckf.TokenBlockHash(toks(first, 1), salt))
}

func TestConvertStoredHashesTokensAndKeepsEngineHashes(t *testing.T) {
	c := NewConverter(7, testBS, nil)
	out, _ := convert(t, c, 2, stored(9, true, 10, 1, 2))
	salt := ckf.BlockSaltSeed("", "")
	want := []schemas.KvEvent{{WorkerID: 7, DpRank: 2, EventID: 100, StorageTier: schemas.TierDevice,
		ResidencyDomain: schemas.Some(schemas.ResidencyWorker), Kind: schemas.KvStoredEvent,
		Stored: schemas.KvStored{ParentHash: schemas.Some(uint64(9)), Blocks: []schemas.KvBlock{
			{BlockHash: 1, TokensHash: local(10, salt)}, {BlockHash: 2, TokensHash: local(14, salt)}}, BlockSize: testBS}}}
	if !reflect.DeepEqual(out, want) {
		t.Fatalf("got  %+v\nwant %+v", out, want)
	}
}

func TestConvertCountsCopies(t *testing.T) {
	c := NewConverter(7, testBS, nil)
	convert(t, c, 0, stored(0, false, 10, 1, 2))
	// A second copy of 2 and a new block 3 after it: one run [3] whose parent is 2.
	out, stats := convert(t, c, 0, stored(1, true, 14, 2, 3))
	if len(out) != 1 || len(out[0].Stored.Blocks) != 1 || out[0].Stored.Blocks[0].BlockHash != 3 ||
		out[0].Stored.ParentHash != schemas.Some(uint64(2)) || stats.ExtraCopies != 1 {
		t.Fatalf("second store: %+v %+v", out, stats)
	}
	// A run broken by a held block: [4] [held 2] [5] gives two runs, 5's parent is 2.
	out, _ = convert(t, c, 0, stored(0, false, 30, 4, 2, 5))
	if len(out) != 2 || out[0].Stored.ParentHash.Valid || out[1].Stored.ParentHash != schemas.Some(uint64(2)) {
		t.Fatalf("split runs: %+v", out)
	}
	if c.Held(0, 2) != 3 {
		t.Fatalf("copies of 2: %d", c.Held(0, 2))
	}
	// Removing 2 three times: only the last removal is written.
	for i := 0; i < 2; i++ {
		if out, stats := convert(t, c, 0, removed(2)); len(out) != 0 || stats.HeldCopies != 1 {
			t.Fatalf("removal %d written: %+v", i, out)
		}
	}
	out, _ = convert(t, c, 0, removed(2, 99))
	if len(out) != 1 || !reflect.DeepEqual(out[0].Removed.BlockHashes, []uint64{2}) {
		t.Fatalf("final removal: %+v", out)
	}
	// Another rank is another source.
	if out, _ := convert(t, c, 1, stored(0, false, 10, 1)); len(out) != 1 {
		t.Fatalf("rank 1: %+v", out)
	}
}

func TestConvertUnknownRemovalDropped(t *testing.T) {
	c := NewConverter(7, testBS, nil)
	out, stats := convert(t, c, 0, removed(5))
	if len(out) != 0 || stats.UnknownRemovals != 1 {
		t.Fatalf("%+v %+v", out, stats)
	}
}

func TestConvertClear(t *testing.T) {
	c := NewConverter(7, testBS, nil)
	convert(t, c, 0, stored(0, false, 10, 1, 2))
	out, _ := convert(t, c, 0, kvevents.Event{Kind: kvevents.KindCleared})
	if len(out) != 1 || out[0].Kind != schemas.KvClearedEvent || c.HeldBlocks(0) != 0 {
		t.Fatalf("%+v", out)
	}
	if ev := c.Clear(0, 5); ev.Kind != schemas.KvClearedEvent || ev.DpRank != 0 || ev.WorkerID != 7 {
		t.Fatalf("%+v", ev)
	}
}

func TestConvertFiltersMediaAndGroups(t *testing.T) {
	c := NewConverter(7, testBS, nil)
	cpu := stored(0, false, 10, 1)
	cpu.Medium = "CPU"
	sliding := stored(0, false, 10, 2)
	sliding.HasGroup, sliding.GroupIdx, sliding.SpecKind = true, 1, "sliding_window"
	full := stored(0, false, 10, 3)
	full.HasGroup, full.GroupIdx, full.SpecKind = true, 0, SpecFullAttention
	out, stats := convert(t, c, 0, cpu, sliding, full)
	if len(out) != 1 || out[0].Stored.Blocks[0].BlockHash != 3 || stats.Filtered != 2 {
		t.Fatalf("%+v %+v", out, stats)
	}
	// Removals carry only the group index: group 1 was learned to be skipped.
	r1 := removed(2)
	r1.HasGroup, r1.GroupIdx = true, 1
	cpuRemoval := removed(3)
	cpuRemoval.Medium = "CPU"
	out, stats = convert(t, c, 0, r1, cpuRemoval)
	if len(out) != 0 || stats.Filtered != 2 || c.Held(0, 3) != 1 {
		t.Fatalf("%+v %+v", out, stats)
	}
}

func TestConvertLoRA(t *testing.T) {
	c := NewConverter(7, testBS, map[int64]string{3: "adapter-c"})
	named := stored(0, false, 10, 1)
	named.LoraName = "adapter-a"
	byID := stored(0, false, 10, 2)
	byID.HasLoraID, byID.LoraID = true, 3
	out, _ := convert(t, c, 0, named, byID)
	if out[0].Stored.Blocks[0].TokensHash != local(10, ckf.BlockSaltSeed("adapter-a", "")) ||
		out[1].Stored.Blocks[0].TokensHash != local(10, ckf.BlockSaltSeed("adapter-c", "")) {
		t.Fatalf("salts: %+v", out)
	}
	unmapped := stored(0, false, 10, 5)
	unmapped.HasLoraID, unmapped.LoraID = true, 4
	_, _, err := c.Convert(nil, &kvevents.Batch{Events: []kvevents.Event{stored(0, false, 1, 6), unmapped}}, 0, 0)
	var re *RefusedError
	if !errors.As(err, &re) || !errors.Is(err, ErrLoraUnmapped) || re.Event != 1 {
		t.Fatalf("err = %v", err)
	}
	if c.Held(0, 6) != 0 {
		t.Fatal("a refused batch changed state")
	}
}

func TestConvertRefusesBlockSizeMismatch(t *testing.T) {
	c := NewConverter(7, testBS, nil)
	wrong := stored(0, false, 10, 1)
	wrong.BlockSize = 16
	short := stored(0, false, 10, 2)
	short.TokenIDs = short.TokenIDs[:3]
	for _, ev := range []kvevents.Event{wrong, short} {
		out, _, err := c.Convert(nil, &kvevents.Batch{Events: []kvevents.Event{ev}}, 0, 0)
		if !errors.Is(err, ErrBlockSize) || len(out) != 0 || c.HeldBlocks(0) != 0 {
			t.Fatalf("err = %v, out %+v", err, out)
		}
	}
}

// TestConvertGroupKnowledge: a removal of a group no store described is skipped once the
// full-attention group is known to be another one, and what a rank learned about its groups
// survives a restart through GroupKinds (the ckf-bridge-groups header).
func TestConvertGroupKnowledge(t *testing.T) {
	c := NewConverter(7, testBS, nil)
	unknown := removed(1)
	unknown.HasGroup, unknown.GroupIdx = true, 2
	convert(t, c, 0, stored(0, false, 10, 1))
	if out, stats := convert(t, c, 0, unknown); len(out) != 1 || stats.Filtered != 0 {
		t.Fatalf("nothing learned: a grouped removal applies: %+v %+v", out, stats)
	}
	full := stored(0, false, 10, 3)
	full.HasGroup, full.GroupIdx, full.SpecKind = true, 0, SpecFullAttention
	sliding := stored(0, false, 10, 3)
	sliding.HasGroup, sliding.GroupIdx, sliding.SpecKind = true, 1, "sliding_window"
	convert(t, c, 0, full, sliding)
	unknown.BlockHashes = []kvevents.BlockHash{3}
	if out, stats := convert(t, c, 0, unknown); len(out) != 0 || stats.Filtered != 1 || c.Held(0, 3) != 1 {
		t.Fatalf("unknown group beside a known full-attention group: %+v %+v", out, stats)
	}
	kinds := c.GroupKinds(0)
	if len(kinds) != 18 {
		t.Fatalf("GroupKinds %x", kinds)
	}
	// A restarted bridge that read the header back skips group 1's removals before any store.
	c2 := NewConverter(7, testBS, nil)
	rb := newReadBack(c2)
	h := append(provenance(4, 1, 0, 1), kgo.RecordHeader{Key: HeaderGroups, Value: kinds})
	rb.record(h, storedKV(3))
	slidingRemoval := removed(3)
	slidingRemoval.HasGroup, slidingRemoval.GroupIdx = true, 1
	if out, stats := convert(t, c2, 0, slidingRemoval); len(out) != 0 || stats.Filtered != 1 || c2.Held(0, 3) != 1 {
		t.Fatalf("after read-back: %+v %+v", out, stats)
	}
}

// Events outside the filter's scope are filtered before their size is checked: a Mamba-state
// store without tokens, a store on a medium spelled in another case ("cpu", a connector's), and
// SGLang's partial last page (one block shorter than the block size) do not refuse the batch
// they came in; the device stores beside them are written.
func TestConvertFiltersBeforeCheckingSizes(t *testing.T) {
	c := NewConverter(7, testBS, nil)
	mamba := kvevents.Event{Kind: kvevents.KindStored, BlockHashes: []kvevents.BlockHash{50}, BlockSize: testBS,
		SpecKind: "mamba", HasGroup: true, GroupIdx: 2, Medium: MediumGPU}
	cpu := stored(0, false, 30, 60)
	cpu.Medium, cpu.BlockSize, cpu.TokenIDs = "cpu", 2, []uint32{1, 2}
	partial := kvevents.Event{Kind: kvevents.KindStored, BlockHashes: []kvevents.BlockHash{70}, Parent: 1, HasParent: true,
		TokenIDs: []uint32{1, 2, 3}, BlockSize: 3, Medium: "gpu"}
	out, st := convert(t, c, 0, stored(0, false, 10, 1), mamba, cpu, partial)
	if len(out) != 1 || st.Filtered != 3 || c.HeldBlocks(0) != 1 || c.Held(0, 1) != 1 {
		t.Fatalf("out %+v stats %+v held %v", out, st, c.HeldHashes(0))
	}
	// A device store of another size is still refused.
	bad := stored(0, false, 10, 2)
	bad.BlockSize, bad.TokenIDs = 8, toks(10, 2)
	if _, _, err := c.Convert(nil, &kvevents.Batch{Events: []kvevents.Event{bad}}, 0, 1); !errors.Is(err, ErrBlockSize) {
		t.Fatalf("a device store of block size 8: %v", err)
	}
}

// mm is vLLM's published form of a multimodal item in a block's extra keys.
func mm(id string, offset int64) ckf.ExtraValue {
	return ckf.ExtraTupleValue(ckf.ExtraStringValue(id), ckf.ExtraIntValue(offset))
}

// Blocks with the same tokens but different images (or a cache salt) get different local
// hashes; the engine's LoRA name in extra_keys is not salted twice; blocks without extra keys
// hash as text blocks.
func TestConvertHashesExtraKeys(t *testing.T) {
	const lora = "adapter-a"
	seed := ckf.BlockSaltSeed(lora, "")
	ev := func(extra ...ckf.ExtraKeys) kvevents.Event {
		e := stored(0, false, 10, 1, 2)
		e.LoraName, e.ExtraKeys = lora, extra
		return e
	}
	hashes := func(e kvevents.Event) [2]uint64 {
		out, _ := convert(t, NewConverter(7, testBS, nil), 0, e)
		b := out[0].Stored.Blocks
		return [2]uint64{b[0].TokensHash, b[1].TokensHash}
	}
	imgA := ev(ckf.ExtraKeys{ckf.ExtraStringValue(lora), mm("img-a", 1), ckf.ExtraStringValue("salt-1")},
		ckf.ExtraKeys{ckf.ExtraStringValue(lora), mm("img-a", -3)})
	want := [2]uint64{
		uint64(ckf.TokenBlockHashExtra(toks(10, 1), ckf.ExtraKeys{mm("img-a", 1), ckf.ExtraStringValue("salt-1")}, seed)),
		uint64(ckf.TokenBlockHashExtra(toks(14, 1), ckf.ExtraKeys{mm("img-a", -3)}, seed)),
	}
	if got := hashes(imgA); got != want {
		t.Fatalf("image a: %#x, want %#x (the LoRA name dropped, the rest hashed)", got, want)
	}
	imgB := ev(ckf.ExtraKeys{ckf.ExtraStringValue(lora), mm("img-b", 1), ckf.ExtraStringValue("salt-1")},
		ckf.ExtraKeys{ckf.ExtraStringValue(lora), mm("img-b", -3)})
	if got := hashes(imgB); got[0] == want[0] || got[1] == want[1] {
		t.Fatalf("images a and b share local hashes %#x", got)
	}
	text := [2]uint64{local(10, seed), local(14, seed)}
	if got := hashes(ev(ckf.ExtraKeys{ckf.ExtraStringValue(lora)}, nil)); got != text {
		t.Fatalf("LoRA-only extra keys: %#x, want the text hashes %#x", got, text)
	}
	if got := hashes(ev()); got != text {
		t.Fatalf("no extra_keys: %#x, want %#x", got, text)
	}
	// A name in the middle, or another LoRA's name, is a key like any other.
	if got := hashes(ev(ckf.ExtraKeys{ckf.ExtraStringValue("other")}, ckf.ExtraKeys{mm("x", 0), ckf.ExtraStringValue(lora)})); got[0] == text[0] || got[1] == text[1] {
		t.Fatal("extra keys other than the leading LoRA name were dropped")
	}
	// Events built by hand with a wrong number of entries are refused.
	_, _, err := NewConverter(7, testBS, nil).Convert(nil, &kvevents.Batch{Events: []kvevents.Event{ev(nil)}}, 0, 1)
	if !errors.Is(err, ErrExtraKeys) {
		t.Fatalf("one entry for two blocks: %v, want ErrExtraKeys", err)
	}
}

// TestConvertSGLangCacheSalt: a salted SGLang sequence (its stores carry the cache salt) is
// salted on its first block only, and its canonical chain is the one a router computes for the
// same tokens with the salt as the first block's extra key, so that router matches every block,
// a router without the salt (or with another one) matches none, and unsalted stores hash as
// before. The salt reaches the converter from both SGLang wire shapes.
func TestConvertSGLangCacheSalt(t *testing.T) {
	seed := ckf.BlockSaltSeed("", "")
	salted := func(ev kvevents.Event, salt string) kvevents.Event {
		ev.CacheSalt, ev.HasCacheSalt = salt, true
		return ev
	}
	// SGLang publishes one store per page, each naming the page before it.
	c := NewConverter(7, testBS, nil)
	out, _ := convert(t, c, 0, salted(stored(0, false, 10, 1), "tenant-a"), salted(stored(1, true, 14, 2), "tenant-a"),
		salted(stored(2, true, 18, 3), "tenant-a"))
	var locals []uint64
	for _, ev := range out {
		for _, b := range ev.Stored.Blocks {
			locals = append(locals, b.TokensHash)
		}
	}
	tokens := toks(10, 3)
	saltKeys := []ckf.ExtraKeys{{ckf.ExtraStringValue("tenant-a")}}
	wantLocal := ckf.TokenBlockHashesExtra(tokens, testBS, saltKeys, seed)
	for i := range wantLocal {
		if locals[i] != uint64(wantLocal[i]) {
			t.Fatalf("block %d: local %#x, want %#x (the salt in the first block only)", i, locals[i], uint64(wantLocal[i]))
		}
	}
	if locals[1] != local(14, seed) || locals[2] != local(18, seed) {
		t.Fatal("blocks after the first are salted: their chain carries the salt already")
	}
	held := map[ckf.CanonicalHash]bool{}
	for _, h := range ckf.SequenceHashes(locals) {
		held[ckf.CanonicalHash(h)] = true
	}
	matches := func(chain []ckf.CanonicalHash) int {
		n := 0
		for _, h := range chain {
			if held[h] {
				n++
			}
		}
		return n
	}
	if n := matches(ckf.TokenSequenceHashesExtra(tokens, testBS, saltKeys, seed)); n != 3 {
		t.Errorf("a router with the salt matches %d blocks, want 3", n)
	}
	if n := matches(ckf.TokenSequenceHashes(tokens, testBS, seed)); n != 0 {
		t.Errorf("a router without the salt matches %d blocks, want 0", n)
	}
	if n := matches(ckf.TokenSequenceHashesExtra(tokens, testBS, []ckf.ExtraKeys{{ckf.ExtraStringValue("tenant-b")}}, seed)); n != 0 {
		t.Errorf("a router with another salt matches %d blocks, want 0", n)
	}
	// Unsalted stores, and a salted store that continues a sequence, are not salted.
	out, _ = convert(t, NewConverter(7, testBS, nil), 0, stored(0, false, 10, 1), salted(stored(1, true, 14, 2), "tenant-a"))
	if b := out[0].Stored.Blocks[0].TokensHash; b != local(10, seed) {
		t.Errorf("unsalted first block %#x, want %#x", b, local(10, seed))
	}
	if b := out[1].Stored.Blocks[0].TokensHash; b != local(14, seed) {
		t.Errorf("salted continuation %#x, want the text hash %#x", b, local(14, seed))
	}
	// Both SGLang shapes, decoded: the 0.5.18 array event with its metadata map, the later map
	// event with its cache_salt key.
	want := uint64(wantLocal[0])
	for name, ev := range map[string]any{
		"array with metadata": []any{"BlockStored", []any{int64(-7)}, nil, toks(10, 1), testBS, nil, "GPU", map[string]any{"cache_salt": "tenant-a"}},
		"map with cache_salt": map[string]any{"type": "BlockStored", "block_hashes": []any{int64(-7)}, "parent_block_hash": nil,
			"token_ids": toks(10, 1), "block_size": testBS, "lora_id": nil, "medium": "GPU", "cache_salt": "tenant-a"},
	} {
		raw, err := msgpack.Marshal([]any{1.5, []any{ev}, 0})
		if err != nil {
			t.Fatal(err)
		}
		b, err := kvevents.Decode(raw)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		out, _, err := NewConverter(7, testBS, nil).Convert(nil, &b, 0, 1)
		if err != nil || len(out) != 1 || out[0].Stored.Blocks[0].TokensHash != want {
			t.Errorf("%s: %+v, %v; want the salted hash %#x", name, out, err, want)
		}
	}
}
