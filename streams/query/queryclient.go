package query

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/ckf-stream/ckf-stream/streams"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"
)

// QueryClientConfig configures a QueryClient. Start from DefaultQueryClientConfig:
// NewQueryClient takes every field as it is (see the package's configuration style in
// config.go); only the empty topic names are derived, from the codec.
type QueryClientConfig struct {
	// RequestTopic is where requests are produced. "" (the default) derives the codec's
	// QueryRequest topic.
	RequestTopic string
	// ReplyTopic is the topic the client reads its replies from; it must be the indexers'
	// QueryConfig.ReplyTopic or allowed by their ReplyTopicPrefixes. "" (the default) derives
	// the codec's QueryReply topic.
	ReplyTopic string
	// ReplyPartition is the partition of ReplyTopic this client reads. Absent (the default): one
	// partition picked at random when the client starts, which spreads many clients over the
	// partitions. When set it must be >= 0 and name an existing partition.
	ReplyPartition schemas.Optional[int32]
	// CallTimeout bounds one Query when its context has no earlier deadline. Default 5 s; > 0.
	CallTimeout time.Duration
	// RequestLinger is the producer linger of requests (linger.ms). Default 0: a request is sent
	// as soon as it is produced, which is what a caller waiting for the answer wants; a load tool
	// with many requests in flight may trade a little latency for larger batches. >= 0.
	RequestLinger time.Duration
	// StartTimeout bounds NewQueryClient's look-up of the reply partition. Default 30 s; > 0.
	StartTimeout time.Duration
}

// DefaultQueryClientConfig returns the query client's defaults: topics derived from the codec,
// a random reply partition, 5 s per call, requests sent without linger, 30 s to find the reply
// partition at start.
func DefaultQueryClientConfig() QueryClientConfig {
	return QueryClientConfig{CallTimeout: 5 * time.Second, StartTimeout: 30 * time.Second}
}

// withDerived fills the empty topic names from the codec.
func (c QueryClientConfig) withDerived(codec *schemas.Codec) QueryClientConfig {
	if c.RequestTopic == "" {
		c.RequestTopic = codec.Topic(schemas.TypeQueryRequest)
	}
	if c.ReplyTopic == "" {
		c.ReplyTopic = codec.Topic(schemas.TypeQueryReply)
	}
	return c
}

// validate checks every field in order and returns the first violation as a *ConfigError.
func (c QueryClientConfig) validate() error {
	k := streams.ConfigCheck{Config: "query client"}
	if p, ok := c.ReplyPartition.Get(); ok && p < 0 {
		k.Fail("ReplyPartition", "must not be negative, got %d", p)
	}
	k.Positive("CallTimeout", c.CallTimeout)
	k.NonNegative("RequestLinger", c.RequestLinger)
	k.Positive("StartTimeout", c.StartTimeout)
	return k.Result()
}

// QueryClientParams are what NewQueryClient needs. ClientOpts carry the connection (seed
// brokers, TLS, SASL, client id); ClientOptsFor, when set, is used instead, once per client, with
// the roles "query-requests" and "query-replies". Log may be nil.
type QueryClientParams struct {
	Config        QueryClientConfig
	Codec         *schemas.Codec
	ClientOpts    []kgo.Opt
	ClientOptsFor streams.ClientOptsFunc
	Log           *zap.Logger
}

// Errors of the query client, for errors.Is.
var (
	// ErrQueryClientClosed: the client was closed before the reply arrived.
	ErrQueryClientClosed = errors.New("streams: query client closed")
	// ErrQueryTimeout: no reply arrived within the call's deadline. The request may still be
	// answered later; that reply is discarded.
	ErrQueryTimeout = errors.New("streams: query timed out waiting for its reply")
	// ErrDuplicateCorrelationID: a call with the same correlation id is already in flight.
	ErrDuplicateCorrelationID = errors.New("streams: correlation id already in flight")
)

// QueryCallError reports a call that got no reply: the request could not be encoded or
// produced, or no reply came in time (ErrQueryTimeout, with the context's error), or the client
// closed.
type QueryCallError struct {
	CorrelationID string
	// Stage is "encode", "produce" or "reply".
	Stage string
	Err   error
}

