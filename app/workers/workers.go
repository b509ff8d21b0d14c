// Package workers wires one replica of a DC's worker stage (processor workers) into an fx
// application: the streams/workers.Replica of config.Workers on the DC's KV-events topic
// (topics.kv_events), its checkpoint topic (created at start when kafka.create_topics), the
// routes POST /v1/worker-matches (workerapi) and GET /v1/workers, and the "workers" readiness
// check (ready once the replica has read its topic up to the end offsets listed at start).
//
// Lifecycle: Start creates the checkpoint topic if needed and schedules the replica's Run;
// Stop cancels it and waits within fx's stop context. A replica that stops on its own shuts the
// application down with exit status 1 through fx.Shutdowner.
//
// Metrics: ckf_workers_* (docs/metrics.md), and the route's ckf_workers_http_* figures.
package workers

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/ckf-stream/ckf-stream/app/config"
	"github.com/ckf-stream/ckf-stream/app/httpserver"
	"github.com/ckf-stream/ckf-stream/app/kafka"
	"github.com/ckf-stream/ckf-stream/app/lifecycle"
	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/streams"
	"github.com/ckf-stream/ckf-stream/streams/query"
	streamworkers "github.com/ckf-stream/ckf-stream/streams/workers"
	"github.com/ckf-stream/ckf-stream/workerapi"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/uber-go/tally/v4"
	"go.uber.org/fx"
	"go.uber.org/zap"
)

// CheckpointPartitions is the checkpoint topic's partition count when the process creates it:
// a DC's checkpoints live on one partition, chosen by its key.
const CheckpointPartitions = 16

// Params are New's inputs.
type Params struct {
	fx.In

	Config     config.Workers
	Kafka      config.Kafka
	Connection *kafka.Connection
	Scope      tally.Scope   `optional:"true"`
	Logger     *zap.Logger   `optional:"true"`
	Shutdowner fx.Shutdowner `optional:"true"`
}

// StreamsConfig converts the sections to the library's configuration: the section's settings,
// the DC, the KV, checkpoint and dead-letter topics. The rules are the library's; errors are
// *config.FieldError.
func StreamsConfig(w config.Workers, topics config.Topics) (streamworkers.Config, error) {
	cfg := w.StreamsSettings()
	cfg.DC = ckf.DcID(w.DcID)
	cfg.Topics = streamworkers.Topics{KVEvents: topics.KVEvents, Checkpoints: w.CheckpointTopic, DeadLetter: topics.DeadLetter}
	if err := cfg.Validate(); err != nil {
		var ce *streams.ConfigError
		if errors.As(err, &ce) {
			field := config.WorkersSettingPath(ce.Field)
			switch ce.Field {
			case "Topics.KVEvents":
				field = "topics.kv_events"
			case "Topics.Checkpoints":
				field = "workers.checkpoint_topic"
			}
			return cfg, &config.FieldError{Field: field, Reason: ce.Reason, Err: err}
		}
		return cfg, err
	}
	return cfg, nil
}

// Workers is the process's worker-stage replica.
type Workers struct {
	log        *zap.Logger
	conn       *kafka.Connection
	create     bool
	r          *streamworkers.Replica
	run        *lifecycle.Group
	shutdowner fx.Shutdowner
	api        *API
	qs         *query.QueryService
}

// New builds the replica; nothing connects until Start.
func New(p Params) (*Workers, error) {
	log := p.Logger
	if log == nil {
		log = zap.NewNop()
	}
	log = log.Named("workers")
	cfg, err := StreamsConfig(p.Config, p.Connection.Topics)
	if err != nil {
		return nil, err
	}
	codec, err := p.Connection.Codec()
	if err != nil {
		return nil, fmt.Errorf("workers: %w", err)
	}
	r, err := streamworkers.New(streamworkers.Params{Config: cfg, Codec: codec,
		ClientOptsFor: func(role string) []kgo.Opt { return p.Connection.Opts(role) }, Metrics: p.Scope, Log: log})
	if err != nil {
		return nil, fmt.Errorf("workers: %w", err)
	}
	eff := r.Config()
	log.Info("worker stage built", zap.String("dc", eff.DC.String()), zap.String("kv_events", eff.Topics.KVEvents),
		zap.String("checkpoints", eff.Topics.Checkpoints), zap.String("lag_group", eff.LagGroup))
	w := &Workers{log: log, conn: p.Connection, create: p.Kafka.CreateTopics, r: r, shutdowner: p.Shutdowner, api: NewAPI(r, p.Scope)}
	qcfg := streamworkers.DefaultQueryConfig(eff.DC, codec)
	qcfg.RequestTopic, qcfg.ReplyTopic, qcfg.DeadLetterTopic = p.Connection.Topics.WorkerQueries, p.Connection.Topics.WorkerQueryReplies, p.Connection.Topics.DeadLetter
	qcfg.ReplyTopicPrefixes = p.Config.ReplyTopicPrefixes
	w.qs, err = streamworkers.NewQueryService(streamworkers.QueryServiceParams{DC: eff.DC, Config: qcfg, Answer: w.api.AnswerKafka, Codec: codec,
		ClientOpts: p.Connection.QueryOpts("workers-queries"), Metrics: p.Scope, Log: log})
	if err != nil {
		return nil, fmt.Errorf("workers: %w", err)
	}
	w.run = &lifecycle.Group{Name: "workers", Tasks: []lifecycle.Task{{Run: r.Run}, {Name: "query service", Run: w.serveQueries}}, OnExit: func(_ int, err error) {
		w.log.Error("worker stage stopped", zap.Error(err))
		if w.shutdowner != nil {
			_ = w.shutdowner.Shutdown(fx.ExitCode(1))
		}
	}}
	return w, nil
}

