package ckf

import "errors"

// String methods of the enums below are generated from the constants' line
// comments, which are the names logs, errors and metric labels show; run
// make generate after changing a constant.
//go:generate go run golang.org/x/tools/cmd/stringer@v0.52.0 -type=FailureDomain,CommitState,FailureAction,FailurePoint -linecomment -output=failure_string.go

// Failure dispositions (producer §9, consumer §11), as data.
//
// Principle: recovery targets the state whose commit became uncertain. A
// consumer lane fault never triggers producer recovery; a suspect producer
// state needs a new producer generation; a healthy producer with an
// uncertain stream needs a new lease plus a snapshot; a capacity omission
// needs nothing.

// FailureDomain says which state a failure concerns. NoRecoveryDomain (the
// zero value) only appears as FailureDisposition.RecoveryDomain and means
// "no recovery needed" (Rust's None).
type FailureDomain uint8

const (
	// NoRecoveryDomain: no recovery action is required.
	NoRecoveryDomain FailureDomain = iota // none
	// DomainProducerCore: the exact per-DC producer state.
	DomainProducerCore // producer_core
	// DomainConsumerLane: one consumer lane of the transposed table.
	DomainConsumerLane // consumer_lane
)

// CommitState says what is known about the state after the failure.
type CommitState uint8

const (
	// CommitKnownUnchanged: nothing was written.
	CommitKnownUnchanged CommitState = iota + 1 // known_unchanged
	// CommitExactCommittedPhysicalOmitted (G3): lineage and ownership were
	// committed exactly; only the physical fingerprint was omitted.
	CommitExactCommittedPhysicalOmitted // exact_committed_physical_omitted
	// CommitUncertain: an unknown subset of writes happened.
	CommitUncertain // uncertain
)

// FailureAction is what the owner of the failing component must do.
type FailureAction uint8

const (
	// ActionContinueCapacityOmission: keep going; the omission is counted.
	ActionContinueCapacityOmission FailureAction = iota + 1 // continue_capacity_omission
	// ActionReportResourceFailure: report; nothing was committed.
	ActionReportResourceFailure // report_resource_failure
	// ActionRejectSource: reject the offending source's event.
	ActionRejectSource // reject_source
	// ActionFenceAndRebuildProducer: fence the stream, new producer generation.
	ActionFenceAndRebuildProducer // fence_and_rebuild_producer
	// ActionDeactivateAndSnapshot: retire the lane; new lease + snapshot.
	ActionDeactivateAndSnapshot // deactivate_and_snapshot
	// ActionRetrySnapshot: the lane was not ready; retry the snapshot.
	ActionRetrySnapshot // retry_snapshot
)

// FailurePoint is CkfFailurePoint: where a failure happened (seven points).
type FailurePoint uint8

const (
	// BoundedRelocationFailure: an insertion exhausted max_kicks and rolled
	// back (producer capacity omission).
	BoundedRelocationFailure FailurePoint = iota + 1 // bounded_relocation_failure
	// PrecommitAllocationFailure: a reservation failed before any write.
	PrecommitAllocationFailure // precommit_allocation_failure
	// SourceProtocolFailure: a source sent an invalid event.
	SourceProtocolFailure // source_protocol_failure
	// PrewriteInvariantMismatch: producer state found inconsistent before a
	// write.
	PrewriteInvariantMismatch // prewrite_invariant_mismatch
	// ConsumerGapOrMalformedBeforeWrite: a current-lease input of a ready
	// lane was rejected before any write (gap, identity, malformed images,
	// snapshot-while-ready, drain mismatch, saturation).
	ConsumerGapOrMalformedBeforeWrite // consumer_gap_or_malformed_before_write
	// ConsumerWorkerFailureMidApply: a consumer worker failed (panic,
	// disconnect, lag-age violation, control timeout) possibly mid-apply.
	ConsumerWorkerFailureMidApply // consumer_worker_failure_mid_apply
	// InactiveSnapshotInstallFailure: a snapshot for a not-ready lane failed
	// validation (identity or size).
	InactiveSnapshotInstallFailure // inactive_snapshot_install_failure
)

