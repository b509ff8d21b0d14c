package replay

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ckf-stream/ckf-stream/app/indexer"
	appload "github.com/ckf-stream/ckf-stream/app/loadgen"
	"github.com/ckf-stream/ckf-stream/eval"
	"github.com/ckf-stream/ckf-stream/loadgen"
	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/ckf-stream/ckf-stream/streams/query"
	"github.com/ckf-stream/ckf-stream/workerapi"
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
	where := "the indexer"
	if len(r.regions) > 1 {
		where = fmt.Sprintf("%d regions' indexers (lanes mirrored between them)", len(r.regions))
	}
	fmt.Fprintf(r.out, "pipeline: %d relays, %s and the worker stages ready; simulating the other policies (%d seeds, warm and cold starts)\n",
		len(r.relays), where, o.Seeds)
	if err := rep.simulate(o); err != nil {
		return err
	}
	events := "KV events produced as KvEvent records"
	if o.ViaBridge {
		events = "KV events through one bridge per worker (vLLM's ZeroMQ protocol)"
	}
	fmt.Fprintf(r.out, "live: replaying %d requests at %g× real time under ckf through the pipeline (%s; DC queries to the indexer over %s, worker queries to the DC's worker stage over %s)\n",
		len(o.Requests), o.Speedup, events, o.Query, WorkerQueryHTTP)
	live, err := r.live(ctx)
	if err != nil {
		return err
	}
	rep.Live = live
	if err := rep.output(r.out, o.OutDir); err != nil {
		return err
	}
	if o.Done != nil {
		o.Done(rep)
	}
	// A router places a request without an answer (by load) rather than not at all: unanswered
	// queries are reported, and fail the run only when none was answered, at either stage.
	if live.Result.Completed != len(o.Requests) || live.Answered == 0 || live.Workers.Answered == 0 {
		return fmt.Errorf("%d of %d requests completed, %d of %d queries answered, %d of %d worker-stage queries answered",
			live.Result.Completed, len(o.Requests), live.Answered, live.Queries, live.Workers.Answered, live.Workers.Queries)
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
	if err := rep.output(o.Out, o.OutDir); err != nil {
		return nil, err
	}
	return rep, nil
}

// output finishes the report, prints it to w and, with dir, writes report.json there.
func (rep *Report) output(w io.Writer, dir string) error {
	rep.finish()
	rep.print(w)
	if dir == "" {
		return nil
	}
	path, err := rep.write(dir)
	if err != nil {
		return err
	}
	fmt.Fprintln(w, "report written to", path)
	return nil
}

