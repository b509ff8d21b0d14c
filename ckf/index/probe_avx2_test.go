package index

import (
	"encoding/binary"
	"math/rand/v2"
	"sync/atomic"
	"testing"

	"github.com/ckf-stream/ckf-stream/ckf"
)

// The AVX2 kernel of wide rows (probe_avx2_amd64.go; the portable stand-in
// in race and purego builds) against the per-lane reference: random and
// adversarial rows, every lane hit, a fingerprint in every slot of every
// lane of either row, and the settled probe with the kernel on and off.

// avx2Rows returns rows A and B of 64 words, 128-byte aligned as the
// table's rows are (VMOVDQA needs 16), and a zero row of the same table.
func avx2Rows(t testing.TB) (ra, rb, zero []uint64) {
	tb, err := newTransposedTable(3, ckf.MaxLanes)
	if err != nil {
		t.Fatal(err)
	}
	return tb.rowWords(0), tb.rowWords(1), tb.rowWords(2)
}

// avx2RowsHits is the kernel's mask of rows ra and rb (no lane decided, so
// no third read).
func avx2RowsHits(ra, rb []uint64, blocks int, fp uint16) uint64 {
	return probeSettledAVX2Asm(&ra[0], &rb[0], &ra[0], blocks, fp, 0)
}

// avx2RowHits is the kernel's mask of row r alone: rows A and B are the
// zero row, so every lane misses and the third read, of r, decides.
func avx2RowHits(r, zero []uint64, blocks int, fp uint16) uint64 {
	return probeSettledAVX2Asm(&zero[0], &zero[0], &r[0], blocks, fp, ^uint64(0))
}

// checkAVX2Kernels compares the kernel with the reference on one and two
// blocks of ra and rb: rows A and B, each row alone, and the third read
// (of row B, so that it can add lanes) for the decided lanes that missed.
func checkAVX2Kernels(t testing.TB, ra, rb, zero []uint64, fp uint16, decided uint64) {
	t.Helper()
	for blocks := 1; blocks <= 2; blocks++ {
		n := 32 * blocks
		span := ^uint64(0) >> uint(64-n)
		ab := probeRowsRefN(ra[:n], rb[:n], fp)
		if got := avx2RowsHits(ra, rb, blocks, fp); got != ab {
			t.Fatalf("rows, %d blocks, fp %#x: got %064b want %064b\nra %x\nrb %x", blocks, fp, got, ab, ra, rb)
		}
		a := probeRowsRefN(ra[:n], zero[:n], fp)
		if got := avx2RowHits(ra, zero, blocks, fp); got != a {
			t.Fatalf("row A, %d blocks, fp %#x: got %064b want %064b\nra %x", blocks, fp, got, a, ra)
		}
		b := probeRowsRefN(rb[:n], zero[:n], fp)
		if got := avx2RowHits(rb, zero, blocks, fp); got != b {
			t.Fatalf("row B, %d blocks, fp %#x: got %064b want %064b\nrb %x", blocks, fp, got, b, rb)
		}
		// Rows A and zero, then B for the decided lanes that missed.
		d := decided & span
		if got, want := probeSettledAVX2Asm(&ra[0], &zero[0], &rb[0], blocks, fp, d), a|b&d&^a; got != want {
			t.Fatalf("third read, %d blocks, fp %#x, decided %064b: got %064b want %064b", blocks, fp, d, got, want)
		}
	}
	// The second block alone, as probeSettled runs it for lanes 32..63.
	if got, want := avx2RowsHits(ra[32:], rb[32:], 1, fp), probeRowsRefN(ra[32:], rb[32:], fp); got != want {
		t.Fatalf("rows, second block, fp %#x: got %032b want %032b", fp, got, want)
	}
}

// adversarialFingerprints are the fingerprints the kernel tests try beside
// random ones: sign bits, byte halves and all ones (the packs saturate
// signed values, so a fingerprint's sign must not reach them).
var adversarialFingerprints = []uint16{1, 2, 0x007F, 0x0080, 0x00FF, 0x0100, 0x7FFF, 0x8000, 0x8001, 0xFF00, 0xFFFE, 0xFFFF}

func TestProbeAVX2EqualsReference(t *testing.T) {
	ra, rb, zero := avx2Rows(t)
	r := rand.New(rand.NewPCG(37, 64))
	for i := 0; i < 50000/probeTestScale; i++ {
		fp := uint16(r.Uint32()) | 1
		if i%3 == 0 {
			fp = adversarialFingerprints[i%len(adversarialFingerprints)]
		}
		for p := 0; p < 4; p++ {
			copy(ra[16*p:], randomRow(r, fp)[:])
			copy(rb[16*p:], randomRow(r, fp)[:])
		}
		decided := r.Uint64() >> uint(r.IntN(64))
		checkAVX2Kernels(t, ra, rb, zero, fp, decided)
	}
}

