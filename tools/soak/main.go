// Command soak runs ckf-stream under sustained load and records how its memory and lanes behave
// over time: `processor demo` (16 relays, the indexer, synthetic engines and routers in one
// process) on the real broker, sampled every -interval into a CSV of RSS, heap, goroutines and
// lane state. It is `make soak`; it is not part of `make test` (it runs for -duration, 10 minutes
// by default).
//
// At the end it prints a summary (RSS first/min/max/last, the slope of RSS over the second half,
// lanes that ever left service, faults and recoveries) and exits 1 when a lane left service or a
// fault was counted, so that a regression fails the target.
package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/csv"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

type options struct {
	processor  string
	brokers    string
	duration   time.Duration
	interval   time.Duration
	eventRate  float64
	queryRate  float64
	dcs        int
	out        string
	log        string
	topicStamp string
}

func main() {
	var o options
	flag.StringVar(&o.processor, "processor", "bin/processor", "the processor binary (build it with make build)")
	flag.StringVar(&o.brokers, "brokers", os.Getenv("KAFKA_BROKERS"), "seed brokers (default $KAFKA_BROKERS)")
	flag.DurationVar(&o.duration, "duration", 10*time.Minute, "how long the load runs")
	flag.DurationVar(&o.interval, "interval", 5*time.Second, "sampling interval")
	flag.Float64Var(&o.eventRate, "event-rate", 8000, "KV events per second over all DCs")
	flag.Float64Var(&o.queryRate, "query-rate", 200, "queries per second over Kafka")
	flag.IntVar(&o.dcs, "dcs", 16, "DCs, one lane and one relay each")
	flag.StringVar(&o.out, "out", "docs/perf/soak.csv", "CSV of the samples")
	flag.StringVar(&o.log, "log", "docs/perf/soak-demo.log", "the demo's output (its live table and summary)")
	flag.Parse()
	if o.brokers == "" {
		fmt.Fprintln(os.Stderr, "soak: no brokers: set KAFKA_BROKERS or -brokers (make kafka-up starts one)")
		os.Exit(2)
	}
	o.topicStamp = fmt.Sprintf("soak-%d-", time.Now().Unix())
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	code, err := run(ctx, o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
	}
	os.Exit(code)
}

// sample is one row of the CSV.
type sample struct {
	elapsed                     time.Duration
	rssBytes, heapBytes         int64
	goroutines                  int64
	serving, ready, excluded    int
	maxLagRecords               int64
	maxLagSeconds               float64
	faults, recoveries, rejects uint64
	deltas, images              uint64
	notServing                  string
}

