package schemas

import (
	"errors"
	"time"
)

// LaneEventKind says what happened on a lane (Avro enum LaneEventKind).
// Symbols unknown to this reader decode as EventUnknown.
type LaneEventKind uint8

// Lane event kinds, in Avro symbol order; see lane_event.avsc.
const (
	EventUnknown LaneEventKind = iota
	EventAssigned
	EventSnapshotInstalled
	EventDeactivated
	EventDrainAcknowledged
	EventAwaitingSnapshot
	EventSnapshotRequested
	EventExcludedForLag
	EventReadmitted
	EventProgress
	EventRecordRejected
	EventDrained
)

var laneEventKindSymbols = []string{"UNKNOWN", "ASSIGNED", "SNAPSHOT_INSTALLED", "DEACTIVATED", "DRAIN_ACKNOWLEDGED", "AWAITING_SNAPSHOT", "SNAPSHOT_REQUESTED", "EXCLUDED_FOR_LAG", "READMITTED", "PROGRESS", "RECORD_REJECTED", "DRAINED"}

// String returns the Avro symbol.
func (k LaneEventKind) String() string { return symbolOf(laneEventKindSymbols, int(k)) }

// LaneFaultKind classifies a lane fault (Avro enum LaneFaultKind). Symbols
// unknown to this reader decode as FaultUnknown.
type LaneFaultKind uint8

// Lane fault kinds, in Avro symbol order; see lane_event.avsc.
const (
	FaultUnknown LaneFaultKind = iota
	FaultWrongIdentity
	FaultInvalidSnapshotBucketCount
	FaultEmptyDelta
	FaultBaseSequenceMismatch
	FaultNonContiguousSequence
	FaultSequenceExhausted
	FaultInvalidImageIndex
	FaultDuplicateImageIndex
	FaultSnapshotWhileReady
	FaultTerminalSequenceMismatch
	FaultWrongConsumerInstance
	FaultWrongPhysicalLane
	FaultWrongLaneOwner
	FaultWrongFormat
	FaultStaleAssignmentEpoch
	FaultMalformedRecord
	FaultSnapshotAssembly
	FaultLagExceeded
	FaultWorkerFailure
	FaultStaleIncarnation
)

var laneFaultKindSymbols = []string{"UNKNOWN", "WRONG_IDENTITY", "INVALID_SNAPSHOT_BUCKET_COUNT", "EMPTY_DELTA", "BASE_SEQUENCE_MISMATCH", "NON_CONTIGUOUS_SEQUENCE", "SEQUENCE_EXHAUSTED", "INVALID_IMAGE_INDEX", "DUPLICATE_IMAGE_INDEX", "SNAPSHOT_WHILE_READY", "TERMINAL_SEQUENCE_MISMATCH", "WRONG_CONSUMER_INSTANCE", "WRONG_PHYSICAL_LANE", "WRONG_LANE_OWNER", "WRONG_FORMAT", "STALE_ASSIGNMENT_EPOCH", "MALFORMED_RECORD", "SNAPSHOT_ASSEMBLY", "LAG_EXCEEDED", "WORKER_FAILURE", "STALE_INCARNATION"}

// String returns the Avro symbol.
func (k LaneFaultKind) String() string { return symbolOf(laneFaultKindSymbols, int(k)) }

// FailurePoint is a row of the CKF failure table (Avro enum FailurePoint).
type FailurePoint uint8

// Failure points, in Avro symbol order.
const (
	PointBoundedRelocationFailure FailurePoint = iota
	PointPrecommitAllocationFailure
	PointSourceProtocolFailure
	PointPrewriteInvariantMismatch
	PointConsumerGapOrMalformedBeforeWrite
	PointConsumerWorkerFailureMidApply
	PointInactiveSnapshotInstallFailure
)

var failurePointSymbols = []string{"BOUNDED_RELOCATION_FAILURE", "PRECOMMIT_ALLOCATION_FAILURE", "SOURCE_PROTOCOL_FAILURE", "PREWRITE_INVARIANT_MISMATCH", "CONSUMER_GAP_OR_MALFORMED_BEFORE_WRITE", "CONSUMER_WORKER_FAILURE_MID_APPLY", "INACTIVE_SNAPSHOT_INSTALL_FAILURE"}

// String returns the Avro symbol.
func (p FailurePoint) String() string { return symbolOf(failurePointSymbols, int(p)) }

// FailureDomain is the side a failure belongs to (Avro enum FailureDomain).
type FailureDomain uint8

// Failure domains, in Avro symbol order.
const (
	DomainProducerCore FailureDomain = iota
	DomainConsumerLane
)

var failureDomainSymbols = []string{"PRODUCER_CORE", "CONSUMER_LANE"}

