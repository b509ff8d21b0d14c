package replay

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/ckf-stream/ckf-stream/eval"
)

// Live is the live ckf replay: the simulated result and what the pipeline did.
type Live struct {
	Result *eval.Result `json:"result"`
	// Query is the path the router took ("kafka" or "http"); Events the KV events' path
	// ("direct": KvEvent records produced by the engines; "bridge": vLLM's ZeroMQ protocol through
	// one bridge per worker).
	Query  string `json:"query"`
	Events string `json:"events"`
	// ElapsedSeconds is the replay's wall time; QueriesPerSec the router's queries per second
	// over it; QueryP50Ms, QueryP99Ms their latency.
	ElapsedSeconds float64 `json:"elapsed_s"`
	QueriesPerSec  float64 `json:"queries_per_s"`
	QueryP50Ms     float64 `json:"query_p50_ms"`
	QueryP99Ms     float64 `json:"query_p99_ms"`
	// Queries were asked; Answered got an OK reply; QueryErrors got none; Unavailable got an
	// UNAVAILABLE reply; FallBacks were placed without an answer (by load alone).
	Queries     int    `json:"queries"`
	Answered    int    `json:"answered"`
	QueryErrors int    `json:"query_errors"`
	Unavailable int    `json:"unavailable"`
	FallBacks   int    `json:"fallbacks"`
	FirstError  string `json:"first_error,omitempty"`
	// Accuracy compares the answers the router placed its requests on with the exact state.
	Accuracy
	// Decisions counts the requests whose deepest exact prefix is at least 2 blocks; of them
	// AgreeCostOracle chose a DC of least exact cost (the cost oracle's choice up to ties) and
	// AsDeepAsDepthOracle a DC holding a prefix as deep as the depth oracle's pick.
	Decisions           int `json:"decisions"`
	AgreeCostOracle     int `json:"agree_cost_oracle"`
	AsDeepAsDepthOracle int `json:"as_deep_as_depth_oracle"`
	// Event-to-visible: stores that made blocks resident in their DC, from the event to the
	// first answer that covers them. VisibleEvents were seen; NotSeen timed out;
	// RemovedBeforeSeen left the DC first; StillPending were unresolved at the end.
	VisibleEvents     int       `json:"visible_events"`
	NotSeen           int       `json:"not_seen"`
	RemovedBeforeSeen int       `json:"removed_before_seen"`
	StillPending      int       `json:"still_pending"`
	VisibleP50Ms      float64   `json:"visible_p50_ms"`
	VisibleP99Ms      float64   `json:"visible_p99_ms"`
	VisibleMaxMs      float64   `json:"visible_max_ms"`
	VisibleCDFMs      []float64 `json:"visible_cdf_ms"`
	// MaxLagRecords is the largest lane lag (records) sampled each second.
	MaxLagRecords int64 `json:"max_lag_records"`
	// LateP99Ms, LateMaxMs: how far behind its simulated clock the replay ran (p99 and max over
	// its steps); a replay that keeps up stays near 0.
	LateP99Ms float64 `json:"late_p99_ms"`
	LateMaxMs float64 `json:"late_max_ms"`
	// LoadStart and LoadEnd are the machine's load averages (/proc/loadavg: 1, 5 and 15
	// minutes) when the live replay started and ended; empty where the system does not say.
	LoadStart string `json:"loadavg_start"`
	LoadEnd   string `json:"loadavg_end"`
	// EventsProduced KV events; EventErrors failed to encode or produce.
	EventsProduced uint64 `json:"events_produced"`
	EventErrors    uint64 `json:"event_errors"`
	// Workers is the second stage: the worker stage's answers and how the worker choices made
	// on them compare with exact knowledge's.
	Workers *WorkerStage `json:"worker_stage"`
	// Ages compares every searched lane's age in the answers with the truth the replay knows.
	Ages AgeAccuracy `json:"ages"`
	// Regions are the regions of a replay over several (--regions), in order; WANDelayMs the
	// one-way delay between two of them. Across regions the figures above are those of the
	// answers the requests were placed on (request n on region n mod N's) and, for
	// visibility, of region a's indexer.
	Regions    []*RegionLive `json:"regions,omitempty"`
	WANDelayMs float64       `json:"wan_delay_ms,omitempty"`

	queryLat             []float64
	ageErr, ageErrBehind []float64 // milliseconds: age minus truth
}

