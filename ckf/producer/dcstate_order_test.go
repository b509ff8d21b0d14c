package producer

import (
	"fmt"
	"slices"
	"testing"

	"github.com/ckf-stream/ckf-stream/ckf"
	"pgregory.net/rapid"
)

// Tests of the publication order (dcstate_order.go): every prefix of a
// drained batch keeps every fingerprint that is in either of its buckets
// before and after the batch.

// prefixSafe applies images one by one to a copy of before and checks, at
// every prefix (the empty one and the full one included), that each
// (fingerprint, bucket pair) touched by the batch with a non-zero count
// both before and after the batch has a non-zero count. It returns the
// words after the whole batch.
func prefixSafe(addr ckf.Addressing, before []uint64, images []ckf.BucketImage) ([]uint64, error) {
	after := slices.Clone(before)
	prodApplyImages(after, images)
	type key struct {
		fp   uint16
		low  uint64 // the pair's lower bucket
		high uint64
	}
	count := func(words []uint64, k key) int {
		return slotCount(words[k.low], k.fp) + slotCount(words[k.high], k.fp)
	}
	var keep []key
	seen := make(map[key]bool)
	for _, im := range images {
		for _, w := range []uint64{before[im.Bucket], after[im.Bucket]} {
			for i := range 4 {
				fp := ckf.Bucket(w).Slot(i)
				if fp == 0 {
					continue
				}
				alt := addr.AltBucket(im.Bucket, fp)
				k := key{fp: fp, low: min(im.Bucket, alt), high: max(im.Bucket, alt)}
				if seen[k] {
					continue
				}
				seen[k] = true
				if count(before, k) > 0 && count(after, k) > 0 {
					keep = append(keep, k)
				}
			}
		}
	}
	cur := slices.Clone(before)
	for p := 0; p <= len(images); p++ {
		if p > 0 {
			cur[images[p-1].Bucket] = images[p-1].Value
		}
		for _, k := range keep {
			if count(cur, k) == 0 {
				return nil, fmt.Errorf("fingerprint %#04x of buckets {%d, %d} absent after %d of %d images",
					k.fp, k.low, k.high, p, len(images))
			}
		}
	}
	return after, nil
}

// windowBuilder crafts publication windows slot by slot on a DcState whose
// words it controls, marking buckets like the mutator does (first touch
// keeps the original).
type windowBuilder struct {
	t *testing.T
	s *DcState
}

func newWindowBuilder(t *testing.T) *windowBuilder {
	return &windowBuilder{t: t, s: mustDcState(t, cfgN(1024, 1<<20))}
}

func (wb *windowBuilder) alt(b uint64, fp uint16) uint64 { return wb.s.Addressing().AltBucket(b, fp) }

// set writes bucket b's word (a touch).
func (wb *windowBuilder) set(b uint64, fps ...uint16) {
	var w uint64
	for i, fp := range fps {
		w |= uint64(fp) << (16 * i)
	}
	wb.s.win.mark(b, wb.s.filter.words[b])
	wb.s.filter.words[b] = w
}

// start installs words as the published state (no window).
func (wb *windowBuilder) start(words map[uint64][]uint16) {
	for b, fps := range words {
		wb.set(b, fps...)
	}
	wb.s.win.reset()
	wb.s.win.pending = 1
}

// replace is one kick step: fp takes from's slot in bucket b.
func (wb *windowBuilder) replace(b uint64, from, fp uint16) {
	w := wb.s.filter.words[b]
	if slotCount(w, from) == 0 {
		wb.t.Fatalf("bucket %d has no %#x", b, from)
	}
	wb.s.win.mark(b, w)
	wb.s.filter.words[b] = replaceSlot(w, from, fp)
}

// drainChecked drains, checks the prefix property and that the batch ends
// at the state's words, and returns the batch.
func (wb *windowBuilder) drainChecked() []ckf.BucketImage {
	wb.t.Helper()
	published := slices.Clone(wb.s.filter.words)
	for i, b := range wb.s.win.dirty {
		published[b] = wb.s.win.orig[i]
	}
	images := wb.s.Flush()
	if err := prodCheckBatch(wb.s.BucketCount(), images); err != nil {
		wb.t.Fatal(err)
	}
	after, err := prefixSafe(wb.s.Addressing(), published, images)
	if err != nil {
		wb.t.Fatalf("%v\nbatch %v", err, images)
	}
	if !slices.Equal(after, wb.s.filter.words) {
		wb.t.Fatal("batch does not end at the state's words")
	}
	return images
}

