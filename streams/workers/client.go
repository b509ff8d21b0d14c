package workers

import (
	"context"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/ckf-stream/ckf-stream/streams/query"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"
)

// QueryClient asks the worker stage over Kafka, for a router: one producer and one reader of its
// own reply partition for all its requests, as query.QueryClient for the prefix-match query, and
// the same hedged resends ("Hedged resends" on query.QueryClient): a DC whose reply is missing
// HedgeAfter after a send is asked again, with the same correlation id, on another partition of
// the request topic, one that DC has answered on since. Each DC's replicas are a consumer group
// of their own on the shared topic, so the evidence (query.PartitionRoutes) is kept per DC, and
// a resend of a request that names its DCs names only those still missing. Safe for concurrent
// use.
type QueryClient struct {
	cfg       query.QueryClientConfig
	codec     *schemas.Codec
	log       *zap.Logger
	prod      *kgo.Client
	cons      *kgo.Client
	partition int32
	next      atomic.Uint64
	prefix    string

	routes            *query.PartitionRoutes
	requestPartitions atomic.Int32

	mu      sync.Mutex
	waiting map[string]*workerCall
	// late holds the correlation ids of answered calls that were resent, for counting their
	// copies' replies as Duplicates; swept after lateKept.
	late      map[string]time.Time
	lateSwept time.Time
	closed    bool

	stop context.CancelFunc
	done chan struct{}

	sent, answered, timedOut, unmatched, undecodable atomic.Int64
	hedges, duplicates, redirected, withheld         atomic.Int64
}

// workerCall is one Ask in flight: the replies of its DCs, first one of each.
type workerCall struct {
	mu      sync.Mutex
	replies []schemas.WorkerQueryReply
	notify  chan struct{}
	copies  atomic.Int32
}

const lateKept = 5 * time.Minute

// QueryClientParams are NewQueryClient's inputs. Config starts from DefaultQueryClientConfig;
// ClientOpts carry the connection. Log may be nil.
type QueryClientParams struct {
	Config     query.QueryClientConfig
	Codec      *schemas.Codec
	ClientOpts []kgo.Opt
	Log        *zap.Logger
}

// DefaultQueryClientConfig returns query.QueryClient's defaults on the worker query topics of
// codec.
func DefaultQueryClientConfig(codec *schemas.Codec) query.QueryClientConfig {
	c := query.DefaultQueryClientConfig()
	c.RequestTopic = codec.Topic(schemas.TypeWorkerQueryRequest)
	c.ReplyTopic = codec.Topic(schemas.TypeWorkerQueryReply)
	return c
}

// ErrWorkerQueryTimeout means not every DC asked for answered within the call's deadline.
var ErrWorkerQueryTimeout = errors.New("streams: worker query timed out waiting for its replies")

