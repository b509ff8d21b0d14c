package workers

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/ckf-stream/ckf-stream/streams/query"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/uber-go/tally/v4"
	"go.uber.org/zap"
)

// The worker stage's Kafka query (workers.md, "Queries over Kafka"): WorkerQueryRequest records
// on one topic (ckf-worker-queries) shared by every DC. Each DC's replicas join the consumer
// group QueryGroup(dc) on it, so every DC reads every request and, within a DC, the replicas
// share the partitions: a request reaches each DC once, at whichever of its replicas owns the
// partition. A replica answers only a request whose dc_ids selects its DC (null selects every
// DC) and commits past the others without a reply: a request selecting k DCs gets k replies.
// The rest is streams/query's request/reply machinery (query.NewService): allow-listed reply
// topics, reply partitions, the commit after acknowledged replies, INVALID_REQUEST replies and
// dead letters for requests that cannot be answered.

// QueryGroupPrefix starts the name of every DC's query group: QueryGroup(dc).
const QueryGroupPrefix = "ckf-workers-queries-"

// QueryGroup returns the consumer group of DC dc's replicas on the worker query topic.
func QueryGroup(dc ckf.DcID) string { return QueryGroupPrefix + dc.String() }

// QueryMetricsScope names the query service's metrics: ckf_workers_query_* (docs/metrics.md).
const QueryMetricsScope = "workers_query"

// AnswerFunc answers one decoded request of the replica's DC; it is the same seam as the HTTP
// route's (app/workers.API.Answer, through workerapi's conversions).
type AnswerFunc func(req *schemas.WorkerQueryRequest) schemas.WorkerQueryReply

// DefaultQueryConfig returns streams/query's defaults for DC dc's query service: the worker query
// topics of codec, DC dc's group, dead letters signed "workers".
func DefaultQueryConfig(dc ckf.DcID, codec *schemas.Codec) query.QueryConfig {
	c := query.DefaultQueryConfig()
	c.RequestTopic = codec.Topic(schemas.TypeWorkerQueryRequest)
	c.ReplyTopic = codec.Topic(schemas.TypeWorkerQueryReply)
	c.DeadLetterTopic = codec.Topic(schemas.TypeDeadLetter)
	c.Group = QueryGroup(dc)
	c.Component = "workers"
	return c
}

// QueryServiceParams are NewQueryService's inputs. Config starts from DefaultQueryConfig.
type QueryServiceParams struct {
	DC         ckf.DcID
	Config     query.QueryConfig
	Answer     AnswerFunc
	Codec      *schemas.Codec
	ClientOpts []kgo.Opt
	Metrics    tally.Scope
	Log        *zap.Logger
	// Now is the clock of INVALID_REQUEST replies' reply_time; nil is time.Now.
	Now func() time.Time
}

// NewQueryService builds DC p.DC's query service; nothing connects until Run or Start.
func NewQueryService(p QueryServiceParams) (*query.QueryService, error) {
	if p.Answer == nil || p.Codec == nil {
		return nil, errors.New("streams: worker query service needs an AnswerFunc and a codec")
	}
	now := p.Now
	if now == nil {
		now = time.Now
	}
	return query.NewService(query.ServiceParams{Config: p.Config, Codec: p.Codec, ClientOpts: p.ClientOpts, Metrics: p.Metrics,
		MetricsScope: QueryMetricsScope, Log: p.Log,
		Exchange: &exchange{codec: p.Codec, dc: p.DC, answer: p.Answer, now: now}})
}

// Selects reports whether a request's dc_ids selects dc: nil selects every DC.
func Selects(dcIDs []uint64, dc ckf.DcID) bool {
	return dcIDs == nil || slices.Contains(dcIDs, uint64(dc))
}

// exchange is the worker query as a streams/query Exchange.
type exchange struct {
	codec  *schemas.Codec
	dc     ckf.DcID
	answer AnswerFunc
	now    func() time.Time
	req    schemas.WorkerQueryRequest
}

