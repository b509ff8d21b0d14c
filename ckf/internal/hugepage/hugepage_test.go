package hugepage

import "testing"

// TestAdviseLeavesContentsAlone: advising small, empty and large arrays changes none of their
// elements (the advice is a hint about backing, never about contents).
func TestAdviseLeavesContentsAlone(t *testing.T) {
	Advise([]uint64(nil))
	small := []uint32{1, 2, 3}
	Advise(small)
	big := make([]uint64, 3*Bytes/8)
	for i := range big {
		big[i] = uint64(i)
	}
	Advise(big)
	Advise(big[1:]) // unaligned start
	for i, v := range big {
		if v != uint64(i) {
			t.Fatalf("element %d changed to %d", i, v)
		}
	}
	if small[0] != 1 || small[2] != 3 {
		t.Fatal("small array changed")
	}
}