func buckets(images []ckf.BucketImage) []uint64 {
	out := make([]uint64, len(images))
	for i, im := range images {
		out[i] = im.Bucket
	}
	return out
}

// fpWithAlt returns the smallest fingerprint > after whose alternate from
// a is not a and not in avoid.
func (wb *windowBuilder) fpFrom(a uint64, after uint16, avoid ...uint64) (uint16, uint64) {
	for fp := after + 1; fp != 0; fp++ {
		b := wb.alt(a, fp)
		if !slices.Contains(avoid, b) {
			return fp, b
		}
	}
	wb.t.Fatal("no fingerprint")
	return 0, 0
}

func TestPublicationOrderTwoStepKick(t *testing.T) {
	wb := newWindowBuilder(t)
	const a = 10
	v1, b := wb.fpFrom(a, 100)
	wb.start(map[uint64][]uint16{a: {v1, 201, 202, 203}, b: {301}})
	// Insert x into full a: x takes v1's slot, v1 goes to b.
	wb.replace(a, v1, 999)
	wb.set(b, 301, v1)
	if got := buckets(wb.drainChecked()); !slices.Equal(got, []uint64{b, a}) {
		t.Fatalf("order %v, want [%d %d]", got, b, a)
	}
}

// threeStepKick builds a window in which a new fingerprint takes v1's slot in a, v1 takes v2's
// in b, and v2 lands in a free slot of c; it returns a, b and c.
func threeStepKick(wb *windowBuilder, a uint64) (uint64, uint64, uint64) {
	v1, b := wb.fpFrom(a, 100)
	v2, c := wb.fpFrom(b, 400, a, b)
	wb.start(map[uint64][]uint16{a: {v1, 201, 202, 203}, b: {v2, 301, 302, 303}, c: {501}})
	wb.replace(a, v1, 999)
	wb.replace(b, v2, v1)
	wb.set(c, 501, v2)
	return a, b, c
}

func TestPublicationOrderThreeStepKick(t *testing.T) {
	wb := newWindowBuilder(t)
	a, b, c := threeStepKick(wb, 20)
	if got := buckets(wb.drainChecked()); !slices.Equal(got, []uint64{c, b, a}) {
		t.Fatalf("order %v, want [%d %d %d]", got, c, b, a)
	}
}

// A source bucket touched again at the end of the window: neither
// first-touch nor last-touch-first order puts the destination first.
func TestPublicationOrderSourceTouchedAgain(t *testing.T) {
	wb := newWindowBuilder(t)
	const a = 30
	v1, b := wb.fpFrom(a, 100)
	wb.start(map[uint64][]uint16{a: {v1, 201, 202, 203}, b: {301}})
	wb.replace(a, v1, 999) // first touch of a
	wb.set(b, 301, v1)     // first and last touch of b
	wb.replace(a, 202, 0)  // a removal: last touch of a
	if got := buckets(wb.drainChecked()); !slices.Equal(got, []uint64{b, a}) {
		t.Fatalf("order %v, want [%d %d]", got, b, a)
	}
}

// twoWithSameDelta returns two fingerprints > after with the same
// alternate from a.
func (wb *windowBuilder) twoWithSameDelta(a uint64, after uint16) (uint16, uint16, uint64) {
	first := make(map[uint64]uint16)
	for fp := after + 1; fp != 0; fp++ {
		b := wb.alt(a, fp)
		if other, ok := first[b]; ok {
			return other, fp, b
		}
		first[b] = fp
	}
	wb.t.Fatal("no pair")
	return 0, 0, 0
}

