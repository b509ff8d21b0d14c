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

// DeltaSink receives the publisher's deltas. Enqueue must return nil only
// if the next owner accepted the complete delta; any error makes delivery
// uncertain and fences the publisher (DeliveryUncertain). The publisher
// does not retain d after Enqueue returns, but d.Images is handed over:
// the sink may keep it.
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

// ErrEmptyBatch is returned by Publish for an empty batch (a consumer
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

// Publisher is DcCkfPublisher (producer §8.2): it stamps DcState batches with the
// producer identity, the current lease and a sequence that is per producer
// generation (not per lease), and enforces the fence rules. Not safe for
// concurrent use (one per pool, driven by the pool actor).
type Publisher struct {
	identity ckf.ProducerIdentity
	lease    ckf.LaneLease
	hasLease bool
	last     uint64
	fenced   FenceReason
	sink     DeltaSink
}

// NewPublisher returns a publisher without a lease, unfenced, whose last
// sequence is initialSequence (the relay actor and local adapter use 0).
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

// Publish sends one batch (producer §8.2):
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
// An empty batch returns ErrEmptyBatch with no state change (our choice).
func (p *Publisher) Publish(images []ckf.BucketImage) (PublishOutcome, error) {
	if p.fenced != FenceNone {
		return PublishOutcome{}, &FencedError{Reason: p.fenced}
	}
	if len(images) == 0 {
		return PublishOutcome{}, ErrEmptyBatch
	}
	if !p.hasLease {
		return PublishOutcome{Kind: PublishNoSubscriber, Sequence: p.last}, nil
	}
	if p.last == math.MaxUint64 {
		p.fenced = FenceSequenceExhausted
		return PublishOutcome{}, &FencedError{Reason: FenceSequenceExhausted}
	}
	next := p.last + 1
	d := ckf.Delta{Identity: p.identity, Lease: p.lease, BaseSequence: p.last, Sequence: next, Images: images}
	if err := p.sink.Enqueue(d); err != nil {
		p.fenced = FenceDeliveryUncertain
		return PublishOutcome{}, &EnqueueError{Err: err}
	}
	p.last = next
	return PublishOutcome{Kind: Published, Sequence: next, ImageCount: len(images)}, nil
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
func (p *Publisher) SnapshotAfterBarrier(state *DcState, newLease ckf.LaneLease) (ckf.Snapshot, error) {
	if p.last == math.MaxUint64 || p.fenced == FenceSequenceExhausted {
		return ckf.Snapshot{}, ErrSequenceExhausted
	}
	tail, words, err := state.BarrierSnapshot()
	if err != nil {
		return ckf.Snapshot{}, &SnapshotError{Err: err}
	}
	if p.fenced == FenceNone && len(tail) > 0 {
		if _, err := p.Publish(tail); err != nil {
			if errors.Is(err, ErrSequenceExhausted) {
				return ckf.Snapshot{}, ErrSequenceExhausted
			}
			return ckf.Snapshot{}, &SnapshotError{Err: err}
		}
	}
	p.lease, p.hasLease = newLease, true
	p.fenced = FenceNone
	return ckf.Snapshot{Identity: p.identity, Lease: newLease, Sequence: p.last, Buckets: words}, nil
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
