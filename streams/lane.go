package streams

import (
	"github.com/ckf-stream/ckf-stream/ckf/index"

	"context"
	"errors"
	"fmt"
	"runtime"
	"time"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"
)

// laneRunner is the one goroutine that owns a lane on this indexer replica: it decodes the
// lane partition's records in offset order, assembles snapshot chunks, mints the replica's own
// LaneLease for the lane, feeds the ingestion pool, and recovers the lane after a fault by
// seeking back to the latest complete snapshot it knows.
//
// Leases (design §2): records carry no lease. The runner mints LaneLease{consumer instance,
// lane, epoch} with an epoch that increases by one at every (re)subscription — a snapshot of a
// new producer identity, or the first snapshot after a fault that retired the lane — so the
// spec's lease checks run unchanged inside the pool.
//
// Progress rule (design §3): the log keeps a bad record forever. After a gap-class fault detected
// at offset F the runner replays from the latest snapshot; if the lane faults again before its
// applied position passes F, replaying cannot help: the runner asks the relay for a new snapshot
// (control topic) and installs only a complete snapshot whose first chunk comes after F.
type laneRunner struct {
	ix   *Indexer
	lane uint8
	bit  uint16
	pool ckf.PoolID
	log  *zap.Logger

	stats laneStats

	// Lease and admission, as this runner knows them.
	epoch      uint64 // last minted assignment epoch (0 = none yet)
	lease      ckf.LaneLease
	identity   ckf.ProducerIdentity
	needAssign bool // the next snapshot must be installed under a new lease
	active     bool // a snapshot is installed and no fault has been seen since
	installed  uint64

	phase        LanePhase
	applied      int64 // last offset processed
	appliedTime  time.Time
	appliedTxn   bool      // the last record processed was written in a transaction
	snapStart    int64     // first offset of the latest complete snapshot seen; -1 if none
	recoverUntil int64     // PhaseReplaying: the offset at which the fault was detected
	waitAfter    int64     // PhaseWaitingForSnapshot: install only snapshots starting after this
	lastRequest  time.Time // when this lane last asked the relay for a snapshot
	excluded     bool
	lastProgress time.Time

	asm    assembly
	faults chan index.PoolFault // forwarded by the indexer's fault dispatcher

	deadUpTo      int64        // highest offset dead-lettered (a replay does not repeat it)
	pending       []*ckf.Delta // decoded deltas not yet submitted (see flushDeltas)
	slab          deltaSlab    // where pending deltas and their images live
	pendingImages int
}

func newLaneRunner(ix *Indexer, lane uint8, pool ckf.PoolID) *laneRunner {
	r := &laneRunner{
		ix: ix, lane: lane, bit: 1 << lane, pool: pool,
		log:        ix.log.With(zap.Uint8("lane", lane), zap.String("pool", pool.String())),
		needAssign: true, applied: -1, deadUpTo: -1, snapStart: -1, recoverUntil: -1, waitAfter: -1,
		faults: make(chan index.PoolFault, 8),
	}
	r.pending = r.slab.run()
	r.stats.s = LaneStatus{Lane: lane, Pool: pool.String(), AppliedOffset: -1, HighWatermark: -1, SnapshotOffset: -1,
		Faults: map[string]uint64{}}
	return r
}

// run processes the lane until ctx ends.
func (r *laneRunner) run(ctx context.Context) {
	tick := time.NewTicker(r.ix.cfg.checkInterval())
	defer tick.Stop()
	for {
		b, ok := r.ix.feed.TryNext(int32(r.lane))
		if !ok {
			select {
			case <-ctx.Done():
				return
			case <-r.ix.feed.Ready(int32(r.lane)):
			case <-tick.C:
				r.checkHealth(ctx)
				r.checkFreshness(time.Now(), false)
			}
			continue
		}
		for _, rec := range b.Records {
			if ctx.Err() != nil {
				return
			}
			r.process(ctx, rec)
		}
		r.flushDeltas(ctx)
		r.checkHealth(ctx)
		r.stats.update(func(s *LaneStatus) { s.AppliedOffset = r.applied })
		r.checkFreshness(time.Now(), false)
	}
}

