// Package hugepage asks the kernel to back large, randomly accessed arrays with transparent huge
// pages.
//
// The filter words, the indexer's table and the producer's hash tables are tens to hundreds of
// MiB read at random places. With 4 KiB pages almost every such read also misses the TLB and
// walks the page table; a 2 MiB page covers 512 times as much memory per TLB entry (measured:
// 10–25 % on DRAM-bound probes, design §6.3). On Linux the array is marked for huge pages and
// what of it is already backed by small ones (memory the Go heap reused) is collapsed into huge
// pages at once (hugepage_linux.go). The advice is a hint: it is best effort, its result is
// ignored, the memory stays owned by the Go heap, and only the 2 MiB-aligned interior of an array
// of at least two huge pages is advised (smaller arrays gain nothing).
package hugepage

import "unsafe"

// Bytes is the transparent-huge-page size on x86-64 and arm64 with 4 KiB base pages.
const Bytes = 2 << 20

// Advise asks for huge pages under s (see the package comment); a no-op outside Linux.
func Advise[T any](s []T) {
	if len(s) == 0 {
		return
	}
	size := uintptr(len(s)) * unsafe.Sizeof(s[0])
	if size < 2*Bytes {
		return
	}
	start := uintptr(unsafe.Pointer(&s[0]))
	alignedStart := (start + Bytes - 1) &^ (Bytes - 1)
	alignedEnd := (start + size) &^ (Bytes - 1)
	if alignedEnd <= alignedStart {
		return
	}
	all := unsafe.Slice((*byte)(unsafe.Pointer(&s[0])), size)
	advise(all[alignedStart-start : alignedEnd-start])
}