func run(ctx context.Context, o options) (int, error) {
	port, err := freePort()
	if err != nil {
		return 1, err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	for _, p := range []string{o.out, o.log} {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return 1, err
		}
	}
	logf, err := os.Create(o.log)
	if err != nil {
		return 1, err
	}
	defer logf.Close()
	// The demo's own duration ends the load; the closing HTTP measurement is skipped so that
	// the last samples still see the process under load.
	cmd := exec.Command(o.processor, "demo",
		"--dcs", strconv.Itoa(o.dcs),
		"--event-rate", strconv.FormatFloat(o.eventRate, 'f', -1, 64),
		"--query-rate", strconv.FormatFloat(o.queryRate, 'f', -1, 64),
		"--duration", o.duration.String(),
		"--table-every", "60s",
		"--http-samples", "0",
		"--http.listen", addr,
	)
	// A domain of its own: a relay's transactional id is derived from its pool (domain and DC),
	// not from the topic prefix, so a demo elsewhere on the same cluster with the default demo
	// domain would fence the soak's relays (and the other way round).
	var d [32]byte
	if _, err := rand.Read(d[:]); err != nil {
		return 1, err
	}
	domain := hex.EncodeToString(d[:16]) + ":" + hex.EncodeToString(d[16:])
	cmd.Env = append(os.Environ(), "KAFKA_BROKERS="+o.brokers, "CKF_TOPIC_PREFIX="+o.topicStamp, "CKF_INDEXER_DOMAIN="+domain)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return 1, fmt.Errorf("starting %s: %w", o.processor, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	gone := false
	defer func() {
		if !gone {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-exited:
			case <-time.After(40 * time.Second):
				_ = cmd.Process.Kill()
				<-exited
			}
		}
	}()
	fmt.Printf("soak: pid %d, http %s, topics %s*, %v at %.0f events/s and %.0f queries/s over %d lanes\n",
		cmd.Process.Pid, addr, o.topicStamp, o.duration, o.eventRate, o.queryRate, o.dcs)

	f, err := os.Create(o.out)
	if err != nil {
		return 1, err
	}
	defer f.Close()
	w := csv.NewWriter(f)
	_ = w.Write([]string{"t_s", "rss_mib", "heap_alloc_mib", "goroutines", "lanes_serving", "lanes_ready", "lanes_excluded",
		"max_lag_records", "max_lag_seconds", "faults", "recoveries", "rejected", "deltas", "images", "not_serving"})
	start := time.Now()
	tick := time.NewTicker(o.interval)
	defer tick.Stop()
	var samples []sample
	everLeft := map[string]bool{}
	everServing := false
	client := &http.Client{Timeout: 3 * time.Second}
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case err := <-exited:
			gone = true
			if err != nil {
				return 1, fmt.Errorf("demo exited: %w (see %s)", err, o.log)
			}
			break loop
		case <-tick.C:
		}
		s := sample{elapsed: time.Since(start)}
		s.rssBytes, _ = rss(cmd.Process.Pid)
		if m, err := scrape(client, "http://"+addr+"/metrics"); err == nil {
			s.heapBytes = int64(m["go_memstats_heap_alloc_bytes"])
			s.goroutines = int64(m["go_goroutines"])
		}
		if err := lanes(client, "http://"+addr+"/v1/lanes", &s); err != nil {
			continue // not serving HTTP yet
		}
		if s.serving == o.dcs {
			everServing = true
		} else if everServing {
			for _, l := range strings.Fields(s.notServing) {
				everLeft[l] = true
			}
		}
		samples = append(samples, s)
		_ = w.Write([]string{
			fmt.Sprintf("%.1f", s.elapsed.Seconds()), mib(s.rssBytes), mib(s.heapBytes), strconv.FormatInt(s.goroutines, 10),
			strconv.Itoa(s.serving), strconv.Itoa(s.ready), strconv.Itoa(s.excluded),
			strconv.FormatInt(s.maxLagRecords, 10), fmt.Sprintf("%.3f", s.maxLagSeconds),
			strconv.FormatUint(s.faults, 10), strconv.FormatUint(s.recoveries, 10), strconv.FormatUint(s.rejects, 10),
			strconv.FormatUint(s.deltas, 10), strconv.FormatUint(s.images, 10), s.notServing,
		})
		w.Flush()
	}
	if !gone && ctx.Err() == nil {
		// Wait for the demo's summary (it ends by itself at -duration).
		select {
		case err := <-exited:
			gone = true
			if err != nil {
				fmt.Fprintf(os.Stderr, "soak: demo exited: %v\n", err)
			}
		case <-time.After(60 * time.Second):
		}
	}
	return summarise(o, samples, everLeft, everServing), nil
}

