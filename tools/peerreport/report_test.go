package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestGoRowName(t *testing.T) {
	for in, want := range map[string]string{
		"BenchmarkPeerQuery128/shared-2":             "query128/shared",
		"BenchmarkPeerSnapshotInstall-16":            "snapshot-install",
		"BenchmarkPeerSeqhashChain":                  "seqhash-chain",
		"BenchmarkPeerProducerStore/2^16@90-2":       "producer-store/2^16@90",
		"BenchmarkPeerProducerStore/2^16/0-50-2":     "producer-store/2^16/0-50",
		"BenchmarkPeerDeltaApply-2":                  "delta-apply",
		"BenchmarkPeerProducerStore/2^16/0-50-2-ish": "producer-store/2^16/0-50-2-ish",
	} {
		if got, ok := goRowName(in); !ok || got != want {
			t.Errorf("goRowName(%q) = %q, %v; want %q", in, got, ok, want)
		}
	}
	for _, in := range []string{"BenchmarkConsumerQuery128/shared-2", "BenchmarkPeer", "PASS"} {
		if got, ok := goRowName(in); ok {
			t.Errorf("goRowName(%q) = %q, want not a peer row", in, got)
		}
	}
}

func TestMedian(t *testing.T) {
	for _, c := range []struct {
		in   []float64
		want float64
	}{
		{[]float64{5}, 5},
		{[]float64{9, 1, 5}, 5},
		{[]float64{4, 1, 3, 2}, 2.5},
		{[]float64{7, 7, 1, 100, 7}, 7},
	} {
		in := append([]float64(nil), c.in...)
		if got := median(c.in); got != c.want {
			t.Errorf("median(%v) = %v, want %v", in, got, c.want)
		}
		for i := range in {
			if in[i] != c.in[i] {
				t.Fatalf("median reordered its input: %v", c.in)
			}
		}
	}
	if !math.IsNaN(median(nil)) {
		t.Error("median of nothing is not NaN")
	}
}

const goRound = `goos: linux
pkg: github.com/ckf-stream/ckf-stream/bench/peer
BenchmarkPeerQuery128/shared-2   	   82957	      5437 ns/op	74489314667390 fixture-sum	        51.17 load-pct	      4769 p50-ns	      8015 p99-ns	       0 B/op	       0 allocs/op
BenchmarkPeerProducerStore/2^16/0-50-2    	       5	  70332264 ns/op	167279307193173 fixture-sum	        50.00 load-pct	       536.6 ns/event
BenchmarkConsumerQuery128/shared-2 10 5 ns/op
PASS
`

const rustRound = `{"side":"rust","name":"query128/shared","iterations":57344,"metrics":{"ns/op":5171.7,"p50-ns":4930,"p99-ns":7574,"fixture-sum":74489314667390,"load-pct":51.17}}

{"side":"rust","name":"producer-store/2^16/0-50","iterations":786432,"metrics":{"ns/event":388.5,"load-pct":50,"fixture-sum":167279307193173}}
`

func TestParseRounds(t *testing.T) {
	g, err := parseGo(strings.NewReader(goRound), 3)
	if err != nil {
		t.Fatal(err)
	}
	if len(g) != 2 || g[0].Row != "query128/shared" || g[0].Round != 3 || g[0].Metrics["p50-ns"] != 4769 ||
		g[0].Metrics["fixture-sum"] != 74489314667390 || g[1].Metrics["ns/event"] != 536.6 {
		t.Fatalf("go samples %+v", g)
	}
	r, err := parseRust(strings.NewReader(rustRound), 3)
	if err != nil {
		t.Fatal(err)
	}
	if len(r) != 2 || r[0].Side != sideRust || r[0].Metrics["p99-ns"] != 7574 || r[1].Row != "producer-store/2^16/0-50" {
		t.Fatalf("rust samples %+v", r)
	}
	if _, err := parseRust(strings.NewReader("round 1\n"), 1); !errors.Is(err, errInput) {
		t.Errorf("a non-JSON Rust line: %v", err)
	}
	if _, err := parseGo(strings.NewReader("BenchmarkPeerAddressing-2 100 8.3 ns/op 5\n"), 1); !errors.Is(err, errInput) {
		t.Errorf("a Go value without unit: %v", err)
	}
}