// Accuracy counts (answer, DC) pairs compared with the exact state at query time: Exact equal,
// UnderReports shallower (UnderExplained of them at a block whose store was not yet visible to
// the answering indexer), OverReports deeper (OverExplained at a block removed from the DC
// within the last second), LeftOut not searched: the answer gave the DC's lane as stale or
// unavailable (its lane state says so, and a router reads it as no estimate, not as depth 0), so
// there is no depth to compare. Compared is their sum.
type Accuracy struct {
	Compared       int `json:"compared"`
	LeftOut        int `json:"left_out_stale_or_unavailable"`
	Exact          int `json:"exact"`
	UnderReports   int `json:"under_reports"`
	UnderExplained int `json:"under_explained_by_visibility"`
	OverReports    int `json:"over_reports"`
	OverExplained  int `json:"over_explained_by_recent_removal"`
}

func (a *Accuracy) add(b Accuracy) {
	a.Compared += b.Compared
	a.LeftOut += b.LeftOut
	a.Exact += b.Exact
	a.UnderReports += b.UnderReports
	a.UnderExplained += b.UnderExplained
	a.OverReports += b.OverReports
	a.OverExplained += b.OverExplained
}

// DCAccuracy is one region's answers for one DC.
type DCAccuracy struct {
	DC int `json:"dc"`
	// Local: the DC's lane is published in the answering region; otherwise it is read from
	// the mirror's copy.
	Local bool `json:"local"`
	Accuracy
}

// RegionLive is one region of a replay over several: its indexer's answers to every request,
// per DC, against the exact state; how soon its indexer showed the stores of its own DCs and of
// the other regions' (event to visible, local and remote); and the bytes that crossed the WAN
// out of it against the bytes of its DCs' KV events, which stay in the region.
type RegionLive struct {
	Alias string `json:"alias"`
	// DCs are the DC indices (= lanes) whose engines, relays and worker stages run in the
	// region.
	DCs []int `json:"dcs"`
	// Queries were asked of the region's indexer (every request); Answered got an OK reply.
	Queries    int     `json:"queries"`
	Answered   int     `json:"answered"`
	QueryP50Ms float64 `json:"query_p50_ms"`
	QueryP99Ms float64 `json:"query_p99_ms"`
	Accuracy
	PerDC []DCAccuracy `json:"per_dc"`
	// VisibleLocal and VisibleRemote: event to visible in the region's indexer for stores of
	// its own DCs and of the other regions' (their lanes through the mirror).
	VisibleLocal  Visibility `json:"visible_local"`
	VisibleRemote Visibility `json:"visible_remote"`
	// KVBytes are the key and value bytes of the KV events of the region's DCs. LaneBytesOut
	// are the bytes (key, value and headers of each record) of its lane topic and snapshot
	// index copied to the other regions, all of them together: SnapshotBytesOut of snapshot
	// chunks, DeltaBytesOut of deltas, the rest heartbeats, drain markers and index entries.
	// LaneBytesPerRegion is LaneBytesOut per other region, LaneOverKV LaneBytesPerRegion /
	// KVBytes and DeltaOverKV the deltas' share of it. ControlBytesOut are its control topic's
	// bytes copied out (its indexer's snapshot requests).
	KVBytes            uint64  `json:"kv_bytes"`
	LaneBytesOut       uint64  `json:"lane_bytes_out"`
	SnapshotBytesOut   uint64  `json:"snapshot_bytes_out"`
	DeltaBytesOut      uint64  `json:"delta_bytes_out"`
	LaneBytesPerRegion float64 `json:"lane_bytes_per_region"`
	LaneOverKV         float64 `json:"lane_over_kv"`
	DeltaOverKV        float64 `json:"delta_over_kv"`
	ControlBytesOut    uint64  `json:"control_bytes_out"`
	// MirroredRecords were copied out of the region; MirrorFailures failed to be written.
	MirroredRecords uint64 `json:"mirrored_records"`
	MirrorFailures  uint64 `json:"mirror_failures"`

	queryLat []float64
}

