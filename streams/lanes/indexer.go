package lanes

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
	"github.com/ckf-stream/ckf-stream/streams"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/uber-go/tally/v4"
	"go.uber.org/zap"
)

// Freshness defaults: DefaultFreshnessPolicy's bounds, and the process configuration's
// (app/config, indexer.freshness), so that each has this one home.
const (
	// DefaultFreshnessMaxRecordLag is FreshnessPolicy.MaxRecordLag's default.
	DefaultFreshnessMaxRecordLag int64 = 10_000
	// DefaultFreshnessMaxTimeLag is FreshnessPolicy.MaxTimeLag's default.
	DefaultFreshnessMaxTimeLag = 10 * time.Second
	// DefaultIndexerLagCommitInterval is IndexerConfig.LagCommitInterval's default.
	DefaultIndexerLagCommitInterval = 5 * time.Second
)

// IndexerLagGroup is the name of the consumer group an indexer replica commits its applied lane
// offsets into: prefix (the deployment's topic prefix) + "ckf-indexer-" + the replica's consumer
// instance id as 16 lower-case hex digits, the form the replica logs at start. One group per
// replica: replicas read every lane independently, so their positions cannot share a group. A
// replica whose instance id is drawn at random gets a new group at every start; the old one
// keeps its last offsets until the broker expires it (offsets.retention.minutes), so set a
// fixed id where lag dashboards follow groups by name.
func IndexerLagGroup(prefix string, instance ckf.ConsumerInstanceID) string {
	return fmt.Sprintf("%sckf-indexer-%016x", prefix, uint64(instance))
}

// FreshnessPolicy says when a lane is too far behind its partition to be used in answers. A
// lane beyond either bound is excluded (reported, and left out of query answers) until it is
// back within both. A zero bound is not checked, so FreshnessPolicy{} excludes no lane for lag;
// a negative bound is a configuration error.
type FreshnessPolicy struct {
	// MaxRecordLag bounds last stable offset - (applied offset + 1), in records. Default 10,000
	// (DefaultFreshnessMaxRecordLag); >= 0; 0 does not check the record lag.
	MaxRecordLag int64
	// MaxTimeLag bounds the age of the last applied record (its producer timestamp). With relay
	// heartbeats every second, a lane whose relay stops is excluded after this long. Clocks of
	// relays and indexers must agree to well within this bound. Default 10 s
	// (DefaultFreshnessMaxTimeLag); >= 0; 0 does not check the time lag.
	MaxTimeLag time.Duration
}

// DefaultFreshnessPolicy returns the default policy: a lane is excluded beyond 10,000 records
// (DefaultFreshnessMaxRecordLag) or 10 s (DefaultFreshnessMaxTimeLag) of lag.
func DefaultFreshnessPolicy() FreshnessPolicy {
	return FreshnessPolicy{MaxRecordLag: DefaultFreshnessMaxRecordLag, MaxTimeLag: DefaultFreshnessMaxTimeLag}
}

func (p FreshnessPolicy) check(k *streams.ConfigCheck, prefix string) {
	if p.MaxRecordLag < 0 {
		k.Fail(prefix+"MaxRecordLag", "must not be negative, got %d", p.MaxRecordLag)
	}
	k.NonNegative(prefix+"MaxTimeLag", p.MaxTimeLag)
}

// IndexerTopics names the topics the indexer reads and writes. They have no defaults: the
// indexer reads and writes what the deployment names.
type IndexerTopics struct {
	Lanes         string // the lane topic: partition p is physical lane p. Required.
	SnapshotIndex string // compacted: latest complete snapshot per lane (written by relays); "" scans the lanes instead
	Control       string // snapshot requests to relays. Required.
	LaneEvents    string // lane state changes, keyed by lane. Required.
	DeadLetter    string // rejected records. Required.
}