// live replays the trace in real time under the ckf policy, with its KV events on the pipeline.
func (r *replay) live(ctx context.Context) (*Live, error) {
	o := r.opts
	// The engines publish each event at once (no linger: franz-go's default would hold it up to
	// 10 ms), keyed by worker, acknowledged by every in-sync replica; each DC's engines to their
	// region's cluster. The router of each region asks its region's indexer.
	var prods []*kgo.Client
	var queries []loadgen.QueryFunc
	defer func() {
		for _, p := range prods {
			p.Close()
		}
	}()
	for _, reg := range r.regions {
		prod, err := reg.conn.NewClient("replay-engines", kgo.ProducerLinger(0),
			kgo.RequiredAcks(kgo.AllISRAcks()), kgo.RecordDeliveryTimeout(30*time.Second), kgo.MaxBufferedRecords(50_000))
		if err != nil {
			return nil, err
		}
		prods = append(prods, prod)
		query, closeQuery, err := r.queryFunc(ctx, reg)
		if err != nil {
			return nil, err
		}
		defer closeQuery()
		queries = append(queries, query)
	}

	wquery, closeWorkers, err := r.workerQuery()
	if err != nil {
		return nil, err
	}
	defer closeWorkers()

	lv := &Live{Query: o.Query, Events: "direct", LoadStart: loadAverage(), Workers: &WorkerStage{Query: WorkerQueryHTTP}}
	if o.ViaBridge {
		lv.Events = "bridge"
	}
	// A prober per region's indexer (region 0's is the live run's headline), and the worker
	// stage's.
	var prs []*prober
	for _, reg := range r.regions {
		prs = append(prs, newProber(r, reg.ix, o.VisibleTimeout))
	}
	pr := prs[0]
	wpr := newWorkerProber(r, o.VisibleTimeout)
	all := append(slices.Clone(prs), wpr)
	probeCtx, stopProbe := context.WithCancel(ctx)
	probeDone := make(chan struct{}, len(all))
	for _, p := range all {
		go func() { defer func() { probeDone <- struct{}{} }(); p.run(probeCtx) }()
	}
	defer func() {
		stopProbe()
		for range all {
			<-probeDone
		}
	}()

	// Connect the router's clients before the clock starts: the first queries of a client pay
	// for its metadata and connections, which would put the whole replay behind its clock.
	for i := range 20 {
		req := schemas.QueryRequest{CorrelationID: "replay-warmup-" + strconv.Itoa(i), Input: schemas.InputLocalBlockHashes,
			Hashes: schemas.AppendU64s(nil, []uint64{eval.LocalHash(uint64(i))}), LaneMask64: schemas.Some(schemas.AllLanes64)}
		for _, query := range queries {
			qctx, cancel := context.WithTimeout(ctx, o.QueryTimeout)
			_, err := query(qctx, req)
			cancel()
			if err != nil && ctx.Err() != nil {
				return nil, ctx.Err()
			}
		}
	}
	em := &emitter{r: r, prods: prods, prs: prs, wpr: wpr, kvBytes: make([]atomic.Uint64, len(r.dcs))}
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
	pol := &ckfPolicy{r: r, queries: queries, wquery: wquery, prs: prs, wpr: wpr, lv: lv, ctx: ctx}
	if len(r.regions) > 1 {
		lv.WANDelayMs = float64(o.WANDelay) / float64(time.Millisecond)
		for _, reg := range r.regions {
			pol.regions = append(pol.regions, &RegionLive{Alias: reg.alias, DCs: reg.dcs, PerDC: make([]DCAccuracy, len(r.dcs))})
		}
	}
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
		// index and the worker stage show them all.
		deadline := time.Now().Add(o.ReadyTimeout)
		for _, p := range all {
			for p.pendingCount() > 0 {
				if time.Now().After(deadline) {
					return fmt.Errorf("the warm start's %d stores are not visible after %v", p.pendingCount(), o.ReadyTimeout)
				}
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-p.changed():
				}
			}
			p.reset()
		}
		return nil
	}
	t0 := time.Now()
	res, err := fleet.Run(o.Requests, eval.SharedPrefix(o.Requests, eval.WarmShare), eval.Hooks{Wait: wait, Emit: em.emit, Warmed: warmed})
	if err != nil {
		return nil, err
	}
	elapsed := time.Since(t0)
	fctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	for _, prod := range prods {
		if err == nil {
			err = prod.Flush(fctx)
		}
	}
	if err == nil && em.bs != nil {
		err = em.bs.flush(fctx)
	}
	cancel()
	if err != nil {
		return nil, fmt.Errorf("flushing the KV events: %w", err)
	}
	// Let the last events become visible (or time out) before reading the prober.
	deadline := time.Now().Add(o.VisibleTimeout + time.Second)
	for _, p := range all {
		for p.pendingCount() > 0 && time.Now().Before(deadline) {
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-p.changed():
			case <-time.After(100 * time.Millisecond):
			}
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
	vis := pr.summarise()
	lv.VisibleEvents, lv.NotSeen, lv.RemovedBeforeSeen, lv.StillPending = vis.Events, vis.NotSeen, vis.RemovedBeforeSeen, vis.StillPending
	lv.VisibleP50Ms, lv.VisibleP99Ms, lv.VisibleMaxMs, lv.VisibleCDFMs = vis.P50Ms, vis.P99Ms, vis.MaxMs, vis.CDFMs
	lv.MaxLagRecords = pr.maxLag.Load()
	lv.Ages = ageAccuracy(lv.ageErr, lv.ageErrBehind)
	ws := lv.Workers
	ws.Visible, ws.MaxLagRecords = wpr.summarise(), wpr.maxLag.Load()
	slices.Sort(ws.queryLat)
	ws.QueryP50Ms, ws.QueryP99Ms = 1000*eval.Quantile(ws.queryLat, 0.5), 1000*eval.Quantile(ws.queryLat, 0.99)
	if ts := res.TwoStage; ts != nil && ts.Requests > 0 {
		ws.Requests, ws.SameDC, ws.SameWorker = ts.Requests, ts.SameDC, ts.SameWorker
		ws.SameDCShare, ws.SameWorkerShare = float64(ts.SameDC)/float64(ts.Requests), float64(ts.SameWorker)/float64(ts.Requests)
	}
	lv.Regions = r.regionsLive(pol.regions, prs, em)
	lv.LoadEnd = loadAverage()
	return lv, nil
}

