package relay

import (
	"context"
	"maps"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/ckf/producer"
	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/ckf-stream/ckf-stream/streams"
	"go.uber.org/zap"
)

// The delta path, one way and top to bottom: applyRecord (relay_events.go) applies a KV event
// to the state (producer.DcState.ApplyEvent), which returns the absolute images of the window
// the event closed; publish splits them to the lane record limit and, for each piece, has the
// publisher append its delta to the open transaction (producer.Publisher.AppendDelta: identity,
// wire lease, base and sequence, producer §8.2; laneTxn), which streams it to the lane
// (streams.LaneWriter.StreamDeltas); the end of the poll commits the transaction
// (commitDeltasAsync), and only a committed transaction counts as written. Nothing calls back
// into the relay. Failed writes and recovery: relay_recover.go; snapshots and heartbeats:
// relay_snapshot.go.

// laneTxn is the open lane transaction's deltas, in sequence order, as the publisher appended
// them (Publisher.AppendDelta, and a barrier's tail from SnapshotAfterBarrierDelta): the relay
// writes them itself, and the publisher never calls back. A delta counts as handed over when taken (the publisher's sequence has advanced), and as
// written only when its transaction commits (commitDeltas, finishCommit). If the commit fails,
// every delta taken is uncertain at once; the relay then abandons this publisher's whole stream
// (markBroken: the publisher is fenced DeliveryUncertain, then a new incarnation + snapshot), so
// the publisher's sequence, which already counted them, is never continued.
type laneTxn struct {
	deltas   []ckf.Delta
	streamed int // deltas[:streamed] are already produced into the open transaction
}

// add appends a delta taken from the publisher (a barrier's tail); its images are the relay's now.
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

// publish has the publisher stamp one publication batch's delta into the open transaction,
// which streams it to the lane. While the stream is broken the batch is dropped: the
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

// publishDelta publishes images as one delta: the publisher stamps it and appends it to the
// open transaction (Publisher.AppendDelta; without a lease it discards the batch), which streams
// it. False when the stream broke.
func (rl *relayLoop) publishDelta(images []ckf.BucketImage) bool {
	var kind producer.PublishKind
	var err error
	rl.txn.deltas, kind, err = rl.pub.AppendDelta(rl.txn.deltas, images)
	if err != nil {
		rl.markBroken(err)
		return false
	}
	if kind == producer.Published {
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
