package pool

import (
	"testing"

	"pgregory.net/rapid"
)

// TestOutstandingFIFOMatchesSliceModel drives the ring with random pushes and removals (mostly
// from the head, sometimes from the middle or of unknown ids) and compares it with a plain slice
// after every step: same entries in the same order, same image counts returned.
func TestOutstandingFIFOMatchesSliceModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var f outstandingFIFO
		var model []outstandingDelta
		next := uint64(1)
		for step := range rapid.IntRange(1, 400).Draw(t, "steps") {
			switch op := rapid.IntRange(0, 9).Draw(t, "op"); {
			case op < 5:
				d := outstandingDelta{id: next, images: rapid.IntRange(1, 64).Draw(t, "images")}
				next++
				f.push(d)
				model = append(model, d)
			default:
				var id uint64
				want, at := 0, -1
				switch {
				case len(model) > 0 && op < 8:
					id = model[0].id
					at = 0
				case len(model) > 0 && op == 8:
					at = rapid.IntRange(0, len(model)-1).Draw(t, "at")
					id = model[at].id
				default:
					id = next + 1000 // not held
				}
				if at >= 0 {
					want = model[at].images
					model = append(model[:at], model[at+1:]...)
				}
				got, ok := f.remove(id)
				if ok != (at >= 0) || got != want {
					t.Fatalf("step %d: remove(%d) = %d, %v; want %d, %v", step, id, got, ok, want, at >= 0)
				}
			}
			if f.Len() != len(model) {
				t.Fatalf("step %d: len %d, model %d", step, f.Len(), len(model))
			}
			for i := range model {
				if *f.at(i) != model[i] {
					t.Fatalf("step %d: entry %d = %+v, model %+v", step, i, *f.at(i), model[i])
				}
			}
		}
	})
}

// TestOutstandingFIFOSteadyStateAllocatesNothing: once the ring has grown, a lane that admits a
// run and drains it to empty, over and over, does not allocate.
func TestOutstandingFIFOSteadyStateAllocatesNothing(t *testing.T) {
	var f outstandingFIFO
	id := uint64(0)
	cycle := func() {
		first := id + 1
		for range 32 {
			id++
			f.push(outstandingDelta{id: id, images: 16})
		}
		for i := range uint64(32) {
			if _, ok := f.remove(first + i); !ok {
				t.Fatal("entry lost")
			}
		}
	}
	cycle()
	if n := testing.AllocsPerRun(100, cycle); n != 0 {
		t.Fatalf("%v allocations per admit/drain cycle, want 0", n)
	}
}