// AgeAccuracy is how the ages in the answers (schemas.LaneState.AgeMillis) compare with the
// truth: for a lane of an answer, how long before the reply the oldest store of its DC that the
// lane did not yet show was produced (0 when it showed every store produced before the reply),
// as the replay's prober sees stores become visible (to about a millisecond). The error is the
// age minus the truth: positive when the answer says the lane is older than it is (the relay
// last vouched for its DC some time ago: an idle lane's heartbeat period bounds that), negative
// when it says the lane is fresher than it is, the direction a router cannot see.
type AgeAccuracy struct {
	// Compared counts (answer, searched lane) pairs with an age; Behind those whose lane lacked
	// a store produced before the reply (truth > 0).
	Compared int `json:"compared"`
	Behind   int `json:"behind"`
	// WithinTwoMs: |error| <= 2 ms; Understated: error < -2 ms. Of Behind: the same.
	WithinTwoMs       int `json:"within_2ms"`
	Understated       int `json:"understated"`
	BehindWithinTwoMs int `json:"behind_within_2ms"`
	BehindUnderstated int `json:"behind_understated"`
	// The error's quantiles (ms, signed), over all and over Behind.
	ErrP1Ms        float64 `json:"err_p1_ms"`
	ErrP50Ms       float64 `json:"err_p50_ms"`
	ErrP99Ms       float64 `json:"err_p99_ms"`
	ErrMaxMs       float64 `json:"err_max_ms"`
	BehindErrP1Ms  float64 `json:"behind_err_p1_ms"`
	BehindErrP50Ms float64 `json:"behind_err_p50_ms"`
	BehindErrP99Ms float64 `json:"behind_err_p99_ms"`
}

func ageAccuracy(all, behind []float64) AgeAccuracy {
	count := func(xs []float64) (within, under int) {
		for _, x := range xs {
			switch {
			case x < -2:
				under++
			case x <= 2:
				within++
			}
		}
		return within, under
	}
	a := AgeAccuracy{Compared: len(all), Behind: len(behind)}
	a.WithinTwoMs, a.Understated = count(all)
	a.BehindWithinTwoMs, a.BehindUnderstated = count(behind)
	all, behind = slices.Clone(all), slices.Clone(behind)
	slices.Sort(all)
	slices.Sort(behind)
	if len(all) > 0 {
		a.ErrP1Ms, a.ErrP50Ms, a.ErrP99Ms, a.ErrMaxMs = eval.Quantile(all, 0.01), eval.Quantile(all, 0.5), eval.Quantile(all, 0.99), all[len(all)-1]
	}
	if len(behind) > 0 {
		a.BehindErrP1Ms, a.BehindErrP50Ms, a.BehindErrP99Ms = eval.Quantile(behind, 0.01), eval.Quantile(behind, 0.5), eval.Quantile(behind, 0.99)
	}
	return a
}

