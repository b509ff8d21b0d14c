//go:build !amd64 || race || purego

package index

import (
	"sync/atomic"
)

// storeColumn stores words[b] into (b, lane) for every bucket b, in bucket
// order, one atomic 64-bit store each (snapshot install). len(words) must
// equal buckets. This portable loop serves race and purego builds and other
// architectures; amd64 builds use an assembly loop with write prefetches
// (table_storecol_amd64.s).
func (t *transposedTable) storeColumn(lane int, words []uint64) {
	ws := t.words[lane:]
	for b, w := range words {
		atomic.StoreUint64(&ws[b*t.stride], w)
	}
}
