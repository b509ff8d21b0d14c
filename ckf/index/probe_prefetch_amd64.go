//go:build amd64 && !purego

package index

import (
	"unsafe"

	"github.com/ckf-stream/ckf-stream/ckf"
)

// prefetch4 issues PREFETCHT0 for both 64-byte lines of row a and of row b
// (rows are 128-byte aligned, so two lines cover a row). Implemented in
// probe_prefetch_amd64.s; it never faults and has no semantic effect.
//
//go:noescape
func prefetch4(a, b unsafe.Pointer)

// prefetchRows prefetches the two rows of a probe (consumer §5.4).
func prefetchRows(ra, rb *[ckf.LaneCount]uint64) {
	prefetch4(unsafe.Pointer(ra), unsafe.Pointer(rb))
}

// prefetchLines issues PREFETCHT0 for the n 64-byte lines starting at a and
// the n starting at b (n >= 1). Implemented in probe_prefetch_amd64.s.
//
//go:noescape
func prefetchLines(a, b unsafe.Pointer, n int)

// prefetchRowLines prefetches lines lines of the rows starting at ra and rb
// (rows of any width, consumer §5.4, §16).
func prefetchRowLines(ra, rb *uint64, lines int) {
	prefetchLines(unsafe.Pointer(ra), unsafe.Pointer(rb), lines)
}

// prefetchImagesW issues PREFETCHW for the target word of every image in
// the column starting at col (see probe_prefetch_amd64.s).
//
//go:noescape
func prefetchImagesW(col unsafe.Pointer, images unsafe.Pointer, n int, rowBytes uint64)

// prefetchImages requests ownership of the cache line of every image's
// word in lane's column (buckets already validated, lane < stride), so
// that the misses of the stores that follow overlap with each other and
// with the work done in between. No semantic effect.
func (t *transposedTable) prefetchImages(lane int, images []ckf.BucketImage) {
	if len(images) == 0 {
		return
	}
	prefetchImagesW(unsafe.Pointer(&t.words[lane]), unsafe.Pointer(unsafe.SliceData(images)), len(images), t.rowBytes)
}
