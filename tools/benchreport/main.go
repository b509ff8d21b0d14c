// Command benchreport summarises Go benchmark output (the files written by `make bench` and
// `make bench-e2e`): the median of every metric over the repetitions, each measured result as a
// ratio to its baseline from the same run, the targets of design §6 met or missed, and a
// log2 fit of the cost per query against the query length.
//
//	go -C tools build -o ../bin/ ./benchreport   # tools/ is a module of its own
//	bin/benchreport [-o report.md] [-csv dir] bench.txt [more.txt ...]
//
// Ratios are measured/baseline of the medians: below 1 the measured variant is cheaper (for
// time-like units), above 1 it costs more. Rates (units ending in "/s") are compared the same
// way, so above 1 is better for them; the report says which way each row reads.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// series is one benchmark's values of one unit over the repetitions.
type series struct {
	values []float64
}

func (s *series) median() float64 {
	v := slices.Clone(s.values)
	slices.Sort(v)
	n := len(v)
	if n == 0 {
		return math.NaN()
	}
	if n%2 == 1 {
		return v[n/2]
	}
	return (v[n/2-1] + v[n/2]) / 2
}

func (s *series) spread() (lo, hi float64) {
	lo, hi = math.Inf(1), math.Inf(-1)
	for _, x := range s.values {
		lo, hi = math.Min(lo, x), math.Max(hi, x)
	}
	return lo, hi
}

type bench struct {
	name  string // package-qualified short name, without the -GOMAXPROCS suffix
	units map[string]*series
	order []string
}

type results struct {
	byName map[string]*bench
	order  []string
	config []string // "key: value" lines (machine, load average)
}

var procSuffix = regexp.MustCompile(`-\d+$`)

func parse(r io.Reader, res *results) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	pkg := ""
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "pkg: ") {
			pkg = filepath.Base(strings.TrimSpace(strings.TrimPrefix(line, "pkg: ")))
			continue
		}
		if k, v, ok := strings.Cut(line, ": "); ok && !strings.ContainsAny(k, " \t") && k != "" && !strings.HasPrefix(k, "Benchmark") {
			switch k {
			case "goos", "goarch", "pkg":
			default:
				res.config = append(res.config, k+": "+strings.TrimSpace(v))
			}
			continue
		}
		if !strings.HasPrefix(line, "Benchmark") {
			continue
		}
		f := strings.Fields(line)
		if len(f) < 4 || len(f)%2 != 0 {
			continue
		}
		if _, err := strconv.ParseInt(f[1], 10, 64); err != nil {
			continue
		}
		name := procSuffix.ReplaceAllString(strings.TrimPrefix(f[0], "Benchmark"), "")
		if pkg != "" {
			name = pkg + "." + name
		}
		b := res.byName[name]
		if b == nil {
			b = &bench{name: name, units: map[string]*series{}}
			res.byName[name] = b
			res.order = append(res.order, name)
		}
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				continue
			}
			u := f[i+1]
			s := b.units[u]
			if s == nil {
				s = &series{}
				b.units[u] = s
				b.order = append(b.order, u)
			}
			s.values = append(s.values, v)
		}
	}
	return sc.Err()
}

// baselinesOf returns the same-run baselines of a measured benchmark (empty when it is a
// baseline itself or has none).
func baselinesOf(name string, res *results) []string {
	dir, last := name, ""
	if i := strings.LastIndex(name, "/"); i >= 0 {
		dir, last = name[:i], name[i+1:]
	}
	var out []string
	add := func(n string) {
		if _, ok := res.byName[n]; ok && n != name {
			out = append(out, n)
		}
	}
	switch {
	case strings.HasPrefix(last, "baseline=") || strings.HasPrefix(last, "impl=panmari") || strings.Contains(name, "/goavro/"):
		return nil
	case last == "impl=ckf":
		add(dir + "/impl=panmari")
	case strings.HasSuffix(name, "ConsumerProbeDRAM/batch8-prefetch"):
		add(dir + "/plain")
	case strings.HasSuffix(name, "ConsumerProbeDRAM/plain"):
		return nil
	case strings.HasPrefix(last, "kernel=swar") && res.byName[dir+"/kernel=avx2"] != nil:
		return nil // a baseline of the avx2 kernel
	}
	if strings.HasPrefix(last, "kernel=") {
		add(dir + "/kernel=swar")
	}
	// Schemas: the fast codec against goavro.
	if strings.HasPrefix(name, "schemas.") {
		switch last {
		case "encode", "decode":
			add(dir + "/goavro/" + last)
		}
	}
	// Siblings named baseline=...
	prefix := dir + "/baseline="
	for _, n := range res.order {
		if strings.HasPrefix(n, prefix) && !strings.Contains(n[len(prefix):], "/") {
			add(n)
		}
	}
	return out
}

