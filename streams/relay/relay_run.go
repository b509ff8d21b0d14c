package relay

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/ckf/producer"
	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/ckf-stream/ckf-stream/streams"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"
)

var zeroTime time.Time

// relayLoop is the state of one Run: everything in it is owned by Run's goroutine (the poller
// goroutine only hands fetches over a channel).
type relayLoop struct {
	r   *Relay
	cfg RelayConfig
	now func() time.Time

	state    *producer.DcState
	fullness fullness    // the filter-occupancy warning (relay_fullness.go)
	inCl     *kgo.Client // KV events + control requests (consumer)
	outCl    *kgo.Client // admin requests and dead letters (non-transactional producer)
	out      *streams.Outputs

	// The current incarnation's publication path (replaced by every recovery).
	laneCl   *kgo.Client
	w        *streams.LaneWriter
	pub      *producer.Publisher
	txn      laneTxn // the open lane transaction's deltas (relay_deltas.go)
	identity ckf.ProducerIdentity
	epoch    uint64 // synthetic wire lease epoch, bumped at every snapshot
	prevInc  uint64 // the lane's last indexed incarnation (0 = none)

	// Replay: the KV partitions' ends listed at start. Records below them are replayed; records
	// from them on are live. The replay ends when every partition is read up to its end.
	replaying bool
	replay    *streams.EndOfLog

	// Cadence.
	pendingSince        time.Time // first event of the open publication window (zero: none)
	lastWrite           time.Time
	lastSnapshot        time.Time
	deltasSinceSnap     uint64
	deltaBytesSinceSnap uint64 // the weight of those deltas (16 bytes per image plus a record)
	requestPending      bool
	lastCapacity        uint64

	// Sources left degraded by lost engine history (noteClear): every lane record reports them
	// (sourceHealth). Rebuilt from the KV records read after the checkpoint at start.
	degraded   map[sourceKey]struct{}
	lostClears uint64

	// The block size of each source and the DC's (relay_blocksize.go): every lane record reports
	// it (laneBlockSize). Learned again from the KV records read after the checkpoint at start.
	bs blockSizes

	// Checkpoints and input positions (relay_checkpoint.go).
	ck checkpointState

	// as_of (relay_asof.go): the loop's bookkeeping, what the poller reports, the polls handed
	// over and not yet taken, when the loop finished applying the last poll, and the as_of of
	// the moment the publication window was last empty (stamped while it holds events).
	asOf       *asOfTracker
	watch      pollWatch
	fetchCh    chan polled
	appliedAt  time.Time
	frozenAsOf time.Time

	// Silent engines (relay_silence.go): every decoded KV event's source and time, and when the
	// watch is next evaluated.
	silence        *silenceWatch
	silenceCheckAt time.Time

	// Decode buffers, reused by every KV record (applyRecord): the producer keeps nothing of an
	// event, so one KvEvent and one RouterEvent serve the whole run without allocating.
	kvEvent     schemas.KvEvent
	routerEvent producer.RouterEvent
	// Events applied in the current poll, not yet added to the counters (countApplied).
	pollLive, pollReplayed uint64

	// The lane transaction being committed while the loop goes on (commitDeltasAsync); nil when
	// none is.
	inflight *asyncCommit

	// Failure.
	broken    bool      // the stream is abandoned; a new incarnation must start with a snapshot
	uncertain error     // why it was abandoned, the first cause in this incarnation (markBroken)
	retryAt   time.Time // next recovery attempt
	failures  int       // consecutive failed recovery attempts
	// fence is the fence that broke the stream, until the recovery read the pool's claim
	// (holdsPool); nil otherwise.
	fence error

	// The pool claim (relay_claim.go): this Run's instance id, and whether its claim is written.
	instance string
	claimed  bool

	// The watch for mirrored control topics that did not exist at start (relay_mirrored.go);
	// nil when none is missing.
	mirrorWatch *mirrorWatch
}

