package ckf

import (
	"errors"
	"strconv"
)

// String methods of the enums below are generated from the constants' line
// comments, which are the names logs, errors and metric labels show; run
// make generate after changing a constant.
//go:generate go run golang.org/x/tools/cmd/stringer@v0.52.0 -type=BuildErrorKind,EventErrorKind -linecomment -output=errors_string.go

// ErrInvalidBucketCount is returned (wrapped) by NewAddressing for a bucket
// count that is not a power of two in 2..=2^32.
var ErrInvalidBucketCount = errors.New("ckf: invalid bucket count")

// BuildErrorKind enumerates CkfBuildError (producer §5.3, G3).
type BuildErrorKind uint8

const (
	// BuildExpectedCapacityZero: expected_blocks_per_dc == 0.
	BuildExpectedCapacityZero BuildErrorKind = iota + 1 // expected capacity is zero
	// BuildInvalidMaxKicks: max_kicks outside 1..=MaxKicks (Value, Maximum set).
	BuildInvalidMaxKicks // invalid max kicks
	// BuildInvalidVerificationWindow: verification window outside
	// 1..=MaxVerificationWindow (Value set).
	BuildInvalidVerificationWindow // invalid verification window
	// BuildInvalidPublishEveryNEvents: publish_every_n_events == 0.
	BuildInvalidPublishEveryNEvents // invalid publish_every_n_events
	// BuildCapacityOverflow: the bucket count or byte size overflowed.
	BuildCapacityOverflow // capacity overflow
	// BuildAllocationFailed: a (bounded) allocation was refused.
	BuildAllocationFailed // allocation failed
)

// BuildError is CkfBuildError. Value carries the offending value of
// InvalidMaxKicks / InvalidVerificationWindow; Maximum carries the bound of
// InvalidMaxKicks. errors.Is matches any *BuildError of the same Kind, so
// errors.Is(err, ErrInvalidMaxKicks) works for every value; a
// BuildAllocationFailed error also matches ErrAllocationFailed.
type BuildError struct {
	Kind    BuildErrorKind
	Value   uint64
	Maximum uint64
}

// Error implements error.
func (e *BuildError) Error() string {
	switch e.Kind {
	case BuildInvalidMaxKicks:
		return "ckf: invalid max kicks " + strconv.FormatUint(e.Value, 10) + " (must be 1..=" + strconv.FormatUint(e.Maximum, 10) + ")"
	case BuildInvalidVerificationWindow:
		return "ckf: invalid verification window " + strconv.FormatUint(e.Value, 10) + " (must be 1..=" + strconv.Itoa(MaxVerificationWindow) + ")"
	}
	return "ckf: " + e.Kind.String()
}

// Is matches a *BuildError of the same kind (values ignored) and, for
// BuildAllocationFailed, the event sentinel ErrAllocationFailed.
func (e *BuildError) Is(target error) bool {
	switch t := target.(type) {
	case *BuildError:
		return t.Kind == e.Kind
	case *EventError:
		return e.Kind == BuildAllocationFailed && t.Kind == EventAllocationFailed
	}
	return false
}

// Sentinels for errors.Is against CkfBuildError kinds.
var (
	ErrExpectedCapacityZero           error = &BuildError{Kind: BuildExpectedCapacityZero}
	ErrInvalidMaxKicks                error = &BuildError{Kind: BuildInvalidMaxKicks, Maximum: MaxKicks}
	ErrBuildInvalidVerificationWindow error = &BuildError{Kind: BuildInvalidVerificationWindow}
	ErrInvalidPublishEveryNEvents     error = &BuildError{Kind: BuildInvalidPublishEveryNEvents}
	ErrCapacityOverflow               error = &BuildError{Kind: BuildCapacityOverflow}
	ErrBuildAllocationFailed          error = &BuildError{Kind: BuildAllocationFailed}
)

// EventErrorKind enumerates KvCacheEventError (producer §5.4).
type EventErrorKind uint8

const (
	// EventParentBlockNotFound: a store's parent is not in the source lineage.
	EventParentBlockNotFound EventErrorKind = iota + 1 // parent block not found
	// EventBlockNotFound: a referenced block is unknown (kept for parity;
	// the G3 producer reports unknown removals as counts, not errors).
	EventBlockNotFound // block not found
	// EventInvalidBlockSequence: positional/remap/ordering violation.
	EventInvalidBlockSequence // invalid block sequence
	// EventCapacityExhausted: a bounded insertion was omitted. It does not
	// prove the table is full; lineage and ownership were still committed.
	EventCapacityExhausted // capacity exhausted
	// EventAllocationFailed: a pre-commit reservation failed; nothing was
	// committed.
	EventAllocationFailed // allocation failed
	// EventOwnershipDegreeOverflow: an owner count would exceed 2^32-1.
	EventOwnershipDegreeOverflow // ownership degree overflow
	// EventIndexerInvariantViolation: internal state disagrees with itself.
	EventIndexerInvariantViolation // indexer invariant violation
	// EventUnsupportedResidencyDomain: the residency domain is unknown or
	// invalid for the event; the event was rejected with no state change.
	EventUnsupportedResidencyDomain // unsupported residency domain
)

// EventError is KvCacheEventError. errors.Is matches any *EventError of the
// same Kind (Detail ignored).
type EventError struct {
	Kind   EventErrorKind
	Detail string
}

// Error implements error.
func (e *EventError) Error() string {
	if e.Detail != "" {
		return "ckf: " + e.Kind.String() + ": " + e.Detail
	}
	return "ckf: " + e.Kind.String()
}

// Is matches a *EventError of the same kind.
func (e *EventError) Is(target error) bool {
	t, ok := target.(*EventError)
	return ok && t.Kind == e.Kind
}

// Sentinels for errors.Is against KvCacheEventError kinds.
var (
	ErrParentBlockNotFound        error = &EventError{Kind: EventParentBlockNotFound}
	ErrBlockNotFound              error = &EventError{Kind: EventBlockNotFound}
	ErrInvalidBlockSequence       error = &EventError{Kind: EventInvalidBlockSequence}
	ErrCapacityExhausted          error = &EventError{Kind: EventCapacityExhausted}
	ErrAllocationFailed           error = &EventError{Kind: EventAllocationFailed}
	ErrOwnershipDegreeOverflow    error = &EventError{Kind: EventOwnershipDegreeOverflow}
	ErrIndexerInvariantViolation  error = &EventError{Kind: EventIndexerInvariantViolation}
	ErrUnsupportedResidencyDomain error = &EventError{Kind: EventUnsupportedResidencyDomain}
)

// NewEventError returns an *EventError of kind k with detail.
func NewEventError(k EventErrorKind, detail string) *EventError {
	return &EventError{Kind: k, Detail: detail}
}
