package relay

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/ckf/index"
	"github.com/ckf-stream/ckf-stream/ckf/producer"
	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/ckf-stream/ckf-stream/streams"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/uber-go/tally/v4"
	"go.uber.org/zap"
)

// The relay: one DC pool's producer on Kafka (design §1, §3). It reads the DC's KV-events
// topic, applies every event to the exact producer state (ckf.DcState) in the order of its
// partition, and publishes the state's publication batches as sequenced deltas of absolute
// bucket images on its lane partition, with barrier snapshots at start, periodically and on
// request. The files:
//
//	relay.go             configuration, construction, accessors, errors
//	relay_run.go         the run loop: start-up replay, live phase, graceful stop
//	relay_events.go      KV-event conversion, application, rejection and dead letters
//	relay_deltas.go      the delta path, one way: the publisher's delta into the open
//	                     transaction, streamed, committed
//	relay_snapshot.go    barrier snapshots and heartbeats
//	relay_recover.go     failed writes, recovery, a new incarnation
//	relay_claim.go       the pool claim that tells a newer instance's fence from the brokers'
//	relay_limit.go       the lane record limit
//	relay_metrics.go     tally handles
//	relay_silence.go     engines that do not publish: the DC's idle time, silent sources
//	relay_asof.go        the as_of every lane record carries
//	relay_blocksize.go   the DC's block size every lane record carries
//	relay_fullness.go    the filter-occupancy warning
//	relay_checkpoint.go  state checkpoints, restore, lag offsets (checkpoint_record.go: framing;
//	                     checkpoint_read.go: finding the newest usable checkpoint)
//
// Input: direct assignment of every partition of the KV-events topic, no consumer group. The
// relay's state is the exact state of the whole DC, so one relay instance must see every
// partition; a group would split the partitions between instances and split the state with
// them. The input position is part of the state checkpoint instead (relay_checkpoint.go): the
// checkpointed offsets commit in the same transaction as the state and the lane records they
// produced (the goka commit rule — commit an input only after everything it caused is
// acknowledged — holds by construction), and a restart seeks every partition to them and
// replays only the tail. A consumer group receives the published offsets too, for lag tools
// only.
//
// The partitions are assigned once, at start: partitions added to the KV-events topic later are
// read only after a restart (from their start). The replay covers exactly the records from the
// checkpointed offset (or the log start) below each partition's end (last stable offset) listed
// at start, and ends when every partition is read up to it (endoflog.go); records written after
// the listing are live.
//
// Retention: the KV-events topic must keep the events since the newest checkpoint (relay.md,
// "Retention"); without a checkpoint topic, every event whose effect is still part of the DC's
// cache. Events deleted before a restart read them are a gap (logged, counted): a block stored
// by such an event and never removed is missing from the restarted relay's state (an
// under-report, never a false ownership).
//
// Leases: records carry no lease (design §2); every indexer replica mints its own. ckf.Publisher
// still needs a lease to publish (without one it discards batches), so the relay gives it a
// synthetic wire lease {consumer 0, the lane, epoch} whose epoch increases at every snapshot.
// It never leaves the process; it only keeps the publisher's state machine (lease present,
// snapshot after barrier, fence cleared by a new lease) exactly as the spec states it.
//
// Delivery: every write is a Kafka transaction of an idempotent, acks=all producer whose
// transactional id is derived from the pool, so that the broker fences an older instance of the
// same pool as soon as a newer one writes; indexers read with read_committed and never see the
// records of an aborted transaction. Whether a fence came from a newer instance or from the
// brokers is decided by the pool's claim, not by the answer (relay_claim.go, writeFailed). A
// failed write, and a fence with no newer instance, abandons the stream: the publisher is fenced (DeliveryUncertain) and the relay
// continues under a new producer incarnation whose first record is a barrier snapshot. A new
// incarnation, not just a new wire lease, because only a new identity makes every indexer
// replica mint a new lease and install the snapshot: a ready replica would ignore a snapshot of
// the same identity as stale and silently miss the lost deltas' images.

// Relay errors.
var (
	// ErrRelayFenced: a newer instance of the same pool claimed it (its claim is the latest on
	// the snapshot index; relay_claim.go), or, with no snapshot index to hold claims, the broker
	// fenced this instance's transactional id. Run returns it (wrapped); the instance must stop,
	// and must not be restarted in a loop (it would fence the newer one in turn).
	ErrRelayFenced = errors.New("streams: relay fenced by a newer instance of its pool")
	// ErrLaneNotOwned: the configured lane does not belong to the relay's pool, according to
	// RelayConfig.LaneOwners or to the lane's latest snapshot-index entry. To hand a lane over
	// to another pool on purpose, stop the old pool's relay and write a tombstone (null value)
	// for the key "lane-<n>" on the snapshot-index topic before starting the new one.
	ErrLaneNotOwned = errors.New("streams: relay lane is not owned by its pool")
	// ErrProducerInvariant: an event hit a producer invariant violation (failure point
	// PrewriteInvariantMismatch, action FenceAndRebuildProducer). The state is suspect; Run
	// returns the error and a restart rebuilds the state by replay under a new incarnation.
	ErrProducerInvariant = errors.New("streams: relay producer invariant violated")
)

