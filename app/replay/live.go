package replay

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	appload "github.com/ckf-stream/ckf-stream/app/loadgen"
	"github.com/ckf-stream/ckf-stream/eval"
	"github.com/ckf-stream/ckf-stream/loadgen"
	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/ckf-stream/ckf-stream/streams/query"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"
)

// drive waits for the pipeline, runs the simulated policies, then the live ckf replay, and
// reports.
func (r *replay) drive(ctx context.Context) error {
	if err := r.ready(ctx); err != nil {
		return err
	}
	o := r.opts
	rep := newReport(o)
	rep.printHeader(r.out)
	fmt.Fprintf(r.out, "pipeline: %d relays and the indexer ready; simulating the other policies (%d seeds, warm and cold starts)\n",
		len(r.relays), o.Seeds)
	if err := rep.simulate(o); err != nil {
		return err
	}
	events := "KV events produced as KvEvent records"
	if o.ViaBridge {
		events = "KV events through one bridge per worker (vLLM's ZeroMQ protocol)"
	}
	fmt.Fprintf(r.out, "live: replaying %d requests at %g× real time under ckf through the pipeline (%s; queries over %s)\n",
		len(o.Requests), o.Speedup, events, o.Query)
	live, err := r.live(ctx)
	if err != nil {
		return err
	}
	rep.Live = live
	rep.finish()
	rep.print(r.out)
	if o.OutDir != "" {
		path, err := rep.write(o.OutDir)
		if err != nil {
			return err
		}
		fmt.Fprintln(r.out, "report written to", path)
	}
	if o.Done != nil {
		o.Done(rep)
	}
	// A router places a request without an answer (by load) rather than not at all: unanswered
	// queries are reported, and fail the run only when none was answered.
	if live.Result.Completed != len(o.Requests) || live.Answered == 0 {
		return fmt.Errorf("%d of %d requests completed, %d of %d queries answered", live.Result.Completed, len(o.Requests), live.Answered, live.Queries)
	}
	return nil
}

// Simulate runs the simulated policies alone, with no pipeline and no broker: the oracles, load,
// round-robin and random, warm and cold, over the seeds, and the ckf rule on a stale index for
// each of o.Delays. It prints the report to o.Out and, with o.OutDir, writes report.json there
// (tools/evalplots draws the staleness curve from it). It is what processor replay
// --simulate-only runs: what-ifs of fleet, delays and seeds in seconds.
func Simulate(o Options) (*Report, error) {
	rep := newReport(o)
	rep.printHeader(o.Out)
	if err := rep.simulate(o); err != nil {
		return nil, err
	}
	rep.finish()
	rep.print(o.Out)
	if o.OutDir != "" {
		path, err := rep.write(o.OutDir)
		if err != nil {
			return nil, err
		}
		fmt.Fprintln(o.Out, "report written to", path)
	}
	return rep, nil
}

