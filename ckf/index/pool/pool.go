package pool

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/ckf/index"
)

// IngestionPool is GlobalCkfIngestionPool (consumer §4): the bounded,
// lane-sticky transport in front of the lane ingestors of one
// index.GlobalIndexer. At construction it claims every configured lane and hands
// each lane's ingestor to one worker goroutine chosen by the sticky hash,
// so all commands of a lane run in FIFO order on one goroutine while lanes
// on different workers run in parallel.
//
// All methods are safe for concurrent use. Control operations (Assign,
// InstallSnapshot, CompleteDrain) are serialised per lane and wait for the
// worker (bounded by ControlTimeout and the context); SubmitDelta only
// enqueues. Every fail-closed path retires the lane's admission
// (retire-admission: ready bit cleared first, epoch bumped, lease dropped),
// after which commands admitted under the old epoch are discarded by the
// worker and the lane needs a new assignment (new lease) and a snapshot.
//
// Failure behaviour: a full worker queue retires only the submitting lane
// (ErrSaturated); a lane whose oldest admitted delta is older than
// MaxDirtyToAppliedAge is retired by SubmitDelta or the lag watchdog; a
// worker panic is recovered, marks the worker failed, clears the readiness
// of all its lanes, posts PoolFaultWorkerFailed (disposition
// ConsumerWorkerFailureMidApply) and makes every later operation on those
// lanes return ErrWorkerFailed.
//
// Close retires every lane, stops the watchdog and the workers (each
// finishes its current command and drains its now-stale queue) and
// releases the lane claims. No goroutine outlives Close. Unlike the
// reference (which try_sends a Shutdown command and joins only if the send
// succeeded), Go workers also watch a quit channel, so a full queue cannot
// wedge Close; Close does wait for a command that is currently running.
type IngestionPool struct {
	g       *index.GlobalIndexer
	cfg     IngestionPoolConfig
	limit   int // outstanding images per lane
	lanes   [ckf.LaneCount]*laneControl
	workers []*worker
	faults  chan PoolFault
	hooks   poolHooks

	quit      chan struct{}
	closed    atomic.Bool
	closeOnce sync.Once
	bg        sync.WaitGroup // watchdog
}

// poolHooks are test-only interception points (nil in production).
type poolHooks struct {
	// beforeActivate runs on the worker after a snapshot's words were
	// written and before the activation guard takes the admission mutex.
	beforeActivate func(lane uint8)
	// now replaces time.Now for admission timestamps and the watchdog.
	now func() time.Time
	// noWatchdog disables the lag watchdog goroutine.
	noWatchdog bool
}

// NewIngestionPool builds the pool over g (consumer §4.1): validates cfg, claims every
// configured lane of g (so g must have no claimed lane), and starts
// cfg.Workers workers plus the lag watchdog. Call Close to stop them. The pool serves
// the reference's 16 lanes: an indexer that configures a lane beyond 15 (consumer §16)
// is refused with index.ErrLanesBeyond16.
func NewIngestionPool(g *index.GlobalIndexer, cfg IngestionPoolConfig) (*IngestionPool, error) {
	return newIngestionPool(g, cfg, poolHooks{})
}

func newIngestionPool(g *index.GlobalIndexer, cfg IngestionPoolConfig, hooks poolHooks) (*IngestionPool, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if g.Manifest().ConfiguredLanes64() > 0xFFFF {
		return nil, index.ErrLanesBeyond16
	}
	limit := cfg.MaxOutstandingImagesPerLane
	if limit == 0 {
		limit = int(min(g.BucketCount(), uint64(math.MaxInt)))
	}
	if hooks.now == nil {
		hooks.now = time.Now
	}
	p := &IngestionPool{
		g:      g,
		cfg:    cfg,
		limit:  limit,
		faults: make(chan PoolFault, 2*ckf.LaneCount+cfg.Workers),
		hooks:  hooks,
		quit:   make(chan struct{}),
	}
	p.workers = make([]*worker, cfg.Workers)
	for i := range p.workers {
		p.workers[i] = &worker{idx: i, q: make(chan command, cfg.QueueCapacity), dead: make(chan struct{}), done: make(chan struct{})}
	}
	var claimed []*index.LaneIngestor
	for l := uint8(0); l < ckf.LaneCount; l++ {
		if g.Manifest().ConfiguredLanes()&(1<<l) == 0 {
			continue
		}
		in, err := g.ClaimLane(l)
		if err != nil {
			for _, c := range claimed {
				c.Close()
			}
			return nil, err
		}
		claimed = append(claimed, in)
		w := stickyWorker(g.Manifest().ConsumerInstance(), l, cfg.Workers)
		p.lanes[l] = &laneControl{lane: l, bit: 1 << l, worker: w}
		p.workers[w].ingestors[l] = in
		p.workers[w].lanes |= 1 << l
	}
	for _, w := range p.workers {
		go p.runWorker(w)
	}
	if !hooks.noWatchdog {
		p.bg.Add(1)
		go p.lagWatchdog()
	}
	return p, nil
}