// RelayTopics names the topics a relay reads and writes. They have no defaults: the relay
// reads and writes what the deployment names.
type RelayTopics struct {
	// KVEvents is the DC's KV-events topic (input; every partition is read). Required.
	KVEvents string
	// Lanes is the lane topic; the relay writes only partition RelayConfig.Lane. Required.
	Lanes string
	// SnapshotIndex is the compacted snapshot index, written in each snapshot's transaction and
	// read at start (ownership check, previous incarnation). "" neither writes nor reads it.
	SnapshotIndex string
	// Control carries snapshot requests; "" reads none.
	Control string
	// MirroredControl are MirrorMaker's copies of other regions' control topics in this
	// region's cluster (design §8: the indexers of another region ask for this lane's snapshots
	// on their own control topic, mirrored here), read like Control. A copy that does not exist
	// yet when the relay starts (MirrorMaker creates it when it first mirrors) does not stop
	// it: the relay starts without the copy and reads it from its start once it appears
	// (relay_mirrored.go, RelayStats.MirroredControlMissing). Default none.
	MirroredControl []string
	// DeadLetter receives rejected KV events and unusable checkpoint records; "" only counts
	// and logs them.
	DeadLetter string
	// Checkpoints holds the relay's state checkpoints (relay.md, "State checkpoint"): partition
	// Lane, so it needs more partitions than the highest lane written. "" writes none, and a
	// start replays the KV-events topic from its start (which must then retain every event).
	Checkpoints string
}

// Relay defaults: DefaultRelayConfig's values, and what the process configuration (app/config,
// section relay) takes as its own defaults, so that each has this one home. The CKF sizing and
// cadence defaults are ckf's (ckf.DefaultCkfConfig).
const (
	// DefaultRelaySnapshotEveryDeltas is SnapshotEveryDeltas's default: off, the byte trigger
	// (SnapshotDeltaRatio) bounds what snapshots cost instead.
	DefaultRelaySnapshotEveryDeltas = 0
	// DefaultRelaySnapshotDeltaRatio is SnapshotDeltaRatio's default: snapshots stay at most
	// 1/(1+9) = 10 % of the lane's bytes under steady load.
	DefaultRelaySnapshotDeltaRatio = 9.0
	// DefaultRelaySnapshotInterval is SnapshotInterval's default.
	DefaultRelaySnapshotInterval = time.Minute
	// DefaultRelaySnapshotIdleInterval is SnapshotIdleInterval's default.
	DefaultRelaySnapshotIdleInterval = time.Hour
	// DefaultRelayHeartbeatInterval is HeartbeatInterval's default.
	DefaultRelayHeartbeatInterval = time.Second
	// DefaultRelayPublishEveryEvents is the relay's publication window in KV events
	// (CKF.PublishEveryNEvents): one delta per window instead of one per event.
	DefaultRelayPublishEveryEvents = 64
	// DefaultRelayPublishMaxDelay is PublishMaxDelay's default.
	DefaultRelayPublishMaxDelay = 5 * time.Millisecond
	// DefaultRelayCheckpointInterval is CheckpointInterval's default.
	DefaultRelayCheckpointInterval = 30 * time.Second
	// DefaultRelayCheckpointEveryEvents is CheckpointEveryEvents's default.
	DefaultRelayCheckpointEveryEvents = 2_000_000
	// DefaultRelayCheckpointChunkBytes is CheckpointChunkBytes's default: a chunk record stays
	// under the broker's default 1 MiB record limit and franz-go's 1,000,012-byte batch limit.
	DefaultRelayCheckpointChunkBytes = 900_000
	// DefaultRelayLagCommitInterval is LagCommitInterval's default.
	DefaultRelayLagCommitInterval = time.Second
	// DefaultRelaySilentSourceAfter is SilentSourceAfter's default.
	DefaultRelaySilentSourceAfter = 5 * time.Minute
	// DefaultRelayForgetSourceAfter is ForgetSourceAfter's default.
	DefaultRelayForgetSourceAfter = time.Hour
)

