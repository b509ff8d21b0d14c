package streams

import (
	"context"
	"fmt"
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

	produced, failed atomic.Int64
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
			return
		}
		o.produced.Add(1)
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

// wireFault converts an ingestor fault to the lane-event fault.
func wireFault(f index.LaneFault, offset int64) *schemas.LaneFault {
	out := &schemas.LaneFault{Detail: f.Error(), Offset: schemas.Some(offset)}
	switch f.Kind {
	case index.FaultWrongIdentity:
		out.Kind = schemas.FaultWrongIdentity
	case index.FaultInvalidSnapshotBucketCount:
		out.Kind, out.Expected, out.Actual = schemas.FaultInvalidSnapshotBucketCount, schemas.Some(f.Expected), schemas.Some(f.Actual)
	case index.FaultEmptyDelta:
		out.Kind = schemas.FaultEmptyDelta
	case index.FaultBaseSequenceMismatch:
		out.Kind, out.Expected, out.Actual = schemas.FaultBaseSequenceMismatch, schemas.Some(f.Expected), schemas.Some(f.Actual)
	case index.FaultNonContiguousSequence:
		out.Kind, out.Expected, out.Actual = schemas.FaultNonContiguousSequence, schemas.Some(f.Base+1), schemas.Some(f.Sequence)
	case index.FaultSequenceExhausted:
		out.Kind = schemas.FaultSequenceExhausted
	case index.FaultInvalidImageIndex:
		out.Kind, out.Actual = schemas.FaultInvalidImageIndex, schemas.Some(f.Bucket)
	case index.FaultDuplicateImageIndex:
		out.Kind, out.Actual = schemas.FaultDuplicateImageIndex, schemas.Some(f.Bucket)
	case index.FaultSnapshotWhileReady:
		out.Kind, out.Expected, out.Actual = schemas.FaultSnapshotWhileReady, schemas.Some(f.Installed), schemas.Some(f.Sequence)
	case index.FaultTerminalSequenceMismatch:
		out.Kind, out.Expected = schemas.FaultTerminalSequenceMismatch, schemas.Some(f.Expected)
		if f.HasActual {
			out.Actual = schemas.Some(f.Actual)
		}
	default:
		out.Kind = schemas.FaultUnknown
	}
	return out
}

// assignmentFault converts an assignment error to the lane-event fault.
func assignmentFault(err *index.AssignmentError, offset int64) *schemas.LaneFault {
	out := &schemas.LaneFault{Detail: err.Error(), Offset: schemas.Some(offset)}
	switch err.Kind {
	case index.AssignWrongConsumerInstance:
		out.Kind = schemas.FaultWrongConsumerInstance
	case index.AssignWrongPhysicalLane:
		out.Kind = schemas.FaultWrongPhysicalLane
	case index.AssignWrongLaneOwner:
		out.Kind = schemas.FaultWrongLaneOwner
	case index.AssignWrongFormat:
		out.Kind = schemas.FaultWrongFormat
	case index.AssignStaleAssignmentEpoch:
		out.Kind = schemas.FaultStaleAssignmentEpoch
	}
	return out
}

// consumerPoint names the consumer failure point of a consumer-lane disposition; the three
// consumer rows of the failure table differ in (commit, action), so the mapping is exact.
func consumerPoint(d ckf.FailureDisposition) ckf.FailurePoint {
	switch {
	case d.Action == ckf.ActionRetrySnapshot:
		return ckf.InactiveSnapshotInstallFailure
	case d.Commit == ckf.CommitUncertain:
		return ckf.ConsumerWorkerFailureMidApply
	default:
		return ckf.ConsumerGapOrMalformedBeforeWrite
	}
}

// wireDisposition converts a consumer-lane disposition (with its failure point) to the wire.
func wireDisposition(p ckf.FailurePoint) *schemas.FailureDisposition {
	d := ckf.DispositionOf(p)
	out := &schemas.FailureDisposition{}
	switch p {
	case ckf.ConsumerGapOrMalformedBeforeWrite:
		out.Point = schemas.PointConsumerGapOrMalformedBeforeWrite
	case ckf.ConsumerWorkerFailureMidApply:
		out.Point = schemas.PointConsumerWorkerFailureMidApply
	case ckf.InactiveSnapshotInstallFailure:
		out.Point = schemas.PointInactiveSnapshotInstallFailure
	default:
		panic(fmt.Sprintf("streams: %v is not a consumer failure point", p))
	}
	out.Domain = schemas.DomainConsumerLane
	out.RecoveryDomain = schemas.Some(schemas.DomainConsumerLane)
	if d.Commit == ckf.CommitUncertain {
		out.Commit = schemas.CommitUncertain
	} else {
		out.Commit = schemas.CommitKnownUnchanged
	}
	if d.Action == ckf.ActionRetrySnapshot {
		out.Action = schemas.ActionRetrySnapshot
	} else {
		out.Action = schemas.ActionDeactivateAndSnapshot
	}
	return out
}