// comparable units: a ratio is reported for these when both sides have them.
var ratioUnits = []string{"ns/op", "p50-ns", "p99-ns", "ms/install", "ns/block", "search-ns/query", "probes/query",
	"records/s", "images/s", "M-images/s", "p50-µs", "p99-µs", "queries/s", "ms/restore"}

func isRate(u string) bool { return strings.HasSuffix(u, "/s") }

// target is one target of design §6 checked on a benchmark metric.
type target struct {
	id, what string
	match    *regexp.Regexp
	unit     string
	le       bool // value must be <= limit (else >=)
	limit    float64
}

func t(id, what, pattern, unit string, le bool, limit float64) target {
	return target{id: id, what: what, match: regexp.MustCompile(pattern), unit: unit, le: le, limit: limit}
}

var targets = []target{
	t("T1", "producer lookup, 2^16 buckets (ns)", `producer\.ProducerLookup/buckets=2\^16/(hit|miss)/impl=ckf$`, "ns/op", true, 15),
	t("T1", "producer insert at 90 % load, 2^16 (ns)", `producer\.ProducerInsertAt90/buckets=2\^16/impl=ckf$`, "ns/op", true, 50),
	t("T1", "producer FPR at 90 % load", `producer\.ProducerLookup/buckets=2\^16/miss/impl=ckf$`, "fpr", true, 1.3e-4),
	t("T2", "producer lookup, 2^20 buckets, unbatched (ns)", `producer\.ProducerLookup/buckets=2\^20/(hit|miss)/impl=ckf$`, "ns/op", true, 70),
	t("T2", "producer insert at 90 % load, 2^20 (ns)", `producer\.ProducerInsertAt90/buckets=2\^20/impl=ckf$`, "ns/op", true, 200),
	t("T3", "transposed probe, L2-resident (ns)", `index\.ConsumerProbeCache/kernel=[a-z0-9]+$`, "ns/op", true, 30),
	t("T4", "transposed probe 2^20, batch 8 + prefetch (ns/block)", `index\.ConsumerProbeDRAM/batch8-prefetch$`, "ns/block", true, 100),
	t("T5", "128-block query p50, shared prefixes (ns)", `index\.ConsumerQuery128/shared/transposed$`, "p50-ns", true, 8000),
	t("T5", "128-block query p50, divergent lanes (ns)", `index\.ConsumerQuery128/divergent/transposed$`, "p50-ns", true, 15000),
	t("T5", "128-block query p99, no ingest (ns)", `index\.ConsumerQuery128/(shared|divergent)/transposed$`, "p99-ns", true, 50000),
	t("T6", "queries/s/core, shared, 128 blocks (ns/query <= 10,000)", `index\.ConsumerQuery128/shared/transposed$`, "ns/op", true, 10000),
	t("T6", "queries/s/core, divergent, 128 blocks (ns/query <= 16,667)", `index\.ConsumerQuery128/divergent/transposed$`, "ns/op", true, 16667),
	t("T7", "delta apply, atomic (M images/s)", `index\.ConsumerDeltaApply/ingestor$`, "M-images/s", false, 30),
	t("T7", "delta apply, plain stores (M images/s)", `index\.ConsumerDeltaApply/baseline=plain-store$`, "M-images/s", false, 60),
	t("T8", "snapshot install, one lane 2^20 (ms)", `index\.ConsumerSnapshotInstall/ingestor$`, "ms/install", true, 15),
	t("T10", "sequence chain (ns/block)", `producer\.ProducerHashing/sequence_chain_128_blocks$`, "ns/block", true, 10),
	t("T10", "CKF addressing (ns/probe)", `producer\.ProducerHashing/probe$`, "ns/op", true, 10),
	t("T11", "allocations per query", `index\.ConsumerQuery128/(shared|divergent)/transposed$`, "allocs/op", true, 0),
	t("T11", "allocations per query, any length", `index\.QueryCostVsLength/.*/transposed$`, "allocs/op", true, 0),
	t("T11", "allocations per delta (ingestor)", `index\.ConsumerDeltaApply/ingestor$`, "allocs/op", true, 1),
	// End to end (make bench-e2e).
	t("T9", "lane ingest / raw consume, deltas <= 64 images", `streams\.E2EIngestVsRaw/images=(16|64)$`, "ingest/raw", false, 0.8),
	t("T9", "lane ingest / raw consume, deltas >= 256 images", `streams\.E2EIngestVsRaw/images=(256|[0-9]{4,})$`, "ingest/raw", false, 0.5),
	t("T9", "delta produced -> visible p99 at 50 % load (ms)", `streams\.E2EDeltaVisibleLatency/load=50%$`, "p99-ms", true, 5),
	t("T9", "produce ack -> visible p99 at 50 % load (ms; the indexer's share)", `streams\.E2EDeltaVisibleLatency/load=50%$`, "ack-to-visible-p99-ms", true, 5),
	t("T8", "snapshot install end to end, per lane of 2^20 (ms)", `streams\.E2ERestore16Lanes2to20$`, "ms/lane", true, 60),
	t("design §6.1", "lane ingest / raw consume (>= 0.8)", `streams\.E2EIngestVsRaw/images=[0-9]+$`, "ingest/raw", false, 0.8),
	t("design §6.1", "HTTP query p99 on loopback, 1 caller (µs, well under 1 ms)", `streams\.E2EQueryHTTP/callers=1$`, "p99-µs", true, 1000),
	t("T6", "in-process queries/s, 1 caller, shared 128-block (>= 100k/core)", `streams\.E2EQueryInProcess/callers=1$`, "queries/s", false, 100000),
}

