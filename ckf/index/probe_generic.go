//go:build !goexperiment.simd || !amd64

package index

import (
	"github.com/ckf-stream/ckf-stream/ckf"
)

// probeKernel names the kernel selected at build time (benchmarks report
// it).
const probeKernel = "swar"

// probeRows is the production probe kernel: the portable SWAR formulation.
func probeRows(ra, rb *[ckf.LaneCount]uint64, fp uint16) uint16 { return probeRowsSWAR(ra, rb, fp) }
