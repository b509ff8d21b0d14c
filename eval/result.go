package eval

import "slices"

// Result is one policy's replay of one trace.
type Result struct {
	Policy string `json:"policy"`
	Seed   uint64 `json:"seed"`
	// Start is "warm" or "cold" (Config.Warm).
	Start string `json:"start"`
	// Requests were placed; Completed finished decoding (every request does by the end).
	Requests  int `json:"requests"`
	Completed int `json:"completed"`
	// RequestedBlocks are the requests' blocks; HitBlocks those found cached on the chosen
	// worker (its cached prefix); HitRate = HitBlocks / RequestedBlocks.
	RequestedBlocks int     `json:"requested_blocks"`
	HitBlocks       int     `json:"hit_blocks"`
	HitRate         float64 `json:"hit_rate"`
	// InputTokens are the prompts' tokens; PrefillTokens those computed (not cached).
	InputTokens   int64 `json:"input_tokens"`
	PrefillTokens int64 `json:"prefill_tokens"`
	// TTFT is the simulated time to first token in seconds: mean, p50, p99, max.
	TTFTMean float64 `json:"ttft_mean_s"`
	TTFTP50  float64 `json:"ttft_p50_s"`
	TTFTP99  float64 `json:"ttft_p99_s"`
	TTFTMax  float64 `json:"ttft_max_s"`
	// Imbalance is the mean, over arrivals with any outstanding work, of max / mean of the DCs'
	// outstanding prefill seconds.
	Imbalance float64 `json:"load_imbalance"`
	// Utilisation is the share of the workers' time spent prefilling, over the replay.
	Utilisation float64 `json:"utilisation"`
	// StoredEvents, RemovedEvents, StoredBlocks and EvictedBlocks count the engines' KV events
	// and the blocks they carry; Overflow counts blocks stored beyond a full cache whose every
	// block was pinned.
	StoredEvents  int `json:"stored_events"`
	RemovedEvents int `json:"removed_events"`
	StoredBlocks  int `json:"stored_blocks"`
	EvictedBlocks int `json:"evicted_blocks"`
	Overflow      int `json:"overflow_blocks"`
	// BucketSeconds is the width of the series' buckets in simulated seconds; HitSeries the hit
	// rate of the requests arriving in each bucket (-1 for a bucket without requests); DCLoad each DC's mean outstanding prefill
	// seconds at the arrivals of each bucket ([bucket][dc]).
	// TwoStage is set for a two-stage policy (WorkerPolicy): its agreement with exact knowledge.
	TwoStage *TwoStage `json:"two_stage,omitempty"`

	BucketSeconds float64     `json:"bucket_s"`
	HitSeries     []float64   `json:"hit_series"`
	DCLoad        [][]float64 `json:"dc_load"`

	ttft                 []float64
	bucketReq, bucketHit []int
	loadN                []int
	imbSum               float64
	imbN                 int
}

// TwoStage counts a two-stage policy's choices against exact knowledge's, made with the same
// random draws: SameDC requests went to the DC the ckf rule picks on the exact depths (the cost
// oracle's choice); SameWorker requests went to the worker the exact-knowledge worker rule picks
// inside the DC the policy chose.
type TwoStage struct {
	Requests   int `json:"requests"`
	SameDC     int `json:"same_dc"`
	SameWorker int `json:"same_worker"`
}

func (r *Result) noteTwoStage(sameDC, sameWorker bool) {
	if r.TwoStage == nil {
		r.TwoStage = &TwoStage{}
	}
	t := r.TwoStage
	t.Requests++
	if sameDC {
		t.SameDC++
	}
	if sameWorker {
		t.SameWorker++
	}
}

func newResult(policy string, cfg Config, dur float64) *Result {
	r := &Result{Policy: policy, Seed: cfg.Seed, Start: "cold", BucketSeconds: dur / float64(cfg.Buckets)}
	if cfg.Warm {
		r.Start = "warm"
	}
	r.bucketReq, r.bucketHit, r.loadN = make([]int, cfg.Buckets), make([]int, cfg.Buckets), make([]int, cfg.Buckets)
	r.HitSeries = make([]float64, cfg.Buckets)
	r.DCLoad = make([][]float64, cfg.Buckets)
	for i := range r.DCLoad {
		r.DCLoad[i] = make([]float64, cfg.DCs)
	}
	return r
}

func (r *Result) bucket(t float64) int {
	return min(max(int(t/r.BucketSeconds), 0), len(r.bucketReq)-1)
}

func (r *Result) noteArrival(v *View) {
	r.Requests++
	b := r.bucket(v.Now)
	r.loadN[b]++
	var sum, mx float64
	for d, l := range v.Load {
		r.DCLoad[b][d] += l
		sum += l
		mx = max(mx, l)
	}
	if sum > 0 {
		r.imbSum += mx / (sum / float64(len(v.Load)))
		r.imbN++
	}
}

func (r *Result) noteHit(f *Fleet, j *job) {
	n := len(j.keys)
	r.RequestedBlocks += n
	r.HitBlocks += j.hit
	r.InputTokens += int64(j.req.InputTokens)
	r.PrefillTokens += int64(f.uncached(j.req, j.hit))
	b := r.bucket(j.arrival)
	r.bucketReq[b] += n
	r.bucketHit[b] += j.hit
}

func (r *Result) noteTTFT(s float64) { r.ttft = append(r.ttft, s) }

func (r *Result) finish(f *Fleet) {
	if r.RequestedBlocks > 0 {
		r.HitRate = float64(r.HitBlocks) / float64(r.RequestedBlocks)
	}
	for b := range r.bucketReq {
		if r.bucketReq[b] > 0 {
			r.HitSeries[b] = float64(r.bucketHit[b]) / float64(r.bucketReq[b])
		} else {
			r.HitSeries[b] = -1
		}
		for d := range r.DCLoad[b] {
			if r.loadN[b] > 0 {
				r.DCLoad[b][d] /= float64(r.loadN[b])
			}
		}
	}
	if r.imbN > 0 {
		r.Imbalance = r.imbSum / float64(r.imbN)
	}
	slices.Sort(r.ttft)
	if n := len(r.ttft); n > 0 {
		var s float64
		for _, x := range r.ttft {
			s += x
		}
		r.TTFTMean = s / float64(n)
		r.TTFTP50 = Quantile(r.ttft, 0.5)
		r.TTFTP99 = Quantile(r.ttft, 0.99)
		r.TTFTMax = r.ttft[n-1]
	}
	var busy float64
	for _, ws := range f.workers {
		for _, w := range ws {
			busy += w.busyFor
		}
	}
	if span := max(f.now, f.dur); span > 0 {
		r.Utilisation = busy / (span * float64(f.cfg.DCs*f.cfg.Workers))
	}
	r.ttft = nil
}

// Quantile returns the q-quantile of sorted (nearest rank below), 0 for an empty slice.
func Quantile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[int(q*float64(len(sorted)-1))]
}
