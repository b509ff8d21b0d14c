package streams

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/ckf/index"
	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/uber-go/tally/v4"
	"go.uber.org/zap"
)

// FreshnessPolicy says when a lane is too far behind its partition to be used in answers. A
// lane beyond either bound is excluded (reported, and left out of query answers) until it is
// back within both. A zero bound is not checked.
type FreshnessPolicy struct {
	// MaxRecordLag bounds high watermark - (applied offset + 1). Default 10,000 records.
	MaxRecordLag int64
	// MaxTimeLag bounds the age of the last applied record (its producer timestamp). With relay
	// heartbeats every second, a lane whose relay stops is excluded after this long. Clocks of
	// relays and indexers must agree to well within this bound. Default 10 s.
	MaxTimeLag time.Duration
}

// IndexerTopics names the topics the indexer reads and writes.
type IndexerTopics struct {
	Lanes         string // the lane topic: partition p is physical lane p
	SnapshotIndex string // compacted: latest complete snapshot per lane (written by relays)
	Control       string // snapshot requests to relays
	LaneEvents    string // lane state changes, keyed by lane
	DeadLetter    string // rejected records
}

// IndexerConfig configures an Indexer. Zero fields take the defaults noted.
type IndexerConfig struct {
	Topics    IndexerTopics
	Freshness FreshnessPolicy
	// ProgressInterval is how often each lane reports progress on the lane-events topic
	// (default 10 s; negative disables).
	ProgressInterval time.Duration
	// Feed bounds the per-lane fetch queues: a lane whose queue reaches Feed.PauseBytes has its
	// partition paused until it drains (Kafka backpressure; other lanes keep fetching).
	Feed FeedConfig
	// RestoreTimeout bounds reading the snapshot index at start-up (default 30 s).
	RestoreTimeout time.Duration
	// RetrySnapshotRequestGap is the least time between two snapshot requests of a lane that
	// waits for the next snapshot under RetrySnapshot (an incomplete or uninstallable snapshot
	// on a lane that is not ready). The lane asks because an idle relay writes its next
	// snapshot only after RelayConfig.SnapshotIdleInterval; the gap keeps a relay whose
	// snapshots keep failing from being driven to write one per SnapshotRequestMinInterval.
	// Default 5 s.
	RetrySnapshotRequestGap time.Duration
}

func (c IndexerConfig) withDefaults() IndexerConfig {
	if c.Freshness == (FreshnessPolicy{}) {
		c.Freshness = FreshnessPolicy{MaxRecordLag: 10_000, MaxTimeLag: 10 * time.Second}
	}
	if c.ProgressInterval == 0 {
		c.ProgressInterval = 10 * time.Second
	}
	if c.RestoreTimeout <= 0 {
		c.RestoreTimeout = 30 * time.Second
	}
	if c.RetrySnapshotRequestGap <= 0 {
		c.RetrySnapshotRequestGap = 5 * time.Second
	}
	c.Feed = c.Feed.withDefaults()
	return c
}

func (c IndexerConfig) validate() error {
	if c.Topics.Lanes == "" || c.Topics.Control == "" || c.Topics.LaneEvents == "" || c.Topics.DeadLetter == "" {
		return errors.New("streams: indexer topics: lanes, control, lane events and dead letter must be named")
	}
	return nil
}

// checkInterval is how often an idle lane checks its health and freshness.
func (c IndexerConfig) checkInterval() time.Duration {
	d := c.Freshness.MaxTimeLag / 10
	return min(max(d, 20*time.Millisecond), 250*time.Millisecond)
}

// IndexerParams are what NewIndexer needs. ClientOpts carry the connection (seed brokers, TLS,
// SASL); the indexer creates its own clients from them. ClientOptsFor, when set, is used instead,
// once per client, with the roles "indexer-outputs", "lanes" and "snapshot-index".
type IndexerParams struct {
	Config        IndexerConfig
	Indexer       *index.GlobalIndexer
	Codec         *schemas.Codec
	ClientOpts    []kgo.Opt
	ClientOptsFor ClientOptsFunc
	Metrics       tally.Scope
	Log           *zap.Logger
}

// Indexer runs the global indexer on Kafka: every configured lane's partition is read by direct
// assignment (every replica holds every lane), each lane's records are applied by that lane's
// own goroutine to its LaneIngestor, and queries read the shared table lock-free.
type Indexer struct {
	cfg     IndexerConfig
	g       *index.GlobalIndexer
	codec   *schemas.Codec
	opts    clientOpts
	log     *zap.Logger
	metrics *indexerMetrics
	hooks   indexerHooks

	feed   *LaneFeed
	out    *Outputs
	outCl  *kgo.Client
	laneCl *kgo.Client
	lanes  [ckf.LaneCount]*lane

	excluded atomic.Uint32
	started  chan struct{}
}

// indexerHooks are test-only interception points (nil in production; see export_test.go).
type indexerHooks struct {
	// beforeRecord runs on a lane's goroutine before it handles the record at offset.
	beforeRecord func(lane uint8, offset int64)
}

