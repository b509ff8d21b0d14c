package query

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/ckf-stream/ckf-stream/streams"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/uber-go/tally/v4"
	"go.uber.org/zap"
)

// QueryConfig configures a QueryService. Start from DefaultQueryConfig: NewQueryService takes
// every field as it is (see the package's configuration style in config.go); only the empty
// topic names are derived, from the codec.
type QueryConfig struct {
	// RequestTopic is the topic of query requests. "" (the default) derives the codec's
	// QueryRequest topic (ckf-queries unless the codec was configured otherwise).
	RequestTopic string
	// ReplyTopic receives every reply whose request names no reply topic. "" (the default)
	// derives the codec's QueryReply topic (ckf-query-replies).
	ReplyTopic string
	// ReplyTopicPrefixes lists the prefixes a request's reply_topic may start with; a request may
	// always name ReplyTopic itself. Anything else is refused (INVALID_REQUEST reply on
	// ReplyTopic, plus a dead letter), so a request cannot make the indexer write into an
	// arbitrary topic it can reach (the lane topic, say). Default: none. An empty prefix would
	// allow every topic and is an error.
	ReplyTopicPrefixes []string
	// DeadLetterTopic receives a copy of every request that could not be answered normally.
	// "" (the default) derives the codec's DeadLetter topic.
	DeadLetterTopic string
	// Group is the consumer group that replicas join to share the request partitions. Kafka
	// property: group.id. Default "ckf-indexer-queries" (DefaultQueryGroup); required.
	Group string
	// MaxBatchRecords bounds the requests taken by one poll, answered and committed as one batch,
	// in [1, 65536] (MaxQueryBatchRecords). Larger batches amortise the produce round trip and
	// the commit; smaller ones bound the work redone after a failure. Default 256
	// (DefaultQueryBatchRecords).
	MaxBatchRecords int
	// ReplyLinger is the producer linger of replies (Kafka property linger.ms). The service
	// flushes at the end of every batch, which releases lingering replies at once, so the linger
	// only decides how the replies of one batch coalesce into produce requests; it never delays
	// a reply beyond the end of its batch. Default 1 ms; >= 0; 0 sends every reply at once,
	// without lingering.
	ReplyLinger time.Duration
	// ReplyTimeout bounds the delivery of one reply or dead letter, franz-go's retries included
	// (Kafka property delivery.timeout.ms); an output still unacknowledged by then counts as
	// failed (see QueryService for what a failure does). Keep it below the group's rebalance
	// timeout (60 s), since a batch holds off rebalances while it waits. Default 30 s; > 0.
	ReplyTimeout time.Duration
	// CommitTimeout bounds one offset commit and the final leave of the group. Default 10 s; > 0.
	CommitTimeout time.Duration
	// SessionTimeout is how long the group waits for a member's heartbeat before it declares the
	// member dead and moves its partitions (Kafka property session.timeout.ms): the delay of the
	// requests on the partitions of a replica that died without leaving (a graceful stop leaves
	// at once). Default 6 s (DefaultQuerySessionTimeout), the smallest the broker accepts by
	// default (group.min.session.timeout.ms); franz-go's own default is 45 s. Shorter is refused
	// by such a broker; longer rides out longer pauses (a GC, a stalled host) without a rebalance.
	SessionTimeout time.Duration
	// HeartbeatInterval is how often a member heartbeats (heartbeat.interval.ms), which is also
	// how soon it learns of a rebalance. Default 1 s; > 0 and below SessionTimeout.
	HeartbeatInterval time.Duration
	// Component names this service in dead letters. Default "indexer"; required.
	Component string
}

// Query service defaults and limits that the process configuration (app/config: indexer.query_group,
// indexer.query_batch_size) takes as its own, so that each has this one home.
const (
	// DefaultQueryGroup is QueryConfig.Group's default.
	DefaultQueryGroup = "ckf-indexer-queries"
	// DefaultQueryBatchRecords is QueryConfig.MaxBatchRecords's default.
	DefaultQueryBatchRecords = 256
	// MaxQueryBatchRecords is the largest QueryConfig.MaxBatchRecords accepted.
	MaxQueryBatchRecords = 1 << 16
	// DefaultQuerySessionTimeout is QueryConfig.SessionTimeout's default: the broker's default
	// group.min.session.timeout.ms.
	DefaultQuerySessionTimeout = 6 * time.Second
	// DefaultQueryHeartbeatInterval is QueryConfig.HeartbeatInterval's default.
	DefaultQueryHeartbeatInterval = time.Second
)