// process handles one lane record.
func (r *laneRunner) process(ctx context.Context, rec *kgo.Record) {
	if r.phase == PhaseReplaying && rec.Offset > r.recoverUntil && r.active {
		r.flushDeltas(ctx)
		// The replay reaches the place of the fault. Application is asynchronous, so first let
		// the pool apply everything submitted so far: a fault that recurs is then seen while
		// the applied position is still within the replayed range, and the progress rule holds.
		r.drainBacklog(ctx)
		r.checkHealth(ctx)
		if r.active {
			r.setPhase(PhaseActive) // replay passed the fault: the fault did not recur
		}
	}
	r.applied = rec.Offset
	r.appliedTime = rec.Timestamp
	r.appliedTxn = rec.Attrs.IsTransactional()
	lr, err := r.ix.codec.DecodeLaneRecord(rec.Value)
	if err != nil {
		reason := "undecodable lane record: " + err.Error()
		fault := &schemas.LaneFault{Kind: schemas.FaultMalformedRecord, Detail: reason, Offset: schemas.Some(rec.Offset)}
		var ire *schemas.ImageRangeError
		if errors.As(err, &ire) {
			// Validated at decode, before any use; reported as the spec's fault for it.
			fault.Kind, fault.Actual = schemas.FaultInvalidImageIndex, schemas.Some(ire.Bucket)
		}
		r.reject(ctx, rec, schemas.DeadLetterReasonOf(err), fault, true)
		return
	}
	id, err := CkfIdentity(lr.Identity)
	if err != nil {
		r.reject(ctx, rec, schemas.DeadLetterInvalidField,
			&schemas.LaneFault{Kind: schemas.FaultMalformedRecord, Detail: err.Error(), Offset: schemas.Some(rec.Offset)}, true)
		return
	}
	if lr.Kind != schemas.LaneDelta {
		r.flushDeltas(ctx)
		r.checkHealth(ctx)
	}
	switch lr.Kind {
	case schemas.LaneSnapshotChunk:
		r.onChunk(ctx, rec, id, &lr.Snapshot)
	case schemas.LaneDelta:
		r.onDelta(ctx, rec, id, &lr.Delta)
	case schemas.LaneHeartbeat:
		r.stats.update(func(s *LaneStatus) { s.Heartbeats++ })
		if id.Pool != r.pool {
			what := "heartbeat of pool " + id.Pool.String() + " on a lane owned by " + r.pool.String()
			r.reject(ctx, rec, schemas.DeadLetterRejected,
				&schemas.LaneFault{Kind: schemas.FaultWrongLaneOwner, Detail: what, Offset: schemas.Some(rec.Offset)}, false)
		}
	case schemas.LaneDrainMarker:
		r.onDrain(ctx, rec, id, lr.Drain.ExpectedSequence)
	}
}

// reject dead-letters rec and reports it. faultLane says whether the record, had it been
// readable, could have carried state for the lane: then an active lane is deactivated (a gap:
// what it carried is lost) and recovered per the spec; nothing is written to the table.
func (r *laneRunner) reject(ctx context.Context, rec *kgo.Record, code schemas.DeadLetterReason, fault *schemas.LaneFault, faultLane bool) {
	r.flushDeltas(ctx)
	r.deadLetter(rec, code, fault.Detail)
	r.ix.metrics.rejected(r.lane)
	r.stats.update(func(s *LaneStatus) { s.Rejected++ })
	r.log.Warn("lane record rejected", zap.Int64("offset", rec.Offset), zap.String("reason", fault.Detail))
	r.event(schemas.LaneEvent{Kind: schemas.EventRecordRejected, Fault: fault})
	if r.asm.active {
		// A record between two chunks of one snapshot breaks its contiguity.
		r.abandonAssembly(rec.Offset, "unreadable record inside a snapshot")
	}
	if faultLane && r.active {
		// Everything before the bad record is valid: let the pool apply it first, so the lane
		// stops exactly at the bad record (and a replay stops at the same state).
		r.drainBacklog(ctx)
		r.checkHealth(ctx)
		if !r.active {
			return // an earlier delta faulted; that fault is the one reported and recovered
		}
		_ = r.ix.pool.RetireLane(r.lease) // retire-admission: ready bit cleared, lease dropped
		r.onFault(ctx, ckf.ConsumerGapOrMalformedBeforeWrite, fault)
	}
}

