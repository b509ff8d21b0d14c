//go:build !amd64 || race || purego

package index

import (
	"sync/atomic"

	"github.com/ckf-stream/ckf-stream/ckf"
)

// storeColumn stores words[b] into (b, lane) for every bucket b, in bucket
// order, one atomic 64-bit store each (snapshot install), prefetching the
// target line a few rows ahead where a prefetch is available. len(words)
// must equal buckets.
func (t *transposedTable) storeColumn(lane int, words []uint64) {
	const ahead = 8
	ws := t.words[lane:]
	n := len(words)
	for b := 0; b < n; b++ {
		if b+ahead < n {
			prefetchWord(&ws[(b+ahead)*ckf.LaneCount])
		}
		atomic.StoreUint64(&ws[b*ckf.LaneCount], words[b])
	}
}