// FailurePoints lists the seven points in table order.
var FailurePoints = [...]FailurePoint{
	BoundedRelocationFailure,
	PrecommitAllocationFailure,
	SourceProtocolFailure,
	PrewriteInvariantMismatch,
	ConsumerGapOrMalformedBeforeWrite,
	ConsumerWorkerFailureMidApply,
	InactiveSnapshotInstallFailure,
}

// FailureDisposition is CkfFailureDisposition. RecoveryDomain is
// NoRecoveryDomain when no recovery is needed.
type FailureDisposition struct {
	Domain         FailureDomain
	Commit         CommitState
	RecoveryDomain FailureDomain
	Action         FailureAction
}

// dispositions is the producer §9 table with the G3 commit state for
// BoundedRelocationFailure (G2 had CommitKnownUnchanged there).
var dispositions = [...]FailureDisposition{
	BoundedRelocationFailure:          {DomainProducerCore, CommitExactCommittedPhysicalOmitted, NoRecoveryDomain, ActionContinueCapacityOmission},
	PrecommitAllocationFailure:        {DomainProducerCore, CommitKnownUnchanged, NoRecoveryDomain, ActionReportResourceFailure},
	SourceProtocolFailure:             {DomainProducerCore, CommitKnownUnchanged, NoRecoveryDomain, ActionRejectSource},
	PrewriteInvariantMismatch:         {DomainProducerCore, CommitKnownUnchanged, DomainProducerCore, ActionFenceAndRebuildProducer},
	ConsumerGapOrMalformedBeforeWrite: {DomainConsumerLane, CommitKnownUnchanged, DomainConsumerLane, ActionDeactivateAndSnapshot},
	ConsumerWorkerFailureMidApply:     {DomainConsumerLane, CommitUncertain, DomainConsumerLane, ActionDeactivateAndSnapshot},
	InactiveSnapshotInstallFailure:    {DomainConsumerLane, CommitKnownUnchanged, DomainConsumerLane, ActionRetrySnapshot},
}

// DispositionOf returns the disposition of p. An undefined point returns
// the zero FailureDisposition.
func DispositionOf(p FailurePoint) FailureDisposition {
	if int(p) < len(dispositions) {
		return dispositions[p]
	}
	return FailureDisposition{}
}

// FailurePointOfEventError maps a producer event error to its failure point
// as the relay actor does (producer §8.4): CapacityExhausted ->
// BoundedRelocationFailure; AllocationFailed -> PrecommitAllocationFailure;
// IndexerInvariantViolation -> PrewriteInvariantMismatch; everything else
// (OwnershipDegreeOverflow, ParentBlockNotFound, BlockNotFound,
// InvalidBlockSequence, UnsupportedResidencyDomain, unknown errors) ->
// SourceProtocolFailure. A nil error has no failure point (ok == false).
func FailurePointOfEventError(err error) (p FailurePoint, ok bool) {
	if err == nil {
		return 0, false
	}
	var ee *EventError
	if errors.As(err, &ee) {
		switch ee.Kind {
		case EventCapacityExhausted:
			return BoundedRelocationFailure, true
		case EventAllocationFailed:
			return PrecommitAllocationFailure, true
		case EventIndexerInvariantViolation:
			return PrewriteInvariantMismatch, true
		}
		return SourceProtocolFailure, true
	}
	if errors.Is(err, ErrBuildAllocationFailed) {
		return PrecommitAllocationFailure, true
	}
	return SourceProtocolFailure, true
}

// FaultCategory is the relay actor's fault category for producer actions.
type FaultCategory uint8

const (
	// FaultResource: ReportResourceFailure.
	FaultResource FaultCategory = iota + 1
	// FaultSourceProtocol: RejectSource.
	FaultSourceProtocol
	// FaultProducerInvariant: FenceAndRebuildProducer and
	// ContinueCapacityOmission.
	FaultProducerInvariant
)

// FaultCategory returns the actor fault category of a producer action;
// consumer actions are unreachable from producer events (ok == false).
func (a FailureAction) FaultCategory() (c FaultCategory, ok bool) {
	switch a {
	case ActionReportResourceFailure:
		return FaultResource, true
	case ActionRejectSource:
		return FaultSourceProtocol, true
	case ActionFenceAndRebuildProducer, ActionContinueCapacityOmission:
		return FaultProducerInvariant, true
	}
	return 0, false
}
