package prefetch

import (
	"testing"
	"unsafe"
)

// TestLineHasNoEffect: prefetching valid, nil and unmapped addresses neither faults nor changes
// the memory it names.
func TestLineHasNoEffect(t *testing.T) {
	buf := []uint64{1, 2, 3}
	Line(unsafe.Pointer(&buf[1]))
	Line(nil)
	Line(unsafe.Add(unsafe.Pointer(&buf[0]), 1<<40)) // far outside the slice, most likely unmapped
	if buf[0] != 1 || buf[1] != 2 || buf[2] != 3 {
		t.Fatalf("memory changed: %v", buf)
	}
}

// TestLinesHasNoEffect: Lines over valid, zero and unmapped addresses, and over none, neither
// faults nor changes the memory or the addresses.
func TestLinesHasNoEffect(t *testing.T) {
	buf := []uint64{1, 2, 3}
	addrs := []uintptr{uintptr(unsafe.Pointer(&buf[0])), 0, uintptr(unsafe.Pointer(&buf[2])) + 1<<40}
	want := append([]uintptr(nil), addrs...)
	Lines(addrs)
	Lines(nil)
	Lines(addrs[:0])
	if buf[0] != 1 || buf[1] != 2 || buf[2] != 3 {
		t.Fatalf("memory changed: %v", buf)
	}
	for i := range addrs {
		if addrs[i] != want[i] {
			t.Fatalf("addresses changed: %v", addrs)
		}
	}
}
