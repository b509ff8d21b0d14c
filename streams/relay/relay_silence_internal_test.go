package relay

import (
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/eval"
	"github.com/ckf-stream/ckf-stream/loadgen"
	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/ckf-stream/ckf-stream/streams/internal/streamtest"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/uber-go/tally/v4"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// sec is a time at s seconds on the silence tests' clock.
func sec(s float64) time.Time {
	return time.UnixMilli(1_780_000_000_000).Add(time.Duration(s * float64(time.Second)))
}

// silenceStep is one thing fed to a silenceWatch (an event, a clear, or a check at a time), then
// what it must report.
type silenceStep struct {
	what    string
	do      func(w *silenceWatch) []silenceChange
	changes []string // "worker/rank:state", in source order
	silent  int      // silent sources after the step
	idle    float64  // the DC's idle seconds at the step's time (checks only; -1: not checked)
	at      float64  // the check's time
}

func ev(worker uint64, at float64) func(*silenceWatch) []silenceChange {
	return func(w *silenceWatch) []silenceChange {
		if c := w.event(sourceKey{worker, 0}, sec(at)); c != nil {
			return []silenceChange{*c}
		}
		return nil
	}
}

func clr(worker uint64, at float64) func(*silenceWatch) []silenceChange {
	return func(w *silenceWatch) []silenceChange {
		var out []silenceChange
		if c := w.event(sourceKey{worker, 0}, sec(at)); c != nil {
			out = append(out, *c)
		}
		if c := w.cleared(sourceKey{worker, 0}); c != nil {
			out = append(out, *c)
		}
		return out
	}
}

func checkAt(at float64) func(*silenceWatch) []silenceChange {
	return func(w *silenceWatch) []silenceChange { return w.check(sec(at)) }
}

// TestSilenceWatch walks relay.md "Silent engines" step by step, with a bound of 300 s and a
// forget bound of 3,600 s: a DC idle since start and since its newest event, a worker that stops
// while others go on (silent once past the bound, back when it publishes), the whole DC going
// quiet (no source counted, the DC's idle time instead), a clear that drops a source, and a
// source forgotten after the long bound.
func TestSilenceWatch(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		steps []silenceStep
	}{{
		name: "a DC that never published: idle since start, no source silent",
		steps: []silenceStep{
			{what: "start", at: 0, do: checkAt(0), idle: 0},
			{what: "10 min later", at: 600, do: checkAt(600), idle: 600},
		},
	}, {
		name: "one worker stops while two go on",
		steps: []silenceStep{
			{what: "w1", do: ev(1, 1), idle: -1},
			{what: "w2", do: ev(2, 2), idle: -1},
			{what: "w3", do: ev(3, 3), idle: -1},
			{what: "all fresh", at: 10, do: checkAt(10), idle: 7},
			{what: "w1 and w2 go on", do: ev(1, 290), idle: -1},
			{what: "", do: ev(2, 295), idle: -1},
			{what: "w3 at exactly the bound: not yet", at: 303, do: checkAt(303), idle: 8},
			{what: "w1 goes on", do: ev(1, 303.5), idle: -1},
			{what: "w3 past the bound", at: 303.5, do: checkAt(303.5), changes: []string{"3/0:silent"}, silent: 1, idle: 0},
			{what: "still silent: no new change", at: 320, do: checkAt(320), silent: 1, idle: 16.5},
			{what: "w1 publishes", do: ev(1, 330), silent: 1, idle: -1},
			{what: "w3 publishes again", do: ev(3, 340), changes: []string{"3/0:back"}, idle: -1},
			{what: "w2 is past the bound now", at: 600, do: checkAt(600), changes: []string{"2/0:silent"}, silent: 1, idle: 260},
		},
	}, {
		name: "the whole DC goes quiet: its sources are no longer counted, the DC's idle time is",
		steps: []silenceStep{
			{what: "w1", do: ev(1, 0), idle: -1},
			{what: "w2", do: ev(2, 100), idle: -1},
			{what: "w1 silent while w2 published within the bound", at: 301, do: checkAt(301), changes: []string{"1/0:silent"}, silent: 1, idle: 201},
			{what: "w2 silent too: the DC is quiet", at: 401, do: checkAt(401), changes: []string{"1/0:dc-quiet"}, idle: 301},
			{what: "w2 publishes: w1 silent again", do: ev(2, 500), idle: -1},
			{what: "", at: 500, do: checkAt(500), changes: []string{"1/0:silent"}, silent: 1, idle: 0},
		},
	}, {
		name: "a clear drops the source until it publishes",
		steps: []silenceStep{
			{what: "w1", do: ev(1, 0), idle: -1},
			{what: "w2 clears (a removed worker)", do: clr(2, 0), idle: -1},
			{what: "w1 goes on", do: ev(1, 400), idle: -1},
			{what: "w2 is not silent: it was cleared", at: 400, do: checkAt(400), idle: 0},
			{what: "w2 stores again", do: ev(2, 410), idle: -1},
			{what: "w2 stops, w1 goes on", do: ev(1, 800), idle: -1},
			{what: "", at: 800, do: checkAt(800), changes: []string{"2/0:silent"}, silent: 1, idle: 0},
			{what: "a silent source cleared: back, then dropped", do: clr(2, 801), changes: []string{"2/0:back"}, idle: -1},
			{what: "", at: 802, do: checkAt(802), idle: 1},
		},
	}, {
		name: "a source silent past the forget bound is forgotten",
		steps: []silenceStep{
			{what: "w1", do: ev(1, 0), idle: -1},
			{what: "w2", do: ev(2, 0), idle: -1},
			{what: "w2 goes on", do: ev(2, 301), idle: -1},
			{what: "", at: 301, do: checkAt(301), changes: []string{"1/0:silent"}, silent: 1, idle: 0},
			{what: "w2 goes on", do: ev(2, 3600), silent: 1, idle: -1},
			{what: "w1 at exactly the forget bound: still silent", at: 3600, do: checkAt(3600), silent: 1, idle: 0},
			{what: "w2 goes on", do: ev(2, 3601), silent: 1, idle: -1},
			{what: "past it", at: 3601, do: checkAt(3601), changes: []string{"1/0:forgotten"}, idle: 0},
		},
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := newSilenceWatch(300*time.Second, 3600*time.Second, sec(0))
			for i, s := range c.steps {
				var got []string
				for _, ch := range s.do(w) {
					got = append(got, strconv.FormatUint(ch.key.worker, 10)+"/"+strconv.FormatUint(uint64(ch.key.rank), 10)+":"+ch.state)
				}
				if !slices.Equal(got, s.changes) {
					t.Fatalf("step %d (%s): changes %v, want %v", i, s.what, got, s.changes)
				}
				if len(w.silent) != s.silent {
					t.Fatalf("step %d (%s): %d silent sources, want %d", i, s.what, len(w.silent), s.silent)
				}
				if s.idle >= 0 {
					if got := w.idle(sec(s.at)); got != time.Duration(s.idle*float64(time.Second)) {
						t.Fatalf("step %d (%s): the DC idle for %v, want %vs", i, s.what, got, s.idle)
					}
				}
			}
		})
	}
}