// WorkerStage is the live run's second stage: the ckf router asks the chosen DC's worker-stage
// replica for every worker's device depth and picks the worker on the answer.
type WorkerStage struct {
	// Query is the router's path to the worker stage ("http": POST /v1/worker-matches).
	Query string `json:"query"`
	// Queries were asked (one per request); Answered got an OK answer; QueryErrors got none;
	// Unavailable got an UNAVAILABLE answer; FallBacks were placed by load alone (every depth 0).
	Queries     int    `json:"queries"`
	Answered    int    `json:"answered"`
	QueryErrors int    `json:"query_errors"`
	Unavailable int    `json:"unavailable"`
	FallBacks   int    `json:"fallbacks"`
	FirstError  string `json:"first_error,omitempty"`
	// ForeignSources are answered sources that are not a worker of the DC asked (none expected).
	ForeignSources int     `json:"foreign_sources"`
	QueryP50Ms     float64 `json:"query_p50_ms"`
	QueryP99Ms     float64 `json:"query_p99_ms"`
	// Accuracy counts (answer, worker) pairs compared with the worker's exact cached prefix at
	// query time: under-reports explained by a store on that worker not yet visible in the
	// worker stage, over-reports by a block the worker removed within the last second.
	Accuracy
	// Agreement with exact knowledge, with the same random draws (eval.TwoStage): of Requests,
	// SameDC went to the DC the ckf rule picks on the exact depths (the cost oracle's choice),
	// SameWorker to the worker the exact-knowledge worker rule picks inside the DC chosen.
	Requests        int     `json:"requests"`
	SameDC          int     `json:"same_dc"`
	SameWorker      int     `json:"same_worker"`
	SameDCShare     float64 `json:"same_dc_share"`
	SameWorkerShare float64 `json:"same_worker_share"`
	// Visible is the worker stage's event-to-visible latency: every store of a worker, from the
	// engine's event to the first answer of the DC's replica (asked in process, every
	// millisecond) whose device depth for that worker covers the store's whole chain.
	Visible Visibility `json:"visible"`
	// MaxLagRecords is the largest replica lag (records) sampled each second.
	MaxLagRecords int64 `json:"max_lag_records"`

	queryLat []float64
}

// Row is one policy and start, over the seeds.
type Row struct {
	Policy string `json:"policy"`
	Start  string `json:"start"`
	Seeds  int    `json:"seeds"`
	// HitRate is the mean over the seeds; HitMin, HitMax the extremes; Spread = (max-min)/mean.
	HitRate float64 `json:"hit_rate"`
	HitMin  float64 `json:"hit_min"`
	HitMax  float64 `json:"hit_max"`
	Spread  float64 `json:"spread"`
	// Means over the seeds.
	PrefillTokens float64 `json:"prefill_tokens"`
	TTFTMean      float64 `json:"ttft_mean_s"`
	TTFTP99       float64 `json:"ttft_p99_s"`
	Imbalance     float64 `json:"load_imbalance"`
	Utilisation   float64 `json:"utilisation"`
}

// Report is the replay's outcome.
type Report struct {
	Trace       string          `json:"trace"`
	TraceStats  eval.TraceStats `json:"trace_stats"`
	FromSeconds float64         `json:"from_s"`
	// WindowSeconds is the replayed window of trace time (0: to the end); Requests in it.
	WindowSeconds float64 `json:"window_s"`
	Requests      int     `json:"requests"`
	// Speedup is the live replay's clock against real time; Compress the arrivals' compression.
	Speedup  float64     `json:"speedup"`
	Compress float64     `json:"compress"`
	Fleet    eval.Config `json:"fleet"`
	CPUs     int         `json:"cpus"`
	// Headline is the start (warm or cold) of the live run and of the headline ratios.
	Headline string `json:"headline_start"`
	// Rows: every simulated policy, warm and cold, then the live ckf run (one seed).
	Rows []Row `json:"rows"`
	// Ratios of the live ckf hit rate to the simulated policies' (headline start).
	CKFOverDepthOracle float64 `json:"ckf_over_depth_oracle"`
	CKFOverCostOracle  float64 `json:"ckf_over_cost_oracle"`
	CKFOverLoad        float64 `json:"ckf_over_load"`
	// The same ratios against the oracles' runs with the live run's seed (same tie draws):
	// where every answer was exact, the live ckf run makes the cost oracle's every choice, and
	// SameAsCostOracle says so (equal hit blocks and prefill tokens).
	CKFOverDepthOracleSameSeed float64 `json:"ckf_over_depth_oracle_same_seed"`
	CKFOverCostOracleSameSeed  float64 `json:"ckf_over_cost_oracle_same_seed"`
	SameAsCostOracle           bool    `json:"same_as_cost_oracle"`
	// Runs are every simulated run (for the series); Live the live ckf run.
	Runs []*eval.Result `json:"runs"`
	Live *Live          `json:"live"`
}

