// Package loadgen wires the synthetic load generator (package loadgen at the top of the module)
// into an fx application for processor loadgen: it creates each DC's KV-events topic, produces
// the engines' events there, sends the routers' queries over Kafka (streams/query.QueryClient) or HTTP
// (POST /v1/prefix-matches), prints a progress line and a report, and stops the application
// when the run ends. It also holds the pieces processor demo reuses.
package loadgen

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/ckf-stream/ckf-stream/app/config"
	"github.com/ckf-stream/ckf-stream/app/kafka"
	"github.com/ckf-stream/ckf-stream/app/lifecycle"
	"github.com/ckf-stream/ckf-stream/ckf"
	lg "github.com/ckf-stream/ckf-stream/loadgen"
	"github.com/ckf-stream/ckf-stream/queryapi"
	"github.com/ckf-stream/ckf-stream/schemas"
	streamquery "github.com/ckf-stream/ckf-stream/streams/query"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/fx"
	"go.uber.org/zap"
)

// KVPartitions is the partition count of the KV-events topics loadgen creates (as the layout's
// kv-events topic).
const KVPartitions = ckf.LaneCount

// DefaultDCs returns the DC ids of n synthetic DCs, 0xdc01, 0xdc02, ...: the DCs processor loadgen
// and processor demo use when the configuration names none.
func DefaultDCs(n int) []uint64 {
	out := make([]uint64, n)
	for i := range out {
		out[i] = 0xdc01 + uint64(i)
	}
	return out
}

// Options configure the module.
type Options struct {
	// Run is the load: workload, rates, duration, routers.
	Run lg.RunConfig
	// HTTP, when set, is the base URL of an indexer (http://host:port): queries go to its
	// POST /v1/prefix-matches instead of over Kafka.
	HTTP string
	// HTTPClient asks the indexer at HTTP (NewHTTPClient, with the credentials a locked query API
	// wants); nil is a plain client with a 10 s timeout.
	HTTPClient *http.Client
	// TopicPerDC sends DC d's events to lg.KVTopic(topics.kv_events, d), creating the topics
	// when kafka.create_topics is set; false sends every event to topics.kv_events (one DC, or
	// one relay reading all DCs' engines).
	TopicPerDC bool
	// Out receives the progress lines and the report.
	Out io.Writer
}

// Params are New's inputs.
type Params struct {
	fx.In

	Options    Options
	Kafka      config.Kafka
	Connection *kafka.Connection
	Logger     *zap.Logger   `optional:"true"`
	Shutdowner fx.Shutdowner `optional:"true"`
}

// Loadgen is one load run inside an application.
type Loadgen struct {
	opts       Options
	kafkaCfg   config.Kafka
	conn       *kafka.Connection
	log        *zap.Logger
	shutdowner fx.Shutdowner

	prod *kgo.Client
	qc   *streamquery.QueryClient
	run  lifecycle.Group // the run, from Start to Stop

	mu     sync.Mutex
	report *lg.Report
}

// New checks the options; Start connects.
func New(p Params) (*Loadgen, error) {
	log := p.Logger
	if log == nil {
		log = zap.NewNop()
	}
	if p.Options.Out == nil {
		p.Options.Out = io.Discard
	}
	if len(p.Options.Run.Workload.DCs) == 0 {
		return nil, fmt.Errorf("%w: no DC", lg.ErrConfig)
	}
	return &Loadgen{opts: p.Options, kafkaCfg: p.Kafka, conn: p.Connection, log: log.Named("loadgen"), shutdowner: p.Shutdowner,
		run: lifecycle.Group{Name: "loadgen"}}, nil
}

// Report returns the run's report once it has ended.
func (l *Loadgen) Report() (lg.Report, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.report == nil {
		return lg.Report{}, false
	}
	return *l.report, true
}

// Topics returns the KV-events topic of every DC of the options.
func (o Options) Topics(base string) func(dc uint64) string {
	if !o.TopicPerDC {
		return func(uint64) string { return base }
	}
	return func(dc uint64) string { return lg.KVTopic(base, dc) }
}

