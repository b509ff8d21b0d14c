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

// probeRowsAVX2 is the hit mask of fp over the blocks*32 lanes of rows ra
// and rb, one atomic load per word.
func probeRowsAVX2(ra, rb *uint64, blocks int, fp uint16) uint64 {
	return probeRowsN(wordsAt(ra, blocks*32), wordsAt(rb, blocks*32), fp)
}

// probeRowAVX2 is probeRowsAVX2 over row ra alone.
func probeRowAVX2(ra *uint64, blocks int, fp uint16) uint64 {
	r := wordsAt(ra, blocks*32)
	return probeRowsN(r, r, fp)
}

// probeWideKernel names the kernel of wide rows (benchmarks report it).
func probeWideKernel() string { return "swar" }

// wordsAt is the n words starting at p.
func wordsAt(p *uint64, n int) []uint64 { return unsafe.Slice(p, n) }