const (
	fetchErrorBackoff      = 250 * time.Millisecond
	maxReplyTopicNameBytes = 249 // Kafka's topic name limit
)

// DefaultQueryConfig returns the query service's defaults: topics derived from the codec, no
// extra reply topic prefixes, group DefaultQueryGroup, batches of at most 256 requests
// (DefaultQueryBatchRecords), replies lingering 1 ms and delivered within 30 s, commits within
// 10 s, a 6 s session timeout with 1 s heartbeats, dead letters signed "indexer".
func DefaultQueryConfig() QueryConfig {
	return QueryConfig{
		Group:             DefaultQueryGroup,
		MaxBatchRecords:   DefaultQueryBatchRecords,
		ReplyLinger:       time.Millisecond,
		ReplyTimeout:      30 * time.Second,
		CommitTimeout:     10 * time.Second,
		SessionTimeout:    DefaultQuerySessionTimeout,
		HeartbeatInterval: DefaultQueryHeartbeatInterval,
		Component:         "indexer",
	}
}

// withDerived fills the empty topic names from the codec.
func (c QueryConfig) withDerived(codec *schemas.Codec) QueryConfig {
	if c.RequestTopic == "" {
		c.RequestTopic = codec.Topic(schemas.TypeQueryRequest)
	}
	if c.ReplyTopic == "" {
		c.ReplyTopic = codec.Topic(schemas.TypeQueryReply)
	}
	if c.DeadLetterTopic == "" {
		c.DeadLetterTopic = codec.Topic(schemas.TypeDeadLetter)
	}
	c.ReplyTopicPrefixes = slices.Clone(c.ReplyTopicPrefixes)
	return c
}

// validate checks every field in order and returns the first violation as a *ConfigError.
func (c QueryConfig) validate() error {
	k := streams.ConfigCheck{Config: "query service"}
	for i, p := range c.ReplyTopicPrefixes {
		if p == "" {
			k.Fail(fmt.Sprintf("ReplyTopicPrefixes[%d]", i), "is empty, which would allow every topic")
		}
	}
	k.Named("Group", c.Group)
	if c.MaxBatchRecords < 1 || c.MaxBatchRecords > MaxQueryBatchRecords {
		k.Fail("MaxBatchRecords", "must be in [1, %d], got %d", MaxQueryBatchRecords, c.MaxBatchRecords)
	}
	k.NonNegative("ReplyLinger", c.ReplyLinger)
	k.Positive("ReplyTimeout", c.ReplyTimeout)
	k.Positive("CommitTimeout", c.CommitTimeout)
	k.Positive("SessionTimeout", c.SessionTimeout)
	k.Positive("HeartbeatInterval", c.HeartbeatInterval)
	if c.HeartbeatInterval >= c.SessionTimeout && c.SessionTimeout > 0 {
		k.Fail("HeartbeatInterval", "must be below SessionTimeout (%v), got %v", c.SessionTimeout, c.HeartbeatInterval)
	}
	k.Named("Component", c.Component)
	return k.Result()
}

// QueryServiceParams are what NewQueryService needs. ClientOpts carry the connection (seed
// brokers, TLS, SASL, client id, hooks); the service builds its own client from them and adds
// the group, consumer and producer options it relies on. Metrics and Log may be nil.
type QueryServiceParams struct {
	Config     QueryConfig
	Answerer   *Answerer
	Codec      *schemas.Codec
	ClientOpts []kgo.Opt
	Metrics    tally.Scope
	Log        *zap.Logger
}

// Errors of the query service. Run's errors wrap one of these, so callers classify with
// errors.Is; a batch failure is a *QueryBatchError.
var (
	// ErrQueryServiceRunning: Run or Start was called on a service that already ran.
	ErrQueryServiceRunning = errors.New("streams: query service already started")
	// ErrQueryBatchFailed: a batch's outputs were not all acknowledged; nothing of the batch was
	// committed.
	ErrQueryBatchFailed = errors.New("streams: query batch failed")
)

// QueryBatchError reports the batch that stopped the service: its requests stay uncommitted
// and are answered again by the group member that takes over their partitions.
type QueryBatchError struct {
	// Requests is the number of request records in the batch.
	Requests int
	// Failed is the number of outputs (replies and dead letters) that were not acknowledged.
	Failed int
	// Topic and Partition locate the first failed output's destination ("" and -1 when the
	// batch failed before producing, for example on a schema registry failure).
	Topic     string
	Partition int32
	// Err is the first cause.
	Err error
}

