package query

import (
	"errors"
	"time"

	"github.com/ckf-stream/ckf-stream/schemas"
)

// Exchange is what a request/reply service (QueryService) knows of its records: how to decode a
// request, answer it and refuse it. The service owns everything else: the consumer group, the
// batches and the commit rule, the reply routing (allow-listed reply topics, reply partitions,
// fallbacks), dead letters and the metrics. The prefix-match query is one exchange (the one
// NewQueryService uses); the worker stage's query (streams/workers) is another.
//
// An exchange is used by the service's run goroutine only, one request at a time: Decode, then
// Answer for the request Decode accepted. It may keep scratch state across requests.
type Exchange interface {
	// Decode decodes the framed request in value and keeps it for Answer. A decoding error is a
	// *schemas.DecodeError: schemas.ErrRegistry fails the batch (not the request's fault),
	// schemas.ErrInvalidField lets the service recover the reply address with Route, any other
	// kind leaves only a dead letter.
	Decode(value []byte) (Request, error)
	// Route reads the reply address of a request Decode refused with schemas.ErrInvalidField
	// (schemas.Codec.QueryRoute's rules); ok is false when there is no one to answer.
	Route(value []byte) (rt schemas.QueryRoute, ok bool)
	// Answer answers the request Decode last accepted and appends its framed reply to dst; Skip
	// in the result means the request is not for this service (it owes no reply) and nothing
	// was appended. An error means the reply could not be encoded (a defect).
	Answer(dst []byte) ([]byte, Answered, error)
	// AppendInvalid appends a framed INVALID_REQUEST reply to the request correlationID, saying
	// why.
	AppendInvalid(dst []byte, correlationID, why string) ([]byte, error)
}

// Request is what the service needs of a decoded request: its reply address.
type Request struct {
	CorrelationID  string
	ReplyTopic     string
	ReplyPartition schemas.Optional[int32]
	RequestTime    time.Time
}

// Answered describes a reply an Exchange encoded.
type Answered struct {
	Status       schemas.QueryStatus
	ErrorMessage string
	// Skip: the request is not for this service; no reply is owed and none was encoded.
	Skip bool
}

// queryExchange is the prefix-match query: QueryRequest answered by an Answerer into a
// QueryReply.
type queryExchange struct {
	ans     *Answerer
	codec   *schemas.Codec
	scratch QueryScratch
	req     schemas.QueryRequest
}

func (x *queryExchange) Decode(value []byte) (Request, error) {
	req, err := x.codec.DecodeQueryRequest(value)
	if err != nil {
		return Request{}, err
	}
	x.req = req
	return Request{CorrelationID: req.CorrelationID, ReplyTopic: req.ReplyTopic, ReplyPartition: req.ReplyPartition, RequestTime: req.RequestTime}, nil
}

func (x *queryExchange) Route(value []byte) (schemas.QueryRoute, bool) {
	return x.codec.QueryRoute(value)
}

func (x *queryExchange) Answer(dst []byte) ([]byte, Answered, error) {
	reply := x.ans.Answer(&x.req, &x.scratch)
	out, err := x.codec.AppendQueryReply(dst, reply)
	return out, Answered{Status: reply.Status, ErrorMessage: reply.ErrorMessage}, err
}

func (x *queryExchange) AppendInvalid(dst []byte, correlationID, why string) ([]byte, error) {
	return x.codec.AppendQueryReply(dst, x.ans.InvalidReply(correlationID, why))
}

// errNoExchange is NewService's refusal of missing parts.
var errNoExchange = errors.New("streams: a request/reply service needs an Exchange and a codec")
