//go:build amd64 && !race && !purego

package index

import (
	"unsafe"
)

// storeColumnAsm: see table_storecol_amd64.s.
//
//go:noescape
func storeColumnAsm(dst *uint64, src *uint64, n int, rowBytes uint64, ahead uint64)

// storeColumn stores words[b] into (b, lane) for every bucket b, in bucket
// order, one plain 8-byte MOV each — the snapshot install path. The
// assembly loop prefetches each target line for writing 8 rows ahead
// (at least 1024 bytes, so that rows narrower than 16 lanes, several to a
// line, still ask for lines well ahead).
// len(words) must equal buckets.
//
// Plain stores instead of sync/atomic ones (XCHG, which drains the store
// buffer and so waits for every row's cache line in turn: 2^20 buckets took
// 1.3x as long on an Intel Xeon host, and the same time on an AMD EPYC one,
// performance §9) are safe here for the reasons given on
// storeImages: an aligned 8-byte MOV is one indivisible access, so a query
// loading a word of the column (a weak read of a lane it captured before the
// install cleared its ready bit, or a neighbouring lane's word in the same
// line, which is not written) sees a whole old or new word; and the install
// publishes the column with the atomic Or of the lane's ready bit
// (GlobalIndexer.activateLane), a LOCK-prefixed instruction that makes every
// store before it visible first. Race builds use the sync/atomic Go loop
// (table_storecol_generic.go) so the race detector sees the writes
// (TestStoreColumnConcurrentReaders runs both ways: make test, then make
// test-norace).
func (t *transposedTable) storeColumn(lane int, words []uint64) {
	if len(words) == 0 {
		return
	}
	_ = t.words[(len(words)-1)*t.stride+lane] // bounds check once
	storeColumnAsm(&t.words[lane], (*uint64)(unsafe.Pointer(&words[0])), len(words), t.rowBytes, max(8*t.rowBytes, 1024))
}