// Indexer returns the indexer the pool feeds.
func (p *IngestionPool) Indexer() *index.GlobalIndexer { return p.g }

// Faults returns the best-effort diagnostic channel (capacity 2·16 +
// workers). Faults are dropped when it is full; readiness is authoritative.
func (p *IngestionPool) Faults() <-chan PoolFault { return p.faults }

// WorkerOf returns the worker index of lane (the sticky function), ok ==
// false for an unconfigured lane.
func (p *IngestionPool) WorkerOf(lane uint8) (int, bool) {
	if lane >= ckf.LaneCount || p.lanes[lane] == nil {
		return 0, false
	}
	return p.lanes[lane].worker, true
}

// WorkerHealthy reports whether worker i has not failed.
func (p *IngestionPool) WorkerHealthy(i int) bool {
	return i >= 0 && i < len(p.workers) && !p.workers[i].failed.Load()
}

// postFault sends f without blocking (dropped when the channel is full).
func (p *IngestionPool) postFault(f PoolFault) {
	select {
	case p.faults <- f:
	default:
	}
}

// laneFor checks the common preconditions of every operation: pool open,
// lane configured (index.ErrUnconfiguredLane), owning worker healthy
// (ErrWorkerFailed).
func (p *IngestionPool) laneFor(lane uint8) (*laneControl, *worker, error) {
	if p.closed.Load() {
		return nil, nil, ErrPoolClosed
	}
	if lane >= ckf.LaneCount || p.lanes[lane] == nil {
		return nil, nil, index.ErrUnconfiguredLane
	}
	lc := p.lanes[lane]
	w := p.workers[lc.worker]
	if w.failed.Load() {
		return nil, nil, ErrWorkerFailed
	}
	return lc, w, nil
}

// Assign (consumer §4.5) validates the assignment against the lane's admission
// record (consumer §3.2; *index.AssignmentError, nothing changes), then bumps the epoch,
// clears readiness before the lease changes, records the new lease
// (Transitioning) and has the worker assign the ingestor. On success the
// lane awaits a snapshot. A fenced lane returns ErrAdmissionEpochExhausted.
func (p *IngestionPool) Assign(ctx context.Context, id ckf.ProducerIdentity, lease ckf.LaneLease) error {
	lc, w, err := p.laneFor(lease.Lane)
	if err != nil {
		return err
	}
	lc.transition.Lock()
	defer lc.transition.Unlock()

	lc.mu.Lock()
	if lc.fenced.Load() {
		lc.mu.Unlock()
		return ErrAdmissionEpochExhausted
	}
	if aerr := p.g.Manifest().ValidateAssignment(lease.Lane, lc.lastAssignEpoch, lc.hasLastAssign, id, lease); aerr != nil {
		lc.mu.Unlock()
		return aerr
	}
	if lc.epoch == math.MaxUint64 {
		p.fenceLocked(lc)
		lc.mu.Unlock()
		return ErrAdmissionEpochExhausted
	}
	lc.epoch++
	p.g.WithdrawReady(lc.bit)
	lc.state = laneTransitioning
	lc.lease, lc.hasLease = lease, true
	lc.published.Store(lc.epoch)
	epoch := lc.epoch
	lc.mu.Unlock()

	r, err := p.control(ctx, lc, w, command{kind: cmdAssign, lane: lease.Lane, epoch: epoch, identity: id, lease: lease})
	if err != nil {
		return err
	}
	lc.mu.Lock()
	defer lc.mu.Unlock()
	if !r.stale && r.err == nil {
		// The ingestor accepted the epoch; keep the admission record in
		// step even if the lane was retired meanwhile, so a later assign
		// with the same epoch is rejected here and not by the worker.
		lc.lastAssignEpoch, lc.hasLastAssign = lease.Epoch, true
	}
	if r.stale || lc.epoch != epoch {
		return ErrLaneRetired
	}
	if r.err != nil {
		lc.state = laneRetired
		lc.lease, lc.hasLease = ckf.LaneLease{}, false
		return r.err
	}
	lc.state = laneAwaitingSnapshot
	return nil
}

