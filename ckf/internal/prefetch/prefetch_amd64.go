//go:build amd64 && !purego

package prefetch

import "unsafe"

// Line prefetches the cache line holding p into every cache level (PREFETCHT0).
// Implemented in prefetch_amd64.s.
//
//go:noescape
func Line(p unsafe.Pointer)
