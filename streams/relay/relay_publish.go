package relay

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/ckf/producer"
	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/ckf-stream/ckf-stream/streams"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"
)

// laneTxn is the open lane transaction's deltas, in sequence order, as the relay took them from
// the publisher (Publisher.Delta): the relay writes them itself, and the publisher never calls
// back. A delta counts as handed over when taken (the publisher's sequence has advanced), and as
// written only when its transaction commits (commitDeltas, finishCommit). If the commit fails,
// every delta taken is uncertain at once; the relay then abandons this publisher's whole stream
// (markBroken: the publisher is fenced DeliveryUncertain, then a new incarnation + snapshot), so
// the publisher's sequence, which already counted them, is never continued.
type laneTxn struct {
	deltas   []ckf.Delta
	streamed int // deltas[:streamed] are already produced into the open transaction
}

// add appends a delta taken from the publisher; its images are the relay's now.
func (t *laneTxn) add(d ckf.Delta) { t.deltas = append(t.deltas, d) }

// taken empties the transaction once a write committed its deltas.
func (t *laneTxn) taken() {
	clear(t.deltas) // the images belong to the relay; let them go
	t.deltas, t.streamed = t.deltas[:0], 0
}

// takeFirst drops the first n deltas once a write committed them; the rest, which were taken
// while that write ran and never streamed, stay for the next transaction.
func (t *laneTxn) takeFirst(n int) {
	rest := copy(t.deltas, t.deltas[n:])
	clear(t.deltas[rest:])
	t.deltas, t.streamed = t.deltas[:rest], 0
}

// unstreamed returns the deltas not yet produced into the open transaction.
func (t *laneTxn) unstreamed() []ckf.Delta { return t.deltas[t.streamed:] }

// publish takes one publication batch's delta from the publisher and adds it to the open
// transaction, which streams it to the lane. While the stream is broken the batch is dropped: the
// recovery snapshot carries its images.
//
// A batch larger than one lane record carries (LaneWriter.MaxDeltaImages, from the lane topic's
// max.message.bytes) is split into consecutive pieces in the batch's order, each published as
// its own delta: the publisher gives them consecutive sequences, each based on the previous one,
// exactly as for separate batches, and they share the open transaction. A reader applies them in
// order and ends at the batch's state; between two pieces it holds a prefix of the batch.
func (rl *relayLoop) publish(images []ckf.BucketImage) {
	if rl.broken {
		return
	}
	if per := rl.w.MaxDeltaImages(); len(images) > per {
		pieces := streams.SplitPublication(images, per)
		if _, leased := rl.pub.Lease(); leased { // without a lease every piece is discarded
			rl.r.c.splits.add(1)
			rl.r.log.Info("publication split to fit the lane record limit", zap.Int("images", len(images)),
				zap.Int("pieces", len(pieces)), zap.Int("images_per_delta", per), zap.Uint64("sequence", rl.pub.LastSequence()))
		}
		for _, piece := range pieces {
			if !rl.publishDelta(piece) {
				return
			}
		}
		return
	}
	rl.publishDelta(images)
}

// deltaRecordWeight is what a delta record weighs besides its images, for the snapshot byte
// trigger (SnapshotDeltaRatio): the producer identity, sequences, key and record framing, about
// 100 bytes; the trigger needs the order of magnitude, not the byte.
const deltaRecordWeight = 128

// publishDelta publishes images as one delta: the publisher stamps it (Publisher.Delta; without
// a lease it discards the batch), the open transaction takes it and streams it. False when the
// stream broke.
func (rl *relayLoop) publishDelta(images []ckf.BucketImage) bool {
	d, kind, err := rl.pub.Delta(images)
	if err != nil {
		rl.markBroken(err)
		return false
	}
	if kind == producer.Published {
		rl.txn.add(d)
		rl.stream()
		rl.deltasSinceSnap++
		rl.deltaBytesSinceSnap += uint64(len(images))*schemas.ImageSize + deltaRecordWeight
		rl.r.c.deltas.add(1)
		rl.r.c.images.add(uint64(len(images)))
	}
	return true
}

