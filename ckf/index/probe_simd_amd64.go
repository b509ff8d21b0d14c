//go:build goexperiment.simd && amd64

package index

import (
	"simd/archsimd"

	"github.com/ckf-stream/ckf-stream/ckf"
)

// Optional AVX2 probe kernel, built only with GOEXPERIMENT=simd (Go 1.26's
// experimental simd/archsimd package; the API may change, so it stays behind
// the experiment tag and the portable SWAR kernel remains the default).
// TestProbeRowsEqualsReference checks whichever kernel is built against the
// scalar reference.
//
// Per group of four lanes: VPCMPEQW of each row against the broadcast
// fingerprint, VPOR of the two rows, VPCMPEQQ against zero and a 4-bit
// movemask (lanes without a match), inverted.
//
// Memory-ordering note: a 256-bit load is not specified as four atomic
// 64-bit loads, and the race detector does not see it. The weak-read
// contract (consumer §5.5) tolerates any mix of old and new words but wants
// each word whole, which nothing promises for an element of a 32-byte load;
// this kernel is kept to the experiment build for that reason too. The
// default build's AVX2 kernel of wide rows (probe_avx2_amd64.go) reads words
// in aligned 16-byte pairs, which AVX CPUs load indivisibly.

// probeKernel names the kernel selected at build time.
var probeKernel = func() string {
	if archsimd.X86.AVX2() {
		return "avx2"
	}
	return "swar"
}()

var probeHasAVX2 = archsimd.X86.AVX2()

// probeRows is the production probe kernel.
func probeRows(ra, rb *[ckf.LaneCount]uint64, fp uint16) uint16 {
	if !probeHasAVX2 {
		return probeRowsSWAR(ra, rb, fp)
	}
	return probeRowsAVX2(ra, rb, fp)
}

func probeRowsAVX2(ra, rb *[ckf.LaneCount]uint64, fp uint16) uint16 {
	rep := archsimd.BroadcastUint16x16(fp)
	var zero archsimd.Int64x4
	var out uint16
	for g := 0; g < ckf.LaneCount/4; g++ {
		a := archsimd.LoadUint64x4((*[4]uint64)(ra[4*g : 4*g+4])).AsUint16x16()
		b := archsimd.LoadUint64x4((*[4]uint64)(rb[4*g : 4*g+4])).AsUint16x16()
		hit := a.Equal(rep).Or(b.Equal(rep)).ToInt16x16().AsInt64x4()
		none := hit.Equal(zero).ToBits()
		out |= uint16(^none&0xF) << (4 * uint(g))
	}
	return out
}
