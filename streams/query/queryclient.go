package query

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"slices"
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
	// HedgeAfter is how long a call waits for its reply before its request is produced again,
	// with the same correlation id, to another partition of RequestTopic, one whose requests
	// have been answered since (see "Hedged resends" on QueryClient): a replica killed without
	// leaving the group holds its partitions until the group's session timeout (6 s at the
	// least), and this bounds what its calls wait to about HedgeAfter plus one answer. Keep it
	// above the reply delay of a healthy service (p99), or healthy calls are resent. Default
	// 250 ms (DefaultHedgeAfter); 0 disables resends; >= 0.
	HedgeAfter time.Duration
	// MaxHedges bounds the resends of one call, each HedgeAfter after the previous send, each to
	// a partition not tried yet. Default 3 (DefaultMaxHedges: with the query topic's 4
	// partitions, every partition); >= 0.
	MaxHedges int
}

// Hedging defaults.
const (
	// DefaultHedgeAfter is QueryClientConfig.HedgeAfter's default: above the reply delay p99 of
	// a healthy service on the development machine at 50 requests/s (69–111 ms on two shared
	// cores under other work, design §5.1), and with one resend well within the 1 s a router
	// may wait.
	DefaultHedgeAfter = 250 * time.Millisecond
	// DefaultMaxHedges is QueryClientConfig.MaxHedges's default.
	DefaultMaxHedges = 3
)

// DefaultQueryClientConfig returns the query client's defaults: topics derived from the codec,
// a random reply partition, 5 s per call, requests sent without linger, 30 s to find the reply
// partition at start, up to 3 resends 250 ms apart.
func DefaultQueryClientConfig() QueryClientConfig {
	return QueryClientConfig{CallTimeout: 5 * time.Second, StartTimeout: 30 * time.Second,
		HedgeAfter: DefaultHedgeAfter, MaxHedges: DefaultMaxHedges}
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

// Validate checks every field in order and returns the first violation as a *ConfigError, for
// clients of other exchanges built on this configuration (the worker stage's).
func (c QueryClientConfig) Validate() error { return c.validate() }

// validate checks every field in order and returns the first violation as a *ConfigError.
func (c QueryClientConfig) validate() error {
	k := streams.ConfigCheck{Config: "query client"}
	if p, ok := c.ReplyPartition.Get(); ok && p < 0 {
		k.Fail("ReplyPartition", "must not be negative, got %d", p)
	}
	k.Positive("CallTimeout", c.CallTimeout)
	k.NonNegative("RequestLinger", c.RequestLinger)
	k.Positive("StartTimeout", c.StartTimeout)
	k.NonNegative("HedgeAfter", c.HedgeAfter)
	if c.MaxHedges < 0 {
		k.Fail("MaxHedges", "must not be negative, got %d", c.MaxHedges)
	}
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
	// Hedges are the resends of calls left unanswered for HedgeAfter (one call may resend up to
	// MaxHedges times); Duplicates are the late replies to the copies of answered calls, dropped
	// (they are not in Unmatched). Redirected calls were first sent to a partition other than
	// their key's, which had left an earlier call unanswered. HedgesWithheld are resends not
	// sent for want of hedge budget (at most one resend per five calls, sustained).
	Hedges, Duplicates, Redirected, HedgesWithheld int64
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
// discarded and counted as Unmatched (the replies to a resent call's other copies, as
// Duplicates: see "Hedged resends"). A call that times out returns ErrQueryTimeout; the
// request may still be answered later. A status of UNAVAILABLE or INVALID_REQUEST is a reply,
// not an error.
//
// # Hedged resends
//
// Each request goes to an explicit partition of RequestTopic: its key's (Kafka's murmur2 of the
// correlation id, as the default partitioner would choose). A call still unanswered after
// HedgeAfter is produced again, the same bytes, to another partition, one whose requests were
// answered since (PartitionRoutes keeps that evidence from the client's own calls), and again
// every HedgeAfter up to MaxHedges times; the first reply completes the call and the later
// ones are dropped and counted as Duplicates. The partition that left the call waiting is
// suspected: later calls whose key falls on it are sent elsewhere (Redirected), except one probe
// per second, until a probe is answered there without a resend. So when a replica is killed
// without leaving the query group, its partitions' calls wait about HedgeAfter plus one answer
// rather than the group's session timeout plus a rebalance, and later calls do not wait at all.
// The service needs nothing for this: it answers whatever reaches its partitions, at least once.
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
	hedges, duplicates, redirected, withheld         atomic.Int64

	// routes chooses the partitions of sends; requestPartitions is RequestTopic's partition
	// count as the producer's partitioner last saw it (0 until the first send is partitioned).
	routes            *PartitionRoutes
	requestPartitions atomic.Int32
	// late counts, per correlation id of an answered call that was resent, the replies still
	// expected from its other copies (under mu); lateSwept is when late was last swept.
	late      map[string]lateCopies
	lateSwept time.Time
}

// lateCopies are the replies still expected for an answered call's other copies.
type lateCopies struct {
	n  int
	at time.Time
}

// lateCopiesKept bounds how long the client remembers an answered call's outstanding copies: a
// copy answered later than that (the service down for longer) counts as Unmatched.
const lateCopiesKept = 5 * time.Minute

// queryCall is one call in flight: the first reply or produce failure is delivered on ch.
type queryCall struct {
	ch chan queryOutcome
	// sent is set by the first of the broker's acknowledgement and the reply (which proves the
	// request was delivered; it can come first), so the call counts once in QueryClientStats.Sent.
	sent atomic.Bool
	// copies is the number of times the request was produced (1 + resends).
	copies atomic.Int32
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
		prefix: hex.EncodeToString(idBytes[:]) + "-", waiting: map[string]*queryCall{}, done: make(chan struct{}),
		routes: NewPartitionRoutes(0), late: map[string]lateCopies{}}

	opts := streams.ClientOpts{Shared: p.ClientOpts, PerRole: p.ClientOptsFor}
	prod, cons, partition, err := OpenCallClients(ctx, cfg, "query", opts.ForRole("query-requests"), opts.ForRole("query-replies"), &c.requestPartitions)
	if err != nil {
		return nil, err
	}
	c.prod, c.cons, c.partition = prod, cons, partition
	rctx, stop := context.WithCancel(context.Background())
	c.stop = stop
	go c.readReplies(rctx)
	return c, nil
}