// live replays the trace in real time under the ckf policy, with its KV events on the pipeline.
func (r *replay) live(ctx context.Context) (*Live, error) {
	o := r.opts
	// The engines publish each event at once (no linger: franz-go's default would hold it up to
	// 10 ms), keyed by worker, acknowledged by every in-sync replica.
	prod, err := r.conn.NewClient("replay-engines", kgo.ProducerLinger(0),
		kgo.RequiredAcks(kgo.AllISRAcks()), kgo.RecordDeliveryTimeout(30*time.Second), kgo.MaxBufferedRecords(50_000))
	if err != nil {
		return nil, err
	}
	defer prod.Close()
	query, closeQuery, err := r.queryFunc(ctx)
	if err != nil {
		return nil, err
	}
	defer closeQuery()

	lv := &Live{Query: o.Query, Events: "direct", LoadStart: loadAverage()}
	if o.ViaBridge {
		lv.Events = "bridge"
	}
	pr := newProber(r, o.VisibleTimeout)
	probeCtx, stopProbe := context.WithCancel(ctx)
	probeDone := make(chan struct{})
	go func() { defer close(probeDone); pr.run(probeCtx) }()
	defer func() { stopProbe(); <-probeDone }()

	// Connect the router's clients before the clock starts: the first queries of a client pay
	// for its metadata and connections, which would put the whole replay behind its clock.
	for i := range 20 {
		req := schemas.QueryRequest{CorrelationID: "replay-warmup-" + strconv.Itoa(i), Input: schemas.InputLocalBlockHashes,
			Hashes: schemas.AppendU64s(nil, []uint64{eval.LocalHash(uint64(i))})}
		qctx, cancel := context.WithTimeout(ctx, o.QueryTimeout)
		_, err := query(qctx, req)
		cancel()
		if err != nil && ctx.Err() != nil {
			return nil, ctx.Err()
		}
	}
	em := &emitter{r: r, prod: prod, pr: pr}
	if o.ViaBridge {
		bs, err := r.startBridges(ctx)
		if err != nil {
			return nil, err
		}
		defer func() {
			if err := bs.close(); err != nil {
				r.log.Warn("stopping the bridges", zap.Error(err))
			}
		}()
		em.bs = bs
	}
	pol := &ckfPolicy{r: r, query: query, pr: pr, lv: lv, ctx: ctx}
	fleet, err := eval.NewFleet(o.Fleet, pol)
	if err != nil {
		return nil, err
	}
	var start time.Time
	var late []float64
	wait := func(t float64) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		if start.IsZero() {
			start = time.Now()
		}
		d := time.Until(start.Add(time.Duration(t / o.Speedup * float64(time.Second))))
		if d > 0 {
			time.Sleep(d) // the replay's clock: arrivals and completions at their simulated times
			d = 0
		}
		late = append(late, -d.Seconds())
		return nil
	}
	warmed := func() error {
		// The warm start's blocks are published like any other; the replay starts once the
		// index shows them all.
		deadline := time.Now().Add(o.ReadyTimeout)
		for pr.pendingCount() > 0 {
			if time.Now().After(deadline) {
				return fmt.Errorf("the warm start's %d stores are not visible after %v", pr.pendingCount(), o.ReadyTimeout)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-pr.changed():
			}
		}
		pr.reset()
		return nil
	}
	t0 := time.Now()
	res, err := fleet.Run(o.Requests, eval.SharedPrefix(o.Requests, eval.WarmShare), eval.Hooks{Wait: wait, Emit: em.emit, Warmed: warmed})
	if err != nil {
		return nil, err
	}
	elapsed := time.Since(t0)
	fctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	err = prod.Flush(fctx)
	if err == nil && em.bs != nil {
		err = em.bs.flush(fctx)
	}
	cancel()
	if err != nil {
		return nil, fmt.Errorf("flushing the KV events: %w", err)
	}
	// Let the last events become visible (or time out) before reading the prober.
	deadline := time.Now().Add(o.VisibleTimeout + time.Second)
	for pr.pendingCount() > 0 && time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-pr.changed():
		case <-time.After(100 * time.Millisecond):
		}
	}
	res.Policy = eval.PolicyCKF
	lv.Result = res
	lv.ElapsedSeconds = elapsed.Seconds()
	lv.QueriesPerSec = float64(lv.Queries) / elapsed.Seconds()
	lv.EventsProduced, lv.EventErrors = em.produced.Load(), em.failed.Load()
	slices.Sort(late)
	lv.LateP99Ms, lv.LateMaxMs = 1000*eval.Quantile(late, 0.99), 1000*late[len(late)-1]
	slices.Sort(lv.queryLat)
	lv.QueryP50Ms, lv.QueryP99Ms = 1000*eval.Quantile(lv.queryLat, 0.5), 1000*eval.Quantile(lv.queryLat, 0.99)
	pr.summarise(lv)
	lv.MaxLagRecords = pr.maxLag.Load()
	lv.LoadEnd = loadAverage()
	return lv, nil
}

// queryFunc returns the ckf router's path to the indexer: a Kafka query client, or HTTP on a
// loopback listener serving the indexer's own POST /v1/prefix-matches handler.
func (r *replay) queryFunc(ctx context.Context) (loadgen.QueryFunc, func(), error) {
	if r.opts.Query == QueryHTTP {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, nil, err
		}
		srv := &http.Server{Handler: r.ix.API().QueryHandler(), ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = srv.Serve(ln) }()
		q := appload.HTTPQuery(&http.Client{Timeout: 10 * time.Second}, "http://"+ln.Addr().String())
		return q, func() { _ = srv.Close() }, nil
	}
	qc, err := query.NewQueryClient(ctx, query.QueryClientParams{Config: query.DefaultQueryClientConfig(),
		Codec: r.codec, ClientOptsFor: func(role string) []kgo.Opt { return r.conn.QueryOpts("replay-" + role) }, Log: r.log})
	if err != nil {
		return nil, nil, err
	}
	return qc.Query, qc.Close, nil
}

