package index

import (
	"github.com/ckf-stream/ckf-stream/ckf"

	"errors"
	"strconv"
)

// String methods of the enums below are generated from the constants' line
// comments, which are the names logs, errors and metric labels show; run
// make generate after changing a constant.
//go:generate go run golang.org/x/tools/cmd/stringer@v0.52.0 -type=OutcomeKind,FaultKind,AssignmentErrorKind -linecomment -output=lane_fault_string.go

// Outcomes, lane faults and assignment errors of the lane ingestor (consumer
// §3.4). All are plain values: reporting an outcome never allocates.

// OutcomeKind enumerates IngestOutcome.
type OutcomeKind uint8

const (
	// OutcomeSnapshotInstalled: a snapshot was installed and the lane is
	// ready at Sequence.
	OutcomeSnapshotInstalled OutcomeKind = iota + 1 // snapshot_installed
	// OutcomeDeltaApplied: a delta moved the lane to Sequence; Images words
	// were stored.
	OutcomeDeltaApplied // delta_applied
	// OutcomeIgnoredForeignLease: the input's lease is not the lane's
	// current lease (or the lane is unassigned). Nothing changed.
	OutcomeIgnoredForeignLease // ignored_foreign_lease
	// OutcomeIgnoredStaleOrDuplicate: sequence <= InstalledSequence on a
	// ready lane. Nothing changed; the payload was not validated.
	OutcomeIgnoredStaleOrDuplicate // ignored_stale_or_duplicate
	// OutcomeDrainAcknowledged: the lane is ready at exactly the marker's
	// expected sequence (InstalledSequence).
	OutcomeDrainAcknowledged // drain_acknowledged
	// OutcomeAwaitingSnapshot: a current-lease delta on a not-ready lane
	// (ignored), or, in the ingestion pool, a snapshot whose words were
	// written but whose activation was refused by the admission guard.
	OutcomeAwaitingSnapshot // awaiting_snapshot
	// OutcomeLaneDeactivated: the input was rejected before any write; the
	// lane is not ready, the lease is kept, Fault says why.
	OutcomeLaneDeactivated // lane_deactivated
)

// IngestOutcome is the result of one ingestor input. Fields beyond Kind are
// meaningful only for the kinds noted.
type IngestOutcome struct {
	Kind OutcomeKind
	// Sequence: SnapshotInstalled, DeltaApplied.
	Sequence uint64
	// Images: DeltaApplied (number of words stored).
	Images int
	// InstalledSequence: IgnoredStaleOrDuplicate, DrainAcknowledged.
	InstalledSequence uint64
	// Fault: LaneDeactivated.
	Fault LaneFault
}

// String renders the outcome for logs.
func (o IngestOutcome) String() string {
	switch o.Kind {
	case OutcomeSnapshotInstalled:
		return "snapshot_installed{" + strconv.FormatUint(o.Sequence, 10) + "}"
	case OutcomeDeltaApplied:
		return "delta_applied{" + strconv.FormatUint(o.Sequence, 10) + ", images " + strconv.Itoa(o.Images) + "}"
	case OutcomeIgnoredStaleOrDuplicate, OutcomeDrainAcknowledged:
		return o.Kind.String() + "{" + strconv.FormatUint(o.InstalledSequence, 10) + "}"
	case OutcomeLaneDeactivated:
		return "lane_deactivated{" + o.Fault.Error() + "}"
	}
	return o.Kind.String()
}

// FaultKind enumerates LaneFault.
type FaultKind uint8

const (
	// FaultWrongIdentity: the input's producer identity differs from the
	// assigned one.
	FaultWrongIdentity FaultKind = iota + 1 // wrong_identity
	// FaultInvalidSnapshotBucketCount{Expected, Actual}.
	FaultInvalidSnapshotBucketCount // invalid_snapshot_bucket_count
	// FaultEmptyDelta: a current-stream delta with no image.
	FaultEmptyDelta // empty_delta
	// FaultBaseSequenceMismatch{Expected: installed, Actual: base}.
	FaultBaseSequenceMismatch // base_sequence_mismatch
	// FaultNonContiguousSequence{Base, Sequence}: sequence != base+1.
	FaultNonContiguousSequence // non_contiguous_sequence
	// FaultSequenceExhausted: base+1 overflows.
	FaultSequenceExhausted // sequence_exhausted
	// FaultInvalidImageIndex{Bucket}: bucket >= bucket_count.
	FaultInvalidImageIndex // invalid_image_index
	// FaultDuplicateImageIndex{Bucket}: a bucket repeats within a delta.
	FaultDuplicateImageIndex // duplicate_image_index
	// FaultSnapshotWhileReady{Installed, Sequence}: a newer snapshot on a
	// ready lane (recovery is always new lease → snapshot).
	FaultSnapshotWhileReady // snapshot_while_ready
	// FaultTerminalSequenceMismatch{Expected, Actual (if HasActual)}: a drain
	// marker did not match the installed sequence.
	FaultTerminalSequenceMismatch // terminal_sequence_mismatch
)

