package bridge

import (
	"context"
	"fmt"
	"strconv"
	"sync"

	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/uber-go/tally/v4"
	"go.uber.org/zap"
)

// FleetParams are NewFleet's inputs: one Config per engine, and what the engines share.
type FleetParams struct {
	Configs []Config
	Codec   *schemas.Codec
	// Producer writes every engine's records; the fleet does not close it.
	Producer     *kgo.Client
	ConsumerOpts []kgo.Opt
	Metrics      tally.Scope
	Log          *zap.Logger
}

// Fleet runs the bridges of many engines in one process. Each engine keeps everything a
// bridge of its own would have (its sockets per rank, its order, gap fill, restart detection,
// converter and read-back); the engines share one producer, codec, metrics scope and log. The
// counters of the ckf_bridge_* metrics add up over the engines; the gauges (buffered batches,
// sequence lag, degraded ranks) carry the engine's worker id as the tag "worker".
//
// Failure behaviour: an engine whose bridge stops on its own (a record Kafka refused, a failed
// read-back) stops the whole fleet, as it would stop a process of one bridge: the restart
// resumes every engine from Kafka, and no engine's records are lost meanwhile (the engines'
// replay buffers hold what was not written).
type Fleet struct {
	bridges []*Bridge
	log     *zap.Logger
	// resume: read the engines' records back (every Config.Resume set, and consumer options).
	resume bool
	copts  []kgo.Opt
	codec  *schemas.Codec
}

// EngineError is a configuration error of one engine of a fleet: its place in the list, its
// worker id and the error (a *ConfigError). It matches ErrConfig.
type EngineError struct {
	Index    int
	WorkerID uint64
	Err      error
}

func (e *EngineError) Error() string {
	return fmt.Sprintf("engine %d (worker %d): %v", e.Index, e.WorkerID, e.Err)
}

func (e *EngineError) Unwrap() error { return e.Err }

// CheckFleet reports the first rule the engines' configurations break, as NewFleet does,
// without building anything: an engine's own rule (an *EngineError), or two engines that share
// a worker id or an endpoint of any rank, or write different topics (a *ConfigError).
func CheckFleet(cfgs []Config) error {
	if len(cfgs) == 0 {
		return &ConfigError{Reason: "no engine"}
	}
	workers := map[uint64]int{}
	endpoints := map[string]int{}
	for i, c := range cfgs {
		if j, dup := workers[c.WorkerID]; dup {
			return &ConfigError{Field: "worker_id", Reason: fmt.Sprintf("engines %d and %d have the same worker id %d", j, i, c.WorkerID)}
		}
		workers[c.WorkerID] = i
		if err := c.Check(); err != nil {
			return &EngineError{Index: i, WorkerID: c.WorkerID, Err: err}
		}
		cfg := c
		for r := 0; r < cfg.Ranks; r++ {
			for _, base := range []string{cfg.Endpoint, cfg.ReplayEndpoint} {
				// Check has seen to it that an engine's own endpoints are distinct.
				if ep, _ := RankEndpoint(base, r); ep != "" {
					if j, dup := endpoints[ep]; dup && j != i {
						return &ConfigError{Field: "endpoint", Reason: fmt.Sprintf("engines %d and %d both use %s", j, i, ep)}
					}
					endpoints[ep] = i
				}
			}
		}
		if cfg.KVTopic != cfgs[0].KVTopic {
			return &ConfigError{Reason: fmt.Sprintf("engines 0 and %d write different topics (%s, %s)", i, cfgs[0].KVTopic, cfg.KVTopic)}
		}
	}
	return nil
}

// NewFleet checks the engines' configurations (CheckFleet) and builds their bridges; nothing
// connects until Run.
func NewFleet(p FleetParams) (*Fleet, error) {
	if err := CheckFleet(p.Configs); err != nil {
		return nil, err
	}
	log := p.Log
	if log == nil {
		log = zap.NewNop()
	}
	f := &Fleet{log: log, resume: p.ConsumerOpts != nil, copts: p.ConsumerOpts, codec: p.Codec}
	for i, c := range p.Configs {
		worker := strconv.FormatUint(c.WorkerID, 10)
		b, err := newBridge(Params{Config: c, Codec: p.Codec, Producer: p.Producer, ConsumerOpts: p.ConsumerOpts,
			Metrics: p.Metrics, Log: log.With(zap.Uint64("worker_id", c.WorkerID))}, worker)
		if err != nil {
			return nil, &EngineError{Index: i, WorkerID: c.WorkerID, Err: err}
		}
		f.resume = f.resume && b.cfg.Resume
		f.bridges = append(f.bridges, b)
	}
	return f, nil
}

// Bridges returns the engines' bridges, in the order of the configurations.
func (f *Fleet) Bridges() []*Bridge { return f.bridges }

// Ready reports whether every engine's bridge is ready, naming the first that is not.
func (f *Fleet) Ready() error {
	for _, b := range f.bridges {
		if err := b.Ready(); err != nil {
			return fmt.Errorf("engine of worker %d: %w", b.cfg.WorkerID, err)
		}
	}
	return nil
}

// Run reads every engine's records back in one pass over the KV-events topic (ReadBackWorkers;
// when the engines resume), then runs every engine's bridge until ctx ends or one of them stops
// on its own; then it stops the others and returns ctx's error or the first bridge's error.
func (f *Fleet) Run(parent context.Context) error {
	convs := map[uint64]*Converter{}
	for _, b := range f.bridges {
		convs[b.cfg.WorkerID] = b.newConverter()
	}
	resumes := map[uint64]map[uint32]*Resume{}
	if f.resume {
		topic := f.bridges[0].cfg.KVTopic
		var err error
		if resumes, err = ReadBackWorkers(parent, f.copts, f.codec, topic, convs); err != nil {
			return fmt.Errorf("bridge: resuming %d engines from %s: %w", len(f.bridges), topic, err)
		}
	}
	ctx, cancel := context.WithCancel(parent)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, len(f.bridges))
	for _, b := range f.bridges {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rs := resumes[b.cfg.WorkerID]
			if rs == nil {
				rs = map[uint32]*Resume{}
			}
			err := b.run(ctx, convs[b.cfg.WorkerID], rs)
			if err != nil && ctx.Err() == nil {
				errs <- fmt.Errorf("engine of worker %d: %w", b.cfg.WorkerID, err)
				cancel()
			}
		}()
	}
	wg.Wait()
	select {
	case err := <-errs:
		return err
	default:
	}
	return parent.Err()
}
