package replay

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/ckf-stream/ckf-stream/app/lifecycle"
	appworkers "github.com/ckf-stream/ckf-stream/app/workers"
	"github.com/ckf-stream/ckf-stream/ckf"
	ckfworkers "github.com/ckf-stream/ckf-stream/ckf/workers"
	streamworkers "github.com/ckf-stream/ckf-stream/streams/workers"
	"github.com/ckf-stream/ckf-stream/workerapi"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/fx"
	"go.uber.org/zap"
)

// The worker stage of the replay: one replica per DC (streams/workers, processor workers' read
// model) beside the DC's relay, reading the same KV-events topic, with no checkpoint topic (the
// run's topics are its own; a replica then reads its topic from the log start) and no lag
// group. The ckf router asks the replica of the DC it chose for every source's device depth and
// picks the worker by the fleet's worker rule (eval.Config.WorkerChoice) on that answer.

// WorkerQueryHTTP is the ckf router's path to the worker stage: POST /v1/worker-matches
// (workerapi, JSON) on a loopback listener per DC serving app/workers' own handler.
const WorkerQueryHTTP = "http"

// workerQueryFunc asks DC index dc's worker stage for the sources holding a prompt (its local
// block hashes). The seam for the worker stage's Kafka query path: a client of it is one more
// implementation of this function.
type workerQueryFunc func(ctx context.Context, dc int, locals []uint64) (workerapi.WorkerMatchResponse, error)

// wireWorkers builds one worker-stage replica per DC, on its region's cluster, and runs them between the application's
// start and stop, after the relays' topics exist.
func (r *replay) wireWorkers(lc fx.Lifecycle) error {
	g := &lifecycle.Group{Name: "replay", OnExit: func(i int, err error) {
		if err != nil {
			r.log.Error("worker stage stopped", zap.Int("dc", i), zap.Error(err))
			_ = r.sd.Shutdown(fx.ExitCode(1))
		}
	}}
	for d, dc := range r.dcs {
		cfg := streamworkers.DefaultConfig()
		cfg.DC = ckf.DcID(dc)
		cfg.Topics = streamworkers.Topics{KVEvents: r.kvTopic(dc)}
		cfg.CheckpointInterval, cfg.LagCommitInterval = 0, 0
		role := fmt.Sprintf("replay-dc%d-", d)
		reg := r.regions[r.regionOf[d]] // the DC's own region
		rep, err := streamworkers.New(streamworkers.Params{Config: cfg, Codec: reg.codec,
			ClientOptsFor: func(name string) []kgo.Opt { return reg.conn.Opts(role + name) },
			Log:           r.log.Named("workers").With(zap.Int("dc", d))})
		if err != nil {
			return fmt.Errorf("replay: worker stage of DC %d: %w", d, err)
		}
		r.workers = append(r.workers, rep)
		g.Tasks = append(g.Tasks, lifecycle.Task{Name: fmt.Sprintf("worker stage of DC %d", d), Waiting: "the worker stages", Run: rep.Run})
	}
	lc.Append(fx.Hook{OnStart: g.Start, OnStop: g.Stop})
	return nil
}

// workersReady waits until every replica has read its topic up to the end listed at its start.
func (r *replay) workersReady(ctx context.Context, start time.Time) error {
	for d, rep := range r.workers {
		select {
		case <-rep.WaitReady():
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(r.opts.ReadyTimeout - time.Since(start)):
			return fmt.Errorf("the worker stage of DC %d was not ready within %v", d, r.opts.ReadyTimeout)
		}
	}
	return nil
}

// workerQuery returns the ckf router's path to the worker stage: each DC's replica served by
// app/workers' POST /v1/worker-matches handler on a loopback listener of its own (a DC's
// replicas sit behind a service of their own in a deployment), asked in JSON.
func (r *replay) workerQuery() (workerQueryFunc, func(), error) {
	var srvs []*http.Server
	closeAll := func() {
		for _, s := range srvs {
			_ = s.Close()
		}
	}
	var urls []string
	for _, rep := range r.workers {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		srv := &http.Server{Handler: appworkers.NewAPI(rep, nil).MatchHandler(), ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = srv.Serve(ln) }()
		srvs = append(srvs, srv)
		urls = append(urls, "http://"+ln.Addr().String()+workerapi.Path)
	}
	cl := &http.Client{Timeout: 10 * time.Second}
	q := func(ctx context.Context, dc int, locals []uint64) (workerapi.WorkerMatchResponse, error) {
		var out workerapi.WorkerMatchResponse
		body, err := json.Marshal(workerapi.WorkerMatchRequest{LocalBlockHashes: locals})
		if err != nil {
			return out, err
		}
		hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, urls[dc], bytes.NewReader(body))
		if err != nil {
			return out, err
		}
		hreq.Header.Set("Content-Type", "application/json")
		resp, err := cl.Do(hreq)
		if err != nil {
			return out, err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		if err != nil {
			return out, fmt.Errorf("reading the answer of %s: %w", urls[dc], err)
		}
		if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusServiceUnavailable {
			return out, fmt.Errorf("POST %s: %s: %s", urls[dc], resp.Status, bytes.TrimSpace(b))
		}
		if err := json.Unmarshal(b, &out); err != nil {
			return out, fmt.Errorf("POST %s: %s with an undecodable body: %w", urls[dc], resp.Status, err)
		}
		return out, nil
	}
	return q, closeAll, nil
}

// newWorkerProber is the worker stage's prober: a unit is a worker (DC index × workers +
// worker), and a store shows once the DC's replica, asked in process for the store's whole chain
// and that worker alone, answers a device depth covering it. It asks the replica's answer
// function rather than the HTTP route so that the figure is the read model's, as the indexer's
// prober asks its answerer.
func newWorkerProber(r *replay, timeout time.Duration) *prober {
	w := r.opts.Fleet.Workers
	var res ckfworkers.Result
	var chain []ckf.CanonicalHash
	src := make([]ckf.SourceKey, 1)
	probe := func(s *pstore) bool {
		d, wk := s.unit/w, s.unit%w
		chain = chain[:0]
		for i, l := range s.chain {
			if i == 0 {
				chain = append(chain, ckf.CanonicalRoot(ckf.LocalBlockHash(l)))
			} else {
				chain = append(chain, ckf.CanonicalChild(chain[i-1], ckf.LocalBlockHash(l)))
			}
		}
		src[0] = ckf.SourceKey{Worker: ckf.WorkerID(WorkerID(d, wk))}
		r.workers[d].Match(chain, ckfworkers.Options{Sources: src}, &res)
		for _, m := range res.Matches {
			if m.Source == src[0] && int(m.Device) >= len(s.chain) {
				return true
			}
		}
		return false
	}
	lag := func() int64 {
		var most int64
		for _, rep := range r.workers {
			most = max(most, rep.Age().LagRecords)
		}
		return most
	}
	return newProberOf(len(r.dcs)*w, timeout, probe, lag)
}

// workerOf returns the DC index and worker of an engine id (WorkerID's inverse), ok false for an
// id WorkerID does not give.
func workerOf(id uint64) (dc, w int, ok bool) {
	d, n := int(id>>16), int(id&0xffff)
	return d - 1, n - 1, d >= 1 && n >= 1 && id>>32 == 0
}