// stream produces the transaction's deltas not yet sent (see LaneWriter.StreamDeltas), so the
// broker takes them while the relay applies the rest of the poll; the commit then waits only for
// the tail. A delta that cannot be streamed stays in the transaction and the commit meets (and
// handles) its error. While the previous transaction is still being committed
// (commitDeltasAsync) nothing is streamed: the writer is busy, and the deltas wait for the next
// transaction.
func (rl *relayLoop) stream() {
	if rl.inflight != nil {
		return
	}
	if ds := rl.txn.unstreamed(); len(ds) > 0 {
		if err := rl.w.StreamDeltas(ds); err != nil {
			rl.r.log.Debug("deltas not streamed; the commit writes them", zap.Error(err))
			return
		}
		rl.txn.streamed = len(rl.txn.deltas)
	}
}

// commitDeltas writes the open transaction's deltas and commits it.
func (rl *relayLoop) commitDeltas() error { return rl.commitDeltasCtx(context.Background()) }

func (rl *relayLoop) commitDeltasCtx(ctx context.Context) error {
	if err := rl.awaitCommit(ctx); err != nil {
		return err
	}
	if rl.broken || len(rl.txn.deltas) == 0 {
		return nil
	}
	if err := rl.fault("deltas"); err != nil {
		return rl.writeFailed("deltas", err)
	}
	if err := rl.w.WriteDeltas(ctx, rl.txn.unstreamed()); err != nil {
		return rl.writeFailed("deltas", err)
	}
	rl.txn.taken()
	rl.wrote()
	rl.notePublished()
	return nil
}

// asyncCommit is a lane transaction that the writer commits on a goroutine of its own while the
// loop applies the next poll (commitDeltasAsync). It holds what the loop records once the commit
// succeeds, as it was when the commit started: later events and deltas belong to the next
// transaction.
type asyncCommit struct {
	done     <-chan error
	cancel   context.CancelFunc
	deltas   int             // laneTxn's first deltas: the ones this transaction holds
	sequence uint64          // the publisher's last sequence, the transaction's last delta
	offsets  map[int32]int64 // the input positions its deltas cover; nil when the window held events
}

// commitDeltasAsync commits the open transaction, like commitDeltas, but returns once the commit
// has started: the writer flushes and ends the transaction on its own goroutine while the loop
// goes on applying the next poll, whose deltas wait in laneTxn for the next transaction. The
// relay's delivery rules are those of commitDeltas: the transaction's deltas are recorded as
// written (sequence, published input positions, lag) only when its commit succeeded
// (finishCommit), a failed commit makes every delta taken so far uncertain (a new incarnation),
// and every other write (snapshot, checkpoint, heartbeat, drain, a window flush) first waits for
// the commit in flight (awaitCommit). A previous commit still in flight is waited for first, so
// at most one transaction is being committed at a time. When the deltas cannot all be streamed
// it falls back to commitDeltas, which meets the error.
func (rl *relayLoop) commitDeltasAsync() error {
	if err := rl.awaitCommit(context.Background()); err != nil {
		return err
	}
	if rl.broken || len(rl.txn.deltas) == 0 {
		return nil
	}
	if err := rl.fault("deltas"); err != nil {
		return rl.writeFailed("deltas", err)
	}
	rl.stream()
	if len(rl.txn.unstreamed()) > 0 {
		return rl.commitDeltas()
	}
	ctx, cancel := context.WithCancel(context.Background())
	done, ok := rl.w.CommitStreamedAsync(ctx)
	if !ok {
		cancel()
		return rl.commitDeltas()
	}
	if gate := rl.r.hooks.commitGate(); gate != nil {
		inner, gated := done, make(chan error, 1)
		go func() {
			err := <-inner
			gate()
			gated <- err
		}()
		done = gated
	}
	c := &asyncCommit{done: done, cancel: cancel, deltas: len(rl.txn.deltas), sequence: rl.pub.LastSequence()}
	if !rl.state.HasPendingPublication() {
		c.offsets = maps.Clone(rl.ck.next)
	}
	rl.inflight = c
	return nil
}

// commitDone is the outcome channel of the commit in flight; nil (never ready) when there is none.
func (rl *relayLoop) commitDone() <-chan error {
	if rl.inflight == nil {
		return nil
	}
	return rl.inflight.done
}

// pollCommit records the outcome of the commit in flight if it has arrived, without waiting: the
// loop checks after every record, so that once the broker committed, the deltas taken since
// are streamed into the next transaction while the rest of the poll is applied, instead of all
// at its end.
func (rl *relayLoop) pollCommit() error {
	if rl.inflight == nil {
		return nil
	}
	select {
	case err := <-rl.inflight.done:
		return rl.finishCommit(err)
	default:
		return nil
	}
}