// IndexerConfig configures an Indexer. Start from DefaultIndexerConfig and name the topics:
// NewIndexer takes every field as it is (see the package's configuration style in config.go).
type IndexerConfig struct {
	// Topics names the topics; every one but SnapshotIndex is required. No default.
	Topics IndexerTopics
	// Freshness excludes lagging lanes from answers. Default DefaultFreshnessPolicy(); a zero
	// bound is not checked.
	Freshness FreshnessPolicy
	// ProgressInterval is how often each lane reports progress on the lane-events topic.
	// Default 10 s; >= 0; 0 sends no periodic progress events.
	ProgressInterval time.Duration
	// Feed bounds the per-lane fetch queues: a lane whose queue reaches Feed.PauseBytes has its
	// partition paused until it drains (Kafka backpressure; other lanes keep fetching). Default
	// DefaultFeedConfig(). Feed.OnFetchError is the indexer's own (it logs fetch errors): a
	// value set here is not used.
	Feed FeedConfig
	// RestoreTimeout bounds reading the snapshot index at start-up; Run fails when it passes.
	// Default 30 s; > 0.
	RestoreTimeout time.Duration
	// RetrySnapshotRequestGap is the least time between two snapshot requests of a lane that
	// waits for the next snapshot under RetrySnapshot (an incomplete or uninstallable snapshot
	// on a lane that is not ready). The lane asks because an idle relay writes its next
	// snapshot only after RelayConfig.SnapshotIdleInterval; the gap keeps a relay whose
	// snapshots keep failing from being driven to write one per SnapshotRequestMinInterval.
	// Default 5 s; >= 0; 0 asks at every retry (the relay's SnapshotRequestMinInterval still
	// coalesces the requests).
	RetrySnapshotRequestGap time.Duration
	// LagGroup is the consumer group into which the indexer commits, per lane partition, the
	// offset after the last record it applied, so that standard lag tools see the replica (the
	// group has no members; the lanes stay directly assigned, and restores still seek to
	// snapshots: the commits are for visibility only). "" (the default) derives
	// IndexerLagGroup("", the manifest's consumer instance id).
	LagGroup string
	// LaneSources names, per lane, where the lane is read when not from Topics.Lanes and
	// Topics.SnapshotIndex: a lane of another region from a mirror's copy of that region's lane
	// topic (partition p is still lane p) and snapshot index, found by time and sequence rather
	// than offsets (streams.LaneSource.Mirrored, consumer §9.8). Its snapshot requests still go
	// to Topics.Control, which the deployment mirrors towards the lane's region (design §8).
	// Default none: every lane from Topics.Lanes.
	LaneSources map[uint8]streams.LaneSource
	// LagCommitInterval is how often the applied offsets are committed to LagGroup (only when
	// they moved), and once more at a graceful stop. A shorter interval makes lag tools more
	// current at the cost of one OffsetCommit request per interval; lag tools read at most this
	// stale a position. A failed commit is counted (ckf_indexer_lag_commit_errors_total) and
	// logged, never fatal; the next one retries. Default 5 s (DefaultIndexerLagCommitInterval);
	// > 0.
	LagCommitInterval time.Duration
}

// DefaultIndexerConfig returns the indexer's defaults: freshness DefaultFreshnessPolicy()
// (10,000 records, 10 s), progress events every 10 s, fetch queues DefaultFeedConfig() (pause at
// 64 MiB, resume at 16 MiB), a 30 s restore timeout and a 5 s gap between retried snapshot
// requests, and applied offsets committed to the lag group every 5 s. Topics are left empty: the
// caller names them.
func DefaultIndexerConfig() IndexerConfig {
	return IndexerConfig{
		Freshness:               DefaultFreshnessPolicy(),
		ProgressInterval:        10 * time.Second,
		Feed:                    DefaultFeedConfig(),
		RestoreTimeout:          30 * time.Second,
		RetrySnapshotRequestGap: 5 * time.Second,
		LagCommitInterval:       DefaultIndexerLagCommitInterval,
	}
}

// validate checks every field in order and returns the first violation as a *ConfigError.
func (c IndexerConfig) validate() error { return c.check().Result() }

// CheckSettings returns every violation of the configuration's rules, in field order (none when
// NewIndexer would accept it): the rules a configuration file's indexer section is held to too
// (app/config reports each under its setting's path).
func (c IndexerConfig) CheckSettings() []*streams.ConfigError { return c.check().Problems() }

func (c IndexerConfig) check() *streams.ConfigCheck {
	k := &streams.ConfigCheck{Config: "indexer"}
	k.Named("Topics.Lanes", c.Topics.Lanes)
	k.Named("Topics.Control", c.Topics.Control)
	k.Named("Topics.LaneEvents", c.Topics.LaneEvents)
	k.Named("Topics.DeadLetter", c.Topics.DeadLetter)
	c.Freshness.check(k, "Freshness.")
	k.NonNegative("ProgressInterval", c.ProgressInterval)
	c.Feed.check(k, "Feed.")
	k.Positive("RestoreTimeout", c.RestoreTimeout)
	k.NonNegative("RetrySnapshotRequestGap", c.RetrySnapshotRequestGap)
	k.Positive("LagCommitInterval", c.LagCommitInterval)
	for l := uint8(0); l < ckf.MaxLanes; l++ {
		src, ok := c.LaneSources[l]
		if !ok {
			continue
		}
		field := fmt.Sprintf("LaneSources[%d]", l)
		k.Named(field+".Topic", src.Topic)
		if err := streams.CheckMirroredTopic(src.Topic); err != nil {
			k.FailWith(field+".Topic", "is not a topic name", err)
		}
		if src.Mirrored {
			if err := streams.CheckRegionAlias(src.Region); err != nil {
				k.FailWith(field+".Region", "is not a region alias", err)
			}
		}
	}
	for l := range c.LaneSources {
		if l >= ckf.MaxLanes {
			k.Fail("LaneSources", "names lane %d, not in [0,%d)", l, ckf.MaxLanes)
		}
	}
	return k
}