// String returns the Avro symbol.
func (d FailureDomain) String() string { return symbolOf(failureDomainSymbols, int(d)) }

// CommitState is what is known about interrupted state (Avro enum
// CommitState).
type CommitState uint8

// Commit states, in Avro symbol order.
const (
	CommitKnownUnchanged CommitState = iota
	CommitExactCommittedPhysicalOmitted
	CommitUncertain
)

var commitStateSymbols = []string{"KNOWN_UNCHANGED", "EXACT_COMMITTED_PHYSICAL_OMITTED", "UNCERTAIN"}

// String returns the Avro symbol.
func (c CommitState) String() string { return symbolOf(commitStateSymbols, int(c)) }

// FailureAction is a recovery action (Avro enum FailureAction).
type FailureAction uint8

// Failure actions, in Avro symbol order.
const (
	ActionContinueCapacityOmission FailureAction = iota
	ActionReportResourceFailure
	ActionRejectSource
	ActionFenceAndRebuildProducer
	ActionDeactivateAndSnapshot
	ActionRetrySnapshot
)

var failureActionSymbols = []string{"CONTINUE_CAPACITY_OMISSION", "REPORT_RESOURCE_FAILURE", "REJECT_SOURCE", "FENCE_AND_REBUILD_PRODUCER", "DEACTIVATE_AND_SNAPSHOT", "RETRY_SNAPSHOT"}

// String returns the Avro symbol.
func (a FailureAction) String() string { return symbolOf(failureActionSymbols, int(a)) }

// FailureDisposition is the failure-table row a fault maps to (Avro record
// FailureDisposition).
type FailureDisposition struct {
	Point          FailurePoint
	Domain         FailureDomain
	Commit         CommitState
	RecoveryDomain Optional[FailureDomain]
	Action         FailureAction
}

// LaneFault describes a rejected record or retired lane (Avro record
// LaneFault). Expected and Actual carry u64 values as the spec's fault
// payloads do.
type LaneFault struct {
	Kind     LaneFaultKind
	Detail   string
	Expected Optional[uint64]
	Actual   Optional[uint64]
	Offset   Optional[int64]
}

// LaneEvent reports a lane state change, fault or progress (Avro record
// LaneEvent).
type LaneEvent struct {
	Lane              uint8
	Pool              PoolID
	ConsumerInstance  uint64
	LeaseEpoch        Optional[uint64]
	Kind              LaneEventKind
	Fault             *LaneFault
	Disposition       *FailureDisposition
	InstalledSequence Optional[uint64]
	AppliedOffset     Optional[int64]
	HighWatermark     Optional[int64]
	LagRecords        Optional[int64]
	LagMicros         Optional[int64]
	EventTime         time.Time
}

func (e *LaneEvent) validate() error {
	if e.Lane >= LaneCount {
		return invalid("lane", "%d is not below %d", e.Lane, LaneCount)
	}
	if err := e.Pool.validate("pool"); err != nil {
		return err
	}
	if int(e.Kind) >= len(laneEventKindSymbols) {
		return invalid("kind", "unknown kind %d", e.Kind)
	}
	if f := e.Fault; f != nil && int(f.Kind) >= len(laneFaultKindSymbols) {
		return invalid("fault.kind", "unknown kind %d", f.Kind)
	}
	if d := e.Disposition; d != nil {
		switch {
		case int(d.Point) >= len(failurePointSymbols):
			return invalid("disposition.point", "unknown point %d", d.Point)
		case int(d.Domain) >= len(failureDomainSymbols):
			return invalid("disposition.domain", "unknown domain %d", d.Domain)
		case int(d.Commit) >= len(commitStateSymbols):
			return invalid("disposition.commit", "unknown commit state %d", d.Commit)
		case d.RecoveryDomain.Valid && int(d.RecoveryDomain.Value) >= len(failureDomainSymbols):
			return invalid("disposition.recovery_domain", "unknown domain %d", d.RecoveryDomain.Value)
		case int(d.Action) >= len(failureActionSymbols):
			return invalid("disposition.action", "unknown action %d", d.Action)
		}
	}
	return nil
}

// ControlKind says which branch of ControlRecord.body a record carries.
type ControlKind uint8

const (
	// ControlSnapshotRequest: ControlRecord.SnapshotRequest is set.
	ControlSnapshotRequest ControlKind = iota + 1
)

var controlKindNames = []string{"", "SnapshotRequest"}

// String returns the Avro record name of the branch.
func (k ControlKind) String() string { return symbolOf(controlKindNames, int(k)) }

// ControlRecord is a request from an indexer replica to a relay (Avro record
// ControlRecord).
type ControlRecord struct {
	Kind            ControlKind
	SnapshotRequest SnapshotRequest
}