// queryFunc returns the ckf router's path to reg's indexer: a Kafka query client on reg's
// cluster, or HTTP on a loopback listener serving the indexer's own POST /v1/prefix-matches
// handler.
func (r *replay) queryFunc(ctx context.Context, reg *region) (loadgen.QueryFunc, func(), error) {
	if r.opts.Query == QueryHTTP {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, nil, err
		}
		srv := &http.Server{Handler: reg.ix.API().QueryHandler(), ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = srv.Serve(ln) }()
		q := appload.HTTPQuery(&http.Client{Timeout: 10 * time.Second}, "http://"+ln.Addr().String())
		return q, func() { _ = srv.Close() }, nil
	}
	qc, err := query.NewQueryClient(ctx, query.QueryClientParams{Config: query.DefaultQueryClientConfig(),
		Codec: reg.codec, ClientOptsFor: func(role string) []kgo.Opt { return reg.conn.QueryOpts("replay-" + role) }, Log: r.log})
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
	prods    []*kgo.Client // by region
	bs       *bridges      // --via-bridge: events go to the engines' sockets instead
	prs      []*prober     // the indexers', by region
	wpr      *prober       // the worker stage's
	buf      []byte
	produced atomic.Uint64
	failed   atomic.Uint64
	// kvBytes are the bytes (key and value) of the KvEvent records produced, by DC index.
	kvBytes []atomic.Uint64
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
	e.kvBytes[ev.DC].Add(uint64(len(rec.Key) + len(rec.Value)))
	e.prods[e.r.regionOf[ev.DC]].Produce(context.WithoutCancel(context.Background()), rec, func(_ *kgo.Record, err error) {
		if err != nil {
			e.failed.Add(1)
		}
	})
}

// track registers the stores that change what their DC holds with every indexer's prober, and
// the removals that empty a block from its DC; and every store and removal with the worker
// stage's.
func (e *emitter) track(ev *eval.KVEvent, now time.Time) {
	for _, pr := range e.prs {
		switch {
		case ev.Kind == eval.KVStored && len(ev.DCChange) > 0:
			pr.addStore(ev.DC, ev.Chain, ev.DCChange, now)
		case ev.Kind == eval.KVRemoved && len(ev.DCChange) > 0:
			pr.removed(ev.DC, ev.DCChange, now)
		}
	}
	unit := ev.DC*e.r.opts.Fleet.Workers + ev.Worker
	switch {
	case ev.Kind == eval.KVStored && len(ev.Keys) > 0:
		e.wpr.addStore(unit, ev.Chain, ev.Keys, now)
	case ev.Kind == eval.KVRemoved && len(ev.Keys) > 0:
		e.wpr.removed(unit, ev.Keys, now)
	}
}

// ckfPolicy is the ckf router: it asks the indexer for every DC's cached depth and places the
// request by eval.Config.Cost on the answer and the DCs' loads; then it asks the chosen DC's
// worker stage for every worker's device depth and picks the worker by the fleet's worker rule
// (eval.Config.WorkerChoice) on that answer and the workers' loads. It also measures both
// answers against the exact state of the fleet at query time. Across regions the requests
// arrive at the regions' routers in turn (request n at region n mod N), each placing its
// requests on its own region's answer; every region's indexer is asked every request (at once),
// and its answers are measured per DC (RegionLive).
type ckfPolicy struct {
	r       *replay
	queries []loadgen.QueryFunc // by region
	wquery  workerQueryFunc
	prs     []*prober // by region
	wpr     *prober
	lv      *Live
	regions []*RegionLive // nil in one region
	ctx     context.Context
	n       int
}

func (p *ckfPolicy) Name() string { return eval.PolicyCKF }

