package index

import (
	"math"
	"strconv"
	"sync/atomic"
	"unsafe"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/ckf/internal/hugepage"
)

// transposedTable is TransposedCkfTable (consumer §5.1) for a configured
// lane count of 1..ckf.MaxLanes (consumer §16): bucketCount rows of stride
// words, bucket-major and lane-minor, so the word of (bucket b, lane l) is
// words[b*stride+l] and one probe of every lane touches exactly one row per
// candidate bucket. stride is rowStride(lanes): the reference's 16 lanes
// give rows of 16 words (128 bytes), 4 lanes rows of 4 words (32 bytes), 64
// lanes rows of 64 words (512 bytes); the words of lanes between lanes and
// stride are never written and stay 0, so they never match a fingerprint.
//
// Deviation from the reference (which only has natural 8-byte alignment,
// consumer §5.1 and §15): the first row is aligned to 128 bytes, so a row of
// 16 words is exactly two 64-byte cache lines and a probe touches four
// lines, never six; a row of 8 words or more starts on a line, and a row of
// 4 or fewer never crosses one. This changes no observable behaviour.
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
//     the reference uses. The row width changes none of this: it only
//     changes the distance between the words of one lane.
//   - There is no multi-word atomicity: a query concurrent with a delta may
//     observe any mix of old and new words (a fingerprint mid-relocation can
//     be visible twice or in neither bucket: a transient false positive or
//     negative). A snapshot's words are all stored before the lane's ready
//     bit is set, so a query that observed the bit (one load of the ready
//     mask per query) observes the complete snapshot or something newer.
//   - No lock, seqlock, double buffer or retry is used, by design (consumer §5.5).
//
// The table itself does not know about readiness; a probe evaluates every
// lane of the row (or of its first 16 words, probeSettled16) and the caller
// masks the result with its captured ready lanes.
type transposedTable struct {
	words    []uint64 // len = buckets*stride, 128-byte aligned
	buckets  uint64
	stride   int      // words per row: rowStride(lanes)
	rowBytes uint64   // stride*8
	rowLines int      // cache lines a prefetch of one row touches: max(1, rowBytes/64)
	backing  []uint64 // owns words (words may start inside it for alignment)
}

// tableAlign is the alignment of the first row (consumer §5.1 Choice).
const tableAlign = 128

// rowStride returns the words per row of a table of lanes lanes
// (1..ckf.MaxLanes): the next power of two up to 8 (a row never crosses a
// cache line), then the next multiple of 8 (whole lines, at most 7 words
// of padding). 16 lanes give 16 words, as in the reference.
func rowStride(lanes int) int {
	switch {
	case lanes <= 1:
		return 1
	case lanes <= 2:
		return 2
	case lanes <= 4:
		return 4
	case lanes <= 8:
		return 8
	}
	return (lanes + 7) &^ 7
}

// newTransposedTable allocates bucketCount zeroed rows for lanes lanes
// (1..ckf.MaxLanes; the manifest validated it). A size that overflows the
// address space returns ErrCapacityOverflow (a *BuildError). Go cannot
// report an allocation failure (the runtime aborts), so AllocationFailed is
// never returned (recorded deviation).
func newTransposedTable(bucketCount uint64, lanes int) (transposedTable, error) {
	if lanes < 1 || lanes > ckf.MaxLanes {
		return transposedTable{}, &ManifestError{Kind: ManifestInvalidLaneCount, Lanes: lanes}
	}
	stride := rowStride(lanes)
	if bucketCount == 0 || bucketCount > (math.MaxInt/8-tableAlign)/uint64(stride) {
		return transposedTable{}, &ckf.BuildError{Kind: ckf.BuildCapacityOverflow}
	}
	n := int(bucketCount) * stride
	backing := make([]uint64, n+tableAlign/8)
	off := 0
	if r := uintptr(unsafe.Pointer(&backing[0])) % tableAlign; r != 0 {
		off = int((tableAlign - r) / 8)
	}
	words := backing[off : off+n : off+n]
	hugepage.Advise(words)
	rb := uint64(stride) * 8
	return transposedTable{words: words, buckets: bucketCount, stride: stride, rowBytes: rb,
		rowLines: max(1, int(rb/64)), backing: backing}, nil
}