// Source returns where lane l is read: LaneSources[l], or Topics.Lanes and Topics.SnapshotIndex.
func (c IndexerConfig) Source(l uint8) streams.LaneSource {
	if src, ok := c.LaneSources[l]; ok {
		return src
	}
	return streams.LaneSource{Topic: c.Topics.Lanes, SnapshotIndex: c.Topics.SnapshotIndex}
}

// checkInterval is how often an idle lane checks its health and freshness: a tenth of the time
// bound, within [20 ms, 250 ms]; 250 ms when the time lag is not checked.
func (c IndexerConfig) checkInterval() time.Duration {
	if c.Freshness.MaxTimeLag == 0 {
		return 250 * time.Millisecond
	}
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
	ClientOptsFor streams.ClientOptsFunc
	Metrics       tally.Scope
	Log           *zap.Logger
}

// Indexer runs the global indexer on Kafka: every configured lane's partition is read by direct
// assignment (every replica holds every lane), each lane's records are applied by that lane's
// own goroutine to its LaneIngestor, and queries read the shared table lock-free.
type Indexer struct {
	cfg      IndexerConfig
	lagGroup string
	g        *index.GlobalIndexer
	codec    *schemas.Codec
	opts     streams.ClientOpts
	log      *zap.Logger
	metrics  *indexerMetrics

	feed   *LaneFeed
	out    laneOutputs
	outCl  *kgo.Client
	laneCl *kgo.Client
	lanes  [ckf.MaxLanes]*lane

	excluded   atomic.Uint64
	incomplete atomic.Uint64
	holding    atomic.Uint64 // lanes whose DC reports resident blocks (HoldingLanes)
	// asOf holds per lane the time up to which it reflects its DC's KV events, in microseconds
	// (LaneAsOf); written by the lane's owner after it applied the record that carried it.
	asOf [ckf.MaxLanes]atomic.Int64
	// blockSize holds per lane its engines' block size as its latest applied record carried it,
	// 0 for none (LaneBlockSize); written by the lane's owner.
	blockSize [ckf.MaxLanes]atomic.Uint32
	started   chan struct{}

	eligibility eligibilitySignal

	// afterPlan, when set (tests only, SetAfterPlan), runs once the start-up plan is made and
	// before the lane consumer exists: the moment a quick relay may already answer.
	afterPlan func()
}

// laneOutputs are the side records a lane produces: lane events, dead letters and snapshot
// requests. *streams.Outputs writes them to Kafka; the lanes' in-process tests keep them, which
// lets those tests drive a lane's owner record by record without a broker.
type laneOutputs interface {
	LaneEvent(ev schemas.LaneEvent)
	DeadLetter(r *kgo.Record, code schemas.DeadLetterReason, reason, component string)
	RequestSnapshot(lane uint8, pool ckf.PoolID, reason schemas.SnapshotRequestReason, detail string, afterOffset int64)
}

// NewIndexer validates the configuration, taken as it is (an invalid field is a *ConfigError),
// and builds the indexer. Nothing runs until Run.
func NewIndexer(p IndexerParams) (*Indexer, error) {
	cfg := p.Config
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
	lagGroup := cfg.LagGroup
	if lagGroup == "" {
		lagGroup = IndexerLagGroup("", p.Indexer.Manifest().ConsumerInstance())
	}
	ix := &Indexer{cfg: cfg, lagGroup: lagGroup, g: p.Indexer, codec: p.Codec, opts: streams.ClientOpts{Shared: p.ClientOpts, PerRole: p.ClientOptsFor}, log: log.Named("indexer"),
		metrics: newIndexerMetrics(p.Metrics, func(l uint8) bool { _, ok := p.Indexer.Manifest().PoolOf(l); return ok }), started: make(chan struct{})}
	ix.eligibility.init(0)
	return ix, nil
}

// Config returns the configuration the indexer runs with: the one it was built with.
func (ix *Indexer) Config() IndexerConfig { return ix.cfg }

