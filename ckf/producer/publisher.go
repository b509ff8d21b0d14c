package producer

import (
	"github.com/ckf-stream/ckf-stream/ckf"

	"errors"
	"math"
)

// String methods of the enums below are generated from the constants' line
// comments, which are the names logs, errors and metric labels show; run
// make generate after changing a constant.
//go:generate go run golang.org/x/tools/cmd/stringer@v0.52.0 -type=FenceReason -linecomment -output=publisher_string.go

// DeltaSink receives the deltas of Publish, the spec's sink (producer §8.2). Enqueue must
// return nil only if the next owner accepted the complete delta; any error makes delivery
// uncertain and fences the publisher (DeliveryUncertain). The publisher does not retain d after
// Enqueue returns, but d.Images is handed over: the sink may keep it. A caller that writes the
// deltas itself (the relay: its deltas are delivered only when their Kafka transaction commits)
// takes them from Delta or AppendDelta and needs no sink.
type DeltaSink interface {
	Enqueue(d ckf.Delta) error
}

// FenceReason says why a publisher stopped publishing. FenceNone (zero)
// means not fenced.
type FenceReason uint8

const (
	// FenceNone: the publisher is not fenced.
	FenceNone FenceReason = iota // none
	// FenceSequenceExhausted: the sequence reached 2^64-1; only a new
	// producer generation can continue.
	FenceSequenceExhausted // sequence_exhausted
	// FenceDeliveryUncertain: a sink failure left the consumer's state
	// unknown; a new lease + snapshot recovers.
	FenceDeliveryUncertain // delivery_uncertain
	// FenceLeaseStalled: the lease was retired as stalled; a new lease +
	// snapshot recovers.
	FenceLeaseStalled // lease_stalled
)

// ErrFenced matches every *FencedError via errors.Is.
var ErrFenced = errors.New("ckf: publisher fenced")

// ErrSequenceExhausted is returned by SnapshotAfterBarrier when the
// sequence space of this producer generation is exhausted.
var ErrSequenceExhausted = errors.New("ckf: publication sequence exhausted")

// ErrNoSink is returned by Publish and SnapshotAfterBarrier of a publisher built without a sink,
// with no state change: such a publisher hands its deltas out through Delta and
// SnapshotAfterBarrierDelta.
var ErrNoSink = errors.New("ckf: publisher has no delta sink (use Delta and SnapshotAfterBarrierDelta)")

// ErrEmptyBatch is returned by Publish and Delta for an empty batch (a consumer
// treats an empty delta as a fault, so the publisher refuses to send one
// and does not fence; DcState never produces one).
var ErrEmptyBatch = errors.New("ckf: empty publication batch")

// FencedError is Publish's error while fenced. errors.Is(err, ErrFenced)
// matches it; errors.Is(err, ErrSequenceExhausted) matches when Reason is
// FenceSequenceExhausted.
type FencedError struct{ Reason FenceReason }

// Error implements error.
func (e *FencedError) Error() string { return "ckf: publisher fenced: " + e.Reason.String() }

// Is matches ErrFenced, and ErrSequenceExhausted for that reason.
func (e *FencedError) Is(target error) bool {
	return target == ErrFenced || (target == ErrSequenceExhausted && e.Reason == FenceSequenceExhausted)
}

// EnqueueError wraps a sink failure (the publisher is now fenced
// DeliveryUncertain).
type EnqueueError struct{ Err error }

// Error implements error.
func (e *EnqueueError) Error() string { return "ckf: delta enqueue failed: " + e.Err.Error() }

// Unwrap returns the sink's error.
func (e *EnqueueError) Unwrap() error { return e.Err }

// PublishKind distinguishes the two successful publish outcomes.
type PublishKind uint8

const (
	// PublishNoSubscriber: no lease; the batch was discarded and the
	// sequence is unchanged.
	PublishNoSubscriber PublishKind = iota + 1
	// Published: the delta was enqueued at Sequence.
	Published
)

// PublishOutcome is Publish's success result. For PublishNoSubscriber,
// Sequence is the unchanged last sequence and ImageCount is 0.
type PublishOutcome struct {
	Kind       PublishKind
	Sequence   uint64
	ImageCount int
}

