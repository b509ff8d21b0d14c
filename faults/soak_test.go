//go:build linux

package faults

import (
	"context"
	"encoding/csv"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/testenv"
	"github.com/twmb/franz-go/pkg/kadm"
)

// The soak (`make soak`) runs the suite's deployment as processes (a relay per DC, two indexer
// replicas) on a private broker for CKF_SOAK_DURATION under a steady load (the seeded writer at
// CKF_SOAK_EVENT_RATE KV events/s, routers' queries over Kafka at CKF_SOAK_QUERY_RATE/s), and puts
// three faults inside it: a relay's kill -9 (then its restart), an indexer replica's kill -9 (then
// its restart) and a controlled restart of the broker, at 30, 50 and 70 % of the run. What it
// asserts, on the whole run:
//   - after each fault and at the end, with the writer paused: every relay holds exactly its
//     model's resident blocks, both replicas serve every lane at the relays' sequences, answer
//     alike, and no lane answers below the model (nothing acknowledged lost);
//   - no KV event failed, no query request went unanswered, no process exited but those killed;
//   - memory flat after warm-up: the RSS of every process that ran the whole soak, as the median
//     of the last tenth of the run, is within 5 % of its median over 15-25 % of the run (after
//     the filters and caches warm up, before the first fault).
//
// Every sample (each process's RSS and Go heap, every CKF_SOAK_INTERVAL) goes to CKF_SOAK_CSV
// when it is set, and each fault as a row of process "fault: <what>" at its moment (tools/plots
// draws soak-rss.png from it); the run's SUMMARY line gives the rest. Without CKF_SOAK_DURATION the test skips:
// it is not part of `make test`.

// soakSettings are the soak's knobs, from the environment.
type soakSettings struct {
	duration, interval   time.Duration
	eventRate, queryRate int
	dcs                  int
	csvPath              string
}

func soakSettingsFromEnv(t *testing.T) soakSettings {
	raw := os.Getenv("CKF_SOAK_DURATION")
	if raw == "" {
		t.Skip("the soak runs only with CKF_SOAK_DURATION set (make soak)")
	}
	d, err := time.ParseDuration(raw)
	if err != nil || d < time.Minute {
		t.Fatalf("CKF_SOAK_DURATION=%q: want a duration of a minute or more", raw)
	}
	s := soakSettings{duration: d, interval: 10 * time.Second, csvPath: os.Getenv("CKF_SOAK_CSV"),
		eventRate: envInt(t, "CKF_SOAK_EVENT_RATE", 2000), queryRate: envInt(t, "CKF_SOAK_QUERY_RATE", 100),
		dcs: envInt(t, "CKF_SOAK_DCS", 4)}
	if raw := os.Getenv("CKF_SOAK_INTERVAL"); raw != "" {
		if s.interval, err = time.ParseDuration(raw); err != nil || s.interval <= 0 {
			t.Fatalf("CKF_SOAK_INTERVAL=%q: want a positive duration", raw)
		}
	}
	return s
}

// soakSample is one process's memory at one moment of the soak.
type soakSample struct {
	at        time.Duration // since the load started
	process   string
	run       int // the process's incarnation, 1 for the first
	rss, heap int64
}

// soakRecorder samples every process's memory until stopped, and writes the CSV.
type soakRecorder struct {
	t       *testing.T
	start   time.Time
	procs   []*proc
	broker  func() int64 // the broker JVM's RSS
	samples []soakSample
	w       *csv.Writer
	f       *os.File
}

func newSoakRecorder(t *testing.T, path string, procs []*proc, broker func() int64) *soakRecorder {
	r := &soakRecorder{t: t, start: time.Now(), procs: procs, broker: broker}
	if path != "" {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		f, err := os.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		r.f, r.w = f, csv.NewWriter(f)
		_ = r.w.Write([]string{"t_s", "process", "run", "rss_mib", "heap_mib"})
	}
	return r
}