// Error implements error.
func (e *QueryBatchError) Error() string {
	where := ""
	if e.Topic != "" {
		where = fmt.Sprintf(" (first failure on %s[%d])", e.Topic, e.Partition)
	}
	return fmt.Sprintf("streams: query batch of %d requests failed, %d outputs unacknowledged%s; offsets not committed: %v",
		e.Requests, e.Failed, where, e.Err)
}

// Unwrap returns ErrQueryBatchFailed and the cause.
func (e *QueryBatchError) Unwrap() []error { return []error{ErrQueryBatchFailed, e.Err} }

// QueryService answers query requests from Kafka. Replicas join one consumer group on the
// request topic and share its partitions; each answers its records with the shared Answerer and
// produces one reply per request, keyed by correlation id, to the request's reply_topic (when
// it names one and ReplyTopicPrefixes allows it) or else ReplyTopic, on the request's
// reply_partition or else the partition of the key (Kafka's murmur2 partitioning, so any client
// can predict it).
//
// # Batches and the commit rule
//
// One poll is one batch (at most MaxBatchRecords records). The batch is answered, every reply
// and dead letter is produced, the producer is flushed, and only when every one of those
// outputs is acknowledged is the commit of the batch's offsets issued (goka's rule: an input
// offset is committed only after its processing and every output it caused are acknowledged).
// Rebalances are held off from the poll until the commit is issued (kgo.BlockRebalanceOnPoll),
// so a revoke never finds a half-processed batch. The commit itself is asynchronous and ordered:
// the next batch does not wait for it, and franz-go lets no rebalance start while it is in
// flight (see commit).
//
// # Delivery semantics: at least once
//
// Every request record gets at least one reply (or, when it cannot be decoded, at least one dead
// letter); a request is never skipped silently. Duplicates happen. A worked example: the
// service answers a batch of requests 100..149 of partition 2, the replies are acknowledged, and
// the process dies before the commit. The member that takes over partition 2 resumes at the last
// committed offset, 100, and answers 100..149 again: each of those callers sees two replies with
// its correlation id, possibly with different depths if the table moved in between. Clients
// must therefore take the first reply of a correlation id and ignore the rest (QueryClient
// does). The same happens when a commit fails or when a batch outlives the group's rebalance
// timeout and the member is evicted.
//
// # Failures
//
//   - A record that cannot be decoded is counted as invalid and dead-lettered (reason code from
//     schemas.DeadLetterReasonOf, the decoder's text as reason). When the body was valid Avro
//     and only broke a contract rule (for example a block_size of 0), the correlation id and
//     reply destination are recovered (schemas.Codec.QueryRoute) and the caller also gets an
//     INVALID_REQUEST reply; a correlation id over schemas.MaxCorrelationIDBytes is cut to fit
//     and the cut is said in the error message. Only an empty or non-UTF-8 correlation id, or a
//     body that is not valid Avro, leaves nothing to reply to.
//   - A schema registry failure while decoding is not the request's fault: the batch fails
//     (below) rather than dead-lettering a good request.
//   - UNAVAILABLE (no requested lane eligible and ready) is an ordinary reply.
//   - A reply to a destination the request chose (reply_topic or reply_partition) that cannot be
//     delivered (no such topic or partition, not authorised, too large, ReplyTimeout exceeded)
//     is not retried further: the request is dead-lettered with reason REJECTED, and its caller
//     gets an INVALID_REQUEST reply saying why at the next address down: the same topic
//     partitioned by key when the request named a partition, else ReplyTopic partitioned by key
//     (a failure there fails the batch, as below). The batch goes on: one caller's broken reply
//     destination must not stall the partition for everyone.
//   - Any other unacknowledged output (a reply to ReplyTopic, a dead letter) fails the batch:
//     nothing of it is committed, Run stops and returns a *QueryBatchError, and the group member
//     that takes the partitions over answers the batch again. franz-go has already retried the
//     produce for up to ReplyTimeout by then, so the failure is not a blip.
//   - A failed commit is logged and counted, not fatal: the batch's outputs are delivered, and
//     the next commit covers its offsets (commits are cumulative per partition) unless the
//     partitions moved, in which case the batch is answered again (duplicates, not loss).
//
// # Lifecycle
//
// Either call Run (it blocks; cancelling its context stops intake gracefully), or Start and
// later Close. Stopping finishes the batch in flight (answers, flush, commit), then leaves the
// group so the partitions move at once, and closes the client. A service runs once.
type QueryService struct {
	cfg   QueryConfig
	ans   *Answerer
	codec *schemas.Codec
	opts  []kgo.Opt
	log   *zap.Logger
	m     queryMetrics

	started atomic.Bool
	// hard is cancelled when Close's context ends: it abandons the batch in flight (no commit).
	hard       context.Context
	hardCancel context.CancelFunc
	// stopIntake, done and runErr belong to Start and Close.
	stopIntake context.CancelFunc
	done       chan struct{}
	runErr     error

	// Run-goroutine state.
	cl        *kgo.Client
	committer queryCommitter
	scratch   QueryScratch
	batch     queryBatch
	onAck     func(*kgo.Record, error)
}