// serveQueries runs the Kafka query service once the replica is ready: a replica joins its DC's
// query group only when it can answer, so a restarting one takes no partitions from a ready one
// to answer UNAVAILABLE on them (the indexer's query service joins the same way).
func (w *Workers) serveQueries(ctx context.Context) error {
	select {
	case <-w.r.WaitReady():
	case <-ctx.Done():
		return nil
	}
	w.log.Info("worker stage ready: joining the query group", zap.String("group", w.qs.Config().Group),
		zap.String("requests", w.qs.Config().RequestTopic))
	return w.qs.Run(ctx)
}

// Replica returns the read model.
func (w *Workers) Replica() *streamworkers.Replica { return w.r }

// API returns the HTTP handlers.
func (w *Workers) API() *API { return w.api }

// Start creates the checkpoint topic when kafka.create_topics is set and it does not exist
// (compacted, CheckpointPartitions partitions, replicated as the other topics), and the worker
// query topics of the layout (app/kafka.TopicLayout), then schedules the replica's Run and its
// query service's.
func (w *Workers) Start(ctx context.Context) error {
	if t := w.r.Config().Topics.Checkpoints; t != "" && w.create {
		cl, err := w.conn.NewClient("workers-topics")
		if err != nil {
			return err
		}
		defer cl.Close()
		adm := kadm.NewClient(cl)
		factor, minInsync, err := kafka.ReplicationFor(ctx, adm, w.conn.Replication())
		if err != nil {
			return err
		}
		configs := kafka.WithMinInsync(map[string]*string{"cleanup.policy": kadm.StringPtr("compact"),
			"segment.ms": kadm.StringPtr(strconv.Itoa(3_600_000))}, minInsync)
		resp, err := adm.CreateTopic(ctx, CheckpointPartitions, factor, configs, t)
		if err == nil {
			err = resp.Err
		}
		if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
			return fmt.Errorf("workers: create topic %s: %w", t, err)
		}
		qcfg := w.qs.Config()
		for _, spec := range kafka.TopicLayout(w.conn.Topics) {
			if spec.Name != qcfg.RequestTopic && spec.Name != qcfg.ReplyTopic {
				continue
			}
			resp, err := adm.CreateTopic(ctx, spec.Partitions, factor, kafka.WithMinInsync(spec.Configs, minInsync), spec.Name)
			if err == nil {
				err = resp.Err
			}
			if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
				return fmt.Errorf("workers: create topic %s: %w", spec.Name, err)
			}
		}
	}
	return w.run.Start(ctx)
}

// Stop cancels the replica and waits for it within ctx.
func (w *Workers) Stop(ctx context.Context) error { return w.run.Stop(ctx) }

// Ready is the "workers" readiness check.
func (w *Workers) Ready(context.Context) error { return w.r.Ready() }

// Result is what Provide returns to the fx graph.
type Result struct {
	fx.Out

	Workers *Workers
	Check   httpserver.ReadinessCheck `group:"readiness"`
	Match   httpserver.Route          `group:"routes"`
	Status  httpserver.Route          `group:"routes"`
}

// Provide is Module's constructor.
func Provide(lc fx.Lifecycle, p Params) (Result, error) {
	w, err := New(p)
	if err != nil {
		return Result{}, err
	}
	lc.Append(fx.Hook{OnStart: w.Start, OnStop: w.Stop})
	return Result{Workers: w, Check: httpserver.ReadinessCheck{Name: "workers", Check: w.Ready},
		Match:  httpserver.Route{Pattern: "POST " + workerapi.Path, Handler: w.api.MatchHandler()},
		Status: httpserver.Route{Pattern: "GET " + workerapi.StatusPath, Handler: w.api.StatusHandler()}}, nil
}

// Module provides the *Workers, runs it between start and stop, serves its routes and adds the
// "workers" readiness check.
var Module = fx.Module("workers",
	fx.Provide(Provide),
	fx.Invoke(func(*Workers) {}),
)