// Error implements error.
func (e *QueryCallError) Error() string {
	return "streams: query " + strconv.Quote(e.CorrelationID) + " failed at " + e.Stage + ": " + e.Err.Error()
}

// Unwrap returns the cause.
func (e *QueryCallError) Unwrap() error { return e.Err }

// QueryClientStats counts a client's calls and replies since it started.
type QueryClientStats struct {
	// Sent requests were acknowledged by the broker or answered, whichever came first (a reply
	// can arrive before the acknowledgement), so Answered <= Sent in every Stats.
	Sent int64
	// Answered calls received their reply.
	Answered int64
	// TimedOut calls gave up waiting.
	TimedOut int64
	// Unmatched replies carried a correlation id no call was waiting for: replies to other
	// clients that share the partition, late replies to calls that timed out, and the
	// duplicate replies of the service's at-least-once delivery.
	Unmatched int64
	// Undecodable records on the reply partition could not be decoded as a QueryReply.
	Undecodable int64
}

// QueryClient sends query requests to the indexers over Kafka and waits for their replies. It
// is safe for concurrent use; any number of calls may be in flight.
//
// # Reply routing
//
// Every request names the client's own reply destination: reply_topic = ReplyTopic and
// reply_partition = one partition of it, which the client alone reads, by direct assignment
// (no consumer group), from the partition's end offset as looked up when the client started.
// That choice, against the alternatives:
//
//   - Reading every partition of the shared reply topic would make every client receive every
//     reply: the cost of N routers grows as N times the total query rate.
//   - A topic per client needs topic-creation rights for every router, leaves topics behind
//     after crashes, and adds metadata churn to the cluster.
//   - One partition per client, chosen by the client, costs one fetch session and sees only the
//     replies of the clients that picked the same partition; extra replies are skipped by
//     correlation id (cheap), and nothing needs admin rights or cleanup.
//
// The start offset is looked up explicitly (ListOffsets) rather than "at end" on the first
// fetch, so a reply written between the first request and the first fetch cannot be missed.
//
// # Correlation and delivery
//
// A call without a correlation id gets a unique one (a random per-client prefix and a counter).
// The first reply with the id completes the call; later replies with the same id (the service
// delivers at least once, so duplicates happen) and replies to calls that already timed out are
// discarded and counted as Unmatched. A call that times out returns ErrQueryTimeout; the
// request may still be answered later. A status of UNAVAILABLE or INVALID_REQUEST is a reply,
// not an error.
type QueryClient struct {
	cfg       QueryClientConfig
	codec     *schemas.Codec
	log       *zap.Logger
	prod      *kgo.Client
	cons      *kgo.Client
	partition int32
	prefix    string
	next      atomic.Uint64

	mu      sync.Mutex
	waiting map[string]*queryCall
	closed  bool

	stop context.CancelFunc
	done chan struct{}

	sent, answered, timedOut, unmatched, undecodable atomic.Int64
}

// queryCall is one call in flight: the first reply or produce failure is delivered on ch.
type queryCall struct {
	ch chan queryOutcome
	// sent is set by the first of the broker's acknowledgement and the reply (which proves the
	// request was delivered; it can come first), so the call counts once in QueryClientStats.Sent.
	sent atomic.Bool
}

type queryOutcome struct {
	reply schemas.QueryReply
	err   error
}

