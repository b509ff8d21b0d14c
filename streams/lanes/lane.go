package lanes

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/ckf/index"
	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/ckf-stream/ckf-stream/streams"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"
)

// lane is the one owner of a physical lane on this indexer replica. One goroutine (run) takes
// the lane partition's records in offset order, decoded by the lane's decode stage
// (lane_decode.go: a stateless goroutine that only parses bytes), assembles snapshot chunks,
// mints the replica's own LaneLease, and drives the lane's LaneIngestor directly: every ingestor
// outcome, fault included, comes back on the call that caused it, so nothing about the lane is
// learnt by polling, and no other goroutine writes the lane (design §1: each lane's records
// through that lane's ingestor on one goroutine).
//
// Backpressure: the decode stage has a fixed number of run buffers; when the owner falls behind
// they are all in use, the stage stops taking records from the feed, and the feed pauses the
// partition once FeedConfig.PauseBytes of its records wait. A burst of valid deltas therefore
// only slows the partition's fetching; it is never a fault.
//
// Leases (design §2): records carry no lease. The lane mints LaneLease{consumer instance, lane,
// epoch} with an epoch that increases by one at every (re)subscription: a snapshot of a new
// producer identity, or the first snapshot after a fault that retired the lane. The spec's lease
// checks (consumer §3.2, §3.3) then run unchanged inside the ingestor.
//
// Progress rule (design §3): the log keeps a bad record forever. After a gap-class fault detected
// at offset F the lane replays from the latest snapshot; if the lane faults again before its
// applied position passes F, replaying cannot help: it asks the relay for a new snapshot
// (control topic) and installs only a complete snapshot whose first chunk comes after F.
//
// Failure behaviour: a panic while handling a record (a bug, in the decoder, the ingestor or
// here) is recovered per record: the lane replaces its ingestor (the old one's words and scratch
// are uncertain), reports a WORKER_FAILURE fault with disposition
// ConsumerWorkerFailureMidApply, and recovers like any other fault, so it never waits forever.
type lane struct {
	ix   *Indexer
	num  uint8 // physical lane = partition
	bit  uint64
	pool ckf.PoolID
	log  *zap.Logger
	in   *index.LaneIngestor // claimed by Indexer.Run, replaced after a panic, released by close

	st    laneState
	asm   assembly
	stats *laneLedger // the lane's status and metrics (lane_ledger.go)

	// delta is the delta being applied: the ingestor is done with it when ApplyDelta returns,
	// so one value serves every delta of the lane.
	delta ckf.Delta
}

// laneState is what the lane's goroutine knows beyond its ingestor. The ingestor holds the
// spec's part (assignment, lease, installed sequence, readiness); nothing here copies it.
type laneState struct {
	phase LanePhase
	// leaseEpoch is the last assignment epoch minted for this lane (0: none yet). It only grows,
	// so a new lease always passes the ingestor's strictly-increasing check, also after Retire.
	leaseEpoch uint64
	// newest is the newest producer generation the lane installed a snapshot of (valid when
	// hasNewest). A snapshot of an older generation of the same pool is a zombie relay's and is
	// refused.
	newest    ckf.ProducerIdentity
	hasNewest bool

	seekEpoch uint64 // the feed epoch of the lane's latest seek: decoded runs of another are stale
	applied   int64  // last offset processed (a data record or a transaction marker); -1 before any
	// usable is the last offset applied while the lane was ready: what its answers reflect.
	// Before the lane was first ready, the offset below where it started reading. A lane that
	// reads records it cannot use (snapshots it refuses, deltas while it waits for one) keeps
	// it, so its lag grows instead of reading 0 (checkFreshness).
	usable      int64
	appliedTime time.Time // producer timestamp of the last data record processed
	seeked      bool      // a seek was issued while processing the current batch: drop its rest
	stopped     bool      // the lane lost its ingestor (see panicked); run returns

	snapStart int64 // first offset of the latest complete snapshot recovery may seek to; -1 if none
	faultAt   int64 // PhaseReplaying: the offset at which the fault being replayed past was detected
	waitAfter int64 // PhaseWaitingForSnapshot: install only snapshots whose first chunk comes after this

	lastRequest  time.Time // when the lane last asked the relay for a snapshot
	lastProgress time.Time // when the lane last reported progress
	excluded     bool      // left out of answers by the freshness policy
	deadUpTo     int64     // highest offset dead-lettered (a replay does not repeat it)

	// Counters not yet published to the lane's ledger (published per batch: one lock, not one
	// per delta).
	newDeltas, newImages uint64

	// capacity is the producer's capacity state carried by the lane's latest record of its own
	// pool that had one (hasCapacity); snapOmissions is capacity.CapacityOmissions as of the
	// latest installed snapshot, the base of "omissions since the last snapshot".
	capacity      schemas.CapacityState
	hasCapacity   bool
	snapOmissions uint64

	// sources is the health of the DC's sources carried by the lane's latest record of its own
	// pool that had one (hasSources).
	sources    schemas.SourceHealth
	hasSources bool
}