// awaitCommit waits for the commit in flight, if any, and records its outcome (finishCommit).
// When ctx ends first the commit is cancelled, which makes it fail: its deltas are uncertain.
func (rl *relayLoop) awaitCommit(ctx context.Context) error {
	c := rl.inflight
	if c == nil {
		return nil
	}
	var err error
	select {
	case err = <-c.done:
	case <-ctx.Done():
		c.cancel()
		err = <-c.done
	}
	return rl.finishCommit(err)
}

// finishCommit records the outcome of the commit in flight: on success its deltas leave laneTxn
// and count as written, its input positions as published, and the deltas taken meanwhile are
// streamed into the next transaction; a failure is a failed lane write (writeFailed).
func (rl *relayLoop) finishCommit(err error) error {
	c := rl.inflight
	rl.inflight = nil
	c.cancel()
	if err != nil {
		return rl.writeFailed("deltas", err)
	}
	rl.txn.takeFirst(c.deltas)
	rl.wroteSequence(c.sequence)
	if c.offsets != nil {
		if rl.ck.published == nil {
			rl.ck.published = make(map[int32]int64, len(c.offsets))
		}
		maps.Copy(rl.ck.published, c.offsets)
	}
	if !rl.broken {
		rl.stream()
	}
	return nil
}

// abandonCommit waits for the commit in flight, if any, and drops its outcome: the stream it
// belongs to is being abandoned (a new incarnation replaces the client) or the relay is closing.
func (rl *relayLoop) abandonCommit() {
	if c := rl.inflight; c != nil {
		rl.inflight = nil
		c.cancel()
		<-c.done
	}
}

// fault returns the injected failure of a write, if a test set one.
func (rl *relayLoop) fault(what string) error { return rl.r.hooks.writeFault(what) }

// wrote records a committed transaction that ends at the publisher's last sequence.
func (rl *relayLoop) wrote() { rl.wroteSequence(rl.pub.LastSequence()) }

// wroteSequence records a committed transaction whose last delta has sequence seq.
func (rl *relayLoop) wroteSequence(seq uint64) {
	rl.lastWrite = rl.now()
	rl.r.c.txns.add(1)
	rl.r.c.lastSequence.set(seq)
}

// isFenceError reports whether err says the broker fenced this transactional producer: a newer
// instance with the same transactional id initialised it (its epoch is higher).
func isFenceError(err error) bool {
	return errors.Is(err, kerr.ProducerFenced) || errors.Is(err, kerr.InvalidProducerEpoch)
}

// writeFailed handles a failed lane write.
//
// A fence (PRODUCER_FENCED, INVALID_PRODUCER_EPOCH) says the transactional id's epoch moved past
// this instance's. A newer instance of the pool moves it when it starts, but so can the brokers:
// a commit in flight across a failover of its transaction coordinator or of a partition leader,
// retried after the coordinator ended the transaction, is answered with a fence although no
// other producer exists (seen in the cluster suite, docs/RELIABILITY.md). The answer cannot tell
// the two apart; the pool's claim can (relay_claim.go): the stream is abandoned as after any
// uncertain write, and the recovery reads the latest claim before it initialises the id again. A
// newer instance's claim stops the relay (ErrRelayFenced) without fencing that instance; its own
// makes it recover under a new incarnation.
//
// Anything else makes delivery uncertain: the stream is abandoned and recovery starts at once.
// A write that reached WriteTimeout unanswered (streams.ErrWriteUncertain) is counted and shown
// apart, since it is how a relay with no partition leader left says so.
func (rl *relayLoop) writeFailed(what string, err error) error {
	r := rl.r
	r.c.fenced.set(true)
	cause := failureCause(err)
	r.c.writeFailed(cause)
	r.lastFailure.Store(&writeFailure{write: what, cause: cause, err: err.Error(), at: rl.now()})
	if cause == causeFence {
		rl.fence = err
		r.log.Warn("lane write failed: relay fenced; the pool's latest claim decides (a newer instance's stops it, its own recovers)",
			zap.String("write", what), zap.Uint64("incarnation", rl.identity.Incarnation), zap.String("instance", rl.instance), zap.Error(err))
		rl.markBroken(err)
		return nil
	}
	msg := "lane write failed; delivery uncertain, recovering under a new incarnation"
	if cause == causeTimeout {
		msg = "lane write failed: unanswered within the write timeout; delivery uncertain, recovering under a new incarnation"
	}
	r.log.Error(msg, zap.String("write", what), zap.Uint64("incarnation", rl.identity.Incarnation),
		zap.Duration("write_timeout", rl.cfg.WriteTimeout), zap.Error(err))
	rl.markBroken(err)
	return nil
}