// answer is one region's answer to a request: pending are the request's blocks stored but not
// yet seen in that region's index, per DC, before asking (an under-report at such a block is
// explained by visibility).
type answer struct {
	reply   schemas.QueryReply
	err     error
	pending [][]bool
	lat     time.Duration
}

// ask asks every region's indexer for v's prompt, at once when there are several.
func (p *ckfPolicy) ask(v *eval.View) []answer {
	// lane_mask64: the router reads answers of up to 64 lanes (--dcs up to 64, consumer §16).
	req := schemas.QueryRequest{CorrelationID: "replay-" + strconv.Itoa(p.n), Input: schemas.InputLocalBlockHashes,
		Hashes: schemas.AppendU64s(nil, v.Locals), LaneMask64: schemas.Some(schemas.AllLanes64)}
	out := make([]answer, len(p.queries))
	one := func(i int) {
		out[i].pending = p.prs[i].pendingPositions(0, v.Keys, v.Depth)
		qctx, cancel := context.WithTimeout(p.ctx, p.r.opts.QueryTimeout)
		t0 := time.Now()
		out[i].reply, out[i].err = p.queries[i](qctx, req)
		out[i].lat = time.Since(t0)
		cancel()
	}
	if len(p.queries) == 1 {
		one(0)
		return out
	}
	var wg sync.WaitGroup
	for i := range p.queries {
		wg.Add(1)
		go func() { defer wg.Done(); one(i) }()
	}
	wg.Wait()
	return out
}

// judge reads a's depths, per DC (= lane), and compares each with the exact state at query
// time, adding to total and, when not nil, to perDC[dc].
func (p *ckfPolicy) judge(pr *prober, a *answer, v *eval.View, total *Accuracy, perDC []DCAccuracy) []int {
	depth := make([]int, len(v.Depth))
	searched := make([]bool, len(v.Depth))
	for _, l := range a.reply.Lanes {
		if int(l.Lane) < len(depth) {
			depth[l.Lane], searched[l.Lane] = int(l.Depth), true
		}
	}
	now := time.Now()
	for d := range depth {
		var c Accuracy
		c.Compared = 1
		e, got := v.Depth[d], depth[d]
		switch {
		case !searched[d]:
			// Not searched: the answer's lane state says stale or unavailable (a relay starved
			// past the freshness bound, a lane not ready). No depth was claimed; counting it as
			// depth 0 called it an unexplained under-report (one in the 64-DC hour).
			c.LeftOut = 1
		case got < e:
			c.UnderReports = 1
			if a.pending[d] != nil && a.pending[d][got] {
				c.UnderExplained = 1
			}
		case got > e:
			c.OverReports = 1
			if e < len(v.Keys) && pr.recentlyRemoved(d, v.Keys[e], now) {
				c.OverExplained = 1
			}
		default:
			c.Exact = 1
		}
		total.add(c)
		if perDC != nil {
			perDC[d].add(c)
		}
	}
	return depth
}

