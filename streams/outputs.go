package streams

import (
	"context"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/ckf/index"
	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"
)

// Outputs produces the indexer's side records: lane events (keyed by lane), dead letters and
// snapshot requests. Production is asynchronous: these records are diagnostics and requests,
// never the source of truth (the lane log and the table are), so a failed produce is counted and
// logged, not retried forever on a lane's goroutine.
type Outputs struct {
	cl       *kgo.Client
	codec    *schemas.Codec
	consumer ckf.ConsumerInstanceID
	log      *zap.Logger
	now      func() time.Time

	laneEventsTopic, deadLetterTopic, controlTopic string

	// failed counts the outputs not produced (Failed); the log line of each says which.
	failed atomic.Int64
}

// OutputTopics names the topics Outputs writes.
type OutputTopics struct {
	LaneEvents, DeadLetter, Control string
}

// NewOutputs returns an Outputs writing through cl.
func NewOutputs(cl *kgo.Client, codec *schemas.Codec, consumer ckf.ConsumerInstanceID, topics OutputTopics, log *zap.Logger) *Outputs {
	if log == nil {
		log = zap.NewNop()
	}
	return &Outputs{cl: cl, codec: codec, consumer: consumer, log: log, now: time.Now,
		laneEventsTopic: topics.LaneEvents, deadLetterTopic: topics.DeadLetter, controlTopic: topics.Control}
}

// Failed returns how many output records could not be produced.
func (o *Outputs) Failed() int64 { return o.failed.Load() }

func laneKey(lane uint8) []byte { return []byte("lane-" + strconv.Itoa(int(lane))) }

func (o *Outputs) produce(topic string, key, value []byte, what string) {
	o.cl.Produce(context.Background(), &kgo.Record{Topic: topic, Key: key, Value: value}, func(_ *kgo.Record, err error) {
		if err != nil {
			o.failed.Add(1)
			o.log.Warn("output record not produced", zap.String("what", what), zap.String("topic", topic), zap.Error(err))
		}
	})
}

// LaneEvent produces ev to the lane-events topic, keyed by lane, filling in the consumer
// instance and the event time.
func (o *Outputs) LaneEvent(ev schemas.LaneEvent) {
	ev.ConsumerInstance = uint64(o.consumer)
	if ev.EventTime.IsZero() {
		ev.EventTime = o.now()
	}
	b, err := o.codec.EncodeLaneEvent(ev)
	if err != nil {
		o.failed.Add(1)
		o.log.Error("lane event not encodable", zap.Uint8("lane", ev.Lane), zap.Error(err))
		return
	}
	o.produce(o.laneEventsTopic, laneKey(ev.Lane), b, "lane event")
}

// DeadLetter produces a copy of r with the reason it was rejected.
func (o *Outputs) DeadLetter(r *kgo.Record, code schemas.DeadLetterReason, reason, component string) {
	d := schemas.DeadLetter{
		SourceTopic: r.Topic, SourcePartition: r.Partition, SourceOffset: r.Offset, SourceTimestamp: r.Timestamp,
		Key: r.Key, Value: r.Value, ReasonCode: code, Reason: reason, Component: component, DeadLetterTime: o.now(),
	}
	b, err := o.codec.EncodeDeadLetter(d)
	if err != nil {
		o.failed.Add(1)
		o.log.Error("dead letter not encodable", zap.String("topic", r.Topic), zap.Int64("offset", r.Offset), zap.Error(err))
		return
	}
	o.produce(o.deadLetterTopic, r.Key, b, "dead letter")
}

// RequestSnapshot asks the relay of pool for a new barrier snapshot on lane, written after
// afterOffset of the lane partition.
func (o *Outputs) RequestSnapshot(lane uint8, pool ckf.PoolID, reason schemas.SnapshotRequestReason, detail string, afterOffset int64) {
	rec := schemas.ControlRecord{Kind: schemas.ControlSnapshotRequest, SnapshotRequest: schemas.SnapshotRequest{
		Lane: lane, Pool: WirePool(pool), Requester: uint64(o.consumer), Reason: reason, Detail: detail,
		AfterOffset: afterOffset, RequestTime: o.now(),
	}}
	b, err := o.codec.EncodeControlRecord(rec)
	if err != nil {
		o.failed.Add(1)
		o.log.Error("snapshot request not encodable", zap.Uint8("lane", lane), zap.Error(err))
		return
	}
	o.produce(o.controlTopic, laneKey(lane), b, "snapshot request")
}