func newLane(ix *Indexer, num uint8, pool ckf.PoolID, in *index.LaneIngestor, snapStart int64) *lane {
	l := &lane{
		ix: ix, num: num, bit: 1 << num, pool: pool, in: in,
		log: ix.log.With(zap.Uint8("lane", num), zap.String("pool", pool.String())),
		st:  laneState{applied: -1, usable: max(snapStart, 0) - 1, snapStart: snapStart, faultAt: -1, waitAfter: -1, deadUpTo: -1},
	}
	l.stats = newLaneLedger(LaneStatus{Lane: num, Pool: pool.String(), AppliedOffset: -1, HighWatermark: -1, SnapshotOffset: snapStart,
		Source: ix.cfg.Source(num).String()}, &ix.metrics.lanes[num])
	return l
}

// close releases the lane's ingestor (its ready bit is cleared, then its claim).
func (l *lane) close() { l.in.Close() }

// run processes the lane until ctx ends. Its decode stage runs alongside and ends with it.
func (l *lane) run(ctx context.Context) {
	dec := newLaneDecoder(l.ix.feed, l.ix.codec, l.num)
	dctx, stop := context.WithCancel(ctx)
	decoded := make(chan struct{})
	go func() { defer close(decoded); dec.run(dctx) }()
	defer func() { stop(); <-decoded }()
	tick := time.NewTicker(l.ix.cfg.checkInterval())
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			l.publish()
			l.checkFreshness(time.Now(), false)
		case r := <-dec.out:
			l.handleRun(ctx, r)
			dec.release(r)
			if l.st.stopped {
				return
			}
			if len(dec.out) == 0 { // caught up with the decoded records: say where the lane stands
				l.publish()
				l.checkFreshness(time.Now(), false)
			}
		}
	}
}

// handleRun processes a decoded run of records. A run fetched before the lane's latest seek is
// stale and dropped whole; a seek while processing drops the run's rest.
func (l *lane) handleRun(ctx context.Context, r *decodedRun) {
	if r.epoch != l.st.seekEpoch {
		return
	}
	l.st.seeked = false
	defer l.ix.noteEligibility() // a run may install a snapshot, fault or drain the lane
	for i := range r.recs {
		if ctx.Err() != nil || l.st.seeked || l.st.stopped {
			return
		}
		l.handle(&r.recs[i])
	}
}

// handle processes one decoded record and turns a panic into a lane fault.
func (l *lane) handle(d *decodedRecord) {
	defer func() {
		if v := recover(); v != nil {
			l.panicked(d.rec, v)
		}
	}()
	if d.panicked != nil {
		l.panicked(d.rec, d.panicked)
		return
	}
	l.process(d)
}