// fullSamples gives every row of the table one value per side and round:
// Go = goNs, Rust = rustNs in every round except that round 2's Go value is
// doubled, and the same fixture checksum everywhere.
func fullSamples(goNs, rustNs float64, rounds int) []sample {
	var out []sample
	for round := 1; round <= rounds; round++ {
		for _, spec := range rows {
			g := goNs
			if round == 2 {
				g *= 2
			}
			out = append(out,
				sample{Side: sideGo, Row: spec.Row, Round: round, Metrics: map[string]float64{spec.Unit: g, "fixture-sum": 7}},
				sample{Side: sideRust, Row: spec.Row, Round: round, Metrics: map[string]float64{spec.Unit: rustNs, "fixture-sum": 7}})
		}
	}
	return out
}

// TestLimitRows: a row with a Limit is met by the Go median alone, whatever the ratio, and
// shows its target and values in its unit.
func TestLimitRows(t *testing.T) {
	spec := rowSpec{Row: "workers-apply/10M", Unit: "rss-B/membership", Limit: 48}
	if !spec.met(32, 0.45) || spec.met(49, 0.5) || !spec.met(48, 2) {
		t.Error("a Limit row is judged by the Go median")
	}
	if got := spec.targetText(); got != "Go ≤ 48.0 B" {
		t.Errorf("targetText %q", got)
	}
	if got := (rowSpec{Target: 2.0 / 3}).targetText(); got != "≤ 0.67" {
		t.Errorf("targetText %q", got)
	}
	if got := (rowSpec{Target: 0.9}).targetText(); got != "≤ 0.9" {
		t.Errorf("targetText %q", got)
	}
	if got := formatValue("rss-B/membership", 32.35); got != "32.4 B" {
		t.Errorf("formatValue %q", got)
	}
}

func TestSummarizeRatiosAndTargets(t *testing.T) {
	s, err := summarize(fullSamples(90, 100, 5), 5)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Rows) != len(rows) {
		t.Fatalf("%d rows", len(s.Rows))
	}
	for _, r := range s.Rows {
		// Go values 90, 180, 90, 90, 90: median 90; Rust 100.
		if r.GoMed != 90 || r.RustMed != 100 || math.Abs(r.Ratio-0.9) > 1e-12 {
			t.Errorf("%s %s: medians %v / %v ratio %v", r.Spec.Row, r.Spec.Unit, r.GoMed, r.RustMed, r.Ratio)
		}
		if math.Abs(r.RoundLo-0.9) > 1e-12 || math.Abs(r.RoundHi-1.8) > 1e-12 {
			t.Errorf("%s: per-round range %v–%v, want 0.9–1.8", r.Spec.Row, r.RoundLo, r.RoundHi)
		}
		want := 0.9 <= r.Spec.Target
		if r.Spec.Limit > 0 {
			want = 90 <= r.Spec.Limit
		}
		if r.Met != want {
			t.Errorf("%s %s: met %v with target %v", r.Spec.Row, r.Spec.Unit, r.Met, r.Spec.Target)
		}
	}
	for _, f := range s.Fixtures {
		if !f.Agrees {
			t.Errorf("%s: checksums %v", f.Row, f.Sums)
		}
	}
	var buf bytes.Buffer
	writeTable(&buf, s)
	out := buf.String()
	for _, want := range []string{
		"| `query128/divergent` | p99 | 90.00 ns | 100 ns | **0.90** | 0.90–1.80 | ≤ 0.8 | no |",
		"| `producer-store/2^20@90` | per event | 90.00 ns | 100 ns | **0.90** | 0.90–1.80 | ≤ 0.5 | no |",
		"| `snapshot-install` | per op | 90.00 ns | 100 ns | **0.90** | 0.90–1.80 | ≤ 0.9 | yes |",
		"| `lookup/2^20/miss` | per op | 90.00 ns | 100 ns | **0.90** | 0.90–1.80 | ≤ 0.9 | yes |",
		"| `producer-store/2^16@90` | per event | 90.00 ns | 100 ns | **0.90** | 0.90–1.80 | ≤ 0.7 | no |",
		"| `seqhash-vec` (extra) |",
		"14 of 23 rows meet their target",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}