// NewQueryClient validates the configuration, taken as it is (an invalid field is a
// *ConfigError; empty topic names are derived from the codec), connects, picks the reply
// partition, looks up its end offset and starts reading replies from there. It fails at once
// when the configured partition is out of range, and after
// StartTimeout (or ctx's end) when the reply topic cannot be found: it retries meanwhile, as a
// topic just created may take a moment to appear.
func NewQueryClient(ctx context.Context, p QueryClientParams) (*QueryClient, error) {
	if p.Codec == nil {
		return nil, errors.New("streams: query client needs a codec")
	}
	cfg := p.Config.withDerived(p.Codec)
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	log := p.Log
	if log == nil {
		log = zap.NewNop()
	}
	var idBytes [8]byte
	if _, err := rand.Read(idBytes[:]); err != nil {
		return nil, fmt.Errorf("streams: query client id: %w", err)
	}
	c := &QueryClient{cfg: cfg, codec: p.Codec, log: log.Named("query_client"),
		prefix: hex.EncodeToString(idBytes[:]) + "-", waiting: map[string]*queryCall{}, done: make(chan struct{})}

	opts := streams.ClientOpts{Shared: p.ClientOpts, PerRole: p.ClientOptsFor}
	prod, err := kgo.NewClient(opts.ForRole("query-requests",
		kgo.DefaultProduceTopic(cfg.RequestTopic), kgo.ProducerLinger(cfg.RequestLinger))...)
	if err != nil {
		return nil, fmt.Errorf("streams: query client producer: %w", err)
	}
	sctx, cancel := context.WithTimeout(ctx, cfg.StartTimeout)
	defer cancel()
	partition, start, err := pickReplyPartition(sctx, kadm.NewClient(prod), cfg.ReplyTopic, cfg.ReplyPartition)
	if err != nil {
		prod.Close()
		return nil, err
	}
	cons, err := kgo.NewClient(opts.ForRole("query-replies",
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{cfg.ReplyTopic: {partition: kgo.NewOffset().At(start)}}),
		// If retention ever removes our position, skip ahead: old replies are nobody's.
		kgo.ConsumeResetOffset(kgo.NewOffset().AtEnd()),
		kgo.FetchMaxWait(time.Second),
	)...)
	if err != nil {
		prod.Close()
		return nil, fmt.Errorf("streams: query client consumer: %w", err)
	}
	c.prod, c.cons, c.partition = prod, cons, partition
	rctx, stop := context.WithCancel(context.Background())
	c.stop = stop
	go c.readReplies(rctx)
	return c, nil
}