// NewQueryClient validates the configuration (query.QueryClientConfig's rules; empty topic names
// are the worker query topics of the codec), connects, picks the reply partition (the configured
// one or one at random), looks up its end offset and starts reading replies from there.
func NewQueryClient(ctx context.Context, p QueryClientParams) (*QueryClient, error) {
	if p.Codec == nil {
		return nil, errors.New("streams: worker query client needs a codec")
	}
	cfg := p.Config
	if cfg.RequestTopic == "" {
		cfg.RequestTopic = p.Codec.Topic(schemas.TypeWorkerQueryRequest)
	}
	if cfg.ReplyTopic == "" {
		cfg.ReplyTopic = p.Codec.Topic(schemas.TypeWorkerQueryReply)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log := p.Log
	if log == nil {
		log = zap.NewNop()
	}
	c := &QueryClient{cfg: cfg, codec: p.Codec, log: log.Named("worker_query_client"), routes: query.NewPartitionRoutes(0),
		waiting: map[string]*workerCall{}, late: map[string]time.Time{}, done: make(chan struct{}),
		prefix: strconv.FormatUint(mrand.Uint64(), 36) + "-"}
	prod, cons, partition, err := query.OpenCallClients(ctx, cfg, "worker query", p.ClientOpts, p.ClientOpts, &c.requestPartitions)
	if err != nil {
		return nil, err
	}
	c.prod, c.cons, c.partition = prod, cons, partition
	rctx, stop := context.WithCancel(context.Background())
	c.stop = stop
	go c.readReplies(rctx)
	return c, nil
}

// Stats returns the client's counters (query.QueryClientStats; Answered counts calls every DC
// asked for answered).
func (c *QueryClient) Stats() query.QueryClientStats {
	answered := c.answered.Load()
	return query.QueryClientStats{Sent: c.sent.Load(), Answered: answered, TimedOut: c.timedOut.Load(),
		Unmatched: c.unmatched.Load(), Undecodable: c.undecodable.Load(), Hedges: c.hedges.Load(),
		Duplicates: c.duplicates.Load(), Redirected: c.redirected.Load(), HedgesWithheld: c.withheld.Load()}
}

// ReplyPartition returns the partition of the reply topic this client reads.
func (c *QueryClient) ReplyPartition() int32 { return c.partition }

// Ask sends req and returns the first reply of each DC, once want DCs have answered (want <= 0:
// len(req.DcIDs) when the request names its DCs, else 1). It fills in the correlation id when
// req has none, and the request time when it is zero, and sets the reply topic and partition to
// the client's own. When ctx ends or CallTimeout passes first it returns the replies that came,
// with a *query.QueryCallError wrapping ErrWorkerQueryTimeout. Each reply says what its DC's
// answer is worth (State) and how old the DC is (AgeMillis, its as_of age); req.MaxAgeMillis
// makes an older DC reply UNAVAILABLE, State schemas.LaneStale, without sources (workers §10 in
// docs/spec/workers.md).
func (c *QueryClient) Ask(ctx context.Context, req schemas.WorkerQueryRequest, want int) ([]schemas.WorkerQueryReply, error) {
	if req.CorrelationID == "" {
		req.CorrelationID = c.prefix + strconv.FormatUint(c.next.Add(1), 10)
	}
	if want <= 0 {
		want = max(len(req.DcIDs), 1)
	}
	req.ReplyTopic = c.cfg.ReplyTopic
	req.ReplyPartition = schemas.Some(c.partition)
	if req.RequestTime.IsZero() {
		req.RequestTime = time.Now()
	}
	id := req.CorrelationID
	value, err := c.codec.EncodeWorkerQueryRequest(req)
	if err != nil {
		return nil, &query.QueryCallError{CorrelationID: id, Stage: "encode", Err: err}
	}
	call := &workerCall{notify: make(chan struct{}, 1)}
	call.copies.Store(1)
	c.mu.Lock()
	switch {
	case c.closed:
		c.mu.Unlock()
		return nil, &query.QueryCallError{CorrelationID: id, Stage: "produce", Err: query.ErrQueryClientClosed}
	case c.waiting[id] != nil:
		c.mu.Unlock()
		return nil, &query.QueryCallError{CorrelationID: id, Stage: "produce", Err: query.ErrDuplicateCorrelationID}
	}
	c.waiting[id] = call
	c.mu.Unlock()
	defer c.forget(id, call)

	ctx, cancel := context.WithTimeout(ctx, c.cfg.CallTimeout)
	defer cancel()
	key := []byte(id)
	first := int32(-1)
	if n := c.requestPartitions.Load(); n > 0 {
		var redirected bool
		if first, redirected = c.routes.First(query.KeyPartition(key, n), n, req.DcIDs, time.Now()); redirected {
			c.redirected.Add(1)
		}
	}
	produceErr := make(chan error, 1)
	// Not the call's context (see resend): the producer's delivery timeout bounds the record.
	c.prod.Produce(context.WithoutCancel(ctx), &kgo.Record{Key: key, Value: value, Partition: first}, func(_ *kgo.Record, err error) {
		if err != nil {
			produceErr <- err
			return
		}
		c.sent.Add(1)
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
		case <-call.notify:
			if out := call.got(); len(out) >= want {
				return c.complete(id, call, out, tried), nil
			}
		case <-hedge:
			if c.resend(ctx, req, key, call, &tried, sentAt) && len(tried) <= c.cfg.MaxHedges {
				t.Reset(c.cfg.HedgeAfter)
			} else {
				hedge = nil
			}
		case err := <-produceErr:
			return call.got(), &query.QueryCallError{CorrelationID: id, Stage: "produce", Err: err}
		case <-ctx.Done():
			waiting = false
		case <-c.done:
			waiting = false
		}
	}
	if ctx.Err() != nil {
		c.timedOut.Add(1)
		return call.got(), &query.QueryCallError{CorrelationID: id, Stage: "reply", Err: fmt.Errorf("%w: %w", ErrWorkerQueryTimeout, ctx.Err())}
	}
	return call.got(), &query.QueryCallError{CorrelationID: id, Stage: "reply", Err: query.ErrQueryClientClosed}
}

// got returns the replies so far.
func (w *workerCall) got() []schemas.WorkerQueryReply {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.replies)
}