func newReport(o Options) *Report {
	rep := &Report{Trace: o.Trace, TraceStats: o.Stats, FromSeconds: o.From.Seconds(), WindowSeconds: o.Window.Seconds(),
		Requests: len(o.Requests), Speedup: o.Speedup, Compress: o.Compress, Fleet: o.Fleet, CPUs: runtime.NumCPU(), Headline: "cold"}
	if o.Fleet.Warm {
		rep.Headline = "warm"
	}
	return rep
}

func (rep *Report) printHeader(w io.Writer) {
	st, f := rep.TraceStats, rep.Fleet
	fmt.Fprintf(w, "trace %s: %d requests over %.0f s, %d blocks (%d distinct prefix blocks, %d ids not prefix-consistent, %d reordered); mean prompt %.0f tokens, answer %.0f\n",
		rep.Trace, st.Requests, st.DurationMs/1000, st.Blocks, st.UniqueBlocks, st.InconsistentIDs, st.Reordered, st.MeanInput, st.MeanOutput)
	fmt.Fprintf(w, "window: %d requests from %.0f s (length %s), arrivals compressed %g×; live replay at %g× real time\n",
		rep.Requests, rep.FromSeconds, windowText(rep.WindowSeconds), rep.Compress, rep.Speedup)
	fmt.Fprintf(w, "fleet: %d DCs × %d workers; KV cache %d blocks × %d tokens per worker (%d blocks in all, against %d distinct blocks in the whole trace); prefill %.0f tokens/s per worker, decode %.0f tokens/s per request; λ %.2f; %s start\n",
		f.DCs, f.Workers, f.CacheBlocks, f.BlockTokens, f.DCs*f.Workers*f.CacheBlocks, st.UniqueBlocks, f.PrefillRate, f.DecodeRate, f.LoadWeight, rep.Headline)
}

func windowText(s float64) string {
	if s == 0 {
		return "to the end"
	}
	return (time.Duration(s * float64(time.Second))).String()
}

// simulate runs every simulated policy: the oracles, load, round-robin and random, warm and cold,
// over the seeds, and the ckf rule on a stale index for each delay (headline start).
func (rep *Report) simulate(o Options) error {
	names := []string{eval.PolicyDepth, eval.PolicyCostOracle, eval.PolicyLoad, eval.PolicyRoundRobin, eval.PolicyRandom}
	for _, warm := range []bool{o.Fleet.Warm, !o.Fleet.Warm} {
		for _, name := range names {
			var runs []*eval.Result
			for s := range o.Seeds {
				cfg := o.Fleet
				cfg.Warm, cfg.Seed = warm, o.Fleet.Seed+uint64(s)
				p, err := eval.NewPolicy(name, cfg)
				if err != nil {
					return err
				}
				res, err := eval.Simulate(o.Requests, cfg, p)
				if err != nil {
					return err
				}
				runs = append(runs, res)
			}
			rep.Runs = append(rep.Runs, runs...)
			rep.Rows = append(rep.Rows, row(runs))
		}
	}
	for _, d := range o.Delays {
		var runs []*eval.Result
		for s := range o.Seeds {
			cfg := o.Fleet
			cfg.Seed = o.Fleet.Seed + uint64(s)
			res, err := eval.Simulate(o.Requests, cfg, eval.NewStaleIndex(cfg, d))
			if err != nil {
				return err
			}
			runs = append(runs, res)
		}
		rep.Runs = append(rep.Runs, runs...)
		rep.Rows = append(rep.Rows, row(runs))
	}
	return nil
}

