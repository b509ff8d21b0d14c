//go:build amd64 && !purego

package prefetch

import "unsafe"

// Line prefetches the cache line holding p into every cache level (PREFETCHT0).
// Implemented in prefetch_amd64.s.
//
//go:noescape
func Line(p unsafe.Pointer)

// Lines prefetches the cache line at each address of addrs (PREFETCHT0), in order: one call
// for a batch, so that a loop that computes the addresses makes no call per line (a call makes
// the Go compiler spill and reload the loop's registers). An address is a plain number here:
// the caller keeps the memory it names alive, and a stale or invalid one only costs the hint.
// Implemented in prefetch_amd64.s.
//
//go:noescape
func Lines(addrs []uintptr)
