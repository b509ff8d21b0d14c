package index

import (
	"github.com/ckf-stream/ckf-stream/ckf"
)

// Backlog returns how many deltas of lane, and how many images in them, are admitted but not
// yet applied (or discarded) by the lane's worker. A feeder that reads its input faster than
// the worker applies it (a Kafka lane catching up, say) uses it to pace SubmitDelta below the
// pool's fail-closed limits, instead of tripping saturation or the outstanding-image limit and
// retiring its own lane. It takes the lane's admission mutex; an unconfigured lane reports 0, 0.
func (p *IngestionPool) Backlog(lane uint8) (deltas, images int) {
	if lane >= ckf.LaneCount || p.lanes[lane] == nil {
		return 0, 0
	}
	lc := p.lanes[lane]
	lc.mu.Lock()
	defer lc.mu.Unlock()
	return lc.outstanding.Len(), lc.outstandingImages
}

// Config returns the pool's configuration, with MaxOutstandingImagesPerLane resolved to the
// effective limit.
func (p *IngestionPool) Config() IngestionPoolConfig {
	c := p.cfg
	c.MaxOutstandingImagesPerLane = p.limit
	return c
}
