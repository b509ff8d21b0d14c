package query

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"
)

// processBatch answers recs and waits until every output is acknowledged. It returns a
// *QueryBatchError when the batch must not be committed.
func (s *QueryService) processBatch(recs []*kgo.Record) error {
	began := time.Now()
	b := &s.batch
	b.reset(len(recs))
	for _, r := range recs {
		if err := s.handle(r); err != nil {
			return s.abandon(len(recs), &QueryBatchError{Requests: len(recs), Topic: "", Partition: -1, Err: err})
		}
	}
	if err := s.settle(len(recs)); err != nil {
		return err
	}
	// Replies the request routed itself that could not be delivered: dead-letter their requests
	// (unless already dead-lettered) and answer INVALID_REQUEST at the next address down
	// (fallbackRoute), then settle again. Each round moves a failed reply one step closer to the
	// unrouted default (ReplyTopic, partitioned by key), whose failure fails the batch, so this
	// ends after at most two extra rounds.
	for {
		fs := b.takeFailures()
		if len(fs) == 0 {
			break
		}
		for _, f := range fs {
			o := b.find(f.rec)
			if o == nil || o.kind != outReply || !o.routed {
				return &QueryBatchError{Requests: len(recs), Failed: len(fs), Topic: f.rec.Topic, Partition: f.rec.Partition, Err: f.err}
			}
			s.m.replyRejected.Inc(1)
			s.log.Warn("reply to the request's own destination not delivered; request dead-lettered and refused at the next address",
				zap.String("correlation_id", string(o.rec.Key)), zap.String("reply_topic", o.rec.Topic), zap.Int32("reply_partition", o.partition), zap.Error(f.err))
			where := "partitioned by key"
			if o.partition >= 0 {
				where = fmt.Sprintf("partition %d", o.partition)
			}
			why := fmt.Sprintf("reply to topic %s (%s) not delivered: %v", o.rec.Topic, where, f.err)
			if !o.deadLettered {
				if err := s.produceDeadLetter(o.src, schemas.DeadLetterRejected, why); err != nil {
					return s.abandon(len(recs), &QueryBatchError{Requests: len(recs), Topic: "", Partition: -1, Err: err})
				}
			}
			if o.status == schemas.QueryInvalidRequest && o.errorMessage != "" {
				why = o.errorMessage + "; " + why
			} else {
				s.m.Invalid.Inc(1)
			}
			topic, part := s.fallbackRoute(o)
			if err := s.produceInvalid(o.src, string(o.rec.Key), why, topic, part, o.requestTime); err != nil {
				return s.abandon(len(recs), &QueryBatchError{Requests: len(recs), Topic: "", Partition: -1, Err: err})
			}
		}
		if err := s.settle(len(recs)); err != nil {
			return err
		}
	}
	// Every output is acknowledged: count the outcomes.
	took := time.Since(began)
	for i := range b.outs {
		o := &b.outs[i]
		switch {
		case o.kind == outDeadLetter:
			s.m.deadLetters.Inc(1)
		case o.kind == outReply && !o.failed:
			s.m.Replies[o.status].Inc(1)
			if !o.requestTime.IsZero() {
				s.m.endToEnd.RecordDuration(time.Since(o.requestTime))
			}
		}
	}
	for range recs {
		s.m.Latency.RecordDuration(took)
	}
	return nil
}

// abandon waits (bounded by ReplyTimeout) for outputs already produced, so that no promise
// touches the batch after the service stops, and returns err.
func (s *QueryService) abandon(requests int, err *QueryBatchError) error {
	_ = s.settle(requests)
	return err
}

// settle flushes the producer and waits for every promise of the batch. It fails only when the
// service is being closed hard (Close's context ended) or the promises outlive ReplyTimeout by
// far, which franz-go's delivery timeout should make impossible.
func (s *QueryService) settle(requests int) error {
	ctx, cancel := context.WithTimeout(s.hard, s.cfg.ReplyTimeout+s.cfg.CommitTimeout)
	defer cancel()
	if err := s.cl.Flush(ctx); err != nil {
		return &QueryBatchError{Requests: requests, Failed: s.batch.pending(), Topic: "", Partition: -1, Err: err}
	}
	// Flush does not count records that failed before they were buffered (an unknown
	// partition, say); the batch's own count covers every promise.
	if err := s.batch.wait(ctx); err != nil {
		return &QueryBatchError{Requests: requests, Failed: s.batch.pending(), Topic: "", Partition: -1, Err: err}
	}
	return nil
}

