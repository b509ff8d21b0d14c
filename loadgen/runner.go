package loadgen

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/twmb/franz-go/pkg/kgo"
)

// KVTopic names DC dc's KV-events topic when several DCs share one cluster: the base name (the
// configured topics.kv_events) plus ".dc-" and the DC id in hex. A relay reads every partition
// of its DC's topic, so each DC needs a topic of its own; configure each relay's
// topics.kv_events accordingly.
func KVTopic(base string, dc uint64) string { return base + ".dc-" + strconv.FormatUint(dc, 16) }

// QueryFunc sends one query and waits for its reply (query.QueryClient.Query over Kafka, or
// an HTTP client of POST /v1/prefix-matches). It must be safe for concurrent use.
type QueryFunc func(ctx context.Context, req schemas.QueryRequest) (schemas.QueryReply, error)

// RunConfig configures a Runner. Zero fields take the defaults noted.
type RunConfig struct {
	Workload Config
	// EventRate is the KV events per second over all DCs; 0 sends none.
	EventRate float64
	// QueryRate is the queries per second over all routers; 0 sends none.
	QueryRate float64
	// Duration ends the run; 0 runs until the context ends.
	Duration time.Duration
	// Routers is the number of queries in flight at most (router goroutines). Default 32. A
	// query due while every router is busy is counted as skipped, not queued: the schedule is
	// open-loop, so a slow indexer shows up as skipped queries and latency, not as a quietly
	// lower rate.
	Routers int
	// Progress, when set, receives a progress line every ProgressInterval (default 1 s).
	Progress         io.Writer
	ProgressInterval time.Duration
	// MaxSamples bounds the latency samples kept for the percentiles (default 1,000,000;
	// beyond it samples are replaced at random, keeping a uniform sample).
	MaxSamples int
}

// RunnerParams are what NewRunner needs.
type RunnerParams struct {
	Config RunConfig
	// Producer sends the KV events; nil when EventRate is 0. Records name their topic (Topic)
	// and carry the worker id as key, so one worker's events stay in one partition, in order.
	Producer *kgo.Client
	Codec    *schemas.Codec
	// Topic names a DC's KV-events topic (KVTopic, or a constant for a single DC).
	Topic func(dc uint64) string
	// Query sends the queries; nil when QueryRate is 0.
	Query QueryFunc
}

// Runner paces a Workload onto Kafka and measures the queries.
type Runner struct {
	cfg   RunConfig
	w     *Workload
	prod  *kgo.Client
	codec *schemas.Codec
	topic func(uint64) string
	query QueryFunc

	events, eventAcks, eventErrs atomic.Uint64
	queries, skipped, queryErrs  atomic.Uint64
	status                       [3]atomic.Uint64 // by schemas.QueryStatus
	hits, homeHits, homeQueries  atomic.Uint64
	depthSum                     atomic.Uint64

	mu       sync.Mutex
	lat      []time.Duration // all samples (bounded)
	window   []time.Duration // samples since the last progress line
	seen     uint64
	sampler  *rand.Rand
	firstErr error
}

// NewRunner builds the workload and checks the parameters.
func NewRunner(p RunnerParams) (*Runner, error) {
	cfg := p.Config
	if cfg.Routers <= 0 {
		cfg.Routers = 32
	}
	if cfg.ProgressInterval <= 0 {
		cfg.ProgressInterval = time.Second
	}
	if cfg.MaxSamples <= 0 {
		cfg.MaxSamples = 1_000_000
	}
	switch {
	case cfg.EventRate < 0 || cfg.QueryRate < 0:
		return nil, fmt.Errorf("%w: negative rate", ErrConfig)
	case cfg.EventRate > 0 && (p.Producer == nil || p.Codec == nil || p.Topic == nil):
		return nil, fmt.Errorf("%w: events need a producer, a codec and topic names", ErrConfig)
	case cfg.QueryRate > 0 && p.Query == nil:
		return nil, fmt.Errorf("%w: queries need a query function", ErrConfig)
	}
	w, err := NewWorkload(cfg.Workload)
	if err != nil {
		return nil, err
	}
	return &Runner{cfg: cfg, w: w, prod: p.Producer, codec: p.Codec, topic: p.Topic, query: p.Query,
		sampler: rand.New(rand.NewPCG(w.cfg.Seed, 99))}, nil
}

