package ckf

import (
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/zeebo/xxh3"
)

// img is vLLM's published form of a multimodal item in a block's extra keys:
// (identifier, offset of the item relative to the block's first token).
func img(id string, offset int64) ExtraValue {
	return ExtraTupleValue(ExtraStringValue(id), ExtraIntValue(offset))
}

// Without extra keys the salted hash is the plain one, for every salt: text blocks keep the
// hashes they always had.
func TestTokenBlockHashExtraWithoutKeysIsTokenBlockHash(t *testing.T) {
	tokens := []uint32{1, 2, 3, 4}
	for _, seed := range []uint64{ChainHashSeed, BlockSaltSeed("sql-adapter", ""), BlockSaltSeed("a", "ns")} {
		want := TokenBlockHash(tokens, seed)
		if got := TokenBlockHashExtra(tokens, nil, seed); got != want {
			t.Fatalf("nil extra keys: %#x, want %#x", got, want)
		}
		if got := TokenBlockHashExtra(tokens, ExtraKeys{}, seed); got != want {
			t.Fatalf("empty extra keys: %#x, want %#x", got, want)
		}
	}
	long := make([]uint32, 300) // past the stack buffer
	for i := range long {
		long[i] = uint32(i * 7)
	}
	keys := ExtraKeys{img("x", 0)}
	want := xxh3.HashSeed(keys.AppendCanonical(binary.LittleEndian.AppendUint32(nil, 0)), 5)
	if got := TokenBlockHashExtra(long[:1], keys, 5); uint64(got) != want {
		t.Fatalf("one token: %#x, want %#x", got, want)
	}
	if TokenBlockHashExtra(long, keys, 5) == TokenBlockHash(long, 5) {
		t.Fatal("300 tokens: the extra keys changed nothing")
	}
	tb := TokenBlockHashesExtra(append(append([]uint32{}, long[:8]...), 9), 4, []ExtraKeys{nil}, 5)
	if len(tb) != 2 || tb[0] != TokenBlockHash(long[:4], 5) || tb[1] != TokenBlockHash(long[4:8], 5) {
		t.Fatalf("TokenBlockHashesExtra with a short extra list: %#x", tb)
	}
}

// Same tokens with different images, offsets, salts or order hash apart; the same keys hash
// alike however they were built.
func TestTokenBlockHashExtraSeparates(t *testing.T) {
	tokens := []uint32{9, 9, 9, 9}
	cases := map[string]ExtraKeys{
		"plain":         nil,
		"img-a@1":       {img("img-a", 1)},
		"img-b@1":       {img("img-b", 1)},
		"img-a@0":       {img("img-a", 0)},
		"img-a@-3":      {img("img-a", -3)},
		"img-a,salt":    {img("img-a", 1), ExtraStringValue("salt-1")},
		"salt,img-a":    {ExtraStringValue("salt-1"), img("img-a", 1)},
		"salt":          {ExtraStringValue("salt-1")},
		"salt-bytes":    {ExtraBytesValue([]byte("salt-1"))},
		"none":          {ExtraNil()},
		"false":         {ExtraBoolValue(false)},
		"zero":          {ExtraIntValue(0)},
		"zero-float":    {ExtraFloatValue(0)},
		"big":           {ExtraUintValue(math.MaxUint64)},
		"minus-one":     {ExtraIntValue(-1)},
		"empty-tuple":   {ExtraTupleValue()},
		"empty-str":     {ExtraStringValue("")},
		"two-empty-str": {ExtraStringValue(""), ExtraStringValue("")},
		"split":         {ExtraStringValue("ab"), ExtraStringValue("c")},
		"split2":        {ExtraStringValue("a"), ExtraStringValue("bc")},
	}
	seen := map[LocalBlockHash]string{}
	for name, keys := range cases {
		h := TokenBlockHashExtra(tokens, keys, ChainHashSeed)
		if other, dup := seen[h]; dup {
			t.Fatalf("%s and %s hash alike", name, other)
		}
		seen[h] = name
	}
	again := ExtraKeys{ExtraTupleValue(ExtraStringValue("img-a"), ExtraUintValue(1))} // built another way
	if TokenBlockHashExtra(tokens, again, ChainHashSeed) != TokenBlockHashExtra(tokens, cases["img-a@1"], ChainHashSeed) {
		t.Fatal("the same keys hash apart")
	}
	// An integer has one form whichever constructor read it.
	if !ExtraUintValue(7).Equal(ExtraIntValue(7)) || ExtraUintValue(1<<63).Kind != ExtraUint {
		t.Fatal("ExtraUintValue does not normalise")
	}
}