// onFault handles a fault that retired or deactivated the lane. Retry-class faults keep the
// lease and wait for the next snapshot; the others start recovery.
func (r *laneRunner) onFault(ctx context.Context, point ckf.FailurePoint, fault *schemas.LaneFault) {
	r.active = false
	kind := fault.Kind.String()
	r.stats.update(func(s *LaneStatus) {
		s.Faults[kind]++
		s.LastFault, s.LastFaultTime = fault.Detail, time.Now()
	})
	r.ix.metrics.fault(r.lane, kind)
	r.log.Warn("lane deactivated", zap.String("fault", fault.Detail), zap.Stringer("point", point), zap.Int64("offset", r.applied))
	r.event(schemas.LaneEvent{Kind: schemas.EventDeactivated, Fault: fault, Disposition: wireDisposition(point)})
	if point == ckf.InactiveSnapshotInstallFailure {
		r.setPhase(PhaseAwaitingSnapshot) // RetrySnapshot: same lease, next snapshot
		r.askForRetrySnapshot(fault.Detail)
		return
	}
	r.needAssign = true
	switch {
	case r.phase == PhaseReplaying && r.applied <= r.recoverUntil:
		r.requestSnapshot("the fault recurred on replay before offset "+fmt.Sprint(r.recoverUntil), schemas.ReasonFaultRecovery)
	case r.snapStart < 0:
		r.requestSnapshot("no complete snapshot of this lane is known", schemas.ReasonFaultRecovery)
	default:
		r.recoverUntil = r.applied
		r.setPhase(PhaseReplaying)
		r.asm.reset()
		r.stats.update(func(s *LaneStatus) { s.Recoveries++ })
		r.log.Info("recovering lane by seek", zap.Int64("snapshot_offset", r.snapStart), zap.Int64("fault_offset", r.applied))
		r.ix.feed.Seek(int32(r.lane), r.snapStart)
	}
}

// requestSnapshot asks the relay for a snapshot written after the current position and waits
// for it.
func (r *laneRunner) requestSnapshot(detail string, reason schemas.SnapshotRequestReason) {
	r.waitAfter = r.applied
	r.setPhase(PhaseWaitingForSnapshot)
	r.asm.reset()
	r.sendSnapshotRequest(detail, reason)
}

// askForRetrySnapshot serves RetrySnapshot (keep the lease, take the next snapshot): an idle
// relay writes its next snapshot only after RelayConfig.SnapshotIdleInterval, so the lane also
// asks for one, unless it asked less than IndexerConfig.RetrySnapshotRequestGap ago (that
// request's snapshot is on its way). The phase is unchanged: any next complete snapshot will do.
func (r *laneRunner) askForRetrySnapshot(detail string) {
	if !r.lastRequest.IsZero() && time.Since(r.lastRequest) < r.ix.cfg.RetrySnapshotRequestGap {
		return
	}
	r.sendSnapshotRequest(detail, schemas.ReasonFaultRecovery)
}

func (r *laneRunner) sendSnapshotRequest(detail string, reason schemas.SnapshotRequestReason) {
	r.lastRequest = time.Now()
	r.ix.out.RequestSnapshot(r.lane, r.pool, reason, detail, r.applied)
	r.stats.update(func(s *LaneStatus) { s.SnapshotRequests++ })
	r.event(schemas.LaneEvent{Kind: schemas.EventSnapshotRequested})
	r.log.Info("snapshot requested", zap.String("why", detail), zap.Int64("after_offset", r.applied))
}