func summarise(o options, samples []sample, everLeft map[string]bool, everServing bool) int {
	if len(samples) == 0 {
		fmt.Println("soak: no samples")
		return 1
	}
	first, last := samples[0], samples[len(samples)-1]
	minR, maxR := first.rssBytes, first.rssBytes
	var maxLag int64
	var maxLagS float64
	for _, s := range samples {
		minR, maxR = min(minR, s.rssBytes), max(maxR, s.rssBytes)
		maxLag, maxLagS = max(maxLag, s.maxLagRecords), max(maxLagS, s.maxLagSeconds)
	}
	// Least-squares slope of RSS over the second half (after the filters and caches warm up).
	half := samples[len(samples)/2:]
	var sx, sy, sxx, sxy float64
	for _, s := range half {
		x, y := s.elapsed.Minutes(), float64(s.rssBytes)/(1<<20)
		sx, sy, sxx, sxy = sx+x, sy+y, sxx+x*x, sxy+x*y
	}
	n := float64(len(half))
	slope := 0.0
	if d := n*sxx - sx*sx; d != 0 {
		slope = (n*sxy - sx*sy) / d
	}
	fmt.Printf("soak: %d samples over %v at %.0f events/s, %.0f queries/s, %d lanes\n", len(samples), last.elapsed.Round(time.Second), o.eventRate, o.queryRate, o.dcs)
	fmt.Printf("  RSS MiB: first %s, min %s, max %s, last %s; second-half slope %.2f MiB/min\n", mib(first.rssBytes), mib(minR), mib(maxR), mib(last.rssBytes), slope)
	fmt.Printf("  heap MiB first %s last %s; goroutines first %d last %d\n", mib(first.heapBytes), mib(last.heapBytes), first.goroutines, last.goroutines)
	fmt.Printf("  lanes: all %d serving at some point: %v; lanes that left service afterwards: %d %v\n", o.dcs, everServing, len(everLeft), keys(everLeft))
	fmt.Printf("  max lag %d records, %.2f s; faults %d, recoveries %d, rejected %d; deltas %d, images %d\n",
		maxLag, maxLagS, last.faults, last.recoveries, last.rejects, last.deltas, last.images)
	fmt.Printf("  CSV %s, demo output %s\n", o.out, o.log)
	if !everServing || len(everLeft) > 0 || last.faults > 0 {
		return 1
	}
	return 0
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func mib(b int64) string { return fmt.Sprintf("%.1f", float64(b)/(1<<20)) }

// rss reads VmRSS of pid from /proc (Linux).
func rss(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10, err
		}
	}
	return 0, errors.New("no VmRSS")
}

// scrape reads the unlabelled series of a Prometheus text page.
func scrape(c *http.Client, url string) (map[string]float64, error) {
	resp, err := c.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		name, val, ok := strings.Cut(line, " ")
		if !ok || strings.Contains(name, "{") {
			continue
		}
		if v, err := strconv.ParseFloat(strings.TrimSpace(val), 64); err == nil {
			out[name] = v
		}
	}
	return out, sc.Err()
}

type laneView struct {
	Lane              uint8             `json:"lane"`
	State             string            `json:"state"`
	Ready             bool              `json:"ready"`
	Excluded          bool              `json:"excluded"`
	InstalledSequence uint64            `json:"installed_sequence"`
	LagRecords        int64             `json:"lag_records"`
	LagSeconds        float64           `json:"lag_seconds"`
	Deltas            uint64            `json:"deltas"`
	Images            uint64            `json:"images"`
	Rejected          uint64            `json:"rejected"`
	Recoveries        uint64            `json:"recoveries"`
	Faults            map[string]uint64 `json:"faults"`
}

func lanes(c *http.Client, url string, s *sample) error {
	resp, err := c.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, resp.Body)
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	var page struct {
		Lanes []laneView `json:"lanes"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&page); err != nil {
		return err
	}
	var not []string
	for _, l := range page.Lanes {
		if l.State == "serving" {
			s.serving++
		} else {
			not = append(not, strconv.Itoa(int(l.Lane)))
		}
		if l.Ready {
			s.ready++
		}
		if l.Excluded {
			s.excluded++
		}
		s.maxLagRecords = max(s.maxLagRecords, l.LagRecords)
		s.maxLagSeconds = max(s.maxLagSeconds, l.LagSeconds)
		for _, n := range l.Faults {
			s.faults += n
		}
		s.recoveries += l.Recoveries
		s.rejects += l.Rejected
		s.deltas += l.Deltas
		s.images += l.Images
	}
	s.notServing = strings.Join(not, " ")
	return nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
