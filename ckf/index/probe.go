package index

import (
	"sync/atomic"

	"github.com/ckf-stream/ckf-stream/ckf"
)

// Transposed probe kernels (consumer §5.3).
//
// A probe asks, for all sixteen lanes at once, whether fingerprint fp is in
// any of the four slots of the lane's word in row A or row B. The reference
// applies the SWAR has-zero test per word and ORs per lane. Done naively that
// is ~30 ALU operations and a branchy gather per lane (≈55 ns per probe in
// plain Go, design §6.3). probeRows formulates it with ~10
// branch-free operations per lane:
//
//	xa = wa ^ rep, xb = wb ^ rep           // a matching slot becomes 0x0000
//	z  = ((xa-ONE) &^ xa) | ((xb-ONE) &^ xb) // borrow-based zero flags, both rows
//	acc |= (z & HIGH) >> (15-l)            // lane l's four slot flags land on
//	                                       // bits 16s+l, s = 0..3
//	mask = fold(acc) = acc | acc>>32 | acc>>16 … low 16 bits
//
// The borrow-based flags may set spurious bits, but only in a lane above a
// genuinely zero lane of the same word, so "any flag in word" is exact (the
// property the reference tests); shifting each lane's flags into a private
// bit column keeps the per-lane OR exact, and the final fold ORs only flags
// of the same lane. The single fold replaces sixteen movemask-style gathers.
// TestProbeRowsEqualsReference checks it against the per-word Bucket.Contains
// reference on random and adversarial rows.
//
// Every word is read with an atomic 64-bit load (a plain MOV on amd64), so a
// probe concurrent with stores is race-free and may observe any mix of old
// and new words (consumer §5.5). A lane that misses in both rows is probed
// once more in row A alone (probeRow; transposedTable.probe): the producer
// stores a relocation's destination before its source (producer §7.6), and
// a fingerprint moved from B to A between the probe's load of A and its
// load of B is then in A by the time of the second load of A.

// probeRowsRef is the obviously-correct reference: per lane, per row,
// Bucket.Contains. Tests and benchmarks only.
func probeRowsRef(ra, rb *[ckf.LaneCount]uint64, fp uint16) uint16 {
	var m uint16
	for l := 0; l < ckf.LaneCount; l++ {
		if ckf.Bucket(atomic.LoadUint64(&ra[l])).Contains(fp) || ckf.Bucket(atomic.LoadUint64(&rb[l])).Contains(fp) {
			m |= 1 << uint(l)
		}
	}
	return m
}

// probeLaneFlags returns the zero flags of lane words wa and wb against the
// broadcast fingerprint rep (bits 16s+15, exact only as "any").
func probeLaneFlags(wa, wb, rep uint64) uint64 {
	xa := wa ^ rep
	xb := wb ^ rep
	return ((xa - ckf.SlotLowBits) &^ xa) | ((xb - ckf.SlotLowBits) &^ xb)
}

// probeRow returns the 16-lane hit mask of fp in row r alone (the SWAR test
// of probeRowsSWAR on one row, unrolled the same way), with atomic loads.
func probeRow(r *[ckf.LaneCount]uint64, fp uint16) uint16 {
	rep := ckf.BroadcastFingerprint(fp)
	const h = ckf.SlotHighBits
	acc := (probeWordFlags(atomic.LoadUint64(&r[0]), rep) & h) >> 15
	acc |= (probeWordFlags(atomic.LoadUint64(&r[1]), rep) & h) >> 14
	acc |= (probeWordFlags(atomic.LoadUint64(&r[2]), rep) & h) >> 13
	acc |= (probeWordFlags(atomic.LoadUint64(&r[3]), rep) & h) >> 12
	acc |= (probeWordFlags(atomic.LoadUint64(&r[4]), rep) & h) >> 11
	acc |= (probeWordFlags(atomic.LoadUint64(&r[5]), rep) & h) >> 10
	acc |= (probeWordFlags(atomic.LoadUint64(&r[6]), rep) & h) >> 9
	acc |= (probeWordFlags(atomic.LoadUint64(&r[7]), rep) & h) >> 8
	acc |= (probeWordFlags(atomic.LoadUint64(&r[8]), rep) & h) >> 7
	acc |= (probeWordFlags(atomic.LoadUint64(&r[9]), rep) & h) >> 6
	acc |= (probeWordFlags(atomic.LoadUint64(&r[10]), rep) & h) >> 5
	acc |= (probeWordFlags(atomic.LoadUint64(&r[11]), rep) & h) >> 4
	acc |= (probeWordFlags(atomic.LoadUint64(&r[12]), rep) & h) >> 3
	acc |= (probeWordFlags(atomic.LoadUint64(&r[13]), rep) & h) >> 2
	acc |= (probeWordFlags(atomic.LoadUint64(&r[14]), rep) & h) >> 1
	acc |= probeWordFlags(atomic.LoadUint64(&r[15]), rep) & h
	acc |= acc >> 32
	acc |= acc >> 16
	return uint16(acc)
}

