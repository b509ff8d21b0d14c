// Command evalplots draws the plots of docs/EVALUATION.md (PNG, gonum/plot) from the report.json
// that processor replay --out DIR writes:
//
//   - hit-rate.png: the hit rate over (replayed) time of every policy, headline start, first seed,
//     and of the live ckf run;
//
//   - visible-cdf.png: the CDF of the live run's event-to-visible latency;
//
//   - dc-load.png: each DC's outstanding prefill work over time, live ckf and load policy;
//
//   - staleness.png: the ckf rule's hit rate and mean TTFT against the index's age (the
//     stale-index runs, processor replay --delays), from 0 to the longest delay on a log scale.
//
//     go -C tools build -o ../bin/ ./evalplots   # tools/ is a module of its own
//     bin/evalplots -dir eval-out
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"image/color"
	"os"
	"path/filepath"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

var dir = flag.String("dir", "eval-out", "directory of report.json; the plots are written next to it")

// result and report are the fields of processor replay's report.json (app/replay) the plots use.
type result struct {
	Policy    string      `json:"policy"`
	Seed      uint64      `json:"seed"`
	Start     string      `json:"start"`
	HitRate   float64     `json:"hit_rate"`
	BucketS   float64     `json:"bucket_s"`
	HitSeries []float64   `json:"hit_series"`
	DCLoad    [][]float64 `json:"dc_load"`
}

// row is one line of the report's table (app/replay Row).
type row struct {
	Policy   string  `json:"policy"`
	HitRate  float64 `json:"hit_rate"`
	TTFTMean float64 `json:"ttft_mean_s"`
}

type report struct {
	Rows     []row     `json:"rows"`
	Trace    string    `json:"trace"`
	Speedup  float64   `json:"speedup"`
	Compress float64   `json:"compress"`
	Headline string    `json:"headline_start"`
	Runs     []*result `json:"runs"`
	Live     *struct {
		Result       *result   `json:"result"`
		VisibleP50Ms float64   `json:"visible_p50_ms"`
		VisibleP99Ms float64   `json:"visible_p99_ms"`
		VisibleCDFMs []float64 `json:"visible_cdf_ms"`
	} `json:"live"`
}

func main() {
	flag.Parse()
	b, err := os.ReadFile(filepath.Join(*dir, "report.json"))
	if err != nil {
		fail(err)
	}
	var rep report
	if err := json.Unmarshal(b, &rep); err != nil {
		fail(fmt.Errorf("report.json: %w", err))
	}
	for _, step := range []func(*report) error{hitPlot, visiblePlot, loadPlot, stalenessPlot} {
		if err := step(&rep); err != nil {
			fail(err)
		}
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "evalplots:", err)
	os.Exit(1)
}

func save(p *plot.Plot, name string) error {
	path := filepath.Join(*dir, name)
	if err := p.Save(9*vg.Inch, 5*vg.Inch, path); err != nil {
		return err
	}
	fmt.Println("wrote", path)
	return nil
}

// series returns a result's per-bucket values as points at the bucket centres in minutes,
// skipping empty buckets (negative values).
func series(r *result, val func(int) float64) plotter.XYs {
	var xy plotter.XYs
	for i := range r.HitSeries {
		v := val(i)
		if v < 0 {
			continue
		}
		xy = append(xy, plotter.XY{X: (float64(i) + 0.5) * r.BucketS / 60, Y: v})
	}
	return xy
}

func hitPlot(rep *report) error {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("Block hit rate over time (%s, arrivals %g×, %s start)", filepath.Base(rep.Trace), rep.Compress, rep.Headline)
	p.X.Label.Text, p.Y.Label.Text = "replayed time (min)", "hit rate (cached prefix blocks / requested)"
	p.Legend.Top = true
	var args []any
	for _, r := range rep.Runs {
		if r.Start != rep.Headline || r.Seed != rep.Runs[0].Seed {
			continue
		}
		args = append(args, fmt.Sprintf("%s (%.3f)", r.Policy, r.HitRate), series(r, func(i int) float64 { return r.HitSeries[i] }))
	}
	if rep.Live != nil && rep.Live.Result != nil {
		r := rep.Live.Result
		args = append(args, fmt.Sprintf("ckf live (%.3f)", r.HitRate), series(r, func(i int) float64 { return r.HitSeries[i] }))
	}
	if err := plotutil.AddLines(p, args...); err != nil {
		return err
	}
	return save(p, "hit-rate.png")
}