// markBroken abandons the current stream: the publisher is fenced DeliveryUncertain (every delta
// it handed over since the last commit is uncertain), and the first cause is kept for stop's error.
func (rl *relayLoop) markBroken(err error) {
	if rl.uncertain == nil {
		rl.uncertain = fmt.Errorf("streams: relay: delivery uncertain: %w", err)
	}
	if rl.pub != nil {
		rl.pub.MarkDeliveryUncertain()
	}
	rl.r.c.fenced.set(true)
	if !rl.broken {
		rl.broken, rl.retryAt = true, rl.now()
	}
}

// recover starts a new incarnation with a barrier snapshot (also the start-up path). On a
// non-fence failure it schedules the next attempt with exponential backoff (100 ms .. 5 s).
func (rl *relayLoop) recover() error {
	r := rl.r
	reason := snapRecovery
	if !r.c.started.load() {
		reason = snapStart // the start-up snapshot, or a retry of it
	}
	held, err := rl.holdsPool()
	if err != nil {
		return err
	}
	if !held {
		rl.backoff()
		return nil
	}
	if err := rl.newIncarnation(); err != nil {
		return err
	}
	if err := rl.snapshot(reason); err != nil {
		return err
	}
	if rl.broken {
		rl.backoff()
		return nil
	}
	rl.failures = 0
	r.c.fenced.set(false)
	if reason == snapRecovery {
		r.c.rec.add(1)
	}
	return nil
}

// backoff schedules the next recovery attempt after a failed one: 100 ms doubling to 5 s.
func (rl *relayLoop) backoff() {
	rl.failures++
	rl.retryAt = rl.now().Add(min(100*time.Millisecond<<min(rl.failures, 6), 5*time.Second))
}

// newIncarnation replaces the publication path: a fresh transactional client (same
// transactional id), a producer identity with the next incarnation, its publisher (sequence 0,
// no lease yet) and its writer. The lane record limit is read again for each (a topic whose
// max.message.bytes was lowered makes a write fail; the next incarnation takes the new limit).
func (rl *relayLoop) newIncarnation() error {
	r, cfg := rl.r, rl.cfg
	rl.abandonCommit() // the old stream's last transaction: uncertain either way, its client goes
	if rl.laneCl != nil {
		rl.laneCl.Close()
		rl.laneCl = nil
	}
	limit, err := rl.laneRecordLimit()
	if err != nil {
		return err
	}
	ckLimit, err := rl.checkpointRecordLimit()
	if err != nil {
		return err
	}
	cl, err := kgo.NewClient(r.opts.ForRole("relay-lanes", append(streams.LaneWriterClientOpts(),
		kgo.TransactionalID(cfg.TransactionalID), streams.LaneBatchMaxBytes(cfg.Topics.Lanes, limit, cfg.Topics.Checkpoints, ckLimit))...)...)
	if err != nil {
		return fmt.Errorf("streams: relay lane client: %w", err)
	}
	rl.laneCl = cl
	inc := cfg.Incarnation
	if rl.identity.Incarnation != 0 || inc == 0 {
		inc = max(uint64(rl.now().UnixNano()), rl.identity.Incarnation+1, rl.prevInc+1)
	}
	rl.identity = ckf.ProducerIdentity{Pool: cfg.Pool, Incarnation: inc, LayoutGeneration: cfg.LayoutGeneration, Format: rl.state.Format()}
	id := rl.identity
	r.identity.Store(&id)
	r.c.incarnation.set(inc)
	rl.txn.taken()
	rl.uncertain = nil
	rl.pub = producer.NewPublisher(id, 0, nil) // one way: the relay takes its deltas (Delta) and writes them
	if rl.w, err = streams.NewLaneWriter(cl, r.codec, id, streams.LaneWriterConfig{
		LaneTopic: cfg.Topics.Lanes, IndexTopic: cfg.Topics.SnapshotIndex, Lane: cfg.Lane,
		ChunkWords: cfg.ChunkWords, WriteTimeout: cfg.WriteTimeout, Transactional: true, MaxRecordBytes: limit,
	}); err != nil {
		return err // not reached: NewRelay validated every field the writer takes, laneRecordLimit the limit
	}
	rl.w.ReportCapacity(rl.capacityState)
	rl.w.ReportSources(rl.sourceHealth)
	rl.w.ReportAsOf(rl.laneAsOf)
	rl.w.ReportBlockSize(rl.laneBlockSize)
	if rl.w.ChunkWords() < cfg.ChunkWords {
		r.log.Info("snapshot chunks shrunk to fit the lane record limit", zap.Int("chunk_words", rl.w.ChunkWords()),
			zap.Int("configured_chunk_words", cfg.ChunkWords), zap.Int("record_limit", limit))
	}
	rl.epoch = 0
	rl.broken = false
	return nil
}

