package index

import (
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/ckf-stream/ckf-stream/ckf"
)

// randomRow fills a row with words; with probability ~1/3 per slot the slot
// holds fp, with 1/3 it is empty, else random. Adversarial for borrows.
func randomRow(r *rand.Rand, fp uint16) *[ckf.LaneCount]uint64 {
	var row [ckf.LaneCount]uint64
	for l := range row {
		var w uint64
		for s := 0; s < 4; s++ {
			var v uint16
			switch r.IntN(6) {
			case 0:
				v = fp
			case 1, 2:
				v = 0
			case 3:
				v = fp + 1
			case 4:
				v = fp - 1
			default:
				v = uint16(r.Uint32())
			}
			w |= uint64(v) << (16 * s)
		}
		row[l] = w
	}
	return &row
}

func TestProbeRowsEqualsReference(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 200000; i++ {
		fp := uint16(r.Uint32())
		if i%7 == 0 {
			fp = []uint16{1, 0x8000, 0xFFFF, 0x7FFF, 0x0101}[i%5]
		}
		if fp == 0 {
			fp = 1
		}
		ra, rb := randomRow(r, fp), randomRow(r, fp)
		want := probeRowsRef(ra, rb, fp)
		if got := probeRowsSWAR(ra, rb, fp); got != want {
			t.Fatalf("swar: fp %#x got %016b want %016b\nra %x\nrb %x", fp, got, want, *ra, *rb)
		}
		if got := probeRows(ra, rb, fp); got != want {
			t.Fatalf("%s kernel: fp %#x got %016b want %016b", probeKernel, fp, got, want)
		}
		var empty [ckf.LaneCount]uint64
		if got, want := probeRow(ra, fp), probeRowsRef(ra, &empty, fp); got != want {
			t.Fatalf("one row: fp %#x got %016b want %016b\nra %x", fp, got, want, *ra)
		}
	}
}

// Exhaustive single-slot check: every fingerprint in every slot of every
// lane is found, and nothing else is.
func TestProbeRowsEverySlotEveryLane(t *testing.T) {
	for _, fp := range []uint16{1, 2, 0x00FF, 0x8000, 0x8001, 0xFFFF} {
		for lane := 0; lane < ckf.LaneCount; lane++ {
			for slot := 0; slot < 4; slot++ {
				for which := 0; which < 2; which++ {
					var ra, rb [ckf.LaneCount]uint64
					row := &ra
					if which == 1 {
						row = &rb
					}
					row[lane] = uint64(ckf.Bucket(0).WithSlot(slot, fp))
					// Neighbouring garbage that must not match.
					for l := range ra {
						if l != lane {
							ra[l] = uint64(fp^0x5555) * ckf.SlotLowBits
						}
					}
					if got := probeRows(&ra, &rb, fp); got != 1<<uint(lane) {
						t.Fatalf("fp %#x lane %d slot %d row %d: %016b", fp, lane, slot, which, got)
					}
				}
			}
		}
	}
}

// testWidths are the lane counts the table tests run at (consumer §16):
// every row stride (1, 2, 4, 8, 16, 24..64) and the counts just above and
// below the reference's 16.
var testWidths = []int{1, 2, 3, 4, 5, 8, 12, 15, 16, 17, 24, 33, 48, 63, 64}

