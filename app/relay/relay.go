// Package relay wires one DC pool's relay (processor relay) into an fx application: the pool
// from config.Relay and the indexer domain of config.Indexer, the streamrelay.Relay that reads the
// DC's KV-events topic and publishes the pool's lane, and the "relay" readiness check.
//
// The relay's pool is (indexer.domain, relay.dc_id): a relay process needs indexer.domain (and
// indexer.domain_source) set to the domain its indexers serve. When indexer.lanes is set too,
// the relay refuses to start unless it maps relay.lane to relay.dc_id (a relay never writes a
// lane it does not own); in any case it checks the lane's snapshot index at start.
//
// Lifecycle: Start schedules the relay's Run on a goroutine and returns; the relay replays the
// retained KV events, writes its start-up snapshot and goes live (readiness turns ok then).
// Stop cancels it and waits, within fx's stop context, for the graceful stop: the last delta and
// a drain marker, committed. A relay that stops on its own (fenced by a newer instance of its
// pool, lane not owned, producer invariant violated) shuts the application down with exit status
// 1 through fx.Shutdowner.
//
// Metrics: streamrelay.Relay reports under ckf_relay_* (events, capacity omissions, unknown
// removals, deltas and images published, snapshots by reason, snapshot duration histogram,
// filter occupancy, dead letters, transactions, heartbeats, recoveries, fenced, started).
package relay

import (
	"context"
	"fmt"

	"github.com/ckf-stream/ckf-stream/app/config"
	"github.com/ckf-stream/ckf-stream/app/httpserver"
	"github.com/ckf-stream/ckf-stream/app/kafka"
	"github.com/ckf-stream/ckf-stream/app/lifecycle"
	"github.com/ckf-stream/ckf-stream/ckf"
	streamrelay "github.com/ckf-stream/ckf-stream/streams/relay"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/uber-go/tally/v4"
	"go.uber.org/fx"
	"go.uber.org/zap"
)

// Params are New's inputs.
type Params struct {
	fx.In

	Config config.Relay
	// Indexer supplies the pool's indexer domain (indexer.domain, indexer.domain_source) and,
	// when set, the deployment's lane map (indexer.lanes) for the ownership check.
	Indexer    config.Indexer
	Kafka      config.Kafka
	Connection *kafka.Connection
	Scope      tally.Scope   `optional:"true"`
	Logger     *zap.Logger   `optional:"true"`
	Shutdowner fx.Shutdowner `optional:"true"`
}

// Require checks what processor relay needs beyond config.Config.Validate: the indexer domain
// of its pool. A missing field is a *config.FieldError (it matches config.ErrInvalid).
func Require(ix config.Indexer) error {
	if ix.Domain == "" {
		return &config.FieldError{Field: "indexer.domain",
			Reason: "is required by the relay: its pool is (indexer.domain, relay.dc_id) (<32 hex digits>:<32 hex digits>)"}
	}
	return nil
}

// StreamsConfig converts the configuration sections to the relay's streams configuration:
// the section's settings on streams' defaults (config.Relay.StreamsSettings) with the pool
// (domain of ix, relay.dc_id), the lane map of ix as LaneOwners and the topic names of the
// configuration. The rules are the library's (streamrelay.CheckLane, CheckSettings,
// CheckLaneOwners); errors are *config.FieldError naming the field, and a lane that
// indexer.lanes does not map to relay.dc_id also matches streamrelay.ErrLaneNotOwned.
func StreamsConfig(rc config.Relay, ix config.Indexer, topics config.Topics) (streamrelay.RelayConfig, error) {
	if err := Require(ix); err != nil {
		return streamrelay.RelayConfig{}, err
	}
	domain, err := ix.DomainID()
	if err != nil {
		return streamrelay.RelayConfig{}, err
	}
	if err := streamrelay.CheckLane(rc.Lane); err != nil {
		return streamrelay.RelayConfig{}, &config.FieldError{Field: "relay.lane", Reason: err.Error()}
	}
	owners, err := ix.LaneOwners()
	if err != nil {
		return streamrelay.RelayConfig{}, err
	}
	cfg := rc.StreamsSettings()
	cfg.Topics = streamrelay.RelayTopics{
		KVEvents: topics.KVEvents, Lanes: topics.Lanes, SnapshotIndex: topics.SnapshotIndex,
		Control: topics.Control, DeadLetter: topics.DeadLetter,
		// The indexers of other regions ask on their own control topics, mirrored here (design §8).
		MirroredControl: rc.MirroredControl(topics),
	}
	if rc.CheckpointInterval > 0 || rc.CheckpointEveryEvents > 0 {
		cfg.Topics.Checkpoints = topics.RelayCheckpoints
	}
	cfg.Pool = ckf.PoolID{Domain: domain, Dc: ckf.DcID(rc.DcID)}
	cfg.Lane = uint8(rc.Lane)
	cfg.LaneOwners = owners
	if err := cfg.CheckLaneOwners(); err != nil {
		return streamrelay.RelayConfig{}, &config.FieldError{Field: "relay.lane",
			Reason: fmt.Sprintf("lane %d and relay.dc_id %#x disagree with indexer.lanes (%v): a relay never writes a lane its pool does not own (%v)", rc.Lane, rc.DcID, ix.Lanes, err),
			Err:    err}
	}
	return cfg, nil
}