// process handles one lane record.
func (l *lane) process(d *decodedRecord) {
	rec := d.rec
	if l.st.phase == PhaseReplaying && rec.Offset > l.st.faultAt && l.in.Ready() {
		l.setPhase(PhaseActive) // the replay passed the fault: it did not recur
	}
	l.st.applied = rec.Offset
	if rec.Attrs.IsControl() {
		if l.in.Ready() {
			l.st.usable = rec.Offset
		}
		return // a transaction marker: it only moves the position (exact lag, design §3)
	}
	l.st.appliedTime = rec.Timestamp
	if err := d.err; err != nil {
		reason := "undecodable lane record: " + err.Error()
		fault := &schemas.LaneFault{Kind: schemas.FaultMalformedRecord, Detail: reason, Offset: schemas.Some(rec.Offset)}
		var ire *schemas.ImageRangeError
		if errors.As(err, &ire) {
			// Validated at decode, before any use; reported as the spec's fault for it.
			fault.Kind, fault.Actual = schemas.FaultInvalidImageIndex, schemas.Some(ire.Bucket)
		}
		l.reject(rec, schemas.DeadLetterReasonOf(err), fault, true)
		return
	}
	if err := d.idErr; err != nil {
		l.reject(rec, schemas.DeadLetterInvalidField,
			&schemas.LaneFault{Kind: schemas.FaultMalformedRecord, Detail: err.Error(), Offset: schemas.Some(rec.Offset)}, true)
		return
	}
	lr, id := &d.lr, d.id
	if c, ok := lr.Capacity.Get(); ok && id.Pool == l.pool {
		l.noteCapacity(c)
	}
	if h, ok := lr.Sources.Get(); ok && id.Pool == l.pool {
		l.noteSources(h)
	}
	if id.Pool == l.pool { // every record of the lane's pool says its size, none included (consumer §6.5)
		l.ix.blockSize[l.num].Store(lr.BlockSize)
	}
	switch lr.Kind {
	case schemas.LaneSnapshotChunk:
		l.onChunk(rec, id, &lr.Snapshot)
	case schemas.LaneDelta:
		l.onDelta(rec, id, &lr.Delta, d.images)
	case schemas.LaneHeartbeat:
		l.stats.update(func(s *LaneStatus) { s.Heartbeats++ })
		if id.Pool != l.pool {
			what := "heartbeat of pool " + id.Pool.String() + " on a lane owned by " + l.pool.String()
			l.reject(rec, schemas.DeadLetterRejected,
				&schemas.LaneFault{Kind: schemas.FaultWrongLaneOwner, Detail: what, Offset: schemas.Some(rec.Offset)}, false)
		}
	case schemas.LaneDrainMarker:
		l.onDrain(rec, id, lr.Drain.ExpectedSequence)
	}
	if !l.in.Ready() {
		return
	}
	l.st.usable = rec.Offset
	// The state the record brought the lane to is visible now; a snapshot's only with its last
	// chunk, installed.
	if id.Pool == l.pool && (lr.Kind != schemas.LaneSnapshotChunk || lr.Snapshot.ChunkIndex+1 == lr.Snapshot.ChunkCount) {
		l.noteAsOf(lr.AsOf, rec.Timestamp)
	}
}

// noteAsOf records, once the record is applied, the time up to which the lane reflects its DC's
// KV events (Indexer.LaneAsOf): the record's as_of, or its Kafka timestamp from a relay that does
// not stamp one (which is no earlier than the truth, so such a lane's age reads short).
func (l *lane) noteAsOf(asOf, written time.Time) {
	t := asOf
	if t.IsZero() {
		t = written
	}
	l.ix.asOf[l.num].Store(t.UnixMicro())
}

// ---- deltas and drain markers ----

