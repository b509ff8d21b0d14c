// Command plots draws the performance plots of docs/PERFORMANCE.md (PNG, gonum/plot) from the
// files `make bench` and `make bench-e2e` leave in the results directory:
//
//   - query-cost-vs-length.png, query-probes-vs-length.png: cost per query against the query
//     length (query-cost-vs-length.csv, written by tools/benchreport -csv), with the log2 fits;
//
//   - lag-cdf.png, lag-vs-load.png: delta produced -> visible latency (e2e-lag-load=*.json);
//
//   - query-latency-cdf.png, query-throughput-vs-load.png: queries over Kafka, HTTP and in
//     process (e2e-query-*-callers=*.json);
//
//   - soak-rss.png: the RSS of each process over `make soak`, with its faults (soak-faults.csv).
//
//     go -C tools build -o ../bin/ ./plots   # tools/ is a module of its own
//     bin/plots -dir docs/perf
//
// A plot whose inputs are missing is skipped with a note.
package main

import (
	"encoding/csv"
	"encoding/json"
	"flag"
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

var dir = flag.String("dir", "docs/perf", "results directory (input and output)")

func main() {
	flag.Parse()
	steps := []struct {
		name string
		fn   func() error
	}{
		{"query cost vs length", costVsLength},
		{"delta visibility latency", lagPlots},
		{"query paths", queryPlots},
		{"soak", soakPlot},
	}
	failed := false
	for _, s := range steps {
		if err := s.fn(); err != nil {
			fmt.Fprintf(os.Stderr, "plots: %s: %v\n", s.name, err)
			failed = true
		}
	}
	if failed {
		os.Exit(1)
	}
}

func save(p *plot.Plot, name string) error {
	out := filepath.Join(*dir, name)
	if err := p.Save(7*vg.Inch, 4.5*vg.Inch, out); err != nil {
		return err
	}
	fmt.Println("wrote", out)
	return nil
}

func styled(i int, l *plotter.Line, s *plotter.Scatter) {
	c := plotutil.Color(i)
	l.Color = c
	l.Width = vg.Points(1.5)
	if s != nil {
		s.Color = c
		s.Shape = plotutil.Shape(i)
	}
}

func newPlot(title, x, y string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = x
	p.Y.Label.Text = y
	p.Legend.Top = true
	p.Legend.Left = true
	p.Add(plotter.NewGrid())
	return p
}

// ---- cost vs length ----

type lenPoint struct{ l, y float64 }

func costVsLength() error {
	f, err := os.Open(filepath.Join(*dir, "query-cost-vs-length.csv"))
	if err != nil {
		fmt.Println("skip query-cost-vs-length.png:", err)
		return nil
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil {
		return err
	}
	series := map[string][]lenPoint{} // "shape/variant/unit"
	for _, r := range rows[1:] {
		l, _ := strconv.ParseFloat(r[3], 64)
		y, _ := strconv.ParseFloat(r[4], 64)
		k := r[0] + "/" + r[1] + "/" + r[2]
		series[k] = append(series[k], lenPoint{l, y})
	}
	draw := func(file, unit, ylabel string, logY bool, divide float64) error {
		p := newPlot("Cost per query vs query length (16 lanes, 2^20 buckets)", "query length L (blocks, log2 scale)", ylabel)
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = pow2Ticks{}
		if logY {
			p.Y.Scale = plot.LogScale{}
			p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
		}
		i := 0
		for _, shape := range []string{"shared", "divergent"} {
			for _, variant := range []string{"transposed", "baseline=linear"} {
				pts := series[shape+"/"+variant+"/"+unit]
				if len(pts) == 0 {
					continue
				}
				sort.Slice(pts, func(a, b int) bool { return pts[a].l < pts[b].l })
				xys := make(plotter.XYs, len(pts))
				for j, pt := range pts {
					xys[j].X, xys[j].Y = pt.l, pt.y/divide
				}
				l, s, err := plotter.NewLinePoints(xys)
				if err != nil {
					return err
				}
				styled(i, l, s)
				if variant != "transposed" {
					l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
				}
				p.Add(l, s)
				p.Legend.Add(shape+" "+variant, l, s)
				if variant == "transposed" {
					a, b := fitLog2(pts)
					fn := plotter.NewFunction(func(x float64) float64 { return (a + b*math.Log2(x)) / divide })
					fn.Color = plotutil.Color(i)
					fn.Dashes = []vg.Length{vg.Points(1), vg.Points(2)}
					fn.XMin, fn.XMax = pts[0].l, pts[len(pts)-1].l
					if logY && b > 0 && a+b*math.Log2(fn.XMin) <= 0 {
						// the fit is <= 0 at the shortest lengths: draw it where it is positive
						fn.XMin = math.Pow(2, -a/b) * 1.05
					}
					if logY && a+b*math.Log2(fn.XMax) <= 0 {
						i++
						continue
					}
					fn.Samples = 100
					p.Add(fn)
					p.Legend.Add(fmt.Sprintf("  fit %.0f + %.1f·log2 L", a/divide, b/divide), fn)
				}
				i++
			}
		}
		return save(p, file)
	}
	if err := draw("query-cost-vs-length.png", "ns/op", "µs per query (log scale)", true, 1000); err != nil {
		return err
	}
	return draw("query-probes-vs-length.png", "probes/query", "table probes per query (log scale)", true, 1)
}

func fitLog2(pts []lenPoint) (a, b float64) {
	n := float64(len(pts))
	var sx, sy, sxx, sxy float64
	for _, p := range pts {
		x := math.Log2(p.l)
		sx, sy, sxx, sxy = sx+x, sy+p.y, sxx+x*x, sxy+x*p.y
	}
	b = (n*sxy - sx*sy) / (n*sxx - sx*sx)
	return (sy - b*sx) / n, b
}

type pow2Ticks struct{}

func (pow2Ticks) Ticks(min, max float64) []plot.Tick {
	var ts []plot.Tick
	for v := 1.0; v <= max*1.0001; v *= 2 {
		if v >= min*0.9999 {
			ts = append(ts, plot.Tick{Value: v, Label: strconv.FormatFloat(v, 'f', 0, 64)})
		}
	}
	return ts
}

// ---- delta visibility ----

type lagResult struct {
	LoadFraction    float64      `json:"load_fraction"`
	OfferedRecPerS  float64      `json:"offered_records_per_sec"`
	AchievedRecPerS float64      `json:"achieved_records_per_sec"`
	P50ms           float64      `json:"p50_ms"`
	P99ms           float64      `json:"p99_ms"`
	P999ms          float64      `json:"p999_ms"`
	CDF             [][2]float64 `json:"cdf_ms"`
}

func readJSON[T any](pattern string) ([]T, []string, error) {
	files, err := filepath.Glob(filepath.Join(*dir, pattern))
	if err != nil {
		return nil, nil, err
	}
	sort.Strings(files)
	var out []T
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, nil, err
		}
		var v T
		if err := json.Unmarshal(b, &v); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", f, err)
		}
		out = append(out, v)
	}
	return out, files, nil
}

