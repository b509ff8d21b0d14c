package producer

import (
	"errors"
	"slices"
	"testing"

	"github.com/ckf-stream/ckf-stream/ckf"
)

// Mutator behaviours 45–47 (see the table at the top of dcstate_test.go).

func mustPackedFilter(t testing.TB, bucketCount, maxKicks uint64) *PackedFilter {
	t.Helper()
	a, err := ckf.NewAddressing(bucketCount, ckf.DefaultSeed)
	if err != nil {
		t.Fatal(err)
	}
	f, err := NewPackedFilter(a, maxKicks)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// sameProbePair finds two distinct hashes with one (fp, {a, b})
// representation under addr.
func sameProbePair(t testing.TB, addr ckf.Addressing) (uint64, uint64) {
	t.Helper()
	seen := make(map[ckf.Probe]uint64)
	for h := uint64(1); h < 1<<22; h++ {
		p := addr.Probe(h)
		if p.BucketA > p.BucketB {
			p.BucketA, p.BucketB = p.BucketB, p.BucketA
		}
		if o, ok := seen[p]; ok {
			return o, h
		}
		seen[p] = h
	}
	t.Fatal("no colliding pair found")
	return 0, 0
}

func TestBehaviour45_FailedBoundedRelocationRestoresEveryWord(t *testing.T) {
	f := mustPackedFilter(t, 2, 1)
	for h := uint64(0); h < 8; h++ {
		if _, err := f.Insert(h*7919+1, 1); err != nil {
			t.Fatalf("fill %d: %v", h, err)
		}
	}
	before := slices.Clone(f.Words())
	for h := uint64(100); h < 140; h++ {
		ts, err := f.Insert(h, 1)
		if !errors.Is(err, ckf.ErrCapacityExhausted) || ts != nil {
			t.Fatalf("insert into full table: %v, log %v", err, ts)
		}
		if !slices.Equal(before, f.Words()) {
			t.Fatal("failed insertion changed the words")
		}
	}
	// At the producer level the failed admission marks no dirty bucket.
	k := pSrc(1, 0)
	s := fillTwoBucketState(t, k, 1)
	touched := s.tel.DistinctTouchedBuckets
	words := s.CopyWords()
	out := s.ApplyEvent(storeEv(k, pBlk(1, 0xABCDEF)))
	prodWantErr(t, out.FirstError, ckf.ErrCapacityExhausted)
	if out.Publication != nil || !out.PublicationBoundary {
		t.Fatalf("omission must publish nothing: %+v", out)
	}
	if s.tel.DistinctTouchedBuckets != touched || !slices.Equal(words, s.CopyWords()) {
		t.Fatal("omission reported a dirty bucket or changed words")
	}
	mustInvariants(t, s)
}

func TestBehaviour46_SameRepresentationKeepsTwoCopies(t *testing.T) {
	f := mustPackedFilter(t, 2, ckf.DefaultMaxKicks)
	h1, h2 := sameProbePair(t, f.Addressing())
	for _, h := range []uint64{h1, h2} {
		if _, err := f.Insert(h, ckf.DefaultMaxKicks); err != nil {
			t.Fatal(err)
		}
	}
	occupied := func() int {
		n := 0
		for _, w := range f.Words() {
			n += ckf.Bucket(w).Occupied()
		}
		return n
	}
	if occupied() != 2 {
		t.Fatalf("two distinct hashes must keep two copies, have %d", occupied())
	}
	if _, err := f.Remove(h1); err != nil {
		t.Fatal(err)
	}
	if occupied() != 1 || !f.Contains(h2) || !f.Contains(h1) {
		t.Fatal("removing one copy must leave exactly one")
	}
	if _, err := f.Remove(h2); err != nil {
		t.Fatal(err)
	}
	if occupied() != 0 {
		t.Fatal("both removed")
	}
	if _, err := f.Remove(h2); !errors.Is(err, ckf.ErrIndexerInvariantViolation) {
		t.Fatalf("remove of an absent fingerprint: %v", err)
	}
}

func TestBehaviour47_InsertRemove128In64BucketsDrains(t *testing.T) {
	f := mustPackedFilter(t, 64, 500)
	var hs []uint64
	for i := uint64(0); i < 128; i++ {
		h := i*0x9E3779B97F4A7C15 + 12345
		if _, err := f.Insert(h, 500); err != nil {
			t.Fatalf("insert %d: %v", i, err)
		}
		hs = append(hs, h)
	}
	for _, h := range hs {
		if !f.Contains(h) {
			t.Fatalf("%#x missing", h)
		}
	}
	for _, h := range hs {
		if _, err := f.Remove(h); err != nil {
			t.Fatalf("remove %#x: %v", h, err)
		}
	}
	for b, w := range f.Words() {
		if w != 0 {
			t.Fatalf("bucket %d = %#x after removing everything", b, w)
		}
	}
}

func TestInsertTouchLogAndRelocationFreeRngDraw(t *testing.T) {
	f := mustPackedFilter(t, 2, 4)
	ts, err := f.Insert(42, 4)
	if err != nil || len(ts) != 1 || ts[0].Before != 0 {
		t.Fatalf("direct insert log %v, %v", ts, err)
	}
	for h := uint64(0); h < 7; h++ {
		if _, err := f.Insert(1000+h, 4); err != nil {
			t.Fatal(err)
		}
	}
	st := f.RngState()
	if _, err := f.Insert(99, 0); !errors.Is(err, ckf.ErrCapacityExhausted) {
		t.Fatal("relocation-free insert into a full table must fail")
	}
	if f.RngState() == st {
		t.Fatal("the start-bucket RNG draw happens even with max_kicks 0")
	}
}
