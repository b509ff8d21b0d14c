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

// prefetchW prefetches the line of p in anticipation of a write
// (PREFETCHW), so a following atomic store (XCHG, which drains the store
// buffer) does not stall on the line's ownership request.
//
//go:noescape
func prefetchW(p unsafe.Pointer)

// prefetchWord prefetches the line holding *p for writing.
func prefetchWord(p *uint64) { prefetchW(unsafe.Pointer(p)) }
