package workers_test

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/ckf/producer"
	"github.com/ckf-stream/ckf-stream/ckf/workers"
	"github.com/ckf-stream/ckf-stream/eval"
)

// TestConversationTraceAnswers replays the first 20 minutes of the conversation trace through
// the fleet simulator of docs/EVALUATION.md (4 DCs of 8 workers, 512-block caches evicted
// least recently released first, leaves first) and feeds every KV event to one index per DC.
// At each request's arrival, the index of the DC the cost oracle chose answers the prompt, by
// MatchLocal without a chain (the replica's call) and by Match on its canonical chain, and
// both answers must give every worker of the DC the device depth the simulator knows exactly.
// It logs how many of the walked positions the walks found by following the slab, without a
// lookup (workers §5.4): how well stored runs serve a trace whose prompts branch and whose caches
// turn over, against the benchmarks' fixtures, whose prompts are stored whole.
func TestConversationTraceAnswers(t *testing.T) {
	reqs, _, err := eval.ReadTraceFile("../../traces/conversation_trace.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	reqs = eval.Window(reqs, 0, 20*60*1000)
	cfg := eval.DefaultConfig()
	oracle, err := eval.NewPolicy(eval.PolicyCostOracle, cfg)
	if err != nil {
		t.Fatal(err)
	}
	p := &indexPolicy{Policy: oracle, cfg: cfg, t: t}
	for range cfg.DCs {
		p.ixs = append(p.ixs, workers.New())
	}
	fleet, err := eval.NewFleet(cfg, p)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fleet.Run(reqs, eval.SharedPrefix(reqs, eval.WarmShare), eval.Hooks{Emit: p.apply}); err != nil {
		t.Fatal(err)
	}
	if p.queries == 0 || p.events == 0 {
		t.Fatalf("%d queries, %d events", p.queries, p.events)
	}
	t.Logf("%d requests, %d KV events; the device walks decided %d positions, %d of them (%.1f %%) found by following the slab (MatchLocal); Match: %d of %d (%.1f %%)",
		p.queries, p.events, p.walked[0], p.followed[0], 100*float64(p.followed[0])/float64(max(p.walked[0], 1)),
		p.followed[1], p.walked[1], 100*float64(p.followed[1])/float64(max(p.walked[1], 1)))
}

// indexPolicy is the cost oracle for the DC, and inside it the exact-knowledge worker choice,
// after checking the DC's index against that knowledge.
type indexPolicy struct {
	eval.Policy
	cfg              eval.Config
	t                *testing.T
	ixs              []*workers.Index
	res              workers.Result
	events           int
	queries          int
	followed, walked [2]int
}

// apply feeds a simulated engine's KV event to its DC's index, as the replica's decoder would.
func (p *indexPolicy) apply(ev *eval.KVEvent) {
	var re producer.RouterEvent
	re.WorkerID = ckf.WorkerID(ev.Worker)
	re.Event.EventID = ev.EventID
	switch ev.Kind {
	case eval.KVStored:
		re.Event.Kind = producer.KvEventStored
		re.Event.Stored.HasParent, re.Event.Stored.ParentHash = ev.HasParent, ckf.ExternalBlockHash(ev.Parent)
		for i, k := range ev.Keys {
			re.Event.Stored.Blocks = append(re.Event.Stored.Blocks, producer.StoredBlock{BlockHash: ckf.ExternalBlockHash(k), TokensHash: ckf.LocalBlockHash(ev.Locals[i])})
		}
	case eval.KVRemoved:
		re.Event.Kind = producer.KvEventRemoved
		for _, k := range ev.Keys {
			re.Event.Removed = append(re.Event.Removed, ckf.ExternalBlockHash(k))
		}
	}
	if err := p.ixs[ev.DC].Apply(re); err != nil {
		p.t.Fatalf("event %+v: %v", ev, err)
	}
	p.events++
}

func (p *indexPolicy) ChooseWorker(v *eval.View, wv *eval.WorkerView, rng *rand.Rand) int {
	ix := p.ixs[wv.DC]
	local := make([]ckf.LocalBlockHash, len(v.Locals))
	for i, l := range v.Locals {
		local[i] = ckf.LocalBlockHash(l)
	}
	var chain []ckf.CanonicalHash
	ix.MatchLocal(local, workers.Options{}, &p.res, &chain)
	for way := range 2 {
		if way == 0 {
			ix.MatchLocal(local, workers.Options{}, &p.res, nil)
		} else {
			ix.Match(chain, workers.Options{}, &p.res)
		}
		got := make([]int, len(wv.Depth))
		for _, m := range p.res.Matches {
			got[m.Source.Worker] = int(m.Device)
		}
		if !slices.Equal(got, wv.Depth) {
			p.t.Fatalf("request %d in DC %d (way %d): device depths %v, the simulator's %v", v.Index, wv.DC, way, got, wv.Depth)
		}
		followed, walked := p.res.Followed()
		p.followed[way] += followed
		p.walked[way] += walked
	}
	p.queries++
	return p.cfg.WorkerChoice(v.Req.InputTokens, wv.Depth, wv.Out, rng)
}
