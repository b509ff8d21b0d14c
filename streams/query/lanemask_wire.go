package query

import (
	"math/bits"

	"github.com/ckf-stream/ckf-stream/schemas"
)

// requestLanes returns the lanes req selects as a 64-bit mask (every bit when it selects every
// lane) and whether the request reads replies of up to 64 lanes (schemas.QueryRequest.Lanes).
func requestLanes(req *schemas.QueryRequest) (mask uint64, wide bool) { return req.Lanes() }

// setReplyMasks sets the ready and incomplete masks of an OK reply (schemas.QueryReply.SetMasks:
// the 16-bit fields, and the 64-bit ones when a lane beyond 15 is set).
func setReplyMasks(r *schemas.QueryReply, ready, incomplete uint64) { r.SetMasks(ready, incomplete) }

func leadingZeros(m uint64) int { return bits.LeadingZeros64(m) }