// NewQueryService validates the configuration, taken as it is (an invalid field is a
// *ConfigError; empty topic names are derived from the codec), and builds the service. Nothing
// connects until Run or Start.
func NewQueryService(p QueryServiceParams) (*QueryService, error) {
	if p.Answerer == nil || p.Codec == nil {
		return nil, errors.New("streams: query service needs an Answerer and a codec")
	}
	cfg := p.Config.withDerived(p.Codec)
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	log := p.Log
	if log == nil {
		log = zap.NewNop()
	}
	s := &QueryService{
		cfg: cfg, ans: p.Answerer, codec: p.Codec, opts: p.ClientOpts, log: log.Named("query"),
		m: newQueryMetrics(p.Metrics), done: make(chan struct{}),
	}
	s.hard, s.hardCancel = context.WithCancel(context.Background())
	s.onAck = s.batch.ack
	return s, nil
}

// Config returns the configuration the service runs with: the one it was built with, its empty
// topic names derived from the codec.
func (s *QueryService) Config() QueryConfig { return s.cfg }

func (s *QueryService) clientOpts() []kgo.Opt {
	return append(append([]kgo.Opt{}, s.opts...),
		kgo.ConsumerGroup(s.cfg.Group),
		kgo.ConsumeTopics(s.cfg.RequestTopic),
		kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(),
		// A dead member's partitions move after SessionTimeout; cooperative rebalancing (franz-go's
		// default, named here) keeps the other members answering their partitions meanwhile.
		kgo.SessionTimeout(s.cfg.SessionTimeout),
		kgo.HeartbeatInterval(s.cfg.HeartbeatInterval),
		kgo.Balancers(kgo.CooperativeStickyBalancer()),
		// A group without committed offsets starts at the beginning of the retained requests, so
		// nothing produced before the first replica joined goes unanswered (callers that have
		// given up ignore late replies).
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.ProducerLinger(s.cfg.ReplyLinger),
		kgo.RecordDeliveryTimeout(s.cfg.ReplyTimeout),
		kgo.RecordPartitioner(replyPartitioner{}),
	)
}