// handle answers one request record and produces its outputs. It returns an error only when
// the batch must fail (nothing can be produced for the record, or the schema registry is down).
func (s *QueryService) handle(r *kgo.Record) error {
	s.m.Requests.Inc(1)
	req, err := s.x.Decode(r.Value)
	if err != nil {
		if errors.Is(err, schemas.ErrRegistry) {
			return fmt.Errorf("decoding request at %s[%d]@%d: %w", r.Topic, r.Partition, r.Offset, err)
		}
		s.m.Invalid.Inc(1)
		if errors.Is(err, schemas.ErrInvalidField) {
			if rt, ok := s.x.Route(r.Value); ok {
				topic, part := s.route(rt.ReplyTopic, rt.ReplyPartition)
				why := err.Error()
				if rt.IDTruncated {
					why = truncatedIDNote(len(rt.CorrelationID), schemas.MaxCorrelationIDBytes) + why
				}
				if err := s.produceInvalid(r, rt.CorrelationID, why, topic, part, time.Time{}); err != nil {
					return err
				}
			}
		}
		return s.produceDeadLetter(r, schemas.DeadLetterReasonOf(err), err.Error())
	}
	if req.ReplyTopic != "" && !s.replyTopicAllowed(req.ReplyTopic) {
		s.m.Invalid.Inc(1)
		why := fmt.Sprintf("reply_topic %q is not allowed (allowed: %s or a topic starting with one of %q)",
			req.ReplyTopic, s.cfg.ReplyTopic, s.cfg.ReplyTopicPrefixes)
		if err := s.produceInvalid(r, req.CorrelationID, why, s.cfg.ReplyTopic, -1, req.RequestTime); err != nil {
			return err
		}
		return s.produceDeadLetter(r, schemas.DeadLetterRejected, why)
	}
	t0 := time.Now()
	b := &s.batch
	start := len(b.arena)
	arena, ans, err := s.x.Answer(b.arena)
	s.m.AnswerLatency.RecordDuration(time.Since(t0))
	if ans.Skip {
		s.m.skip()
		return nil
	}
	if err != nil {
		// A reply built here that breaks the contract is a bug; the request is still accounted
		// for by a dead letter rather than dropped.
		s.log.Error("reply not encodable", zap.String("correlation_id", req.CorrelationID), zap.Error(err))
		return s.produceDeadLetter(r, schemas.DeadLetterRejected, "reply not encodable: "+err.Error())
	}
	b.arena = arena
	topic, part := s.route(req.ReplyTopic, req.ReplyPartition)
	s.produceEncoded(r, start, req.CorrelationID, ans, topic, part, ans.Status == schemas.QueryInvalidRequest, req.RequestTime)
	if ans.Status == schemas.QueryInvalidRequest {
		// The decoder enforces the same rules, so this is a request that reached Answer by
		// another route into the codec; it is refused all the same.
		s.m.Invalid.Inc(1)
		return s.produceDeadLetter(r, schemas.DeadLetterRejected, ans.ErrorMessage)
	}
	return nil
}

// route returns the reply destination: the request's topic or ReplyTopic, and the request's
// partition or -1 (partition by key).
func (s *QueryService) route(topic string, part schemas.Optional[int32]) (string, int32) {
	if topic == "" || !s.replyTopicAllowed(topic) {
		topic = s.cfg.ReplyTopic
	}
	if p, ok := part.Get(); ok {
		return topic, p
	}
	return topic, -1
}

// fallbackRoute is where the INVALID_REQUEST reply goes when the reply o, to a destination the
// request chose, was not delivered: the same topic partitioned by key when the request named a
// partition (the partition does not exist, most likely: the topic is the caller's and it reads
// it), else ReplyTopic partitioned by key (the topic itself is unusable).
func (s *QueryService) fallbackRoute(o *outRecord) (string, int32) {
	if o.partition >= 0 {
		return o.rec.Topic, -1
	}
	return s.cfg.ReplyTopic, -1
}