func visiblePlot(rep *report) error {
	if rep.Live == nil || len(rep.Live.VisibleCDFMs) == 0 {
		fmt.Println("skip visible-cdf.png: no live run")
		return nil
	}
	lv := rep.Live
	p := plot.New()
	p.Title.Text = fmt.Sprintf("Event to visible, engine event -> first answer covering it (live at %g× real time)", rep.Speedup)
	p.X.Label.Text, p.Y.Label.Text = "latency (ms)", "fraction of stores"
	var xy plotter.XYs
	n := float64(len(lv.VisibleCDFMs))
	for i, v := range lv.VisibleCDFMs {
		xy = append(xy, plotter.XY{X: v, Y: float64(i+1) / n})
	}
	l, err := plotter.NewLine(xy)
	if err != nil {
		return err
	}
	l.Color = plotutil.Color(0)
	p.Add(l)
	p.Legend.Add(fmt.Sprintf("p50 %.1f ms, p99 %.1f ms", lv.VisibleP50Ms, lv.VisibleP99Ms), l)
	p.Legend.Top, p.Legend.Left = false, false
	p99 := plotter.NewFunction(func(float64) float64 { return 0.99 })
	p99.Color = color.Gray{Y: 128}
	p99.Dashes = []vg.Length{vg.Points(2), vg.Points(2)}
	p.Add(p99)
	return save(p, "visible-cdf.png")
}

func loadPlot(rep *report) error {
	var runs []*result
	if rep.Live != nil && rep.Live.Result != nil {
		runs = append(runs, rep.Live.Result)
	}
	for _, r := range rep.Runs {
		if r.Policy == "load" && r.Start == rep.Headline && r.Seed == rep.Runs[0].Seed {
			runs = append(runs, r)
		}
	}
	if len(runs) == 0 || len(runs[0].DCLoad) == 0 {
		fmt.Println("skip dc-load.png: no run")
		return nil
	}
	p := plot.New()
	p.Title.Text = "Outstanding prefill work per DC (mean at arrivals)"
	p.X.Label.Text, p.Y.Label.Text = "replayed time (min)", "outstanding prefill (s, summed over the DC's workers)"
	p.Legend.Top = true
	var args []any
	for k, r := range runs {
		name := r.Policy
		if k == 0 && rep.Live != nil && r == rep.Live.Result {
			name = "ckf live"
		}
		for d := range r.DCLoad[0] {
			args = append(args, fmt.Sprintf("%s DC %d", name, d), series(r, func(i int) float64 {
				if r.HitSeries[i] < 0 {
					return -1
				}
				return r.DCLoad[i][d]
			}))
		}
	}
	if err := plotutil.AddLines(p, args...); err != nil {
		return err
	}
	return save(p, "dc-load.png")
}

// stalePrefix names the stale-index runs' rows: ckf-stale-<delay> (app/replay, eval.NewStaleIndex).
const stalePrefix = "ckf-stale-"

// stalenessPlot draws the ckf rule's hit rate (left axis) and mean TTFT (scaled onto the same
// axis, labelled in the legend) against the injected delay, on a log scale in milliseconds; a
// delay of 0 is drawn at 0.1 ms.
func stalenessPlot(rep *report) error {
	var hit, ttft plotter.XYs
	maxTTFT := 0.0
	for _, r := range rep.Rows {
		if !strings.HasPrefix(r.Policy, stalePrefix) {
			continue
		}
		d, err := time.ParseDuration(strings.TrimPrefix(r.Policy, stalePrefix))
		if err != nil {
			return fmt.Errorf("row %s: %w", r.Policy, err)
		}
		ms := max(float64(d)/float64(time.Millisecond), 0.1)
		hit = append(hit, plotter.XY{X: ms, Y: r.HitRate})
		ttft = append(ttft, plotter.XY{X: ms, Y: r.TTFTMean})
		maxTTFT = max(maxTTFT, r.TTFTMean)
	}
	if len(hit) < 2 {
		fmt.Println("skip staleness.png: fewer than two stale-index runs")
		return nil
	}
	maxHit := 0.0
	for _, p := range hit {
		maxHit = max(maxHit, p.Y)
	}
	scale := maxHit / maxTTFT // TTFT drawn on the hit-rate axis, its top at the top hit rate
	for i := range ttft {
		ttft[i].Y *= scale
	}
	p := plot.New()
	p.Title.Text = fmt.Sprintf("ckf on a stale index: %s, arrivals %g×", filepath.Base(rep.Trace), rep.Compress)
	p.X.Label.Text = "index age (injected visibility delay, ms; 0 drawn at 0.1)"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Y.Label.Text = "hit rate"
	p.Y.Min = 0
	if err := plotutil.AddLinePoints(p, "hit rate", hit, fmt.Sprintf("mean TTFT (×%.3f: %.2f s at the top)", scale, maxTTFT), ttft); err != nil {
		return err
	}
	return save(p, "staleness.png")
}