// onDelta applies a delta whose images the decode stage unpacked.
func (l *lane) onDelta(rec *kgo.Record, id ckf.ProducerIdentity, d *schemas.Delta, images []ckf.BucketImage) {
	if id.Pool != l.pool {
		// Dead-letter it; on a ready lane it is also the spec's WrongIdentity fault, which the
		// ingestor reports below.
		l.deadLetter(rec, schemas.DeadLetterRejected, "delta of pool "+id.Pool.String()+" on a lane owned by "+l.pool.String())
		l.stats.update(func(s *LaneStatus) { s.Rejected++ })
	}
	if l.asm.active {
		if id == l.asm.identity && d.Sequence <= l.asm.sequence {
			// A delta the snapshot being assembled already covers, repeated by a mirror's replay
			// that began before the snapshot (consumer §9.8): the relay writes a snapshot's
			// chunks contiguously, so the original stream never has it here.
			l.stats.update(func(s *LaneStatus) { s.ReplayedRecords++ })
			return
		}
		l.abandonAssembly(rec.Offset, "delta inside a snapshot")
	}
	if !l.in.Ready() {
		return // awaiting a snapshot: deltas before it are ignored (consumer §3.3)
	}
	_, lease, _ := l.in.Assignment()
	l.delta = ckf.Delta{Identity: id, Lease: lease, BaseSequence: d.BaseSequence, Sequence: d.Sequence, Images: images}
	out := l.in.ApplyDelta(&l.delta)
	switch out.Kind {
	case index.OutcomeDeltaApplied:
		l.st.newDeltas++
		l.st.newImages += uint64(out.Images)
	case index.OutcomeLaneDeactivated:
		l.fault(ckf.ConsumerGapOrMalformedBeforeWrite, streams.WireFault(out.Fault, rec.Offset))
	}
	// IgnoredStaleOrDuplicate: a delta the installed snapshot already covers (consumer §3.3).
}

func (l *lane) onDrain(rec *kgo.Record, id ckf.ProducerIdentity, expected uint64) {
	identity, lease, _ := l.in.Assignment()
	if !l.in.Ready() || id != identity {
		return // a marker for a stream this lane is not applying
	}
	out := l.in.CompleteDrain(ckf.DrainMarker{Lease: lease, ExpectedSequence: expected})
	switch out.Kind {
	case index.OutcomeDrainAcknowledged:
		l.event(schemas.LaneEvent{Kind: schemas.EventDrainAcknowledged})
		// The relay stopped gracefully: nothing will keep this lane fresh, so it leaves answers
		// now rather than after the freshness policy's time bound. Retire drops the lease, so
		// the next generation's snapshot is assigned afresh.
		l.event(schemas.LaneEvent{Kind: schemas.EventDrained}) // with the installed sequence, before Retire
		l.in.Retire()
		l.setPhase(PhaseDrained)
		l.stats.update(func(s *LaneStatus) { s.Drains++ })
		l.log.Info("relay drained: lane left answers", zap.Uint64("sequence", expected), zap.Int64("offset", rec.Offset))
	case index.OutcomeLaneDeactivated:
		l.fault(ckf.ConsumerGapOrMalformedBeforeWrite, streams.WireFault(out.Fault, rec.Offset))
	}
}

// ---- rejected records, faults, recovery ----

// reject dead-letters rec and reports it. faultLane says whether the record, had it been
// readable, could have carried state for the lane: then a ready lane is deactivated (a gap: what
// it carried is lost) and recovered per the spec; nothing is written to the table.
func (l *lane) reject(rec *kgo.Record, code schemas.DeadLetterReason, fault *schemas.LaneFault, faultLane bool) {
	l.deadLetter(rec, code, fault.Detail)
	l.stats.update(func(s *LaneStatus) { s.Rejected++ })
	l.log.Warn("lane record rejected", zap.Int64("offset", rec.Offset), zap.String("reason", fault.Detail))
	l.event(schemas.LaneEvent{Kind: schemas.EventRecordRejected, Fault: fault})
	if l.asm.active {
		// A record between two chunks of one snapshot breaks its contiguity.
		l.abandonAssembly(rec.Offset, "unreadable record inside a snapshot")
	}
	if faultLane && l.in.Ready() {
		l.fault(ckf.ConsumerGapOrMalformedBeforeWrite, fault)
	}
}