func fmtNum(v float64) string {
	switch a := math.Abs(v); {
	case math.IsNaN(v):
		return "n/a"
	case a == 0:
		return "0"
	case a >= 1e6:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case a >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case a >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	case a >= 0.01:
		return strconv.FormatFloat(v, 'f', 3, 64)
	default:
		return strconv.FormatFloat(v, 'g', 3, 64)
	}
}

func main() {
	out := flag.String("o", "", "also write the report (Markdown) to this file")
	csvDir := flag.String("csv", "", "write CSV extracts (medians, query cost vs length) into this directory")
	flag.Parse()
	res := &results{byName: map[string]*bench{}}
	for _, p := range flag.Args() {
		f, err := os.Open(p)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		err = parse(f, res)
		f.Close()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	if len(res.order) == 0 {
		fmt.Fprintln(os.Stderr, "benchreport: no benchmark results in", flag.Args())
		os.Exit(1)
	}
	var w strings.Builder
	report(&w, res)
	fmt.Print(w.String())
	if *out != "" {
		err := os.MkdirAll(filepath.Dir(*out), 0o755)
		if err == nil {
			err = os.WriteFile(*out, []byte(w.String()), 0o644)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	if *csvDir != "" {
		if err := writeCSV(*csvDir, res); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
}

func report(w *strings.Builder, res *results) {
	if len(res.config) > 0 {
		fmt.Fprintln(w, "Run:")
		fmt.Fprintln(w)
		for _, c := range res.config {
			fmt.Fprintf(w, "    %s\n", c)
		}
		fmt.Fprintln(w)
	}
	// 1. Every result, medians.
	fmt.Fprintln(w, "## Medians (n = repetitions; min..max in brackets)")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| benchmark | n | metrics |")
	fmt.Fprintln(w, "|---|---|---|")
	for _, name := range res.order {
		b := res.byName[name]
		var parts []string
		n := 0
		for _, u := range b.order {
			s := b.units[u]
			n = max(n, len(s.values))
			if u == "B/op" {
				continue
			}
			m := s.median()
			lo, hi := s.spread()
			if len(s.values) > 1 && lo != hi && (u == "ns/op" || isRate(u) || strings.HasPrefix(u, "p50") || strings.HasPrefix(u, "p99")) {
				parts = append(parts, fmt.Sprintf("%s %s [%s..%s]", fmtNum(m), u, fmtNum(lo), fmtNum(hi)))
			} else {
				parts = append(parts, fmt.Sprintf("%s %s", fmtNum(m), u))
			}
		}
		fmt.Fprintf(w, "| %s | %d | %s |\n", name, n, strings.Join(parts, ", "))
	}
	fmt.Fprintln(w)

	// 2. Ratios to the same-run baselines.
	fmt.Fprintln(w, "## Ratios to same-run baselines (medians; measured / baseline)")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "For time units a ratio below 1 means the measured variant is faster (speed-up = 1/ratio); for rates (…/s) above 1 is better.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| measured | baseline | metric | measured | baseline | ratio | speed-up |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|")
	for _, name := range res.order {
		for _, base := range baselinesOf(name, res) {
			mb, bb := res.byName[name], res.byName[base]
			for _, u := range ratioUnits {
				ms, bs := mb.units[u], bb.units[u]
				if ms == nil || bs == nil {
					continue
				}
				m, bv := ms.median(), bs.median()
				if bv == 0 || m == 0 {
					continue
				}
				r := m / bv
				speed := 1 / r
				if isRate(u) {
					speed = r
				}
				fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s× |\n", name, strings.TrimPrefix(base, commonPrefix(name, base)), u,
					fmtNum(m), fmtNum(bv), fmtNum(r), fmtNum(speed))
			}
		}
	}
	fmt.Fprintln(w)

	// 3. Targets.
	fmt.Fprintln(w, "## Targets (design §6 of docs/design.md)")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| target | what | benchmark | median | limit | verdict |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|")
	for _, tg := range targets {
		for _, name := range res.order {
			if !tg.match.MatchString(name) {
				continue
			}
			s := res.byName[name].units[tg.unit]
			if s == nil {
				continue
			}
			v := s.median()
			ok := v <= tg.limit
			op := "≤"
			if !tg.le {
				ok, op = v >= tg.limit, "≥"
			}
			verdict := "met"
			if !ok {
				gap := v / tg.limit
				if tg.limit == 0 {
					verdict = fmt.Sprintf("MISSED (%s)", fmtNum(v))
				} else {
					verdict = fmt.Sprintf("MISSED (%s× the limit)", fmtNum(gap))
				}
			}
			fmt.Fprintf(w, "| %s | %s | %s | %s %s | %s %s | %s |\n", tg.id, tg.what, name, fmtNum(v), tg.unit, op, fmtNum(tg.limit), verdict)
		}
	}
	fmt.Fprintln(w)

	// 4. Cost vs length fits.
	fits := lengthFits(res)
	if len(fits) > 0 {
		fmt.Fprintln(w, "## Cost per query vs query length L (QueryCostVsLength)")
		fmt.Fprintln(w)
		fmt.Fprintln(w, "Least-squares fits over L = 8..1024: y = a + b·log2(L) (R² log2), y = a + b·L (R² linear), and the combined")
		fmt.Fprintln(w, "y = a' + b'·log2(L) + c'·L, whose c' is the per-block linear term (the sequence-hash chain for the production query).")
		fmt.Fprintln(w)
		fmt.Fprintln(w, "| shape / variant | metric | a | b (per doubling) | R² log2 | R² linear | b' (per doubling) | c' (per block) | R² combined | y(1024)/y(8) |")
		fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|")
		for _, f := range fits {
			fmt.Fprintf(w, "| %s | %s | %s | %s | %.3f | %.3f | %s | %s | %.3f | %s |\n", f.series, f.unit, fmtNum(f.a), fmtNum(f.b), f.r2log, f.r2lin,
				fmtNum(f.c3b), fmtNum(f.c3c), f.r2both, fmtNum(f.growth))
		}
		fmt.Fprintln(w)
	}
}

func commonPrefix(a, b string) string {
	i := 0
	for i < len(a) && i < len(b) && a[i] == b[i] {
		i++
	}
	if j := strings.LastIndex(a[:i], "/"); j >= 0 {
		return a[:j+1]
	}
	return ""
}

var lenName = regexp.MustCompile(`^index\.QueryCostVsLength/shape=([a-z]+)/L=(\d+)/(.+)$`)

type point struct{ l, y float64 }

type fit struct {
	series, unit          string
	a, b, r2log, r2lin    float64
	c3a, c3b, c3c, r2both float64 // y = a + b·log2 L + c·L
	growth                float64
	pts                   []point
	variant, shape        string
}

func lengthSeries(res *results) map[[3]string][]point {
	out := map[[3]string][]point{}
	for _, name := range res.order {
		m := lenName.FindStringSubmatch(name)
		if m == nil {
			continue
		}
		l, _ := strconv.ParseFloat(m[2], 64)
		for _, u := range []string{"ns/op", "search-ns/query", "probes/query"} {
			if s := res.byName[name].units[u]; s != nil {
				k := [3]string{m[1], m[3], u}
				out[k] = append(out[k], point{l, s.median()})
			}
		}
	}
	return out
}

func lengthFits(res *results) []fit {
	var fits []fit
	ser := lengthSeries(res)
	keys := make([][3]string, 0, len(ser))
	for k := range ser {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		return strings.Join(keys[i][:], "/") < strings.Join(keys[j][:], "/")
	})
	for _, k := range keys {
		pts := ser[k]
		if len(pts) < 3 {
			continue
		}
		sort.Slice(pts, func(i, j int) bool { return pts[i].l < pts[j].l })
		a, b, r2 := linfit(pts, math.Log2)
		_, _, r2l := linfit(pts, func(x float64) float64 { return x })
		f := fit{series: k[0] + " / " + k[1], unit: k[2], a: a, b: b, r2log: r2, r2lin: r2l,
			growth: pts[len(pts)-1].y / pts[0].y, pts: pts, shape: k[0], variant: k[1]}
		f.c3a, f.c3b, f.c3c, f.r2both = fit3(pts)
		fits = append(fits, f)
	}
	return fits
}

// fit3 fits y = a + b·log2(x) + c·x by least squares (normal equations) and returns a, b, c
// and R².
func fit3(pts []point) (a, b, c, r2 float64) {
	var m [3][4]float64
	for _, p := range pts {
		x := [3]float64{1, math.Log2(p.l), p.l}
		for i := 0; i < 3; i++ {
			for j := 0; j < 3; j++ {
				m[i][j] += x[i] * x[j]
			}
			m[i][3] += x[i] * p.y
		}
	}
	for col := 0; col < 3; col++ { // Gauss-Jordan with partial pivoting
		piv := col
		for r := col + 1; r < 3; r++ {
			if math.Abs(m[r][col]) > math.Abs(m[piv][col]) {
				piv = r
			}
		}
		m[col], m[piv] = m[piv], m[col]
		if m[col][col] == 0 {
			return math.NaN(), math.NaN(), math.NaN(), math.NaN()
		}
		for r := 0; r < 3; r++ {
			if r == col {
				continue
			}
			f := m[r][col] / m[col][col]
			for k := col; k < 4; k++ {
				m[r][k] -= f * m[col][k]
			}
		}
	}
	a, b, c = m[0][3]/m[0][0], m[1][3]/m[1][1], m[2][3]/m[2][2]
	var mean, ssr, sst float64
	for _, p := range pts {
		mean += p.y
	}
	mean /= float64(len(pts))
	for _, p := range pts {
		e := p.y - (a + b*math.Log2(p.l) + c*p.l)
		ssr += e * e
		sst += (p.y - mean) * (p.y - mean)
	}
	if sst == 0 {
		return a, b, c, 1
	}
	return a, b, c, 1 - ssr/sst
}

// linfit fits y = a + b·g(x) by least squares and returns a, b and R².
func linfit(pts []point, g func(float64) float64) (a, b, r2 float64) {
	n := float64(len(pts))
	var sx, sy, sxx, sxy float64
	for _, p := range pts {
		x := g(p.l)
		sx += x
		sy += p.y
		sxx += x * x
		sxy += x * p.y
	}
	b = (n*sxy - sx*sy) / (n*sxx - sx*sx)
	a = (sy - b*sx) / n
	mean := sy / n
	var ssr, sst float64
	for _, p := range pts {
		e := p.y - (a + b*g(p.l))
		ssr += e * e
		d := p.y - mean
		sst += d * d
	}
	if sst == 0 {
		return a, b, 1
	}
	return a, b, 1 - ssr/sst
}

func writeCSV(dir string, res *results) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var b strings.Builder
	b.WriteString("benchmark,unit,median,min,max,n\n")
	for _, name := range res.order {
		bb := res.byName[name]
		for _, u := range bb.order {
			s := bb.units[u]
			lo, hi := s.spread()
			fmt.Fprintf(&b, "%s,%s,%g,%g,%g,%d\n", name, u, s.median(), lo, hi, len(s.values))
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "bench-medians.csv"), []byte(b.String()), 0o644); err != nil {
		return err
	}
	ser := lengthSeries(res)
	if len(ser) == 0 {
		return nil
	}
	b.Reset()
	b.WriteString("shape,variant,unit,L,median\n")
	keys := make([][3]string, 0, len(ser))
	for k := range ser {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return strings.Join(keys[i][:], "/") < strings.Join(keys[j][:], "/") })
	for _, k := range keys {
		pts := ser[k]
		sort.Slice(pts, func(i, j int) bool { return pts[i].l < pts[j].l })
		for _, p := range pts {
			fmt.Fprintf(&b, "%s,%s,%s,%g,%g\n", k[0], k[1], k[2], p.l, p.y)
		}
	}
	return os.WriteFile(filepath.Join(dir, "query-cost-vs-length.csv"), []byte(b.String()), 0o644)
}
