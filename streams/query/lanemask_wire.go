package query

import (
	"math/bits"

	"github.com/ckf-stream/ckf-stream/schemas"
)

// requestLanes returns the lanes req selects as a 64-bit mask (every bit when it selects every
// lane) and whether the request reads replies of up to 64 lanes.
func requestLanes(req *schemas.QueryRequest) (mask uint64, wide bool) {
	if m, ok := req.LaneMask.Get(); ok {
		return uint64(m), false
	}
	return ^uint64(0), false
}

// setReplyMasks sets the ready and incomplete masks of an OK reply.
func setReplyMasks(r *schemas.QueryReply, ready, incomplete uint64) {
	r.ReadyLanes, r.IncompleteLanes = uint16(ready), uint16(incomplete)
}

func leadingZeros(m uint64) int { return bits.LeadingZeros64(m) }