func TestSummarizeRefusesMismatchAndGaps(t *testing.T) {
	samples := fullSamples(50, 100, 3)
	for i := range samples {
		if samples[i].Side == sideRust && samples[i].Row == "delta-apply" && samples[i].Round == 2 {
			samples[i].Metrics["fixture-sum"] = 8
		}
	}
	var kept []sample
	for _, s := range samples {
		if !(s.Side == sideGo && s.Row == "addressing") {
			kept = append(kept, s)
		}
	}
	s, err := summarize(kept, 3)
	if !errors.Is(err, errInput) || !strings.Contains(err.Error(), "delta-apply: fixture checksums differ") ||
		!strings.Contains(err.Error(), "addressing ns/op: 0 Go and 3 Rust values") {
		t.Fatalf("err = %v", err)
	}
	for _, r := range s.Rows {
		if r.Spec.Row == "addressing" && (!math.IsNaN(r.Ratio) || r.Met) {
			t.Errorf("a row without Go values has ratio %v, met %v", r.Ratio, r.Met)
		}
	}
	var buf bytes.Buffer
	writeFixtures(&buf, s)
	if !strings.Contains(buf.String(), "| `delta-apply` | 7, 8 | **NO** |") {
		t.Errorf("fixture table:\n%s", buf.String())
	}
}