// RelayConfig configures a Relay. Start from DefaultRelayConfig, then set the topics, the pool,
// the lane and, when the indexers' is not the default, the filter size (CKF.ExpectedBlocksPerDC): NewRelay takes every field as it is
// (see the package's configuration style in config.go). The only empty fields NewRelay fills
// are TransactionalID, LagGroup and Incarnation, each derived as its comment says; Relay.Config returns
// the configuration with them derived.
type RelayConfig struct {
	// Topics names the topics; KVEvents and Lanes are required. No default.
	Topics RelayTopics
	// Pool is the DC pool the relay publishes for. Required: the zero pool is refused.
	Pool ckf.PoolID
	// Lane is the physical lane (lane-topic partition) written, in [0, ckf.LaneCount). Default 0.
	Lane uint8
	// LaneOwners is the deployment's lane map as the indexers configure it. When any lane is
	// set, Lane must be mapped to Pool and Pool to no other lane, or NewRelay fails with
	// ErrLaneNotOwned. All nil (the default) skips this static check; the start-up check
	// against the snapshot index still runs.
	LaneOwners index.ManifestLanes
	// CKF is the producer configuration, taken as it is and checked by ckf (CkfConfig.Validate):
	// every field is legal as ckf defines it, Seed 0 included, and the filter fits the wire
	// (CheckSettings). Default ckf.DefaultCkfConfig() with ExpectedBlocksPerDC
	// DefaultRelayExpectedBlocks (the process configuration's default) and PublishEveryNEvents
	// DefaultRelayPublishEveryEvents. ExpectedBlocksPerDC and Seed must match the indexers'
	// manifest format.
	CKF ckf.CkfConfig
	// LayoutGeneration is stamped on the producer identity. Default 1; >= 1 (the wire rejects
	// layout generation 0).
	LayoutGeneration uint64
	// Incarnation is the first producer incarnation. 0 (the default) derives it from the start
	// time: max(start time in Unix nanoseconds, the lane's last indexed incarnation + 1), so
	// incarnations strictly increase across restarts while clocks move forward, and at least
	// past the last one the snapshot index remembers. Incarnation 0 is never used, so 0 is not
	// an explicit incarnation; an explicit one must be above the lane's last indexed
	// incarnation (Run fails otherwise). Every recovery takes the next one.
	Incarnation uint64
	// PublishMaxDelay closes a non-empty publication window this long after its first pending
	// event (CKF.PublishEveryNEvents > 1 only). Default 5 ms (DefaultRelayPublishMaxDelay);
	// >= 0; 0 closes a window as soon as the events of the poll that opened it are applied.
	PublishMaxDelay time.Duration
	// MaxDeltasPerTransaction bounds how many deltas one Kafka transaction carries. Deltas of
	// one poll of the input are grouped into one transaction up to this bound: the commit cost
	// (a round trip to the transaction coordinator and markers on the partition) is paid per
	// transaction, not per delta (TestRelayBoundsTransactions). Trade-off: indexers read
	// committed records only, so under load a larger bound delays the first delta of a
	// transaction by the time the whole transaction takes to write, while a smaller bound
	// costs throughput (BenchmarkE2ERelay measures it). At low load a poll holds few events and
	// transactions stay small whatever the bound. A publication split into several deltas (larger
	// than one lane record, see relay.md) keeps its pieces in one transaction, which may exceed
	// the bound by them. Default 1,024; >= 1.
	MaxDeltasPerTransaction int
	// SnapshotEveryDeltas writes a barrier snapshot after this many deltas. Default 0 (off:
	// DefaultRelaySnapshotEveryDeltas): a count of deltas says nothing about their size once
	// deltas coalesce many events, while SnapshotDeltaRatio bounds the snapshots' share of the
	// lane's bytes. At least one of the three triggers must be on: a recovering indexer needs a
	// recent snapshot.
	SnapshotEveryDeltas uint64
	// SnapshotDeltaRatio writes a barrier snapshot once the deltas published since the previous
	// one weigh this many times a snapshot (8 bytes per bucket; a delta weighs 16 bytes per image
	// plus its record): under steady load snapshots are then at most 1/(1+ratio) of the lane
	// topic's bytes, and a replica restoring from the latest snapshot reads at most ratio
	// snapshots' worth of deltas after it. Default 9 (DefaultRelaySnapshotDeltaRatio: at most
	// 10 %); >= 0; 0 disables the byte trigger.
	SnapshotDeltaRatio float64
	// SnapshotInterval writes a barrier snapshot this long after the previous one. Default 60 s
	// (DefaultRelaySnapshotInterval); >= 0; 0 disables the time trigger. SnapshotInterval and
	// SnapshotEveryDeltas both 0 is a configuration error.
	SnapshotInterval time.Duration
	// SnapshotIdleInterval replaces SnapshotInterval while the lane is idle: when no delta was
	// published since the previous snapshot, the time trigger waits this long instead. An idle
	// DC then costs one full snapshot per SnapshotIdleInterval rather than one per
	// SnapshotInterval (8 MiB per snapshot at 2^20 buckets), while its latest snapshot is still
	// rewritten often enough to stay inside the lane topic's retention (keep retention.ms above
	// it). Replicas that need a snapshot sooner ask for one on the control topic. Default 1 h
	// (DefaultRelaySnapshotIdleInterval); >= 0; 0 means SnapshotInterval (idle lanes snapshot as
	// often as busy ones). With the time trigger on, a non-zero one must be at least
	// SnapshotInterval (a shorter one is an error, not raised); with SnapshotInterval 0 it is not
	// used.
	SnapshotIdleInterval time.Duration
	// SnapshotRequestMinInterval coalesces snapshot requests from the control topic: a request
	// is served by the next snapshot, but not sooner than this after the previous snapshot, so
	// a burst of requests (every replica asking at once) yields one snapshot. Default 250 ms;
	// >= 0; 0 serves every request at once, without coalescing.
	SnapshotRequestMinInterval time.Duration
	// HeartbeatInterval: a lane without any write for this long gets a heartbeat. Default 1 s
	// (DefaultRelayHeartbeatInterval); > 0.
	HeartbeatInterval time.Duration
	// TransactionalID is the lane producer's transactional id. "" (the default) derives
	// "ckf-relay-" + Topics.Lanes + "-" + Pool.String(): two instances of one pool writing the
	// same lane topic share it, so the broker fences the older one, while deployments on one
	// cluster under different topic names never fence each other.
	TransactionalID string
	// ChunkWords is the bucket words per snapshot chunk. Default DefaultChunkWords (sized for
	// 1 MiB records); >= 1. When a chunk of that many words would not fit in one record of the
	// lane topic's max.message.bytes, the relay's chunks are smaller (relay.md, Record size).
	ChunkWords int
	// WriteTimeout bounds one transaction. Default 30 s; > 0.
	WriteTimeout time.Duration
	// StopTimeout bounds the graceful stop's writes (tail, drain marker). Default 20 s; > 0.
	StopTimeout time.Duration
	// MaxPollRecords bounds the KV records taken per poll. Default 10,000; >= 1.
	MaxPollRecords int
	// CheckpointInterval writes a state checkpoint (with Topics.Checkpoints set) this long after
	// the previous one. A restart replays the KV events written since the last checkpoint, so
	// this bounds the replay: at r events/s about CheckpointInterval × r events, replayed at
	// several hundred thousand per second. Each checkpoint writes the whole exact state (about
	// 30 bytes per resident block: 30 MB at 1M blocks). Default 30 s
	// (DefaultRelayCheckpointInterval); >= 0; 0 disables the time trigger.
	CheckpointInterval time.Duration
	// CheckpointEveryEvents also writes a checkpoint once this many KV records were applied
	// since the previous one, so a busy DC's tail stays short. Default 2,000,000
	// (DefaultRelayCheckpointEveryEvents); 0 disables the count trigger. With Topics.Checkpoints
	// set, at least one trigger must be on.
	CheckpointEveryEvents uint64
	// CheckpointChunkBytes is the state bytes per checkpoint chunk record; each incarnation
	// lowers it to fit the checkpoint topic's max.message.bytes (read from the topic). Default
	// 900,000 (DefaultRelayCheckpointChunkBytes); >= 1.
	CheckpointChunkBytes int
	// LagGroup is the consumer group whose committed offsets show the relay's input progress
	// to standard lag tools (relay.md, "Lag"). "" (the default) derives
	// "ckf-relay-" + Topics.KVEvents + "-" + Pool.String(). The group has no members; the relay
	// only commits into it.
	LagGroup string
	// LagCommitInterval is the least time between two commits to LagGroup. Default 1 s
	// (DefaultRelayLagCommitInterval); >= 0; 0 commits after every lane transaction.
	LagCommitInterval time.Duration
	// SilentSourceAfter: a source of the DC (worker id, dp rank) whose newest KV event is older
	// than this while another source published within it is counted silent
	// (ckf_relay_silent_sources, logged when it goes silent and when it returns; relay.md,
	// "Silent engines"): its engine or bridge stopped publishing, and the index keeps its blocks
	// as they were. Event times are the records' Kafka timestamps. Trade-off: engines publish
	// only when their cache changes, so a worker that gets no requests for this long is counted
	// too; under load-balanced routing a few minutes is far beyond any worker's quiet spell.
	// Default 5 min (DefaultRelaySilentSourceAfter); > 0.
	SilentSourceAfter time.Duration
	// ForgetSourceAfter: a source with no KV event for this long is dropped from the silence
	// watch, which bounds its memory (at most 65,536 sources in any case) and ends the count of
	// a worker removed without a clear (a KvCleared drops the source at once). Default 1 h
	// (DefaultRelayForgetSourceAfter); above SilentSourceAfter.
	ForgetSourceAfter time.Duration
}