func cdfLine(i int, pts [][2]float64) (*plotter.Line, error) {
	xys := make(plotter.XYs, 0, len(pts))
	for _, p := range pts {
		if p[0] <= 0 {
			continue
		}
		xys = append(xys, plotter.XY{X: p[0], Y: p[1]})
	}
	l, err := plotter.NewLine(xys)
	if err != nil {
		return nil, err
	}
	styled(i, l, nil)
	return l, nil
}

func lagPlots() error {
	rs, _, err := readJSON[lagResult]("e2e-lag-load=*.json")
	if err != nil {
		return err
	}
	if len(rs) == 0 {
		fmt.Println("skip lag plots: no e2e-lag-load=*.json")
		return nil
	}
	sort.Slice(rs, func(a, b int) bool { return rs[a].LoadFraction < rs[b].LoadFraction })
	p := newPlot("Delta produced -> visible to queries (16-image deltas)", "latency (ms, log scale)", "fraction of deltas")
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Legend.Left = false
	p.Legend.Top = false
	for i, r := range rs {
		l, err := cdfLine(i, r.CDF)
		if err != nil {
			return err
		}
		p.Add(l)
		p.Legend.Add(fmt.Sprintf("%.0f%% load (%.0f deltas/s): p50 %.2f, p99 %.2f ms", r.LoadFraction*100, r.AchievedRecPerS, r.P50ms, r.P99ms), l)
	}
	target := plotter.NewFunction(func(float64) float64 { return 0.99 })
	target.Color = color.Gray{Y: 128}
	target.Dashes = []vg.Length{vg.Points(2), vg.Points(2)}
	p.Add(target)
	if err := save(p, "lag-cdf.png"); err != nil {
		return err
	}
	q := newPlot("Delta visibility latency vs load", "achieved delta rate (deltas/s)", "latency (ms)")
	var p50, p99, p999 plotter.XYs
	for _, r := range rs {
		p50 = append(p50, plotter.XY{X: r.AchievedRecPerS, Y: r.P50ms})
		p99 = append(p99, plotter.XY{X: r.AchievedRecPerS, Y: r.P99ms})
		p999 = append(p999, plotter.XY{X: r.AchievedRecPerS, Y: r.P999ms})
	}
	if err := plotutil.AddLinePoints(q, "p50", p50, "p99", p99, "p99.9", p999); err != nil {
		return err
	}
	lim := plotter.NewFunction(func(float64) float64 { return 5 })
	lim.Color = color.RGBA{R: 200, A: 255}
	lim.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
	q.Add(lim)
	q.Legend.Add("target p99 5 ms", lim)
	return save(q, "lag-vs-load.png")
}

