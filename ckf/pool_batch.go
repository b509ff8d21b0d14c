package ckf

import (
	"context"
	"math"
)

// SubmitDeltas admits a run of consecutive deltas of one lane as one unit and hands them to the
// lane's worker as a single queue command. It is SubmitDelta for a feeder that reads deltas in
// bursts (a Kafka lane catching up): the admission policy of §4.6 is applied to the run as a
// whole — lane Active with every delta on the current lease, the lag bound, the outstanding-image
// limit on the run's total, delta-id space — and the run takes one slot of the worker's bounded
// queue, so a full queue retires the lane exactly as one delta would (saturation; the whole run
// is discarded). Each delta keeps its own outstanding entry, so the lag watchdog and Backlog see
// them individually, and the worker applies them one by one in order with the per-command epoch
// fencing of §4.4: after a delta deactivates the lane, the rest of the run is stale and dropped.
//
// Either every delta is admitted (nil) or none is (the error of the first failed check). ds and
// the deltas must not be modified after a successful submit. An empty run is a no-op.
func (p *IngestionPool) SubmitDeltas(ctx context.Context, ds []*Delta) error {
	if len(ds) == 0 {
		return nil
	}
	if len(ds) == 1 {
		return p.SubmitDelta(ctx, ds[0])
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	lease := ds[0].Lease
	lc, w, err := p.laneFor(lease.Lane)
	if err != nil {
		return err
	}
	lc.mu.Lock()
	defer lc.mu.Unlock()
	if lc.fenced.Load() {
		return ErrLaneRetired
	}
	switch lc.state {
	case laneUnassigned:
		return ErrLaneUnassigned
	case laneAwaitingSnapshot:
		return ErrAwaitingSnapshot
	case laneActive:
	default:
		return ErrLaneRetired
	}
	images := 0
	for _, d := range ds {
		if !lc.hasLease || d.Lease != lc.lease {
			return ErrLaneRetired
		}
		images += len(d.Images)
	}
	now := p.hooks.now()
	if lc.lagExceededLocked(now, p.cfg.MaxDirtyToAppliedAge) {
		if err := p.retireAdmissionLocked(lc); err != nil {
			return err
		}
		p.postFault(PoolFault{Kind: PoolFaultDirtyToAppliedAgeExceeded, Lane: lc.lane, Disposition: DispositionOf(ConsumerWorkerFailureMidApply)})
		return ErrDirtyToAppliedAgeExceeded
	}
	requested := lc.outstandingImages + images
	if requested > p.limit || requested < lc.outstandingImages {
		if err := p.retireAdmissionLocked(lc); err != nil {
			return err
		}
		p.postFault(PoolFault{Kind: PoolFaultOutstandingImageLimit, Lane: lc.lane, Requested: requested, Limit: p.limit,
			Disposition: DispositionOf(ConsumerGapOrMalformedBeforeWrite)})
		return &OutstandingImageLimitError{Lane: lc.lane, Requested: requested, Limit: p.limit}
	}
	if lc.nextDeltaID > math.MaxUint64-uint64(len(ds)) {
		p.fenceLocked(lc)
		return ErrAdmissionEpochExhausted
	}
	first := lc.nextDeltaID + 1
	for i, d := range ds {
		lc.outstanding = append(lc.outstanding, outstandingDelta{id: first + uint64(i), images: len(d.Images), admitted: now})
	}
	lc.nextDeltaID += uint64(len(ds))
	lc.outstandingImages = requested
	select {
	case w.q <- command{kind: cmdDeltas, lane: lc.lane, epoch: lc.epoch, deltas: ds, deltaID: first}:
		return nil
	default:
	}
	for i := range ds {
		lc.releaseDeltaLocked(first + uint64(i))
	}
	if err := p.retireAdmissionLocked(lc); err != nil {
		return err
	}
	p.postFault(PoolFault{Kind: PoolFaultSaturated, Lane: lc.lane, Disposition: DispositionOf(ConsumerGapOrMalformedBeforeWrite)})
	return ErrSaturated
}