// DefaultRelayConfig returns the relay's defaults: CKF ckf.DefaultCkfConfig() with a filter of
// DefaultRelayExpectedBlocks blocks (the indexers' manifest must have the same size) and windows
// of DefaultRelayPublishEveryEvents events, layout generation 1, the first incarnation and the
// transactional id derived, publication windows closed after 5 ms, at most 1,024 deltas per
// transaction, a snapshot once the deltas weigh 9 snapshots or after 60 s (1 h while idle), snapshot requests
// coalesced over 250 ms, a heartbeat after 1 s without a write, DefaultChunkWords words per
// snapshot chunk, 30 s per transaction, 20 s for the graceful stop and 10,000 KV records per
// poll, a source silent after 5 min without events while others publish and forgotten after
// 1 h. Topics and Pool are left empty: the caller sets them.
func DefaultRelayConfig() RelayConfig {
	return RelayConfig{
		CKF:                        relayCkfDefaults(),
		LayoutGeneration:           1,
		PublishMaxDelay:            DefaultRelayPublishMaxDelay,
		MaxDeltasPerTransaction:    1024,
		SnapshotEveryDeltas:        DefaultRelaySnapshotEveryDeltas,
		SnapshotDeltaRatio:         DefaultRelaySnapshotDeltaRatio,
		SnapshotInterval:           DefaultRelaySnapshotInterval,
		SnapshotIdleInterval:       DefaultRelaySnapshotIdleInterval,
		SnapshotRequestMinInterval: 250 * time.Millisecond,
		HeartbeatInterval:          DefaultRelayHeartbeatInterval,
		ChunkWords:                 streams.DefaultChunkWords,
		WriteTimeout:               30 * time.Second,
		StopTimeout:                20 * time.Second,
		MaxPollRecords:             10_000,
		CheckpointInterval:         DefaultRelayCheckpointInterval,
		CheckpointEveryEvents:      DefaultRelayCheckpointEveryEvents,
		CheckpointChunkBytes:       DefaultRelayCheckpointChunkBytes,
		LagCommitInterval:          DefaultRelayLagCommitInterval,
		SilentSourceAfter:          DefaultRelaySilentSourceAfter,
		ForgetSourceAfter:          DefaultRelayForgetSourceAfter,
	}
}