// Relay is the process's relay component. Build it with New, then Start and Stop it (Module
// does both with fx).
type Relay struct {
	log        *zap.Logger
	shutdowner fx.Shutdowner
	r          *streamrelay.Relay
	run        *lifecycle.Group // runs r from Start to Stop
}

// New builds the relay from the configuration. Nothing connects until Start. Configuration
// errors are *config.FieldError; a lane that the configured lane map gives to another pool is
// streamrelay.ErrLaneNotOwned.
func New(p Params) (*Relay, error) {
	log := p.Logger
	if log == nil {
		log = zap.NewNop()
	}
	log = log.Named("relay")
	cfg, err := StreamsConfig(p.Config, p.Indexer, p.Connection.Topics)
	if err != nil {
		return nil, err
	}
	codec, err := p.Connection.Codec()
	if err != nil {
		return nil, fmt.Errorf("relay: %w", err)
	}
	// One option set per client (input, outputs, the lane producer of each incarnation, the
	// snapshot index reader): each gets its own kprom collectors, labelled client=<role>.
	r, err := streamrelay.NewRelay(streamrelay.RelayParams{Config: cfg, Codec: codec,
		ClientOptsFor: func(role string) []kgo.Opt { return p.Connection.Opts(role) }, Metrics: p.Scope, Log: log})
	if err != nil {
		return nil, fmt.Errorf("relay: %w", err)
	}
	eff := r.Config()
	log.Info("relay built", zap.String("pool", cfg.Pool.String()), zap.Uint8("lane", cfg.Lane),
		zap.Uint64("expected_blocks", cfg.CKF.ExpectedBlocksPerDC), zap.String("transactional_id", eff.TransactionalID),
		zap.String("kv_events", cfg.Topics.KVEvents), zap.String("lanes", cfg.Topics.Lanes))
	rl := &Relay{log: log, shutdowner: p.Shutdowner, r: r}
	rl.run = &lifecycle.Group{Name: "relay", Tasks: []lifecycle.Task{{Run: r.Run}}, OnExit: func(_ int, err error) {
		rl.log.Error("relay stopped", zap.Error(err))
		if rl.shutdowner != nil {
			_ = rl.shutdowner.Shutdown(fx.ExitCode(1))
		}
	}}
	return rl, nil
}

// Streams returns the underlying relay (stats, identity, inspection).
func (rl *Relay) Streams() *streamrelay.Relay { return rl.r }

// Start schedules the relay's Run and returns at once (the replay can take long; readiness
// reports it).
func (rl *Relay) Start(ctx context.Context) error { return rl.run.Start(ctx) }

// Stop cancels the relay and waits for its graceful stop (last delta and drain marker
// committed) within ctx. It returns Run's error, or ctx's when ctx ends first.
func (rl *Relay) Stop(ctx context.Context) error {
	if err := rl.run.Stop(ctx); err != nil {
		return err
	}
	if rl.run.Started() {
		rl.log.Info("relay stopped", zap.Uint64("incarnation", rl.r.Stats().Incarnation))
	}
	return nil
}

// Ready is the "relay" readiness check: the start-up snapshot is committed and the relay is
// not fenced (publication stopped after a failed write, until its recovery snapshot).
func (rl *Relay) Ready(context.Context) error { return rl.r.Ready() }

// Result is what Provide returns to the fx graph.
type Result struct {
	fx.Out

	Relay *Relay
	Check httpserver.ReadinessCheck `group:"readiness"`
}

// Provide is Module's constructor: New, with Start and Stop appended to lc's hooks and the
// "relay" readiness check.
func Provide(lc fx.Lifecycle, p Params) (Result, error) {
	rl, err := New(p)
	if err != nil {
		return Result{}, err
	}
	lc.Append(fx.Hook{OnStart: rl.Start, OnStop: rl.Stop})
	return Result{Relay: rl, Check: httpserver.ReadinessCheck{Name: "relay", Check: rl.Ready}}, nil
}

// Module provides the *Relay, runs it between start and stop, and adds the "relay" readiness
// check.
var Module = fx.Module("relay",
	fx.Provide(Provide),
	fx.Invoke(func(*Relay) {}),
)