// Workload returns the generator.
func (r *Runner) Workload() *Workload { return r.w }

// Report is the outcome of a run.
type Report struct {
	Elapsed time.Duration
	// Events were produced; EventAcks acknowledged by the broker; EventErrors failed.
	Events, EventAcks, EventErrors uint64
	EventsPerSec                   float64 // acknowledged events per second
	// Queries were sent; Skipped were due while every router was busy; QueryErrors got no
	// reply (timeouts, produce errors).
	Queries, Skipped, QueryErrors uint64
	QueriesPerSec                 float64 // replies per second
	OK, Unavailable, Invalid      uint64  // replies by status
	// Hits are OK replies with a non-zero depth on some lane; MeanBestDepth is the mean over OK
	// replies of the deepest lane's depth. HomeHits counts queries of a live conversation whose
	// home DC reported a non-zero depth, out of HomeQueries such OK replies.
	Hits, HomeHits, HomeQueries uint64
	MeanBestDepth               float64
	// Latency percentiles of replied queries, from send to reply.
	P50, P90, P99, Max time.Duration
	Workload           WorkloadStats
	// FirstError is the first event or query error seen, for the report.
	FirstError error
}

// String renders the report as a few lines for people.
func (rep Report) String() string {
	s := fmt.Sprintf("loadgen: %.1fs: events %d acknowledged (%.0f/s), %d failed; queries %d (%.0f/s): ok %d, unavailable %d, invalid %d, errors %d, skipped %d\n",
		rep.Elapsed.Seconds(), rep.EventAcks, rep.EventsPerSec, rep.EventErrors, rep.Queries, rep.QueriesPerSec,
		rep.OK, rep.Unavailable, rep.Invalid, rep.QueryErrors, rep.Skipped)
	if rep.Queries > 0 {
		s += fmt.Sprintf("loadgen: query latency p50 %v, p90 %v, p99 %v, max %v; hits %d of %d ok (mean best depth %.1f blocks); home DC hit %d of %d\n",
			rep.P50.Round(time.Microsecond), rep.P90.Round(time.Microsecond), rep.P99.Round(time.Microsecond),
			rep.Max.Round(time.Microsecond), rep.Hits, rep.OK, rep.MeanBestDepth, rep.HomeHits, rep.HomeQueries)
	}
	ws := rep.Workload
	s += fmt.Sprintf("loadgen: workload: %d stores (%d blocks), %d removals (%d blocks), %d clears, %d conversations, %d branches, %d migrations, %d blocks cached now\n",
		ws.Stored, ws.StoredBlocks, ws.Removed, ws.Evictions, ws.Cleared, ws.Conversations, ws.Branches, ws.Migrations, ws.CachedBlocks)
	if rep.FirstError != nil {
		s += "loadgen: first error: " + rep.FirstError.Error() + "\n"
	}
	if rep.NoHitsFromThisRun() {
		s += "loadgen: no query found a block of this run though its events were acknowledged: does a relay read the KV-events topics it writes, with the same block size, and does the indexer serve those DCs' lanes?\n"
	}
	return s
}

// NoHitsFromThisRun reports a run whose events were acknowledged and whose queries were answered
// OK, none of them with a depth: with the run's own namespace (Config.Namespace) no earlier
// state answers its prompts, so its events never reached the index (a topic no relay reads,
// another block size, lanes the indexer does not serve). A run too short for any event to
// become visible reads the same: it needs more than the pipeline's delay (tens of ms).
func (rep Report) NoHitsFromThisRun() bool {
	return rep.EventAcks > 0 && rep.OK > 0 && rep.Hits == 0
}