// Publisher is DcCkfPublisher (producer §8.2): it stamps DcState batches with the producer
// identity, the current lease and a sequence that is per producer generation (not per lease),
// and enforces the fence rules. Not safe for concurrent use (one per pool, driven by the pool
// actor).
//
// Two ways out, with the same rules: Publish and SnapshotAfterBarrier hand each delta to the
// sink given at construction (the spec's shape, the in-process adapters); Delta, AppendDelta and
// SnapshotAfterBarrierDelta return it to the caller, who writes it (the relay, one way: the
// publisher never calls back into it). The difference is when the sequence moves: Publish
// advances it once the sink took the delta, Delta as it returns the delta, since the caller
// learns whether it was delivered only later (MarkDeliveryUncertain).
type Publisher struct {
	identity ckf.ProducerIdentity
	lease    ckf.LaneLease
	hasLease bool
	last     uint64
	fenced   FenceReason
	sink     DeltaSink
}

// NewPublisher returns a publisher without a lease, unfenced, whose last sequence is
// initialSequence (the relay actor and local adapter use 0). sink may be nil for a publisher
// used only through Delta, AppendDelta and SnapshotAfterBarrierDelta; its Publish and
// SnapshotAfterBarrier then return ErrNoSink.
func NewPublisher(identity ckf.ProducerIdentity, initialSequence uint64, sink DeltaSink) *Publisher {
	return &Publisher{identity: identity, last: initialSequence, sink: sink}
}

// Identity returns the producer identity.
func (p *Publisher) Identity() ckf.ProducerIdentity { return p.identity }

// Lease returns the current lease, if any.
func (p *Publisher) Lease() (ckf.LaneLease, bool) { return p.lease, p.hasLease }

// LastSequence returns the last published (or snapshot) sequence.
func (p *Publisher) LastSequence() uint64 { return p.last }

// Fenced returns the fence reason (FenceNone if not fenced).
func (p *Publisher) Fenced() FenceReason { return p.fenced }

// ready is publish's steps 1-3 (producer §8.2), shared by Publish, Delta and AppendDelta:
// Published when a delta can be stamped now, PublishNoSubscriber when the batch is to be
// discarded, or why neither. It changes nothing but the SequenceExhausted fence; the caller
// builds the delta in place (a ckf.Delta is 160 bytes: no copy on the way) and advances the
// sequence once it is handed over.
func (p *Publisher) ready(images []ckf.BucketImage) (PublishKind, error) {
	if p.fenced != FenceNone {
		return 0, &FencedError{Reason: p.fenced}
	}
	if len(images) == 0 {
		return 0, ErrEmptyBatch
	}
	if !p.hasLease {
		return PublishNoSubscriber, nil
	}
	if p.last == math.MaxUint64 {
		p.fenced = FenceSequenceExhausted
		return 0, &FencedError{Reason: FenceSequenceExhausted}
	}
	return Published, nil
}

// Publish sends one batch to the sink (producer §8.2):
//  1. fenced -> *FencedError;
//  2. no lease -> PublishNoSubscriber, the batch is discarded, sequence
//     unchanged;
//  3. last == 2^64-1 -> fence SequenceExhausted, *FencedError, nothing
//     enqueued;
//  4. enqueue {identity, lease, base=last, seq=last+1, images}; a sink
//     error fences DeliveryUncertain and returns *EnqueueError with the
//     sequence unchanged;
//  5. last = last+1, Published.
//
// An empty batch returns ErrEmptyBatch with no state change (our choice); a publisher without
// a sink returns ErrNoSink with no state change.
func (p *Publisher) Publish(images []ckf.BucketImage) (PublishOutcome, error) {
	if p.sink == nil {
		return PublishOutcome{}, ErrNoSink
	}
	kind, err := p.ready(images)
	if err != nil {
		return PublishOutcome{}, err
	}
	if kind == PublishNoSubscriber {
		return PublishOutcome{Kind: PublishNoSubscriber, Sequence: p.last}, nil
	}
	next := p.last + 1
	if err := p.sink.Enqueue(ckf.Delta{Identity: p.identity, Lease: p.lease, BaseSequence: p.last, Sequence: next, Images: images}); err != nil {
		p.fenced = FenceDeliveryUncertain
		return PublishOutcome{}, &EnqueueError{Err: err}
	}
	p.last = next
	return PublishOutcome{Kind: Published, Sequence: next, ImageCount: len(images)}, nil
}