// LagGroup returns the consumer group the applied lane offsets are committed to: Config().LagGroup,
// or the name derived from the consumer instance id when that is empty.
func (ix *Indexer) LagGroup() string { return ix.lagGroup }

// Started is closed once every lane's goroutine is running.
func (ix *Indexer) Started() <-chan struct{} { return ix.started }

// GlobalIndexer returns the table the indexer fills.
func (ix *Indexer) GlobalIndexer() *index.GlobalIndexer { return ix.g }

// EligibleLanes returns the lanes a query may use now: ready in the table and not excluded by
// the freshness policy.
func (ix *Indexer) EligibleLanes() uint64 {
	return ix.g.ReadyLanes64() &^ ix.excluded.Load()
}

// EligibilityChanged returns a channel that is closed the next time EligibleLanes changes. A
// waiter takes the channel first and reads EligibleLanes after, so that no change between the two
// is missed, then waits on it; each change closes the channel once, and the next call returns a
// fresh one.
func (ix *Indexer) EligibilityChanged() <-chan struct{} { return ix.eligibility.wait() }

// noteEligibility reports the eligible lanes as they are now to EligibilityChanged's waiters.
func (ix *Indexer) noteEligibility() { ix.eligibility.note(ix.EligibleLanes()) }

// IncompleteLanes returns the lanes whose DC reports blocks its filter lacks: omitted for
// capacity (schemas.CapacityState.OmittedBlocks above 0), or of sources degraded by lost engine
// history (schemas.SourceHealth.DegradedSources above 0), on the lane's latest record that
// carried them: answers on them may under-report depth. Pass it to NewAnswerer (IncompleteLanes) so replies
// mark those lanes.
func (ix *Indexer) IncompleteLanes() uint64 { return ix.incomplete.Load() }

// LaneAsOf returns the time up to which lane l reflects its DC's KV events, in microseconds since
// the Unix epoch, or 0 while it has applied no record of its pool: the as_of of the lane's latest
// applied record (schemas.LaneRecord.AsOf), or, from a relay that does not stamp it, that
// record's Kafka timestamp (the time the relay wrote it, which makes the age read short). A
// lane stores it after the record's effect is visible to queries, so an answer never pairs a
// state with a newer as_of than it has. Pass it to NewAnswerer (LaneAsOf) so replies carry each
// lane's age. Safe for concurrent use: an atomic load.
func (ix *Indexer) LaneAsOf(l uint8) int64 {
	if l >= ckf.MaxLanes {
		return 0
	}
	return ix.asOf[l].Load()
}

// HoldingLanes returns the lanes whose DC holds blocks, as the lane's latest record that carried
// its capacity state reports them (schemas.CapacityState.ResidentBlocks above 0). A query that
// finds not even its first block on such a lane is a sign the routers' hashes do not meet the
// engines' (query.CountFirstBlocks). Safe for concurrent use: an atomic load.
func (ix *Indexer) HoldingLanes() uint64 { return ix.holding.Load() }

func (ix *Indexer) setHolding(bit uint64, on bool) {
	if on {
		ix.holding.Or(bit)
	} else {
		ix.holding.And(^bit)
	}
}

func (ix *Indexer) setIncomplete(bit uint64, on bool) {
	if on {
		ix.incomplete.Or(bit)
	} else {
		ix.incomplete.And(^bit)
	}
}

func (ix *Indexer) setExcluded(bit uint64, on bool) {
	if on {
		ix.excluded.Or(bit)
	} else {
		ix.excluded.And(^bit)
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
			s := l.stats.snapshot()
			s.BlockSize = ix.LaneBlockSize(s.Lane)
			out = append(out, s)
		}
	}
	return out
}