// snapshot writes a barrier snapshot: the open transaction's deltas and the state's open window
// (the tail, on the old wire lease) are committed first, then the snapshot's chunks and its index
// entry in one transaction. The next delta continues the snapshot's sequence.
func (rl *relayLoop) snapshot(reason string) error {
	r := rl.r
	start := rl.now()
	rl.publishOpenWindow()
	if err := rl.commitDeltas(); err != nil || rl.broken {
		return err
	}
	rl.epoch++
	tail, snap, err := rl.pub.SnapshotAfterBarrierDelta(rl.state, ckf.LaneLease{Consumer: 0, Lane: rl.cfg.Lane, Epoch: rl.epoch})
	switch {
	case errors.Is(err, producer.ErrSequenceExhausted):
		r.log.Warn("sequence space exhausted; continuing under a new incarnation")
		rl.markBroken(err)
		return nil
	case err != nil:
		// A barrier build error leaves the state and the publisher untouched (the tail stays
		// pending): a live stream retries at the next trigger, while a stream without a lease
		// yet (start-up, recovery) must not run on (its batches would be discarded), so it
		// retries as a recovery. Any other error: recover.
		r.log.Error("barrier snapshot failed", zap.Error(err))
		if _, leased := rl.pub.Lease(); !leased || !errors.As(err, new(*ckf.BuildError)) {
			rl.markBroken(err)
		}
		rl.lastSnapshot = rl.now()
		return nil
	}
	if len(tail.Images) > 0 { // none: publishOpenWindow left the barrier an empty window
		rl.txn.add(tail)
	}
	rl.pendingSince = zeroTime
	if err := rl.commitDeltas(); err != nil || rl.broken {
		return err
	}
	err = rl.fault("snapshot")
	var pos streams.SnapshotPosition
	if err == nil {
		pos, err = rl.w.WriteSnapshot(context.Background(), &snap)
	}
	if err != nil {
		return rl.writeFailed("snapshot", err)
	}
	rl.wrote()
	rl.notePublished()
	took := rl.now().Sub(start)
	rl.lastSnapshot = rl.now()
	rl.deltasSinceSnap, rl.deltaBytesSinceSnap = 0, 0
	rl.requestPending = false
	r.c.snapshot(reason, took, 8*len(snap.Buckets))
	rl.updateGauges()
	r.log.Info("snapshot written", zap.String("reason", reason), zap.Uint64("incarnation", rl.identity.Incarnation),
		zap.Uint64("sequence", snap.Sequence), zap.Int64("first_offset", pos.FirstOffset), zap.Int("chunks", pos.Chunks),
		zap.Duration("took", took))
	if !r.c.started.load() {
		r.c.started.set(true)
		close(r.started)
	}
	return nil
}

// heartbeat tells the indexers the relay is alive at its last sequence.
func (rl *relayLoop) heartbeat() error {
	if err := rl.awaitCommit(context.Background()); err != nil || rl.broken {
		return err
	}
	if rl.now().Before(rl.lastWrite.Add(rl.cfg.HeartbeatInterval)) {
		return nil // the commit just awaited was a write
	}
	if err := rl.w.WriteHeartbeat(context.Background(), rl.pub.LastSequence()); err != nil {
		return rl.writeFailed("heartbeat", err)
	}
	rl.wrote()
	rl.r.c.heartbeats.add(1)
	return nil
}

// readLaneIndexEntry reads the compacted snapshot index up to its end at the call (see
// streams.ReadSnapshotIndexTopic) and returns lane's latest entry, if any.
func readLaneIndexEntry(ctx context.Context, adm *kadm.Client, opts []kgo.Opt, codec *schemas.Codec, topic string, lane uint8, log *zap.Logger) (schemas.SnapshotIndexEntry, bool, error) {
	entries, err := streams.ReadSnapshotIndexTopic(ctx, adm, opts, codec, topic, log)
	if err != nil {
		return schemas.SnapshotIndexEntry{}, false, fmt.Errorf("streams: relay: reading the snapshot index: %w", err)
	}
	e, ok := entries[lane]
	return e, ok, nil
}