// Delta is publish (producer §8.2) for a caller that writes the delta itself: steps 1-3 as in
// Publish (fenced -> *FencedError; no lease -> PublishNoSubscriber with the zero delta, the batch
// discarded; last == 2^64-1 -> fence SequenceExhausted, *FencedError), then last = last+1 and
// Published with the delta {identity, lease, base=last, seq=last+1, images}. An empty batch
// returns ErrEmptyBatch with no state change. No sink is called.
//
// The sequence advances as the delta is returned: the delta counts as handed over, so the next
// one is based on it even before it is delivered (a Kafka transaction holds several). The caller
// must deliver the deltas in the order it got them; if it cannot tell whether one reached the
// next owner, it calls MarkDeliveryUncertain, and the stream that delta belonged to is never
// continued (a new lease and barrier snapshot recover, at the advanced sequence, whose words
// include the uncertain delta's images). The delta's Images is images: the caller keeps it. It
// does not allocate.
func (p *Publisher) Delta(images []ckf.BucketImage) (ckf.Delta, PublishKind, error) {
	if kind, err := p.ready(images); err != nil || kind != Published {
		return ckf.Delta{}, kind, err
	}
	p.last++
	return ckf.Delta{Identity: p.identity, Lease: p.lease, BaseSequence: p.last - 1, Sequence: p.last, Images: images}, Published, nil
}

// AppendDelta is Delta for a caller that keeps its deltas in a slice (the relay's open
// transaction): the delta is appended to ds, as strconv.AppendInt appends, and ds is returned
// unchanged when there is none (no lease, or an error). The same rules and the same sequence
// step as Delta; appending in place saves returning a 160-byte ckf.Delta by value. It allocates
// only when ds grows.
func (p *Publisher) AppendDelta(ds []ckf.Delta, images []ckf.BucketImage) ([]ckf.Delta, PublishKind, error) {
	if kind, err := p.ready(images); err != nil || kind != Published {
		return ds, kind, err
	}
	p.last++
	return append(ds, ckf.Delta{Identity: p.identity, Lease: p.lease, BaseSequence: p.last - 1, Sequence: p.last, Images: images}), Published, nil
}

// MarkDeliveryUncertain fences the publisher DeliveryUncertain (producer §8.2): a delta taken
// from Delta, AppendDelta or SnapshotAfterBarrierDelta may not have reached the next owner. Later batches
// return *FencedError until a barrier snapshot under a new lease. A publisher fenced
// SequenceExhausted stays so (only a new producer generation continues it).
func (p *Publisher) MarkDeliveryUncertain() {
	if p.fenced != FenceSequenceExhausted {
		p.fenced = FenceDeliveryUncertain
	}
}

// RetireLease drops the lease without fencing; later batches are
// discarded as NoSubscriber.
func (p *Publisher) RetireLease() { p.hasLease = false; p.lease = ckf.LaneLease{} }

// RetireStalledLease drops the lease and fences LeaseStalled.
func (p *Publisher) RetireStalledLease() {
	p.RetireLease()
	p.fenced = FenceLeaseStalled
}

// SnapshotError wraps a failure of SnapshotAfterBarrier other than
// ErrSequenceExhausted: a barrier build error (*BuildError) or a failed
// old-lease tail publish.
type SnapshotError struct{ Err error }

// Error implements error.
func (e *SnapshotError) Error() string { return "ckf: barrier snapshot failed: " + e.Err.Error() }

// Unwrap returns the cause.
func (e *SnapshotError) Unwrap() error { return e.Err }

// barrier is snapshot_after_barrier's steps 1-2 (producer §8.2), shared by SnapshotAfterBarrier
// and SnapshotAfterBarrierDelta: the state's tail and words.
func (p *Publisher) barrier(state *DcState) (tail []ckf.BucketImage, words []uint64, err error) {
	if p.last == math.MaxUint64 || p.fenced == FenceSequenceExhausted {
		return nil, nil, ErrSequenceExhausted
	}
	tail, words, err = state.BarrierSnapshot()
	if err != nil {
		return nil, nil, &SnapshotError{Err: err}
	}
	return tail, words, nil
}