// TestSilenceNoFalseAlarmOnLoadgen: loadgen's traffic (the workload of processor loadgen and
// processor demo: conversations sticking to a worker, migrations, branches, rare clears) fed to
// one DC's watch on a test clock at the event rate, checked every simulated second with the
// default bounds: no source is ever counted silent and the DC is never idle past the bound. The
// rates go far below loadgen's defaults (2,000 events/s, 5,000 for the demo): the fewer events a
// worker gets, the longer its quiet spells.
func TestSilenceNoFalseAlarmOnLoadgen(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		rate    float64 // events per second over all DCs
		workers int
		minutes int
	}{
		{rate: 200, workers: 4, minutes: 15},
		{rate: 20, workers: 16, minutes: 30},
		{rate: 4, workers: 4, minutes: 60},
	} {
		wl, err := loadgen.NewWorkload(loadgen.Config{Seed: 7, DCs: []uint64{1, 2}, WorkersPerDC: tc.workers})
		if err != nil {
			t.Fatal(err)
		}
		w := newSilenceWatch(DefaultRelaySilentSourceAfter, DefaultRelayForgetSourceAfter, sec(0))
		step := time.Duration(float64(time.Second) / tc.rate)
		end := sec(float64(tc.minutes * 60))
		next := sec(1)
		var maxGap time.Duration
		for now := sec(0); now.Before(end); now = now.Add(step) {
			e := wl.NextEvent()
			if e.DCIndex == 0 { // the relay of DC 1 reads DC 1's topic only
				key := sourceKey{e.KV.WorkerID, e.KV.DpRank}
				if prev, ok := w.last[key]; ok {
					maxGap = max(maxGap, now.Sub(prev))
				}
				w.event(key, now)
				if e.KV.Kind == schemas.KvClearedEvent {
					w.cleared(key)
				}
			}
			for !next.After(now) {
				if ch := w.check(next); len(ch) > 0 || len(w.silent) > 0 {
					t.Fatalf("%v events/s, %d workers: at %v a false alarm: %v", tc.rate, tc.workers, next.Sub(sec(0)), ch)
				}
				if idle := w.idle(next); idle > DefaultRelaySilentSourceAfter {
					t.Fatalf("%v events/s, %d workers: at %v the DC idle for %v", tc.rate, tc.workers, next.Sub(sec(0)), idle)
				}
				next = next.Add(time.Second)
			}
		}
		if len(w.last) != tc.workers {
			t.Fatalf("%v events/s: %d sources watched, want the DC's %d workers", tc.rate, len(w.last), tc.workers)
		}
		t.Logf("%v events/s over 2 DCs, %d workers per DC, %d min: longest quiet spell of a worker %v (bound %v)",
			tc.rate, tc.workers, tc.minutes, maxGap, DefaultRelaySilentSourceAfter)
	}
}

