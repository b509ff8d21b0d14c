package producer

import (
	"errors"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/ckf-stream/ckf-stream/ckf"
)

// Reference-model tests for the optimised mutator (mutator.go,
// mutator_addr.go): a direct transcription of producer §6.2/§6.3 over the
// table-based Addressing is driven side by side with PackedFilter, and every
// observable (touched logs, errors, words, RNG state) must match.

// refInsert is producer §6.2 one slot operation at a time.
func refInsert(f *PackedFilter, p ckf.Probe, maxKicks uint64) ([]Touch, error) {
	var log []Touch
	place := func(bucket uint64, fp uint16) bool {
		before := ckf.Bucket(f.words[bucket])
		s, ok := before.FreeSlot()
		if !ok {
			return false
		}
		f.words[bucket] = uint64(before.WithSlot(s, fp))
		log = append(log, Touch{Bucket: bucket, Before: uint64(before)})
		return true
	}
	if place(p.BucketA, p.Fingerprint) || place(p.BucketB, p.Fingerprint) {
		return log, nil
	}
	bucket := p.BucketA
	if f.rng.Next()&1 != 0 {
		bucket = p.BucketB
	}
	fp := p.Fingerprint
	for k := uint64(0); k < maxKicks; k++ {
		before := f.words[bucket]
		slot := int(f.rng.Next() & 3)
		evicted := ckf.Bucket(before).Slot(slot)
		f.words[bucket] = uint64(ckf.Bucket(before).WithSlot(slot, fp))
		log = append(log, Touch{Bucket: bucket, Before: before})
		fp = evicted
		bucket = f.addr.AltBucket(bucket, fp)
		if place(bucket, fp) {
			return log, nil
		}
	}
	for i := len(log) - 1; i >= 0; i-- {
		f.words[log[i].Bucket] = log[i].Before
	}
	return nil, ckf.ErrCapacityExhausted
}

// refRemove is producer §6.3.
func refRemove(f *PackedFilter, h uint64) (Touch, error) {
	p := f.addr.Probe(h)
	for _, b := range [2]uint64{p.BucketA, p.BucketB} {
		before := ckf.Bucket(f.words[b])
		if s, ok := before.First(p.Fingerprint); ok {
			f.words[b] = uint64(before.WithSlot(s, 0))
			return Touch{Bucket: b, Before: uint64(before)}, nil
		}
	}
	return Touch{}, ckf.ErrIndexerInvariantViolation
}

var refSeeds = []uint64{ckf.DefaultSeed, 0, 0x123456789ABCDEF0, ^uint64(0), 0xFFFFFFFF, 1 << 32}

func TestInlineDeltaMatchesTableForAllFingerprints(t *testing.T) {
	for _, seed := range refSeeds {
		for _, n := range []uint64{2, 4, 1 << 10, 1 << 16, 1 << 20, 1 << 32} {
			a, err := ckf.NewAddressing(n, seed)
			if err != nil {
				t.Fatal(err)
			}
			k := newProbeKeys(a)
			for fp := 0; fp < 1<<16; fp++ {
				if got, want := k.delta(uint16(fp)), a.AltBucket(0, uint16(fp)); got != want {
					t.Fatalf("seed %#x n %d fp %d: delta %d, want %d", seed, n, fp, got, want)
				}
			}
		}
	}
}

func TestInlineProbeMatchesAddressing(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, seed := range refSeeds {
		for _, n := range []uint64{2, 1024, 1 << 16, 1 << 20, 1 << 32} {
			a, err := ckf.NewAddressing(n, seed)
			if err != nil {
				t.Fatal(err)
			}
			k := newProbeKeys(a)
			check := func(h uint64) {
				want := a.Probe(h)
				fp, ba := k.probe(h)
				if fp != want.Fingerprint || ba != want.BucketA || ba^k.delta(fp) != want.BucketB {
					t.Fatalf("seed %#x n %d h %#x: (%d %d %d) want %+v", seed, n, h, fp, ba, ba^k.delta(fp), want)
				}
			}
			for _, h := range []uint64{0, 1, 0x0123456789ABCDEF, ^uint64(0), 1 << 32, 0xFFFFFFFF} {
				check(h)
			}
			for i := 0; i < 20000; i++ {
				check(r.Uint64())
			}
		}
	}
	// The spec vectors (producer §3), through the inline path.
	a, _ := ckf.NewAddressing(1024, 0x123456789ABCDEF0)
	k := newProbeKeys(a)
	for _, v := range []struct {
		h      uint64
		fp     uint16
		ba, bb uint64
	}{{0, 7750, 587, 372}, {1, 64153, 348, 36}, {0x0123456789ABCDEF, 45802, 865, 909}, {^uint64(0), 31767, 112, 217}} {
		fp, ba := k.probe(v.h)
		if fp != v.fp || ba != v.ba || ba^k.delta(fp) != v.bb {
			t.Fatalf("vector %#x: %d %d %d", v.h, fp, ba, ba^k.delta(fp))
		}
	}
}