// Start runs the service on its own goroutine until Close. It returns once the client is built
// (an error building it is returned here); joining the group and consuming proceed in the
// background.
func (s *QueryService) Start() error {
	if !s.started.CompareAndSwap(false, true) {
		return ErrQueryServiceRunning
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.stopIntake = cancel
	ready := make(chan error, 1)
	go func() {
		defer close(s.done)
		s.runErr = s.serve(ctx, ready)
	}()
	return <-ready
}

// Close stops intake, waits for the batch in flight to be answered, flushed and committed,
// leaves the group and closes the client; it returns the error that stopped the service, if
// any. When ctx ends first, the batch in flight is abandoned uncommitted (its requests are
// answered again by the member that takes the partitions over) and Close returns ctx's error
// once the service has stopped. Close is for services started with Start; it is a no-op for a
// service that never started. Call it after Start has returned.
func (s *QueryService) Close(ctx context.Context) error {
	if s.stopIntake == nil {
		return nil
	}
	s.stopIntake()
	select {
	case <-s.done:
		return s.runErr
	case <-ctx.Done():
		s.hardCancel()
		<-s.done
		return fmt.Errorf("streams: query service close: %w", ctx.Err())
	}
}

// Run consumes and answers requests until ctx ends (a graceful stop: the batch in flight is
// finished and committed, then the group is left) or a batch fails. It returns nil after a
// graceful stop, a *QueryBatchError when a batch failed, or an error building the client.
func (s *QueryService) Run(ctx context.Context) error {
	if !s.started.CompareAndSwap(false, true) {
		return ErrQueryServiceRunning
	}
	return s.serve(ctx, nil)
}

// serve builds the client, reports on ready (if any) and runs the loop until it ends.
func (s *QueryService) serve(ctx context.Context, ready chan<- error) error {
	cl, err := kgo.NewClient(s.clientOpts()...)
	if err != nil {
		err = fmt.Errorf("streams: query service client: %w", err)
		if ready != nil {
			ready <- err
		}
		return err
	}
	if ready != nil {
		ready <- nil
	}
	s.cl = cl
	err = s.loop(ctx)
	if err != nil {
		s.log.Error("query service stopped", zap.Error(err))
	}
	// Let the last commits land, then leave explicitly, bounded, so the partitions move now
	// rather than after the session timeout; Close then has nothing left to wait for.
	s.waitCommits()
	cl.AllowRebalance()
	lctx, cancel := context.WithTimeout(s.hard, s.cfg.CommitTimeout)
	if lerr := cl.LeaveGroupContext(lctx); lerr != nil {
		s.log.Warn("leaving the query group", zap.Error(lerr))
	}
	cancel()
	cl.Close()
	return err
}

// loop polls and answers batches until ctx ends or a batch fails.
func (s *QueryService) loop(ctx context.Context) error {
	for {
		if ctx.Err() != nil {
			return nil
		}
		fetches := s.cl.PollRecords(ctx, s.cfg.MaxBatchRecords)
		if fetches.IsClientClosed() {
			return nil
		}
		var fetchErr error
		fetches.EachError(func(topic string, p int32, err error) {
			if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
				return
			}
			// franz-go retries what is retriable; what reaches here is for the operator.
			s.m.fetchErrors.Inc(1)
			s.log.Warn("query fetch error", zap.String("topic", topic), zap.Int32("partition", p), zap.Error(err))
			fetchErr = err
		})
		recs := fetches.Records()
		if len(recs) == 0 {
			s.cl.AllowRebalance()
			if fetchErr != nil {
				select {
				case <-ctx.Done():
				case <-time.After(fetchErrorBackoff):
				}
			}
			continue
		}
		if err := s.processBatch(recs); err != nil {
			s.m.batchFailures.Inc(1)
			return err
		}
		s.commit(recs)
		s.cl.AllowRebalance()
	}
}

// commit hands the offsets after recs to the committer and returns without waiting.
//
// Why asynchronous, and why that is safe: a synchronous commit costs a broker round trip
// (several milliseconds on a busy broker) before the next poll, which every request of the next
// batch would wait out. The commit rule is about what is committed (only offsets whose outputs
// are acknowledged, which holds: recs are settled), not about waiting for the commit. franz-go
// never lets a group join or sync begin while a commit is in flight, so an in-flight commit
// lands under the generation that owns the partitions, before any rebalance can move them. One
// commit is in flight at a time; offsets settled meanwhile are merged (per partition the
// highest wins) and committed next, so a fast stream of small batches costs one commit per
// broker round trip, not one per batch. Close waits for the commits in flight before leaving
// the group. A failed commit is logged and counted, not fatal; see QueryService.
func (s *QueryService) commit(recs []*kgo.Record) {
	c := &s.committer
	c.mu.Lock()
	if c.pending == nil {
		c.pending = make(map[string]map[int32]kgo.EpochOffset, 1)
	}
	for _, r := range recs {
		ps := c.pending[r.Topic]
		if ps == nil {
			ps = make(map[int32]kgo.EpochOffset, 4)
			c.pending[r.Topic] = ps
		}
		next := kgo.EpochOffset{Epoch: r.LeaderEpoch, Offset: r.Offset + 1}
		if at, ok := ps[r.Partition]; !ok || at.Less(next) {
			ps[r.Partition] = next
		}
	}
	if c.inFlight {
		c.mu.Unlock()
		return // merged into the next commit
	}
	c.inFlight = true
	c.idle.Add(1)
	offsets := c.pending
	c.pending = nil
	c.mu.Unlock()
	s.issueCommit(offsets)
}

