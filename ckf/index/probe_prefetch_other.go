//go:build !amd64 || purego

package index

import "github.com/ckf-stream/ckf-stream/ckf"

// prefetchRows is a no-op where no prefetch instruction is wired up (consumer §5.4:
// x86-64 only).
func prefetchRows(ra, rb *[ckf.LaneCount]uint64) {}

// prefetchRowLines is a no-op where no prefetch instruction is wired up.
func prefetchRowLines(ra, rb *uint64, lines int) {}

// prefetchImages is a no-op where no prefetch instruction is wired up.
func (t *transposedTable) prefetchImages(lane int, images []ckf.BucketImage) {}