// relayCkfDefaults is ckf.DefaultCkfConfig with the product's filter size
// (DefaultRelayExpectedBlocks) and the relay's publication cadence: windows of
// DefaultRelayPublishEveryEvents events (PublishMaxDelay closes a window sooner when events are
// sparse).
func relayCkfDefaults() ckf.CkfConfig {
	c := ckf.DefaultCkfConfig()
	c.ExpectedBlocksPerDC = DefaultRelayExpectedBlocks
	c.PublishEveryNEvents = DefaultRelayPublishEveryEvents
	return c
}

// withDerived fills the empty fields that have a derivation: the transactional id.
func (c RelayConfig) withDerived() RelayConfig {
	if c.TransactionalID == "" {
		c.TransactionalID = "ckf-relay-" + c.Topics.Lanes + "-" + c.Pool.String()
	}
	if c.LagGroup == "" {
		c.LagGroup = "ckf-relay-" + c.Topics.KVEvents + "-" + c.Pool.String()
	}
	return c
}

// Validate checks c as NewRelay does (the derived fields derived first) and returns the first
// violation as a *ConfigError naming the field; a lane the static lane map gives to another pool
// is ErrLaneNotOwned. The deployment's settings follow CheckSettings' rules, which the process
// configuration applies too.
func (c RelayConfig) Validate() error { return c.withDerived().validate() }