// OpenCallClients opens what a client of a request/reply service over Kafka calls with (the
// prefix-match service's QueryClient, the worker stage's client): a producer of requests to
// cfg.RequestTopic (partitioned by RequestPartitioner over partitions, records bounded by the
// call timeout) and a consumer of the reply partition, cfg.ReplyPartition or one at random, from
// its end as listed now, retried until cfg.StartTimeout (a topic just created may take a moment
// to appear). what names the client in errors ("query", "worker query"); produce and consume are
// the two clients' options.
func OpenCallClients(ctx context.Context, cfg QueryClientConfig, what string, produce, consume []kgo.Opt,
	partitions *atomic.Int32) (prod, cons *kgo.Client, partition int32, err error) {
	prod, err = kgo.NewClient(append(slices.Clone(produce),
		kgo.DefaultProduceTopic(cfg.RequestTopic), kgo.ProducerLinger(cfg.RequestLinger),
		kgo.RecordPartitioner(RequestPartitioner(partitions)),
		// A request older than a call's timeout is of no use to anyone; this bounds the records
		// in the buffer while no broker takes them (their calls' contexts do not: see resend).
		kgo.RecordDeliveryTimeout(max(cfg.CallTimeout, time.Second)))...) // franz-go refuses less than 1 s
	if err != nil {
		return nil, nil, 0, fmt.Errorf("streams: %s client producer: %w", what, err)
	}
	sctx, cancel := context.WithTimeout(ctx, cfg.StartTimeout)
	defer cancel()
	partition, start, err := pickReplyPartition(sctx, kadm.NewClient(prod), cfg.ReplyTopic, cfg.ReplyPartition, what)
	if err != nil {
		prod.Close()
		return nil, nil, 0, err
	}
	cons, err = kgo.NewClient(append(slices.Clone(consume),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{cfg.ReplyTopic: {partition: kgo.NewOffset().At(start)}}),
		// If retention ever removes our position, skip ahead: old replies are nobody's.
		kgo.ConsumeResetOffset(kgo.NewOffset().AtEnd()),
		kgo.FetchMaxWait(time.Second),
	)...)
	if err != nil {
		prod.Close()
		return nil, nil, 0, fmt.Errorf("streams: %s client consumer: %w", what, err)
	}
	return prod, cons, partition, nil
}