// The canonical encoding, byte for byte (producer §2.2 states it; docs/contract_test.go pins
// the worked example's hashes).
func TestExtraKeysCanonicalEncoding(t *testing.T) {
	keys := ExtraKeys{img("img-a", 1), ExtraStringValue("salt-1"), ExtraNil(), ExtraBoolValue(true),
		ExtraUintValue(1 << 63), ExtraFloatValue(0.5), ExtraBytesValue([]byte{0xab})}
	got := hex.EncodeToString(keys.AppendCanonical(nil))
	want := strings.Join([]string{
		"07", "07000000", // the block's tuple, 7 values
		"07", "02000000", "05", "05000000", "696d672d61", "02", "0100000000000000", // ("img-a", 1)
		"05", "06000000", "73616c742d31", // "salt-1"
		"00",       // None
		"01", "01", // True
		"03", "0000000000000080", // 2^63
		"04", "000000000000e03f", // 0.5
		"06", "01000000", "ab", // b"\xab"
	}, "")
	if got != want {
		t.Fatalf("encoding\n got %s\nwant %s", got, want)
	}
	if len(ExtraKeys(nil).AppendCanonical(nil)) != 0 {
		t.Fatal("no keys encode to something")
	}
}

func TestExtraValueJSON(t *testing.T) {
	in := `[null, [["img-a", 1], "salt", {"bytes": "ab01"}, -3, 18446744073709551615, 1.5, 2.0, true]]`
	var blocks []ExtraKeys
	if err := json.Unmarshal([]byte(in), &blocks); err != nil {
		t.Fatal(err)
	}
	want := []ExtraKeys{nil, {img("img-a", 1), ExtraStringValue("salt"), ExtraBytesValue([]byte{0xab, 1}), ExtraIntValue(-3),
		ExtraUintValue(math.MaxUint64), ExtraFloatValue(1.5), ExtraFloatValue(2), ExtraBoolValue(true)}}
	if len(blocks) != 2 || blocks[0] != nil || len(blocks[1]) != len(want[1]) {
		t.Fatalf("read %v", blocks)
	}
	for i := range want[1] {
		if !blocks[1][i].Equal(want[1][i]) {
			t.Fatalf("value %d: %v, want %v", i, blocks[1][i], want[1][i])
		}
	}
	out, err := json.Marshal(blocks)
	if err != nil {
		t.Fatal(err)
	}
	var again []ExtraKeys
	if err := json.Unmarshal(out, &again); err != nil {
		t.Fatal(err)
	}
	for i := range want[1] {
		if !again[1][i].Equal(want[1][i]) {
			t.Fatalf("round trip of value %d: %v (%s)", i, again[1][i], out)
		}
	}
	deep := strings.Repeat("[", MaxExtraDepth) + strings.Repeat("]", MaxExtraDepth)
	for _, bad := range []string{`[{"x": 1}]`, `[{"bytes": "zz"}]`, `[{"bytes": "ab", "y": 1}]`, `[1e999]`,
		`[18446744073709551616]`, `[-9223372036854775809]`, `[` + deep + `]`} {
		var k ExtraKeys
		err := json.Unmarshal([]byte(bad), &k)
		var xe *ExtraKeysError
		if !errors.As(err, &xe) || !errors.Is(err, ErrExtraKeys) {
			t.Fatalf("%s: %v, want an *ExtraKeysError", bad, err)
		}
	}
	ok := strings.Repeat("[", MaxExtraDepth-1) + strings.Repeat("]", MaxExtraDepth-1)
	var k ExtraKeys
	if err := json.Unmarshal([]byte("["+ok+"]"), &k); err != nil {
		t.Fatalf("depth %d refused: %v", MaxExtraDepth, err)
	}
}