// Start creates the KV-events topics (when kafka.create_topics is set and the options ask for
// one per DC), builds the clients and starts the run on its own goroutine.
func (l *Loadgen) Start(ctx context.Context) error {
	topicOf := l.opts.Topics(l.conn.Topics.KVEvents)
	run := l.opts.Run
	codec, err := l.conn.Codec()
	if err != nil {
		return err
	}
	var query lg.QueryFunc
	if run.QueryRate > 0 {
		if l.opts.HTTP != "" {
			cl := l.opts.HTTPClient
			if cl == nil {
				cl = &http.Client{Timeout: 10 * time.Second}
			}
			query = HTTPQuery(cl, l.opts.HTTP)
		} else {
			// Each of the query client's two clients gets its own options (and kprom collectors).
			perRole := func(role string) []kgo.Opt { return l.conn.QueryOpts("loadgen-" + role) }
			l.qc, err = streamquery.NewQueryClient(ctx, streamquery.QueryClientParams{Config: streamquery.DefaultQueryClientConfig(),
				Codec: codec, ClientOptsFor: perRole, Log: l.log})
			if err != nil {
				return fmt.Errorf("loadgen: query client: %w", err)
			}
			query = l.qc.Query
		}
	}
	if run.EventRate > 0 {
		if l.opts.TopicPerDC && l.kafkaCfg.CreateTopics {
			var names []string
			for _, dc := range run.Workload.DCs {
				names = append(names, topicOf(dc))
			}
			if err := EnsureTopics(ctx, l.conn, names, KVPartitions, nil); err != nil {
				l.close()
				return err
			}
		}
		if l.prod, err = l.conn.NewClient("loadgen-events", ProducerOpts()...); err != nil {
			l.close()
			return err
		}
	}
	r, err := lg.NewRunner(lg.RunnerParams{Config: run, Producer: l.prod, Codec: codec, Topic: topicOf, Query: query})
	if err != nil {
		l.close()
		return err
	}
	l.run.Tasks = []lifecycle.Task{{Run: func(runCtx context.Context) error {
		rep, _ := r.Run(runCtx)
		l.mu.Lock()
		l.report = &rep
		l.mu.Unlock()
		fmt.Fprint(l.opts.Out, rep.String())
		if l.qc != nil {
			// What the client's hedged resends cost: requests sent again and the late replies
			// they caused (streams/query.QueryClient, "Hedged resends").
			st := l.qc.Stats()
			fmt.Fprintf(l.opts.Out, "loadgen: query client: %d calls, %d resent (%d resends withheld by the budget), %d sent off a suspected partition, %d late duplicate replies dropped, %d timed out\n",
				st.Sent, st.Hedges, st.HedgesWithheld, st.Redirected, st.Duplicates, st.TimedOut)
		}
		if l.shutdowner != nil && runCtx.Err() == nil {
			code := 0
			if (run.EventRate > 0 && rep.EventAcks == 0) || (run.QueryRate > 0 && rep.OK+rep.Unavailable == 0) {
				code = 1 // nothing got through: say so in the exit status
			}
			_ = l.shutdowner.Shutdown(fx.ExitCode(code))
		}
		return nil
	}}}
	return l.run.Start(ctx)
}

// Stop ends the run (when it is still going), waits for its report and closes the clients.
func (l *Loadgen) Stop(ctx context.Context) error {
	if err := l.run.Stop(ctx); err != nil {
		return err
	}
	l.close()
	return nil
}

func (l *Loadgen) close() {
	if l.qc != nil {
		l.qc.Close()
	}
	if l.prod != nil {
		l.prod.Close()
	}
}

// Provide is Module's constructor.
func Provide(lc fx.Lifecycle, p Params) (*Loadgen, error) {
	l, err := New(p)
	if err != nil {
		return nil, err
	}
	lc.Append(fx.Hook{OnStart: l.Start, OnStop: l.Stop})
	return l, nil
}

// Module runs one load run in the application and stops the application when it ends (exit
// status 0, or 1 when no event or no query got through). Supply the Options.
var Module = fx.Module("loadgen",
	fx.Provide(Provide),
	fx.Invoke(func(*Loadgen) {}),
)

// ProducerOpts are the KV-event producer's options besides the connection: a short linger
// (throughput), keyed partitioning (one worker's events in one partition, in order), acks from
// all in-sync replicas, and a delivery timeout so a run against a broker that went away ends.
func ProducerOpts() []kgo.Opt {
	return []kgo.Opt{
		kgo.ProducerLinger(5 * time.Millisecond),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.RecordDeliveryTimeout(30 * time.Second),
		kgo.MaxBufferedRecords(50_000),
	}
}