func row(runs []*eval.Result) Row {
	r := Row{Policy: runs[0].Policy, Start: runs[0].Start, Seeds: len(runs), HitMin: runs[0].HitRate, HitMax: runs[0].HitRate}
	n := float64(len(runs))
	for _, x := range runs {
		r.HitRate += x.HitRate / n
		r.HitMin, r.HitMax = min(r.HitMin, x.HitRate), max(r.HitMax, x.HitRate)
		r.PrefillTokens += float64(x.PrefillTokens) / n
		r.TTFTMean += x.TTFTMean / n
		r.TTFTP99 += x.TTFTP99 / n
		r.Imbalance += x.Imbalance / n
		r.Utilisation += x.Utilisation / n
	}
	if r.HitRate > 0 {
		r.Spread = (r.HitMax - r.HitMin) / r.HitRate
	}
	return r
}

// RowOf returns the row of a policy and start.
func (rep *Report) RowOf(policy, start string) (Row, bool) {
	for _, r := range rep.Rows {
		if r.Policy == policy && r.Start == start {
			return r, true
		}
	}
	return Row{}, false
}

func (rep *Report) finish() {
	if rep.Live == nil {
		return
	}
	live := row([]*eval.Result{rep.Live.Result})
	rep.Rows = append(rep.Rows, live)
	ratio := func(p string) float64 {
		r, ok := rep.RowOf(p, rep.Headline)
		if !ok || r.HitRate == 0 {
			return 0
		}
		return live.HitRate / r.HitRate
	}
	rep.CKFOverDepthOracle, rep.CKFOverCostOracle, rep.CKFOverLoad = ratio(eval.PolicyDepth), ratio(eval.PolicyCostOracle), ratio(eval.PolicyLoad)
	lr := rep.Live.Result
	for _, r := range rep.Runs {
		if r.Seed != lr.Seed || r.Start != lr.Start || r.HitRate == 0 {
			continue
		}
		switch r.Policy {
		case eval.PolicyDepth:
			rep.CKFOverDepthOracleSameSeed = lr.HitRate / r.HitRate
		case eval.PolicyCostOracle:
			rep.CKFOverCostOracleSameSeed = lr.HitRate / r.HitRate
			rep.SameAsCostOracle = r.HitBlocks == lr.HitBlocks && r.PrefillTokens == lr.PrefillTokens
		}
	}
}