// Run runs the relay until ctx ends or a fatal error. Start-up: it checks the lane's ownership
// against the snapshot index, replays the retained KV events of every partition into a fresh
// state without publishing, up to the end (last stable offset) each partition had when Run
// listed it, then writes the start-up snapshot of a new incarnation (Started closes) and goes
// live. The replay ends when every partition is read up to that end, transaction markers
// included, and at no other moment: a slow fetch makes it longer, never shorter; records written
// after the listing are live events. Live: events are applied in partition order and each
// publication batch becomes a delta; the deltas of one poll are committed in one transaction (at
// most MaxDeltasPerTransaction each), in the background while the next poll is applied
// (commitDeltasAsync); snapshots, heartbeats and delayed flushes run on their timers.
//
// Stop: when ctx ends, Run stops reading, publishes the open publication window as a last
// delta (with a last state checkpoint in the same transaction when checkpoints are on and events
// were applied since the previous one, so that the next start replays nothing), writes a drain
// marker expecting the last sequence, and returns nil once both are committed (bounded by
// StopTimeout). Events read but not yet applied are not lost: the next
// incarnation replays them from the log. A relay stopped before its start-up snapshot, or while
// its stream is abandoned (recovering from an uncertain write), writes nothing and returns nil:
// its lane then simply ends without a drain marker, and the next incarnation's snapshot
// supersedes it.
//
// Errors: ErrRelayFenced (the broker fenced this instance: a newer one runs), ErrLaneNotOwned,
// ErrProducerInvariant, a start-up failure (topics missing, broker unreachable; a mirrored
// control topic not created yet is not one, relay_mirrored.go), or the stop's
// write error. A failed lane write is not an error of Run: the relay recovers under a new
// incarnation, retrying with backoff while it cannot write (Ready fails meanwhile).
func (r *Relay) Run(ctx context.Context) error {
	if !r.ran.CompareAndSwap(false, true) {
		return errors.New("streams: relay: Run called twice")
	}
	defer close(r.done)
	rl := &relayLoop{r: r, cfg: r.cfg, now: time.Now, instance: newInstanceID()}
	rl.silence = newSilenceWatch(r.cfg.SilentSourceAfter, r.cfg.ForgetSourceAfter, rl.now())
	rl.ck.lag = streams.LagCommitter{Group: r.cfg.LagGroup, Topic: r.cfg.Topics.KVEvents, Interval: r.cfg.LagCommitInterval, Timeout: r.cfg.WriteTimeout}
	defer rl.close()
	if err := rl.open(ctx); err != nil {
		return err
	}
	return rl.run(ctx)
}