// issueCommit sends one commit; its completion sends the offsets merged meanwhile, if any, from
// a new goroutine (franz-go forbids committing from inside a commit's callback).
func (s *QueryService) issueCommit(offsets map[string]map[int32]kgo.EpochOffset) {
	ctx, cancel := context.WithTimeout(s.hard, s.cfg.CommitTimeout)
	t0 := time.Now()
	s.cl.CommitOffsets(ctx, offsets, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
		cancel()
		s.m.commitLatency.RecordDuration(time.Since(t0))
		if err == nil && resp != nil {
			for _, t := range resp.Topics {
				for _, p := range t.Partitions {
					if perr := kerr.ErrorForCode(p.ErrorCode); perr != nil && err == nil {
						err = fmt.Errorf("%s[%d]: %w", t.Topic, p.Partition, perr)
					}
				}
			}
		}
		if err != nil {
			s.m.commitFailures.Inc(1)
			s.log.Warn("query offsets not committed; the requests will be answered again if their partitions move",
				zap.Error(err))
		}
		c := &s.committer
		c.mu.Lock()
		next := c.pending
		c.pending = nil
		if next == nil {
			c.inFlight = false
		}
		c.mu.Unlock()
		if next != nil {
			go s.issueCommit(next)
			return
		}
		c.idle.Done()
	})
}

// queryCommitter serialises the service's offset commits: at most one in flight, the offsets
// settled meanwhile merged into pending.
type queryCommitter struct {
	mu       sync.Mutex
	inFlight bool
	pending  map[string]map[int32]kgo.EpochOffset
	idle     sync.WaitGroup // 1 while a chain of commits is in flight
}