func (rep *Report) print(w io.Writer) {
	fmt.Fprintf(w, "\nreplay report: %s, %d requests, arrivals compressed %g×, live at %g× real time, %d DCs × %d workers, %d-block caches\n",
		rep.Trace, rep.Requests, rep.Compress, rep.Speedup, rep.Fleet.DCs, rep.Fleet.Workers, rep.Fleet.CacheBlocks)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "policy\tstart\tseeds\thit rate\tspread\tprefill tokens\tTTFT mean s\tTTFT p99 s\timbalance\tutilisation\t")
	for i, r := range rep.Rows {
		if rep.Live != nil && i == len(rep.Rows)-1 {
			r.Policy = "ckf live, two-stage"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%.4f\t%.1f%%\t%.0f\t%.3f\t%.3f\t%.2f\t%.3f\t\n", r.Policy, r.Start, r.Seeds, r.HitRate, 100*r.Spread,
			r.PrefillTokens, r.TTFTMean, r.TTFTP99, r.Imbalance, r.Utilisation)
	}
	_ = tw.Flush()
	lv := rep.Live
	if lv == nil {
		return
	}
	fmt.Fprintf(w, "ckf (live, %s start) hit rate: %.3f × oracle-depth, %.3f × oracle-cost, %.2f × load (means over the seeds); same seed: %.3f × oracle-depth, %.3f × oracle-cost",
		rep.Headline, rep.CKFOverDepthOracle, rep.CKFOverCostOracle, rep.CKFOverLoad, rep.CKFOverDepthOracleSameSeed, rep.CKFOverCostOracleSameSeed)
	if rep.SameAsCostOracle {
		fmt.Fprint(w, " (the cost oracle's very choices)")
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "KV events path: %s\n", lv.Events)
	fmt.Fprintf(w, "ckf queries over %s: %d asked, %d answered, %d errors, %d unavailable; %.1f queries/s; latency p50 %.2f ms, p99 %.2f ms\n",
		lv.Query, lv.Queries, lv.Answered, lv.QueryErrors, lv.Unavailable, lv.QueriesPerSec, lv.QueryP50Ms, lv.QueryP99Ms)
	fmt.Fprintf(w, "index accuracy (per DC per answer, against the exact state at query time): %d compared, %d exact, %d under-reports (%d explained by events not yet visible, %d not), %d over-reports (%d at a block removed within 1 s), %d left out as stale or unavailable\n",
		lv.Compared, lv.Exact, lv.UnderReports, lv.UnderExplained, lv.UnderReports-lv.UnderExplained, lv.OverReports, lv.OverExplained, lv.LeftOut)
	fmt.Fprintf(w, "choices where the deepest prefix is ≥ 2 blocks: %d; same cost as the cost oracle's %d (%.1f%%); as deep as the depth oracle's %d (%.1f%%)\n",
		lv.Decisions, lv.AgreeCostOracle, pct(lv.AgreeCostOracle, lv.Decisions), lv.AsDeepAsDepthOracle, pct(lv.AsDeepAsDepthOracle, lv.Decisions))
	fmt.Fprintf(w, "event to visible (engine event -> first answer covering it): p50 %.2f ms, p99 %.2f ms, max %.2f ms over %d stores (%d never seen, %d removed first, %d pending)\n",
		lv.VisibleP50Ms, lv.VisibleP99Ms, lv.VisibleMaxMs, lv.VisibleEvents, lv.NotSeen, lv.RemovedBeforeSeen, lv.StillPending)
	if a := lv.Ages; a.Compared > 0 {
		fmt.Fprintf(w, "lane ages against the truth (age minus truth, per searched lane per answer): %d compared, %d within 2 ms (%.1f%%), %d understated by more than 2 ms; error p1 %.1f, p50 %.1f, p99 %.1f, max %.1f ms\n",
			a.Compared, a.WithinTwoMs, pct(a.WithinTwoMs, a.Compared), a.Understated, a.ErrP1Ms, a.ErrP50Ms, a.ErrP99Ms, a.ErrMaxMs)
		fmt.Fprintf(w, "  of them with a store not yet visible at the reply: %d, %d within 2 ms (%.1f%%), %d understated; error p1 %.1f, p50 %.1f, p99 %.1f ms\n",
			a.Behind, a.BehindWithinTwoMs, pct(a.BehindWithinTwoMs, a.Behind), a.BehindUnderstated, a.BehindErrP1Ms, a.BehindErrP50Ms, a.BehindErrP99Ms)
	}
	if ws := lv.Workers; ws != nil {
		fmt.Fprintf(w, "worker stage queries over %s: %d asked, %d answered, %d errors, %d unavailable; latency p50 %.2f ms, p99 %.2f ms\n",
			ws.Query, ws.Queries, ws.Answered, ws.QueryErrors, ws.Unavailable, ws.QueryP50Ms, ws.QueryP99Ms)
		fmt.Fprintf(w, "worker stage accuracy (per worker per answer, against the exact state at query time): %d compared, %d exact, %d under-reports (%d explained by events not yet visible, %d not), %d over-reports (%d at a block removed within 1 s)\n",
			ws.Compared, ws.Exact, ws.UnderReports, ws.UnderExplained, ws.UnderReports-ws.UnderExplained, ws.OverReports, ws.OverExplained)
		fmt.Fprintf(w, "two-stage agreement with exact knowledge (same draws): DC %d of %d (%.2f%%), worker given the DC %d of %d (%.2f%%)\n",
			ws.SameDC, ws.Requests, 100*ws.SameDCShare, ws.SameWorker, ws.Requests, 100*ws.SameWorkerShare)
		v := ws.Visible
		fmt.Fprintf(w, "worker stage event to visible (engine event -> first replica answer covering it on its worker): p50 %.2f ms, p99 %.2f ms, max %.2f ms over %d stores (%d never seen, %d removed first, %d pending); max replica lag %d records\n",
			v.P50Ms, v.P99Ms, v.MaxMs, v.Events, v.NotSeen, v.RemovedBeforeSeen, v.StillPending, ws.MaxLagRecords)
	}
	if len(lv.Regions) > 0 {
		printRegions(w, lv)
	}
	fmt.Fprintf(w, "machine: %d CPUs; load average %s at the start, %s at the end\n", rep.CPUs, lv.LoadStart, lv.LoadEnd)
	fmt.Fprintf(w, "pipeline: %d KV events produced (%d failed) in %.1f s (%.0f/s); max lane lag %d records; replay behind its clock p99 %.1f ms, max %.1f ms\n",
		lv.EventsProduced, lv.EventErrors, lv.ElapsedSeconds, float64(lv.EventsProduced)/lv.ElapsedSeconds, lv.MaxLagRecords, lv.LateP99Ms, lv.LateMaxMs)
}

