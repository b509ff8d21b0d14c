//go:build !amd64 || purego

package ckf

// prefetchRows is a no-op where no prefetch instruction is wired up (§5.4:
// x86-64 only).
func prefetchRows(ra, rb *[LaneCount]uint64) {}

// prefetchWord is a no-op where no prefetch instruction is wired up.
func prefetchWord(p *uint64) {}