// InstallSnapshot (consumer §4.5) sends a barrier snapshot for the lane's current
// lease to its worker. Outcomes: SnapshotInstalled (lane Active);
// IgnoredStaleOrDuplicate (an Active lane stays Active, no rollback);
// LaneDeactivated with an InactiveSnapshotInstallFailure fault (lease kept,
// retry the snapshot); LaneDeactivated with a gap-class fault (lane retired:
// new lease + snapshot needed). Errors: ErrLaneUnassigned, ErrLaneRetired
// (no matching lease, retired or fenced lane, or the lane was retired while
// the snapshot was being written — its activation is then refused),
// ErrControlTimeout, ErrWorkerFailed, ErrPoolClosed, ctx errors.
//
// s must not be modified until InstallSnapshot returns.
func (p *IngestionPool) InstallSnapshot(ctx context.Context, s *ckf.Snapshot) (index.IngestOutcome, error) {
	lc, w, err := p.laneFor(s.Lease.Lane)
	if err != nil {
		return index.IngestOutcome{}, err
	}
	lc.transition.Lock()
	defer lc.transition.Unlock()

	lc.mu.Lock()
	if err := lc.admitControlLocked(s.Lease, true); err != nil {
		lc.mu.Unlock()
		return index.IngestOutcome{}, err
	}
	epoch := lc.epoch
	lc.mu.Unlock()

	r, err := p.control(ctx, lc, w, command{kind: cmdSnapshot, lane: s.Lease.Lane, epoch: epoch, snapshot: s})
	if err != nil {
		return index.IngestOutcome{}, err
	}
	if r.stale || r.out.Kind == index.OutcomeAwaitingSnapshot {
		return index.IngestOutcome{}, ErrLaneRetired
	}
	return r.out, nil
}

// admitControlLocked checks a control operation's lease against the
// admission state (mu held). allowAwaiting admits AwaitingSnapshot lanes
// (snapshots); drains need an Active lane.
func (lc *laneControl) admitControlLocked(lease ckf.LaneLease, allowAwaiting bool) error {
	if lc.fenced.Load() {
		return ErrLaneRetired
	}
	switch lc.state {
	case laneUnassigned:
		if allowAwaiting {
			return ErrLaneUnassigned
		}
		return ErrLaneRetired
	case laneAwaitingSnapshot:
		if !allowAwaiting {
			return ErrLaneRetired
		}
	case laneActive:
	default:
		return ErrLaneRetired
	}
	if !lc.hasLease || lc.lease != lease {
		return ErrLaneRetired
	}
	return nil
}