// waitCommits waits for the commits in flight, at most twice CommitTimeout (the last batch's
// commit may be queued behind one more, each bounded by CommitTimeout).
func (s *QueryService) waitCommits() {
	done := make(chan struct{})
	go func() { s.committer.idle.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(2 * s.cfg.CommitTimeout):
		s.log.Warn("query offset commits still in flight at shutdown")
	}
}

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
				s.m.invalid.Inc(1)
			}
			topic, part := s.fallbackRoute(o)
			if err := s.produceReply(o.src, s.ans.InvalidReply(string(o.rec.Key), why), topic, part, true, o.requestTime); err != nil {
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
			s.m.replies[o.status].Inc(1)
			if !o.requestTime.IsZero() {
				s.m.endToEnd.RecordDuration(time.Since(o.requestTime))
			}
		}
	}
	for range recs {
		s.m.latency.RecordDuration(took)
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
	s.m.requests.Inc(1)
	req, err := s.codec.DecodeQueryRequest(r.Value)
	if err != nil {
		if errors.Is(err, schemas.ErrRegistry) {
			return fmt.Errorf("decoding request at %s[%d]@%d: %w", r.Topic, r.Partition, r.Offset, err)
		}
		s.m.invalid.Inc(1)
		if errors.Is(err, schemas.ErrInvalidField) {
			if rt, ok := s.codec.QueryRoute(r.Value); ok {
				topic, part := s.route(rt.ReplyTopic, rt.ReplyPartition)
				why := err.Error()
				if rt.IDTruncated {
					why = truncatedIDNote(len(rt.CorrelationID), schemas.MaxCorrelationIDBytes) + why
				}
				if err := s.produceReply(r, s.ans.InvalidReply(rt.CorrelationID, why), topic, part, true, time.Time{}); err != nil {
					return err
				}
			}
		}
		return s.produceDeadLetter(r, schemas.DeadLetterReasonOf(err), err.Error())
	}
	if req.ReplyTopic != "" && !s.replyTopicAllowed(req.ReplyTopic) {
		s.m.invalid.Inc(1)
		why := fmt.Sprintf("reply_topic %q is not allowed (allowed: %s or a topic starting with one of %q)",
			req.ReplyTopic, s.cfg.ReplyTopic, s.cfg.ReplyTopicPrefixes)
		if err := s.produceReply(r, s.ans.InvalidReply(req.CorrelationID, why), s.cfg.ReplyTopic, -1, true, req.RequestTime); err != nil {
			return err
		}
		return s.produceDeadLetter(r, schemas.DeadLetterRejected, why)
	}
	t0 := time.Now()
	reply := s.ans.Answer(&req, &s.scratch)
	s.m.answerLatency.RecordDuration(time.Since(t0))
	topic, part := s.route(req.ReplyTopic, req.ReplyPartition)
	if err := s.produceReply(r, reply, topic, part, reply.Status == schemas.QueryInvalidRequest, req.RequestTime); err != nil {
		return err
	}
	if reply.Status == schemas.QueryInvalidRequest {
		// The decoder enforces the same rules, so this is a request that reached Answer by
		// another route into the codec; it is refused all the same.
		s.m.invalid.Inc(1)
		return s.produceDeadLetter(r, schemas.DeadLetterRejected, reply.ErrorMessage)
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

// produceReply encodes reply and produces it to topic (partition part, or by key when part is
// -1), keyed by the correlation id. deadLettered says the request is also dead-lettered, so a
// failed delivery of this reply needs no second dead letter; requestTime is the request's
// request_time (zero if absent), for the end-to-end latency.
func (s *QueryService) produceReply(src *kgo.Record, reply schemas.QueryReply, topic string, part int32, deadLettered bool, requestTime time.Time) error {
	b := &s.batch
	start := len(b.arena)
	arena, err := s.codec.AppendQueryReply(b.arena, reply)
	if err != nil {
		// A reply built here that breaks the contract is a bug; the request is still accounted
		// for by a dead letter rather than dropped.
		s.log.Error("query reply not encodable", zap.String("correlation_id", reply.CorrelationID), zap.Error(err))
		return s.produceDeadLetter(src, schemas.DeadLetterRejected, "reply not encodable: "+err.Error())
	}
	value := arena[start:len(arena):len(arena)]
	keyStart := len(arena)
	arena = append(arena, reply.CorrelationID...)
	b.arena = arena
	o := b.add()
	o.kind, o.src, o.status, o.partition = outReply, src, reply.Status, part
	o.errorMessage = reply.ErrorMessage
	o.routed = topic != s.cfg.ReplyTopic || part >= 0
	o.deadLettered = deadLettered
	o.requestTime = requestTime
	o.rec = kgo.Record{Topic: topic, Partition: part, Key: arena[keyStart:len(arena):len(arena)], Value: value}
	b.wg.Add(1)
	s.cl.Produce(s.hard, &o.rec, s.onAck)
	return nil
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

type outKind uint8

// maxOutputsPerRequest bounds the outputs of one request within a batch (see queryBatch.reset).
const maxOutputsPerRequest = 4

const (
	outReply outKind = iota + 1
	outDeadLetter
)

// outRecord is one output of a batch. rec is what franz-go holds while the record is in
// flight; outs never grows past its capacity during a batch, so &rec stays valid and unique.
type outRecord struct {
	rec          kgo.Record
	src          *kgo.Record
	kind         outKind
	status       schemas.QueryStatus
	errorMessage string // the reply's error message, for the reply that replaces it if undeliverable
	partition    int32  // requested partition, -1 = by key
	routed       bool   // destination chosen by the request
	deadLettered bool   // the request has its own dead letter in this batch
	failed       bool
	requestTime  time.Time // the request's request_time, zero if absent
}

type ackFailure struct {
	rec *kgo.Record
	err error
}

// queryBatch is the run goroutine's per-batch state, reused across batches. The promise
// callback (ack) runs on franz-go's goroutine; it touches only wg, mu and failures.
type queryBatch struct {
	outs  []outRecord
	arena []byte // encoded values and keys of the batch; reused once every output is settled
	wg    sync.WaitGroup
	n     atomic.Int64 // promises not yet called

	mu       sync.Mutex
	failures []ackFailure
}

// reset prepares for a batch of requests records: each request causes at most four outputs (a
// reply, a dead letter, and two INVALID_REQUEST replies at the fallback addresses when its own
// reply destination fails; see processBatch), so outs gets that capacity up front and never
// reallocates.
func (b *queryBatch) reset(requests int) {
	if cap(b.outs) < maxOutputsPerRequest*requests {
		b.outs = make([]outRecord, 0, maxOutputsPerRequest*requests)
	}
	clear(b.outs[:cap(b.outs)])
	b.outs = b.outs[:0]
	b.arena = b.arena[:0]
	b.mu.Lock()
	b.failures = b.failures[:0]
	b.mu.Unlock()
}

func (b *queryBatch) add() *outRecord {
	if len(b.outs) == cap(b.outs) {
		// Unreachable by construction (see reset); growing would move records in flight.
		panic("streams: query batch output capacity exceeded")
	}
	b.outs = b.outs[:len(b.outs)+1]
	b.n.Add(1)
	return &b.outs[len(b.outs)-1]
}

// ack is the promise of every output.
func (b *queryBatch) ack(r *kgo.Record, err error) {
	if err != nil {
		b.mu.Lock()
		b.failures = append(b.failures, ackFailure{rec: r, err: err})
		b.mu.Unlock()
	}
	b.n.Add(-1)
	b.wg.Done()
}

func (b *queryBatch) pending() int { return int(b.n.Load()) }

// wait waits for every promise or ctx's end.
func (b *queryBatch) wait(ctx context.Context) error {
	if b.n.Load() == 0 {
		return nil
	}
	done := make(chan struct{})
	go func() { b.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// takeFailures returns the failures so far and marks their outputs failed.
func (b *queryBatch) takeFailures() []ackFailure {
	b.mu.Lock()
	fs := append([]ackFailure(nil), b.failures...)
	b.failures = b.failures[:0]
	b.mu.Unlock()
	for _, f := range fs {
		if o := b.find(f.rec); o != nil {
			o.failed = true
		}
	}
	return fs
}

func (b *queryBatch) find(r *kgo.Record) *outRecord {
	for i := range b.outs {
		if &b.outs[i].rec == r {
			return &b.outs[i]
		}
	}
	return nil
}

// replyPartitioner partitions replies: a record whose Partition is set (>= 0) goes to that
// partition (franz-go fails the record if the topic has no such partition); any other record
// is partitioned by key exactly as Kafka's default partitioner does (murmur2), so a client can
// compute where its reply lands.
type replyPartitioner struct{}

func (replyPartitioner) ForTopic(topic string) kgo.TopicPartitioner {
	return &replyTopicPartitioner{byKey: kgo.StickyKeyPartitioner(nil).ForTopic(topic)}
}

type replyTopicPartitioner struct{ byKey kgo.TopicPartitioner }

func (*replyTopicPartitioner) RequiresConsistency(*kgo.Record) bool { return true }

func (p *replyTopicPartitioner) Partition(r *kgo.Record, n int) int {
	if r.Partition >= 0 {
		return int(r.Partition)
	}
	return p.byKey.Partition(r, n)
}

// queryMetrics caches the service's metric handles (scope "query"; the only tag is status on
// replies, three values).
type queryMetrics struct {
	requests, invalid, deadLetters, replyRejected tally.Counter
	batchFailures, commitFailures, fetchErrors    tally.Counter
	replies                                       [3]tally.Counter // by schemas.QueryStatus
	latency, answerLatency, commitLatency         tally.Histogram
	endToEnd                                      tally.Histogram
}

// queryLatencyBuckets span 5 µs (an answer on a warm table) to 10 s (a batch waiting out broker
// retries).
var queryLatencyBuckets = tally.DurationBuckets{
	5 * time.Microsecond, 10 * time.Microsecond, 25 * time.Microsecond, 50 * time.Microsecond,
	100 * time.Microsecond, 250 * time.Microsecond, 500 * time.Microsecond,
	time.Millisecond, 2500 * time.Microsecond, 5 * time.Millisecond, 10 * time.Millisecond,
	25 * time.Millisecond, 50 * time.Millisecond, 100 * time.Millisecond, 250 * time.Millisecond,
	500 * time.Millisecond, time.Second, 2500 * time.Millisecond, 5 * time.Second, 10 * time.Second,
}

func newQueryMetrics(root tally.Scope) queryMetrics {
	if root == nil {
		root = tally.NoopScope
	}
	s := root.SubScope("query")
	m := queryMetrics{
		requests:       s.Counter("requests_total"),
		invalid:        s.Counter("invalid_requests_total"),
		deadLetters:    s.Counter("dead_letters_total"),
		replyRejected:  s.Counter("replies_undeliverable_total"),
		batchFailures:  s.Counter("batch_failures_total"),
		commitFailures: s.Counter("commit_failures_total"),
		fetchErrors:    s.Counter("fetch_errors_total"),
		// latency: from the poll that returned a request to the acknowledgement of every
		// output of its batch (the service's share of a Kafka round trip).
		latency: s.Histogram("latency_seconds", queryLatencyBuckets),
		// answerLatency: the table search alone (Answer).
		answerLatency: s.Histogram("answer_latency_seconds", queryLatencyBuckets),
		// endToEnd: from the router's request_time (its clock) to the acknowledgement of the
		// reply; only requests that carry a request_time. Clock skew between router and
		// indexer shifts it.
		endToEnd: s.Histogram("request_to_reply_seconds", queryLatencyBuckets),
		// commitLatency: one offset commit, issue to response (asynchronous: it delays no reply).
		commitLatency: s.Histogram("commit_latency_seconds", queryLatencyBuckets),
	}
	for st := schemas.QueryOK; st <= schemas.QueryInvalidRequest; st++ {
		m.replies[st] = s.Tagged(map[string]string{"status": strings.ToLower(st.String())}).Counter("replies_total")
	}
	return m
}