func TestFormatNs(t *testing.T) {
	for _, c := range []struct {
		in   float64
		want string
	}{
		{6.4372, "6.44 ns"},
		{505.35, "505 ns"},
		{17925.07, "17.9 µs"},
		{8445910.36, "8.45 ms"},
		{math.NaN(), "—"},
	} {
		if got := formatNs(c.in); got != c.want {
			t.Errorf("formatNs(%v) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestParseMachine(t *testing.T) {
	m, err := parseMachine(strings.NewReader("cpu: AMD EPYC\ncores: 2\nno colon here\nloadavg-start: 0.1 0.2 0.3\n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(m) != 3 || m[0] != (machineLine{"cpu", "AMD EPYC"}) || m[2].Value != "0.1 0.2 0.3" {
		t.Fatalf("%+v", m)
	}
}

func TestMachineLabel(t *testing.T) {
	for _, c := range []struct{ machine, want string }{
		{"label: quiet 16-core Xeon\ncpu: Intel Xeon\ncores: 16 online\n", "quiet 16-core Xeon"},
		{"cpu: Intel(R) Xeon(R) Processor\ncpu-id: family 6 model 167, cache 491520 KB\ncores: 2 online (2 in /proc/cpuinfo)\n",
			"Intel(R) Xeon(R) Processor (family 6 model 167), 2 cores"},
		{"cpu: AMD EPYC\ncores: 2 online\n", "AMD EPYC, 2 cores"},
		{"cpu: AMD EPYC\n", "AMD EPYC"},
		{"date: today\n", "somewhere"},
	} {
		m, err := parseMachine(strings.NewReader(c.machine))
		if err != nil {
			t.Fatal(err)
		}
		if got := (machineRun{Dir: "docs/perf/somewhere", Machine: m}).Label(); got != c.want {
			t.Errorf("Label of %q = %q, want %q", c.machine, got, c.want)
		}
	}
}

// writeRounds writes samples as one machine's directory: machine.txt and the
// round files in the formats the two programs print.
func writeRounds(t *testing.T, dir, machine string, samples []sample) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, "machine.txt"), []byte(machine), 0o644); err != nil {
		t.Fatal(err)
	}
	files := map[string]*strings.Builder{}
	for _, s := range samples {
		var name string
		var line string
		if s.Side == sideRust {
			name = fmt.Sprintf("rust-%d.jsonl", s.Round)
			b, err := json.Marshal(rustLine{Side: sideRust, Name: s.Row, Iterations: 1, Metrics: s.Metrics})
			if err != nil {
				t.Fatal(err)
			}
			line = string(b)
		} else {
			name = fmt.Sprintf("go-%d.txt", s.Round)
			head, sub, _ := strings.Cut(s.Row, "/")
			bench := "BenchmarkPeer"
			for _, part := range strings.Split(head, "-") {
				bench += strings.ToUpper(part[:1]) + part[1:]
			}
			if sub != "" {
				bench += "/" + sub
			}
			line = bench + "-16 10"
			for unit, v := range s.Metrics {
				line += fmt.Sprintf(" %v %s", v, unit)
			}
		}
		if files[name] == nil {
			files[name] = &strings.Builder{}
		}
		files[name].WriteString(line + "\n")
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestReportEveryMachine runs the command on two machines' directories: the
// report names both machines, gives each row's ratio on each, calls a row met
// only when every machine meets it, and keeps each machine's own section.
func TestReportEveryMachine(t *testing.T) {
	small, big := t.TempDir(), t.TempDir()
	writeRounds(t, small, "cpu: AMD EPYC\ncores: 2 online (2 in /proc/cpuinfo)\n", fullSamples(50, 100, 3))
	writeRounds(t, big, "label: quiet 16-core Xeon\ncpu: Intel Xeon\ncores: 16 online (16 in /proc/cpuinfo)\n", fullSamples(85, 100, 3))
	out := filepath.Join(t.TempDir(), "report.md")
	if err := run([]string{small, big}, out); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	report := string(b)
	for _, want := range []string{
		"## Every machine",
		"| row | statistic | target | AMD EPYC, 2 cores | quiet 16-core Xeon | met on every machine |",
		// 0.50 on the first machine, 0.85 on the second.
		"| `addressing` | per op | ≤ 0.9 | 0.50 | 0.85 | yes |",
		"| `query128/divergent` | p99 | ≤ 0.8 | 0.50 | 0.85 | no |",
		"| `producer-store/2^16@90` | per event | ≤ 0.7 | 0.50 | 0.85 | no |",
		"14 of 23 rows meet their target on every machine",
		"## Machine: AMD EPYC, 2 cores",
		"## Machine: quiet 16-core Xeon",
		"- label: quiet 16-core Xeon",
	} {
		if !strings.Contains(report, want) {
			t.Errorf("report lacks %q:\n%s", want, report)
		}
	}
	if strings.Count(report, "### Medians") != 2 {
		t.Errorf("want one medians table per machine:\n%s", report)
	}

	// One machine: no cross-machine table, the section keeps its old title.
	if err := run([]string{small}, out); err != nil {
		t.Fatal(err)
	}
	if b, _ = os.ReadFile(out); strings.Contains(string(b), "## Every machine") || !strings.Contains(string(b), "## Machine and run") {
		t.Errorf("one machine's report:\n%s", b)
	}

	// A machine whose rows do not line up fails the command after the report is written.
	bad := t.TempDir()
	writeRounds(t, bad, "cpu: X\n", fullSamples(50, 100, 1)[2:])
	if err := run([]string{small, bad}, out); !errors.Is(err, errInput) {
		t.Errorf("a machine with missing rows: err = %v", err)
	}
	if b, _ = os.ReadFile(out); !strings.Contains(string(b), "is not comparable as a whole") {
		t.Errorf("the report does not say a machine's run is not comparable:\n%s", b)
	}
}