// validate checks the topics, the pool and the lane, the deployment's settings (CheckSettings),
// then the other fields in order, and returns the first violation as a *ConfigError; a lane the
// static lane map gives to another pool is ErrLaneNotOwned.
func (c RelayConfig) validate() error {
	k := streams.ConfigCheck{Config: "relay"}
	k.Named("Topics.KVEvents", c.Topics.KVEvents)
	k.Named("Topics.Lanes", c.Topics.Lanes)
	for i, t := range c.Topics.MirroredControl {
		field := fmt.Sprintf("Topics.MirroredControl[%d]", i)
		k.Named(field, t)
		if t != "" && (t == c.Topics.Control || t == c.Topics.KVEvents || t == c.Topics.Lanes) {
			k.Fail(field, "is %q, also the name of another of the relay's topics", t)
		}
	}
	if c.Pool == (ckf.PoolID{}) {
		k.Fail("Pool", "must be set")
	}
	if err := CheckLane(int(c.Lane)); err != nil {
		k.Fail("Lane", "%v", err)
	}
	for _, p := range c.CheckSettings(nil) {
		k.FailWith(p.Field, p.Reason, p.Err)
	}
	if _, err := c.CKF.Format(); err != nil { // ckf's other rules (kicks, verification window)
		k.FailWith("CKF", "is invalid", err)
	}
	if c.LayoutGeneration == 0 {
		k.Fail("LayoutGeneration", "must be >= 1 (the wire rejects 0)")
	}
	if c.MaxDeltasPerTransaction < 1 {
		k.Fail("MaxDeltasPerTransaction", "must be >= 1, got %d", c.MaxDeltasPerTransaction)
	}
	k.NonNegative("SnapshotRequestMinInterval", c.SnapshotRequestMinInterval)
	if c.ChunkWords < 1 {
		k.Fail("ChunkWords", "must be >= 1, got %d", c.ChunkWords)
	}
	k.Positive("WriteTimeout", c.WriteTimeout)
	k.Positive("StopTimeout", c.StopTimeout)
	if c.MaxPollRecords < 1 {
		k.Fail("MaxPollRecords", "must be >= 1, got %d", c.MaxPollRecords)
	}
	if c.CheckpointChunkBytes < 1 {
		k.Fail("CheckpointChunkBytes", "must be >= 1, got %d", c.CheckpointChunkBytes)
	}
	k.NonNegative("LagCommitInterval", c.LagCommitInterval)
	if err := k.Result(); err != nil {
		return err
	}
	return c.CheckLaneOwners()
}

// CheckLaneOwners is the static ownership check of Lane against the deployment's lane map
// (LaneOwners): nil when the map is empty or maps Lane to Pool and Pool to no other lane,
// ErrLaneNotOwned (wrapped, saying which pool owns what) otherwise.
func (c RelayConfig) CheckLaneOwners() error {
	configured := false
	for l, p := range c.LaneOwners {
		if p == nil {
			continue
		}
		configured = true
		if uint8(l) != c.Lane && *p == c.Pool {
			return fmt.Errorf("%w: pool %s is mapped to lane %d, not to the configured lane %d", ErrLaneNotOwned, c.Pool, l, c.Lane)
		}
	}
	if !configured {
		return nil
	}
	if p := c.LaneOwners[c.Lane]; p == nil || *p != c.Pool {
		owner := "no pool"
		if p != nil {
			owner = "pool " + p.String()
		}
		return fmt.Errorf("%w: lane %d belongs to %s, not to %s", ErrLaneNotOwned, c.Lane, owner, c.Pool)
	}
	return nil
}

// RelayParams are what NewRelay needs. ClientOpts carry the connection (seed brokers, TLS,
// SASL, logger); the relay creates its own clients from them and adds what each needs
// (transactional id, manual partitioning, isolation level). ClientOptsFor, when set, is used
// instead, once per client, with the roles "relay-input", "relay-outputs", "relay-lanes" (a new
// client at every incarnation, after the previous one closed) and "relay-snapshot-index".
type RelayParams struct {
	Config        RelayConfig
	Codec         *schemas.Codec
	ClientOpts    []kgo.Opt
	ClientOptsFor streams.ClientOptsFunc // optional
	Metrics       tally.Scope            // optional
	Log           *zap.Logger            // optional
}

