package ckf

import (
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/zeebo/xxh3"
)

// Vectors of producer §2.2 and §3, and behaviours 42, 43, 44 and 55 of producer §13. The
// behaviour -> test table is at the top of dcstate_test.go.

func TestSequenceHashVector(t *testing.T) {
	got := SequenceHashes([]uint64{0x0123456789ABCDEF, 0x1111222233334444, 0xDEADBEEFCAFEBABE})
	want := []uint64{0x0123456789ABCDEF, 0x98E7E55F299CF592, 0x65D53B99C5252D19}
	if len(got) != len(want) {
		t.Fatalf("len %d", len(got))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("seq[%d] = %#x, want %#x", i, got[i], want[i])
		}
	}
	if SequenceHashes(nil) != nil {
		t.Fatal("empty input must give nil")
	}
	dst := make([]uint64, 0, 3)
	if n := testing.AllocsPerRun(100, func() {
		dst = AppendSequenceHashes(dst[:0], []uint64{1, 2, 3})
	}); n != 0 {
		t.Fatalf("AppendSequenceHashes allocates %v", n)
	}
}

func TestAddressingVectors(t *testing.T) {
	a, err := NewAddressing(1024, 0x123456789ABCDEF0)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []struct {
		h      uint64
		fp     uint16
		ba, bb uint64
	}{
		{0, 7750, 587, 372},
		{1, 64153, 348, 36},
		{0x0123456789ABCDEF, 45802, 865, 909},
		{0xFFFFFFFFFFFFFFFF, 31767, 112, 217},
	} {
		p := a.Probe(v.h)
		if p != (Probe{Fingerprint: v.fp, BucketA: v.ba, BucketB: v.bb}) {
			t.Errorf("Probe(%#x) = %+v, want fp=%d a=%d b=%d", v.h, p, v.fp, v.ba, v.bb)
		}
	}
}

// directProbe is the unmemoised producer §3 formula (two xxh3 calls).
func directProbe(h, seed, bucketCount uint64) Probe {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], h)
	mixed := xxh3.HashSeed(b[:], seed)
	fp := uint16(mixed)
	if fp == 0 {
		fp = 1
	}
	mask := bucketCount - 1
	ba := (mixed >> 16) & mask
	return Probe{Fingerprint: fp, BucketA: ba, BucketB: ba ^ directAltDelta(fp, seed, mask)}
}

func TestAltTableMatchesDirectFormulaForAllFingerprints(t *testing.T) {
	for _, n := range []uint64{2, 1024, 1 << 16, 1 << 20, 1 << 32} {
		for _, seed := range []uint64{DefaultSeed, 0x123456789ABCDEF0} {
			a, err := NewAddressing(n, seed)
			if err != nil {
				t.Fatal(err)
			}
			for fp := 0; fp < 1<<16; fp++ {
				var b [2]byte
				binary.LittleEndian.PutUint16(b[:], uint16(fp))
				d := xxh3.HashSeed(b[:], seed^AlternateBucketDomain) & (n - 1)
				if d == 0 {
					d = 1
				}
				if got := a.AltBucket(0, uint16(fp)); got != d {
					t.Fatalf("n=%d seed=%#x fp=%d: table delta %d, direct %d", n, seed, fp, got, d)
				}
			}
		}
	}
}

func TestNewAddressingRejectsBadBucketCounts(t *testing.T) {
	for _, n := range []uint64{0, 1, 3, 6, 1000, 1<<32 + 1, 1 << 33} {
		if _, err := NewAddressing(n, 0); !errors.Is(err, ErrInvalidBucketCount) {
			t.Errorf("NewAddressing(%d) err = %v", n, err)
		}
	}
}

func TestBehaviour44_AddressingVectorsAndProperties(t *testing.T) {
	TestSequenceHashVector(t)
	TestAddressingVectors(t)
	r := rand.New(rand.NewPCG(1, 2))
	for _, n := range []uint64{2, 64, 1024, 1 << 20} {
		a, _ := NewAddressing(n, DefaultSeed)
		for i := 0; i < 10000; i++ {
			h := r.Uint64()
			p := a.Probe(h)
			if p.Fingerprint == 0 {
				t.Fatal("fingerprint 0")
			}
			if p.BucketA == p.BucketB || p.BucketA >= n || p.BucketB >= n {
				t.Fatalf("bad buckets %+v", p)
			}
			if a.AltBucket(p.BucketB, p.Fingerprint) != p.BucketA {
				t.Fatal("alternate is not an involution")
			}
			if p != directProbe(h, DefaultSeed, n) {
				t.Fatalf("probe %+v differs from direct formula", p)
			}
		}
	}
}