// Run sends events and queries at the configured rates until Duration passes or ctx ends, waits
// for the queries in flight and the events' acknowledgements (at most 10 s), and reports.
func (r *Runner) Run(ctx context.Context) (Report, error) {
	if r.cfg.Duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, r.cfg.Duration)
		defer cancel()
	}
	start := time.Now()
	var wg sync.WaitGroup
	if r.cfg.EventRate > 0 {
		wg.Add(1)
		go func() { defer wg.Done(); r.sendEvents(ctx, start) }()
	}
	if r.cfg.QueryRate > 0 {
		wg.Add(1)
		go func() { defer wg.Done(); r.sendQueries(ctx, start) }()
	}
	if r.cfg.Progress != nil {
		wg.Add(1)
		go func() { defer wg.Done(); r.progress(ctx, start) }()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if r.prod != nil {
		fctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := r.prod.Flush(fctx)
		cancel()
		if err != nil {
			r.noteErr(fmt.Errorf("loadgen: flushing KV events: %w", err))
		}
	}
	return r.report(elapsed), nil
}

// pace calls send once for every unit due at rate since start, checking every 2 ms, until ctx
// ends or send returns false.
func pace(ctx context.Context, start time.Time, rate float64, send func() bool) {
	const tick = 2 * time.Millisecond
	t := time.NewTicker(tick)
	defer t.Stop()
	var sent float64
	for {
		due := rate * time.Since(start).Seconds()
		for sent+1 <= due && ctx.Err() == nil {
			if !send() {
				return
			}
			sent++
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (r *Runner) sendEvents(ctx context.Context, start time.Time) {
	// Records outlive the run's context: those produced before the end are still delivered
	// (and flushed by Run). The producer's delivery timeout bounds a broker that is gone.
	produceCtx := context.WithoutCancel(ctx)
	var buf []byte
	pace(ctx, start, r.cfg.EventRate, func() bool {
		ev := r.w.NextEvent()
		var err error
		buf, err = r.codec.AppendKvEvent(buf[:0], ev.KV)
		if err != nil {
			r.eventErrs.Add(1)
			r.noteErr(fmt.Errorf("loadgen: encoding a KV event: %w", err))
			return true
		}
		rec := &kgo.Record{Topic: r.topic(ev.DC), Key: strconv.AppendUint(nil, ev.KV.WorkerID, 10), Value: slices.Clone(buf)}
		r.events.Add(1)
		r.prod.Produce(produceCtx, rec, func(_ *kgo.Record, err error) {
			if err != nil {
				r.noteErr(fmt.Errorf("loadgen: producing a KV event: %w", err))
				r.eventErrs.Add(1)
				return
			}
			r.eventAcks.Add(1)
		})
		return true
	})
}

func (r *Runner) sendQueries(ctx context.Context, start time.Time) {
	jobs := make(chan Query, r.cfg.Routers)
	var wg sync.WaitGroup
	for i := 0; i < r.cfg.Routers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for q := range jobs {
				r.ask(q)
			}
		}()
	}
	rng := rand.New(rand.NewPCG(r.w.cfg.Seed, 7))
	pace(ctx, start, r.cfg.QueryRate, func() bool {
		q := r.w.NextQuery(rng)
		select {
		case jobs <- q:
		default:
			r.skipped.Add(1)
		}
		return true
	})
	close(jobs)
	wg.Wait()
}

// ask sends one query (with its own deadline, independent of the run's end, so that the
// queries in flight at the end still count) and records the outcome.
func (r *Runner) ask(q Query) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r.queries.Add(1)
	start := time.Now()
	reply, err := r.query(ctx, q.Request)
	took := time.Since(start)
	if err != nil {
		r.queryErrs.Add(1)
		r.noteErr(err)
		return
	}
	if int(reply.Status) < len(r.status) {
		r.status[reply.Status].Add(1)
	}
	r.sample(took)
	if reply.Status != schemas.QueryOK {
		return
	}
	best := uint32(0)
	for _, l := range reply.Lanes {
		best = max(best, l.Depth)
	}
	r.depthSum.Add(uint64(best))
	if best > 0 {
		r.hits.Add(1)
	}
	if q.HomeDC >= 0 {
		home := r.w.cfg.DCs[q.HomeDC]
		r.homeQueries.Add(1)
		for _, l := range reply.Lanes {
			if l.DcID == home && l.Depth > 0 {
				r.homeHits.Add(1)
			}
		}
	}
}