// NewIndexer validates the configuration and builds the indexer. Nothing runs until Run.
func NewIndexer(p IndexerParams) (*Indexer, error) {
	cfg := p.Config.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if p.Indexer == nil || p.Codec == nil {
		return nil, errors.New("streams: indexer needs a ckf.GlobalIndexer and a codec")
	}
	log := p.Log
	if log == nil {
		log = zap.NewNop()
	}
	ix := &Indexer{cfg: cfg, g: p.Indexer, codec: p.Codec, opts: clientOpts{shared: p.ClientOpts, perRole: p.ClientOptsFor}, log: log.Named("indexer"),
		metrics: newIndexerMetrics(p.Metrics), started: make(chan struct{})}
	return ix, nil
}

// Started is closed once every lane's goroutine is running.
func (ix *Indexer) Started() <-chan struct{} { return ix.started }

// GlobalIndexer returns the table the indexer fills.
func (ix *Indexer) GlobalIndexer() *index.GlobalIndexer { return ix.g }

// EligibleLanes returns the lanes a query may use now: ready in the table and not excluded by
// the freshness policy.
func (ix *Indexer) EligibleLanes() uint16 {
	return ix.g.ReadyLanes() &^ uint16(ix.excluded.Load())
}

func (ix *Indexer) setExcluded(bit uint16, on bool) {
	if on {
		ix.excluded.Or(uint32(bit))
	} else {
		ix.excluded.And(^uint32(bit))
	}
}

// Lanes returns the status of every configured lane, in lane order.
func (ix *Indexer) Lanes() []LaneStatus {
	select {
	case <-ix.started: // Run created the lanes before it closed started
	default:
		return nil
	}
	var out []LaneStatus
	for _, l := range ix.lanes {
		if l != nil {
			out = append(out, l.stats.snapshot())
		}
	}
	return out
}

// Run restores every lane's start position, then reads and applies the lanes until ctx ends.
// On return every lane is released (out of answers) and every output produced was flushed.
func (ix *Indexer) Run(ctx context.Context) error {
	m := ix.g.Manifest()
	var lanes []int32
	for l := uint8(0); l < ckf.LaneCount; l++ {
		if _, ok := m.PoolOf(l); ok {
			lanes = append(lanes, int32(l))
		}
	}
	outCl, err := kgo.NewClient(ix.opts.forRole("indexer-outputs", kgo.ProducerLinger(5*time.Millisecond))...)
	if err != nil {
		return fmt.Errorf("streams: indexer output client: %w", err)
	}
	ix.outCl = outCl
	defer outCl.Close()
	ix.out = NewOutputs(outCl, ix.codec, m.ConsumerInstance(), OutputTopics{
		LaneEvents: ix.cfg.Topics.LaneEvents, DeadLetter: ix.cfg.Topics.DeadLetter, Control: ix.cfg.Topics.Control,
	}, ix.log)

	rctx, cancel := context.WithTimeout(ctx, ix.cfg.RestoreTimeout)
	plan, err := ix.restorePlan(rctx, lanes)
	cancel()
	if err != nil {
		return err
	}
	start := map[int32]kgo.Offset{}
	for _, l := range lanes {
		start[l] = plan[l].start
	}
	laneCl, err := kgo.NewClient(ix.opts.forRole("lanes", LaneConsumerOpts(ix.cfg.Topics.Lanes, start)...)...)
	if err != nil {
		return fmt.Errorf("streams: indexer lane client: %w", err)
	}
	ix.laneCl = laneCl
	defer laneCl.Close()
	feedCfg := ix.cfg.Feed
	feedCfg.OnFetchError = func(err error) { ix.log.Warn("lane fetch error", zap.Error(err)) }
	if ix.feed, err = NewLaneFeed(laneCl, ix.cfg.Topics.Lanes, lanes, feedCfg); err != nil {
		return err
	}
	// Claim every lane's ingestor: this Indexer is the only writer of the table's lanes
	// (consumer §2.3); a second Indexer on the same GlobalIndexer fails here.
	for _, l := range lanes {
		in, err := ix.g.ClaimLane(uint8(l))
		if err != nil {
			ix.closeLanes()
			return fmt.Errorf("streams: claiming lane %d: %w", l, err)
		}
		pool, _ := m.PoolOf(uint8(l))
		ix.lanes[l] = newLane(ix, uint8(l), pool, in, plan[l].snapshotOffset)
	}
	defer ix.closeLanes()

	var wg sync.WaitGroup
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	feedErr := make(chan error, 1)
	wg.Add(1)
	go func() { defer wg.Done(); feedErr <- ix.feed.Run(runCtx) }()
	for _, l := range lanes {
		ln := ix.lanes[l]
		if plan[l].request != "" {
			ln.requestSnapshot(plan[l].request, schemas.ReasonNoSnapshotRetained)
		}
		wg.Add(1)
		go func() { defer wg.Done(); ln.run(runCtx) }()
	}
	close(ix.started)
	ix.log.Info("indexer running", zap.Int("lanes", len(lanes)), zap.Uint64("consumer_instance", uint64(m.ConsumerInstance())))

	select {
	case <-ctx.Done():
	case err = <-feedErr:
	}
	stop()
	wg.Wait()
	ix.closeLanes() // no lane goroutine runs: the lanes leave answers before outputs are flushed
	fctx, fcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer fcancel()
	if ferr := ix.out.Flush(fctx); ferr != nil && err == nil {
		err = fmt.Errorf("streams: flushing indexer outputs: %w", ferr)
	}
	return err
}

// closeLanes releases every claimed lane (ready bits cleared, claims released). Idempotent.
func (ix *Indexer) closeLanes() {
	for _, l := range ix.lanes {
		if l != nil {
			l.close()
		}
	}
}