// open builds the state and the input clients, checks the lane, and plans the replay.
func (rl *relayLoop) open(ctx context.Context) error {
	r, cfg := rl.r, rl.cfg
	var err error
	if rl.outCl, err = kgo.NewClient(r.opts.ForRole("relay-outputs", kgo.ProducerLinger(5*time.Millisecond))...); err != nil {
		return fmt.Errorf("streams: relay output client: %w", err)
	}
	if cfg.Topics.DeadLetter != "" {
		rl.out = streams.NewOutputs(rl.outCl, r.codec, 0, streams.OutputTopics{DeadLetter: cfg.Topics.DeadLetter}, r.log)
	}
	adm := kadm.NewClient(rl.outCl)
	// While the brokers settle (leaders not elected yet), the listings wait and say so.
	wait := streams.ListingWait{Log: r.log}

	lanes, err := listPartitions(ctx, adm, wait, cfg.Topics.Lanes)
	if err != nil {
		return err
	}
	if !slices.Contains(lanes, int32(cfg.Lane)) {
		return fmt.Errorf("streams: relay: lane topic %s has no partition %d", cfg.Topics.Lanes, cfg.Lane)
	}
	if cfg.Topics.SnapshotIndex != "" {
		e, ok, err := readLaneIndexEntry(ctx, adm, r.opts.ForRole("relay-snapshot-index"), r.codec, cfg.Topics.SnapshotIndex, cfg.Lane, r.log)
		if err != nil {
			return err
		}
		if ok {
			pool, err := streams.CkfPool(e.Identity.Pool)
			if err != nil || pool != cfg.Pool {
				return fmt.Errorf("%w: the latest snapshot on lane %d was written by pool %v", ErrLaneNotOwned, cfg.Lane, e.Identity.Pool)
			}
			rl.prevInc = e.Identity.Incarnation
		}
	}
	if cfg.Incarnation != 0 && cfg.Incarnation <= rl.prevInc {
		return &streams.ConfigError{Config: "relay", Field: "Incarnation", Reason: fmt.Sprintf("must be above the lane's last indexed incarnation %d, got %d", rl.prevInc, cfg.Incarnation)}
	}

	listedAt := rl.now() // before the listing: every record appended before it is below the ends
	kv, err := wait.ListEndOfLog(ctx, adm, cfg.Topics.KVEvents)
	if err != nil {
		return fmt.Errorf("streams: relay: KV events: %w", err)
	}
	from, err := rl.openState(ctx, adm, kv)
	if err != nil {
		return err
	}
	// Every partition is read from where the state needs it (its log start without a
	// checkpoint): the replayed ones up to their end and on (live), the others from their first
	// live record.
	assign := map[string]map[int32]kgo.Offset{cfg.Topics.KVEvents: {}}
	starts, ends := map[int32]int64{}, map[int32]int64{}
	for _, p := range kv.Partitions() {
		ends[p], _ = kv.End(p)
		starts[p] = from[p]
		if from[p] <= kv.Start(p) {
			assign[cfg.Topics.KVEvents][p] = kgo.NewOffset().AtStart()
		} else {
			assign[cfg.Topics.KVEvents][p] = kgo.NewOffset().At(from[p])
		}
	}
	rl.replay = streams.NewEndOfLog(cfg.Topics.KVEvents, starts, ends)
	rl.asOf = newAsOfTracker(listedAt, starts, ends)
	controls, missing, err := rl.controlTopics(ctx, adm)
	if err != nil {
		return err
	}
	for _, control := range controls {
		ctl, err := listPartitions(ctx, adm, wait, control)
		if err != nil {
			return err
		}
		// Requests written before the input client resolves the end are served by the start-up
		// snapshot, which comes after it. (AtEnd rather than the exact offsets just listed: an
		// exact offset on an empty partition stalled the whole direct consumer in testing.)
		assign[control] = map[int32]kgo.Offset{}
		for _, p := range ctl {
			assign[control][p] = kgo.NewOffset().AtEnd()
		}
	}
	// The end-of-log reader's options: read_committed, and transaction markers delivered as
	// records, so that a KV partition whose log ends with a marker is seen to reach its end.
	// Full fetches (no fetch sessions): every fetch answers every partition of its broker with
	// its last stable offset, also a partition without new records, so an idle partition stays
	// caught up while others are busy (as_of); the watch stamps when fetches arrive.
	rl.inCl, err = kgo.NewClient(r.opts.ForRole("relay-input",
		append([]kgo.Opt{kgo.ConsumePartitions(assign), kgo.DisableFetchSessions(), kgo.WithHooks(&rl.watch)},
			streams.EndOfLogConsumerOpts()...)...)...)
	if err != nil {
		return fmt.Errorf("streams: relay input client: %w", err)
	}
	rl.watchMirroredControl(adm, missing)
	rl.replaying = true
	r.log.Info("relay replaying KV events", zap.String("topic", cfg.Topics.KVEvents),
		zap.Int("partitions", len(rl.replay.Partitions())), zap.Int("partitions_to_replay", rl.replay.Remaining()),
		zap.Uint64("previous_incarnation", rl.prevInc))
	return nil
}

