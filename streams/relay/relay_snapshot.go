package relay

import (
	"context"
	"errors"
	"fmt"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/ckf/producer"
	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/ckf-stream/ckf-stream/streams"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"
)

// The lane's records besides deltas: barrier snapshots (the open window published first, then
// the barrier's chunks and index entry) and heartbeats. The drain marker of a graceful stop is
// written by stop (relay_run.go).

// publishOpenWindow publishes the state's open publication window, split like any publication,
// before a barrier snapshot. The spec's barrier (Publisher.SnapshotAfterBarrier) would publish
// it as the tail, in one delta whatever its size; published here, on the same wire lease and in
// the same order (nothing is applied between this drain and the barrier's copy of the words),
// it leaves the barrier an empty tail. Without a lease (start-up, recovery) the publisher
// discards it exactly as the barrier would.
func (rl *relayLoop) publishOpenWindow() {
	if rl.broken {
		return
	}
	if images := rl.state.Flush(); len(images) > 0 {
		rl.publish(images)
	}
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