// Every lane hits: in A only, in B only, in both, in a different slot per
// lane; and every lane misses with near-miss neighbours (fp±1, fp with
// bytes swapped, fp^0x8000) in every slot.
func TestProbeAVX2AllLanes(t *testing.T) {
	ra, rb, zero := avx2Rows(t)
	const decided = 0x0F0F_F0F0_0FF0_F00F
	for _, fp := range adversarialFingerprints {
		near := [4]uint16{fp + 1, fp - 1, fp>>8 | fp<<8, fp ^ 0x8000}
		for where := 0; where < 3; where++ {
			for l := range ra {
				hit := uint64(ckf.Bucket(0).WithSlot(l%4, fp))
				var miss uint64
				for s, v := range near {
					if v != fp {
						miss |= uint64(v) << (16 * s)
					}
				}
				ra[l], rb[l] = miss, miss
				if where != 1 {
					ra[l] = hit | miss&^(0xFFFF<<(16*(l%4)))
				}
				if where != 0 {
					rb[l] = hit
				}
			}
			checkAVX2Kernels(t, ra, rb, zero, fp, decided)
			if got := avx2RowsHits(ra, rb, 2, fp); got != ^uint64(0) {
				t.Fatalf("fp %#x, rows %d: all lanes hit, got %064b", fp, where, got)
			}
		}
		for l := range ra {
			var miss uint64
			for s, v := range near {
				if v != fp {
					miss |= uint64(v) << (16 * s)
				}
			}
			ra[l], rb[l] = miss, miss
		}
		checkAVX2Kernels(t, ra, rb, zero, fp, decided)
		if got := avx2RowsHits(ra, rb, 2, fp); got != 0 {
			t.Fatalf("fp %#x: no lane holds it, got %064b", fp, got)
		}
	}
}

// A fingerprint in each slot of each lane of either row is found there and
// nowhere else (neighbours hold garbage that must not match).
func TestProbeAVX2EverySlotEveryLane(t *testing.T) {
	ra, rb, zero := avx2Rows(t)
	for _, fp := range adversarialFingerprints {
		for lane := 0; lane < ckf.MaxLanes; lane++ {
			for slot := 0; slot < 4; slot++ {
				for which := 0; which < 2; which++ {
					for l := range ra {
						ra[l] = uint64(fp^0x5555) * ckf.SlotLowBits
						rb[l] = uint64(fp^0xAAAA) * ckf.SlotLowBits
					}
					row := ra
					if which == 1 {
						row = rb
					}
					row[lane] = uint64(ckf.Bucket(row[lane]).WithSlot(slot, fp))
					if got := avx2RowsHits(ra, rb, 2, fp); got != 1<<uint(lane) {
						t.Fatalf("fp %#x lane %d slot %d row %d: %064b", fp, lane, slot, which, got)
					}
					wantA := uint64(0)
					if which == 0 {
						wantA = 1 << uint(lane)
					}
					if got := avx2RowHits(ra, zero, 2, fp); got != wantA {
						t.Fatalf("row A alone, fp %#x lane %d slot %d row %d: %064b", fp, lane, slot, which, got)
					}
					checkAVX2Kernels(t, ra, rb, zero, fp, ^uint64(0)<<uint(lane))
				}
			}
		}
	}
}

// withProbeKernel runs f with probeWideAVX2 set to on (only where the build
// and the CPU have the kernel) and restores it. It writes the variable only
// to change it (never in builds without the kernel), so a probe on another
// goroutine never races with it there.
func withProbeKernel(on bool, f func()) {
	saved := probeWideAVX2
	if want := on && saved; want != saved {
		probeWideAVX2 = want
		defer func() { probeWideAVX2 = saved }()
	}
	f()
}

// probeSettled answers the same for the lanes it decides with the AVX2
// kernel and with the SWAR one, at every width that has 32-lane blocks, for
// decided sets in the low block, the high block, both, and none.
func TestProbeSettledAVX2EqualsSWAR(t *testing.T) {
	t.Logf("wide-row kernel of this build and CPU: %s", probeWideKernel())
	r := rand.New(rand.NewPCG(37, 32))
	for _, lanes := range []int{24, 32, 33, 40, 48, 56, 63, 64} {
		const buckets = 8
		tb, err := newTransposedTable(buckets, lanes)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 400/probeTestScale; i++ {
			fp := uint16(r.Uint32()) | 1
			for b := uint64(0); b < buckets; b++ {
				for l := 0; l < lanes; l++ {
					tb.store(b, l, randomRow(r, fp)[l%ckf.LaneCount])
				}
			}
			a, b := r.Uint64N(buckets), r.Uint64N(buckets)
			want := probeRowsRefN(tb.rowWords(a), tb.rowWords(b), fp)
			all := ^uint64(0) >> uint(64-lanes)
			for _, decided := range []uint64{all, all & 0xFFFF_FFFF, all &^ 0xFFFF_FFFF, r.Uint64() & all, 1 << uint(r.IntN(lanes)), 0} {
				var swar, avx uint64
				withProbeKernel(false, func() { swar = tb.probeSettled(fp, a, b, decided) })
				withProbeKernel(true, func() { avx = tb.probeSettled(fp, a, b, decided) })
				if swar&decided != want&decided || avx&decided != want&decided {
					t.Fatalf("lanes %d decided %064b: swar %064b %s %064b want %064b", lanes, decided, swar, probeWideKernel(), avx, want)
				}
			}
		}
	}
}

