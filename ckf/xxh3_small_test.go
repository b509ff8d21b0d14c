package ckf

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/zeebo/xxh3"
)

// The specialised XXH3 forms (xxh3_small.go) against the library call
// xxh3.HashSeed on the same little-endian bytes.

// edgeWords are inputs that exercise carries and the keyed words being 0 or
// all ones.
var edgeWords = []uint64{
	0, 1, 2, 0xFF, 0x100, 0xFFFF, 0x1_0000, 0xFFFF_FFFF, 0x1_0000_0000,
	0x8000_0000_0000_0000, math.MaxUint64 - 1, math.MaxUint64,
	seqKeyLo, seqKeyHi, ^seqKeyLo, ^seqKeyHi,
	xxh3SecretWord8, xxh3SecretWord16, xxh3SecretWord8 ^ xxh3SecretWord16,
}

func TestNextSequenceHashMatchesXXH3(t *testing.T) {
	for _, p := range edgeWords {
		for _, l := range edgeWords {
			if got, want := NextSequenceHash(p, l), genericNextSequenceHash(p, l); got != want {
				t.Fatalf("NextSequenceHash(%#x, %#x) = %#x, xxh3.HashSeed %#x", p, l, got, want)
			}
		}
	}
	r := rand.New(rand.NewPCG(21, 22))
	for i := 0; i < 1_000_000; i++ {
		p, l := r.Uint64(), r.Uint64()
		if got, want := NextSequenceHash(p, l), genericNextSequenceHash(p, l); got != want {
			t.Fatalf("NextSequenceHash(%#x, %#x) = %#x, xxh3.HashSeed %#x", p, l, got, want)
		}
	}
}

// TestAppendSequenceHashesMatchesGenericChain checks the chain for every
// length up to 300, appended after existing elements, with and without
// spare capacity (the growth path).
func TestAppendSequenceHashesMatchesGenericChain(t *testing.T) {
	r := rand.New(rand.NewPCG(23, 24))
	local := make([]uint64, 300)
	for i := range local {
		local[i] = r.Uint64()
	}
	for n := 0; n <= len(local); n++ {
		want := []uint64{7, 8}
		if n > 0 {
			want = append(want, local[0])
			for i := 1; i < n; i++ {
				want = append(want, genericNextSequenceHash(want[len(want)-1], local[i]))
			}
		}
		for _, spare := range []int{0, n, n + 5} {
			dst := make([]uint64, 2, 2+spare)
			dst[0], dst[1] = 7, 8
			got := AppendSequenceHashes(dst, local[:n])
			if len(got) != len(want) {
				t.Fatalf("n=%d spare=%d: len %d, want %d", n, spare, len(got), len(want))
			}
			for i := range want {
				if got[i] != want[i] {
					t.Fatalf("n=%d spare=%d: [%d] = %#x, want %#x", n, spare, i, got[i], want[i])
				}
			}
		}
	}
}

func FuzzNextSequenceHash(f *testing.F) {
	f.Add(uint64(0), uint64(0))
	f.Add(uint64(0x0123456789ABCDEF), uint64(0x1111222233334444))
	f.Add(seqKeyLo, seqKeyHi)
	f.Fuzz(func(t *testing.T, p, l uint64) {
		if got, want := NextSequenceHash(p, l), genericNextSequenceHash(p, l); got != want {
			t.Fatalf("NextSequenceHash(%#x, %#x) = %#x, xxh3.HashSeed %#x", p, l, got, want)
		}
	})
}

// hash8 is XXH3_64(LE64(v), seed) through the library.
func hash8(v, seed uint64) uint64 {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], v)
	return xxh3.HashSeed(b[:], seed)
}

// rawMixAddressing returns an Addressing whose Probe exposes the whole
// 8-byte hash of seed: BucketA is mixed>>16 (a 48-bit mask) and Fingerprint
// its low 16 bits (0 -> 1). Its delta table is all zero, so BucketB equals
// BucketA; it exists only to test the mix for any seed without building a
// delta table per seed.
func rawMixAddressing(seed uint64) Addressing {
	return Addressing{mask: 1<<48 - 1, mixKey: xxh3Mix8Key(seed), delta: &zeroAltTable, seed: seed}
}

var zeroAltTable altTable