// RelayStats are the relay's counters, safe to read from any goroutine. Occupancy is
// ResidentBlocks / (4 × BucketCount).
type RelayStats struct {
	Incarnation  uint64 // current producer incarnation
	LastSequence uint64 // sequence of the last committed transaction (snapshot or deltas) of the current incarnation
	Started      bool   // the start-up snapshot is committed
	Fenced       bool   // publication is stopped: a write failed, or the broker fenced this instance

	Events         uint64 // live KV records: at or past their partition's end listed at start
	ReplayedEvents uint64 // KV records of the start-up replay: below their partition's end listed at start
	Rejected       uint64 // events rejected by the state (source protocol, resource, invariant)
	Undecodable    uint64 // records that did not decode as a KV event
	DeadLetters    uint64 // dead letters produced (live phase only; replays do not repeat them)

	CapacityOmissions uint64 // fingerprints omitted for capacity (lineage and ownership kept)
	UnknownRemovals   uint64 // removals of ids this source never stored (ignored)

	Deltas, Images     uint64 // published deltas and bucket images
	SplitPublications  uint64 // publications larger than one lane record, published as several deltas
	Transactions       uint64 // committed lane transactions
	Snapshots          uint64 // committed snapshots (start-up, periodic, requested, recovery)
	SnapshotRequests   uint64 // control-topic requests for this lane and pool
	Heartbeats         uint64
	Recoveries         uint64 // new incarnations after an uncertain write (a fence taken for the brokers' included)
	FenceRecoveries    uint64 // fences recovered from because the pool's latest claim was this instance's (no newer instance)
	WriteTimeouts      uint64 // lane writes unanswered within WriteTimeout (write_failures_total{cause="timeout"})
	Fences             uint64 // lane writes answered with a fence (write_failures_total{cause="fence"})
	WriteErrors        uint64 // lane writes failed otherwise (write_failures_total{cause="error"})
	LastWriteFailure   string // the last failed lane write: what, why and when ("" before the first)
	ResidentBlocks     uint64 // fingerprints in the filter
	BucketCount        uint64
	LastSnapshotMillis uint64 // duration of the last snapshot (barrier + write)

	Checkpoints         uint64 // state checkpoints committed by this run
	LastCheckpoint      uint64 // id of the last checkpoint committed by this run (0: none)
	CheckpointBytes     uint64 // encoded size of the last checkpoint
	CheckpointsRejected uint64 // checkpoint records or checkpoints found unusable at start
	RestoredCheckpoint  uint64 // id of the checkpoint the run started from (0: full replay)
	CheckpointGaps      uint64 // input partitions whose checkpointed offset was already deleted by retention at start
	LagCommits          uint64 // commits of the published offsets to LagGroup

	Sources       uint64 // sources (worker, rank) the silence watch holds a time for
	SilentSources uint64 // of them, silent for SilentSourceAfter while another published within it

	BlockSizes uint64 // distinct block sizes the DC's sources report (above 1: they disagree)
	BlockSize  uint64 // the DC's block size every lane record carries (0: none known, or sources disagree)

	// MirroredControlMissing counts the mirrored control topics (RelayTopics.MirroredControl)
	// that did not exist yet when last asked: the relay runs without them and reads each from
	// its start once it appears.
	MirroredControlMissing uint64
}

// Relay publishes one DC pool's CKF on its lane. Build it with NewRelay and run it with Run;
// the accessors are safe from any goroutine. A Relay runs once.
type Relay struct {
	cfg     RelayConfig
	codec   *schemas.Codec
	opts    streams.ClientOpts
	log     *zap.Logger
	metrics *relayMetrics
	format  ckf.FormatIdentity

	c        *relayLedger // RelayStats and the metrics they share (relay_metrics.go)
	identity atomic.Pointer[ckf.ProducerIdentity]
	// lastFailure is the last failed lane write (nil: none yet); Ready names it while the relay
	// recovers.
	lastFailure atomic.Pointer[writeFailure]
	started     chan struct{}
	done        chan struct{} // closed when Run returns
	inspect     chan inspectReq
	ran         atomic.Bool

	// hooks is noHooks in a relay NewRelay builds; tests build theirs with hooks that fail
	// lane writes or hold background commits (relay_export_test.go).
	hooks relayHooks
}

// relayHooks is the seam through which tests steer the relay's lane writes.
type relayHooks interface {
	// writeFault is called before each lane write ("deltas", "snapshot" or
	// "checkpoint"); a non-nil error stands in for the write's failure.
	writeFault(what string) error
	// commitGate, when non-nil, is called on a goroutine of its own once a lane transaction
	// committed in the background (commitDeltasAsync) has finished, before the loop learns its
	// outcome: a test holds it to see what the loop does while a commit is in flight.
	commitGate() func()
	// mirrorGate, when non-nil, is called by the watch for missing mirrored control topics
	// before each time it asks whether they exist (relay_mirrored.go): a test holds it while it
	// creates a copy and writes to it.
	mirrorGate() func()
}

// noHooks is a production relay's relayHooks: no fault, no gate.
type noHooks struct{}

func (noHooks) writeFault(string) error { return nil }
func (noHooks) commitGate() func()      { return nil }
func (noHooks) mirrorGate() func()      { return nil }

type inspectReq struct {
	fn   func(*producer.DcState, *producer.Publisher)
	done chan struct{}
}

// NewRelay validates the configuration, taken as it is (an invalid field is a *ConfigError),
// derives the transactional id when it is empty, and builds the relay. Nothing connects or runs
// until Run.
func NewRelay(p RelayParams) (*Relay, error) {
	cfg := p.Config.withDerived()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if p.Codec == nil {
		return nil, errors.New("streams: relay needs a codec")
	}
	format, err := cfg.CKF.Format() // validate checked it
	if err != nil {
		return nil, err
	}
	log := p.Log
	if log == nil {
		log = zap.NewNop()
	}
	r := &Relay{
		cfg: cfg, codec: p.Codec, opts: streams.ClientOpts{Shared: append([]kgo.Opt(nil), p.ClientOpts...), PerRole: p.ClientOptsFor},
		log:     log.With(zap.Uint8("lane", cfg.Lane), zap.String("pool", cfg.Pool.String())),
		format:  format,
		started: make(chan struct{}), done: make(chan struct{}), inspect: make(chan inspectReq),
		hooks: noHooks{},
	}
	r.metrics = newRelayMetrics(p.Metrics)
	r.c = newRelayLedger(r.metrics)
	r.c.buckets.set(format.BucketCount)
	return r, nil
}