// WorkerID is the engine id of worker w of DC index d, as loadgen numbers its workers:
// (d+1)<<16 | (w+1). It keys the worker's KV events.
func WorkerID(d, w int) uint64 { return uint64(d+1)<<16 | uint64(w+1) }

// emitter turns the fleet's KV events into KvEvent records on their DC's topic, keyed by the
// worker id in decimal (docs/producers-and-routers.md, section 2), and registers the stores that
// change what their DC holds with the prober.
type emitter struct {
	r        *replay
	prod     *kgo.Client
	bs       *bridges // --via-bridge: events go to the engines' sockets instead
	pr       *prober
	buf      []byte
	produced atomic.Uint64
	failed   atomic.Uint64
}

func (e *emitter) emit(ev *eval.KVEvent) {
	if e.bs != nil {
		e.track(ev, time.Now())
		e.produced.Add(1)
		if err := e.bs.send(ev); err != nil {
			e.failed.Add(1)
		}
		return
	}
	kv := schemas.KvEvent{WorkerID: WorkerID(ev.DC, ev.Worker), EventID: ev.EventID, StorageTier: schemas.TierDevice}
	switch ev.Kind {
	case eval.KVStored:
		kv.Kind = schemas.KvStoredEvent
		if ev.HasParent {
			kv.Stored.ParentHash = schemas.Some(ev.Parent)
		}
		kv.Stored.Blocks = make([]schemas.KvBlock, len(ev.Keys))
		for i, k := range ev.Keys {
			kv.Stored.Blocks[i] = schemas.KvBlock{BlockHash: k, TokensHash: ev.Locals[i]}
		}
	case eval.KVRemoved:
		kv.Kind = schemas.KvRemovedEvent
		kv.Removed.BlockHashes = ev.Keys
	}
	var err error
	e.buf, err = e.r.codec.AppendKvEvent(e.buf[:0], kv)
	if err != nil {
		e.failed.Add(1)
		return
	}
	e.track(ev, time.Now())
	rec := &kgo.Record{Topic: e.r.kvTopic(e.r.dcs[ev.DC]), Key: strconv.AppendUint(nil, kv.WorkerID, 10), Value: slices.Clone(e.buf)}
	e.produced.Add(1)
	e.prod.Produce(context.WithoutCancel(context.Background()), rec, func(_ *kgo.Record, err error) {
		if err != nil {
			e.failed.Add(1)
		}
	})
}

// track registers the stores that change what their DC holds with the prober, and the
// removals that empty a block from its DC.
func (e *emitter) track(ev *eval.KVEvent, now time.Time) {
	switch {
	case ev.Kind == eval.KVStored && len(ev.DCChange) > 0:
		e.pr.addStore(ev.DC, ev.Chain, ev.DCChange, now)
	case ev.Kind == eval.KVRemoved && len(ev.DCChange) > 0:
		e.pr.removed(ev.DC, ev.DCChange, now)
	}
}

// ckfPolicy is the ckf router: it asks the indexer for every DC's cached depth and places the
// request by eval.Config.Cost on the answer and the DCs' loads. It also measures the answer
// against the exact state of the fleet (v.Depth) at query time.
type ckfPolicy struct {
	r     *replay
	query loadgen.QueryFunc
	pr    *prober
	lv    *Live
	ctx   context.Context
	n     int
}

func (p *ckfPolicy) Name() string { return eval.PolicyCKF }

