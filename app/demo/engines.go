package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/ckf-stream/ckf-stream/app/kafka"
	"github.com/ckf-stream/ckf-stream/app/lifecycle"
	"github.com/ckf-stream/ckf-stream/bridge"
	"github.com/ckf-stream/ckf-stream/bridge/engineemu"
	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/ckf-stream/ckf-stream/streams/query"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/uber-go/tally/v4"
	"go.uber.org/fx"
	"go.uber.org/zap"
)

// engineWorkerBase is the first worker id of the built-in engines; loadgen's workers are
// (DC index+1)<<16 | (worker+1), so the two never share an id (and so a Kafka key).
const engineWorkerBase = 0xe000_0000

// demoEngine is one built-in engine emulator (bridge/engineemu: vLLM's ZeroMQ wire protocol on
// loopback ports the system picks, so one rank each) and the bridge that turns its batches into KvEvents on its DC's topic, the path
// a real vLLM or SGLang engine takes (processor bridge).
type demoEngine struct {
	dc     uint64
	worker uint64
	engine *engineemu.Engine
	bridge *bridge.Bridge
	prod   *kgo.Client
}

// wireEngines builds Options.Engines engines and bridges per DC (none by default). Their
// sockets are open from here on; the bridges run from the application's start, the engines
// publish while the load runs (runEngines).
func (d *demo) wireEngines(lc fx.Lifecycle, conn *kafka.Connection, scope tally.Scope, log *zap.Logger) error {
	if d.opts.Engines == 0 {
		return nil
	}
	blockSize := d.cfg.Bridge.BlockSize
	for di, r := range d.relays {
		for i := range d.opts.Engines {
			worker := uint64(engineWorkerBase | di<<8 | i)
			e, err := engineemu.New(engineemu.Endpoint("tcp://127.0.0.1:0"), engineemu.ReplayEndpoint("tcp://127.0.0.1:0"),
				engineemu.Mode(engineemu.PubBind), engineemu.Ranks(1), engineemu.BlockSize(blockSize),
				engineemu.Seed(d.opts.Load.Workload.Seed+worker), engineemu.Hybrid(true))
			if err != nil {
				return fmt.Errorf("demo: engine %d of DC %#x: %w", i, r.Dc, err)
			}
			de := &demoEngine{dc: r.Dc, worker: worker, engine: e}
			d.engines = append(d.engines, de)
			pub, replay := e.Endpoints(0)
			prod, err := conn.NewClient(fmt.Sprintf("demo-bridge-%x", worker), kgo.RecordPartitioner(bridge.KeyPartitioner()))
			if err != nil {
				return err
			}
			de.prod = prod
			cfg := bridge.DefaultConfig()
			cfg.Endpoint, cfg.ReplayEndpoint, cfg.WorkerID, cfg.BlockSize = pub, replay, worker, blockSize
			cfg.KVTopic, cfg.DeadLetterTopic, cfg.IdleRecheck = d.kvTopic(r.Dc), conn.Topics.DeadLetter, time.Second
			b, err := bridge.New(bridge.Params{
				Config: cfg,
				Codec:  d.codec, Producer: prod,
				Metrics: scope.Tagged(map[string]string{"dc": fmt.Sprintf("%016x", r.Dc)}),
				Log:     log.Named("bridge").With(zap.Uint64("worker_id", worker)),
			})
			if err != nil {
				return fmt.Errorf("demo: bridge of engine %d of DC %#x: %w", i, r.Dc, err)
			}
			de.bridge = b
		}
	}
	g := &lifecycle.Group{Name: "demo", OnExit: func(i int, err error) {
		if err != nil {
			d.log.Error("bridge stopped", zap.Uint64("worker_id", d.engines[i].worker), zap.Error(err))
			_ = d.sd.Shutdown(fx.ExitCode(exitFailure))
		}
	}}
	for _, de := range d.engines {
		g.Tasks = append(g.Tasks, lifecycle.Task{Name: fmt.Sprintf("bridge %#x", de.worker), Waiting: "the bridges", Run: de.bridge.Run})
	}
	lc.Append(fx.Hook{
		OnStart: g.Start,
		OnStop: func(ctx context.Context) error {
			err := g.Stop(ctx)
			for _, de := range d.engines {
				_ = de.engine.Close()
				de.prod.Close()
			}
			return err
		},
	})
	return nil
}