// Two fingerprints of the same pair swapped between two full buckets: no
// store sequence on the two buckets avoids a gap, so the drain undoes the
// swap (membership is the same) and publishes the rest.
func TestPublicationOrderTwoCycleIsUndone(t *testing.T) {
	wb := newWindowBuilder(t)
	const a = 40
	v1, v2, b := wb.twoWithSameDelta(a, 100)
	x, c := wb.fpFrom(a, 1000, a, b)
	wb.start(map[uint64][]uint16{a: {v1, 201, 202, 203}, b: {v2, 301, 302, 303}, c: {501}})
	// The kick walk a -> b -> a -> c: x in, v1 to b, v2 back to a, x on to c.
	wb.replace(a, v1, x)
	wb.replace(b, v2, v1)
	wb.replace(a, x, v2)
	wb.set(c, 501, x)
	images := wb.drainChecked()
	if got := buckets(images); !slices.Equal(got, []uint64{c}) {
		t.Fatalf("order %v, want only [%d] (the swap undone)", got, c)
	}
	if got := wb.s.Telemetry().UnrotatedCycles; got != 1 {
		t.Fatalf("UnrotatedCycles = %d, want 1", got)
	}
	if slotCount(wb.s.Word(a), v1) != 1 || slotCount(wb.s.Word(b), v2) != 1 {
		t.Fatalf("words after undo: a %#x b %#x", wb.s.Word(a), wb.s.Word(b))
	}
}

// A swap plus other changes in both buckets: after the undo both still
// change and both are published, safely.
func TestPublicationOrderTwoCycleWithOtherChanges(t *testing.T) {
	wb := newWindowBuilder(t)
	const a = 50
	v1, v2, b := wb.twoWithSameDelta(a, 100)
	wb.start(map[uint64][]uint16{a: {v1, 201, 202}, b: {v2, 301}})
	wb.replace(a, v1, 777) // new fingerprint, v1 kicked to b
	wb.replace(b, v2, v1)  // v2 kicked to a
	wb.set(a, 777, 201, 202, v2)
	wb.set(b, v1, 301, 888) // and a new one in b
	images := wb.drainChecked()
	if len(images) != 2 {
		t.Fatalf("batch %v, want both buckets", images)
	}
	if got := wb.s.Telemetry().UnrotatedCycles; got != 1 {
		t.Fatalf("UnrotatedCycles = %d, want 1", got)
	}
}

// A three-cycle a -> b -> c -> a.
func TestPublicationOrderThreeCycleIsUndone(t *testing.T) {
	wb := newWindowBuilder(t)
	var a, b, c uint64
	var v1, v2, v3 uint16
	// Find v1, v2, v3 with delta(v3) = delta(v1) ^ delta(v2) and distinct
	// buckets: c = b ^ delta(v2), a = c ^ delta(v3).
	a = 60
	byDelta := make(map[uint64]uint16)
	for fp := uint16(100); fp < 5000; fp++ {
		byDelta[a^wb.alt(a, fp)] = fp
	}
search:
	for f1 := uint16(100); f1 < 5000; f1++ {
		for f2 := f1 + 1; f2 < 5000; f2++ {
			d1, d2 := a^wb.alt(a, f1), a^wb.alt(a, f2)
			if d1 == d2 {
				continue
			}
			if f3, ok := byDelta[d1^d2]; ok && f3 != f1 && f3 != f2 {
				v1, v2, v3 = f1, f2, f3
				b, c = a^d1, a^d1^d2
				break search
			}
		}
	}
	if v3 == 0 {
		t.Fatal("no three-cycle fingerprints")
	}
	wb.start(map[uint64][]uint16{a: {v1, 201}, b: {v2, 301}, c: {v3, 401}})
	wb.replace(a, v1, v3)
	wb.replace(b, v2, v1)
	wb.replace(c, v3, v2)
	wb.set(a, v3, 201, 999) // a also gains a new fingerprint
	images := wb.drainChecked()
	if got := buckets(images); !slices.Equal(got, []uint64{a}) {
		t.Fatalf("order %v, want only [%d]", got, a)
	}
	if got := wb.s.Telemetry().UnrotatedCycles; got != 1 {
		t.Fatalf("UnrotatedCycles = %d, want 1", got)
	}
}

// The old first-touch order fails the prefix check on the two-step kick, so
// the check can fail.
func TestPrefixSafeRejectsFirstTouchOrder(t *testing.T) {
	wb := newWindowBuilder(t)
	const a = 70
	v1, b := wb.fpFrom(a, 100)
	before := slices.Clone(wb.s.filter.words)
	before[a] = uint64(v1)
	images := []ckf.BucketImage{{Bucket: a, Value: 999}, {Bucket: b, Value: uint64(v1)}}
	if _, err := prefixSafe(wb.s.Addressing(), before, images); err == nil {
		t.Fatal("first-touch order of a kick passed the prefix check")
	}
}