func (rl *relayLoop) close() {
	rl.abandonCommit()   // its goroutine uses laneCl
	rl.stopMirrorWatch() // its goroutine uses inCl and outCl
	if rl.inCl != nil {
		rl.inCl.Close()
	}
	if rl.laneCl != nil {
		rl.laneCl.Close()
	}
	if rl.outCl != nil {
		rl.outCl.Close()
	}
}

// listPartitions returns the partitions of topic, in order (listed with their end offsets,
// which also proves each has a reachable leader). A listing that fails with a retriable Kafka
// error is repeated as wait says (streams.ListingWait).
func listPartitions(ctx context.Context, adm *kadm.Client, wait streams.ListingWait, topic string) ([]int32, error) {
	var lo kadm.ListedOffsets
	err := wait.Retry(ctx, "partitions of "+topic, func() (err error) {
		lo, err = adm.ListEndOffsets(ctx, topic)
		if err == nil {
			err = lo.Error()
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("streams: relay: offsets of %s: %w", topic, err)
	}
	var out []int32
	lo.Each(func(o kadm.ListedOffset) { out = append(out, o.Partition) })
	if len(out) == 0 {
		return nil, fmt.Errorf("streams: relay: %s: %w", topic, streams.ErrNoPartitions)
	}
	slices.Sort(out)
	return out, nil
}

// run is the loop. Each iteration handles one fetch, one timer or one inspection, then checks
// what became due.
func (rl *relayLoop) run(ctx context.Context) error {
	r := rl.r
	fetches := make(chan polled, 1)
	rl.fetchCh = fetches
	pollCtx, stopPoll := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			p := rl.watch.poll(pollCtx, rl.inCl, rl.cfg.MaxPollRecords, rl.now)
			fs := p.fs
			if pollCtx.Err() != nil || fs.IsClientClosed() {
				return
			}
			select {
			case fetches <- p:
			case <-pollCtx.Done():
				return
			}
			if fs.NumRecords() == 0 && len(fs.Errors()) > 0 {
				// A persistent fetch error (a deleted topic, an authorization failure) returns at
				// once on every poll: pace the retries instead of spinning.
				select {
				case <-time.After(250 * time.Millisecond):
				case <-pollCtx.Done():
					return
				}
			}
		}
	}()
	defer func() { stopPoll(); wg.Wait() }()

	if rl.replay.Reached() {
		rl.finishReplay()
	}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		if err := rl.due(); err != nil {
			return err
		}
		var wake <-chan time.Time // nil while nothing is scheduled (the replay)
		if at, ok := rl.nextWake(); ok {
			timer.Reset(max(at.Sub(rl.now()), time.Millisecond))
			wake = timer.C
		}
		select {
		case <-ctx.Done():
			stopPoll()
			wg.Wait()
			return rl.stop()
		case p := <-fetches:
			if err := rl.onFetches(p); err != nil {
				return err
			}
		case err := <-rl.commitDone():
			if err := rl.finishCommit(err); err != nil {
				return err
			}
		case <-wake:
		case req := <-r.inspect:
			req.fn(rl.state, rl.pub)
			close(req.done)
		}
	}
}

