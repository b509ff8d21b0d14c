package workers

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/ckf/producer"
	ckfworkers "github.com/ckf-stream/ckf-stream/ckf/workers"
)

// traceGen makes event traces over a few workers, dp ranks and tiers: chains stored with and
// without parents, extended, removed (leaves first and not), cleared; duplicates, removals of
// blocks never stored, stores with unknown parents, cache-owner events and unknown tiers.
type traceGen struct {
	rng    *rand.Rand
	chains map[ckf.SourceKey][][]ckf.ExternalBlockHash // stored chains per source (external ids)
	next   uint64
	// prompts are local-hash chains whose prefixes the generator stores: queries use them.
	prompts [][]ckf.LocalBlockHash
	queue   []producer.RouterEvent // events due before the next random one
}

func newTraceGen(seed uint64) *traceGen {
	g := &traceGen{rng: rand.New(rand.NewPCG(seed, 7)), chains: map[ckf.SourceKey][][]ckf.ExternalBlockHash{}}
	for range 6 {
		p := make([]ckf.LocalBlockHash, 12)
		for i := range p {
			p[i] = ckf.LocalBlockHash(g.rng.Uint64())
		}
		g.prompts = append(g.prompts, p)
	}
	return g
}

func (g *traceGen) ev(src ckf.SourceKey, tier producer.StorageTier, kind producer.KvEventKind) producer.RouterEvent {
	g.next++
	return producer.RouterEvent{WorkerID: src.Worker, StorageTier: tier, Residency: producer.ResidencyWorker,
		Event: producer.KvCacheEvent{Kind: kind, DpRank: src.Rank, EventID: g.next}}
}

// event returns the next event of the trace.
func (g *traceGen) event() producer.RouterEvent {
	if len(g.queue) > 0 {
		ev := g.queue[0]
		g.queue = g.queue[1:]
		return ev
	}
	r := g.rng
	src := ckf.SourceKey{Worker: ckf.WorkerID(1 + r.IntN(4)), Rank: ckf.DpRank(r.IntN(2))}
	tier := producer.StorageTierDevice
	if r.IntN(4) == 0 {
		tier = producer.StorageTier(1 + r.IntN(3))
	}
	switch x := r.IntN(100); {
	case x < 50: // store a prefix of a prompt, maybe continuing a chain of the source
		p := g.prompts[r.IntN(len(g.prompts))]
		n := 1 + r.IntN(len(p))
		ev := g.ev(src, tier, producer.KvEventStored)
		ids := make([]ckf.ExternalBlockHash, n)
		split := 0
		if n > 1 && r.IntN(2) == 0 {
			split = 1 + r.IntN(n-1) // store [split, n) with parent ids[split-1] stored before
		}
		for i := range ids {
			// External ids derived from the prompt and position (stable across tiers, as engines do).
			ids[i] = ckf.ExternalBlockHash(uint64(p[0])*31 + uint64(i)*1_000_003 + uint64(src.Worker)<<40)
		}
		var pre producer.RouterEvent
		if split > 0 {
			pre = g.ev(src, tier, producer.KvEventStored)
			for i := range split {
				pre.Event.Stored.Blocks = append(pre.Event.Stored.Blocks, producer.StoredBlock{BlockHash: ids[i], TokensHash: p[i]})
			}
			g.chains[src] = append(g.chains[src], ids[:split])
			ev.Event.Stored.HasParent, ev.Event.Stored.ParentHash = true, ids[split-1]
		}
		for i := split; i < n; i++ {
			ev.Event.Stored.Blocks = append(ev.Event.Stored.Blocks, producer.StoredBlock{BlockHash: ids[i], TokensHash: p[i]})
		}
		g.chains[src] = append(g.chains[src], ids)
		if split > 0 {
			g.queue = append(g.queue, ev)
			return pre
		}
		return ev
	case x < 80: // remove some blocks of a stored chain (often the tail), or an unknown one
		ev := g.ev(src, tier, producer.KvEventRemoved)
		cs := g.chains[src]
		if len(cs) == 0 || r.IntN(10) == 0 {
			ev.Event.Removed = []ckf.ExternalBlockHash{ckf.ExternalBlockHash(r.Uint64())}
			return ev
		}
		c := cs[r.IntN(len(cs))]
		from := r.IntN(len(c))
		ev.Event.Removed = append([]ckf.ExternalBlockHash(nil), c[from:]...)
		return ev
	case x < 86:
		return g.ev(src, tier, producer.KvEventCleared)
	case x < 90: // a store whose parent nobody stored
		ev := g.ev(src, tier, producer.KvEventStored)
		ev.Event.Stored.HasParent, ev.Event.Stored.ParentHash = true, ckf.ExternalBlockHash(r.Uint64())
		ev.Event.Stored.Blocks = []producer.StoredBlock{{BlockHash: ckf.ExternalBlockHash(r.Uint64()), TokensHash: 1}}
		return ev
	case x < 93: // cache owner
		ev := g.ev(src, producer.StorageTierDisk, producer.KvEventStored)
		ev.Residency = producer.ResidencyCacheOwner
		ev.Event.Stored.Blocks = []producer.StoredBlock{{BlockHash: 5, TokensHash: 5}}
		return ev
	case x < 95: // an unknown tier
		ev := g.ev(src, producer.StorageTier(9), producer.KvEventStored)
		ev.Event.Stored.Blocks = []producer.StoredBlock{{BlockHash: 6, TokensHash: 6}}
		return ev
	default: // a store that remaps an id to another canonical
		ev := g.ev(src, tier, producer.KvEventStored)
		if cs := g.chains[src]; len(cs) > 0 {
			ev.Event.Stored.Blocks = []producer.StoredBlock{{BlockHash: cs[0][0], TokensHash: ckf.LocalBlockHash(r.Uint64())}}
		}
		return ev
	}
}