// fault handles a fault that deactivated the lane (the ingestor already cleared its ready bit,
// or the caller's fault is about to). Retry-class faults (InactiveSnapshotInstallFailure) keep
// the lease and wait for the next snapshot; the others retire the lease, so the next snapshot is
// installed under a new one, and start recovery.
func (l *lane) fault(point ckf.FailurePoint, fault *schemas.LaneFault) {
	kind := fault.Kind.String()
	l.stats.update(func(s *LaneStatus) {
		s.Faults[kind]++
		s.LastFault, s.LastFaultTime = fault.Detail, time.Now()
	})
	l.log.Warn("lane deactivated", zap.String("fault", fault.Detail), zap.Stringer("point", point), zap.Int64("offset", l.st.applied))
	l.event(schemas.LaneEvent{Kind: schemas.EventDeactivated, Fault: fault, Disposition: streams.WireDisposition(point)})
	if point == ckf.InactiveSnapshotInstallFailure {
		l.setPhase(PhaseAwaitingSnapshot) // RetrySnapshot: same lease, next snapshot
		l.askForRetrySnapshot(fault.Detail)
		return
	}
	l.in.Retire() // DeactivateAndSnapshot: ready bit cleared, lease dropped
	switch {
	case l.st.phase == PhaseReplaying && l.st.applied <= l.st.faultAt:
		l.requestSnapshot("the fault recurred on replay before offset "+fmt.Sprint(l.st.faultAt), schemas.ReasonFaultRecovery)
	case l.st.snapStart < 0:
		l.requestSnapshot("no complete snapshot of this lane is known", schemas.ReasonFaultRecovery)
	default:
		l.st.faultAt = l.st.applied
		l.setPhase(PhaseReplaying)
		l.asm.reset()
		l.stats.update(func(s *LaneStatus) { s.Recoveries++ })
		l.log.Info("recovering lane by seek", zap.Int64("snapshot_offset", l.st.snapStart), zap.Int64("fault_offset", l.st.applied))
		l.st.seekEpoch = l.ix.feed.Seek(int32(l.num), l.st.snapStart)
		l.st.seeked = true
	}
}

// panicked handles a panic raised while handling rec. The ingestor's words and scratch are
// uncertain after it, so the lane closes it (ready bit cleared, claim released), claims a fresh
// one, and recovers as from an uncertain write (ConsumerWorkerFailureMidApply, consumer §11).
// If the lane cannot be claimed again it stays out of service and says so: that is a bug, and
// the process keeps answering for the other lanes.
func (l *lane) panicked(rec *kgo.Record, v any) {
	l.log.Error("panic while handling a lane record", zap.Int64("offset", rec.Offset), zap.Any("panic", v),
		zap.ByteString("stack", debug.Stack()))
	l.in.Close()
	in, err := l.ix.g.ClaimLane(l.num)
	if err != nil {
		l.log.Error("lane cannot be claimed again after a panic; it stays out of service", zap.Error(err))
		in = nil
	}
	l.asm.reset()
	fault := &schemas.LaneFault{Kind: schemas.FaultWorkerFailure, Detail: fmt.Sprintf("panic while handling the record: %v", v),
		Offset: schemas.Some(rec.Offset)}
	if in == nil {
		l.event(schemas.LaneEvent{Kind: schemas.EventDeactivated, Fault: fault, Disposition: streams.WireDisposition(ckf.ConsumerWorkerFailureMidApply)})
		l.st.stopped = true // run returns: a closed ingestor must not be driven
		return
	}
	l.in = in
	l.fault(ckf.ConsumerWorkerFailureMidApply, fault)
}

// requestSnapshot asks the relay for a snapshot written after the current position and waits
// for it.
func (l *lane) requestSnapshot(detail string, reason schemas.SnapshotRequestReason) {
	l.st.waitAfter = l.st.applied
	l.setPhase(PhaseWaitingForSnapshot)
	l.asm.reset()
	l.sendSnapshotRequest(detail, reason)
}

