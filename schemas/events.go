package schemas

import (
	"errors"
	"time"

	"github.com/ckf-stream/ckf-stream/ckf"
)

// String methods of the enums below are generated from the constants' line
// comments, which are the Avro symbols (or, for union branches, record
// names); run make generate after changing a constant.
//go:generate go run golang.org/x/tools/cmd/stringer@v0.52.0 -type=LaneEventKind,LaneFaultKind,FailurePoint,FailureDomain,CommitState,FailureAction,ControlKind,SnapshotRequestReason,DeadLetterReason -linecomment -output=events_string.go

// LaneEventKind says what happened on a lane (Avro enum LaneEventKind).
// Symbols unknown to this reader decode as EventUnknown.
type LaneEventKind uint8

// Lane event kinds, in Avro symbol order; see lane_event.avsc.
const (
	EventUnknown           LaneEventKind = iota // UNKNOWN
	EventAssigned                               // ASSIGNED
	EventSnapshotInstalled                      // SNAPSHOT_INSTALLED
	EventDeactivated                            // DEACTIVATED
	EventDrainAcknowledged                      // DRAIN_ACKNOWLEDGED
	EventAwaitingSnapshot                       // AWAITING_SNAPSHOT
	EventSnapshotRequested                      // SNAPSHOT_REQUESTED
	EventExcludedForLag                         // EXCLUDED_FOR_LAG
	EventReadmitted                             // READMITTED
	EventProgress                               // PROGRESS
	EventRecordRejected                         // RECORD_REJECTED
	EventDrained                                // DRAINED
)

var laneEventKindSymbols = enumSymbols[LaneEventKind]()

// LaneFaultKind classifies a lane fault (Avro enum LaneFaultKind). Symbols
// unknown to this reader decode as FaultUnknown.
type LaneFaultKind uint8

// Lane fault kinds, in Avro symbol order; see lane_event.avsc.
const (
	FaultUnknown                    LaneFaultKind = iota // UNKNOWN
	FaultWrongIdentity                                   // WRONG_IDENTITY
	FaultInvalidSnapshotBucketCount                      // INVALID_SNAPSHOT_BUCKET_COUNT
	FaultEmptyDelta                                      // EMPTY_DELTA
	FaultBaseSequenceMismatch                            // BASE_SEQUENCE_MISMATCH
	FaultNonContiguousSequence                           // NON_CONTIGUOUS_SEQUENCE
	FaultSequenceExhausted                               // SEQUENCE_EXHAUSTED
	FaultInvalidImageIndex                               // INVALID_IMAGE_INDEX
	FaultDuplicateImageIndex                             // DUPLICATE_IMAGE_INDEX
	FaultSnapshotWhileReady                              // SNAPSHOT_WHILE_READY
	FaultTerminalSequenceMismatch                        // TERMINAL_SEQUENCE_MISMATCH
	FaultWrongConsumerInstance                           // WRONG_CONSUMER_INSTANCE
	FaultWrongPhysicalLane                               // WRONG_PHYSICAL_LANE
	FaultWrongLaneOwner                                  // WRONG_LANE_OWNER
	FaultWrongFormat                                     // WRONG_FORMAT
	FaultStaleAssignmentEpoch                            // STALE_ASSIGNMENT_EPOCH
	FaultMalformedRecord                                 // MALFORMED_RECORD
	FaultSnapshotAssembly                                // SNAPSHOT_ASSEMBLY
	FaultLagExceeded                                     // LAG_EXCEEDED
	FaultWorkerFailure                                   // WORKER_FAILURE
	FaultStaleIncarnation                                // STALE_INCARNATION
)

var laneFaultKindSymbols = enumSymbols[LaneFaultKind]()

// FailurePoint is a row of the CKF failure table (Avro enum FailurePoint).
type FailurePoint uint8