func (r *Runner) sample(d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seen++
	r.window = append(r.window, d)
	if len(r.lat) < r.cfg.MaxSamples {
		r.lat = append(r.lat, d)
	} else if k := r.sampler.Uint64N(r.seen); k < uint64(len(r.lat)) {
		r.lat[k] = d // reservoir sampling: every sample kept with equal probability
	}
}

func (r *Runner) noteErr(err error) {
	r.mu.Lock()
	if r.firstErr == nil {
		r.firstErr = err
	}
	r.mu.Unlock()
}

func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(p * float64(len(sorted)-1))
	return sorted[i]
}

func (r *Runner) progress(ctx context.Context, start time.Time) {
	t := time.NewTicker(r.cfg.ProgressInterval)
	defer t.Stop()
	var lastAcks, lastReplies uint64
	last := start
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			r.mu.Lock()
			win := r.window
			r.window = nil
			r.mu.Unlock()
			slices.Sort(win)
			acks := r.eventAcks.Load()
			replies := r.replies()
			dt := now.Sub(last).Seconds()
			fmt.Fprintf(r.cfg.Progress, "loadgen %5.1fs  events %9d (%7.0f/s)  queries %7d (%6.0f/s, unavailable %d, errors %d, skipped %d)  p50 %-10v p99 %v\n",
				now.Sub(start).Seconds(), acks, float64(acks-lastAcks)/dt, replies, float64(replies-lastReplies)/dt,
				r.status[schemas.QueryUnavailable].Load(), r.queryErrs.Load(), r.skipped.Load(),
				percentile(win, 0.5).Round(time.Microsecond), percentile(win, 0.99).Round(time.Microsecond))
			lastAcks, lastReplies, last = acks, replies, now
		}
	}
}

func (r *Runner) replies() uint64 {
	return r.status[0].Load() + r.status[1].Load() + r.status[2].Load()
}

func (r *Runner) report(elapsed time.Duration) Report {
	r.mu.Lock()
	lat := slices.Clone(r.lat)
	firstErr := r.firstErr
	r.mu.Unlock()
	slices.Sort(lat)
	rep := Report{
		Elapsed: elapsed,
		Events:  r.events.Load(), EventAcks: r.eventAcks.Load(), EventErrors: r.eventErrs.Load(),
		Queries: r.queries.Load(), Skipped: r.skipped.Load(), QueryErrors: r.queryErrs.Load(),
		OK: r.status[schemas.QueryOK].Load(), Unavailable: r.status[schemas.QueryUnavailable].Load(),
		Invalid: r.status[schemas.QueryInvalidRequest].Load(),
		Hits:    r.hits.Load(), HomeHits: r.homeHits.Load(), HomeQueries: r.homeQueries.Load(),
		P50: percentile(lat, 0.50), P90: percentile(lat, 0.90), P99: percentile(lat, 0.99),
		Workload:   r.w.Stats(),
		FirstError: firstErr,
	}
	if len(lat) > 0 {
		rep.Max = lat[len(lat)-1]
	}
	if s := elapsed.Seconds(); s > 0 {
		rep.EventsPerSec = float64(rep.EventAcks) / s
		rep.QueriesPerSec = float64(r.replies()) / s
	}
	if rep.OK > 0 {
		rep.MeanBestDepth = float64(r.depthSum.Load()) / float64(rep.OK)
	}
	return rep
}