// sample records every live process once.
func (r *soakRecorder) sample() {
	at := time.Since(r.start)
	add := func(s soakSample) {
		r.samples = append(r.samples, s)
		if r.w != nil {
			_ = r.w.Write([]string{strconv.FormatFloat(at.Seconds(), 'f', 1, 64), s.process, strconv.Itoa(s.run),
				strconv.FormatFloat(float64(s.rss)/(1<<20), 'f', 1, 64), strconv.FormatFloat(float64(s.heap)/(1<<20), 'f', 1, 64)})
		}
	}
	for _, p := range r.procs {
		if !p.Alive() {
			continue
		}
		s := soakSample{at: at, process: p.Name, run: p.Runs(), rss: p.RSS()}
		if m, err := p.Metrics(); err == nil {
			s.heap = int64(m["go_memstats_heap_alloc_bytes"])
		}
		add(s)
	}
	add(soakSample{at: at, process: "broker", run: 1, rss: r.broker()})
	if r.w != nil {
		r.w.Flush()
	}
}

// flat reports, for a process that ran the whole soak in one incarnation, its median RSS over
// [0.15, 0.25) of d and over the last tenth of d.
func (r *soakRecorder) flat(process string, d time.Duration) (warm, end int64, ok bool) {
	var a, b []int64
	for _, s := range r.samples {
		if s.process != process {
			continue
		}
		if s.run != 1 {
			return 0, 0, false
		}
		switch f := float64(s.at) / float64(d); {
		case f >= 0.15 && f < 0.25:
			a = append(a, s.rss)
		case f >= 0.9:
			b = append(b, s.rss)
		}
	}
	if len(a) == 0 || len(b) == 0 {
		return 0, 0, false
	}
	return median(a), median(b), true
}

// mark writes a fault's moment to the CSV.
func (r *soakRecorder) mark(what string) {
	if r.w != nil {
		_ = r.w.Write([]string{strconv.FormatFloat(time.Since(r.start).Seconds(), 'f', 1, 64), "fault: " + what, "", "", ""})
		r.w.Flush()
	}
}

func median(v []int64) int64 {
	v = slices.Clone(v)
	slices.Sort(v)
	return v[len(v)/2]
}

func (r *soakRecorder) close() {
	if r.f != nil {
		r.w.Flush()
		_ = r.f.Close()
	}
}