// Config returns the configuration the relay runs with: the one it was built with, its
// transactional id and lag group derived when they were empty. Incarnation stays as configured (0: derived at
// Run; Identity and Stats give the current one).
func (r *Relay) Config() RelayConfig { return r.cfg }

// Started is closed once the start-up replay has finished and the first snapshot of this
// incarnation is committed on the lane.
func (r *Relay) Started() <-chan struct{} { return r.started }

// Identity returns the current producer identity (it changes at a recovery); the zero identity
// before Run chose the first incarnation.
func (r *Relay) Identity() ckf.ProducerIdentity {
	if id := r.identity.Load(); id != nil {
		return *id
	}
	return ckf.ProducerIdentity{}
}

// Ready is the readiness check: nil once started, while Run runs and the stream is not fenced
// (a failed write fences it until the recovery snapshot of the next incarnation is committed).
func (r *Relay) Ready() error {
	select {
	case <-r.started:
	default:
		return errors.New("relay not started: replaying KV events or writing the start-up snapshot")
	}
	select {
	case <-r.done:
		return errors.New("relay stopped")
	default:
	}
	if r.c.fenced.load() {
		if f := r.lastFailure.Load(); f != nil {
			return fmt.Errorf("relay publication stopped, recovering under a new incarnation: last lane %s", f)
		}
		return errors.New("relay publication stopped: recovering under a new incarnation")
	}
	return nil
}

// Stats returns a snapshot of the counters.
func (r *Relay) Stats() RelayStats {
	c := r.c
	return RelayStats{
		Incarnation: c.incarnation.load(), LastSequence: c.lastSequence.load(),
		Started: c.started.load(), Fenced: c.fenced.load(),
		Events: c.events.load(), ReplayedEvents: c.replayed.load(), Rejected: c.rejected.Load(),
		Undecodable: c.undecodable.load(), DeadLetters: c.deadLetters.load(),
		CapacityOmissions: c.capacity.load(), UnknownRemovals: c.unknownRemovals.load(),
		Deltas: c.deltas.load(), Images: c.images.load(), SplitPublications: c.splits.load(), Transactions: c.txns.load(),
		Snapshots: c.snapshots.Load(), SnapshotRequests: c.requests.load(), Heartbeats: c.heartbeats.load(),
		Recoveries: c.rec.load(), FenceRecoveries: c.fenceRecoveries.load(),
		WriteTimeouts: c.writeFailures[causeTimeout].load(), Fences: c.writeFailures[causeFence].load(), WriteErrors: c.writeFailures[causeError].load(),
		LastWriteFailure: r.lastFailure.Load().text(), ResidentBlocks: c.resident.load(), BucketCount: c.buckets.load(),
		LastSnapshotMillis: c.snapMillis.load(),
		Checkpoints:        c.checkpoints.load(), LastCheckpoint: c.lastCheckpoint.load(), CheckpointBytes: c.checkpointBytes.load(),
		CheckpointsRejected: c.checkpointsRejected.load(), RestoredCheckpoint: c.restored.load(),
		CheckpointGaps: c.checkpointGaps.load(), LagCommits: c.lagCommits.load(),
		Sources: c.sources.load(), SilentSources: c.silentSources.load(),
		BlockSizes: c.blockSizes.load(), BlockSize: c.blockSize.load(),
		MirroredControlMissing: c.mirroredControlMissing.load(),
	}
}

// ErrRelayNotRunning is Inspect's error once Run has returned.
var ErrRelayNotRunning = errors.New("streams: relay is not running")

// Inspect runs fn on the relay's goroutine between two events, with the exact state and the
// publisher of the current incarnation. fn must only read them and must not keep them. Called
// before Run, it waits for the run loop. It returns ctx's error, or ErrRelayNotRunning when Run
// returned before fn ran.
func (r *Relay) Inspect(ctx context.Context, fn func(st *producer.DcState, pub *producer.Publisher)) error {
	req := inspectReq{fn: fn, done: make(chan struct{})}
	select {
	case r.inspect <- req:
	case <-ctx.Done():
		return ctx.Err()
	case <-r.done:
		return ErrRelayNotRunning
	}
	<-req.done
	return nil
}