// SubmitDelta admits one delta for asynchronous application (consumer §4.6) and
// returns once it is enqueued; it never blocks on a full queue. Checks, in
// order: lane Active (else ErrLaneUnassigned / ErrAwaitingSnapshot /
// ErrLaneRetired) with the current lease (ErrLaneRetired); lag (the oldest
// outstanding delta is at least MaxDirtyToAppliedAge old → lane retired,
// ErrDirtyToAppliedAgeExceeded); outstanding images (→ lane retired,
// *OutstandingImageLimitError — a single oversized delta trips it); delta id
// overflow (→ fenced, ErrAdmissionEpochExhausted); then a non-blocking
// enqueue: a full queue retires this lane only and returns ErrSaturated (the
// delta and this lane's already-queued commands are discarded).
//
// A nil error means "admitted", not "applied": application faults retire
// the lane and are reported on Faults(); CompleteDrain proves application.
// d must not be modified after a successful submit. ctx is only checked
// before admission (the call never waits).
func (p *IngestionPool) SubmitDelta(ctx context.Context, d *ckf.Delta) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	lc, w, err := p.laneFor(d.Lease.Lane)
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
	if !lc.hasLease || lc.lease != d.Lease {
		return ErrLaneRetired
	}
	now := p.hooks.now()
	if lc.lagExceededLocked(now, p.cfg.MaxDirtyToAppliedAge) {
		if err := p.retireAdmissionLocked(lc); err != nil {
			return err
		}
		p.postFault(PoolFault{Kind: PoolFaultDirtyToAppliedAgeExceeded, Lane: lc.lane, Disposition: ckf.DispositionOf(ckf.ConsumerWorkerFailureMidApply)})
		return ErrDirtyToAppliedAgeExceeded
	}
	images := len(d.Images)
	requested := lc.outstandingImages + images
	if requested > p.limit || requested < lc.outstandingImages {
		if err := p.retireAdmissionLocked(lc); err != nil {
			return err
		}
		p.postFault(PoolFault{Kind: PoolFaultOutstandingImageLimit, Lane: lc.lane, Requested: requested, Limit: p.limit,
			Disposition: ckf.DispositionOf(ckf.ConsumerGapOrMalformedBeforeWrite)})
		return &OutstandingImageLimitError{Lane: lc.lane, Requested: requested, Limit: p.limit}
	}
	if lc.nextDeltaID == math.MaxUint64 {
		p.fenceLocked(lc)
		return ErrAdmissionEpochExhausted
	}
	lc.nextDeltaID++
	id := lc.nextDeltaID
	lc.outstanding.push(outstandingDelta{id: id, images: images, admitted: now})
	lc.outstandingImages = requested
	select {
	case w.q <- command{kind: cmdDelta, lane: d.Lease.Lane, epoch: lc.epoch, delta: d, deltaID: id}:
		return nil
	default:
	}
	// Saturation: retire this lane only; the delta is discarded and this lane's queued commands
	// become stale (epoch moved).
	lc.releaseDeltaLocked(id)
	if err := p.retireAdmissionLocked(lc); err != nil {
		return err
	}
	p.postFault(PoolFault{Kind: PoolFaultSaturated, Lane: lc.lane, Disposition: ckf.DispositionOf(ckf.ConsumerGapOrMalformedBeforeWrite)})
	return ErrSaturated
}

// CompleteDrain (consumer §4.5) sends a drain marker through the lane's FIFO, after
// every delta admitted before it, and returns the ingestor's verdict:
// DrainAcknowledged, or LaneDeactivated (TerminalSequenceMismatch; the lane
// is retired). The lane must be Active on marker's lease, else
// ErrLaneRetired (also when the marker was discarded because the lane was
// retired while it was queued).
func (p *IngestionPool) CompleteDrain(ctx context.Context, m ckf.DrainMarker) (index.IngestOutcome, error) {
	lc, w, err := p.laneFor(m.Lease.Lane)
	if err != nil {
		return index.IngestOutcome{}, err
	}
	lc.transition.Lock()
	defer lc.transition.Unlock()

	lc.mu.Lock()
	if err := lc.admitControlLocked(m.Lease, false); err != nil {
		lc.mu.Unlock()
		return index.IngestOutcome{}, err
	}
	epoch := lc.epoch
	lc.mu.Unlock()

	r, err := p.control(ctx, lc, w, command{kind: cmdDrain, lane: m.Lease.Lane, epoch: epoch, marker: m})
	if err != nil {
		return index.IngestOutcome{}, err
	}
	if r.stale {
		return index.IngestOutcome{}, ErrLaneRetired
	}
	return r.out, nil
}

// RetireLane retires the lane's admission if lease is its current lease
// (ready bit cleared, epoch bumped, lease dropped); otherwise it returns
// ErrLaneRetired and changes nothing. The reference's retire_lane(lease) is
// not published (consumer §4.7, UNKNOWN); this is the presumed semantics.
func (p *IngestionPool) RetireLane(lease ckf.LaneLease) error {
	lc, _, err := p.laneFor(lease.Lane)
	if err != nil {
		return err
	}
	lc.mu.Lock()
	defer lc.mu.Unlock()
	if lc.fenced.Load() || !lc.hasLease || lc.lease != lease {
		return ErrLaneRetired
	}
	return p.retireAdmissionLocked(lc)
}