// Run restores every lane's start position, then reads and applies the lanes until ctx ends.
// On return every lane is released (out of answers) and every output produced was flushed.
func (ix *Indexer) Run(ctx context.Context) error {
	m := ix.g.Manifest()
	var lanes []int32
	for l := uint8(0); l < ckf.MaxLanes; l++ {
		if _, ok := m.PoolOf(l); ok {
			lanes = append(lanes, int32(l))
		}
	}
	outCl, err := kgo.NewClient(ix.opts.ForRole("indexer-outputs", kgo.ProducerLinger(5*time.Millisecond))...)
	if err != nil {
		return fmt.Errorf("streams: indexer output client: %w", err)
	}
	ix.outCl = outCl
	defer outCl.Close()
	out := streams.NewOutputs(outCl, ix.codec, m.ConsumerInstance(), streams.OutputTopics{
		LaneEvents: ix.cfg.Topics.LaneEvents, DeadLetter: ix.cfg.Topics.DeadLetter, Control: ix.cfg.Topics.Control,
	}, ix.log)
	ix.out = out

	rctx, cancel := context.WithTimeout(ctx, ix.cfg.RestoreTimeout)
	plan, err := ix.restorePlan(rctx, lanes)
	cancel()
	if err != nil {
		return err
	}
	if ix.afterPlan != nil {
		ix.afterPlan()
	}
	start := map[string]map[int32]kgo.Offset{}
	topicOf := map[int32]string{}
	for _, l := range lanes {
		topic := ix.cfg.Source(uint8(l)).Topic
		if start[topic] == nil {
			start[topic] = map[int32]kgo.Offset{}
		}
		start[topic][l], topicOf[l] = plan[l].start, topic
	}
	laneCl, err := kgo.NewClient(ix.opts.ForRole("lanes", LaneConsumerOptsFor(start)...)...)
	if err != nil {
		return fmt.Errorf("streams: indexer lane client: %w", err)
	}
	ix.laneCl = laneCl
	defer laneCl.Close()
	feedCfg := ix.cfg.Feed
	feedCfg.OnFetchError = func(err error) { ix.log.Warn("lane fetch error", zap.Error(err)) }
	if ix.feed, err = NewLaneFeedTopics(laneCl, topicOf, feedCfg); err != nil {
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
	lag := ix.newLagCommitters(topicOf)
	wg.Add(1)
	go func() { defer wg.Done(); ix.commitLagEvery(runCtx, lag) }()
	close(ix.started)
	ix.log.Info("indexer running", zap.Int("lanes", len(lanes)), zap.Uint64("consumer_instance", uint64(m.ConsumerInstance())))

	select {
	case <-ctx.Done():
	case err = <-feedErr:
	}
	stop()
	wg.Wait()
	ix.commitLag(lag, true) // the final positions, so lag tools see where this replica stopped
	ix.closeLanes()         // no lane goroutine runs: the lanes leave answers before outputs are flushed
	fctx, fcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer fcancel()
	if ferr := out.Flush(fctx); ferr != nil && err == nil {
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
	ix.noteEligibility()
}

// lagCommitTimeout bounds one commit to the indexer's lag group.
const lagCommitTimeout = 10 * time.Second

// lagCommitters commit the applied positions of the lanes of each lane topic (the local one,
// and a mirror's copy per other region) into the one lag group.
type lagCommitters map[string]*streams.LagCommitter

func (ix *Indexer) newLagCommitters(topicOf map[int32]string) lagCommitters {
	out := lagCommitters{}
	for _, topic := range topicOf {
		if out[topic] == nil {
			out[topic] = &streams.LagCommitter{Group: ix.lagGroup, Topic: topic, Interval: ix.cfg.LagCommitInterval, Timeout: lagCommitTimeout}
		}
	}
	return out
}

// appliedPositions returns, per lane partition of topic that applied a record, the offset after
// the last record applied (data or transaction marker): the committed-offset form lag tools
// expect.
func (ix *Indexer) appliedPositions(topic string) map[int32]int64 {
	out := map[int32]int64{}
	for _, l := range ix.lanes {
		if l == nil || ix.cfg.Source(l.num).Topic != topic {
			continue
		}
		if applied := l.stats.appliedOffset(); applied >= 0 {
			out[int32(l.num)] = applied + 1
		}
	}
	return out
}

// commitLagEvery commits the applied positions to the lag group every LagCommitInterval until
// ctx ends. It is the committer's only user while the lanes run; Run commits once more after.
func (ix *Indexer) commitLagEvery(ctx context.Context, lag lagCommitters) {
	t := time.NewTicker(ix.cfg.LagCommitInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			ix.commitLag(lag, true) // the ticker paces the commits; the interval check would skip every other tick
		}
	}
}

// commitLag commits the positions that moved (force: whatever the interval), topic by topic. A
// failure is counted and logged, never fatal; the next commit retries.
func (ix *Indexer) commitLag(lag lagCommitters, force bool) {
	for topic, c := range lag {
		ok, err := c.Commit(ix.outCl, time.Now(), ix.appliedPositions(topic), force)
		if err != nil {
			ix.metrics.lagCommitErrors.Inc(1)
			ix.log.Warn("applied lane offsets not committed to the lag group", zap.String("group", c.Group),
				zap.String("topic", topic), zap.Error(err))
			continue
		}
		if ok {
			ix.metrics.lagCommits.Inc(1)
		}
	}
}
