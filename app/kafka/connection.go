// Package kafka is the process's connection to Kafka: the cluster (configured, or embedded when
// none is), the client options every component builds its clients from (seed brokers, client.id,
// TLS, SASL, metrics hooks, logger), the product's topic layout, ensured at start, and the codec
// of the product's records on those topics (OpenCodec, Connection.Codec), with the built-in schema
// ids or a schema registry's.
//
// The package hands out options, not clients: each component builds and closes its own
// kgo.Client (a lane consumer, a transactional producer and a query group member want different
// options and lifetimes), named by its role for logs and metrics:
//
//	cl, err := conn.NewClient("lanes", kgo.ConsumePartitions(assign), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
package kafka

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ckf-stream/ckf-stream/app/config"
	"github.com/ckf-stream/ckf-stream/app/metrics"
	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/fx"
	"go.uber.org/zap"
)

// ErrTopicsNotReady is the readiness error until Start has ensured the topic layout.
var ErrTopicsNotReady = errors.New("kafka: topic layout not ensured yet")

// Params are New's inputs.
type Params struct {
	fx.In

	Config config.Kafka
	Topics config.Topics
	// Registry is the schema registry of Codec; the zero value (no URLs) means built-in ids.
	Registry config.SchemaRegistry `optional:"true"`
	Logger   *zap.Logger           `optional:"true"`
	// Hooks, when set, adds kprom metrics to every client built from the connection.
	Hooks *metrics.KafkaHooks `optional:"true"`
	// Indexer and Relay give the lane count the lane topic's partitions follow (consumer §16):
	// one per lane of indexer.lanes and relay.lane, at least 16. Absent: 16.
	Indexer config.Indexer `optional:"true"`
	Relay   config.Relay   `optional:"true"`
}

// Connection is the process's Kafka connection: the cluster, the shared client options, and
// an admin client for the topic layout and readiness.
type Connection struct {
	// Cluster is the cluster in use; Cluster.Embedded is true for the in-process broker.
	Cluster *Cluster
	// Topics are the effective topic names.
	Topics config.Topics
	// Registry is the schema registry the codec registers with (none when it has no URLs).
	Registry config.SchemaRegistry

	cfg         config.Kafka
	base        []kgo.Opt
	hooks       *metrics.KafkaHooks
	log         *zap.Logger
	admin       *kgo.Client
	topicsReady atomic.Bool
	// lanePartitions is the lane topic's partition count (TopicLayoutLanes).
	lanePartitions int
	closeOnce      sync.Once
	// logs is shared by the loggers of every client built from the connection (Opts): Close
	// shuts it, so that no franz-go goroutine still winding down writes to the process's log
	// once the connection is closed.
	logs *logGate

	codecMu sync.Mutex
	codec   *schemas.Codec
}

// New opens the cluster (starting the embedded broker when none is configured) and builds the
// shared options and the admin client. It does no network I/O with a configured cluster; Start
// does. Close releases what New opened.
func New(p Params) (*Connection, error) {
	log := p.Logger
	if log == nil {
		log = zap.NewNop()
	}
	log = log.Named("kafka")
	cluster, err := OpenCluster(p.Config)
	if err != nil {
		return nil, err
	}
	base, err := ClientOpts(p.Config, cluster.Brokers)
	if err != nil {
		cluster.Close()
		return nil, err
	}
	c := &Connection{Cluster: cluster, Topics: p.Topics, Registry: p.Registry, cfg: p.Config, base: base, hooks: p.Hooks, log: log,
		lanePartitions: max(p.Indexer.LanePartitions(), p.Relay.Lane+1), logs: &logGate{}}
	c.admin, err = c.NewClient("admin")
	if err != nil {
		cluster.Close()
		return nil, err
	}
	if p.Config.SASL.Mechanism == config.SASLPlain && !p.Config.TLS.Enabled {
		log.Warn("SASL PLAIN without TLS sends the password in clear text; enable kafka.tls")
	}
	return c, nil
}

// Opts returns the shared options followed by the metrics hooks and the logger of a client
// named client (its role: "lanes", "queries", "relay"), then extra. Later options win, so extra
// can override any shared option. Call it once per client: each call reserves the client's
// metrics label until that client closes.
func (c *Connection) Opts(client string, extra ...kgo.Opt) []kgo.Opt {
	opts := append([]kgo.Opt(nil), c.base...)
	if c.hooks != nil {
		opts = append(opts, c.hooks.Opt(client))
	}
	opts = append(opts, kgo.WithLogger(newZapLogger(c.log.With(zap.String("client", client)), c.logs)))
	return append(opts, extra...)
}

