package index

import (
	"context"

	"github.com/ckf-stream/ckf-stream/ckf"
)

// SubmitDeltas admits a run of consecutive deltas of one lane as one unit and hands them to the
// lane's worker as a single queue command. It is SubmitDelta for a feeder that reads deltas in
// bursts (a Kafka lane catching up): the admission policy of consumer §4.6 is applied to the run as a
// whole — lane Active with every delta on the current lease, the lag bound, the outstanding-image
// limit on the run's total, delta-id space — and the run takes one slot of the worker's bounded
// queue, so a full queue retires the lane exactly as one delta would (saturation; the whole run
// is discarded). Each delta keeps its own outstanding entry, so the lag watchdog and Backlog see
// them individually, and the worker applies them one by one in order with the per-command epoch
// fencing of consumer §4.4: after a delta deactivates the lane, the rest of the run is stale and dropped.
//
// Either every delta is admitted (nil) or none is (the error of the first failed check). ds and
// the deltas must not be modified after a successful submit. An empty run is a no-op.
func (p *IngestionPool) SubmitDeltas(ctx context.Context, ds []*ckf.Delta) error {
	switch len(ds) {
	case 0:
		return nil
	case 1:
		return p.SubmitDelta(ctx, ds[0])
	}
	images := 0
	for _, d := range ds {
		images += len(d.Images)
	}
	return p.submit(ctx, ds[0].Lease, ds, images, func(epoch, first uint64) command {
		return command{kind: cmdDeltas, lane: ds[0].Lease.Lane, epoch: epoch, deltas: ds, deltaID: first}
	})
}