// LaneFault is a lane fault: why a current-lease input deactivated a lane.
// It implements error; errors.Is matches any *LaneFault / LaneFault of the
// same Kind (payload ignored), so errors.Is(err, ErrFaultEmptyDelta) works.
//
// Payload fields by kind: InvalidSnapshotBucketCount (Expected, Actual),
// BaseSequenceMismatch (Expected = installed, Actual = base),
// NonContiguousSequence (Base, Sequence), InvalidImageIndex and
// DuplicateImageIndex (Bucket), SnapshotWhileReady (Installed, Sequence),
// TerminalSequenceMismatch (Expected, Actual valid iff HasActual).
type LaneFault struct {
	Kind      FaultKind
	Expected  uint64
	Actual    uint64
	HasActual bool
	Base      uint64
	Sequence  uint64
	Installed uint64
	Bucket    uint64
}

// Error implements error.
func (f LaneFault) Error() string {
	u := func(v uint64) string { return strconv.FormatUint(v, 10) }
	s := "ckf: lane fault " + f.Kind.String()
	switch f.Kind {
	case FaultInvalidSnapshotBucketCount, FaultBaseSequenceMismatch:
		return s + " (expected " + u(f.Expected) + ", actual " + u(f.Actual) + ")"
	case FaultNonContiguousSequence:
		return s + " (base " + u(f.Base) + ", sequence " + u(f.Sequence) + ")"
	case FaultInvalidImageIndex, FaultDuplicateImageIndex:
		return s + " (bucket " + u(f.Bucket) + ")"
	case FaultSnapshotWhileReady:
		return s + " (installed " + u(f.Installed) + ", snapshot " + u(f.Sequence) + ")"
	case FaultTerminalSequenceMismatch:
		if f.HasActual {
			return s + " (expected " + u(f.Expected) + ", actual " + u(f.Actual) + ")"
		}
		return s + " (expected " + u(f.Expected) + ", actual none)"
	}
	return s
}

// Is matches a LaneFault or *LaneFault of the same kind.
func (f LaneFault) Is(target error) bool {
	switch t := target.(type) {
	case LaneFault:
		return t.Kind == f.Kind
	case *LaneFault:
		return t != nil && t.Kind == f.Kind
	}
	return false
}

// Sentinels for errors.Is against lane faults.
var (
	ErrFaultWrongIdentity              error = LaneFault{Kind: FaultWrongIdentity}
	ErrFaultInvalidSnapshotBucketCount error = LaneFault{Kind: FaultInvalidSnapshotBucketCount}
	ErrFaultEmptyDelta                 error = LaneFault{Kind: FaultEmptyDelta}
	ErrFaultBaseSequenceMismatch       error = LaneFault{Kind: FaultBaseSequenceMismatch}
	ErrFaultNonContiguousSequence      error = LaneFault{Kind: FaultNonContiguousSequence}
	ErrFaultSequenceExhausted          error = LaneFault{Kind: FaultSequenceExhausted}
	ErrFaultInvalidImageIndex          error = LaneFault{Kind: FaultInvalidImageIndex}
	ErrFaultDuplicateImageIndex        error = LaneFault{Kind: FaultDuplicateImageIndex}
	ErrFaultSnapshotWhileReady         error = LaneFault{Kind: FaultSnapshotWhileReady}
	ErrFaultTerminalSequenceMismatch   error = LaneFault{Kind: FaultTerminalSequenceMismatch}
)

// AssignmentErrorKind enumerates AssignmentError (consumer §3.2).
type AssignmentErrorKind uint8

const (
	// AssignWrongConsumerInstance: lease.Consumer != manifest consumer.
	AssignWrongConsumerInstance AssignmentErrorKind = iota + 1 // wrong_consumer_instance
	// AssignWrongPhysicalLane: lease.Lane != the ingestor's lane.
	AssignWrongPhysicalLane // wrong_physical_lane
	// AssignWrongLaneOwner: identity.Pool != the lane's pool.
	AssignWrongLaneOwner // wrong_lane_owner
	// AssignWrongFormat: identity.Format != manifest format.
	AssignWrongFormat // wrong_format
	// AssignStaleAssignmentEpoch{MinimumExclusive, Actual}: lease.Epoch <=
	// the previous assignment epoch of the lane (survives retire).
	AssignStaleAssignmentEpoch // stale_assignment_epoch
)