func TestBehaviour55_CanonicalRootAndChild(t *testing.T) {
	if CanonicalRoot(17) != 17 {
		t.Fatal("root(17) != 17")
	}
	for _, v := range [][2]uint64{{0, 0}, {17, 42}, {0x0123456789ABCDEF, 0x1111222233334444}} {
		var b [16]byte
		binary.LittleEndian.PutUint64(b[:8], v[0])
		binary.LittleEndian.PutUint64(b[8:], v[1])
		want := xxh3.HashSeed(b[:], 1337)
		if got := CanonicalChild(CanonicalHash(v[0]), LocalBlockHash(v[1])); uint64(got) != want || NextSequenceHash(v[0], v[1]) != want {
			t.Fatalf("child(%#x,%#x) = %#x, want %#x", v[0], v[1], uint64(got), want)
		}
	}
}

func TestTokenBlockHashSaltRules(t *testing.T) {
	tokens := []uint32{1, 2, 3, 4, 5, 6, 7, 8, 9}
	raw := make([]byte, 16)
	for i := 0; i < 4; i++ {
		binary.LittleEndian.PutUint32(raw[4*i:], tokens[i])
	}
	if got, want := TokenBlockHash(tokens[:4], BlockSaltSeed("", "")), xxh3.HashSeed(raw, 1337); uint64(got) != want {
		t.Fatalf("unsalted %#x want %#x", got, want)
	}
	lora := 1337 + xxh3.HashString("adapter-a")
	if BlockSaltSeed("adapter-a", "") != lora {
		t.Fatal("lora salt")
	}
	both := lora + xxh3.HashStringSeed("ns", 1)
	if BlockSaltSeed("adapter-a", "ns") != both {
		t.Fatal("lora+namespace salt")
	}
	if BlockSaltSeed("", "ns") != 1337+xxh3.HashStringSeed("ns", 1) {
		t.Fatal("namespace salt")
	}
	hs := TokenBlockHashes(tokens, 4, 1337)
	if len(hs) != 2 || hs[0] != TokenBlockHash(tokens[0:4], 1337) || hs[1] != TokenBlockHash(tokens[4:8], 1337) {
		t.Fatalf("block windows %v", hs)
	}
	eh := EagleTokenBlockHashes(tokens, 4, 1337)
	if len(eh) != 2 || eh[0] != TokenBlockHash(tokens[0:5], 1337) || eh[1] != TokenBlockHash(tokens[4:9], 1337) {
		t.Fatalf("eagle windows %v", eh)
	}
	long := make([]uint32, 100)
	lb := make([]byte, 400)
	for i := range long {
		long[i] = uint32(i * 7)
		binary.LittleEndian.PutUint32(lb[4*i:], long[i])
	}
	if uint64(TokenBlockHash(long, 5)) != xxh3.HashSeed(lb, 5) {
		t.Fatal("heap path differs")
	}
}

func prodScalarContains(w uint64, fp uint16) bool {
	for i := 0; i < 4; i++ {
		if uint16(w>>(16*i)) == fp {
			return true
		}
	}
	return false
}