// probeWordFlags is probeLaneFlags for one word.
func probeWordFlags(w, rep uint64) uint64 {
	x := w ^ rep
	return (x - ckf.SlotLowBits) &^ x
}

// probeRowsSWAR is the portable fast kernel described above, fully unrolled
// so every shift is a constant.
func probeRowsSWAR(ra, rb *[ckf.LaneCount]uint64, fp uint16) uint16 {
	rep := ckf.BroadcastFingerprint(fp)
	const h = ckf.SlotHighBits
	acc := (probeLaneFlags(atomic.LoadUint64(&ra[0]), atomic.LoadUint64(&rb[0]), rep) & h) >> 15
	acc |= (probeLaneFlags(atomic.LoadUint64(&ra[1]), atomic.LoadUint64(&rb[1]), rep) & h) >> 14
	acc |= (probeLaneFlags(atomic.LoadUint64(&ra[2]), atomic.LoadUint64(&rb[2]), rep) & h) >> 13
	acc |= (probeLaneFlags(atomic.LoadUint64(&ra[3]), atomic.LoadUint64(&rb[3]), rep) & h) >> 12
	acc |= (probeLaneFlags(atomic.LoadUint64(&ra[4]), atomic.LoadUint64(&rb[4]), rep) & h) >> 11
	acc |= (probeLaneFlags(atomic.LoadUint64(&ra[5]), atomic.LoadUint64(&rb[5]), rep) & h) >> 10
	acc |= (probeLaneFlags(atomic.LoadUint64(&ra[6]), atomic.LoadUint64(&rb[6]), rep) & h) >> 9
	acc |= (probeLaneFlags(atomic.LoadUint64(&ra[7]), atomic.LoadUint64(&rb[7]), rep) & h) >> 8
	acc |= (probeLaneFlags(atomic.LoadUint64(&ra[8]), atomic.LoadUint64(&rb[8]), rep) & h) >> 7
	acc |= (probeLaneFlags(atomic.LoadUint64(&ra[9]), atomic.LoadUint64(&rb[9]), rep) & h) >> 6
	acc |= (probeLaneFlags(atomic.LoadUint64(&ra[10]), atomic.LoadUint64(&rb[10]), rep) & h) >> 5
	acc |= (probeLaneFlags(atomic.LoadUint64(&ra[11]), atomic.LoadUint64(&rb[11]), rep) & h) >> 4
	acc |= (probeLaneFlags(atomic.LoadUint64(&ra[12]), atomic.LoadUint64(&rb[12]), rep) & h) >> 3
	acc |= (probeLaneFlags(atomic.LoadUint64(&ra[13]), atomic.LoadUint64(&rb[13]), rep) & h) >> 2
	acc |= (probeLaneFlags(atomic.LoadUint64(&ra[14]), atomic.LoadUint64(&rb[14]), rep) & h) >> 1
	acc |= probeLaneFlags(atomic.LoadUint64(&ra[15]), atomic.LoadUint64(&rb[15]), rep) & h
	acc |= acc >> 32
	acc |= acc >> 16
	return uint16(acc)
}

// Kernels of the other row widths (consumer §16). Each is the 16-lane SWAR
// formulation above over fewer or more words: rows of 8 and 4 words fold one
// accumulator, and rows of 24..64 words run the 16-lane kernel on each full
// 16 words and the 8-word kernel on the rest. TestProbeKernelsEveryWidth
// checks every width against probeRowsRefN.

// probeRowsRefN is probeRowsRef over a row of any width: bit l is lane l's
// Bucket.Contains in ra or rb. Tests only.
func probeRowsRefN(ra, rb []uint64, fp uint16) uint64 {
	var m uint64
	for l := range ra {
		if ckf.Bucket(atomic.LoadUint64(&ra[l])).Contains(fp) || ckf.Bucket(atomic.LoadUint64(&rb[l])).Contains(fp) {
			m |= 1 << uint(l)
		}
	}
	return m
}

// probeRowsN is the kernel of rows of 1 and 2 words (and of any width, one
// lane at a time): the flags of each lane tested for "any".
func probeRowsN(ra, rb []uint64, fp uint16) uint64 {
	rep := ckf.BroadcastFingerprint(fp)
	var m uint64
	for l := range ra {
		if probeLaneFlags(atomic.LoadUint64(&ra[l]), atomic.LoadUint64(&rb[l]), rep)&ckf.SlotHighBits != 0 {
			m |= 1 << uint(l&63)
		}
	}
	return m
}