// askForRetrySnapshot serves RetrySnapshot (keep the lease, take the next snapshot): an idle
// relay writes its next snapshot only after RelayConfig.SnapshotIdleInterval, so the lane also
// asks for one, unless it asked less than IndexerConfig.RetrySnapshotRequestGap ago (that
// request's snapshot is on its way). The phase is unchanged: any next complete snapshot will do.
func (l *lane) askForRetrySnapshot(detail string) {
	if !l.st.lastRequest.IsZero() && time.Since(l.st.lastRequest) < l.ix.cfg.RetrySnapshotRequestGap {
		return
	}
	l.sendSnapshotRequest(detail, schemas.ReasonFaultRecovery)
}

func (l *lane) sendSnapshotRequest(detail string, reason schemas.SnapshotRequestReason) {
	l.st.lastRequest = time.Now()
	l.ix.out.RequestSnapshot(l.num, l.pool, reason, detail, l.st.applied)
	l.stats.update(func(s *LaneStatus) { s.SnapshotRequests++ })
	l.event(schemas.LaneEvent{Kind: schemas.EventSnapshotRequested})
	l.log.Info("snapshot requested", zap.String("why", detail), zap.Int64("after_offset", l.st.applied))
}

func (l *lane) setPhase(p LanePhase) {
	l.st.phase = p
	l.stats.update(func(s *LaneStatus) { s.Phase = p })
}

// deadLetter copies rec to the dead-letter topic once: a recovery that replays the partition
// reads the same bad record again, and it is not dead-lettered a second time.
func (l *lane) deadLetter(rec *kgo.Record, code schemas.DeadLetterReason, reason string) {
	if rec.Offset <= l.st.deadUpTo {
		return
	}
	l.st.deadUpTo = rec.Offset
	l.ix.out.DeadLetter(rec, code, reason, "indexer/lane")
}

// event produces a lane event for this lane with the lane's current position filled in.
func (l *lane) event(ev schemas.LaneEvent) {
	ev.Lane = l.num
	ev.Pool = streams.WirePool(l.pool)
	if l.st.leaseEpoch > 0 {
		ev.LeaseEpoch = schemas.Some(l.st.leaseEpoch)
	}
	if s, ok := l.in.InstalledSequence(); ok {
		ev.InstalledSequence = schemas.Some(s)
	}
	if l.st.applied >= 0 {
		ev.AppliedOffset = schemas.Some(l.st.applied)
	}
	// The event's high_watermark field carries the last stable offset: the end a
	// read_committed lane can reach, against which its lag is counted.
	if lso := l.ix.feed.LastStableOffset(int32(l.num)); lso >= 0 {
		ev.HighWatermark = schemas.Some(lso)
		ev.LagRecords = schemas.Some(max(lso-(l.st.applied+1), 0))
	}
	if l.st.hasCapacity {
		ev.Capacity = schemas.Some(l.st.capacity)
	}
	l.ix.out.LaneEvent(ev)
}

// noteCapacity takes the capacity state a record of the lane's pool carried. The lane is marked
// incomplete in answers (Indexer.IncompleteLanes) while its DC reports omitted blocks; the
// status table and metrics take the state at the next publish.
func (l *lane) noteCapacity(c schemas.CapacityState) {
	l.st.capacity, l.st.hasCapacity = c, true
	l.ix.setIncomplete(l.bit, l.mayBeShort())
	l.ix.setHolding(l.bit, c.ResidentBlocks > 0)
}

// noteSources takes the sources' health a record of the lane's pool carried. The lane is marked
// incomplete in answers while the DC has sources degraded by lost engine history.
func (l *lane) noteSources(h schemas.SourceHealth) {
	l.st.sources, l.st.hasSources = h, true
	l.ix.setIncomplete(l.bit, l.mayBeShort())
}

// mayBeShort says whether the DC, as the lane's records report it, holds blocks its filter
// lacks: omitted for capacity, or of sources whose engine history was lost.
func (l *lane) mayBeShort() bool {
	return l.st.capacity.OmittedBlocks > 0 || l.st.sources.DegradedSources > 0
}