// install is snapshot_after_barrier's step 5: the new lease, the fence cleared, the snapshot.
func (p *Publisher) install(newLease ckf.LaneLease, words []uint64) ckf.Snapshot {
	p.lease, p.hasLease = newLease, true
	p.fenced = FenceNone
	return ckf.Snapshot{Identity: p.identity, Lease: newLease, Sequence: p.last, Buckets: words}
}

// SnapshotAfterBarrier installs newLease behind a barrier (producer §8.2):
//  1. last == 2^64-1 or fenced SequenceExhausted -> ErrSequenceExhausted
//     (a new producer generation is needed);
//  2. state.BarrierSnapshot(); a build error -> *SnapshotError (the tail
//     stays pending in state);
//  3. not fenced and a tail exists -> Publish(tail) on the OLD lease (no
//     old lease: discarded). On error the new lease is not installed and
//     the error is returned (ErrSequenceExhausted for a rollover, else
//     *SnapshotError wrapping the publish error); the tail has already
//     been drained from state, and a retry finds the publisher fenced and
//     the snapshot words cover it;
//  4. fenced DeliveryUncertain/LeaseStalled -> the tail is dropped;
//  5. lease = newLease, fence cleared; the snapshot carries the (possibly
//     advanced) last sequence, to be continued by last -> last+1.
//
// A publisher without a sink returns ErrNoSink before step 1, with no state change.
func (p *Publisher) SnapshotAfterBarrier(state *DcState, newLease ckf.LaneLease) (ckf.Snapshot, error) {
	if p.sink == nil {
		return ckf.Snapshot{}, ErrNoSink
	}
	tail, words, err := p.barrier(state)
	if err != nil {
		return ckf.Snapshot{}, err
	}
	if p.fenced == FenceNone && len(tail) > 0 {
		if _, err := p.Publish(tail); err != nil {
			if errors.Is(err, ErrSequenceExhausted) {
				return ckf.Snapshot{}, ErrSequenceExhausted
			}
			return ckf.Snapshot{}, &SnapshotError{Err: err}
		}
	}
	return p.install(newLease, words), nil
}

// SnapshotAfterBarrierDelta is SnapshotAfterBarrier for a caller that writes the deltas itself
// (Delta): steps 1, 2, 4 and 5 are the same; in step 3 the tail, if not fenced and one exists,
// is taken with Delta on the OLD lease and returned as tail (no old lease: discarded, and tail
// is the zero delta; a rollover fences SequenceExhausted and returns ErrSequenceExhausted
// without installing the new lease). tail has images only when the barrier published one.
//
// The caller writes tail before the snapshot: the snapshot's sequence continues it. If it
// cannot tell whether tail was delivered, it calls MarkDeliveryUncertain and does not send the
// snapshot; the next barrier, under another lease, recovers (its words include the tail).
func (p *Publisher) SnapshotAfterBarrierDelta(state *DcState, newLease ckf.LaneLease) (tail ckf.Delta, snap ckf.Snapshot, err error) {
	images, words, err := p.barrier(state)
	if err != nil {
		return ckf.Delta{}, ckf.Snapshot{}, err
	}
	if p.fenced == FenceNone && len(images) > 0 {
		d, kind, err := p.Delta(images)
		if err != nil {
			if errors.Is(err, ErrSequenceExhausted) {
				return ckf.Delta{}, ckf.Snapshot{}, ErrSequenceExhausted
			}
			return ckf.Delta{}, ckf.Snapshot{}, &SnapshotError{Err: err}
		}
		if kind == Published {
			tail = d
		}
	}
	return tail, p.install(newLease, words), nil
}

// ExactDrainMarker returns {lease, expected_sequence: last} if a lease
// exists. Send it after a Flush to prove the consumer installed the
// terminal sequence (detects a lost final delta).
func (p *Publisher) ExactDrainMarker() (ckf.DrainMarker, bool) {
	if !p.hasLease {
		return ckf.DrainMarker{}, false
	}
	return ckf.DrainMarker{Lease: p.lease, ExpectedSequence: p.last}, true
}
