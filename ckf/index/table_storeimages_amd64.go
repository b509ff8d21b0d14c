//go:build amd64 && !race && !purego

package index

import (
	"fmt"
	"unsafe"

	"github.com/ckf-stream/ckf-stream/ckf"
)

// storeImagesAsm stores each image's value into *(col + rowBytes*bucket) with
// one plain 8-byte MOV, in image order, stopping at the first image whose
// bucket is >= buckets. It returns the number of images stored. See
// table_storeimages_amd64.s.
//
//go:noescape
func storeImagesAsm(col *uint64, images *ckf.BucketImage, n int, buckets uint64, rowBytes uint64) int

// storeImages stores a delta's images into lane's column: the word of
// (image.Bucket, lane) becomes image.Value, one 64-bit store per image, in
// list order (store_image, consumer §5.2). Every bucket must be < buckets
// (ApplyDelta validates the delta before its first store); an image out of
// range, a broken precondition, panics after the images before it were
// stored, like a Go bounds check.
//
// On amd64 (outside race and purego builds) the stores are plain MOVs in an
// assembly loop, not sync/atomic stores (which compile to XCHG, an implicitly
// locked instruction that drains the store buffer and makes every store wait
// for its cache line). This is safe for the concurrent readers because of
// what they read and what they need:
//
//   - Readers are queries (probeRows, probeRow, load). Each loads table words
//     with atomic.LoadUint64, a plain 8-byte MOV on amd64, after one load
//     of the ready mask. They need (a) every word they load to be a value
//     some store wrote whole, and (b) a delta's images to become visible in
//     list order: probeSettled's argument (consumer §5.5) relies on a
//     relocation's destination being visible no later than its source
//     (producer §7.6). The reference stores with Relaxed atomics, which
//     give (a) only.
//   - (a) No torn read. Every word is 8-byte aligned (the table is a
//     []uint64 with 128-byte aligned rows, consumer §5.1), and x86-64
//     guarantees that an aligned 8-byte load or store is one indivisible
//     access: a concurrent load returns the whole old or the whole new word.
//   - (b) No reordered read. Under x86-TSO a processor's stores become
//     visible to all other processors in the order it issued them, and a
//     processor's loads are not reordered with its other loads; so a query
//     that observed image j's new word and then loads image i < j's word
//     observes image i's store. The one reordering x86 permits, a later
//     load passing an earlier store to another address, concerns only the
//     writer's own loads after its stores; the writer reads no word that a
//     reader writes, and nothing here depends on that order. It is the only
//     thing XCHG's full fence added.
//   - The compiler does not see into assembly: the stores are exactly one
//     MOV per image, in list order, to the computed address, none merged,
//     elided, kept in a register or moved out of the call, and the Go code
//     around the call is not reordered across it.
//   - Publication. No atomic publishes a delta to readers: a query sees each
//     image when it lands ("weak read", consumer §5.5), and the installed
//     sequence is private to the writer. What does publish is unchanged: a
//     snapshot is published by the atomic Or of its ready bit
//     (GlobalIndexer.activateLane), a LOCK-prefixed instruction that drains
//     the store buffer, so every earlier store, these included, is visible
//     before the bit; readiness is cleared with a LOCK-prefixed And before a
//     lane's words are rewritten. Plain stores leave the store buffer in
//     order within nanoseconds; they are never held back indefinitely.
//   - The PREFETCHW that ApplyDelta issues for the same lines first
//     (prefetchImages) is a hint: it changes no memory contents and no
//     ordering.
//
// Race builds use the sync/atomic loop (table_storeimages_generic.go), so
// the race detector, which cannot see assembly stores, sees the writes as
// atomic and the concurrent queries as race-free (make test runs
// TestStoreImagesConcurrentReaders with -race, and again without it in
// make test-norace, where it checks the plain-store path for torn and
// out-of-order reads on real hardware).
func (t *transposedTable) storeImages(lane int, images []ckf.BucketImage) {
	if len(images) == 0 {
		return
	}
	if uint(lane) >= uint(t.stride) {
		panic(fmt.Sprintf("index: storeImages lane %d out of range", lane))
	}
	if n := storeImagesAsm(&t.words[lane], unsafe.SliceData(images), len(images), t.buckets, t.rowBytes); n != len(images) {
		panic(fmt.Sprintf("index: storeImages bucket %d out of range [0, %d)", images[n].Bucket, t.buckets))
	}
}
