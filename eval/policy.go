package eval

import (
	"fmt"
	"math/rand/v2"
	"time"
)

// Policy names.
const (
	PolicyCKF        = "ckf"
	PolicyCostOracle = "oracle-cost"
	PolicyDepth      = "oracle-depth"
	PolicyLoad       = "load"
	PolicyRoundRobin = "round-robin"
	PolicyRandom     = "random"
)

// Cost is the cost the ckf policy and the cost oracle minimise for sending a request of input
// tokens to a DC whose cached prefix is depth blocks and whose outstanding prefill work is load
// seconds over its workers:
//
//	cost = uncached tokens / PrefillRate + λ × load / Workers
//
// the prefill the DC must do plus λ times its mean queue: an estimate of the time to first
// token that weighs cached depth against queue length (λ = Config.LoadWeight).
func (c Config) Cost(input, depth int, load float64) float64 {
	unc := max(input-depth*c.BlockTokens, min(1, input))
	return float64(unc)/c.PrefillRate + c.LoadWeight*load/float64(c.Workers)
}

// ChooseByCost returns the DC of least Cost given each DC's depth and load, ties at random.
func (c Config) ChooseByCost(input int, depth []int, load []float64, rng *rand.Rand) int {
	return argmin(len(depth), func(d int) float64 { return c.Cost(input, depth[d], load[d]) }, rng)
}

// WorkerCost is the worker rule's estimate of a request's time to first token on a worker whose
// cached prefix is depth blocks and whose outstanding prefill work is out seconds: its queue plus
// the uncached tokens / PrefillRate.
func (c Config) WorkerCost(input, depth int, out float64) float64 {
	return out + float64(max(input-depth*c.BlockTokens, min(1, input)))/c.PrefillRate
}

// WorkerChoice is the rule inside a DC: the worker of least WorkerCost given each worker's
// cached depth and outstanding work, ties at random. The fleet applies it on exact knowledge; a
// two-stage policy applies it on the worker stage's answer.
func (c Config) WorkerChoice(input int, depth []int, out []float64, rng *rand.Rand) int {
	return argmin(len(depth), func(w int) float64 { return c.WorkerCost(input, depth[w], out[w]) }, rng)
}

// argmin returns the index in [0,n) of the least value, ties broken uniformly with rng.
func argmin(n int, val func(int) float64, rng *rand.Rand) int {
	best, bestV, ties := 0, 0.0, 0
	for i := range n {
		v := val(i)
		switch {
		case i == 0 || v < bestV:
			best, bestV, ties = i, v, 1
		case v == bestV:
			ties++
			if rng.IntN(ties) == 0 {
				best = i
			}
		}
	}
	return best
}

type funcPolicy struct {
	name   string
	choose func(v *View, rng *rand.Rand) int
}

func (p funcPolicy) Name() string                       { return p.name }
func (p funcPolicy) Choose(v *View, rng *rand.Rand) int { return p.choose(v, rng) }

// NewPolicy returns the simulated policy called name: oracle-cost (Cost with every DC's exact
// cached depth: the ckf policy's rule with perfect knowledge), oracle-depth (the deepest exact
// cached prefix, ties to the least loaded DC, then at random: the hit-rate upper bound), load
// (the least outstanding prefill work: a load-only global router), round-robin and random.
func NewPolicy(name string, cfg Config) (Policy, error) {
	switch name {
	case PolicyCostOracle:
		return funcPolicy{name, func(v *View, rng *rand.Rand) int {
			return cfg.ChooseByCost(v.Req.InputTokens, v.Depth, v.Load, rng)
		}}, nil
	case PolicyDepth:
		return funcPolicy{name, func(v *View, rng *rand.Rand) int { return DepthChoice(v.Depth, v.Load, rng) }}, nil
	case PolicyLoad:
		return funcPolicy{name, func(v *View, rng *rand.Rand) int {
			return argmin(len(v.Load), func(d int) float64 { return v.Load[d] }, rng)
		}}, nil
	case PolicyRoundRobin:
		return funcPolicy{name, func(v *View, _ *rand.Rand) int { return v.Index % len(v.Depth) }}, nil
	case PolicyRandom:
		return funcPolicy{name, func(v *View, rng *rand.Rand) int { return rng.IntN(len(v.Depth)) }}, nil
	}
	return nil, fmt.Errorf("%w: unknown policy %q", ErrConfig, name)
}

