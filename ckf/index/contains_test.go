package index

import (
	"testing"

	"github.com/ckf-stream/ckf-stream/ckf"
)

// TestLanesHoldingProbesOneBlock: LanesHolding finds a stored block's sequence hash in exactly
// the ready lanes that hold it, at any chain position, leaves out lanes not asked for and lanes
// not ready, and does not find a local hash that is no stored block's sequence hash. The same
// at 16 and 64 lanes.
func TestLanesHoldingProbesOneBlock(t *testing.T) {
	for _, width := range []int{ckf.LaneCount, 64} {
		f := newFixtureN(t, width, 4, 1024, 2)
		local := []uint64{11, 12, 13, 14}
		seq := ckf.SequenceHashes(local)
		w0 := make([]uint64, 1024)
		insertChain(f.g.addr, w0, local)
		w2 := make([]uint64, 1024)
		insertChain(f.g.addr, w2, local[:2])
		in0 := f.readyLane(0, 1, 1, w0)
		in2 := f.readyLane(2, 1, 1, w2)
		f.claim(3) // holds nothing the table shows: claimed, never ready
		all := uint64(1)<<width - 1
		if width == 64 {
			all = ^uint64(0)
		}
		for i, want := range []uint64{0b101, 0b101, 0b001, 0b001} {
			if got := f.g.LanesHolding(seq[i], all); got != want {
				t.Errorf("%d lanes: block %d held by %04b, want %04b", width, i, got, want)
			}
		}
		if got := f.g.LanesHolding(seq[1], 0b1); got != 0b1 {
			t.Errorf("%d lanes: asked lane 0 only, got %04b", width, got)
		}
		if got := f.g.LanesHolding(seq[1], 0b1000); got != 0 {
			t.Errorf("%d lanes: a lane not ready reads %04b", width, got)
		}
		// local[1] is a content hash, not the sequence hash of any stored block.
		if got := f.g.LanesHolding(local[1], all); got != 0 {
			t.Errorf("%d lanes: local hash %d found in %04b", width, local[1], got)
		}
		in0.Close()
		in2.Close()
	}
}

// TestLanesHoldingDoesNotAllocate: the probe is on the query service's path.
func TestLanesHoldingDoesNotAllocate(t *testing.T) {
	f := newFixture(t, 2, 1024, 2)
	w := make([]uint64, 1024)
	insertChain(f.g.addr, w, []uint64{1, 2, 3})
	defer f.readyLane(0, 1, 1, w).Close()
	seq := ckf.SequenceHashes([]uint64{1, 2, 3})
	if n := testing.AllocsPerRun(100, func() { f.g.LanesHolding(seq[2], 0b11) }); n != 0 {
		t.Fatalf("%v allocations per probe", n)
	}
}