// QueryOpts is Opts for a client of the query path (the query service, a router's query
// client): the same options, seeded with kafka.query_brokers when that is set.
func (c *Connection) QueryOpts(client string, extra ...kgo.Opt) []kgo.Opt {
	if len(c.cfg.QueryBrokers) > 0 && !c.Cluster.Embedded {
		extra = append([]kgo.Opt{kgo.SeedBrokers(c.cfg.QueryBrokers...)}, extra...)
	}
	return c.Opts(client, extra...)
}

// Codec returns the process's codec of the product's records on Topics (see OpenCodec), built on
// the first call and shared by every later one, so that a process registers its schemas once
// however many components (relays, indexer, load) it runs. With a registry the first call
// registers every schema, each request bounded by Registry.Timeout; a failure is returned and
// not remembered, so the next call tries again.
func (c *Connection) Codec() (*schemas.Codec, error) {
	c.codecMu.Lock()
	defer c.codecMu.Unlock()
	if c.codec != nil {
		return c.codec, nil
	}
	codec, err := OpenCodec(context.Background(), c.Topics, c.Registry)
	if err != nil {
		return nil, err
	}
	if c.Registry.Enabled() {
		ids := make([]string, 0, len(schemas.RecordTypes()))
		for _, rt := range schemas.RecordTypes() {
			ids = append(ids, fmt.Sprintf("%s=%d", codec.Subject(rt), codec.SchemaID(rt)))
		}
		c.log.Info("schema ids from the registry", zap.Strings("registry", c.Registry.URLs),
			zap.Bool("lookup_only", c.Registry.LookupOnly), zap.Strings("subject_ids", ids))
	}
	c.codec = codec
	return codec, nil
}

// NewClient builds a client from Opts(client, extra...). The caller closes it.
func (c *Connection) NewClient(client string, extra ...kgo.Opt) (*kgo.Client, error) {
	cl, err := kgo.NewClient(c.Opts(client, extra...)...)
	if err != nil {
		return nil, fmt.Errorf("kafka: client %s: %w", client, err)
	}
	return cl, nil
}

// Start waits for a broker to answer, then ensures the topic layout: it creates the missing
// topics when kafka.create_topics is set (growing the per-lane topics to the lane count), and
// otherwise only verifies them; either way the lane topic must have a partition per lane, at
// least 16 (TopicLayoutLanes). It returns when the layout is usable, when a
// broker refuses the client for good (an authentication or authorization error), or shortly
// before ctx ends: it keeps a margin so that its own error, which names the cause, reaches the
// caller before fx's start timeout reports a bare "context deadline exceeded".
func (c *Connection) Start(ctx context.Context) error {
	c.log.Info("using "+c.Cluster.Describe(), zap.Bool("embedded", c.Cluster.Embedded))
	ctx, cancel := withMargin(ctx)
	defer cancel()
	err := c.waitForBroker(ctx)
	if err == nil && c.cfg.CreateTopics {
		err = EnsureTopicsLanes(ctx, c.admin, c.Topics, ReplicationOf(c.cfg), c.lanePartitions)
	} else if err == nil {
		err = VerifyTopicsLanes(ctx, c.admin, c.Topics, c.lanePartitions)
	}
	if err != nil {
		// fx does not run the OnStop of a hook whose OnStart failed: release what New opened.
		c.Close()
		return fmt.Errorf("kafka: %s: %w", c.Cluster.Describe(), err)
	}
	c.topicsReady.Store(true)
	return nil
}

// withMargin shortens ctx's deadline by a tenth of the time left, at most a second.
func withMargin(ctx context.Context) (context.Context, context.CancelFunc) {
	dl, ok := ctx.Deadline()
	if !ok {
		return context.WithCancel(ctx)
	}
	margin := min(time.Until(dl)/10, time.Second)
	return context.WithDeadline(ctx, dl.Add(-margin))
}