// Flush waits until every output produced so far is acknowledged or failed.
func (o *Outputs) Flush(ctx context.Context) error { return o.cl.Flush(ctx) }

// laneFaultKinds is the lane-event fault kind of each ingestor fault kind.
var laneFaultKinds = [...]schemas.LaneFaultKind{
	index.FaultWrongIdentity:              schemas.FaultWrongIdentity,
	index.FaultInvalidSnapshotBucketCount: schemas.FaultInvalidSnapshotBucketCount,
	index.FaultEmptyDelta:                 schemas.FaultEmptyDelta,
	index.FaultBaseSequenceMismatch:       schemas.FaultBaseSequenceMismatch,
	index.FaultNonContiguousSequence:      schemas.FaultNonContiguousSequence,
	index.FaultSequenceExhausted:          schemas.FaultSequenceExhausted,
	index.FaultInvalidImageIndex:          schemas.FaultInvalidImageIndex,
	index.FaultDuplicateImageIndex:        schemas.FaultDuplicateImageIndex,
	index.FaultSnapshotWhileReady:         schemas.FaultSnapshotWhileReady,
	index.FaultTerminalSequenceMismatch:   schemas.FaultTerminalSequenceMismatch,
}

// WireFault converts an ingestor fault to the lane-event fault: the kind from laneFaultKinds
// (FaultUnknown for a kind outside it), the payload as the wire's expected/actual pair.
func WireFault(f index.LaneFault, offset int64) *schemas.LaneFault {
	out := &schemas.LaneFault{Kind: Lookup(laneFaultKinds[:], f.Kind, schemas.FaultUnknown), Detail: f.Error(), Offset: schemas.Some(offset)}
	switch f.Kind {
	case index.FaultInvalidSnapshotBucketCount, index.FaultBaseSequenceMismatch:
		out.Expected, out.Actual = schemas.Some(f.Expected), schemas.Some(f.Actual)
	case index.FaultNonContiguousSequence:
		out.Expected, out.Actual = schemas.Some(f.Base+1), schemas.Some(f.Sequence)
	case index.FaultInvalidImageIndex, index.FaultDuplicateImageIndex:
		out.Actual = schemas.Some(f.Bucket)
	case index.FaultSnapshotWhileReady:
		out.Expected, out.Actual = schemas.Some(f.Installed), schemas.Some(f.Sequence)
	case index.FaultTerminalSequenceMismatch:
		out.Expected = schemas.Some(f.Expected)
		if f.HasActual {
			out.Actual = schemas.Some(f.Actual)
		}
	}
	return out
}

// assignmentFaultKinds is the lane-event fault kind of each assignment error kind.
var assignmentFaultKinds = [...]schemas.LaneFaultKind{
	index.AssignWrongConsumerInstance: schemas.FaultWrongConsumerInstance,
	index.AssignWrongPhysicalLane:     schemas.FaultWrongPhysicalLane,
	index.AssignWrongLaneOwner:        schemas.FaultWrongLaneOwner,
	index.AssignWrongFormat:           schemas.FaultWrongFormat,
	index.AssignStaleAssignmentEpoch:  schemas.FaultStaleAssignmentEpoch,
}

// AssignmentFault converts an assignment error to the lane-event fault. A stale assignment
// epoch compares two epochs: expected is the lowest epoch the lane accepts (one above the last
// assignment's), actual the epoch refused.
func AssignmentFault(err *index.AssignmentError, offset int64) *schemas.LaneFault {
	out := &schemas.LaneFault{Kind: Lookup(assignmentFaultKinds[:], err.Kind, schemas.FaultUnknown), Detail: err.Error(), Offset: schemas.Some(offset)}
	if err.Kind == index.AssignStaleAssignmentEpoch {
		out.Expected, out.Actual = schemas.Some(err.MinimumExclusive+1), schemas.Some(err.Actual)
	}
	return out
}