// onFetches applies one poll's records in partition order, then commits the deltas they caused.
// Transaction markers (control records, on either topic) only count towards the replay's end.
func (rl *relayLoop) onFetches(p polled) error {
	r := rl.r
	fs := p.fs
	rl.notePoll(p)
	defer func() { rl.appliedAt = rl.now() }()
	fs.EachError(func(t string, p int32, err error) {
		if !errors.Is(err, context.Canceled) {
			r.log.Warn("relay fetch error", zap.String("topic", t), zap.Int32("partition", p), zap.Error(err))
		}
	})
	kv := rl.cfg.Topics.KVEvents
	defer rl.countApplied() // also on a fatal error: the counters show what was applied
	for it := fs.RecordIter(); !it.Done(); {
		rec := it.Next()
		if rec.Topic != kv {
			if !rec.Attrs.IsControl() {
				rl.onControl(rec)
			}
			continue
		}
		live := !rl.replay.Observe(rec) // at or past its partition's start-time end
		if rec.Attrs.IsControl() {
			rl.asOf.Applied(rec.Partition, rec.Offset, rec.Timestamp)
			rl.noteRead(rec)
			continue
		}
		if err := rl.applyRecord(rec, live); err != nil {
			return err
		}
		rl.noteRead(rec)
		if err := rl.pollCommit(); err != nil {
			return err
		}
		if !rl.replaying && len(rl.txn.deltas) >= rl.cfg.MaxDeltasPerTransaction {
			if err := rl.commitDeltas(); err != nil {
				return err
			}
		}
	}
	rl.countApplied()
	if rl.replaying {
		if rl.replay.Reached() {
			rl.finishReplay()
		}
		return nil
	}
	rl.updateGauges()
	return rl.commitDeltasAsync()
}

// onControl handles a control-topic record: a snapshot request for this lane and pool marks a
// snapshot as wanted (coalesced with any other request until it is written).
func (rl *relayLoop) onControl(rec *kgo.Record) {
	r := rl.r
	cr, err := r.codec.DecodeControlRecord(rec.Value)
	if err != nil {
		r.log.Warn("undecodable control record ignored", zap.Int64("offset", rec.Offset), zap.Error(err))
		return
	}
	if cr.Kind != schemas.ControlSnapshotRequest || cr.SnapshotRequest.Lane != rl.cfg.Lane {
		return
	}
	if pool, err := streams.CkfPool(cr.SnapshotRequest.Pool); err != nil || pool != rl.cfg.Pool {
		r.log.Warn("snapshot request for this lane names another pool; ignored",
			zap.Int64("offset", rec.Offset), zap.Any("pool", cr.SnapshotRequest.Pool))
		return
	}
	r.c.requests.add(1)
	if !rl.requestPending {
		r.log.Info("snapshot requested", zap.Uint64("requester", cr.SnapshotRequest.Requester),
			zap.Stringer("reason", cr.SnapshotRequest.Reason), zap.String("detail", cr.SnapshotRequest.Detail))
	}
	rl.requestPending = true
}

// finishReplay ends the replay: the state goes live and the first incarnation starts with its
// start-up snapshot.
func (rl *relayLoop) finishReplay() {
	r := rl.r
	rl.replaying = false
	rl.state.Flush() // closes the replay's window; nothing is materialised
	rl.state.SetPublicationMaterializationEnabled(true)
	rl.lastCapacity = rl.state.Telemetry().CapacityFailures
	r.c.capacity.restate(rl.lastCapacity)
	r.log.Info("relay replay done", zap.Uint64("events", r.c.replayed.load()),
		zap.Uint64("resident_blocks", rl.state.ResidentCount()), zap.Uint64("capacity_omissions", rl.lastCapacity))
	rl.broken, rl.retryAt = true, zeroTime // the start is the first "recovery": new incarnation + snapshot
}

// nextWake is the earliest time something may become due; ok is false while nothing is
// scheduled: during the replay, which only a fetch ends.
func (rl *relayLoop) nextWake() (at time.Time, ok bool) {
	cfg := rl.cfg
	if rl.replaying {
		return time.Time{}, false
	}
	if rl.broken {
		return rl.retryAt, true
	}
	t := rl.lastWrite.Add(cfg.HeartbeatInterval)
	if !rl.pendingSince.IsZero() {
		t = minTime(t, rl.pendingSince.Add(cfg.PublishMaxDelay))
	}
	if due, ok := rl.timedSnapshotAt(); ok {
		t = minTime(t, due)
	}
	if due, ok := rl.nextCheckpointAt(); ok {
		t = minTime(t, due)
	}
	if rl.ck.lag.Pending(rl.ck.published) {
		t = minTime(t, rl.ck.lag.NextAt())
	}
	if rl.requestPending {
		t = minTime(t, rl.lastSnapshot.Add(cfg.SnapshotRequestMinInterval))
	}
	return t, true
}

