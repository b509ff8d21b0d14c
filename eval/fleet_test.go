package eval

import (
	"flag"
	"math/rand/v2"
	"testing"
	"time"
)

// tiny is a one-worker fleet of one-token blocks, one token per second each way, cold.
func tiny(cache int) Config {
	return Config{DCs: 1, Workers: 1, CacheBlocks: cache, BlockTokens: 1, PrefillRate: 1, DecodeRate: 1, Seed: 1, Buckets: 1}
}

func mustPolicy(t *testing.T, name string, cfg Config) Policy {
	t.Helper()
	p, err := NewPolicy(name, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func run(t *testing.T, cfg Config, reqs []Request) (*Result, []KVEvent) {
	t.Helper()
	f, err := NewFleet(cfg, mustPolicy(t, PolicyRoundRobin, cfg))
	if err != nil {
		t.Fatal(err)
	}
	var evs []KVEvent
	res, err := f.Run(reqs, nil, Hooks{Emit: func(ev *KVEvent) {
		c := *ev
		c.Keys = append([]uint64(nil), ev.Keys...)
		evs = append(evs, c)
	}})
	if err != nil {
		t.Fatal(err)
	}
	return res, evs
}

func TestFleetEvictsLeastRecentLeavesFirst(t *testing.T) {
	reqs := []Request{
		{Time: 0, InputTokens: 2, HashIDs: []uint64{1, 2}},
		{Time: 10_000, InputTokens: 2, HashIDs: []uint64{1, 3}},
		{Time: 20_000, InputTokens: 3, HashIDs: []uint64{5, 6, 7}},
	}
	res, evs := run(t, tiny(4), reqs)
	k12, k13 := BlockKeys([]uint64{1, 2}), BlockKeys([]uint64{1, 3})
	var removed []uint64
	for _, ev := range evs {
		if ev.Kind == KVRemoved {
			removed = append(removed, ev.Keys...)
		}
	}
	// Block 2 was released first, then 3; block 1, their parent, was used last: it stays.
	if len(removed) != 2 || removed[0] != k12[1] || removed[1] != k13[1] {
		t.Errorf("removed %x, want %x then %x", removed, k12[1], k13[1])
	}
	if res.HitBlocks != 1 || res.RequestedBlocks != 7 || res.Completed != 3 || res.Overflow != 0 {
		t.Errorf("result %+v", res)
	}
	// The second request's store names its parent, block 1.
	if ev := evs[1]; ev.Kind != KVStored || !ev.HasParent || ev.Parent != k13[0] || len(ev.Keys) != 1 {
		t.Errorf("second store %+v", ev)
	}
}

func TestFleetPinsRunningRequests(t *testing.T) {
	reqs := []Request{
		{Time: 0, InputTokens: 3, OutputTokens: 100, HashIDs: []uint64{1, 2, 3}},
		{Time: 1000, InputTokens: 2, HashIDs: []uint64{4, 5}},
	}
	res, evs := run(t, tiny(3), reqs)
	// The first request decodes for 100 s holding its three blocks: the second one's blocks
	// overflow the cache rather than evict them.
	for _, ev := range evs {
		if ev.Kind == KVRemoved && ev.At < 103 {
			t.Errorf("a pinned block was evicted: %+v", ev)
		}
	}
	if res.Overflow != 2 {
		t.Errorf("overflow %d, want 2", res.Overflow)
	}
	// Time to first token: 3 s prefill; the second waits for it (starts at 3 s, 2 s prefill).
	if res.TTFTMax != 4 || res.TTFTP50 != 3 {
		t.Errorf("TTFT p50 %v max %v, want 3 and 4", res.TTFTP50, res.TTFTMax)
	}
}

func readConversation(t *testing.T, window time.Duration) []Request {
	t.Helper()
	reqs, _, err := ReadTraceFile("../traces/conversation_trace.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	return Window(reqs, 0, float64(window.Milliseconds()))
}

// TestFleetEventsAreConsistent replays the events of a whole simulated run into a model of each
// worker: every stored block is new and follows a resident parent, every removed block is
// resident and leaves no resident child behind, and no cache exceeds its size.
func TestFleetEventsAreConsistent(t *testing.T) {
	reqs := readConversation(t, 5*time.Minute)
	cfg := DefaultConfig()
	cfg.CacheBlocks = 128
	f, err := NewFleet(cfg, mustPolicy(t, PolicyRandom, cfg))
	if err != nil {
		t.Fatal(err)
	}
	type wk struct{ dc, w int }
	model := map[wk]map[uint64]uint64{} // key -> parent key (0: root)
	events := 0
	res, err := f.Run(reqs, SharedPrefix(reqs, WarmShare), Hooks{Emit: func(ev *KVEvent) {
		events++
		m := model[wk{ev.DC, ev.Worker}]
		if m == nil {
			m = map[uint64]uint64{}
			model[wk{ev.DC, ev.Worker}] = m
		}
		switch ev.Kind {
		case KVStored:
			parent := uint64(0)
			if ev.HasParent {
				if _, ok := m[ev.Parent]; !ok {
					t.Fatalf("event %d: parent %x not resident", events, ev.Parent)
				}
				parent = ev.Parent
			}
			for _, k := range ev.Keys {
				if _, ok := m[k]; ok {
					t.Fatalf("event %d: %x stored twice", events, k)
				}
				m[k], parent = parent, k
			}
		case KVRemoved:
			for _, k := range ev.Keys {
				if _, ok := m[k]; !ok {
					t.Fatalf("event %d: %x removed but not resident", events, k)
				}
				delete(m, k)
			}
			for k, p := range m {
				for _, r := range ev.Keys {
					if p == r {
						t.Fatalf("event %d: %x removed before its child %x", events, r, k)
					}
				}
			}
		}
		if len(m) > cfg.CacheBlocks+f.res.Overflow {
			t.Fatalf("event %d: %d blocks resident", events, len(m))
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Completed != len(reqs) || res.Requests != len(reqs) {
		t.Errorf("%d of %d requests completed; overflow %d", res.Completed, len(reqs), res.Overflow)
	}
	if res.EvictedBlocks == 0 {
		t.Error("no eviction: the caches are too large for the test")
	}
}

// TestPolicyInvariants checks the ordering of the simulated policies on the first ten minutes
// of the conversation trace: the depth oracle's hit rate is above load's, round-robin's and
// random's, and the cost oracle's too; the ckf rule on an index a minute stale stays above load.
func TestPolicyInvariants(t *testing.T) {
	reqs := readConversation(t, 10*time.Minute)
	cfg := DefaultConfig()
	hit := map[string]float64{}
	for _, name := range []string{PolicyDepth, PolicyCostOracle, PolicyLoad, PolicyRoundRobin, PolicyRandom} {
		res, err := Simulate(reqs, cfg, mustPolicy(t, name, cfg))
		if err != nil {
			t.Fatal(err)
		}
		hit[name] = res.HitRate
		if res.Completed != len(reqs) {
			t.Errorf("%s: %d of %d completed", name, res.Completed, len(reqs))
		}
	}
	stale, err := Simulate(reqs, cfg, NewStaleIndex(cfg, time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	for _, base := range []string{PolicyLoad, PolicyRoundRobin, PolicyRandom} {
		for _, top := range []string{PolicyDepth, PolicyCostOracle} {
			if hit[top] < 1.5*hit[base] {
				t.Errorf("%s hit rate %.4f is not 1.5× %s's %.4f", top, hit[top], base, hit[base])
			}
		}
	}
	if stale.HitRate <= hit[PolicyLoad] {
		t.Errorf("ckf on a 1-minute-stale index %.4f, load %.4f", stale.HitRate, hit[PolicyLoad])
	}
	t.Logf("hit rates %v, stale 1m %.4f", hit, stale.HitRate)
}

func TestStaleIndexZeroIsCostOracle(t *testing.T) {
	reqs := readConversation(t, 3*time.Minute)
	cfg := DefaultConfig()
	a, err := Simulate(reqs, cfg, NewStaleIndex(cfg, 0))
	if err != nil {
		t.Fatal(err)
	}
	b, err := Simulate(reqs, cfg, mustPolicy(t, PolicyCostOracle, cfg))
	if err != nil {
		t.Fatal(err)
	}
	if a.HitBlocks != b.HitBlocks || a.PrefillTokens != b.PrefillTokens {
		t.Errorf("stale index with no delay: %d hits, cost oracle %d", a.HitBlocks, b.HitBlocks)
	}
}

// exactTwoStage is a two-stage policy with exact knowledge at both stages.
type exactTwoStage struct{ cfg Config }

func (p exactTwoStage) Name() string { return PolicyCKF }
func (p exactTwoStage) Choose(v *View, rng *rand.Rand) int {
	return p.cfg.ChooseByCost(v.Req.InputTokens, v.Depth, v.Load, rng)
}
func (p exactTwoStage) ChooseWorker(v *View, wv *WorkerView, rng *rand.Rand) int {
	return p.cfg.WorkerChoice(v.Req.InputTokens, wv.Depth, wv.Out, rng)
}

// blindWorkers knows the DCs exactly and nothing of the workers' caches: it chooses by load.
type blindWorkers struct{ exactTwoStage }

func (p blindWorkers) ChooseWorker(v *View, wv *WorkerView, rng *rand.Rand) int {
	return p.cfg.WorkerChoice(v.Req.InputTokens, make([]int, len(wv.Out)), wv.Out, rng)
}

// TestTwoStageExactIsCostOracle: a two-stage policy choosing the worker by the exact-knowledge
// rule on exact depths agrees with exact knowledge on every request and makes the cost oracle's
// every choice (the fleet's saved draws leave the tie breaks unchanged); one blind to the workers'
// caches agrees on every DC and on fewer workers, with fewer hits.
func TestTwoStageExactIsCostOracle(t *testing.T) {
	reqs := readConversation(t, 3*time.Minute)
	cfg := DefaultConfig()
	a, err := Simulate(reqs, cfg, exactTwoStage{cfg})
	if err != nil {
		t.Fatal(err)
	}
	b, err := Simulate(reqs, cfg, mustPolicy(t, PolicyCostOracle, cfg))
	if err != nil {
		t.Fatal(err)
	}
	if a.HitBlocks != b.HitBlocks || a.PrefillTokens != b.PrefillTokens {
		t.Errorf("two-stage on exact knowledge: %d hits, cost oracle %d", a.HitBlocks, b.HitBlocks)
	}
	if ts := a.TwoStage; ts == nil || ts.Requests != len(reqs) || ts.SameDC != ts.Requests || ts.SameWorker != ts.Requests {
		t.Errorf("two-stage agreement %+v over %d requests", ts, len(reqs))
	}
	if b.TwoStage != nil {
		t.Errorf("a one-stage policy counted two-stage choices: %+v", b.TwoStage)
	}
	c, err := Simulate(reqs, cfg, blindWorkers{exactTwoStage{cfg}})
	if err != nil {
		t.Fatal(err)
	}
	if ts := c.TwoStage; ts == nil || ts.SameWorker >= ts.Requests || c.HitBlocks >= b.HitBlocks {
		t.Errorf("blind worker choice: agreement %+v, %d hits against %d", ts, c.HitBlocks, b.HitBlocks)
	}
}

func TestSharedPrefix(t *testing.T) {
	reqs := []Request{{HashIDs: []uint64{0, 1}}, {HashIDs: []uint64{0, 2}}, {HashIDs: []uint64{0, 1, 3}}, {HashIDs: []uint64{4}}}
	got := SharedPrefix(reqs, 0.5)
	if len(got) != 2 || len(got[0]) != 2 || got[0][1] != 1 || len(got[1]) != 1 || got[1][0] != 0 {
		t.Errorf("shared prefix %v, want [[0 1] [0]]", got)
	}
}

// sweep runs TestLoadWeightSweep's whole sweep (go test -run TestLoadWeightSweep -v ./eval/
// -sweep); without it the test checks the default λ alone, at 1×.
var sweep = flag.Bool("sweep", false, "TestLoadWeightSweep: sweep λ at 1× and 3× arrivals")

// TestLoadWeightSweep logs the cost oracle against the depth oracle for several λ over five
// seeds, at 1× and with arrivals compressed 3× (docs/EVALUATION.md, "The load weight"), and
// checks that the default λ keeps the cost oracle within 3 % of the depth oracle's hit rate at 1×.
func TestLoadWeightSweep(t *testing.T) {
	base := readConversation(t, 10*time.Minute)
	compressions, weights := []float64{1}, []float64{DefaultLoadWeight}
	if *sweep {
		compressions, weights = []float64{1, 3}, []float64{0, 0.1, 0.25, 0.5, 1, 2}
	}
	for _, compress := range compressions {
		reqs := append([]Request(nil), base...)
		for i := range reqs {
			reqs[i].Time /= compress
		}
		for _, lam := range weights {
			var hc, hd, tc, td float64
			const seeds = 5
			for s := uint64(1); s <= seeds; s++ {
				cfg := DefaultConfig()
				cfg.LoadWeight, cfg.Seed = lam, s
				a, err := Simulate(reqs, cfg, mustPolicy(t, PolicyCostOracle, cfg))
				if err != nil {
					t.Fatal(err)
				}
				b, err := Simulate(reqs, cfg, mustPolicy(t, PolicyDepth, cfg))
				if err != nil {
					t.Fatal(err)
				}
				hc, hd = hc+a.HitRate/seeds, hd+b.HitRate/seeds
				tc, td = tc+a.TTFTMean/seeds, td+b.TTFTMean/seeds
			}
			t.Logf("arrivals %g×, λ %.2f: oracle-cost hit %.4f, TTFT mean %.3f s; oracle-depth hit %.4f, TTFT mean %.3f s; ratio %.3f",
				compress, lam, hc, tc, hd, td, hc/hd)
			if compress == 1 && lam == DefaultLoadWeight && hc < 0.97*hd {
				t.Errorf("default λ %.2f: oracle-cost hit %.4f < 0.97 × oracle-depth %.4f", lam, hc, hd)
			}
		}
	}
}