// The failure-table enums on the wire. The wire enums have no "none": NoRecoveryDomain is an
// absent recovery_domain, and an undefined value has no wire form.
var (
	wirePoints = [...]schemas.Optional[schemas.FailurePoint]{
		ckf.BoundedRelocationFailure:          schemas.Some(schemas.PointBoundedRelocationFailure),
		ckf.PrecommitAllocationFailure:        schemas.Some(schemas.PointPrecommitAllocationFailure),
		ckf.SourceProtocolFailure:             schemas.Some(schemas.PointSourceProtocolFailure),
		ckf.PrewriteInvariantMismatch:         schemas.Some(schemas.PointPrewriteInvariantMismatch),
		ckf.ConsumerGapOrMalformedBeforeWrite: schemas.Some(schemas.PointConsumerGapOrMalformedBeforeWrite),
		ckf.ConsumerWorkerFailureMidApply:     schemas.Some(schemas.PointConsumerWorkerFailureMidApply),
		ckf.InactiveSnapshotInstallFailure:    schemas.Some(schemas.PointInactiveSnapshotInstallFailure),
	}
	wireDomains = [...]schemas.Optional[schemas.FailureDomain]{
		ckf.NoRecoveryDomain:   {},
		ckf.DomainProducerCore: schemas.Some(schemas.DomainProducerCore),
		ckf.DomainConsumerLane: schemas.Some(schemas.DomainConsumerLane),
	}
	wireCommits = [...]schemas.Optional[schemas.CommitState]{
		ckf.CommitKnownUnchanged:                schemas.Some(schemas.CommitKnownUnchanged),
		ckf.CommitExactCommittedPhysicalOmitted: schemas.Some(schemas.CommitExactCommittedPhysicalOmitted),
		ckf.CommitUncertain:                     schemas.Some(schemas.CommitUncertain),
	}
	wireActions = [...]schemas.Optional[schemas.FailureAction]{
		ckf.ActionContinueCapacityOmission: schemas.Some(schemas.ActionContinueCapacityOmission),
		ckf.ActionReportResourceFailure:    schemas.Some(schemas.ActionReportResourceFailure),
		ckf.ActionRejectSource:             schemas.Some(schemas.ActionRejectSource),
		ckf.ActionFenceAndRebuildProducer:  schemas.Some(schemas.ActionFenceAndRebuildProducer),
		ckf.ActionDeactivateAndSnapshot:    schemas.Some(schemas.ActionDeactivateAndSnapshot),
		ckf.ActionRetrySnapshot:            schemas.Some(schemas.ActionRetrySnapshot),
	}
)

// WireDisposition converts failure point p and its row of the failure table to the wire. It
// returns nil (no disposition on the lane event) for a point that is not in the table.
func WireDisposition(p ckf.FailurePoint) *schemas.FailureDisposition {
	d := ckf.DispositionOf(p)
	point := Lookup(wirePoints[:], p, schemas.Optional[schemas.FailurePoint]{})
	domain := Lookup(wireDomains[:], d.Domain, schemas.Optional[schemas.FailureDomain]{})
	commit := Lookup(wireCommits[:], d.Commit, schemas.Optional[schemas.CommitState]{})
	action := Lookup(wireActions[:], d.Action, schemas.Optional[schemas.FailureAction]{})
	if !point.Valid || !domain.Valid || !commit.Valid || !action.Valid {
		return nil
	}
	return &schemas.FailureDisposition{
		Point:          point.Value,
		Domain:         domain.Value,
		Commit:         commit.Value,
		RecoveryDomain: Lookup(wireDomains[:], d.RecoveryDomain, schemas.Optional[schemas.FailureDomain]{}),
		Action:         action.Value,
	}
}