// SnapshotRequestReason says why a snapshot is requested (Avro enum
// SnapshotRequestReason). Symbols unknown to this reader decode as
// ReasonUnknown.
type SnapshotRequestReason uint8

// Snapshot request reasons, in Avro symbol order.
const (
	ReasonUnknown SnapshotRequestReason = iota
	ReasonNoSnapshotRetained
	ReasonFaultRecovery
	ReasonOperator
)

var snapshotRequestReasonSymbols = []string{"UNKNOWN", "NO_SNAPSHOT_RETAINED", "FAULT_RECOVERY", "OPERATOR"}

// String returns the Avro symbol.
func (r SnapshotRequestReason) String() string { return symbolOf(snapshotRequestReasonSymbols, int(r)) }

// SnapshotRequest asks the relay owning a lane for a barrier snapshot (Avro
// record SnapshotRequest).
type SnapshotRequest struct {
	Lane      uint8
	Pool      PoolID
	Requester uint64
	Reason    SnapshotRequestReason
	Detail    string
	// AfterOffset is -1 for "any snapshot written after the request".
	AfterOffset int64
	RequestTime time.Time
}

func (c *ControlRecord) validate() error {
	switch c.Kind {
	case ControlSnapshotRequest:
		s := &c.SnapshotRequest
		if s.Lane >= LaneCount {
			return invalid("body.lane", "%d is not below %d", s.Lane, LaneCount)
		}
		if err := s.Pool.validate("body.pool"); err != nil {
			return err
		}
		if int(s.Reason) >= len(snapshotRequestReasonSymbols) {
			return invalid("body.reason", "unknown reason %d", s.Reason)
		}
		if s.AfterOffset < -1 {
			return invalid("body.after_offset", "%d is below -1", s.AfterOffset)
		}
	default:
		return invalid("body", "unknown control kind %d", c.Kind)
	}
	return nil
}

// DeadLetterReason says why a record was dead-lettered (Avro enum
// DeadLetterReason). Symbols unknown to this reader decode as
// DeadLetterUnknown.
type DeadLetterReason uint8

// Dead-letter reasons, in Avro symbol order.
const (
	DeadLetterUnknown DeadLetterReason = iota
	DeadLetterUnknownMagic
	DeadLetterUnknownSchemaID
	DeadLetterSchemaMismatch
	DeadLetterTruncated
	DeadLetterMalformed
	DeadLetterInvalidField
	DeadLetterRejected
)

var deadLetterReasonSymbols = []string{"UNKNOWN", "UNKNOWN_MAGIC", "UNKNOWN_SCHEMA_ID", "SCHEMA_MISMATCH", "TRUNCATED", "MALFORMED", "INVALID_FIELD", "REJECTED"}

// String returns the Avro symbol.
func (r DeadLetterReason) String() string { return symbolOf(deadLetterReasonSymbols, int(r)) }

// DeadLetterReasonOf maps a decode error to its reason code: the kind of a
// *DecodeError in err's chain, or DeadLetterUnknown.
func DeadLetterReasonOf(err error) DeadLetterReason {
	switch {
	case err == nil:
		return DeadLetterUnknown
	case errors.Is(err, ErrUnknownMagic):
		return DeadLetterUnknownMagic
	case errors.Is(err, ErrUnknownSchemaID):
		return DeadLetterUnknownSchemaID
	case errors.Is(err, ErrSchemaMismatch):
		return DeadLetterSchemaMismatch
	case errors.Is(err, ErrTruncated):
		return DeadLetterTruncated
	case errors.Is(err, ErrMalformed):
		return DeadLetterMalformed
	case errors.Is(err, ErrInvalidField):
		return DeadLetterInvalidField
	}
	return DeadLetterUnknown
}

// DeadLetter is a copy of an unprocessable input record (Avro record
// DeadLetter).
type DeadLetter struct {
	SourceTopic     string
	SourcePartition int32
	SourceOffset    int64
	// SourceTimestamp is the zero Time (null on the wire) if unknown.
	SourceTimestamp time.Time
	// Key and Value are nil (null on the wire) when the original had none; a
	// non-nil empty slice is an empty key or value.
	Key            []byte
	Value          []byte
	ReasonCode     DeadLetterReason
	Reason         string
	Component      string
	DeadLetterTime time.Time
}

func (d *DeadLetter) validate() error {
	if d.SourcePartition < 0 {
		return invalid("source_partition", "%d is negative", d.SourcePartition)
	}
	if d.SourceOffset < 0 {
		return invalid("source_offset", "%d is negative", d.SourceOffset)
	}
	if int(d.ReasonCode) >= len(deadLetterReasonSymbols) {
		return invalid("reason_code", "unknown reason %d", d.ReasonCode)
	}
	return nil
}
