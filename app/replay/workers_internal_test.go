package replay

import "testing"

// TestWorkerOfInvertsWorkerID: the router reads a worker-stage answer's sources back into the
// fleet's (DC, worker) by workerOf; ids WorkerID does not give are not workers.
func TestWorkerOfInvertsWorkerID(t *testing.T) {
	for d := range 16 {
		for w := range 300 {
			if gd, gw, ok := workerOf(WorkerID(d, w)); !ok || gd != d || gw != w {
				t.Fatalf("workerOf(WorkerID(%d, %d)) = %d, %d, %v", d, w, gd, gw, ok)
			}
		}
	}
	for _, id := range []uint64{0, 7, 1 << 16, 1<<32 | 1<<16 | 1} {
		if d, w, ok := workerOf(id); ok {
			t.Errorf("workerOf(%#x) = %d, %d, a worker", id, d, w)
		}
	}
}
