package index

import (
	"math"
	"sync/atomic"
	"unsafe"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/ckf/internal/hugepage"
)

// transposedTable is TransposedCkfTable<16> (consumer §5.1): bucketCount rows of
// LaneCount words, bucket-major and lane-minor, so the word of (bucket b,
// lane l) is words[b*LaneCount+l] and one probe of all sixteen lanes touches
// exactly one 128-byte row per candidate bucket.
//
// Deviation from the reference (which only has natural 8-byte alignment,
// consumer §5.1 and §15): the first row is aligned to 128 bytes, so every row is
// exactly two 64-byte cache lines and a probe touches four lines, never six.
// This changes no observable behaviour.
//
// Memory-ordering contract ("weak read", consumer §5.5):
//
//   - Every word is read with one 64-bit atomic load (load, probe; a plain
//     MOV on amd64) and written with one indivisible 64-bit store, never a
//     read-modify-write: snapshot words in bucket order by storeColumn and
//     delta images in list order by storeImages, which on amd64 (outside
//     race and purego builds) use plain MOVs, whose single-copy atomicity
//     and store order x86-TSO guarantees (the argument is on storeImages),
//     and sync/atomic stores elsewhere. Either is at least the Relaxed order
//     the reference uses.
//   - There is no multi-word atomicity: a query concurrent with a delta may
//     observe any mix of old and new words (a fingerprint mid-relocation can
//     be visible twice or in neither bucket: a transient false positive or
//     negative). A snapshot's words are all stored before the lane's ready
//     bit is set, so a query that observed the bit (one load of the ready
//     mask per query) observes the complete snapshot or something newer.
//   - No lock, seqlock, double buffer or retry is used, by design (consumer §5.5).
//
// The table itself does not know about readiness; probe always evaluates all
// sixteen lanes and the caller masks the result with its captured ready
// lanes.
type transposedTable struct {
	words   []uint64 // len = buckets*LaneCount, 128-byte aligned
	buckets uint64
	backing []uint64 // owns words (words may start inside it for alignment)
}

// rowBytes is the size of one bucket row: 16 lanes × 8 bytes.
const rowBytes = ckf.LaneCount * 8

// newTransposedTable allocates bucketCount zeroed rows. A size that
// overflows the address space returns ErrCapacityOverflow (a *BuildError). Go cannot
// report an allocation failure (the runtime aborts), so AllocationFailed is
// never returned (recorded deviation).
func newTransposedTable(bucketCount uint64) (transposedTable, error) {
	if bucketCount == 0 || bucketCount > (math.MaxInt/8-ckf.LaneCount)/ckf.LaneCount {
		return transposedTable{}, &ckf.BuildError{Kind: ckf.BuildCapacityOverflow}
	}
	n := int(bucketCount) * ckf.LaneCount
	backing := make([]uint64, n+ckf.LaneCount)
	off := 0
	if r := uintptr(unsafe.Pointer(&backing[0])) % rowBytes; r != 0 {
		off = int((rowBytes - r) / 8)
	}
	words := backing[off : off+n : off+n]
	hugepage.Advise(words)
	return transposedTable{words: words, buckets: bucketCount, backing: backing}, nil
}

// row returns the 16 words of bucket b. b must be < buckets.
func (t *transposedTable) row(b uint64) *[ckf.LaneCount]uint64 {
	return (*[ckf.LaneCount]uint64)(t.words[b*ckf.LaneCount : b*ckf.LaneCount+ckf.LaneCount])
}

// load returns the word of (b, lane) with an atomic load.
func (t *transposedTable) load(b uint64, lane int) uint64 {
	return atomic.LoadUint64(&t.words[b*ckf.LaneCount+uint64(lane)])
}

// store writes the word of (b, lane) with one atomic 64-bit store
// (store_image, consumer §5.2). Tests and studies only: the ingestor writes
// through storeColumn (snapshots) and storeImages (deltas).
func (t *transposedTable) store(b uint64, lane int, v uint64) {
	atomic.StoreUint64(&t.words[b*ckf.LaneCount+uint64(lane)], v)
}

// laneWords copies lane's column into dst (len(dst) == buckets); tests and
// convergence checks only.
func (t *transposedTable) laneWords(lane int, dst []uint64) []uint64 {
	dst = dst[:0]
	for b := uint64(0); b < t.buckets; b++ {
		dst = append(dst, t.load(b, lane))
	}
	return dst
}

// probe returns the 16-lane hit mask of fingerprint fp in buckets a and b
// (consumer §5.3): bit l is set iff lane l's word in a or in b holds fp in some slot.
// fp must be non-zero (empty slots would match 0). a and b must be <
// buckets. It evaluates all lanes regardless of readiness.
func (t *transposedTable) probe(fp uint16, a, b uint64) uint16 {
	return probeRows(t.row(a), t.row(b), fp)
}

// probeSettled is probe plus a second load of row a for the lanes of recheck
// that missed in both rows (A, B, A). With images stored destination before
// source (producer §7.6), a fingerprint that one delta moves between a and
// b is seen by at least one of the three loads, whichever stores fall
// between them: a move a→b stores b before a, so the first load of a sees
// it unless a was already stored, and then the load of b, which follows,
// sees it in b; a move b→a stores a before b, so a load of b that no longer
// sees it follows the store to a, which the second load of a sees. What
// stays possible is a fingerprint moved by two deltas applied between two
// loads of the same probe (consumer §5.5). The second load costs one row
// when some lane of recheck misses, nothing otherwise.
func (t *transposedTable) probeSettled(fp uint16, a, b uint64, recheck uint16) uint16 {
	ra := t.row(a)
	m := probeRows(ra, t.row(b), fp)
	if miss := recheck &^ m; miss != 0 {
		m |= probeRow(ra, fp) & miss
	}
	return m
}

// prefetch touches the rows of a and b ahead of a probe (consumer §5.4); a pure
// optimisation with no semantic effect.
func (t *transposedTable) prefetch(a, b uint64) {
	prefetchRows(t.row(a), t.row(b))
}