// runEngines waits until every bridge subscribed to its engine, then publishes
// Options.EngineRate batches per second on each engine until ctx ends. It returns at once when
// there are no engines.
func (d *demo) runEngines(ctx context.Context) (wait func() error, err error) {
	if len(d.engines) == 0 {
		return func() error { return nil }, nil
	}
	deadline := time.Now().Add(d.opts.ReadyTimeout)
	for _, de := range d.engines {
		for !de.engine.Subscribed(0) || de.bridge.Ready() != nil {
			if time.Now().After(deadline) {
				return nil, fmt.Errorf("the bridge of engine %#x did not subscribe within %v", de.worker, d.opts.ReadyTimeout)
			}
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	errs := make(chan error, len(d.engines))
	for _, de := range d.engines {
		go func() { errs <- de.engine.Run(ctx, d.opts.EngineRate) }()
	}
	fmt.Fprintf(d.out, "engines: %d built-in engines (vLLM wire protocol, %d per DC) publish %.0f batches/s each through their bridges\n",
		len(d.engines), d.opts.Engines, d.opts.EngineRate)
	return func() error {
		var all []error
		for range d.engines {
			all = append(all, <-errs)
		}
		return errors.Join(all...)
	}, nil
}

// engineCheck is the closing check of the built-in engines: every chain resident in an engine's
// exact model is asked for by token ids; the answer for its DC must be at least its length.
type engineCheck struct {
	batches, events int64
	chains          int
	full, short     int
	firstShort      string
}

// checkEngines waits (at most 10 s) until no resident chain of any engine is answered short,
// and returns the last comparison.
func (d *demo) checkEngines(ctx context.Context) engineCheck {
	var c engineCheck
	deadline := time.Now().Add(10 * time.Second)
	for {
		c = d.compareEngines()
		if c.short == 0 || time.Now().After(deadline) || ctx.Err() != nil {
			return c
		}
		time.Sleep(50 * time.Millisecond) // polling the index while the bridges catch up
	}
}

func (d *demo) compareEngines() engineCheck {
	var c engineCheck
	ans := d.ix.Answerer()
	laneOf := map[uint64]uint8{}
	for _, r := range d.relays {
		laneOf[r.Dc] = r.Lane
	}
	blockSize := d.cfg.Bridge.BlockSize
	for _, de := range d.engines {
		m := de.engine.Model()
		c.batches += m.Stats.Batches
		c.events += m.Stats.PublishedEvents
		for _, rank := range m.Ranks {
			for _, ch := range rank.Resident {
				c.chains++
				req := &schemas.QueryRequest{CorrelationID: "demo-engine", Input: schemas.InputTokenIDs,
					Tokens: packTokens(ch.Tokens), BlockSize: uint32(blockSize), LoraName: ch.LoRAName,
					LaneMask64: schemas.Some(uint64(1) << laneOf[de.dc])}
				reply := ans.Answer(req, &query.QueryScratch{})
				depth := -1
				for _, l := range reply.Lanes {
					if l.Lane == laneOf[de.dc] {
						depth = int(l.Depth)
					}
				}
				if depth >= ch.Blocks {
					c.full++
				} else {
					c.short++
					if c.firstShort == "" {
						c.firstShort = fmt.Sprintf("a %d-block chain of engine %#x answered %d (%s)", ch.Blocks, de.worker, depth, reply.Status)
					}
				}
			}
		}
	}
	return c
}

func packTokens(ts []uint32) schemas.PackedU32 {
	out := make(schemas.PackedU32, 0, len(ts)*schemas.TokenSize)
	for _, t := range ts {
		out = append(out, byte(t), byte(t>>8), byte(t>>16), byte(t>>24))
	}
	return out
}

func printEngineCheck(out io.Writer, c engineCheck, engines int, secs float64) {
	fmt.Fprintf(out, "  built-in engines:            %d engines, %d batches (%d events, %.0f/s) through their bridges\n",
		engines, c.batches, c.events, float64(c.events)/secs)
	fmt.Fprintf(out, "  engine chains answered:      %d of %d resident chains at full depth; false negatives: %d\n",
		c.full, c.chains, c.short)
	if c.firstShort != "" {
		fmt.Fprintf(out, "  first false negative:        %s\n", c.firstShort)
	}
}
