package streams

import (
	"runtime"
	"testing"
	"unsafe"

	"github.com/ckf-stream/ckf-stream/ckf"
)

// TestDeltaSlabHandsOutDisjointMemory: every delta, image slice and run the slab hands out is
// disjoint from every other one, and slices cannot grow into a neighbour (their capacity is
// clipped): the pool may read a submitted delta while the runner decodes the next.
func TestDeltaSlabHandsOutDisjointMemory(t *testing.T) {
	var s deltaSlab
	type span struct{ lo, hi uintptr }
	var spans []span
	var live []any // keep every hand-out reachable, as the pool would, so no address is reused
	add := func(p unsafe.Pointer, size uintptr) {
		lo := uintptr(p)
		for _, sp := range spans {
			if lo < sp.hi && sp.lo < lo+size {
				t.Fatalf("overlap: [%#x,%#x) and [%#x,%#x)", lo, lo+size, sp.lo, sp.hi)
			}
		}
		spans = append(spans, span{lo, lo + size})
	}
	for i := range 3000 {
		n := 1 + i%70
		if i%500 == 0 {
			n = slabImages // a big delta
		}
		im := s.images(n)
		if len(im) != n || cap(im) != n {
			t.Fatalf("images(%d): len %d cap %d", n, len(im), cap(im))
		}
		live = append(live, im)
		add(unsafe.Pointer(&im[0]), uintptr(n)*unsafe.Sizeof(im[0]))
		d := s.delta()
		if d.Images != nil || d.Sequence != 0 {
			t.Fatal("delta not zeroed")
		}
		live = append(live, d)
		add(unsafe.Pointer(d), unsafe.Sizeof(*d))
		if i%maxDeltaRun == 0 {
			r := s.run()
			if len(r) != 0 || cap(r) != maxDeltaRun {
				t.Fatalf("run: len %d cap %d", len(r), cap(r))
			}
			live = append(live, r)
			add(unsafe.Pointer(unsafe.SliceData(r[:1])), maxDeltaRun*unsafe.Sizeof(r[:1][0]))
		}
	}
	runtime.KeepAlive(live)
}

// TestDeltaSlabAllocationsPerDelta: collecting runs of 32 sixteen-image deltas costs far less
// than one allocation per delta (T11 asks for at most one).
func TestDeltaSlabAllocationsPerDelta(t *testing.T) {
	var s deltaSlab
	run := s.run()
	const runs = 64 // AllocsPerRun reports whole allocations per call: measure many runs per call
	perCall := testing.AllocsPerRun(50, func() {
		for range runs {
			for range maxDeltaRun {
				im := s.images(16)
				d := s.delta()
				*d = ckf.Delta{Sequence: 1, Images: im}
				run = append(run, d)
			}
			run = s.run()
		}
	})
	perDelta := perCall / (runs * maxDeltaRun)
	if perDelta > 0.05 {
		t.Fatalf("%.3f allocations per delta (%.0f per %d deltas)", perDelta, perCall, runs*maxDeltaRun)
	}
	t.Logf("%.0f allocations per %d deltas", perCall, runs*maxDeltaRun)
}