func (p *ckfPolicy) Choose(v *eval.View, rng *rand.Rand) int {
	cfg := p.r.opts.Fleet
	p.n++
	lv := p.lv
	lv.Queries++
	answers := p.ask(v)
	for i, rl := range p.regions {
		a := &answers[i]
		rl.Queries++
		rl.queryLat = append(rl.queryLat, a.lat.Seconds())
		if a.err != nil || a.reply.Status != schemas.QueryOK {
			continue
		}
		rl.Answered++
		p.judge(p.prs[i], a, v, &rl.Accuracy, rl.PerDC)
	}
	home := 0
	if len(answers) > 1 {
		home = p.n % len(answers)
	}
	a := &answers[home]
	lv.queryLat = append(lv.queryLat, a.lat.Seconds())
	depth := make([]int, len(v.Depth))
	switch {
	case a.err != nil:
		lv.QueryErrors++
		lv.FallBacks++
	case a.reply.Status != schemas.QueryOK:
		lv.Unavailable++
		lv.FallBacks++
	default:
		lv.Answered++
		depth = p.judge(p.prs[home], a, v, &lv.Accuracy, nil)
		p.compareAges(p.prs[home], &a.reply)
	}
	if a.err != nil && lv.FirstError == "" {
		lv.FirstError = a.err.Error()
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

// compareAges sets each searched lane's age in reply against the truth at the reply's time
// (prober.staleness of pr, the prober of the answering region's indexer): the error, in
// milliseconds, is the age minus the truth.
func (p *ckfPolicy) compareAges(pr *prober, reply *schemas.QueryReply) {
	for _, s := range reply.LaneStates {
		age, ok := s.AgeMillis.Get()
		if !ok || !s.State.HasDepth() || int(s.Lane) >= len(p.r.dcs) || reply.ReplyTime.IsZero() {
			continue
		}
		truth := pr.staleness(int(s.Lane), reply.ReplyTime)
		e := float64(age) - float64(truth)/float64(time.Millisecond)
		p.lv.ageErr = append(p.lv.ageErr, e)
		if truth > 0 {
			p.lv.ageErrBehind = append(p.lv.ageErrBehind, e)
		}
	}
}

// ChooseWorker asks the worker stage of the chosen DC for its sources' device depths and picks
// the worker as exact knowledge does (eval.Config.WorkerChoice: the same load term and tie
// breaks), on the answer instead of the fleet's state. A failed query places the request by load
// alone (every depth 0) and is counted.
func (p *ckfPolicy) ChooseWorker(v *eval.View, wv *eval.WorkerView, rng *rand.Rand) int {
	ws := p.lv.Workers
	ws.Queries++
	nw := len(wv.Out)
	pending := p.wpr.pendingPositions(wv.DC*nw, v.Keys, wv.Depth)
	qctx, cancel := context.WithTimeout(p.ctx, p.r.opts.QueryTimeout)
	t0 := time.Now()
	resp, err := p.wquery(qctx, wv.DC, v.Locals)
	ws.queryLat = append(ws.queryLat, time.Since(t0).Seconds())
	cancel()
	depth := make([]int, nw)
	switch {
	case err != nil:
		ws.QueryErrors++
		ws.FallBacks++
		if ws.FirstError == "" {
			ws.FirstError = err.Error()
		}
	case resp.Status != workerapi.StatusOK:
		ws.Unavailable++
		ws.FallBacks++
		if ws.FirstError == "" {
			ws.FirstError = resp.Status + ": " + resp.Error
		}
	default:
		ws.Answered++
		for _, s := range resp.Sources {
			if d, w, ok := workerOf(s.WorkerID); ok && d == wv.DC && w < nw && s.DpRank == 0 {
				depth[w] = int(s.Device)
			} else {
				ws.ForeignSources++
			}
		}
		now := time.Now()
		for w := range depth {
			ws.Compared++
			e, got := wv.Depth[w], depth[w]
			switch {
			case got < e:
				ws.UnderReports++
				if pending[w] != nil && pending[w][got] {
					ws.UnderExplained++
				}
			case got > e:
				ws.OverReports++
				if e < len(v.Keys) && p.wpr.recentlyRemoved(wv.DC*nw+w, v.Keys[e], now) {
					ws.OverExplained++
				}
			default:
				ws.Exact++
			}
		}
	}
	return p.r.opts.Fleet.WorkerChoice(v.Req.InputTokens, depth, wv.Out, rng)
}

// prober measures event-to-visible latency: for each store it tracks, it asks a read model in
// process, every millisecond, whether the store's whole chain shows, until it does. The latency
// runs from the engine's event (when the replay produced it) to the first such answer. A prober
// tracks stores per unit: the indexer's (newProber) per DC, for the stores that made blocks
// resident in their DC (the DC held none of them before), asking the answerer for the chain on
// the DC's lane; the worker stage's (newWorkerProber) per worker, for every store, asking the
// DC's replica for the worker's device depth.
type prober struct {
	timeout time.Duration
	// probe reports whether s shows; called from run's goroutine only.
	probe func(s *pstore) bool
	// lag returns the read model's largest lag in records; sampled each second.
	lag func() int64

	mu      sync.Mutex
	pending map[*pstore]struct{}
	// resolved holds, per unit, the stores resolved in the last staleWindow: seen, removed from
	// the unit first, or given up on, with when. staleness reads them.
	resolved [][]span
	byKey    []map[uint64][]*pstore // per unit: the pending stores that made each key resident
	removal  []map[uint64]time.Time // per unit: when each key was last removed from the unit
	lat      []float64              // seconds
	latUnit  []int                  // the unit of each of lat
	notSeen  int                    // timed out
	unitMiss []int                  // per unit: timed out
	gone     int                    // removed from the unit before they were seen
	wake     chan struct{}
	maxLag   atomic.Int64
}

// span is a resolved store: produced at at, part of its unit's read model (or moot) from done.
type span struct{ at, done time.Time }

// staleWindow is how long resolved stores are kept for staleness: longer than any answer's
// round trip.
const staleWindow = 10 * time.Second

type pstore struct {
	unit  int
	chain []uint64
	keys  []uint64
	at    time.Time
}

func newProberOf(units int, timeout time.Duration, probe func(*pstore) bool, lag func() int64) *prober {
	p := &prober{timeout: timeout, probe: probe, lag: lag, pending: map[*pstore]struct{}{}, wake: make(chan struct{})}
	for range units {
		p.byKey = append(p.byKey, map[uint64][]*pstore{})
		p.removal = append(p.removal, map[uint64]time.Time{})
		p.resolved = append(p.resolved, nil)
	}
	p.unitMiss = make([]int, units)
	return p
}

// newProber is an indexer's prober (ix: one region's): a unit is a DC (= lane).
func newProber(r *replay, ix *indexer.Indexer, timeout time.Duration) *prober {
	ans := ix.Answerer()
	var sc query.QueryScratch
	probe := func(s *pstore) bool {
		req := schemas.QueryRequest{CorrelationID: "probe", Input: schemas.InputLocalBlockHashes,
			Hashes: schemas.AppendU64s(nil, s.chain), LaneMask64: schemas.Some(uint64(1) << s.unit)}
		reply := ans.Answer(&req, &sc)
		if reply.Status == schemas.QueryOK {
			for _, l := range reply.Lanes {
				if int(l.Lane) == s.unit && int(l.Depth) >= len(s.chain) {
					return true
				}
			}
		}
		return false
	}
	lag := func() int64 {
		var most int64
		for _, l := range ix.API().View().Lanes {
			most = max(most, int64(l.LagRecords))
		}
		return most
	}
	return newProberOf(len(r.dcs), timeout, probe, lag)
}

func (p *prober) addStore(unit int, chain, keys []uint64, at time.Time) {
	s := &pstore{unit: unit, chain: slices.Clone(chain), keys: slices.Clone(keys), at: at}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.pending[s] = struct{}{}
	for _, k := range s.keys {
		p.byKey[unit][k] = append(p.byKey[unit][k], s)
	}
}

// removed notes keys that left unit u: pending stores that made them resident will never be
// seen.
func (p *prober) removed(u int, keys []uint64, at time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, k := range keys {
		p.removal[u][k] = at
		for _, s := range p.byKey[u][k] {
			if _, ok := p.pending[s]; ok {
				p.gone++
				p.resolve(s, at)
			}
		}
	}
}

// resolve forgets a pending store that is part of its unit's read model (or moot) from done; p.mu
// is held.
func (p *prober) resolve(s *pstore, done time.Time) {
	p.drop(s)
	r := append(p.resolved[s.unit], span{at: s.at, done: done})
	if len(r) >= 1024 && done.Sub(r[0].done) > staleWindow {
		r = slices.DeleteFunc(r, func(x span) bool { return done.Sub(x.done) > staleWindow })
	}
	p.resolved[s.unit] = r
}

// staleness is how far behind its engines unit u's read model was at t, as the replay knows it:
// t minus the production time of the oldest store of u produced before t and not part of the
// read model at t; 0 when every store produced before t was. It is the truth an answer's age
// (schemas.LaneState.AgeMillis) stands for, to the prober's resolution (one probe round, about
// a millisecond), over the stores it tracks (those that change what the unit holds).
func (p *prober) staleness(u int, t time.Time) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	oldest := t
	for s := range p.pending {
		if s.unit == u && s.at.Before(oldest) {
			oldest = s.at
		}
	}
	for _, x := range p.resolved[u] {
		if x.at.Before(oldest) && x.done.After(t) {
			oldest = x.at
		}
	}
	return t.Sub(oldest)
}

// drop forgets a pending store; p.mu is held.
func (p *prober) drop(s *pstore) {
	delete(p.pending, s)
	for _, k := range s.keys {
		list := p.byKey[s.unit][k]
		list = slices.DeleteFunc(list, func(x *pstore) bool { return x == s })
		if len(list) == 0 {
			delete(p.byKey[s.unit], k)
		} else {
			p.byKey[s.unit][k] = list
		}
	}
}

func (p *prober) recentlyRemoved(u int, key uint64, now time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	at, ok := p.removal[u][key]
	return ok && now.Sub(at) <= time.Second
}

// pendingPositions returns, per unit first+i, which positions of keys below the unit's exact
// depth (depth[i]) hold a block whose store is not yet seen (nil for a unit without one).
func (p *prober) pendingPositions(first int, keys []uint64, depth []int) [][]bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([][]bool, len(depth))
	for d, e := range depth {
		for i := 0; i < e; i++ {
			if len(p.byKey[first+d][keys[i]]) > 0 {
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
	p.lat, p.latUnit, p.notSeen, p.gone = nil, nil, 0, 0
	clear(p.unitMiss)
	for u := range p.resolved {
		p.resolved[u] = nil
	}
}

func (p *prober) run(ctx context.Context) {
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
			switch {
			case p.probe(s):
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
					p.latUnit = append(p.latUnit, s.unit)
					p.resolve(s, now)
				}
			}
			for _, s := range expired {
				if _, ok := p.pending[s]; ok {
					p.notSeen++
					p.unitMiss[s.unit]++
					p.resolve(s, now)
				}
			}
			close(p.wake)
			p.wake = make(chan struct{})
			p.mu.Unlock()
		}
		if now.Sub(lastLag) >= time.Second {
			lastLag = now
			if l := p.lag(); l > p.maxLag.Load() {
				p.maxLag.Store(l)
			}
		}
	}
}

