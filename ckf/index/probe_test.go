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

func TestTableProbeAndAlignment(t *testing.T) {
	tb, err := newTransposedTable(64)
	if err != nil {
		t.Fatal(err)
	}
	if len(tb.words) != 64*ckf.LaneCount {
		t.Fatal("size")
	}
	if uintptrOf(&tb.words[0])%rowBytes != 0 {
		t.Fatal("rows must be 128-byte aligned")
	}
	tb.store(5, 3, uint64(ckf.Bucket(0).WithSlot(2, 0xBEEF)))
	tb.store(9, 7, uint64(ckf.Bucket(0).WithSlot(0, 0xBEEF)))
	if got := tb.probe(0xBEEF, 5, 9); got != 1<<3|1<<7 {
		t.Fatalf("probe %016b", got)
	}
	if got := tb.probe(0xBEEE, 5, 9); got != 0 {
		t.Fatalf("probe miss %016b", got)
	}
	tb.prefetch(5, 9) // no effect, must not fault
	if _, err := newTransposedTable(0); err == nil {
		t.Fatal("zero buckets accepted")
	}
}

func uintptrOf(p *uint64) uintptr { return uintptr(unsafe.Pointer(p)) }

// storeColumn (assembly on amd64 without -race, Go loop otherwise) equals
// the plain per-word reference and touches only its lane.
func TestStoreColumnMatchesReference(t *testing.T) {
	for _, n := range []uint64{2, 64, 1000 + 24, 1 << 12} {
		if n&(n-1) != 0 {
			n = 1024
		}
		tb, err := newTransposedTable(n)
		if err != nil {
			t.Fatal(err)
		}
		r := rand.New(rand.NewPCG(n, 3))
		words := make([]uint64, n)
		for i := range words {
			words[i] = r.Uint64()
		}
		for lane := 0; lane < ckf.LaneCount; lane += 5 {
			tb.storeColumn(lane, words)
			for b := uint64(0); b < n; b++ {
				if tb.load(b, lane) != words[b] {
					t.Fatalf("n=%d lane %d bucket %d", n, lane, b)
				}
				for other := 0; other < ckf.LaneCount; other++ {
					if other%5 != 0 || other > lane {
						if tb.load(b, other) != 0 {
							t.Fatalf("lane %d wrote lane %d", lane, other)
						}
					}
				}
			}
		}
	}
}