// row returns the first 16 words of bucket b (the whole row of a 16-lane
// table). b must be < buckets and stride >= 16.
func (t *transposedTable) row(b uint64) *[ckf.LaneCount]uint64 {
	i := b * uint64(t.stride)
	return (*[ckf.LaneCount]uint64)(t.words[i : i+ckf.LaneCount])
}

// rowWords returns the stride words of bucket b. b must be < buckets.
func (t *transposedTable) rowWords(b uint64) []uint64 {
	i := b * uint64(t.stride)
	return t.words[i : i+uint64(t.stride) : i+uint64(t.stride)]
}

// load returns the word of (b, lane) with an atomic load.
func (t *transposedTable) load(b uint64, lane int) uint64 {
	return atomic.LoadUint64(&t.words[b*uint64(t.stride)+uint64(lane)])
}

// store writes the word of (b, lane) with one atomic 64-bit store
// (store_image, consumer §5.2). Tests and studies only: the ingestor writes
// through storeColumn (snapshots) and storeImages (deltas).
func (t *transposedTable) store(b uint64, lane int, v uint64) {
	atomic.StoreUint64(&t.words[b*uint64(t.stride)+uint64(lane)], v)
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

// probe returns the hit mask of fingerprint fp in buckets a and b over every
// lane of the row (consumer §5.3): bit l is set iff lane l's word in a or in
// b holds fp in some slot. fp must be non-zero (empty slots would match 0).
// a and b must be < buckets. It evaluates all lanes regardless of readiness,
// once (tests, studies and benchmarks; queries use probeSettled16 and
// probeSettled).
func (t *transposedTable) probe(fp uint16, a, b uint64) uint64 {
	if t.stride <= ckf.LaneCount {
		return uint64(t.probeSettled16(fp, a, b, 0))
	}
	return probeRowsWide(t.rowWords(a), t.rowWords(b), fp)
}

// probeSettled is the probe of the 64-lane query path: the hit mask of fp in
// rows a and b for the lanes of lanes (the lanes the search decides with
// this probe; it reads no other bit), plus a second load of row a for those
// of them that missed in both rows (A, B, A). With images stored
// destination before source (producer §7.6), a fingerprint that one delta
// moves between a and b is seen by at least one of the three loads,
// whichever stores fall between them: a move a→b stores b before a, so the
// first load of a sees it unless a was already stored, and then the load of
// b, which follows, sees it in b; a move b→a stores a before b, so a load of
// b that no longer sees it follows the store to a, which the second load of
// a sees. What stays possible is a fingerprint moved by two deltas applied
// between two loads of the same probe (consumer §5.5). The second load
// costs one row when some lane of lanes misses, nothing otherwise.
//
// Rows of up to 16 words are probed whole (probeSettled16). A wider row is
// probed in pieces of 16 words (the 16-lane kernel) and a last piece of 8
// (rows of 24, 40 and 56 words), and a piece none of whose lanes is in
// lanes is neither loaded nor computed: a search whose lanes have spread
// over different positions (divergent chains) reads 2 of a 64-lane row's 8
// lines where one piece's lanes decide. Bits of other pieces are 0.
func (t *transposedTable) probeSettled(fp uint16, a, b uint64, lanes uint64) uint64 {
	if t.stride <= ckf.LaneCount {
		return uint64(t.probeSettled16(fp, a, b, uint16(lanes)))
	}
	var m uint64
	i := 0
	if probeWideAVX2 && t.stride >= 32 {
		m = t.probeSettledAVX2(fp, a, b, lanes)
		if t.stride&31 == 0 {
			return m
		}
		i = t.stride &^ 31
	}
	ra, rb := t.rowWords(a), t.rowWords(b)
	for ; i+16 <= len(ra) && i+16 <= len(rb); i += 16 {
		sub := uint16(lanes >> uint(i&63))
		if sub == 0 {
			continue
		}
		pa := (*[16]uint64)(ra[i : i+16])
		h := probeRows(pa, (*[16]uint64)(rb[i:i+16]), fp)
		if miss := sub &^ h; miss != 0 {
			h |= probeRow(pa, fp) & miss
		}
		m |= uint64(h) << uint(i&63)
	}
	if i+8 <= len(ra) && i+8 <= len(rb) {
		if sub := uint16(uint8(lanes >> uint(i&63))); sub != 0 {
			pa := (*[8]uint64)(ra[i : i+8])
			h := probeRows8(pa, (*[8]uint64)(rb[i:i+8]), fp)
			if miss := sub &^ h; miss != 0 {
				h |= probeRow8(pa, fp) & miss
			}
			m |= uint64(h) << uint(i&63)
		}
	}
	return m
}

// probeSettledAVX2 is probeSettled over the 32-lane blocks of rows a and b
// (stride >= 32: one or two blocks) with the AVX2 kernel
// (probe_avx2_amd64.go): the blocks from the first to the last that holds a
// lane of lanes, rows A and B, then row A again for those of lanes that
// missed. Bits of blocks left out are 0.
func (t *transposedTable) probeSettledAVX2(fp uint16, a, b uint64, lanes uint64) uint64 {
	first, blocks := uint64(0), t.stride>>5
	if blocks > 1 && lanes>>32 == 0 {
		blocks = 1
	}
	if uint32(lanes) == 0 {
		if blocks == 1 {
			return 0
		}
		first, blocks = 32, 1
	}
	span := ^uint64(0) // the lanes of the blocks probed, from the first
	if blocks == 1 {
		span = math.MaxUint32
	}
	// Row a's first probed word; the last word read is in the row (the
	// bounds check of the row's last word covers it).
	ia, ib := a*uint64(t.stride)+first, b*uint64(t.stride)+first
	_ = t.words[ia+uint64(32*blocks-1)]
	_ = t.words[ib+uint64(32*blocks-1)]
	ra, rb := &t.words[ia], &t.words[ib]
	return probeSettledAVX2Asm(ra, rb, ra, blocks, fp, lanes>>first&span) << first
}

// probeSettled16 is probeSettled for the lanes 0..15 alone, the 16-lane
// query path (consumer §6): the whole row of a table of at most 16 lanes,
// the first 16 words of a wider one (whose lanes 16 and up the caller has
// not captured). A 16-lane table runs exactly the reference layout's
// kernels.
func (t *transposedTable) probeSettled16(fp uint16, a, b uint64, recheck uint16) uint16 {
	if t.stride >= ckf.LaneCount {
		ra := t.row(a)
		m := probeRows(ra, t.row(b), fp)
		if miss := recheck &^ m; miss != 0 {
			m |= probeRow(ra, fp) & miss
		}
		return m
	}
	var m uint16
	switch t.stride {
	case 8:
		ra := (*[8]uint64)(t.rowWords(a))
		m = probeRows8(ra, (*[8]uint64)(t.rowWords(b)), fp)
		if miss := recheck &^ m; miss != 0 {
			m |= probeRow8(ra, fp) & miss
		}
		return m
	case 4:
		ra := (*[4]uint64)(t.rowWords(a))
		m = probeRows4(ra, (*[4]uint64)(t.rowWords(b)), fp)
		if miss := recheck &^ m; miss != 0 {
			m |= probeRow4(ra, fp) & miss
		}
		return m
	case 1, 2:
		ra := t.rowWords(a)
		m = uint16(probeRowsN(ra, t.rowWords(b), fp))
		if miss := recheck &^ m; miss != 0 {
			m |= uint16(probeRowsN(ra, ra, fp)) & miss
		}
		return m
	}
	panic("index: row stride " + strconv.Itoa(t.stride))
}

// prefetch touches the rows of a and b ahead of a probe (consumer §5.4); a pure
// optimisation with no semantic effect.
func (t *transposedTable) prefetch(a, b uint64) {
	if t.stride == 16 {
		prefetchRows(t.row(a), t.row(b))
		return
	}
	prefetchRowLines(&t.words[a*uint64(t.stride)], &t.words[b*uint64(t.stride)], t.rowLines)
}

// prefetch16 is prefetch for the 16-lane query path: the first 16 words of
// a wider row (two lines), the whole row of a narrower one.
func (t *transposedTable) prefetch16(a, b uint64) {
	if t.stride >= 16 {
		prefetchRows(t.row(a), t.row(b))
		return
	}
	prefetchRowLines(&t.words[a*uint64(t.stride)], &t.words[b*uint64(t.stride)], 1)
}