func (r *laneRunner) setPhase(p LanePhase) {
	r.phase = p
	r.stats.update(func(s *LaneStatus) { s.Phase = p })
}

// checkHealth notices a retirement the pool made asynchronously (a delta's application fault,
// saturation, the lag watchdog, a worker failure): the ready bit is the authoritative signal;
// the pool's fault channel, forwarded here, names the fault when it was not dropped.
func (r *laneRunner) checkHealth(ctx context.Context) {
	var last *index.PoolFault
	for {
		select {
		case f := <-r.faults:
			last = &f
			continue
		default:
		}
		break
	}
	if !r.active || r.ix.g.ReadyLanes()&r.bit != 0 {
		return
	}
	point := ckf.ConsumerGapOrMalformedBeforeWrite
	fault := &schemas.LaneFault{Kind: schemas.FaultUnknown, Detail: "lane retired by the ingestion pool", Offset: schemas.Some(r.applied)}
	if last != nil {
		point = consumerPoint(last.Disposition)
		switch last.Kind {
		case index.PoolFaultLaneDeactivated:
			fault = wireFault(last.Fault, r.applied)
		case index.PoolFaultDirtyToAppliedAgeExceeded:
			fault.Kind, fault.Detail = schemas.FaultLagExceeded, "dirty-to-applied age exceeded"
		case index.PoolFaultWorkerFailed:
			fault.Kind, fault.Detail = schemas.FaultWorkerFailure, fmt.Sprintf("ingestion worker failed: %v", last.Panic)
		default:
			fault.Detail = "ingestion pool: " + last.Kind.String()
		}
	}
	r.onFault(ctx, point, fault)
}

// event produces a lane event for this lane with the runner's current position filled in.
func (r *laneRunner) event(ev schemas.LaneEvent) {
	ev.Lane = r.lane
	ev.Pool = WirePool(r.pool)
	if r.epoch > 0 {
		ev.LeaseEpoch = schemas.Some(r.epoch)
	}
	if r.active {
		ev.InstalledSequence = schemas.Some(r.installed)
	}
	if r.applied >= 0 {
		ev.AppliedOffset = schemas.Some(r.applied)
	}
	if hwm := r.ix.feed.HighWatermark(int32(r.lane)); hwm >= 0 {
		ev.HighWatermark = schemas.Some(hwm)
		ev.LagRecords = schemas.Some(max(hwm-(r.applied+1), 0))
	}
	r.ix.out.LaneEvent(ev)
}

// ---- snapshots ----

// assembly collects the chunks of one snapshot. Chunks must arrive in order, with one sequence,
// identity, chunk count and bucket count, covering the buckets contiguously; anything else
// abandons the snapshot and nothing becomes ready.
type assembly struct {
	active   bool
	skip     bool // header checks only: a stale snapshot a ready lane ignores, or one not wanted
	stale    bool // skipped because the ready lane already has its sequence
	identity ckf.ProducerIdentity
	sequence uint64
	count    uint32
	next     uint32
	bucket   uint64 // next expected first bucket
	total    uint64
	first    int64 // offset of chunk 0
	words    []uint64
}

func (a *assembly) reset() { a.active, a.skip = false, false }

func (r *laneRunner) abandonAssembly(offset int64, why string) {
	wasSkipped := r.asm.skip
	r.asm.reset()
	r.ix.metrics.assemblyFault(r.lane)
	fault := &schemas.LaneFault{Kind: schemas.FaultSnapshotAssembly, Detail: why, Offset: schemas.Some(offset)}
	if wasSkipped || r.active {
		r.event(schemas.LaneEvent{Kind: schemas.EventRecordRejected, Fault: fault})
		return
	}
	// An incomplete snapshot on a lane that is not ready: InactiveSnapshotInstallFailure,
	// RetrySnapshot — keep the lease, take the next snapshot.
	r.stats.update(func(s *LaneStatus) { s.Faults[fault.Kind.String()]++; s.LastFault = why })
	r.event(schemas.LaneEvent{Kind: schemas.EventAwaitingSnapshot, Fault: fault,
		Disposition: wireDisposition(ckf.InactiveSnapshotInstallFailure)})
	r.askForRetrySnapshot(why)
}