// TestRelayLoopSilence: the loop's path, on a test clock: decoded KV records feed the watch with
// their source and Kafka timestamp (applyRecord), and the evaluation the loop runs from due sets
// ckf_relay_kv_idle_seconds, ckf_relay_silent_sources, ckf_relay_sources and RelayStats, and
// logs a source going silent (warning) and returning.
func TestRelayLoopSilence(t *testing.T) {
	t.Parallel()
	codec := streamtest.ConfigCodec(t)
	_, state := streamtest.LimitIdentity(t, ckf.NewCkfConfig(4096))
	scope := tally.NewTestScope("ckf", nil)
	m := newRelayMetrics(scope)
	core, logs := observer.New(zapcore.InfoLevel)
	clock := sec(0)
	cfg := DefaultRelayConfig()
	rl := &relayLoop{r: &Relay{log: zap.New(core), metrics: m, c: newRelayLedger(m), hooks: noHooks{}, codec: codec},
		cfg: cfg, state: state, replaying: true, now: func() time.Time { return clock }}
	rl.asOf = newAsOfTracker(clock, map[int32]int64{0: 0}, map[int32]int64{0: 0})
	rl.silence = newSilenceWatch(cfg.SilentSourceAfter, cfg.ForgetSourceAfter, clock)
	rng := rand.New(rand.NewPCG(3, 4))
	offset := int64(0)
	apply := func(worker uint64, ts time.Time) {
		t.Helper()
		b, err := codec.AppendKvEvent(nil, schemas.KvEvent{WorkerID: worker, EventID: uint64(offset), StorageTier: schemas.TierDevice,
			Kind: schemas.KvStoredEvent, Stored: schemas.KvStored{Blocks: []schemas.KvBlock{{BlockHash: rng.Uint64(), TokensHash: rng.Uint64()}}}})
		if err != nil {
			t.Fatal(err)
		}
		if err := rl.applyRecord(&kgo.Record{Topic: "kv", Partition: 0, Offset: offset, Timestamp: ts, Value: b}, false); err != nil {
			t.Fatal(err)
		}
		offset++
	}
	gauge := func(name string) float64 {
		for _, g := range scope.Snapshot().Gauges() {
			if g.Name() == "ckf.relay."+name {
				return g.Value()
			}
		}
		t.Fatalf("no gauge %s", name)
		return 0
	}
	at := func(s float64, idle, silent, sources float64) {
		t.Helper()
		clock = sec(s)
		rl.checkSilence(clock)
		if got := gauge("kv_idle_seconds"); got != idle {
			t.Fatalf("at %vs: kv_idle_seconds %v, want %v", s, got, idle)
		}
		if got := gauge("silent_sources"); got != silent {
			t.Fatalf("at %vs: silent_sources %v, want %v", s, got, silent)
		}
		if got := gauge("sources"); got != sources {
			t.Fatalf("at %vs: sources %v, want %v", s, got, sources)
		}
		if st := rl.r.Stats(); st.SilentSources != uint64(silent) || st.Sources != uint64(sources) {
			t.Fatalf("at %vs: stats %d silent of %d sources, want the metrics'", s, st.SilentSources, st.Sources)
		}
	}
	at(0, 0, 0, 0)
	at(30, 30, 0, 0) // nothing published since the start
	clock = sec(31)
	apply(1, sec(31))
	apply(2, sec(31))
	apply(3, sec(99)) // a timestamp ahead of the relay's clock counts as now
	at(40, 9, 0, 3)
	for s := 60.0; s <= 320; s += 20 { // workers 1 and 2 go on, 3 stops
		clock = sec(s)
		apply(1, sec(s))
		apply(2, sec(s))
		at(s+0.5, 0.5, 0, 3)
	}
	clock = sec(340)
	apply(1, sec(340))
	at(340, 0, 1, 3)
	apply(3, sec(340))
	at(341.5, 1.5, 0, 3)
	var warned, back bool
	for _, e := range logs.All() {
		warned = warned || e.Level == zapcore.WarnLevel && e.ContextMap()["worker_id"] == uint64(3)
		back = back || e.Message == "a silent source publishes KV events again" && e.ContextMap()["worker_id"] == uint64(3)
	}
	if !warned || !back {
		t.Fatalf("worker 3 going silent logged %v, returning %v; want both", warned, back)
	}
}