// Failure points, in Avro symbol order.
const (
	PointBoundedRelocationFailure          FailurePoint = iota // BOUNDED_RELOCATION_FAILURE
	PointPrecommitAllocationFailure                            // PRECOMMIT_ALLOCATION_FAILURE
	PointSourceProtocolFailure                                 // SOURCE_PROTOCOL_FAILURE
	PointPrewriteInvariantMismatch                             // PREWRITE_INVARIANT_MISMATCH
	PointConsumerGapOrMalformedBeforeWrite                     // CONSUMER_GAP_OR_MALFORMED_BEFORE_WRITE
	PointConsumerWorkerFailureMidApply                         // CONSUMER_WORKER_FAILURE_MID_APPLY
	PointInactiveSnapshotInstallFailure                        // INACTIVE_SNAPSHOT_INSTALL_FAILURE
)

var failurePointSymbols = enumSymbols[FailurePoint]()

// FailureDomain is the side a failure belongs to (Avro enum FailureDomain).
type FailureDomain uint8

// Failure domains, in Avro symbol order.
const (
	DomainProducerCore FailureDomain = iota // PRODUCER_CORE
	DomainConsumerLane                      // CONSUMER_LANE
)

var failureDomainSymbols = enumSymbols[FailureDomain]()

// CommitState is what is known about interrupted state (Avro enum
// CommitState).
type CommitState uint8

// Commit states, in Avro symbol order.
const (
	CommitKnownUnchanged                CommitState = iota // KNOWN_UNCHANGED
	CommitExactCommittedPhysicalOmitted                    // EXACT_COMMITTED_PHYSICAL_OMITTED
	CommitUncertain                                        // UNCERTAIN
)

var commitStateSymbols = enumSymbols[CommitState]()

// FailureAction is a recovery action (Avro enum FailureAction).
type FailureAction uint8

// Failure actions, in Avro symbol order.
const (
	ActionContinueCapacityOmission FailureAction = iota // CONTINUE_CAPACITY_OMISSION
	ActionReportResourceFailure                         // REPORT_RESOURCE_FAILURE
	ActionRejectSource                                  // REJECT_SOURCE
	ActionFenceAndRebuildProducer                       // FENCE_AND_REBUILD_PRODUCER
	ActionDeactivateAndSnapshot                         // DEACTIVATE_AND_SNAPSHOT
	ActionRetrySnapshot                                 // RETRY_SNAPSHOT
)

var failureActionSymbols = enumSymbols[FailureAction]()

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
	// Capacity is the lane's capacity state as last carried by its lane records; absent until
	// one carried it.
	Capacity Optional[CapacityState]
}

func (e *LaneEvent) validate() error {
	if e.Lane >= ckf.MaxLanes {
		return invalid("lane", "%d is not below %d", e.Lane, ckf.MaxLanes)
	}
	if err := e.Pool.validate("pool"); err != nil {
		return err
	}
	if c, ok := e.Capacity.Get(); ok {
		if err := c.validate("capacity"); err != nil {
			return err
		}
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
	ControlSnapshotRequest ControlKind = iota + 1 // SnapshotRequest
)

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
	ReasonUnknown            SnapshotRequestReason = iota // UNKNOWN
	ReasonNoSnapshotRetained                              // NO_SNAPSHOT_RETAINED
	ReasonFaultRecovery                                   // FAULT_RECOVERY
	ReasonOperator                                        // OPERATOR
)

var snapshotRequestReasonSymbols = enumSymbols[SnapshotRequestReason]()

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
		if s.Lane >= ckf.MaxLanes {
			return invalid("body.lane", "%d is not below %d", s.Lane, ckf.MaxLanes)
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
	DeadLetterUnknown         DeadLetterReason = iota // UNKNOWN
	DeadLetterUnknownMagic                            // UNKNOWN_MAGIC
	DeadLetterUnknownSchemaID                         // UNKNOWN_SCHEMA_ID
	DeadLetterSchemaMismatch                          // SCHEMA_MISMATCH
	DeadLetterTruncated                               // TRUNCATED
	DeadLetterMalformed                               // MALFORMED
	DeadLetterInvalidField                            // INVALID_FIELD
	DeadLetterRejected                                // REJECTED
)

var deadLetterReasonSymbols = enumSymbols[DeadLetterReason]()

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