// control enqueues a control command (bounded by ControlTimeout) and waits
// for its reply (bounded again). On timeout or context cancellation the
// lane is retired if its epoch is still the command's (the command may
// still run later; it is then stale or its effect is retired).
func (p *IngestionPool) control(ctx context.Context, lc *laneControl, w *worker, cmd command) (reply, error) {
	cmd.reply = make(chan reply, 1)
	fail := func(err error) (reply, error) {
		if err == ErrControlTimeout || ctx.Err() != nil {
			lc.mu.Lock()
			p.retireIfEpochLocked(lc, cmd.epoch)
			lc.mu.Unlock()
			if err == ErrControlTimeout {
				p.postFault(PoolFault{Kind: PoolFaultControlTimeout, Lane: lc.lane, Disposition: ckf.DispositionOf(ckf.ConsumerWorkerFailureMidApply)})
			}
		}
		return reply{}, err
	}
	t := time.NewTimer(p.cfg.ControlTimeout)
	defer t.Stop()
	select {
	case w.q <- cmd:
	case <-t.C:
		return fail(ErrControlTimeout)
	case <-w.dead:
		return fail(ErrWorkerFailed)
	case <-p.quit:
		return fail(ErrPoolClosed)
	case <-ctx.Done():
		return fail(ctx.Err())
	}
	// Go >= 1.23 timers: Reset needs no drain (no stale value is ever
	// delivered after Stop/Reset).
	t.Reset(p.cfg.ControlTimeout)
	select {
	case r := <-cmd.reply:
		return r, nil
	case <-t.C:
		return fail(ErrControlTimeout)
	case <-w.dead:
		return fail(ErrWorkerFailed)
	case <-p.quit:
		return fail(ErrPoolClosed)
	case <-ctx.Done():
		return fail(ctx.Err())
	}
}

// lagWatchdog retires every Active lane whose oldest outstanding delta is at
// least MaxDirtyToAppliedAge old, every clamp(max/4, 100 µs, 10 ms).
func (p *IngestionPool) lagWatchdog() {
	defer p.bg.Done()
	tick := time.NewTicker(p.cfg.lagWatchdogPeriod())
	defer tick.Stop()
	for {
		select {
		case <-p.quit:
			return
		case <-tick.C:
		}
		now := p.hooks.now()
		for _, lc := range p.lanes {
			if lc == nil || p.workers[lc.worker].failed.Load() {
				continue // a failed worker's lanes are already unready
			}
			lc.mu.Lock()
			if !lc.fenced.Load() && lc.state == laneActive && lc.lagExceededLocked(now, p.cfg.MaxDirtyToAppliedAge) {
				if p.retireAdmissionLocked(lc) == nil {
					p.postFault(PoolFault{Kind: PoolFaultDirtyToAppliedAgeExceeded, Lane: lc.lane, Disposition: ckf.DispositionOf(ckf.ConsumerWorkerFailureMidApply)})
				}
			}
			lc.mu.Unlock()
		}
	}
}

// Close retires every lane, stops the watchdog and all workers and waits
// for them; each worker finishes its current command, drains its queue
// (every queued command is stale after the retirement, so nothing more is
// written) and releases its lanes' claims. Operations after Close return
// ErrPoolClosed; callers waiting for a reply are released with
// ErrPoolClosed. Close is idempotent and always returns nil.
func (p *IngestionPool) Close() error {
	p.closeOnce.Do(func() {
		p.closed.Store(true)
		for _, lc := range p.lanes {
			if lc == nil || p.workers[lc.worker].failed.Load() {
				continue // a failed worker's lanes are already unready
			}
			lc.mu.Lock()
			if !lc.fenced.Load() {
				_ = p.retireAdmissionLocked(lc)
			}
			lc.mu.Unlock()
		}
		close(p.quit)
		p.bg.Wait()
		for _, w := range p.workers {
			<-w.done
		}
	})
	return nil
}