// Random event streams at high load: every drain's batch is prefix-safe,
// ends at the state's words, and the undo keeps every resident block
// findable (checkInvariants).
func TestPropertyPublicationOrderPrefixSafe(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		expected := uint64(rapid.SampledFrom([]int{16, 64, 256}).Draw(t, "expected"))
		cfg := cfgN(expected, uint64(rapid.IntRange(1, 16).Draw(t, "every")))
		cfg.MaxKicks = uint64(rapid.SampledFrom([]int{8, 500}).Draw(t, "kicks"))
		s := mustDcState(t, cfg)
		slots := 4 * s.BucketCount()
		replica := s.CopyWords()
		k := pSrc(1, 0)
		next, low := uint64(0), uint64(0)
		steps := rapid.IntRange(1, 400).Draw(t, "steps")
		publish := func(images []ckf.BucketImage) {
			if images == nil {
				return
			}
			if err := prodCheckBatch(s.BucketCount(), images); err != nil {
				t.Fatal(err)
			}
			after, err := prefixSafe(s.Addressing(), replica, images)
			if err != nil {
				t.Fatal(err)
			}
			replica = after
			if !s.HasPendingPublication() && !slices.Equal(replica, s.filter.words) {
				t.Fatal("batch does not end at the state's words")
			}
		}
		for range steps {
			// Keep the table near 95 % of its slots: store while below,
			// remove the oldest blocks while above.
			var ev RouterEvent
			switch {
			case s.ResidentCount()*100 < 95*slots || rapid.IntRange(0, 9).Draw(t, "op") < 3:
				n := rapid.IntRange(1, 6).Draw(t, "n")
				blocks := make([]StoredBlock, n)
				for i := range blocks {
					blocks[i] = pBlk(next, rapid.Uint64().Draw(t, "tok"))
					next++
				}
				ev = storeEv(k, blocks...)
			default:
				ids := []uint64{low}
				for low++; low < next && rapid.Bool().Draw(t, "more"); low++ {
					ids = append(ids, low)
				}
				ev = removeEv(k, ids...)
			}
			out := s.ApplyEvent(ev)
			publish(out.Publication)
			if rapid.IntRange(0, 19).Draw(t, "flush") == 0 {
				publish(s.Flush())
			}
			if err := checkInvariants(s); err != nil {
				t.Fatal(err)
			}
		}
		publish(s.Flush())
		if !slices.Equal(replica, s.filter.words) {
			t.Fatal("replica != words after the final flush")
		}
	})
}

// Ordering a window reuses the window's scratch: once it has grown, it
// allocates nothing.
func TestPublicationOrderDoesNotAllocate(t *testing.T) {
	wb := newWindowBuilder(t)
	threeStepKick(wb, 80)
	want := []int32{2, 1, 0} // c, b, a as dirty indices
	if got := wb.s.publicationOrder(); !slices.Equal(got, want) {
		t.Fatalf("order %v, want %v", got, want)
	}
	if n := testing.AllocsPerRun(100, func() { wb.s.publicationOrder() }); n != 0 {
		t.Fatalf("publicationOrder allocates %v per call", n)
	}
}

// A barrier snapshot whose tail undoes a cycle carries the words the tail
// ends at (the copy follows the drain).
func TestBarrierSnapshotCarriesUndoneWords(t *testing.T) {
	wb := newWindowBuilder(t)
	const a = 90
	v1, v2, b := wb.twoWithSameDelta(a, 100)
	wb.start(map[uint64][]uint16{a: {v1, 201}, b: {v2, 301}})
	published := slices.Clone(wb.s.filter.words)
	wb.replace(a, v1, v2)
	wb.replace(b, v2, v1)
	wb.set(b, v1, 301, 888)
	tail, words, err := wb.s.BarrierSnapshot()
	if err != nil {
		t.Fatal(err)
	}
	if wb.s.Telemetry().UnrotatedCycles != 1 {
		t.Fatal("no cycle undone")
	}
	after, err := prefixSafe(wb.s.Addressing(), published, tail)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(after, words) || !slices.Equal(words, wb.s.filter.words) {
		t.Fatal("published words + tail, snapshot words and state words differ")
	}
}