// trace returns n events.
func (g *traceGen) trace(n int) []producer.RouterEvent {
	out := make([]producer.RouterEvent, n)
	for i := range out {
		out[i] = g.event()
	}
	return out
}

// queries are every prefix of every prompt, as canonical chains.
func (g *traceGen) queries() [][]ckf.CanonicalHash {
	var out [][]ckf.CanonicalHash
	for _, p := range g.prompts {
		c := make([]ckf.CanonicalHash, len(p))
		for i, l := range p {
			if i == 0 {
				c[i] = ckf.CanonicalRoot(l)
			} else {
				c[i] = ckf.CanonicalChild(c[i-1], l)
			}
		}
		for n := 1; n <= len(c); n++ {
			out = append(out, c[:n])
		}
	}
	return out
}

// localAnswers is answers through the replica's MatchLocal on the queries' local hashes (the
// same queries, in queries' order): the chain it gives back must be each query's.
func localAnswers(t *testing.T, r *Replica, g *traceGen, qs [][]ckf.CanonicalHash) [][]ckfworkers.Match {
	t.Helper()
	var res ckfworkers.Result
	var chain []ckf.CanonicalHash
	var out [][]ckfworkers.Match
	for _, p := range g.prompts {
		for n := 1; n <= len(p); n++ {
			r.MatchLocal(p[:n], ckfworkers.Options{}, &res, &chain)
			if q := qs[len(out)]; !slices.Equal(chain, q) {
				t.Fatalf("MatchLocal's chain of query %d is %v, want %v", len(out), chain, q)
			}
			out = append(out, append([]ckfworkers.Match(nil), res.Matches...))
		}
	}
	return out
}

// answers returns ix's answer to every query, top k and filters off.
func answers(match func([]ckf.CanonicalHash, ckfworkers.Options, *ckfworkers.Result), qs [][]ckf.CanonicalHash) [][]ckfworkers.Match {
	var res ckfworkers.Result
	out := make([][]ckfworkers.Match, len(qs))
	for i, q := range qs {
		match(q, ckfworkers.Options{}, &res)
		out[i] = append([]ckfworkers.Match(nil), res.Matches...)
	}
	return out
}