func (r *laneRunner) onChunk(ctx context.Context, rec *kgo.Record, id ckf.ProducerIdentity, c *schemas.SnapshotChunk) {
	if c.ChunkIndex == 0 {
		if r.asm.active {
			r.abandonAssembly(rec.Offset, "a new snapshot started before the previous one completed")
		}
		if id.Pool != r.pool || id.Format != r.ix.g.Manifest().Format() {
			kind, what := schemas.FaultWrongLaneOwner, "pool "+id.Pool.String()+" does not own lane (owner "+r.pool.String()+")"
			if id.Pool == r.pool {
				kind, what = schemas.FaultWrongFormat, "snapshot format differs from the indexer's"
			}
			r.deadLetter(rec, schemas.DeadLetterRejected, what)
			r.ix.metrics.rejected(r.lane)
			r.stats.update(func(s *LaneStatus) { s.Rejected++ })
			r.event(schemas.LaneEvent{Kind: schemas.EventRecordRejected,
				Fault: &schemas.LaneFault{Kind: kind, Detail: what, Offset: schemas.Some(rec.Offset)}})
			return // its later chunks are orphans and are ignored
		}
		wanted, stale := true, false
		switch {
		case r.active && id == r.identity && c.Sequence <= r.installed:
			wanted, stale = false, true // stale for a ready lane (spec: IgnoredStaleOrDuplicate)
		case r.phase == PhaseWaitingForSnapshot && rec.Offset <= r.waitAfter:
			wanted = false // written before the fault that made this lane ask for a new one
		}
		r.asm = assembly{active: true, skip: !wanted, stale: stale, identity: id, sequence: c.Sequence, count: c.ChunkCount,
			total: c.TotalBuckets, first: rec.Offset, words: r.asm.words}
		if wanted && uint64(cap(r.asm.words)) < c.TotalBuckets {
			r.asm.words = make([]uint64, c.TotalBuckets)
		}
		r.asm.words = r.asm.words[:c.TotalBuckets*boolToU64(wanted)]
	} else if !r.asm.active {
		return // a chunk of a snapshot whose start this replica did not read (joined mid-snapshot)
	}
	a := &r.asm
	switch {
	case id != a.identity:
		r.abandonAssembly(rec.Offset, "chunk of another producer identity inside a snapshot")
		return
	case c.Sequence != a.sequence || c.ChunkCount != a.count || c.TotalBuckets != a.total:
		r.abandonAssembly(rec.Offset, fmt.Sprintf("chunk %d/%d of sequence %d does not match snapshot %d (%d chunks, %d buckets)",
			c.ChunkIndex, c.ChunkCount, c.Sequence, a.sequence, a.count, a.total))
		return
	case c.ChunkIndex != a.next:
		r.abandonAssembly(rec.Offset, fmt.Sprintf("chunk %d arrived, expected %d", c.ChunkIndex, a.next))
		return
	case c.FirstBucket != a.bucket:
		r.abandonAssembly(rec.Offset, fmt.Sprintf("chunk %d starts at bucket %d, expected %d", c.ChunkIndex, c.FirstBucket, a.bucket))
		return
	}
	n := uint64(c.Words.Len())
	if a.bucket+n > a.total || n == 0 {
		r.abandonAssembly(rec.Offset, fmt.Sprintf("chunk %d covers buckets [%d,%d) beyond %d", c.ChunkIndex, a.bucket, a.bucket+n, a.total))
		return
	}
	if !a.skip {
		c.Words.AppendTo(a.words[a.bucket:a.bucket])
	}
	a.bucket += n
	a.next++
	if a.next < a.count {
		return
	}
	if a.bucket != a.total {
		r.abandonAssembly(rec.Offset, fmt.Sprintf("snapshot ends at bucket %d of %d", a.bucket, a.total))
		return
	}
	// Complete. Recovery may seek to it if it is consistent with this lane's stream: a stale
	// snapshot of the installed identity, or one that installs.
	if a.stale {
		r.markSnapshot(a.first)
	}
	if !a.skip {
		r.install(ctx, rec)
	}
	a.reset()
}