// checkRawMix compares the mix of Probe with xxh3.HashSeed for one hash.
func checkRawMix(t *testing.T, a Addressing, h uint64) {
	t.Helper()
	want := hash8(h, a.seed)
	wantFP := uint16(want)
	if wantFP == 0 {
		wantFP = 1
	}
	if p := a.Probe(h); p.BucketA != want>>16 || p.Fingerprint != wantFP {
		t.Fatalf("seed %#x h %#x: Probe %+v, xxh3.HashSeed %#x", a.seed, h, p, want)
	}
	if got := Mix8(h, a.MixKey()); got != want {
		t.Fatalf("seed %#x h %#x: Mix8 %#x, xxh3.HashSeed %#x", a.seed, h, got, want)
	}
}

func TestAddressingMixMatchesXXH3ForAnySeed(t *testing.T) {
	r := rand.New(rand.NewPCG(25, 26))
	seeds := append([]uint64{DefaultSeed, 0x123456789ABCDEF0}, edgeWords...)
	for i := 0; i < 64; i++ {
		seeds = append(seeds, r.Uint64())
	}
	for _, seed := range seeds {
		a := rawMixAddressing(seed)
		for _, h := range edgeWords {
			checkRawMix(t, a, h)
		}
		for i := 0; i < 20_000; i++ {
			checkRawMix(t, a, r.Uint64())
		}
	}
}

// TestAddressingProbeMatchesGeneric compares Probe with the generic library
// path (genericProbe) and with the fully unmemoised formula (directProbe)
// over random seeds, every bucket count 2..2^32 and random hashes, plus
// hashes whose fingerprint is 0 before the 0 -> 1 rule.
func TestAddressingProbeMatchesGeneric(t *testing.T) {
	r := rand.New(rand.NewPCG(27, 28))
	for k := 1; k <= 32; k++ {
		n := uint64(1) << k
		seed := r.Uint64()
		if k%8 == 0 {
			seed = DefaultSeed
		}
		a, err := NewAddressing(n, seed)
		if err != nil {
			t.Fatal(err)
		}
		zeroFP := 0
		for i := 0; zeroFP < 3 || i < 4000; i++ {
			h := r.Uint64()
			if i < len(edgeWords) {
				h = edgeWords[i]
			}
			if uint16(hash8(h, seed)) == 0 {
				zeroFP++
			} else if i >= 4000 {
				continue // searching for fingerprint-0 hashes only
			}
			p := a.Probe(h)
			if g := a.genericProbe(h); p != g {
				t.Fatalf("n=2^%d seed=%#x h=%#x: Probe %+v, generic %+v", k, seed, h, p, g)
			}
			if i%16 == 0 || uint16(hash8(h, seed)) == 0 {
				if d := directProbe(h, seed, n); p != d {
					t.Fatalf("n=2^%d seed=%#x h=%#x: Probe %+v, direct %+v", k, seed, h, p, d)
				}
			}
		}
	}
}

// FuzzAddressingProbe checks the specialised 8-byte mix for any seed (no
// delta table is built per seed: tables are cached for the process
// lifetime) and the whole Probe for two fixed addressings.
func FuzzAddressingProbe(f *testing.F) {
	f.Add(uint64(0), DefaultSeed)
	f.Add(uint64(0x0123456789ABCDEF), uint64(0x123456789ABCDEF0))
	f.Add(uint64(math.MaxUint64), uint64(0))
	fixed := []struct{ n, seed uint64 }{{1 << 20, DefaultSeed}, {1024, 0x123456789ABCDEF0}}
	addrs := make([]Addressing, len(fixed))
	for i, c := range fixed {
		a, err := NewAddressing(c.n, c.seed)
		if err != nil {
			f.Fatal(err)
		}
		addrs[i] = a
	}
	f.Fuzz(func(t *testing.T, h, seed uint64) {
		checkRawMix(t, rawMixAddressing(seed), h)
		for i, a := range addrs {
			if p, d := a.Probe(h), directProbe(h, fixed[i].seed, fixed[i].n); p != d {
				t.Fatalf("n=%d seed=%#x h=%#x: Probe %+v, direct %+v", fixed[i].n, fixed[i].seed, h, p, d)
			}
		}
	})
}

// TestHashingDoesNotAllocate: the hot paths allocate nothing.
func TestHashingDoesNotAllocate(t *testing.T) {
	a, _ := NewAddressing(1<<20, DefaultSeed)
	local := []uint64{1, 2, 3, 4}
	dst := make([]uint64, 0, len(local))
	var sink uint64
	if n := testing.AllocsPerRun(100, func() {
		dst = AppendSequenceHashes(dst[:0], local)
		p := a.Probe(dst[3])
		sink += p.BucketB + NextSequenceHash(p.BucketA, sink)
	}); n != 0 {
		t.Fatalf("hashing allocates %v per run", n)
	}
	hashBenchSink = sink
}