func TestTableProbeAndAlignment(t *testing.T) {
	for _, lanes := range testWidths {
		tb, err := newTransposedTable(64, lanes)
		if err != nil {
			t.Fatal(err)
		}
		if tb.stride < lanes || tb.stride != rowStride(lanes) || len(tb.words) != 64*tb.stride {
			t.Fatalf("lanes %d: stride %d, %d words", lanes, tb.stride, len(tb.words))
		}
		if lanes == ckf.LaneCount && tb.stride != ckf.LaneCount {
			t.Fatal("16 lanes must keep rows of 16 words")
		}
		if lanes <= 4 && tb.stride > 4 || tb.stride > lanes+7 {
			t.Fatalf("lanes %d pay for %d words per row", lanes, tb.stride)
		}
		if uintptrOf(&tb.words[0])%tableAlign != 0 {
			t.Fatal("rows must start 128-byte aligned")
		}
		hi := lanes - 1
		tb.store(5, 0, uint64(ckf.Bucket(0).WithSlot(2, 0xBEEF)))
		tb.store(9, hi, uint64(ckf.Bucket(0).WithSlot(0, 0xBEEF)))
		want := uint64(1) | 1<<uint(hi)
		if got := tb.probe(0xBEEF, 5, 9); got != want {
			t.Fatalf("lanes %d: probe %064b", lanes, got)
		}
		if got := tb.probe(0xBEEE, 5, 9); got != 0 {
			t.Fatalf("lanes %d: probe miss %064b", lanes, got)
		}
		if got := tb.probeSettled(0xBEEF, 5, 9, ^uint64(0)); got != want {
			t.Fatalf("lanes %d: settled %064b", lanes, got)
		}
		if got, want16 := tb.probeSettled16(0xBEEF, 5, 9, 0xFFFF), uint16(want); got != want16 {
			t.Fatalf("lanes %d: 16-lane probe %016b want %016b", lanes, got, want16)
		}
		tb.prefetch(5, 9) // no effect, must not fault
		tb.prefetch16(63, 62)
	}
	if _, err := newTransposedTable(0, 16); err == nil {
		t.Fatal("zero buckets accepted")
	}
	for _, lanes := range []int{0, -1, ckf.MaxLanes + 1} {
		if _, err := newTransposedTable(64, lanes); err == nil {
			t.Fatalf("%d lanes accepted", lanes)
		}
	}
}

// Every width's kernel (probeSettled over whole rows, probeSettled16 over
// lanes 0..15) equals the per-lane reference on random adversarial rows,
// with and without the settling recheck.
func TestProbeKernelsEveryWidth(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, lanes := range testWidths {
		const buckets = 8
		tb, err := newTransposedTable(buckets, lanes)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 4000; i++ {
			fp := uint16(r.Uint32()) | 1
			for b := uint64(0); b < buckets; b++ {
				var row *[ckf.LaneCount]uint64
				for l := 0; l < lanes; l++ {
					if l%ckf.LaneCount == 0 { // one random row per 16 lanes (under -race a row per word took minutes)
						row = randomRow(r, fp)
					}
					tb.store(b, l, row[l%ckf.LaneCount])
				}
			}
			a, b := r.Uint64N(buckets), r.Uint64N(buckets)
			want := probeRowsRefN(tb.rowWords(a), tb.rowWords(b), fp)
			if got := tb.probe(fp, a, b); got != want {
				t.Fatalf("lanes %d: got %064b want %064b", lanes, got, want)
			}
			// probeSettled answers for the lanes it is given (the search reads no other bit).
			decided := r.Uint64() >> uint(r.IntN(64))
			if got := tb.probeSettled(fp, a, b, decided); got&decided != want&decided {
				t.Fatalf("lanes %d, decided %064b: got %064b want %064b", lanes, decided, got, want)
			}
			if got := tb.probeSettled16(fp, a, b, uint16(r.Uint32())); got != uint16(want) {
				t.Fatalf("lanes %d, 16-lane: got %016b want %016b", lanes, got, uint16(want))
			}
			if got := probeRowsN(tb.rowWords(a), tb.rowWords(b), fp); got != want {
				t.Fatalf("lanes %d, probeRowsN: got %064b want %064b", lanes, got, want)
			}
		}
	}
}

func uintptrOf(p *uint64) uintptr { return uintptr(unsafe.Pointer(p)) }

// storeColumn (assembly on amd64 without -race, Go loop otherwise) equals
// the plain per-word reference and touches only its lane, at every width.
func TestStoreColumnMatchesReference(t *testing.T) {
	for _, lanes := range testWidths {
		for _, n := range []uint64{2, 64, 1024, 1 << 12} {
			tb, err := newTransposedTable(n, lanes)
			if err != nil {
				t.Fatal(err)
			}
			r := rand.New(rand.NewPCG(n, 3))
			words := make([]uint64, n)
			for i := range words {
				words[i] = r.Uint64()
			}
			step := max(1, lanes/4)
			for lane := 0; lane < lanes; lane += step {
				tb.storeColumn(lane, words)
				for b := uint64(0); b < n; b++ {
					if tb.load(b, lane) != words[b] {
						t.Fatalf("lanes %d n=%d lane %d bucket %d", lanes, n, lane, b)
					}
					for other := 0; other < tb.stride; other++ {
						if other%step != 0 || other > lane {
							if tb.load(b, other) != 0 {
								t.Fatalf("lanes %d: lane %d wrote lane %d", lanes, lane, other)
							}
						}
					}
				}
			}
		}
	}
}