// TestInlineProbeZeroFingerprintBecomesOne finds hashes whose mixed low 16
// bits are zero and checks the 0 -> 1 rule on the inline path.
func TestInlineProbeZeroFingerprintBecomesOne(t *testing.T) {
	a, _ := ckf.NewAddressing(1<<16, ckf.DefaultSeed)
	k := newProbeKeys(a)
	found := 0
	for h := uint64(0); h < 1<<22 && found < 3; h++ {
		if uint16(k.mix(h)) != 0 {
			continue
		}
		found++
		fp, ba := k.probe(h)
		if want := a.Probe(h); fp != 1 || want.Fingerprint != 1 || ba != want.BucketA {
			t.Fatalf("h %#x: fp %d, want %+v", h, fp, want)
		}
	}
	if found == 0 {
		t.Fatal("no hash with a zero fingerprint found")
	}
}

// TestMutatorMatchesReferenceModel drives the optimised mutator and the
// reference transcription with the same operations, from empty to beyond
// capacity (failures and rollbacks included), through Insert, InsertProbe
// and Remove, and requires identical logs, errors, words and RNG states.
func TestMutatorMatchesReferenceModel(t *testing.T) {
	for _, tc := range []struct{ buckets, builtKicks, maxKicks uint64 }{
		{2, 0, 0}, {2, 1, 1}, {4, 3, 3}, {64, 500, 500}, {1024, 1, 1}, {1024, 16, 16},
		{1 << 12, ckf.MaxKicks, ckf.MaxKicks},
		{256, 0, 64}, // maxKicks above the built scratch: the log grows once
	} {
		got := mustPackedFilter(t, tc.buckets, tc.builtKicks)
		want := mustPackedFilter(t, tc.buckets, tc.builtKicks)
		r := rand.New(rand.NewPCG(tc.buckets, tc.maxKicks))
		var live []uint64
		fails, removes, absent := 0, 0, 0
		for op := 0; op < int(8*tc.buckets)+64; op++ {
			switch {
			case len(live) > 0 && r.IntN(5) == 0:
				i := r.IntN(len(live))
				h := live[i]
				live = slices.Delete(live, i, i+1)
				tg, eg := got.Remove(h)
				tw, ew := refRemove(want, h)
				if tg != tw || (eg == nil) != (ew == nil) {
					t.Fatalf("remove %#x: %v %v vs %v %v", h, tg, eg, tw, ew)
				}
				removes++
			case r.IntN(40) == 0:
				h := r.Uint64() // most likely absent
				tg, eg := got.Remove(h)
				tw, ew := refRemove(want, h)
				if tg != tw || (eg == nil) != (ew == nil) || (eg != nil && !errors.Is(eg, ckf.ErrIndexerInvariantViolation)) {
					t.Fatalf("remove absent %#x: %v %v vs %v %v", h, tg, eg, tw, ew)
				}
				if eg != nil {
					absent++
				}
			default:
				h := r.Uint64()
				mk := tc.maxKicks
				if r.IntN(8) == 0 {
					mk = 0 // relocation-free re-offer
				}
				var lg []Touch
				var eg error
				if op%2 == 0 {
					lg, eg = got.Insert(h, mk)
				} else {
					lg, eg = got.InsertProbe(got.Addressing().Probe(h), mk)
				}
				lw, ew := refInsert(want, want.addr.Probe(h), mk)
				if !errors.Is(eg, ew) || (eg == nil) != (ew == nil) || !slices.Equal(lg, lw) {
					t.Fatalf("%+v op %d insert %#x: %v %v vs %v %v", tc, op, h, lg, eg, lw, ew)
				}
				if eg != nil {
					fails++
					if lg != nil {
						t.Fatal("failed insert returned a log")
					}
				} else {
					live = append(live, h)
				}
			}
			if got.RngState() != want.RngState() || !slices.Equal(got.Words(), want.Words()) {
				t.Fatalf("%+v op %d: state diverged", tc, op)
			}
		}
		if fails == 0 || removes == 0 || absent == 0 {
			t.Fatalf("%+v: fails %d removes %d absent %d: a path went untested", tc, fails, removes, absent)
		}
	}
}

func TestInsertAndRemoveDoNotAllocate(t *testing.T) {
	f := mustPackedFilter(t, 1<<10, ckf.DefaultMaxKicks)
	h := uint64(1)
	if n := testing.AllocsPerRun(3000, func() {
		_, _ = f.Insert(h*0x9E3779B97F4A7C15, ckf.DefaultMaxKicks)
		h++
	}); n != 0 {
		t.Fatalf("Insert allocates %v per call", n)
	}
	h = 1
	if n := testing.AllocsPerRun(1000, func() {
		_, _ = f.Remove(h * 0x9E3779B97F4A7C15)
		h++
	}); n != 0 {
		t.Fatalf("Remove allocates %v per call", n)
	}
}
