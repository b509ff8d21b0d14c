//go:build !amd64 || race || purego

package index

import "unsafe"

// The portable stand-ins of the AVX2 kernel of wide rows (probe_avx2_amd64.go):
// race and purego builds and other architectures probe with sync/atomic
// loads only. probeWideAVX2 stays false there, so probeSettled never calls
// these; they compute the same masks so that the kernel tests run in every
// build.

// probeWideAVX2 is false: no AVX2 kernel in this build.
var probeWideAVX2 = false

// probeSettledAVX2Asm is the settled probe of blocks*32 lanes of rows ra
// and rb, then rc for the lanes of lanes that missed, one atomic load per
// word (the assembly's semantics, probe_avx2_amd64.go).
func probeSettledAVX2Asm(ra, rb, rc *uint64, blocks int, fp uint16, lanes uint64) uint64 {
	n := blocks * 32
	h := probeRowsN(wordsAt(ra, n), wordsAt(rb, n), fp)
	if miss := lanes &^ h; miss != 0 {
		c := wordsAt(rc, n)
		h |= probeRowsN(c, c, fp) & miss
	}
	return h
}

// probeWideKernel names the kernel of wide rows (benchmarks report it).
func probeWideKernel() string { return "swar" }

// wordsAt is the n words starting at p.
func wordsAt(p *uint64, n int) []uint64 { return unsafe.Slice(p, n) }