func (p *ckfPolicy) Choose(v *eval.View, rng *rand.Rand) int {
	cfg := p.r.opts.Fleet
	p.n++
	lv := p.lv
	lv.Queries++
	// Which of the request's blocks are stored but not yet seen in the index, per DC, before
	// asking: an under-report at such a block is explained by visibility.
	pending := p.pr.pendingPositions(v.Keys, v.Depth)
	req := schemas.QueryRequest{CorrelationID: "replay-" + strconv.Itoa(p.n), Input: schemas.InputLocalBlockHashes,
		Hashes: schemas.AppendU64s(nil, v.Locals)}
	qctx, cancel := context.WithTimeout(p.ctx, p.r.opts.QueryTimeout)
	t0 := time.Now()
	reply, err := p.query(qctx, req)
	lv.queryLat = append(lv.queryLat, time.Since(t0).Seconds())
	cancel()
	depth := make([]int, len(v.Depth))
	switch {
	case err != nil:
		lv.QueryErrors++
		lv.FallBacks++
	case reply.Status != schemas.QueryOK:
		lv.Unavailable++
		lv.FallBacks++
	default:
		lv.Answered++
		for _, l := range reply.Lanes {
			if int(l.Lane) < len(depth) {
				depth[l.Lane] = int(l.Depth)
			}
		}
		now := time.Now()
		for d := range depth {
			lv.Compared++
			e, got := v.Depth[d], depth[d]
			switch {
			case got < e:
				lv.UnderReports++
				if pending[d] != nil && pending[d][got] {
					lv.UnderExplained++
				}
			case got > e:
				lv.OverReports++
				if e < len(v.Keys) && p.pr.recentlyRemoved(d, v.Keys[e], now) {
					lv.OverExplained++
				}
			default:
				lv.Exact++
			}
		}
	}
	if err != nil && lv.FirstError == "" {
		lv.FirstError = err.Error()
	}
	dc := cfg.ChooseByCost(v.Req.InputTokens, depth, v.Load, rng)
	// The oracles' picks on the exact state, for agreement.
	deepest := 0
	for _, d := range v.Depth {
		deepest = max(deepest, d)
	}
	bestCost := cfg.Cost(v.Req.InputTokens, v.Depth[0], v.Load[0])
	for d := range v.Depth {
		bestCost = min(bestCost, cfg.Cost(v.Req.InputTokens, v.Depth[d], v.Load[d]))
	}
	if deepest >= 2 {
		lv.Decisions++
		if cfg.Cost(v.Req.InputTokens, v.Depth[dc], v.Load[dc]) <= bestCost {
			lv.AgreeCostOracle++
		}
		if v.Depth[dc] >= deepest {
			lv.AsDeepAsDepthOracle++
		}
	}
	return dc
}

// prober measures event-to-visible latency: for each store that made blocks resident in a DC
// (the DC held none of them before), it asks the indexer's answerer in process, every
// millisecond, for the store's whole chain on the DC's lane, until the answer covers it. The
// latency runs from the engine's event (when the replay produced it) to the first such answer.
type prober struct {
	r       *replay
	timeout time.Duration
	ans     *query.Answerer

	mu      sync.Mutex
	pending map[*pstore]struct{}
	byKey   []map[uint64][]*pstore // per DC: the pending stores that made each key resident
	removal []map[uint64]time.Time // per DC: when each key was last removed from the DC
	lat     []float64              // seconds
	notSeen int                    // timed out
	gone    int                    // removed from the DC before they were seen
	wake    chan struct{}
	maxLag  atomic.Int64
}

type pstore struct {
	dc    int
	chain []uint64
	keys  []uint64
	at    time.Time
}

func newProber(r *replay, timeout time.Duration) *prober {
	p := &prober{r: r, timeout: timeout, ans: r.ix.Answerer(), pending: map[*pstore]struct{}{}, wake: make(chan struct{})}
	for range r.dcs {
		p.byKey = append(p.byKey, map[uint64][]*pstore{})
		p.removal = append(p.removal, map[uint64]time.Time{})
	}
	return p
}

func (p *prober) addStore(dc int, chain, keys []uint64, at time.Time) {
	s := &pstore{dc: dc, chain: slices.Clone(chain), keys: slices.Clone(keys), at: at}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.pending[s] = struct{}{}
	for _, k := range s.keys {
		p.byKey[dc][k] = append(p.byKey[dc][k], s)
	}
}

// removed notes keys that left DC dc: pending stores that made them resident will never be seen.
func (p *prober) removed(dc int, keys []uint64, at time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, k := range keys {
		p.removal[dc][k] = at
		for _, s := range p.byKey[dc][k] {
			if _, ok := p.pending[s]; ok {
				p.gone++
				p.drop(s)
			}
		}
	}
}