// EnsureTopics creates the named topics with the given partition count and topic configs (nil
// for the broker's defaults), replicated as the connection's kafka.topic_replication_factor and
// kafka.topic_min_insync_replicas say (kafka.ReplicationFor), where they do not exist, and waits
// until each has a leader for every partition. Existing topics are left as they are.
func EnsureTopics(ctx context.Context, conn *kafka.Connection, names []string, partitions int32, configs map[string]*string) error {
	cl, err := conn.NewClient("loadgen-admin")
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	factor, minInsync, err := kafka.ReplicationFor(ctx, adm, conn.Replication())
	if err != nil {
		return fmt.Errorf("loadgen: %w", err)
	}
	resps, err := adm.CreateTopics(ctx, partitions, factor, kafka.WithMinInsync(configs, minInsync), names...)
	if err != nil {
		return fmt.Errorf("loadgen: create topics: %w", err)
	}
	for _, r := range resps.Sorted() {
		if r.Err != nil && !errors.Is(r.Err, kerr.TopicAlreadyExists) {
			return fmt.Errorf("loadgen: create topic %s: %w", r.Topic, r.Err)
		}
	}
	for {
		details, err := adm.ListTopics(ctx, names...)
		if err == nil {
			err = leaderless(details, names)
		}
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("loadgen: topics not ready: %w (last error: %w)", ctx.Err(), err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func leaderless(details kadm.TopicDetails, names []string) error {
	for _, n := range names {
		d, ok := details[n]
		if !ok || d.Err != nil || len(d.Partitions) == 0 {
			return fmt.Errorf("topic %s is not there yet", n)
		}
		for _, p := range d.Partitions {
			if p.Err != nil || p.Leader < 0 {
				return fmt.Errorf("topic %s partition %d has no leader yet", n, p.Partition)
			}
		}
	}
	return nil
}

// HTTPQuery returns a QueryFunc that asks the indexer at base (http://host:port) through
// POST /v1/prefix-matches and turns its answer into a schemas.QueryReply: the body is
// queryapi.RequestOf's, and 200, 400 and 503 answers are replies (OK, INVALID_REQUEST,
// UNAVAILABLE; queryapi.PrefixMatchResponse.Reply); any other status is an error.
func HTTPQuery(cl *http.Client, base string) lg.QueryFunc {
	url := strings.TrimSuffix(base, "/") + "/v1/prefix-matches"
	return func(ctx context.Context, req schemas.QueryRequest) (schemas.QueryReply, error) {
		body, err := json.Marshal(queryapi.RequestOf(&req))
		if err != nil {
			return schemas.QueryReply{}, err
		}
		hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
		if err != nil {
			return schemas.QueryReply{}, err
		}
		hreq.Header.Set("Content-Type", "application/json")
		resp, err := cl.Do(hreq)
		if err != nil {
			return schemas.QueryReply{}, err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		if err != nil {
			return schemas.QueryReply{}, fmt.Errorf("loadgen: reading the answer of %s: %w", url, err)
		}
		switch resp.StatusCode {
		case http.StatusOK, http.StatusBadRequest, http.StatusServiceUnavailable:
		case http.StatusNotFound, http.StatusMethodNotAllowed:
			return schemas.QueryReply{}, fmt.Errorf("POST %s: %s: the server at %s has no prefix-match route: point --http at an indexer's HTTP address (http.listen of processor indexer; a relay, a bridge or a worker stage serves other routes)", url, resp.Status, base)
		case http.StatusUnauthorized, http.StatusForbidden:
			return schemas.QueryReply{}, fmt.Errorf("loadgen: POST %s: %s: the indexer's query API is locked (http.auth.bearer_token_file, http.tls.client_ca_file) and refused this client's credentials: give its token (--token-file) or a client certificate (--cert-file, --key-file)", url, resp.Status)
		default:
			return schemas.QueryReply{}, fmt.Errorf("loadgen: POST %s: %s: %s", url, resp.Status, bytes.TrimSpace(b))
		}
		var out queryapi.PrefixMatchResponse
		if err := json.Unmarshal(b, &out); err != nil {
			return schemas.QueryReply{}, fmt.Errorf("loadgen: POST %s: %s with an undecodable body: %w", url, resp.Status, err)
		}
		reply, err := out.Reply()
		if err != nil {
			return reply, fmt.Errorf("loadgen: POST %s: %s: %w", url, resp.Status, err)
		}
		return reply, nil
	}
}