// waitForBroker pings the cluster until a broker answers. A refusal that retrying does not cure
// (an untrusted certificate, wrong SASL credentials, a listener of another security protocol:
// see refusal) ends the wait at once with an error naming the setting, as does any other
// non-retriable Kafka error (CLUSTER_AUTHORIZATION_FAILED, ...); any other error is retried, and
// the last one is reported when ctx ends.
func (c *Connection) waitForBroker(ctx context.Context) error {
	var last error
	eofs := 0
	for {
		err := c.admin.Ping(ctx)
		if err == nil {
			return nil
		}
		var firstEOF *kgo.ErrFirstReadEOF
		if errors.As(err, &firstEOF) {
			eofs++
		} else {
			eofs = 0
		}
		if r := refusal(c.cfg, err, eofs); r != nil {
			return fmt.Errorf("broker refused the client: %w", r)
		}
		var ke *kerr.Error
		if errors.As(err, &ke) && !ke.Retriable {
			return fmt.Errorf("broker refused the client: %w", err)
		}
		if ctx.Err() == nil || last == nil {
			if last == nil && eofs == 0 {
				// One clear line while the dial failures themselves are logged once per broker
				// (the client logger's repeat limit): what is wrong and what to check.
				c.log.Warn("no Kafka broker answers yet; retrying until startup_timeout (check kafka.brokers / KAFKA_BROKERS and that the brokers run)",
					zap.Strings("brokers", c.cfg.Brokers), zap.Error(err))
			}
			last = err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("no broker answered before the start timeout (startup_timeout); check kafka.brokers (KAFKA_BROKERS), that the brokers run, and kafka.tls / kafka.sasl: %w", last)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// Replication is how the topics this process creates are replicated (kafka.topic_replication_factor
// and kafka.topic_min_insync_replicas).
func (c *Connection) Replication() Replication { return ReplicationOf(c.cfg) }

// Ready is the "kafka" readiness check: the topic layout is ensured and a broker answers.
func (c *Connection) Ready(ctx context.Context) error {
	if !c.topicsReady.Load() {
		return ErrTopicsNotReady
	}
	if err := c.admin.Ping(ctx); err != nil {
		return fmt.Errorf("kafka: no broker answers: %w", err)
	}
	return nil
}

// Close closes the admin client and stops the embedded broker, if any, then shuts the clients'
// loggers: a client's Close can return while a connection attempt of it still runs, and would
// otherwise log after the process (or a test reading its log) has moved on. Components must have
// closed their own clients first (fx stops them before this, since they depend on it). Only the
// first call does anything.
func (c *Connection) Close() {
	c.closeOnce.Do(func() {
		c.admin.Close()
		c.Cluster.Close()
		c.logs.close()
	})
}

// Provide is Module's constructor: New, with Start and Close appended to lc's hooks.
func Provide(lc fx.Lifecycle, p Params) (*Connection, error) {
	c, err := New(p)
	if err != nil {
		return nil, err
	}
	lc.Append(fx.Hook{OnStart: c.Start, OnStop: func(context.Context) error { c.Close(); return nil }})
	return c, nil
}

// Module provides the *Connection, ensures the topic layout at start and closes the connection
// at stop. Its readiness (Connection.Ready) is the "kafka" check of /readyz, which the
// application (package app) adds, so that this package needs no HTTP server.
var Module = fx.Module("kafka",
	fx.Provide(Provide),
	// Built even when no component asks for it yet, so that every process ensures the layout.
	fx.Invoke(func(*Connection) {}),
)

// DeleteRunTopics deletes, with a client of the given role, every topic of the layout
// (TopicLayout of c.Topics) and the extra topics named: the end of a run (processor replay,
// processor demo on a shared broker) that chose a topic prefix of its own. The broker answers
// each topic on its own, so each topic's answer is read: a topic that does not exist counts as
// deleted; a deletion that timed out (REQUEST_TIMED_OUT: the controller did not finish it within
// the request's timeout) is asked for again, up to deleteAttempts times in all; any other error
// is returned, naming its topic.
func (c *Connection) DeleteRunTopics(ctx context.Context, role string, extra ...string) error {
	cl, err := c.NewClient(role)
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	var names []string
	for _, spec := range TopicLayout(c.Topics) {
		names = append(names, spec.Name)
	}
	names = append(names, extra...)
	for attempt := 1; len(names) > 0; attempt++ {
		resp, err := adm.DeleteTopics(ctx, names...)
		if err != nil {
			return fmt.Errorf("deleting the run's %d topics: %w", len(names), err)
		}
		var again []string
		var errs []error
		for _, r := range resp.Sorted() {
			switch {
			case r.Err == nil, errors.Is(r.Err, kerr.UnknownTopicOrPartition):
			case errors.Is(r.Err, kerr.RequestTimedOut) && attempt < deleteAttempts:
				again = append(again, r.Topic)
			default:
				errs = append(errs, fmt.Errorf("topic %s: %w", r.Topic, r.Err))
			}
		}
		if len(errs) > 0 {
			return fmt.Errorf("deleting the run's topics: %w", errors.Join(errs...))
		}
		names = again
	}
	return nil
}

// deleteAttempts is how many times DeleteRunTopics asks for a deletion that keeps timing out.
const deleteAttempts = 3