// ---- query paths ----

type loadPoint struct {
	Path    string       `json:"path"`
	Callers int          `json:"callers"`
	QPS     float64      `json:"queries_per_sec"`
	P50us   float64      `json:"p50_us"`
	P99us   float64      `json:"p99_us"`
	CDF     [][2]float64 `json:"cdf_ms"`
}

func queryPlots() error {
	pts, _, err := readJSON[loadPoint]("e2e-query-*-callers=*.json")
	if err != nil {
		return err
	}
	if len(pts) == 0 {
		fmt.Println("skip query plots: no e2e-query-*.json")
		return nil
	}
	byPath := map[string][]loadPoint{}
	for _, p := range pts {
		byPath[p.Path] = append(byPath[p.Path], p)
	}
	paths := []string{"in-process", "http", "kafka"}
	// CDFs at 1 and 16 callers.
	c := newPlot("128-block query latency (16 lanes, 2^20 buckets)", "latency (ms, log scale)", "fraction of queries")
	c.X.Scale = plot.LogScale{}
	c.X.Tick.Marker = plot.LogTicks{Prec: -1}
	c.Legend.Top, c.Legend.Left = false, false
	i := 0
	for _, path := range paths {
		for _, p := range byPath[path] {
			if p.Callers != 1 && p.Callers != 16 {
				continue
			}
			l, err := cdfLine(i, p.CDF)
			if err != nil {
				return err
			}
			if p.Callers == 16 {
				l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
			}
			c.Add(l)
			c.Legend.Add(fmt.Sprintf("%s, %d caller(s): p50 %.0f µs, p99 %.0f µs", path, p.Callers, p.P50us, p.P99us), l)
			i++
		}
	}
	if err := save(c, "query-latency-cdf.png"); err != nil {
		return err
	}
	// Latency vs throughput, one curve per path (points = 1, 4, 16, 64 callers).
	t := newPlot("Query throughput vs load (closed loop, 1..64 callers)", "throughput (queries/s, log scale)", "latency (µs, log scale)")
	t.X.Scale, t.Y.Scale = plot.LogScale{}, plot.LogScale{}
	t.X.Tick.Marker, t.Y.Tick.Marker = plot.LogTicks{Prec: -1}, plot.LogTicks{Prec: -1}
	t.Legend.Top, t.Legend.Left = true, false
	i = 0
	for _, path := range paths {
		ps := byPath[path]
		if len(ps) == 0 {
			continue
		}
		sort.Slice(ps, func(a, b int) bool { return ps[a].Callers < ps[b].Callers })
		for _, q := range []string{"p50", "p99"} {
			xys := make(plotter.XYs, len(ps))
			for j, p := range ps {
				xys[j].X = p.QPS
				xys[j].Y = p.P50us
				if q == "p99" {
					xys[j].Y = p.P99us
				}
			}
			l, s, err := plotter.NewLinePoints(xys)
			if err != nil {
				return err
			}
			styled(i, l, s)
			if q == "p99" {
				l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
				s.Shape = draw.CrossGlyph{}
			}
			t.Add(l, s)
			t.Legend.Add(fmt.Sprintf("%s %s", path, q), l, s)
		}
		i++
	}
	return save(t, "query-throughput-vs-load.png")
}
