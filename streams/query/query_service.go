package query

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/uber-go/tally/v4"
	"go.uber.org/zap"
)

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
//     nothing of it is committed. When the cause is time (the brokers did not acknowledge within
//     ReplyTimeout: an outage), the service leaves the group, joins again with a new client and
//     answers the batch again from the last commit, and the process goes on (a replica rides
//     through a broker outage of any length). Otherwise (a refusal, which would recur) Run stops
//     and returns a *QueryBatchError, and the group member that takes the partitions over
//     answers the batch again. franz-go has already retried the produce for up to ReplyTimeout
//     by then, so the failure is not a blip.
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
	x     Exchange
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
	return NewService(ServiceParams{Config: p.Config, Exchange: &queryExchange{ans: p.Answerer, codec: p.Codec}, Codec: p.Codec,
		ClientOpts: p.ClientOpts, Metrics: p.Metrics, Log: p.Log})
}

// ServiceParams are what NewService needs: QueryServiceParams with an Exchange in place of the
// Answerer. MetricsScope names the service's metrics (default "query": ckf_query_*); Log's name
// is MetricsScope too.
type ServiceParams struct {
	Config       QueryConfig
	Exchange     Exchange
	Codec        *schemas.Codec
	ClientOpts   []kgo.Opt
	Metrics      tally.Scope
	MetricsScope string
	Log          *zap.Logger
}

// NewService builds a request/reply service for any Exchange, with QueryService's consumer
// group, batches, commit rule, reply routing and dead letters (see QueryService). The Config's
// empty topic names are derived from the codec's prefix-match types, so an exchange of other
// records names its topics.
func NewService(p ServiceParams) (*QueryService, error) {
	if p.Exchange == nil || p.Codec == nil {
		return nil, errNoExchange
	}
	cfg := p.Config.withDerived(p.Codec)
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	log := p.Log
	if log == nil {
		log = zap.NewNop()
	}
	scope := p.MetricsScope
	if scope == "" {
		scope = "query"
	}
	s := &QueryService{
		cfg: cfg, x: p.Exchange, codec: p.Codec, opts: p.ClientOpts, log: log.Named(scope),
		m: newQueryMetrics(p.Metrics, scope), done: make(chan struct{}),
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
// finished and committed, then the group is left) or a batch fails for a reason other than
// brokers that did not answer in time (those it rides through by joining again: serve). It
// returns nil after a graceful stop, a *QueryBatchError when a batch failed, or an error
// building the client.
func (s *QueryService) Run(ctx context.Context) error {
	if !s.started.CompareAndSwap(false, true) {
		return ErrQueryServiceRunning
	}
	return s.serve(ctx, nil)
}

// serve runs the service (serveOnce) until ctx ends or a batch fails for a reason other than
// brokers that did not answer in time. A batch that failed because its outputs were not
// acknowledged before the deadline (a broker outage longer than ReplyTimeout, during which every
// produce waits) is not a reason to stop the process: nothing of it was committed, so the
// service leaves the group, waits rejoinBackoff, joins again with a new client and answers the
// batch again from the last commit (at least once, as after a takeover). Any other batch failure
// (a refusal: an unknown or unauthorised topic, a record too large) would recur on every
// attempt while holding the partitions from healthy members, so it stops the service as before.
func (s *QueryService) serve(ctx context.Context, ready chan<- error) error {
	for {
		err := s.serveOnce(ctx, ready)
		ready = nil
		var be *QueryBatchError
		if err == nil || !errors.As(err, &be) || !brokersDidNotAnswer(be.Err) || ctx.Err() != nil || s.hard.Err() != nil {
			return err
		}
		s.m.rejoins.Inc(1)
		s.log.Warn("query batch not acknowledged in time (the brokers did not answer); rejoining the group to answer it again from the last commit",
			zap.Error(err), zap.Duration("after", rejoinBackoff))
		select {
		case <-ctx.Done():
			return nil
		case <-s.hard.Done():
			return nil
		case <-time.After(rejoinBackoff): // a pause between clients, not a wait for an outcome
		}
	}
}

// rejoinBackoff is the pause before the query service joins its group again after a batch its
// brokers did not acknowledge in time (serve). The new client's first poll waits for the
// brokers itself; the pause only keeps a broker that answers metadata but not produces from
// seeing a join every few seconds.
const rejoinBackoff = time.Second

// brokersDidNotAnswer reports whether a batch failure's cause is time running out rather than a
// broker's refusal: a produce's delivery timeout, or the batch's own deadline (settle).
func brokersDidNotAnswer(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, kgo.ErrRecordTimeout)
}

// serveOnce builds a client, reports on ready (if any) and runs the loop until it ends; it then
// leaves the group and closes the client.
func (s *QueryService) serveOnce(ctx context.Context, ready chan<- error) error {
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
	s.issueCommit(s.cl, offsets)
}

// issueCommit sends one commit through cl; its completion sends the offsets merged meanwhile,
// if any, from a new goroutine (franz-go forbids committing from inside a commit's callback),
// through the same client: a chain of commits never crosses to the client of a later join
// (serve), whose group generation is another.
func (s *QueryService) issueCommit(cl *kgo.Client, offsets map[string]map[int32]kgo.EpochOffset) {
	ctx, cancel := context.WithTimeout(s.hard, s.cfg.CommitTimeout)
	t0 := time.Now()
	cl.CommitOffsets(ctx, offsets, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
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
			go s.issueCommit(cl, next)
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
