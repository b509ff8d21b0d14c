package ckf

import (
	"errors"
	"testing"
)

// Failure disposition behaviours 48–49 and the full producer §9 / consumer §11
// table (G3 commit state for BoundedRelocationFailure).

func TestFailureDispositionTable(t *testing.T) {
	want := map[FailurePoint]FailureDisposition{
		BoundedRelocationFailure:          {DomainProducerCore, CommitExactCommittedPhysicalOmitted, NoRecoveryDomain, ActionContinueCapacityOmission},
		PrecommitAllocationFailure:        {DomainProducerCore, CommitKnownUnchanged, NoRecoveryDomain, ActionReportResourceFailure},
		SourceProtocolFailure:             {DomainProducerCore, CommitKnownUnchanged, NoRecoveryDomain, ActionRejectSource},
		PrewriteInvariantMismatch:         {DomainProducerCore, CommitKnownUnchanged, DomainProducerCore, ActionFenceAndRebuildProducer},
		ConsumerGapOrMalformedBeforeWrite: {DomainConsumerLane, CommitKnownUnchanged, DomainConsumerLane, ActionDeactivateAndSnapshot},
		ConsumerWorkerFailureMidApply:     {DomainConsumerLane, CommitUncertain, DomainConsumerLane, ActionDeactivateAndSnapshot},
		InactiveSnapshotInstallFailure:    {DomainConsumerLane, CommitKnownUnchanged, DomainConsumerLane, ActionRetrySnapshot},
	}
	if len(FailurePoints) != 7 {
		t.Fatal("seven failure points")
	}
	for _, p := range FailurePoints {
		if DispositionOf(p) != want[p] {
			t.Errorf("%v: %+v, want %+v", p, DispositionOf(p), want[p])
		}
	}
	if DispositionOf(0) != (FailureDisposition{}) || DispositionOf(99) != (FailureDisposition{}) {
		t.Fatal("undefined points")
	}
}

func TestBehaviour48_CapacityDispositionAndMidApply(t *testing.T) {
	d := DispositionOf(BoundedRelocationFailure)
	if d.RecoveryDomain != NoRecoveryDomain || d.Action != ActionContinueCapacityOmission {
		t.Fatalf("capacity %+v", d)
	}
	m := DispositionOf(ConsumerWorkerFailureMidApply)
	if m.Commit != CommitUncertain || m.Domain != DomainConsumerLane {
		t.Fatalf("mid-apply %+v", m)
	}
}

func TestBehaviour49_CapacityVsAllocationActions(t *testing.T) {
	c, a := DispositionOf(BoundedRelocationFailure), DispositionOf(PrecommitAllocationFailure)
	if c.Action == a.Action || a.Commit != CommitKnownUnchanged {
		t.Fatalf("capacity %+v allocation %+v", c, a)
	}
}

func TestEventErrorFailurePointMapping(t *testing.T) {
	for err, want := range map[error]FailurePoint{
		ErrCapacityExhausted:                       BoundedRelocationFailure,
		ErrAllocationFailed:                        PrecommitAllocationFailure,
		ErrBuildAllocationFailed:                   PrecommitAllocationFailure,
		ErrOwnershipDegreeOverflow:                 SourceProtocolFailure,
		ErrParentBlockNotFound:                     SourceProtocolFailure,
		ErrBlockNotFound:                           SourceProtocolFailure,
		ErrInvalidBlockSequence:                    SourceProtocolFailure,
		ErrIndexerInvariantViolation:               PrewriteInvariantMismatch,
		ErrUnsupportedResidencyDomain:              SourceProtocolFailure,
		errors.New("anything else"):                SourceProtocolFailure,
		NewEventError(EventCapacityExhausted, "x"): BoundedRelocationFailure,
	} {
		if p, ok := FailurePointOfEventError(err); !ok || p != want {
			t.Errorf("%v -> %v, want %v", err, p, want)
		}
	}
	if _, ok := FailurePointOfEventError(nil); ok {
		t.Fatal("nil error")
	}
	for a, want := range map[FailureAction]FaultCategory{
		ActionReportResourceFailure:    FaultResource,
		ActionRejectSource:             FaultSourceProtocol,
		ActionFenceAndRebuildProducer:  FaultProducerInvariant,
		ActionContinueCapacityOmission: FaultProducerInvariant,
	} {
		if c, ok := a.FaultCategory(); !ok || c != want {
			t.Errorf("%v -> %v", a, c)
		}
	}
	if _, ok := ActionDeactivateAndSnapshot.FaultCategory(); ok {
		t.Fatal("consumer actions are unreachable from producer events")
	}
}