func TestSoak(t *testing.T) {
	set := soakSettingsFromEnv(t)
	testenv.NeedKafkaJars(t)
	testenv.Brokers(t) // the jars come with the shared broker
	seed := uint64(envInt(t, "FAULTS_SEED", 1))
	ctx, cancel := context.WithTimeout(context.Background(), set.duration+20*time.Minute)
	defer cancel()
	// StartBroker fixes both ports, so the restart below binds the same ones.
	b, err := testenv.StartBroker(ctx, testenv.BrokerConfig{RunDir: filepath.Join(t.TempDir(), "kafka")})
	if err != nil {
		t.Fatalf("private broker: %v", err)
	}
	t.Cleanup(func() { _ = b.Kill() })

	s := newSystem(t, []string{b.Addr()}, set.dcs, 2)
	s.startAll()
	w := s.newWriter(seed+500, float64(set.eventRate))
	w.run()
	w.waitAcked(int64(2*set.eventRate), 2*time.Minute)
	rng := mrand.New(mrand.NewPCG(seed, 0x736f616b))
	run := &clusterRun{t: t, seed: seed, s: s, w: w, adm: kadm.NewClient(s.client()), qs: w.queries(rng, 64)}
	kq := run.startKafkaQueries(set.queryRate)

	procs := append(append([]*proc{}, s.relays...), s.indexes...)
	rec := newSoakRecorder(t, set.csvPath, procs, func() int64 { n, _ := b.ResidentBytes(); return n })
	defer rec.close()
	pids := map[string]int{}
	for _, p := range procs {
		pids[p.Name] = p.Pid()
	}
	killed := map[string]bool{}
	checkAlive := func(when string) {
		t.Helper()
		for _, p := range procs {
			if !p.Alive() || (!killed[p.Name] && p.Pid() != pids[p.Name]) {
				t.Fatalf("%s: %s exited (%v):\n%s", when, p.Name, p.ExitError(), testenv.Tail(p.LogPath(p.Runs()), 20))
			}
		}
	}
	// exact pauses the writer, lets the deployment settle and checks every relay and replica
	// against the model, then resumes the load.
	var checks []string
	exact := func(when string) {
		t.Helper()
		w.pause()
		began := time.Now()
		seqs := s.relaySettled(w, 3*time.Minute)
		s.replicasCaughtUp(seqs, 3*time.Minute)
		rep := s.compareAnswers(w, w.queries(rng, 100))
		checkAlive(when)
		if rep.mismatches > 0 || rep.lost > 0 {
			t.Fatalf("%s: %d replica mismatches, %d lane answers below the model", when, rep.mismatches, rep.lost)
		}
		checks = append(checks, fmt.Sprintf("%s: exact (%d queries, %d with a cached prefix, settled in %v)",
			when, rep.queries, rep.nonZero, time.Since(began).Round(100*time.Millisecond)))
		t.Log(checks[len(checks)-1])
		w.resume()
	}

	faults := []struct {
		at   float64
		name string
		do   func()
	}{
		{0.3, "relay-0 kill -9", func() {
			killed["relay-0"] = true
			s.relays[0].Kill9()
			s.relays[0].Start()
			s.relayStarted(s.relays[0], 2*time.Minute)
		}},
		{0.5, "indexer-1 kill -9", func() {
			killed["indexer-1"] = true
			s.indexes[1].Kill9()
			s.indexes[1].Start()
			s.indexes[1].WaitReady(2 * time.Minute)
		}},
		{0.7, "broker restart", func() {
			if err := b.Restart(ctx); err != nil {
				t.Fatalf("broker restart: %v\n%s", err, b.LogTail(20))
			}
		}},
	}
	// The schedule: a sample every interval, each fault when its share of the run has passed.
	// These are the soak's clock (the load runs meanwhile), not waits for an outcome.
	tick := time.NewTicker(set.interval)
	defer tick.Stop()
	rec.sample()
	for next := 0; ; {
		select {
		case <-ctx.Done():
			t.Fatal("the soak ran out of time")
		case <-tick.C:
		}
		elapsed := time.Since(rec.start)
		if next < len(faults) && elapsed >= time.Duration(faults[next].at*float64(set.duration)) {
			f := faults[next]
			began := time.Now()
			rec.mark(f.name)
			f.do()
			t.Logf("%v: %s, back in %v", elapsed.Round(time.Second), f.name, time.Since(began).Round(100*time.Millisecond))
			exact("after the " + f.name)
			next++
		}
		checkAlive(elapsed.Round(time.Second).String())
		rec.sample()
		if elapsed >= set.duration {
			break
		}
	}
	kq.end(3 * time.Minute)
	exact("at the end")
	all := kq.window(time.Time{}, time.Now().Add(time.Hour))
	if f := w.failed.Load(); f > 0 {
		t.Errorf("%d KV events failed (%v)", f, w.lastErr.Load())
	}
	var mem []string
	var names []string // the broker is sampled (its JVM grows to its heap size) but not held to it
	for _, p := range procs {
		names = append(names, p.Name)
	}
	for _, name := range names {
		warm, end, ok := rec.flat(name, set.duration)
		if !ok {
			continue
		}
		ratio := float64(end) / float64(warm)
		mem = append(mem, fmt.Sprintf("%s %.1f→%.1f MiB (%.3f)", name, float64(warm)/(1<<20), float64(end)/(1<<20), ratio))
		if ratio > 1.05 {
			t.Errorf("%s: RSS grew from %.1f MiB after warm-up to %.1f MiB at the end (%.3f, more than 5 %%)",
				name, float64(warm)/(1<<20), float64(end)/(1<<20), ratio)
		}
	}
	t.Logf("SUMMARY soak: %v, %d DCs, %d KV events/s, %d queries/s over Kafka; KV events sent %d, acknowledged %d, failed %d; "+
		"queries %s; faults: relay-0 kill -9, indexer-1 kill -9, broker restart; checks: %v; RSS median warm-up→end: %v",
		set.duration, set.dcs, set.eventRate, set.queryRate, w.sent.Load(), w.acked.Load(), w.failed.Load(), all, checks, mem)
}