// pickReplyPartition returns the reply partition (want, or a random one) and its end offset.
func pickReplyPartition(ctx context.Context, adm *kadm.Client, topic string, want schemas.Optional[int32], what string) (int32, int64, error) {
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
				return 0, 0, fmt.Errorf("streams: %s client: reply topic %s has no partition %d (%d partitions)", what, topic, p, len(parts))
			}
		}
		select {
		case <-ctx.Done():
			return 0, 0, fmt.Errorf("streams: %s client: reply topic %s: %w (last error: %v)", what, topic, ctx.Err(), err)
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
		Unmatched: c.unmatched.Load(), Undecodable: c.undecodable.Load(),
		Hedges: c.hedges.Load(), Duplicates: c.duplicates.Load(), Redirected: c.redirected.Load(), HedgesWithheld: c.withheld.Load()}
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
	key := []byte(id)
	n := c.requestPartitions.Load()
	first := int32(-1) // by key, in the partitioner, until the partition count is known
	if n > 0 {
		var redirected bool
		first, redirected = c.routes.First(KeyPartition(key, n), n, nil, time.Now())
		if redirected {
			c.redirected.Add(1)
		}
	}
	call.copies.Store(1)
	// Not the call's context, for the reason given in resend: the producer's delivery timeout
	// (CallTimeout) bounds the record instead.
	c.prod.Produce(context.WithoutCancel(ctx), &kgo.Record{Key: key, Value: value, Partition: first}, func(_ *kgo.Record, err error) {
		if err != nil {
			c.deliver(call, queryOutcome{err: &QueryCallError{CorrelationID: id, Stage: "produce", Err: err}})
			return
		}
		c.countSent(call)
	})
	sentAt := time.Now()
	tried := []int32{first}
	var hedge <-chan time.Time // nil: no more resends
	t := time.NewTimer(c.cfg.HedgeAfter)
	defer t.Stop()
	if c.cfg.HedgeAfter > 0 && c.cfg.MaxHedges > 0 {
		hedge = t.C
	}
	for waiting := true; waiting; {
		select {
		case out := <-call.ch:
			return c.complete(call, out, tried)
		case <-hedge:
			if c.resend(ctx, id, key, value, call, &tried, sentAt) && len(tried) <= c.cfg.MaxHedges {
				t.Reset(c.cfg.HedgeAfter)
			} else {
				hedge = nil
			}
		case <-ctx.Done():
			waiting = false
		case <-c.done:
			waiting = false
		}
	}
	select {
	case out := <-call.ch: // answered while the call was ending
		return c.complete(call, out, tried)
	default:
	}
	if ctx.Err() != nil {
		c.timedOut.Add(1)
		return schemas.QueryReply{}, &QueryCallError{CorrelationID: id, Stage: "reply", Err: fmt.Errorf("%w: %w", ErrQueryTimeout, ctx.Err())}
	}
	return schemas.QueryReply{}, &QueryCallError{CorrelationID: id, Stage: "reply", Err: ErrQueryClientClosed}
}

// complete returns a call's outcome; a reply to a call sent once is evidence that its partition
// is served.
func (c *QueryClient) complete(call *queryCall, out queryOutcome, tried []int32) (schemas.QueryReply, error) {
	if out.err != nil {
		return out.reply, out.err
	}
	c.countSent(call)
	c.answered.Add(1)
	if len(tried) == 1 {
		p := tried[0]
		n := c.requestPartitions.Load()
		if p < 0 {
			p = KeyPartition([]byte(out.reply.CorrelationID), n)
		}
		c.routes.Answered(p, n, 0, time.Now())
	}
	return out.reply, nil
}