func (s *QueryService) replyTopicAllowed(topic string) bool {
	if topic == s.cfg.ReplyTopic {
		return true
	}
	if len(topic) > maxReplyTopicNameBytes {
		return false
	}
	for _, p := range s.cfg.ReplyTopicPrefixes {
		if strings.HasPrefix(topic, p) {
			return true
		}
	}
	return false
}

// produceInvalid encodes an INVALID_REQUEST reply to correlationID saying why and produces it
// (see produceEncoded); the request is also dead-lettered by the caller.
func (s *QueryService) produceInvalid(src *kgo.Record, correlationID, why, topic string, part int32, requestTime time.Time) error {
	b := &s.batch
	start := len(b.arena)
	arena, err := s.x.AppendInvalid(b.arena, correlationID, why)
	if err != nil {
		s.log.Error("reply not encodable", zap.String("correlation_id", correlationID), zap.Error(err))
		return s.produceDeadLetter(src, schemas.DeadLetterRejected, "reply not encodable: "+err.Error())
	}
	b.arena = arena
	s.produceEncoded(src, start, correlationID, Answered{Status: schemas.QueryInvalidRequest, ErrorMessage: why}, topic, part, true, requestTime)
	return nil
}

// produceEncoded produces the reply encoded at b.arena[start:] to topic (partition part, or by
// key when part is -1), keyed by the correlation id. deadLettered says the request is also
// dead-lettered, so a failed delivery of this reply needs no second dead letter; requestTime is
// the request's request_time (zero if absent), for the end-to-end latency.
func (s *QueryService) produceEncoded(src *kgo.Record, start int, correlationID string, ans Answered, topic string, part int32, deadLettered bool, requestTime time.Time) {
	b := &s.batch
	arena := b.arena
	value := arena[start:len(arena):len(arena)]
	keyStart := len(arena)
	arena = append(arena, correlationID...)
	b.arena = arena
	o := b.add()
	o.kind, o.src, o.status, o.partition = outReply, src, ans.Status, part
	o.errorMessage = ans.ErrorMessage
	o.routed = topic != s.cfg.ReplyTopic || part >= 0
	o.deadLettered = deadLettered
	o.requestTime = requestTime
	o.rec = kgo.Record{Topic: topic, Partition: part, Key: arena[keyStart:len(arena):len(arena)], Value: value}
	b.wg.Add(1)
	s.cl.Produce(s.hard, &o.rec, s.onAck)
}

// produceDeadLetter produces a dead letter for src. It fails only if the dead letter cannot be
// encoded, which fails the batch: a request that can be neither answered nor dead-lettered must
// not be committed.
func (s *QueryService) produceDeadLetter(src *kgo.Record, code schemas.DeadLetterReason, reason string) error {
	b := &s.batch
	d := schemas.DeadLetter{
		SourceTopic: src.Topic, SourcePartition: src.Partition, SourceOffset: src.Offset, SourceTimestamp: src.Timestamp,
		Key: src.Key, Value: src.Value, ReasonCode: code, Reason: reason, Component: s.cfg.Component, DeadLetterTime: time.Now(),
	}
	start := len(b.arena)
	arena, err := s.codec.AppendDeadLetter(b.arena, d)
	if err != nil {
		return fmt.Errorf("dead letter for %s[%d]@%d not encodable: %w", src.Topic, src.Partition, src.Offset, err)
	}
	b.arena = arena
	key := src.Key
	if key == nil {
		key = []byte{} // hashed like any key: a nil key would take the sticky random path
	}
	o := b.add()
	o.kind, o.src, o.partition = outDeadLetter, src, -1
	o.rec = kgo.Record{Topic: s.cfg.DeadLetterTopic, Partition: -1, Key: key, Value: arena[start:len(arena):len(arena)]}
	b.wg.Add(1)
	s.cl.Produce(s.hard, &o.rec, s.onAck)
	s.log.Info("query request dead-lettered", zap.String("topic", src.Topic), zap.Int32("partition", src.Partition),
		zap.Int64("offset", src.Offset), zap.Stringer("reason_code", code), zap.String("reason", reason))
	return nil
}