// markSnapshot records the first offset of the latest complete snapshot recovery may seek to.
func (r *laneRunner) markSnapshot(first int64) {
	r.snapStart = first
	r.stats.update(func(s *LaneStatus) { s.SnapshotOffset = first })
}

func boolToU64(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

// install assigns (when needed) and installs the assembled snapshot through the pool.
func (r *laneRunner) install(ctx context.Context, rec *kgo.Record) {
	a := &r.asm
	wasActive := r.active
	if r.needAssign || a.identity != r.identity {
		r.active = false
		r.epoch++
		lease := ckf.LaneLease{Consumer: r.ix.g.Manifest().ConsumerInstance(), Lane: r.lane, Epoch: r.epoch}
		if err := r.ix.pool.Assign(ctx, a.identity, lease); err != nil {
			var ae *index.AssignmentError
			if errors.As(err, &ae) {
				r.event(schemas.LaneEvent{Kind: schemas.EventRecordRejected, Fault: assignmentFault(ae, a.first)})
			}
			r.log.Error("lane assignment failed", zap.Error(err))
			return
		}
		r.lease, r.identity, r.needAssign = lease, a.identity, false
		r.stats.update(func(s *LaneStatus) { s.Identity, s.LeaseEpoch = a.identity.String(), lease.Epoch })
		r.event(schemas.LaneEvent{Kind: schemas.EventAssigned})
	}
	start := time.Now()
	out, err := r.ix.pool.InstallSnapshot(ctx, &ckf.Snapshot{Identity: a.identity, Lease: r.lease, Sequence: a.sequence, Buckets: a.words})
	if err != nil {
		// The lane was retired (or the pool closed) while the snapshot was in flight: the next
		// snapshot needs a new lease.
		r.needAssign = true
		r.log.Warn("snapshot not installed", zap.Error(err))
		return
	}
	switch out.Kind {
	case index.OutcomeSnapshotInstalled:
		r.active, r.installed = true, out.Sequence
		r.markSnapshot(a.first)
		if r.phase != PhaseReplaying || rec.Offset > r.recoverUntil {
			r.setPhase(PhaseActive)
		}
		r.waitAfter = -1
		r.ix.metrics.snapshotInstalled(r.lane, time.Since(start))
		r.stats.update(func(s *LaneStatus) { s.Snapshots++; s.InstalledSequence = out.Sequence })
		r.event(schemas.LaneEvent{Kind: schemas.EventSnapshotInstalled})
		r.log.Info("snapshot installed", zap.Uint64("sequence", out.Sequence), zap.Int64("offset", a.first),
			zap.Duration("took", time.Since(start)))
	case index.OutcomeLaneDeactivated:
		// Per consumer §3.3, a snapshot fault on a lane that is not ready is retry-class (INACT); on a
		// ready lane it is gap-class and the pool retired the lane.
		point := ckf.InactiveSnapshotInstallFailure
		if wasActive {
			point = ckf.ConsumerGapOrMalformedBeforeWrite
		}
		r.onFault(ctx, point, wireFault(out.Fault, rec.Offset))
	case index.OutcomeAwaitingSnapshot:
		r.needAssign = true // the admission guard refused activation: the lease moved meanwhile
	}
}

// drainBacklog waits until the pool has applied (or discarded) every delta this lane submitted.
func (r *laneRunner) drainBacklog(ctx context.Context) {
	for ctx.Err() == nil {
		if deltas, _ := r.ix.pool.Backlog(r.lane); deltas == 0 {
			return
		}
		time.Sleep(50 * time.Microsecond)
	}
}

// ---- deltas and drain markers ----

func (r *laneRunner) onDelta(ctx context.Context, rec *kgo.Record, id ckf.ProducerIdentity, d *schemas.Delta) {
	if id.Pool != r.pool {
		// Dead-letter it; if the lane is active it is also the spec's WrongIdentity fault, which
		// the ingestor reports when the delta reaches it.
		r.deadLetter(rec, schemas.DeadLetterRejected, "delta of pool "+id.Pool.String()+" on a lane owned by "+r.pool.String())
		r.ix.metrics.rejected(r.lane)
		r.stats.update(func(s *LaneStatus) { s.Rejected++ })
	}
	if r.asm.active {
		r.abandonAssembly(rec.Offset, "delta inside a snapshot")
	}
	if !r.active {
		return // AwaitingSnapshot: deltas before the lane's snapshot are ignored
	}
	n := d.Images.Len()
	images := r.slab.images(n)
	for i := range images {
		im := d.Images.At(i)
		images[i] = ckf.BucketImage{Bucket: im.Bucket, Value: im.Value}
	}
	delta := r.slab.delta()
	*delta = ckf.Delta{Identity: id, Lease: r.lease, BaseSequence: d.BaseSequence, Sequence: d.Sequence, Images: images}
	r.pending = append(r.pending, delta)
	r.pendingImages += n
	if len(r.pending) >= maxDeltaRun {
		r.flushDeltas(ctx)
	}
}

// maxDeltaRun bounds the deltas handed to the pool as one run (one worker queue slot, one
// goroutine hand-off): enough to amortise the hand-off, small enough to keep apply latency low.
const maxDeltaRun = 32

// flushDeltas submits the deltas decoded since the last flush as one run. Every path that does
// anything else with the lane (another record kind, a fault, a health check, the end of a
// fetched batch) flushes first, so the pool sees the lane's records in log order.
func (r *laneRunner) flushDeltas(ctx context.Context) {
	if len(r.pending) == 0 {
		return
	}
	run, images := r.pending, r.pendingImages
	r.pending, r.pendingImages = r.slab.run(), 0
	if !r.active {
		return // deactivated while the run was being decoded
	}
	r.pace(ctx)
	err := r.ix.pool.SubmitDeltas(ctx, run)
	if err == nil {
		r.installed = max(r.installed, run[len(run)-1].Sequence)
		r.ix.metrics.deltas(r.lane, len(run), images)
		r.stats.update(func(s *LaneStatus) {
			s.Deltas += uint64(len(run))
			s.Images += uint64(images)
			s.InstalledSequence = r.installed
		})
		return
	}
	if disp, ok := index.PoolErrorDisposition(err); ok {
		point := consumerPoint(disp)
		kind := schemas.FaultUnknown
		switch {
		case errors.Is(err, index.ErrDirtyToAppliedAgeExceeded):
			kind = schemas.FaultLagExceeded
		case errors.Is(err, index.ErrWorkerFailed):
			kind = schemas.FaultWorkerFailure
		}
		r.onFault(ctx, point, &schemas.LaneFault{Kind: kind, Detail: err.Error(), Offset: schemas.Some(r.applied)})
		return
	}
	// A rejection without a disposition: the pool no longer has this lease (a retirement this
	// runner has not seen yet, or the pool is closing).
	r.log.Debug("deltas not admitted", zap.Error(err))
	if errors.Is(err, index.ErrLaneRetired) && r.active {
		r.checkHealth(ctx)
		if r.active {
			r.onFault(ctx, ckf.ConsumerGapOrMalformedBeforeWrite,
				&schemas.LaneFault{Kind: schemas.FaultUnknown, Detail: "lane retired: " + err.Error(), Offset: schemas.Some(r.applied)})
		}
	}
}

// pace keeps this lane's backlog in the pool below the configured bound, so a lane catching up
// on its partition never trips the pool's fail-closed saturation or outstanding-image limits.
func (r *laneRunner) pace(ctx context.Context) {
	maxDeltas := r.ix.cfg.MaxBacklogDeltas
	maxImages := r.ix.pool.Config().MaxOutstandingImagesPerLane / 2
	for spin := 0; ; spin++ {
		deltas, images := r.ix.pool.Backlog(r.lane)
		if deltas < maxDeltas && images < maxImages {
			return
		}
		if ctx.Err() != nil {
			return
		}
		if spin < 100 {
			runtime.Gosched() // the worker is usually microseconds from making room
		} else {
			time.Sleep(50 * time.Microsecond)
		}
	}
}

func (r *laneRunner) onDrain(ctx context.Context, rec *kgo.Record, id ckf.ProducerIdentity, expected uint64) {
	if !r.active || id != r.identity {
		return // a marker for a stream this lane is not applying
	}
	out, err := r.ix.pool.CompleteDrain(ctx, ckf.DrainMarker{Lease: r.lease, ExpectedSequence: expected})
	if err != nil {
		r.log.Warn("drain marker not processed", zap.Error(err))
		return
	}
	switch out.Kind {
	case index.OutcomeDrainAcknowledged:
		r.event(schemas.LaneEvent{Kind: schemas.EventDrainAcknowledged})
	case index.OutcomeLaneDeactivated:
		r.onFault(ctx, ckf.ConsumerGapOrMalformedBeforeWrite, wireFault(out.Fault, rec.Offset))
	}
}

// ---- freshness ----

// checkFreshness applies the freshness policy: a lane whose applied position lags the
// partition's high watermark by more than MaxRecordLag records, or whose last applied record is
// older than MaxTimeLag (the relay fell silent: no delta or heartbeat), is excluded from answers
// until it catches up. The table's ready bit is not touched; exclusion is the indexer's
// eligibility mask. Progress events go out every ProgressInterval.
func (r *laneRunner) checkFreshness(now time.Time, force bool) {
	hwm := r.ix.feed.HighWatermark(int32(r.lane))
	lag := int64(0)
	if hwm >= 0 {
		next := r.applied + 1
		if r.appliedTxn {
			next++ // a committed transaction ends with a marker no consumer sees as a record
		}
		lag = max(hwm-next, 0)
	}
	var age time.Duration
	if !r.appliedTime.IsZero() {
		age = max(now.Sub(r.appliedTime), 0)
	}
	pol := r.ix.cfg.Freshness
	stale := r.active && ((pol.MaxRecordLag > 0 && lag > pol.MaxRecordLag) || (pol.MaxTimeLag > 0 && age > pol.MaxTimeLag))
	r.stats.update(func(s *LaneStatus) {
		s.HighWatermark, s.LagRecords, s.LagTime = hwm, lag, age
		s.Ready = r.ix.g.ReadyLanes()&r.bit != 0
		s.Excluded = stale
	})
	r.ix.metrics.lag(r.lane, hwm, r.applied, lag, age)
	backlog, _ := r.ix.pool.Backlog(r.lane)
	r.ix.metrics.state(r.lane, r.ix.g.ReadyLanes()&r.bit != 0, stale, r.installed, backlog)
	if stale != r.excluded {
		r.excluded = stale
		r.ix.setExcluded(r.bit, stale)
		kind := schemas.EventReadmitted
		if stale {
			kind = schemas.EventExcludedForLag
		}
		ev := schemas.LaneEvent{Kind: kind, LagMicros: schemas.Some(age.Microseconds())}
		r.event(ev)
		r.log.Info("lane freshness changed", zap.Bool("excluded", stale), zap.Int64("lag_records", lag), zap.Duration("lag_time", age))
	}
	if force || (r.ix.cfg.ProgressInterval > 0 && now.Sub(r.lastProgress) >= r.ix.cfg.ProgressInterval) {
		r.lastProgress = now
		r.event(schemas.LaneEvent{Kind: schemas.EventProgress, LagMicros: schemas.Some(age.Microseconds())})
	}
}

// deadLetter copies rec to the dead-letter topic once: a recovery that replays the partition
// reads the same bad record again, and it is not dead-lettered a second time.
func (r *laneRunner) deadLetter(rec *kgo.Record, code schemas.DeadLetterReason, reason string) {
	if rec.Offset <= r.deadUpTo {
		return
	}
	r.deadUpTo = rec.Offset
	r.ix.out.DeadLetter(rec, code, reason, "indexer/lane")
}