// AssignmentError is a rejected assignment (consumer §3.2). errors.Is matches the
// sentinel of the same kind (ErrWrongConsumerInstance, …,
// ErrStaleAssignmentEpoch) and ErrAssignment for any kind.
type AssignmentError struct {
	Kind             AssignmentErrorKind
	MinimumExclusive uint64 // StaleAssignmentEpoch
	Actual           uint64 // StaleAssignmentEpoch
}

// Error implements error.
func (e *AssignmentError) Error() string {
	if e.Kind == AssignStaleAssignmentEpoch {
		return "ckf: assignment rejected: stale assignment epoch " + strconv.FormatUint(e.Actual, 10) +
			" (must be > " + strconv.FormatUint(e.MinimumExclusive, 10) + ")"
	}
	return "ckf: assignment rejected: " + e.Kind.String()
}

// Is matches ErrAssignment and any *AssignmentError of the same kind.
func (e *AssignmentError) Is(target error) bool {
	if target == ErrAssignment {
		return true
	}
	t, ok := target.(*AssignmentError)
	return ok && t.Kind == e.Kind
}

// Sentinels for errors.Is against assignment errors.
var (
	// ErrAssignment matches every *AssignmentError (the pool's
	// Assignment(err) wrapper).
	ErrAssignment                  = errors.New("ckf: assignment rejected")
	ErrWrongConsumerInstance error = &AssignmentError{Kind: AssignWrongConsumerInstance}
	ErrWrongPhysicalLane     error = &AssignmentError{Kind: AssignWrongPhysicalLane}
	ErrWrongLaneOwner        error = &AssignmentError{Kind: AssignWrongLaneOwner}
	ErrWrongFormat           error = &AssignmentError{Kind: AssignWrongFormat}
	ErrStaleAssignmentEpoch  error = &AssignmentError{Kind: AssignStaleAssignmentEpoch}
)

// validateAssignment applies consumer §3.2 in order for lane of manifest m, given the
// lane's last assignment epoch (hasLast == false before the first assign,
// which accepts any epoch including 0). Shared by LaneIngestor.Assign and
// the ingestion pool's admission check.
func validateAssignment(m *Manifest, lane uint8, lastEpoch uint64, hasLast bool, id ckf.ProducerIdentity, lease ckf.LaneLease) *AssignmentError {
	switch {
	case lease.Consumer != m.consumer:
		return &AssignmentError{Kind: AssignWrongConsumerInstance}
	case lease.Lane != lane:
		return &AssignmentError{Kind: AssignWrongPhysicalLane}
	}
	if pool, ok := m.PoolOf(lane); !ok || id.Pool != pool {
		return &AssignmentError{Kind: AssignWrongLaneOwner}
	}
	if id.Format != m.format {
		return &AssignmentError{Kind: AssignWrongFormat}
	}
	if hasLast && lease.Epoch <= lastEpoch {
		return &AssignmentError{Kind: AssignStaleAssignmentEpoch, MinimumExclusive: lastEpoch, Actual: lease.Epoch}
	}
	return nil
}

// Indexer-level errors (claiming and querying).
var (
	// ErrInvalidLane: lane >= the manifest's lane count.
	ErrInvalidLane = errors.New("ckf: invalid lane")
	// ErrUnconfiguredLane: the lane has no pool in the manifest.
	ErrUnconfiguredLane = errors.New("ckf: unconfigured lane")
	// ErrLaneAlreadyClaimed: another ingestor owns the lane.
	ErrLaneAlreadyClaimed = errors.New("ckf: lane already claimed")
	// ErrIngestorClosed: Assign on an ingestor after Close. A closed
	// ingestor no longer owns its lane, so it never writes the table again:
	// every other input sees it unassigned (IgnoredForeignLease).
	ErrIngestorClosed = errors.New("ckf: lane ingestor closed")
	// ErrUnavailable is QueryError::Unavailable: no configured lane was
	// ready when the query captured the ready mask.
	ErrUnavailable = errors.New("ckf: no ready lane")
	// ErrLanesBeyond16: FindPrefixMatches or FindPrefixMatchesScratch on an
	// indexer whose manifest configures a lane beyond 15, which their
	// 16-lane result cannot hold (consumer §16); FindPrefixMatches64 answers.
	ErrLanesBeyond16 = errors.New("ckf: the manifest configures lanes beyond 15, which a 16-lane result cannot hold; query with FindPrefixMatches64")
)