// Visibility is a prober's event-to-visible figures.
type Visibility struct {
	// Events were seen; NotSeen timed out; RemovedBeforeSeen left their unit first;
	// StillPending were unresolved at the end.
	Events            int       `json:"visible_events"`
	NotSeen           int       `json:"not_seen"`
	RemovedBeforeSeen int       `json:"removed_before_seen"`
	StillPending      int       `json:"still_pending"`
	P50Ms             float64   `json:"visible_p50_ms"`
	P99Ms             float64   `json:"visible_p99_ms"`
	MaxMs             float64   `json:"visible_max_ms"`
	CDFMs             []float64 `json:"visible_cdf_ms"`
}

// summariseOf returns the visibility figures of the units keep keeps, without the CDF: events
// seen, never seen, still pending, and the latency quantiles.
func (p *prober) summariseOf(keep func(unit int) bool) Visibility {
	p.mu.Lock()
	defer p.mu.Unlock()
	var lat []float64
	for i, x := range p.lat {
		if keep(p.latUnit[i]) {
			lat = append(lat, x)
		}
	}
	slices.Sort(lat)
	v := Visibility{Events: len(lat)}
	for u, n := range p.unitMiss {
		if keep(u) {
			v.NotSeen += n
		}
	}
	for s := range p.pending {
		if keep(s.unit) {
			v.StillPending++
		}
	}
	if len(lat) > 0 {
		v.P50Ms = 1000 * eval.Quantile(lat, 0.5)
		v.P99Ms = 1000 * eval.Quantile(lat, 0.99)
		v.MaxMs = 1000 * lat[len(lat)-1]
	}
	return v
}

// summarise returns the prober's visibility figures.
func (p *prober) summarise() Visibility {
	p.mu.Lock()
	defer p.mu.Unlock()
	lat := slices.Clone(p.lat)
	slices.Sort(lat)
	v := Visibility{Events: len(lat), NotSeen: p.notSeen, RemovedBeforeSeen: p.gone, StillPending: len(p.pending)}
	if len(lat) > 0 {
		v.P50Ms = 1000 * eval.Quantile(lat, 0.5)
		v.P99Ms = 1000 * eval.Quantile(lat, 0.99)
		v.MaxMs = 1000 * lat[len(lat)-1]
	}
	// The CDF: at most 1,000 points.
	step := max(1, len(lat)/1000)
	for i := 0; i < len(lat); i += step {
		v.CDFMs = append(v.CDFMs, 1000*lat[i])
	}
	return v
}