// FuzzProbeAVX2: rows built from the input (each 8 bytes a word, repeated;
// flags place fp in chosen slots of chosen lanes), compared with the
// reference, and probeSettled's two kernels on the decided lanes.
func FuzzProbeAVX2(f *testing.F) {
	f.Add([]byte{1, 2, 3, 4, 5, 6, 7, 8}, uint16(0xBEEF), uint64(0xFFFF_0000_0000_FFFF), uint64(1), uint64(^uint64(0)))
	f.Add([]byte{0xEF, 0xBE, 0, 0, 0, 0, 0, 0}, uint16(0xBEEF), uint64(0), uint64(1<<63), uint64(1<<40))
	f.Add(make([]byte, 64), uint16(0x8000), ^uint64(0), ^uint64(0), uint64(0xFFFF_FFFF))
	f.Add([]byte{0xFF}, uint16(0xFFFF), uint64(0x5555_5555_5555_5555), uint64(0xAAAA_AAAA_AAAA_AAAA), uint64(0x8000_0000_0000_0001))
	tb, err := newTransposedTable(3, ckf.MaxLanes)
	if err != nil {
		f.Fatal(err)
	}
	zero := tb.rowWords(2)
	f.Fuzz(func(t *testing.T, data []byte, fp uint16, inA, inB, decided uint64) {
		if fp == 0 {
			fp = 1 // query fingerprints are never 0 (consumer §5.3)
		}
		ra, rb := tb.rowWords(0), tb.rowWords(1)
		var buf [8]byte
		for l := 0; l < 2*ckf.MaxLanes; l++ {
			var w uint64
			if len(data) > 0 {
				for k := range buf {
					buf[k] = data[(8*l+k)%len(data)]
				}
				w = binary.LittleEndian.Uint64(buf[:])
			}
			row, bits := ra, inA
			if l >= ckf.MaxLanes {
				row, bits = rb, inB
			}
			lane := l % ckf.MaxLanes
			if bits>>uint(lane)&1 != 0 {
				w = uint64(ckf.Bucket(w).WithSlot(int(w>>62), fp))
			}
			row[lane] = w
		}
		checkAVX2Kernels(t, ra, rb, zero, fp, decided)
		want := probeRowsRefN(ra, rb, fp)
		var swar, avx uint64
		withProbeKernel(false, func() { swar = tb.probeSettled(fp, 0, 1, decided) })
		withProbeKernel(true, func() { avx = tb.probeSettled(fp, 0, 1, decided) })
		if swar&decided != want&decided || avx&decided != want&decided {
			t.Fatalf("decided %064b: swar %064b %s %064b want %064b", decided, swar, probeWideKernel(), avx, want)
		}
	})
}

// A probe concurrent with stores sees every word whole (consumer §5.5), with
// whichever kernel the build runs (the AVX2 one without -race on a CPU that
// has it, the sync/atomic loop under -race): a writer flips every word of
// rows A and B of a 64-lane table between two values that both hold fp,
// in different slots, and that hold it in no slot when one half of a value
// is read with the other half of the other (a torn read). Every probe must
// see every lane.
func TestProbeSettledWideWordsWholeUnderStores(t *testing.T) {
	tb, err := newTransposedTable(2, ckf.MaxLanes)
	if err != nil {
		t.Fatal(err)
	}
	const fp = 0xBEEF
	// x holds fp in slot 0, y in slot 3: x's low half with y's high half
	// holds it twice, y's low half with x's high half holds it nowhere.
	x := uint64(fp) | 0x1111<<16 | 0x2222<<32 | 0x3333<<48
	y := uint64(0x4444) | 0x5555<<16 | 0x6666<<32 | uint64(fp)<<48
	if torn := y&0xFFFF_FFFF | x&^0xFFFF_FFFF; ckf.Bucket(torn).Contains(fp) {
		t.Fatal("the torn value must not hold fp")
	}
	for b := uint64(0); b < 2; b++ {
		for l := 0; l < ckf.MaxLanes; l++ {
			tb.store(b, l, x)
		}
	}
	var stop atomic.Bool
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; !stop.Load(); i++ {
			v := x
			if i%2 == 1 {
				v = y
			}
			for b := uint64(0); b < 2; b++ {
				for l := 0; l < ckf.MaxLanes; l++ {
					tb.store(b, l, v)
				}
			}
		}
	}()
	defer func() { stop.Store(true); <-done }()
	for i := 0; i < 100000/probeTestScale; i++ {
		if got := tb.probeSettled(fp, 0, 1, ^uint64(0)); got != ^uint64(0) {
			t.Fatalf("probe %d (%s kernel): lanes %064b", i, probeWideKernel(), got)
		}
		if got := tb.probe(fp, 0, 1); got != ^uint64(0) {
			t.Fatalf("probe %d (unsettled): lanes %064b", i, got)
		}
	}
}