// pickReplyPartition returns the reply partition (want, or a random one) and its end offset.
func pickReplyPartition(ctx context.Context, adm *kadm.Client, topic string, want schemas.Optional[int32]) (int32, int64, error) {
	for {
		ends, err := adm.ListEndOffsets(ctx, topic)
		if err == nil {
			err = ends.Error()
		}
		if err == nil {
			parts := ends[topic]
			if len(parts) == 0 {
				err = fmt.Errorf("topic %s has no partitions", topic)
			} else {
				p, ok := want.Get()
				if !ok {
					p = int32(mrand.IntN(len(parts)))
				}
				if o, ok := parts[p]; ok {
					return p, o.Offset, nil
				}
				return 0, 0, fmt.Errorf("streams: query client: reply topic %s has no partition %d (%d partitions)", topic, p, len(parts))
			}
		}
		select {
		case <-ctx.Done():
			return 0, 0, fmt.Errorf("streams: query client: reply topic %s: %w (last error: %v)", topic, ctx.Err(), err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Config returns the configuration the client runs with: the one it was built with, its empty
// topic names derived from the codec.
func (c *QueryClient) Config() QueryClientConfig { return c.cfg }

// ReplyPartition returns the partition of the reply topic this client reads.
func (c *QueryClient) ReplyPartition() int32 { return c.partition }

// Stats returns the client's counters. Answered is read before Sent: a call counts as sent before
// it counts as answered, so the two read in this order keep Answered <= Sent.
func (c *QueryClient) Stats() QueryClientStats {
	answered := c.answered.Load()
	return QueryClientStats{Sent: c.sent.Load(), Answered: answered, TimedOut: c.timedOut.Load(),
		Unmatched: c.unmatched.Load(), Undecodable: c.undecodable.Load()}
}

// NewCorrelationID returns a correlation id unique to this client.
func (c *QueryClient) NewCorrelationID() string {
	return c.prefix + strconv.FormatUint(c.next.Add(1), 10)
}

// Query sends req and returns its reply. It fills in the correlation id when req has none (a
// caller-chosen id must be unique among this client's calls in flight) and the request time
// when it is zero, and always sets the reply topic and partition to the client's own (a
// request routed elsewhere would never be seen). It waits until the reply arrives, ctx ends,
// CallTimeout passes or the client closes; errors are *QueryCallError wrapping ErrQueryTimeout,
// ErrQueryClientClosed, ErrDuplicateCorrelationID, the encoder's error or the producer's.
func (c *QueryClient) Query(ctx context.Context, req schemas.QueryRequest) (schemas.QueryReply, error) {
	if req.CorrelationID == "" {
		req.CorrelationID = c.NewCorrelationID()
	}
	req.ReplyTopic = c.cfg.ReplyTopic
	req.ReplyPartition = schemas.Some(c.partition)
	if req.RequestTime.IsZero() {
		req.RequestTime = time.Now()
	}
	id := req.CorrelationID
	value, err := c.codec.EncodeQueryRequest(req)
	if err != nil {
		return schemas.QueryReply{}, &QueryCallError{CorrelationID: id, Stage: "encode", Err: err}
	}
	call := &queryCall{ch: make(chan queryOutcome, 1)}
	c.mu.Lock()
	switch {
	case c.closed:
		c.mu.Unlock()
		return schemas.QueryReply{}, &QueryCallError{CorrelationID: id, Stage: "produce", Err: ErrQueryClientClosed}
	case c.waiting[id] != nil:
		c.mu.Unlock()
		return schemas.QueryReply{}, &QueryCallError{CorrelationID: id, Stage: "produce", Err: ErrDuplicateCorrelationID}
	}
	// Registered before the produce: the reply may arrive before the produce acknowledgement.
	c.waiting[id] = call
	c.mu.Unlock()
	defer c.forget(id, call)

	ctx, cancel := context.WithTimeout(ctx, c.cfg.CallTimeout)
	defer cancel()
	c.prod.Produce(ctx, &kgo.Record{Key: []byte(id), Value: value}, func(_ *kgo.Record, err error) {
		if err != nil {
			c.deliver(call, queryOutcome{err: &QueryCallError{CorrelationID: id, Stage: "produce", Err: err}})
			return
		}
		c.countSent(call)
	})
	select {
	case out := <-call.ch:
		if out.err == nil {
			c.countSent(call)
			c.answered.Add(1)
		}
		return out.reply, out.err
	case <-ctx.Done():
		c.timedOut.Add(1)
		return schemas.QueryReply{}, &QueryCallError{CorrelationID: id, Stage: "reply", Err: fmt.Errorf("%w: %w", ErrQueryTimeout, ctx.Err())}
	case <-c.done:
		return schemas.QueryReply{}, &QueryCallError{CorrelationID: id, Stage: "reply", Err: ErrQueryClientClosed}
	}
}

// countSent counts call as sent, once.
func (c *QueryClient) countSent(call *queryCall) {
	if call.sent.CompareAndSwap(false, true) {
		c.sent.Add(1)
	}
}

// deliver hands out to call unless it already has an outcome (the first one wins).
func (c *QueryClient) deliver(call *queryCall, out queryOutcome) bool {
	select {
	case call.ch <- out:
		return true
	default:
		return false
	}
}

func (c *QueryClient) forget(id string, call *queryCall) {
	c.mu.Lock()
	if c.waiting[id] == call {
		delete(c.waiting, id)
	}
	c.mu.Unlock()
}

// readReplies consumes the reply partition and completes calls until ctx ends.
func (c *QueryClient) readReplies(ctx context.Context) {
	defer close(c.done)
	for {
		fetches := c.cons.PollFetches(ctx)
		if ctx.Err() != nil || fetches.IsClientClosed() {
			return
		}
		fetches.EachError(func(topic string, p int32, err error) {
			c.log.Warn("reply fetch error", zap.String("topic", topic), zap.Int32("partition", p), zap.Error(err))
		})
		fetches.EachRecord(func(r *kgo.Record) {
			reply, err := c.codec.DecodeQueryReply(r.Value)
			if err != nil {
				c.undecodable.Add(1)
				c.log.Warn("undecodable record on the reply partition", zap.Int64("offset", r.Offset), zap.Error(err))
				return
			}
			c.mu.Lock()
			call := c.waiting[reply.CorrelationID]
			if call != nil {
				delete(c.waiting, reply.CorrelationID)
			}
			c.mu.Unlock()
			if call == nil || !c.deliver(call, queryOutcome{reply: reply}) {
				c.unmatched.Add(1)
			}
		})
	}
}

// Close stops reading replies, fails the calls in flight with ErrQueryClientClosed and closes
// the Kafka clients. Requests already produced may still be answered; nobody reads those replies.
func (c *QueryClient) Close() {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	c.mu.Unlock()
	c.stop()
	<-c.done
	c.cons.Close()
	c.prod.Close()
}
