package workerapi

import (
	"fmt"
	"strconv"
	"time"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/queryapi"
	"github.com/ckf-stream/ckf-stream/schemas"
)

// The Kafka form of this contract (schemas.WorkerQueryRequest and WorkerQueryReply): the worker
// stage's query service decodes a request, turns it into a Request with FromKafka, answers it
// with the HTTP route's seam (app/workers.API.Answer), and turns the answer into a reply with
// KafkaReply, so the two forms answer alike and nobody maps a reply by hand a second time.

// FromKafka returns the Request a decoded Kafka request asks: its prompt with its blocks' extra
// keys, top k and DC filter.
func FromKafka(q *schemas.WorkerQueryRequest) Request {
	r := Request{Query: q.Prompt(), Extra: q.BlockExtraKeys, TopK: int(q.TopK)}
	if q.DcIDs != nil {
		r.DCs = make([]ckf.DcID, len(q.DcIDs))
		for i, d := range q.DcIDs {
			r.DCs[i] = ckf.DcID(d)
		}
	}
	return r
}

// KafkaReply returns r as a WorkerQueryReply: the status, the state (UNKNOWN when r has none),
// the DC, the sources packed, the age (null when unknown), the lag and the reply time (r's, or now
// when r has none).
func (r *WorkerMatchResponse) KafkaReply(now time.Time) (schemas.WorkerQueryReply, error) {
	out := schemas.WorkerQueryReply{CorrelationID: r.CorrelationID, ErrorMessage: r.Error, QueryBlocks: r.QueryBlocks,
		LagRecords: max(r.Age.LagRecords, 0), ReplyTime: now, State: stateOf(r.State)}
	if !r.ReplyTime.IsZero() {
		out.ReplyTime = r.ReplyTime
	}
	switch r.Status {
	case StatusOK:
		out.Status = schemas.QueryOK
	case StatusUnavailable:
		out.Status = schemas.QueryUnavailable
	case StatusInvalidRequest:
		out.Status = schemas.QueryInvalidRequest
	default:
		return out, fmt.Errorf("workerapi: status %q has no Kafka form", r.Status)
	}
	if r.DcID != "" {
		dc, err := strconv.ParseUint(r.DcID, 16, 64)
		if err != nil {
			return out, fmt.Errorf("workerapi: DC id %q: %w", r.DcID, err)
		}
		out.DcID = dc
	}
	if r.Age.AgeMs >= 0 {
		out.AgeMillis = schemas.Some(r.Age.AgeMs)
	}
	if len(r.Sources) > 0 {
		out.Sources = make([]schemas.WorkerSource, len(r.Sources))
		for i, s := range r.Sources {
			out.Sources[i] = schemas.WorkerSource{WorkerID: s.WorkerID, DpRank: s.DpRank, Device: s.Device, HostPinned: s.HostPinned, Disk: s.Disk, External: s.External}
		}
	}
	return out, nil
}

// FromKafkaReply returns a WorkerQueryReply as the JSON answer of this contract (dc_selected is
// true: a DC that is not selected does not reply over Kafka). An INVALID_REQUEST reply has no
// state; a state the reply does not give (a replica of an earlier revision) reads StateUnknown.
func FromKafkaReply(r *schemas.WorkerQueryReply) WorkerMatchResponse {
	out := WorkerMatchResponse{CorrelationID: r.CorrelationID, Error: r.ErrorMessage, DcID: ckf.DcID(r.DcID).String(), DcSelected: true,
		QueryBlocks: r.QueryBlocks, Age: ReplicaAge{AgeMs: -1, LagRecords: r.LagRecords}, Sources: make([]SourceMatch, len(r.Sources)),
		ReplyTime: r.ReplyTime.UTC()}
	if r.Status != schemas.QueryInvalidRequest {
		out.State = queryapi.LaneStateName(r.State)
	}
	if a, ok := r.AgeMillis.Get(); ok {
		out.Age.AgeMs = a
	}
	switch r.Status {
	case schemas.QueryOK:
		out.Status = StatusOK
	case schemas.QueryUnavailable:
		out.Status = StatusUnavailable
	default:
		out.Status = StatusInvalidRequest
	}
	for i, s := range r.Sources {
		out.Sources[i] = SourceMatch{WorkerID: s.WorkerID, DpRank: s.DpRank, Device: s.Device, HostPinned: s.HostPinned, Disk: s.Disk, External: s.External}
	}
	return out
}

// stateOf is the Kafka state of a State word; "" and words it does not know are
// LaneStateUnknown.
func stateOf(word string) schemas.LaneAnswerState {
	for _, s := range []schemas.LaneAnswerState{schemas.LaneExact, schemas.LaneIncomplete, schemas.LaneStale, schemas.LaneUnavailable} {
		if queryapi.LaneStateName(s) == word {
			return s
		}
	}
	return schemas.LaneStateUnknown
}