func TestBehaviour43_SwarMembershipAndSlotHelpers(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	pick := []uint16{0, 1, 0x8000, 0xFFFF, 0x7FFF, 0x0101}
	for i := 0; i < 200000; i++ {
		var w uint64
		for s := 0; s < 4; s++ {
			var v uint16
			if r.IntN(2) == 0 {
				v = pick[r.IntN(len(pick))]
			} else {
				v = uint16(r.Uint32())
			}
			w |= uint64(v) << (16 * s)
		}
		fp := pick[r.IntN(len(pick))]
		if r.IntN(2) == 0 {
			fp = uint16(w >> (16 * r.IntN(4)))
		}
		if Bucket(w).Contains(fp) != prodScalarContains(w, fp) {
			t.Fatalf("Contains(%#x, %#x) mismatch", w, fp)
		}
		first, ok := Bucket(w).First(fp)
		wantFirst, wantOK := -1, false
		for s := 0; s < 4; s++ {
			if uint16(w>>(16*s)) == fp {
				wantFirst, wantOK = s, true
				break
			}
		}
		if ok != wantOK || (ok && first != wantFirst) {
			t.Fatalf("First(%#x,%#x) = %d,%v want %d,%v", w, fp, first, ok, wantFirst, wantOK)
		}
		z := ZeroLanes16(w)
		for s := 0; s < 4; s++ {
			isZero := uint16(w>>(16*s)) == 0
			if (z>>(16*s+15))&1 == 1 != isZero {
				t.Fatalf("ZeroLanes16(%#x) lane %d", w, s)
			}
		}
		if HasZeroLane16(w) != (z != 0) {
			t.Fatalf("HasZeroLane16(%#x)", w)
		}
	}
	b := Bucket(0).WithSlot(2, 0xABCD)
	if uint64(b) != 0xABCD<<32 || b.Slot(2) != 0xABCD || b.Slot(0) != 0 {
		t.Fatalf("WithSlot: %#x", uint64(b))
	}
	if s, ok := b.FreeSlot(); !ok || s != 0 {
		t.Fatal("FreeSlot should be 0")
	}
	b = b.WithSlot(0, 1).WithSlot(1, 2)
	if s, ok := b.FreeSlot(); !ok || s != 3 {
		t.Fatalf("FreeSlot = %d,%v", s, ok)
	}
	b = b.WithSlot(3, 2)
	if _, ok := b.FreeSlot(); ok || !b.IsFull() {
		t.Fatal("full bucket has a free slot")
	}
	if s, ok := b.First(2); !ok || s != 1 {
		t.Fatalf("First(2) = %d (lowest slot wins)", s)
	}
	b = b.WithSlot(1, 0)
	if b.Slot(1) != 0 || b.Slot(3) != 2 || b.Occupied() != 3 {
		t.Fatal("WithSlot(…, 0) must clear only that slot")
	}
	if BroadcastFingerprint(0x1234) != 0x1234123412341234 {
		t.Fatal("broadcast")
	}
}

func TestBehaviour42_ConfigBucketCountWithoutAllocating(t *testing.T) {
	for _, v := range []struct{ n, want uint64 }{{1, 2}, {2, 2}, {32, 16}, {64, 32}, {2048, 1024}, {1 << 20, 524288}, {10_000_000, 4194304}} {
		got, err := NewCkfConfig(v.n).BucketCount()
		if err != nil || got != v.want {
			t.Errorf("bucket count(%d) = %d, %v; want %d", v.n, got, err, v.want)
		}
	}
	if _, err := NewCkfConfig(0).BucketCount(); !errors.Is(err, ErrExpectedCapacityZero) {
		t.Fatalf("n=0: %v", err)
	}
	if _, err := BucketCountFor(0); !errors.Is(err, ErrExpectedCapacityZero) {
		t.Fatalf("BucketCountFor(0): %v", err)
	}
	for _, n := range []uint64{1 << 62, ^uint64(0), ^uint64(0) / 5} {
		if _, err := BucketCountFor(n); !errors.Is(err, ErrCapacityOverflow) {
			t.Errorf("BucketCountFor(%d) = %v, want overflow", n, err)
		}
	}
	cfg := NewCkfConfig(1 << 20)
	if a := testing.AllocsPerRun(100, func() { _, _ = cfg.BucketCount() }); a != 0 {
		t.Fatalf("BucketCount allocates %v", a)
	}
}

func TestConfigValidationOrderAndErrors(t *testing.T) {
	c := CkfConfig{} // every field invalid: the first row wins
	wantErrIs(t, c.Validate(), ErrExpectedCapacityZero)
	c.ExpectedBlocksPerDC = 1
	var be *BuildError
	if err := c.Validate(); !errors.As(err, &be) || be.Kind != BuildInvalidMaxKicks || be.Value != 0 || be.Maximum != MaxKicks {
		t.Fatalf("max kicks 0: %v", err)
	}
	c.MaxKicks = MaxKicks + 1
	if err := c.Validate(); !errors.Is(err, ErrInvalidMaxKicks) || !errors.As(err, &be) || be.Value != MaxKicks+1 {
		t.Fatalf("max kicks 4097: %v", err)
	}
	c.MaxKicks = MaxKicks
	wantErrIs(t, c.Validate(), ErrBuildInvalidVerificationWindow)
	c.VerificationWindow = MaxVerificationWindow + 1
	if err := c.Validate(); !errors.As(err, &be) || be.Kind != BuildInvalidVerificationWindow || be.Value != 9 {
		t.Fatalf("window 9: %v", err)
	}
	c.VerificationWindow = 1
	wantErrIs(t, c.Validate(), ErrInvalidPublishEveryNEvents)
	c.PublishEveryNEvents = 1
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if err := DefaultCkfConfig().Validate(); err != nil {
		t.Fatal(err)
	}
	d := DefaultCkfConfig()
	if d.Seed != 0x5DEECE66D1B54A33 || d.MaxKicks != 500 || d.VerificationWindow != 2 || d.PublishEveryNEvents != 1 || d.ExpectedBlocksPerDC != 1 {
		t.Fatalf("defaults %+v", d)
	}
	if errors.Is(&BuildError{Kind: BuildCapacityOverflow}, ErrInvalidMaxKicks) {
		t.Fatal("kinds must not cross-match")
	}
	if !errors.Is(&BuildError{Kind: BuildAllocationFailed}, ErrAllocationFailed) {
		t.Fatal("build allocation failure should match ErrAllocationFailed")
	}
}