// TestSilenceNoFalseAlarmOnTheTraceReplay: the conversation trace (traces/, what processor
// replay and make eval replay) on the evaluation's simulated fleet (eval.DefaultConfig: 4 DCs of
// 8 workers), under every simulated routing policy, its KV events fed to one watch per DC at
// their simulated times and checked every simulated second with the default bounds: no source
// is ever counted silent and no DC is idle past the bound. Prefix-affine policies concentrate a
// conversation on one worker, which lengthens the others' quiet spells: the longest is logged.
func TestSilenceNoFalseAlarmOnTheTraceReplay(t *testing.T) {
	t.Parallel()
	f, err := os.Open("../../traces/conversation_trace.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	reqs, _, err := eval.ReadTrace(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	cfg := eval.DefaultConfig()
	for _, name := range []string{eval.PolicyCostOracle, eval.PolicyDepth, eval.PolicyLoad, eval.PolicyRoundRobin, eval.PolicyRandom} {
		p, err := eval.NewPolicy(name, cfg)
		if err != nil {
			t.Fatal(err)
		}
		fleet, err := eval.NewFleet(cfg, p)
		if err != nil {
			t.Fatal(err)
		}
		watches := make([]*silenceWatch, cfg.DCs)
		for i := range watches {
			watches[i] = newSilenceWatch(DefaultRelaySilentSourceAfter, DefaultRelayForgetSourceAfter, sec(0))
		}
		next := 1.0
		var maxGap time.Duration
		checkUpTo := func(at float64) {
			for ; next <= at; next++ {
				for dc, w := range watches {
					if ch := w.check(sec(next)); len(ch) > 0 || len(w.silent) > 0 {
						t.Fatalf("%s: DC %d at %vs: a false alarm: %v", name, dc, next, ch)
					}
					if idle := w.idle(sec(next)); idle > DefaultRelaySilentSourceAfter {
						t.Fatalf("%s: DC %d at %vs: idle for %v", name, dc, next, idle)
					}
				}
			}
		}
		_, err = fleet.Run(reqs, eval.SharedPrefix(reqs, eval.WarmShare), eval.Hooks{Emit: func(ev *eval.KVEvent) {
			checkUpTo(ev.At)
			w, key := watches[ev.DC], sourceKey{uint64(ev.Worker), 0}
			if prev, ok := w.last[key]; ok {
				maxGap = max(maxGap, sec(ev.At).Sub(prev))
			}
			w.event(key, sec(ev.At))
		}})
		if err != nil {
			t.Fatal(err)
		}
		for dc, w := range watches {
			if len(w.last) != cfg.Workers {
				t.Fatalf("%s: DC %d: %d sources watched, want its %d workers", name, dc, len(w.last), cfg.Workers)
			}
		}
		t.Logf("%s: %d requests over %.0f s, longest quiet spell of a worker %v (bound %v)", name, len(reqs), next, maxGap.Round(time.Millisecond), DefaultRelaySilentSourceAfter)
	}
}

// TestSilenceWatchBounded: a producer that invents a worker id per event cannot grow the watch
// past maxWatchedSources at a check, nor past twice that between checks (a long replay): the
// sources heard from longest ago go first.
func TestSilenceWatchBounded(t *testing.T) {
	t.Parallel()
	w := newSilenceWatch(DefaultRelaySilentSourceAfter, DefaultRelayForgetSourceAfter, sec(0))
	n := 2*maxWatchedSources + 10
	for i := 0; i < n; i++ {
		w.event(sourceKey{uint64(i), 0}, sec(float64(i)/1000))
		if len(w.last) >= 2*maxWatchedSources {
			t.Fatalf("after %d sources the watch holds %d", i+1, len(w.last))
		}
	}
	w.check(sec(float64(n) / 1000))
	if len(w.last) != maxWatchedSources {
		t.Fatalf("after a check the watch holds %d sources, want %d", len(w.last), maxWatchedSources)
	}
	if _, ok := w.last[sourceKey{uint64(n - maxWatchedSources - 1), 0}]; ok {
		t.Fatal("a source older than the newest maxWatchedSources is still held")
	}
	if _, ok := w.last[sourceKey{uint64(n - maxWatchedSources), 0}]; !ok {
		t.Fatal("one of the newest maxWatchedSources sources was dropped")
	}
}