// DepthChoice is the depth oracle's rule: the deepest prefix, ties to the least load, then at
// random.
func DepthChoice(depth []int, load []float64, rng *rand.Rand) int {
	deepest := 0
	for _, d := range depth {
		deepest = max(deepest, d)
	}
	return argmin(len(depth), func(d int) float64 {
		if depth[d] < deepest {
			return 1e300
		}
		return load[d]
	}, rng)
}

// StaleIndex is the ckf policy on a model of the index whose every KV event becomes visible a
// fixed delay (simulated time) after the engine emitted it: exact otherwise. With delay 0 it
// chooses as the cost oracle does. It measures what staleness costs.
type StaleIndex struct {
	cfg     Config
	delay   float64
	visible []map[uint64]struct{}
	queue   []staleChange
}

type staleChange struct {
	at   float64
	dc   int
	add  bool
	keys []uint64
}

// NewStaleIndex returns the ckf policy on an index delay behind the engines.
func NewStaleIndex(cfg Config, delay time.Duration) *StaleIndex {
	s := &StaleIndex{cfg: cfg, delay: delay.Seconds()}
	for range cfg.DCs {
		s.visible = append(s.visible, map[uint64]struct{}{})
	}
	return s
}

// Name is "ckf-stale-<delay>".
func (s *StaleIndex) Name() string {
	return fmt.Sprintf("ckf-stale-%v", time.Duration(s.delay*float64(time.Second)))
}

// Observe queues the event's DC-level changes for visibility after the delay.
func (s *StaleIndex) Observe(ev *KVEvent) {
	if len(ev.DCChange) == 0 {
		return
	}
	s.queue = append(s.queue, staleChange{at: ev.At + s.delay, dc: ev.DC, add: ev.Kind == KVStored, keys: append([]uint64(nil), ev.DCChange...)})
}

// Choose applies the changes due by v.Now and picks by Cost on the visible depths.
func (s *StaleIndex) Choose(v *View, rng *rand.Rand) int {
	i := 0
	for ; i < len(s.queue) && s.queue[i].at <= v.Now; i++ {
		c := s.queue[i]
		for _, k := range c.keys {
			if c.add {
				s.visible[c.dc][k] = struct{}{}
			} else {
				delete(s.visible[c.dc], k)
			}
		}
	}
	s.queue = s.queue[i:]
	depth := make([]int, len(s.visible))
	for d, vis := range s.visible {
		for depth[d] < len(v.Keys) {
			if _, ok := vis[v.Keys[depth[d]]]; !ok {
				break
			}
			depth[d]++
		}
	}
	return s.cfg.ChooseByCost(v.Req.InputTokens, depth, v.Load, rng)
}

// SharedPrefix returns the prefixes (as hash-id chains) that at least share of the requests
// start with: the blocks a warm start preloads on every worker (a chain and some of its prefixes
// may both be listed; storing a resident block again does nothing). For the Mooncake
// conversation trace it is block 0, which every request starts with.
func SharedPrefix(reqs []Request, share float64) [][]uint64 {
	count := map[uint64]int{}
	for _, r := range reqs {
		for _, k := range BlockKeys(r.HashIDs) {
			count[k]++
		}
	}
	need := max(2, int(share*float64(len(reqs))+0.999999))
	var out [][]uint64
	seen := map[uint64]bool{}
	for _, r := range reqs {
		keys := BlockKeys(r.HashIDs)
		n := 0
		for n < len(keys) && count[keys[n]] >= need {
			n++
		}
		if n > 0 && !seen[keys[n-1]] {
			seen[keys[n-1]] = true
			out = append(out, append([]uint64(nil), r.HashIDs[:n]...))
		}
	}
	return out
}