// resend produces the call's request again to the partition its routes choose, and reports
// whether it did (no partition left to try, or no budget, and it does not).
func (c *QueryClient) resend(ctx context.Context, id string, key, value []byte, call *queryCall, tried *[]int32, sentAt time.Time) bool {
	n := c.requestPartitions.Load()
	if n <= 0 {
		return false // the first send is not even partitioned yet: nothing to learn from
	}
	if (*tried)[0] < 0 {
		(*tried)[0] = KeyPartition(key, n)
	}
	p, err := c.routes.Hedge(*tried, n, nil, sentAt)
	if err != nil {
		if errors.Is(err, ErrNoHedgeBudget) {
			c.withheld.Add(1)
		}
		return false
	}
	*tried = append(*tried, p)
	call.copies.Add(1)
	c.hedges.Add(1)
	// Not the call's context: the call may end (its first copy answered) while this copy waits
	// in the producer's buffer, and franz-go fails a buffered batch whose first record's context
	// is done, the other calls' requests in it included. The copy is delivered regardless
	// (bounded by the producer's delivery timeout) and its reply dropped as a duplicate.
	c.prod.Produce(context.WithoutCancel(ctx), &kgo.Record{Key: key, Value: value, Partition: p}, func(_ *kgo.Record, err error) {
		if err != nil {
			c.log.Debug("a resent request was not delivered", zap.String("correlation_id", id), zap.Int32("partition", p), zap.Error(err))
		}
	})
	return true
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

// ReadReplies polls a call client's reply consumer (OpenCallClients) until ctx ends or the
// consumer closes, logs fetch errors, and hands every record to handle, on this goroutine: the
// reply reader of the prefix-match client and of the worker stage's.
func ReadReplies(ctx context.Context, cons *kgo.Client, log *zap.Logger, handle func(*kgo.Record)) {
	for {
		fetches := cons.PollFetches(ctx)
		if ctx.Err() != nil || fetches.IsClientClosed() {
			return
		}
		fetches.EachError(func(topic string, p int32, err error) {
			log.Warn("reply fetch error", zap.String("topic", topic), zap.Int32("partition", p), zap.Error(err))
		})
		fetches.EachRecord(handle)
	}
}

// readReplies consumes the reply partition and completes calls until ctx ends.
func (c *QueryClient) readReplies(ctx context.Context) {
	defer close(c.done)
	ReadReplies(ctx, c.cons, c.log, func(r *kgo.Record) {
		reply, err := c.codec.DecodeQueryReply(r.Value)
		if err != nil {
			c.undecodable.Add(1)
			c.log.Warn("undecodable record on the reply partition", zap.Int64("offset", r.Offset), zap.Error(err))
			return
		}
		c.mu.Lock()
		call := c.waiting[reply.CorrelationID]
		late := false
		if call != nil {
			delete(c.waiting, reply.CorrelationID)
			if n := call.copies.Load(); n > 1 {
				c.expectLate(reply.CorrelationID, int(n-1))
			}
		} else if l, ok := c.late[reply.CorrelationID]; ok {
			late = true
			if l.n--; l.n > 0 {
				c.late[reply.CorrelationID] = l
			} else {
				delete(c.late, reply.CorrelationID)
			}
		}
		c.mu.Unlock()
		switch {
		case late:
			c.duplicates.Add(1)
		case call == nil || !c.deliver(call, queryOutcome{reply: reply}):
			c.unmatched.Add(1)
		}
	})
}

// expectLate records that an answered call's other copies owe n replies; c.mu is held. Entries
// older than lateCopiesKept are swept, at most once a minute.
func (c *QueryClient) expectLate(id string, n int) {
	now := time.Now()
	c.late[id] = lateCopies{n: n, at: now}
	if now.Sub(c.lateSwept) < time.Minute {
		return
	}
	c.lateSwept = now
	for k, l := range c.late {
		if now.Sub(l.at) > lateCopiesKept {
			delete(c.late, k)
		}
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