func TestIdentityStringsAndEquality(t *testing.T) {
	var d Digest128
	for i := range d {
		d[i] = byte(i * 17)
	}
	sem := CacheSemanticsID{Digest: d, Source: IdentityExplicit}
	route := RoutingScopeID{Digest: Digest128{0xAB}, Source: IdentityDefaultDerived}
	dom := IndexerDomainID{CacheSemantics: sem, RoutingScope: route}
	if sem.String() != "00112233445566778899aabbccddeeff" {
		t.Fatalf("semantics %s", sem)
	}
	if dom.String() != "00112233445566778899aabbccddeeff:ab000000000000000000000000000000" {
		t.Fatalf("domain %s", dom)
	}
	if !dom.ReliesOnDefaults() {
		t.Fatal("routing scope is default-derived")
	}
	dom2 := dom
	dom2.RoutingScope.Source = IdentityExplicit
	if dom2.ReliesOnDefaults() || dom2 == dom {
		t.Fatal("source participates in equality and defaults")
	}
	if DcID(0xBEEF).String() != "000000000000beef" {
		t.Fatal(DcID(0xBEEF).String())
	}
	pool := PoolID{Domain: dom, Dc: 0xBEEF}
	if pool.String() != dom.String()+"/000000000000beef" {
		t.Fatal(pool.String())
	}
	if IdentityDefaultDerived.String() != "default_derived" || IdentityExplicit.String() != "explicit" {
		t.Fatal("identity source names")
	}
	var s IdentitySource
	if err := s.UnmarshalText([]byte("explicit")); err != nil || s != IdentityExplicit {
		t.Fatal("unmarshal explicit")
	}
	if err := s.UnmarshalText([]byte("Explicit")); err == nil {
		t.Fatal("names are exact snake_case")
	}
	a := ProducerIdentity{
		Pool: PoolID{
			Domain: IndexerDomainID{
				CacheSemantics: CacheSemanticsID{Digest: Digest128{1}, Source: IdentityExplicit},
				RoutingScope:   RoutingScopeID{Digest: Digest128{2}, Source: IdentityExplicit},
			},
			Dc: 7,
		},
		Incarnation:      4,
		LayoutGeneration: 1,
		Format:           NewFormatIdentity(DefaultSeed, 1024),
	}
	b := a
	if a != b {
		t.Fatal("identity equality")
	}
	b.Format.Seed++
	if a == b {
		t.Fatal("format participates in identity equality")
	}
	if err := a.ValidateWire(); err != nil {
		t.Fatal(err)
	}
	a.LayoutGeneration = 0
	if a.ValidateWire() == nil {
		t.Fatal("layout generation 0 must be rejected on the wire")
	}
	if (SourceKey{1, 9}).Less(SourceKey{1, 2}) || !(SourceKey{1, 9}).Less(SourceKey{2, 0}) {
		t.Fatal("source order is lexicographic")
	}
	if !(LaneLease{Lane: 15}).Valid() || (LaneLease{Lane: 16}).Valid() {
		t.Fatal("lane bound")
	}
	f := NewFormatIdentity(1, 1<<25)
	if f.Validate() != nil || f.ValidateWire() == nil {
		t.Fatal("wire cap applies only to ValidateWire")
	}
}

