package query

import (
	"errors"
	"fmt"

	"github.com/ckf-stream/ckf-stream/schemas"
)

// ErrLanesBeyond16 is the cause of the refusal of a request read as 16 lanes (no 64-bit lane
// mask) that selects a lane beyond 15: its reply's masks hold lanes 0..15, so the answer could
// only be cut short, which consumer §16 never does.
var ErrLanesBeyond16 = errors.New("streams: the request selects lanes beyond 15 but reads replies of 16 lanes")

// selectLanes returns the configured lanes req selects (consumer §16): its 64-bit lane mask when
// it has one, else its 16-bit lane_mask, else every configured lane. A request without the
// 64-bit mask is one whose writer may read replies as 16 lanes; when its selection holds a lane
// beyond 15 (it left lane_mask null on an indexer that serves such lanes) it is refused,
// wrapping ErrInvalidQuery and ErrLanesBeyond16, so that no such reader ever gets a mask cut
// short. It allocates only for the refusal.
func (a *Answerer) selectLanes(req *schemas.QueryRequest) (uint64, error) {
	mask, wide := requestLanes(req)
	sel := a.configured & mask
	if !wide && sel > 0xFFFF {
		return 0, fmt.Errorf("%w: %w: lane_mask is null (every lane), and this indexer serves lanes up to %d, which a reply of 16-bit masks cannot hold: send lane_mask64 (a reader of up to 64 lanes), or a lane_mask of lanes 0..15",
			ErrInvalidQuery, ErrLanesBeyond16, 63-leadingZeros(sel))
	}
	return sel, nil
}
