// Package bridge wires processor bridge into an fx application: the bridge of one engine worker
// (bridge.endpoint), or a bridge.Fleet of the engines bridge.engines_file lists, the bridge.*
// settings, a producer on topics.kv_events (and the dead-letter topic) shared by the engines, and
// the "bridge" readiness check. The bridges themselves are package bridge at the repository root.
//
// Lifecycle: Start schedules the bridge's Run on a goroutine and returns; the bridge reads the
// worker's records back (bridge.resume), opens its sockets and turns ready. Stop cancels it and
// waits, within fx's stop context, for the producer's flush. A bridge that stops on its own (a
// socket that cannot be opened, a failed read-back) shuts the application down with exit
// status 1 through fx.Shutdowner.
//
// Metrics: ckf_bridge_* (batches, events by kind, records by kind, gaps, replayed, duplicate
// and lost batches, engine restarts, undecodable and refused batches, dead letters, buffer
// full, sequence lag, produce latency, lost-history clears, degraded ranks).
package bridge

import (
	"context"
	"fmt"

	"github.com/ckf-stream/ckf-stream/app/config"
	"github.com/ckf-stream/ckf-stream/app/httpserver"
	"github.com/ckf-stream/ckf-stream/app/kafka"
	"github.com/ckf-stream/ckf-stream/app/lifecycle"
	"github.com/ckf-stream/ckf-stream/bridge"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/uber-go/tally/v4"
	"go.uber.org/fx"
	"go.uber.org/zap"
)

// Params are New's inputs.
type Params struct {
	fx.In

	Config     config.Bridge
	Connection *kafka.Connection
	Scope      tally.Scope   `optional:"true"`
	Logger     *zap.Logger   `optional:"true"`
	Shutdowner fx.Shutdowner `optional:"true"`
}

// Require checks what processor bridge needs beyond config.Config.Validate: the engine's
// endpoint. A missing field is a *config.FieldError (it matches config.ErrInvalid).
func Require(b config.Bridge) error {
	if b.Endpoint == "" {
		return &config.FieldError{Field: "bridge.endpoint",
			Reason: "is required by the bridge: the engine's kv-events PUB endpoint (tcp://engine-host:5557), or bridge.engines_file for many engines"}
	}
	return nil
}

// BridgeConfig converts the configuration sections to the bridge's configuration.
func BridgeConfig(b config.Bridge, topics config.Topics) (bridge.Config, error) {
	if err := Require(b); err != nil {
		return bridge.Config{}, err
	}
	lora, err := b.LoraMap()
	if err != nil {
		return bridge.Config{}, &config.FieldError{Field: "bridge.lora_names", Reason: err.Error()}
	}
	return bridge.Config{Endpoint: b.Endpoint, ReplayEndpoint: b.ReplayEndpoint, Topic: b.Topic, Bind: b.Bind,
		Ranks: b.Ranks, WorkerID: b.WorkerID, BlockSize: b.BlockSize, LoraNames: lora,
		KVTopic: topics.KVEvents, DeadLetterTopic: topics.DeadLetter, BufferBatches: b.BufferBatches,
		ReplayTimeout: b.ReplayTimeout, ReplayRetries: b.ReplayRetries, IdleRecheck: b.IdleRecheck, Resume: b.Resume,
		LostHistory: bridge.LostHistory(b.LostHistory)}, nil
}

// runner is what the component runs: the bridge of one engine, or a bridge.Fleet of many.
type runner interface {
	Run(context.Context) error
	Ready() error
}

// Bridge is the process's bridge component.
type Bridge struct {
	log        *zap.Logger
	shutdowner fx.Shutdowner
	b          runner
	prod       *kgo.Client
	run        *lifecycle.Group // runs b from Start to Stop
}

// New builds the bridge and its producer; nothing connects until Start.
func New(p Params) (*Bridge, error) {
	log := p.Logger
	if log == nil {
		log = zap.NewNop()
	}
	log = log.Named("bridge")
	cfgs, err := BridgeConfigs(p.Config, p.Connection.Topics)
	if err != nil {
		return nil, err
	}
	codec, err := kafka.NewCodec(p.Connection.Topics)
	if err != nil {
		return nil, fmt.Errorf("bridge: %w", err)
	}
	// The worker's records must land where ReadBack looks for them: the key's partition under
	// Kafka's murmur2, whatever franz-go's default partitioner becomes.
	prod, err := p.Connection.NewClient("bridge", kgo.RecordPartitioner(bridge.KeyPartitioner()))
	if err != nil {
		return nil, fmt.Errorf("bridge: %w", err)
	}
	var b runner
	if p.Config.EnginesFile == "" {
		b, err = bridge.New(bridge.Params{Config: cfgs[0], Codec: codec, Producer: prod,
			ConsumerOpts: p.Connection.Opts("bridge-resume"), Metrics: p.Scope, Log: log})
	} else {
		b, err = bridge.NewFleet(bridge.FleetParams{Configs: cfgs, Codec: codec, Producer: prod,
			ConsumerOpts: p.Connection.Opts("bridge-resume"), Metrics: p.Scope, Log: log})
	}
	if err != nil {
		prod.Close()
		return nil, err
	}
	for _, cfg := range cfgs {
		log.Info("bridge built", zap.String("endpoint", cfg.Endpoint), zap.String("replay_endpoint", cfg.ReplayEndpoint),
			zap.Uint64("worker_id", cfg.WorkerID), zap.Int("ranks", cfg.Ranks), zap.Bool("bind", cfg.Bind),
			zap.Int("block_size", cfg.BlockSize), zap.String("kv_events", cfg.KVTopic))
	}
	br := &Bridge{log: log, shutdowner: p.Shutdowner, b: b, prod: prod}
	br.run = &lifecycle.Group{Name: "bridge", Tasks: []lifecycle.Task{{Run: b.Run}}, OnExit: func(_ int, err error) {
		br.log.Error("bridge stopped", zap.Error(err))
		if br.shutdowner != nil {
			_ = br.shutdowner.Shutdown(fx.ExitCode(1))
		}
	}}
	return br, nil
}

// Start schedules the bridge's Run and returns at once.
func (br *Bridge) Start(ctx context.Context) error { return br.run.Start(ctx) }

// Stop cancels the bridge, waits for its flush within ctx and closes the producer.
func (br *Bridge) Stop(ctx context.Context) error {
	defer br.prod.Close()
	return br.run.Stop(ctx)
}

// Ready is the "bridge" readiness check.
func (br *Bridge) Ready(context.Context) error { return br.b.Ready() }

// Result is what Provide returns to the fx graph.
type Result struct {
	fx.Out

	Bridge *Bridge
	Check  httpserver.ReadinessCheck `group:"readiness"`
}

// Provide is Module's constructor: New, with Start and Stop appended to lc's hooks and the
// "bridge" readiness check.
func Provide(lc fx.Lifecycle, p Params) (Result, error) {
	br, err := New(p)
	if err != nil {
		return Result{}, err
	}
	lc.Append(fx.Hook{OnStart: br.Start, OnStop: br.Stop})
	return Result{Bridge: br, Check: httpserver.ReadinessCheck{Name: "bridge", Check: br.Ready}}, nil
}

// Module provides the *Bridge, runs it between start and stop, and adds the "bridge" readiness
// check.
var Module = fx.Module("bridge",
	fx.Provide(Provide),
	fx.Invoke(func(*Bridge) {}),
)
