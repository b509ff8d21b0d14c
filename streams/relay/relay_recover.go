package relay

import (
	"errors"
	"fmt"
	"time"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/ckf/producer"
	"github.com/ckf-stream/ckf-stream/streams"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"
)

// Failed lane writes and recovery (relay.md, "Failures", "Fences and the pool claim"): a failed
// write abandons the stream (writeFailed, markBroken); recover starts a new incarnation
// (newIncarnation: client, identity, publisher, writer) whose first record is a barrier
// snapshot (relay_snapshot.go).

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