func (x *exchange) Decode(value []byte) (query.Request, error) {
	req, err := x.codec.DecodeWorkerQueryRequest(value)
	if err != nil {
		return query.Request{}, err
	}
	x.req = req
	return query.Request{CorrelationID: req.CorrelationID, ReplyTopic: req.ReplyTopic, ReplyPartition: req.ReplyPartition,
		RequestTime: req.RequestTime}, nil
}

func (x *exchange) Route(value []byte) (schemas.QueryRoute, bool) {
	return x.codec.WorkerQueryRoute(value)
}

func (x *exchange) Answer(dst []byte) ([]byte, query.Answered, error) {
	if !Selects(x.req.DcIDs, x.dc) {
		return dst, query.Answered{Skip: true}, nil
	}
	// A reply holds at most MaxWorkerReplySources sources, so it fits the reply topic's messages.
	if x.req.TopK == 0 || x.req.TopK > schemas.MaxWorkerReplySources {
		x.req.TopK = schemas.MaxWorkerReplySources
	}
	reply := x.answer(&x.req)
	out, err := x.codec.AppendWorkerQueryReply(dst, reply)
	return out, query.Answered{Status: reply.Status, ErrorMessage: reply.ErrorMessage}, err
}

func (x *exchange) AppendInvalid(dst []byte, correlationID, why string) ([]byte, error) {
	return x.codec.AppendWorkerQueryReply(dst, schemas.WorkerQueryReply{CorrelationID: correlationID, Status: schemas.QueryInvalidRequest,
		ErrorMessage: why, DcID: uint64(x.dc), ReplyTime: x.now()})
}

// Ask sends req on the worker query topic and returns the first reply of every DC until want DCs
// have answered or ctx ends (then it returns what came, with ctx's error). The replies are read
// on partition 0 of the reply topic (req.ReplyPartition is set to it), from its end offset listed
// before the request is sent, so cl must be a plain client (no consumer group, no topics to
// consume). A request's correlation id must be unique: replies to earlier requests are skipped by
// it. It sends the request once: a DC whose replica died without leaving its group answers only
// after the group's session timeout and a rebalance. Routers (and processor query --workers)
// use QueryClient, which keeps one producer and reader for all requests and resends what a dead
// replica holds.
func Ask(ctx context.Context, cl *kgo.Client, codec *schemas.Codec, req schemas.WorkerQueryRequest, want int) ([]schemas.WorkerQueryReply, error) {
	replyTopic := codec.Topic(schemas.TypeWorkerQueryReply)
	if req.ReplyTopic != "" {
		replyTopic = req.ReplyTopic
	}
	req.ReplyPartition = schemas.Some[int32](0)
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, replyTopic)
	if err != nil {
		return nil, fmt.Errorf("listing the end of %s: %w", replyTopic, err)
	}
	end, ok := ends.Lookup(replyTopic, 0)
	if !ok || end.Err != nil {
		return nil, fmt.Errorf("listing the end of %s[0]: %v", replyTopic, end.Err)
	}
	cl.AddConsumePartitions(map[string]map[int32]kgo.Offset{replyTopic: {0: kgo.NewOffset().At(end.Offset)}})
	defer cl.RemoveConsumePartitions(map[string][]int32{replyTopic: {0}})
	if req.RequestTime.IsZero() {
		req.RequestTime = time.Now()
	}
	value, err := codec.EncodeWorkerQueryRequest(req)
	if err != nil {
		return nil, err
	}
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: codec.Topic(schemas.TypeWorkerQueryRequest), Key: []byte(req.CorrelationID), Value: value}).FirstErr(); err != nil {
		return nil, fmt.Errorf("sending the request: %w", err)
	}
	var out []schemas.WorkerQueryReply
	seen := map[uint64]bool{}
	for len(out) < max(want, 1) {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return out, ctx.Err()
		}
		for _, r := range fs.Records() {
			if string(r.Key) != req.CorrelationID {
				continue
			}
			rep, err := codec.DecodeWorkerQueryReply(r.Value)
			if err != nil || seen[rep.DcID] {
				continue
			}
			seen[rep.DcID] = true
			out = append(out, rep)
		}
	}
	return out, nil
}