// complete counts an answered call; the replies of a call sent once are evidence that its
// partition is served by the DCs that answered.
func (c *QueryClient) complete(id string, call *workerCall, out []schemas.WorkerQueryReply, tried []int32) []schemas.WorkerQueryReply {
	c.answered.Add(1)
	n := c.requestPartitions.Load()
	if call.copies.Load() == 1 {
		p := tried[0]
		if p < 0 {
			p = query.KeyPartition([]byte(id), n)
		}
		now := time.Now()
		for _, r := range out {
			c.routes.Answered(p, n, r.DcID, now)
		}
	}
	return out
}

// resend produces the request again for the DCs that have not answered (all of them when the
// request names none) to the partition the routes choose; it reports whether it did.
func (c *QueryClient) resend(ctx context.Context, req schemas.WorkerQueryRequest, key []byte, call *workerCall, tried *[]int32, sentAt time.Time) bool {
	n := c.requestPartitions.Load()
	if n <= 0 {
		return false
	}
	if (*tried)[0] < 0 {
		(*tried)[0] = query.KeyPartition(key, n)
	}
	missing := missingDCs(req.DcIDs, call.got())
	if missing != nil && len(missing) == 0 {
		return false // every DC named has answered; the call completes on its own
	}
	req.DcIDs = missing
	p, err := c.routes.Hedge(*tried, n, missing, sentAt)
	if err != nil {
		if errors.Is(err, query.ErrNoHedgeBudget) {
			c.withheld.Add(1)
		}
		return false
	}
	value, err := c.codec.EncodeWorkerQueryRequest(req)
	if err != nil {
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
			c.log.Debug("a resent worker request was not delivered", zap.String("correlation_id", req.CorrelationID), zap.Error(err))
		}
	})
	return true
}

// missingDCs returns the DCs of asked without a reply in answered, or nil (every DC) when asked
// is nil: a request that names no DCs cannot be narrowed, so its resend asks every DC again and
// the DCs that answered already send duplicates.
func missingDCs(asked []uint64, answered []schemas.WorkerQueryReply) []uint64 {
	if asked == nil {
		return nil
	}
	missing := []uint64{}
	for _, d := range asked {
		if !slices.ContainsFunc(answered, func(r schemas.WorkerQueryReply) bool { return r.DcID == d }) {
			missing = append(missing, d)
		}
	}
	return missing
}

func (c *QueryClient) forget(id string, call *workerCall) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.waiting[id] != call {
		return
	}
	delete(c.waiting, id)
	if call.copies.Load() > 1 {
		now := time.Now()
		c.late[id] = now
		if now.Sub(c.lateSwept) > time.Minute {
			c.lateSwept = now
			for k, at := range c.late {
				if now.Sub(at) > lateKept {
					delete(c.late, k)
				}
			}
		}
	}
}

// readReplies consumes the reply partition and hands each call its DCs' first replies.
func (c *QueryClient) readReplies(ctx context.Context) {
	defer close(c.done)
	query.ReadReplies(ctx, c.cons, c.log, func(r *kgo.Record) {
		reply, err := c.codec.DecodeWorkerQueryReply(r.Value)
		if err != nil {
			c.undecodable.Add(1)
			return
		}
		c.mu.Lock()
		call := c.waiting[reply.CorrelationID]
		_, late := c.late[reply.CorrelationID]
		c.mu.Unlock()
		if call == nil {
			if late {
				c.duplicates.Add(1)
			} else {
				c.unmatched.Add(1)
			}
			return
		}
		call.mu.Lock()
		dup := slices.ContainsFunc(call.replies, func(o schemas.WorkerQueryReply) bool { return o.DcID == reply.DcID })
		if !dup {
			call.replies = append(call.replies, reply)
		}
		call.mu.Unlock()
		if dup {
			c.duplicates.Add(1)
			return
		}
		select {
		case call.notify <- struct{}{}:
		default:
		}
	})
}

// Close stops reading replies, fails the calls in flight with query.ErrQueryClientClosed and
// closes the Kafka clients.
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