// probeRows8 is the kernel of 8-word rows (5..8 lanes).
func probeRows8(ra, rb *[8]uint64, fp uint16) uint16 {
	rep := ckf.BroadcastFingerprint(fp)
	const h = ckf.SlotHighBits
	acc := (probeLaneFlags(atomic.LoadUint64(&ra[0]), atomic.LoadUint64(&rb[0]), rep) & h) >> 15
	acc |= (probeLaneFlags(atomic.LoadUint64(&ra[1]), atomic.LoadUint64(&rb[1]), rep) & h) >> 14
	acc |= (probeLaneFlags(atomic.LoadUint64(&ra[2]), atomic.LoadUint64(&rb[2]), rep) & h) >> 13
	acc |= (probeLaneFlags(atomic.LoadUint64(&ra[3]), atomic.LoadUint64(&rb[3]), rep) & h) >> 12
	acc |= (probeLaneFlags(atomic.LoadUint64(&ra[4]), atomic.LoadUint64(&rb[4]), rep) & h) >> 11
	acc |= (probeLaneFlags(atomic.LoadUint64(&ra[5]), atomic.LoadUint64(&rb[5]), rep) & h) >> 10
	acc |= (probeLaneFlags(atomic.LoadUint64(&ra[6]), atomic.LoadUint64(&rb[6]), rep) & h) >> 9
	acc |= (probeLaneFlags(atomic.LoadUint64(&ra[7]), atomic.LoadUint64(&rb[7]), rep) & h) >> 8
	acc |= acc >> 32
	acc |= acc >> 16
	return uint16(acc)
}

// probeRow8 is probeRows8 on one row.
func probeRow8(r *[8]uint64, fp uint16) uint16 {
	rep := ckf.BroadcastFingerprint(fp)
	const h = ckf.SlotHighBits
	acc := (probeWordFlags(atomic.LoadUint64(&r[0]), rep) & h) >> 15
	acc |= (probeWordFlags(atomic.LoadUint64(&r[1]), rep) & h) >> 14
	acc |= (probeWordFlags(atomic.LoadUint64(&r[2]), rep) & h) >> 13
	acc |= (probeWordFlags(atomic.LoadUint64(&r[3]), rep) & h) >> 12
	acc |= (probeWordFlags(atomic.LoadUint64(&r[4]), rep) & h) >> 11
	acc |= (probeWordFlags(atomic.LoadUint64(&r[5]), rep) & h) >> 10
	acc |= (probeWordFlags(atomic.LoadUint64(&r[6]), rep) & h) >> 9
	acc |= (probeWordFlags(atomic.LoadUint64(&r[7]), rep) & h) >> 8
	acc |= acc >> 32
	acc |= acc >> 16
	return uint16(acc)
}

// probeRows4 is the kernel of 4-word rows (3..4 lanes).
func probeRows4(ra, rb *[4]uint64, fp uint16) uint16 {
	rep := ckf.BroadcastFingerprint(fp)
	const h = ckf.SlotHighBits
	acc := (probeLaneFlags(atomic.LoadUint64(&ra[0]), atomic.LoadUint64(&rb[0]), rep) & h) >> 15
	acc |= (probeLaneFlags(atomic.LoadUint64(&ra[1]), atomic.LoadUint64(&rb[1]), rep) & h) >> 14
	acc |= (probeLaneFlags(atomic.LoadUint64(&ra[2]), atomic.LoadUint64(&rb[2]), rep) & h) >> 13
	acc |= (probeLaneFlags(atomic.LoadUint64(&ra[3]), atomic.LoadUint64(&rb[3]), rep) & h) >> 12
	acc |= acc >> 32
	acc |= acc >> 16
	return uint16(acc)
}

// probeRow4 is probeRows4 on one row.
func probeRow4(r *[4]uint64, fp uint16) uint16 {
	rep := ckf.BroadcastFingerprint(fp)
	const h = ckf.SlotHighBits
	acc := (probeWordFlags(atomic.LoadUint64(&r[0]), rep) & h) >> 15
	acc |= (probeWordFlags(atomic.LoadUint64(&r[1]), rep) & h) >> 14
	acc |= (probeWordFlags(atomic.LoadUint64(&r[2]), rep) & h) >> 13
	acc |= (probeWordFlags(atomic.LoadUint64(&r[3]), rep) & h) >> 12
	acc |= acc >> 32
	acc |= acc >> 16
	return uint16(acc)
}

// probeRowsWide is the kernel of rows wider than 16 words (a multiple of
// 8) over every lane: the 16-lane kernel on each full 16 words, the 8-word
// kernel on the rest (transposedTable.probe; the query path probes the
// pieces of the lanes it decides, transposedTable.probeSettled).
func probeRowsWide(ra, rb []uint64, fp uint16) uint64 {
	var m uint64
	i := 0
	for ; i+16 <= len(ra) && i+16 <= len(rb); i += 16 {
		m |= uint64(probeRows((*[16]uint64)(ra[i:i+16]), (*[16]uint64)(rb[i:i+16]), fp)) << uint(i&63)
	}
	if i+8 <= len(ra) && i+8 <= len(rb) {
		m |= uint64(probeRows8((*[8]uint64)(ra[i:i+8]), (*[8]uint64)(rb[i:i+8]), fp)) << uint(i&63)
	}
	return m
}