func TestIdentityMaterialLayout(t *testing.T) {
	b, src, err := RoutingScopeMaterial(MaterialSelection{Defaults: []string{"ns", "x"}})
	if err != nil || src != IdentityDefaultDerived {
		t.Fatal(err)
	}
	want := []byte{byte(len(TagRoutingScopeDefault)), 0, 0, 0}
	want = append(want, TagRoutingScopeDefault...)
	want = append(want, 2, 0, 0, 0, 2, 0, 0, 0, 'n', 's', 1, 0, 0, 0, 'x')
	if string(b) != string(want) {
		t.Fatalf("routing default material\n got %q\nwant %q", b, want)
	}
	b, src, err = CacheSemanticsMaterial(MaterialSelection{Explicit: map[string]string{"z": "1", "a": "22"}}, 64, 1)
	if err != nil || src != IdentityExplicit {
		t.Fatal(err)
	}
	want = []byte{byte(len(TagCacheSemanticsExplicit)), 0, 0, 0}
	want = append(want, TagCacheSemanticsExplicit...)
	want = append(want, 2, 0, 0, 0, 1, 0, 0, 0, 'a', 2, 0, 0, 0, '2', '2', 1, 0, 0, 0, 'z', 1, 0, 0, 0, '1')
	want = append(want, 64, 0, 0, 0, 1, 0)
	if string(b) != string(want) {
		t.Fatalf("semantics explicit material\n got %q\nwant %q", b, want)
	}
	m, err := DecodeIdentityMaterial(b)
	if err != nil || m.Kind != MaterialCacheSemantics || m.KvBlockSize != 64 || m.EventHashFormat != 1 || m.Selection.Explicit["a"] != "22" {
		t.Fatalf("decode %+v %v", m, err)
	}
	for _, bad := range []map[string]string{
		{},
		{"": "v"},
		{"k": ""},
		{string(make([]byte, 129)): "v"},
		{"k": string(make([]byte, 1025))},
		{"k": "\xff"},
	} {
		if _, _, err := RoutingScopeMaterial(MaterialSelection{Explicit: bad}); !errors.Is(err, ErrInvalidIdentityMaterial) {
			t.Errorf("explicit %q accepted", bad)
		}
	}
	big := map[string]string{}
	for i := 0; i < 33; i++ {
		big[string(rune('A'+i))] = "v"
	}
	if ValidateExplicitEntries(big) == nil {
		t.Fatal("33 entries accepted")
	}
	if _, err := DecodeExplicitEntries([]ExplicitEntry{{"k", "v"}, {"k", "w"}}); err == nil {
		t.Fatal("duplicate key accepted")
	}
	// Out-of-order keys (as a duplicate-bearing encoder would produce) are rejected.
	swapped := []byte{byte(len(TagRoutingScopeExplicit)), 0, 0, 0}
	swapped = append(swapped, TagRoutingScopeExplicit...)
	swapped = append(swapped, 2, 0, 0, 0, 1, 0, 0, 0, 'b', 1, 0, 0, 0, '1', 1, 0, 0, 0, 'b', 1, 0, 0, 0, '2')
	if _, err := DecodeIdentityMaterial(swapped); !errors.Is(err, ErrInvalidIdentityMaterial) {
		t.Fatal("duplicate key decoded")
	}
	if _, err := DecodeIdentityMaterial(append(b, 0)); err == nil {
		t.Fatal("trailing byte accepted")
	}
}

func wantErrIs(t testing.TB, got, want error) {
	t.Helper()
	if !errors.Is(got, want) {
		t.Fatalf("error = %v, want %v", got, want)
	}
}

// TestTokenSequenceHashes: a prompt's canonical chain is the sequence hashes of its full token
// blocks' local hashes, salted; a partial block and a prompt shorter than one block add nothing.
func TestTokenSequenceHashes(t *testing.T) {
	tokens := []uint32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}
	salt := BlockSaltSeed("adapter", "")
	local := TokenBlockHashes(tokens, 4, salt)
	raw := []uint64{uint64(local[0]), uint64(local[1])}
	want := SequenceHashes(raw)
	got := TokenSequenceHashes(tokens, 4, salt)
	if len(got) != 2 || uint64(got[0]) != want[0] || uint64(got[1]) != want[1] {
		t.Fatalf("TokenSequenceHashes = %x, want %x", got, want)
	}
	if unsalted := TokenSequenceHashes(tokens, 4, BlockSaltSeed("", "")); unsalted[0] == got[0] {
		t.Fatal("the salt does not change the chain")
	}
	if got := TokenSequenceHashes(tokens[:3], 4, salt); got != nil {
		t.Fatalf("a prompt shorter than one block: %x, want nil", got)
	}
	if got := TokenSequenceHashes(tokens, 0, salt); got != nil {
		t.Fatalf("block size 0: %x, want nil", got)
	}
}