// timedSnapshotAt is when the time trigger next writes a snapshot: SnapshotInterval after the
// previous one if a delta was published since, SnapshotIdleInterval (0: SnapshotInterval) after
// it otherwise (an idle lane's snapshot would repeat the previous one word for word). ok is
// false when the time trigger is off.
func (rl *relayLoop) timedSnapshotAt() (at time.Time, ok bool) {
	cfg := rl.cfg
	if cfg.SnapshotInterval <= 0 {
		return time.Time{}, false
	}
	if rl.deltasSinceSnap == 0 {
		return rl.lastSnapshot.Add(cfg.idleSnapshotInterval()), true
	}
	return rl.lastSnapshot.Add(cfg.SnapshotInterval), true
}

func (rl *relayLoop) timedSnapshotDue(now time.Time) bool {
	at, ok := rl.timedSnapshotAt()
	return ok && !now.Before(at)
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// due runs whatever is due now: a recovery attempt (the first one writes the start-up
// snapshot), a delayed flush, a snapshot, a heartbeat. Nothing is due during the replay. A
// non-nil error is fatal.
func (rl *relayLoop) due() error {
	now := rl.now()
	cfg := rl.cfg
	if rl.replaying {
		return nil
	}
	rl.checkSilence(now)
	if rl.broken {
		if now.Before(rl.retryAt) {
			return nil
		}
		return rl.recover()
	}
	if !rl.pendingSince.IsZero() && !now.Before(rl.pendingSince.Add(cfg.PublishMaxDelay)) {
		rl.pendingSince = zeroTime
		if images := rl.state.Flush(); len(images) > 0 {
			rl.publish(images)
		}
		if err := rl.commitDeltas(); err != nil || rl.broken {
			return err
		}
	}
	if rl.checkpointDue(now) {
		if err := rl.checkpoint(context.Background()); err != nil || rl.broken {
			return err
		}
	}
	rl.commitLag(false)
	reason := ""
	switch {
	case rl.requestPending && !now.Before(rl.lastSnapshot.Add(cfg.SnapshotRequestMinInterval)):
		reason = snapRequest
	case cfg.SnapshotEveryDeltas > 0 && rl.deltasSinceSnap >= cfg.SnapshotEveryDeltas:
		reason = snapPeriodic
	case cfg.SnapshotDeltaRatio > 0 && float64(rl.deltaBytesSinceSnap) >= cfg.SnapshotDeltaRatio*float64(8*rl.state.BucketCount()):
		reason = snapPeriodic
	case rl.timedSnapshotDue(now):
		reason = snapPeriodic
	}
	if reason != "" {
		if err := rl.snapshot(reason); err != nil || rl.broken {
			return err
		}
	}
	if !now.Before(rl.lastWrite.Add(cfg.HeartbeatInterval)) {
		return rl.heartbeat()
	}
	return nil
}

// stop is the graceful stop: the open window's last delta, then a drain marker expecting the
// last sequence, both committed before it returns.
func (rl *relayLoop) stop() error {
	r := rl.r
	ctx, cancel := context.WithTimeout(context.Background(), rl.cfg.StopTimeout)
	defer cancel()
	if err := rl.awaitCommit(ctx); err != nil {
		return err
	}
	if rl.replaying || rl.broken || rl.pub == nil {
		r.log.Info("relay stopped without a drain marker", zap.Bool("replaying", rl.replaying), zap.Bool("fenced", rl.broken))
		return nil
	}
	if rl.stopCheckpointDue() {
		// The last deltas go out with a last checkpoint: the next start replays nothing.
		if err := rl.checkpoint(ctx); err != nil {
			return err
		}
	} else if images := rl.state.Flush(); len(images) > 0 {
		rl.publish(images)
	}
	if err := rl.commitDeltasCtx(ctx); err != nil {
		return err
	}
	if rl.broken {
		return fmt.Errorf("streams: relay stop: the last deltas were not written: %w", rl.uncertain)
	}
	marker, ok := rl.pub.ExactDrainMarker()
	if !ok {
		return nil
	}
	if err := rl.w.WriteDrainMarker(ctx, marker.ExpectedSequence); err != nil {
		r.c.fenced.set(true)
		return fmt.Errorf("streams: relay stop: drain marker: %w", err)
	}
	if rl.out != nil {
		if err := rl.out.Flush(ctx); err != nil {
			r.log.Warn("dead letters not flushed at stop", zap.Error(err))
		}
	}
	rl.notePublished()
	rl.commitLag(true)
	r.log.Info("relay drained", zap.Uint64("incarnation", rl.identity.Incarnation), zap.Uint64("sequence", marker.ExpectedSequence))
	return nil
}

// capacityState is the filter's capacity state that every lane record carries (LaneWriter.
// ReportCapacity): what the indexers show per lane and use to mark answers that may be short.
// It runs on the loop's goroutine, which owns the state.
func (rl *relayLoop) capacityState() schemas.CapacityState {
	return schemas.CapacityState{
		ResidentBlocks:    rl.state.ResidentCount(),
		OmittedBlocks:     rl.state.OmittedCount(),
		CapacityOmissions: rl.state.LifetimeCapacityOmissions(),
	}
}

// sourceKey is a source of the DC: a worker's data-parallel rank.
type sourceKey struct {
	worker uint64
	rank   uint32
}

// noteClear follows a KvCleared record: one marked with schemas.HeaderLostHistory (a bridge that
// lost engine history cleared the source in its place) leaves the source degraded and is
// counted; any other clear of the source makes it whole again (its engine restarted or cleared).
func (rl *relayLoop) noteClear(rec *kgo.Record, ev *schemas.KvEvent) {
	key := sourceKey{ev.WorkerID, ev.DpRank}
	for _, h := range rec.Headers {
		if h.Key == schemas.HeaderLostHistory {
			if rl.degraded == nil {
				rl.degraded = map[sourceKey]struct{}{}
			}
			rl.degraded[key] = struct{}{}
			rl.lostClears++
			rl.r.log.Warn("a source's engine history was lost: its blocks were cleared (answers on the lane may be short)",
				zap.Uint64("worker_id", ev.WorkerID), zap.Uint32("dp_rank", ev.DpRank), zap.Int("degraded_sources", len(rl.degraded)))
			return
		}
	}
	delete(rl.degraded, key)
}

// sourceHealth is the state of the DC's sources that every lane record carries
// (LaneWriter.ReportSources). It runs on the loop's goroutine.
func (rl *relayLoop) sourceHealth() schemas.SourceHealth {
	return schemas.SourceHealth{DegradedSources: uint64(len(rl.degraded)), LostHistoryClears: rl.lostClears}
}

func (rl *relayLoop) updateGauges() {
	r := rl.r
	res := rl.state.ResidentCount()
	r.c.resident.set(res)
	occupancy := float64(res) / float64(4*rl.state.BucketCount())
	r.metrics.occupancy.Update(occupancy)
	switch crossed, cleared := rl.fullness.observe(occupancy); {
	case crossed > 0:
		r.log.Warn("the DC's filter is filling up: past full it omits the blocks it cannot place, and answers on its lane come out short; raise relay.expected_blocks and indexer.expected_blocks_per_dc together",
			zap.Float64("occupancy", occupancy), zap.Float64("level", crossed), zap.Uint64("resident_blocks", res),
			zap.Uint64("capacity_blocks", 4*rl.state.BucketCount()))
	case cleared:
		r.log.Info("the DC's filter is below 85 % full again", zap.Float64("occupancy", occupancy))
	}
	r.metrics.appliedRecords.Update(float64(rl.ck.events))
}