// drop forgets a pending store; p.mu is held.
func (p *prober) drop(s *pstore) {
	delete(p.pending, s)
	for _, k := range s.keys {
		list := p.byKey[s.dc][k]
		list = slices.DeleteFunc(list, func(x *pstore) bool { return x == s })
		if len(list) == 0 {
			delete(p.byKey[s.dc], k)
		} else {
			p.byKey[s.dc][k] = list
		}
	}
}

func (p *prober) recentlyRemoved(dc int, key uint64, now time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	at, ok := p.removal[dc][key]
	return ok && now.Sub(at) <= time.Second
}

// pendingPositions returns, per DC, which positions of keys below the DC's exact depth hold a
// block whose store is not yet seen (nil for a DC without one).
func (p *prober) pendingPositions(keys []uint64, depth []int) [][]bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([][]bool, len(depth))
	for d, e := range depth {
		for i := 0; i < e; i++ {
			if len(p.byKey[d][keys[i]]) > 0 {
				if out[d] == nil {
					out[d] = make([]bool, len(keys))
				}
				out[d][i] = true
			}
		}
	}
	return out
}

func (p *prober) pendingCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.pending)
}

// changed returns a channel closed the next time a pending store is resolved.
func (p *prober) changed() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.wake
}

// reset forgets the latencies measured so far (the warm start's).
func (p *prober) reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.lat, p.notSeen, p.gone = nil, 0, 0
}

func (p *prober) run(ctx context.Context) {
	var sc query.QueryScratch
	var batch []*pstore
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	lastLag := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		p.mu.Lock()
		batch = batch[:0]
		for s := range p.pending {
			batch = append(batch, s)
		}
		p.mu.Unlock()
		var seen, expired []*pstore
		now := time.Now()
		for _, s := range batch {
			req := schemas.QueryRequest{CorrelationID: "probe", Input: schemas.InputLocalBlockHashes,
				Hashes: schemas.AppendU64s(nil, s.chain), LaneMask: schemas.Some(uint16(1) << s.dc)}
			reply := p.ans.Answer(&req, &sc)
			ok := false
			if reply.Status == schemas.QueryOK {
				for _, l := range reply.Lanes {
					if int(l.Lane) == s.dc && int(l.Depth) >= len(s.chain) {
						ok = true
					}
				}
			}
			switch {
			case ok:
				seen = append(seen, s)
			case now.Sub(s.at) > p.timeout:
				expired = append(expired, s)
			}
		}
		if len(seen)+len(expired) > 0 {
			p.mu.Lock()
			for _, s := range seen {
				if _, ok := p.pending[s]; ok {
					p.lat = append(p.lat, now.Sub(s.at).Seconds())
					p.drop(s)
				}
			}
			for _, s := range expired {
				if _, ok := p.pending[s]; ok {
					p.notSeen++
					p.drop(s)
				}
			}
			close(p.wake)
			p.wake = make(chan struct{})
			p.mu.Unlock()
		}
		if now.Sub(lastLag) >= time.Second {
			lastLag = now
			for _, l := range p.r.ix.API().View().Lanes {
				if int64(l.LagRecords) > p.maxLag.Load() {
					p.maxLag.Store(int64(l.LagRecords))
				}
			}
		}
	}
}

// summarise fills lv's visibility figures.
func (p *prober) summarise(lv *Live) {
	p.mu.Lock()
	defer p.mu.Unlock()
	lat := slices.Clone(p.lat)
	slices.Sort(lat)
	lv.VisibleEvents, lv.NotSeen, lv.RemovedBeforeSeen, lv.StillPending = len(lat), p.notSeen, p.gone, len(p.pending)
	if len(lat) > 0 {
		lv.VisibleP50Ms = 1000 * eval.Quantile(lat, 0.5)
		lv.VisibleP99Ms = 1000 * eval.Quantile(lat, 0.99)
		lv.VisibleMaxMs = 1000 * lat[len(lat)-1]
	}
	// The CDF: at most 1,000 points.
	step := max(1, len(lat)/1000)
	for i := 0; i < len(lat); i += step {
		lv.VisibleCDFMs = append(lv.VisibleCDFMs, 1000*lat[i])
	}
}
