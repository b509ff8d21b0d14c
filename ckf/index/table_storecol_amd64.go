//go:build amd64 && !race && !purego

package index

import (
	"unsafe"

	"github.com/ckf-stream/ckf-stream/ckf"
)

// storeColumnAsm: see table_storecol_amd64.s.
//
//go:noescape
func storeColumnAsm(dst *uint64, src *uint64, n int)

// storeColumn stores words[b] into (b, lane) for every bucket b, in bucket
// order, one atomic 64-bit store (XCHG) each — the snapshot install path.
// The assembly loop prefetches each target line for writing 8 rows ahead,
// so the serialising XCHG rarely waits for line ownership. Race builds use
// the instrumented Go loop (table_storecol_generic.go) so the race detector sees
// the writes. len(words) must equal buckets.
func (t *transposedTable) storeColumn(lane int, words []uint64) {
	if len(words) == 0 {
		return
	}
	_ = t.words[(len(words)-1)*ckf.LaneCount+lane] // bounds check once
	storeColumnAsm(&t.words[lane], (*uint64)(unsafe.Pointer(&words[0])), len(words))
}