func pct(a, b int) float64 {
	if b == 0 {
		return 0
	}
	return 100 * float64(a) / float64(b)
}

// write stores the report as dir/report.json and returns its path.
func (rep *Report) write(dir string) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	b, err := json.MarshalIndent(rep, "", " ")
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, "report.json")
	return path, os.WriteFile(path, append(b, '\n'), 0o644)
}

// loadAverage returns the first three fields of /proc/loadavg, or "" where it cannot be read.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := bytes.Fields(b)
	if len(f) < 3 {
		return ""
	}
	return string(bytes.Join(f[:3], []byte(" ")))
}

// printRegions prints the regions of a replay over several: per region its indexer's answers
// against the exact state, per DC; event to visible of its own DCs' stores and of the other
// regions'; and the bytes out of it over the WAN against its DCs' KV bytes.
func printRegions(w io.Writer, lv *Live) {
	fmt.Fprintf(w, "regions: %d, each its own cluster, lanes mirrored between them with %.0f ms one-way WAN delay; every request asked of every region's indexer\n",
		len(lv.Regions), lv.WANDelayMs)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "region\tDCs\tanswered\texact\tunder (unexpl.)\tover (unexpl.)\tvisible local p50/p99 ms\tvisible remote p50/p99 ms\tnever seen\t")
	for _, rl := range lv.Regions {
		fmt.Fprintf(tw, "%s\t%v\t%d/%d\t%d/%d\t%d (%d)\t%d (%d)\t%.1f / %.1f\t%.1f / %.1f\t%d\t\n",
			rl.Alias, rl.DCs, rl.Answered, rl.Queries, rl.Exact, rl.Compared, rl.UnderReports, rl.UnderReports-rl.UnderExplained,
			rl.OverReports, rl.OverReports-rl.OverExplained, rl.VisibleLocal.P50Ms, rl.VisibleLocal.P99Ms,
			rl.VisibleRemote.P50Ms, rl.VisibleRemote.P99Ms, rl.VisibleLocal.NotSeen+rl.VisibleRemote.NotSeen)
	}
	_ = tw.Flush()
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "region\tKV bytes (stay)\tlane bytes out\tsnapshots\tdeltas\tper other region\tlane/KV\tdeltas/KV\tcontrol bytes out\tmirror failures\t")
	for _, rl := range lv.Regions {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%.0f\t%.3f\t%.3f\t%d\t%d\t\n", rl.Alias, rl.KVBytes, rl.LaneBytesOut, rl.SnapshotBytesOut,
			rl.DeltaBytesOut, rl.LaneBytesPerRegion, rl.LaneOverKV, rl.DeltaOverKV, rl.ControlBytesOut, rl.MirrorFailures)
	}
	_ = tw.Flush()
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "region\tDC\tlane is\tcompared\texact\tunder (unexpl.)\tover (unexpl.)\t")
	for _, rl := range lv.Regions {
		for _, d := range rl.PerDC {
			where := "remote"
			if d.Local {
				where = "local"
			}
			fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%d\t%d (%d)\t%d (%d)\t\n", rl.Alias, d.DC, where, d.Compared, d.Exact,
				d.UnderReports, d.UnderReports-d.UnderExplained, d.OverReports, d.OverReports-d.OverExplained)
		}
	}
	_ = tw.Flush()
}
