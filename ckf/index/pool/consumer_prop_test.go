package pool

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/ckf/index"
	"github.com/ckf-stream/ckf-stream/ckf/producer"
	"pgregory.net/rapid"
)

// ---- search properties --------------------------------------------------------

// ---- producer -> consumer convergence -------------------------------------------

// For random event streams through the producer's DcState + Publisher and
// the ingestion pool: after an exact drain the lane's words equal the
// producer's words, and a query over any stored chain never reports less
// than the chain's resident prefix nor more than its length.
func TestPropProducerConsumerConvergence(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		buckets := rapid.SampledFrom([]uint64{16, 64, 256}).Draw(rt, "buckets")
		cfg := quietConfig()
		cfg.MaxOutstandingImagesPerLane = 1 << 20
		cfg.QueueCapacity = 1 << 12
		pf := newPoolFixture(t, 2, buckets, cfg, poolHooks{})
		defer pf.p.Close()
		a := newTestAdapter(t, pf, 1, 1)

		type chain struct {
			worker ckf.WorkerID
			tokens []uint64
		}
		paths := map[uint64]chain{} // external id -> token path from root
		var ids []uint64
		nextExt := uint64(1)
		steps := rapid.IntRange(1, 60).Draw(rt, "steps")
		for i := 0; i < steps; i++ {
			w := ckf.WorkerID(rapid.IntRange(1, 3).Draw(rt, "worker"))
			var ev producer.RouterEvent
			var newIDs []uint64
			var newPaths [][]uint64
			switch op := rapid.IntRange(0, 9).Draw(rt, "op"); {
			case op < 4 || len(ids) == 0: // new root chain
				k := rapid.IntRange(1, 6).Draw(rt, "len")
				var blocks [][2]uint64
				var tokens []uint64
				for j := 0; j < k; j++ {
					tok := uint64(rapid.IntRange(1, 12).Draw(rt, "tok"))
					tokens = append(tokens, tok)
					blocks = append(blocks, [2]uint64{nextExt, tok})
					newIDs = append(newIDs, nextExt)
					newPaths = append(newPaths, append([]uint64(nil), tokens...))
					nextExt++
				}
				ev = cStore(w, nil, blocks...)
			case op < 7: // extend an existing chain of this worker
				parent := rapid.SampledFrom(ids).Draw(rt, "parent")
				pc := paths[parent]
				w = pc.worker
				k := rapid.IntRange(1, 3).Draw(rt, "len")
				var blocks [][2]uint64
				tokens := append([]uint64(nil), pc.tokens...)
				for j := 0; j < k; j++ {
					tok := uint64(rapid.IntRange(1, 12).Draw(rt, "tok"))
					tokens = append(tokens, tok)
					blocks = append(blocks, [2]uint64{nextExt, tok})
					newIDs = append(newIDs, nextExt)
					newPaths = append(newPaths, append([]uint64(nil), tokens...))
					nextExt++
				}
				p := parent
				ev = cStore(w, &p, blocks...)
			case op < 9: // remove some blocks
				id := rapid.SampledFrom(ids).Draw(rt, "victim")
				ev = cRemove(paths[id].worker, id)
			default:
				ev = cClear(w)
			}
			out, err := a.apply(ev)
			if err != nil {
				rt.Fatalf("publish: %v", err)
			}
			if out.FirstError == nil || errors.Is(out.FirstError, ckf.ErrCapacityExhausted) {
				for j, id := range newIDs {
					paths[id] = chain{worker: w, tokens: newPaths[j]}
					ids = append(ids, id)
				}
			}
			if rapid.IntRange(0, 7).Draw(rt, "drainNow") == 0 {
				if o, err := a.drain(); err != nil || o.Kind != index.OutcomeDrainAcknowledged {
					rt.Fatalf("intermediate drain %v %v", o, err)
				}
			}
		}
		o, err := a.drain()
		if err != nil || o.Kind != index.OutcomeDrainAcknowledged {
			rt.Fatalf("drain %v %v", o, err)
		}
		if !a.converged() {
			rt.Fatalf("lane words differ from producer words")
		}
		for _, id := range ids {
			toks := paths[id].tokens
			resident := 0
			for _, h := range ckf.SequenceHashes(toks) {
				if _, ok := a.state.Owners(ckf.CanonicalHash(h)); !ok {
					break
				}
				resident++
			}
			res, err := pf.g.FindPrefixMatches(toks)
			if err != nil {
				rt.Fatal(err)
			}
			d := res.Lanes[1].Depth
			if int(d) < resident || int(d) > len(toks) {
				rt.Fatalf("chain %v: depth %d, resident prefix %d", toks, d, resident)
			}
		}
	})
}

// ---- concurrency stress -----------------------------------------------------------

// Queries run in a loop while deltas, snapshots, assignments and
// retirements run on all sixteen lanes through the pool. A query never
// reports a depth above its length, never reports an unconfigured or
// never-activated lane, and after the churn every lane drains to the full
// depth.
func TestStressQueriesDuringIngestion(t *testing.T) {
	const buckets = 1 << 10
	const lanes = 15 // lane 15 stays unconfigured
	iters := 400
	if testing.Short() {
		iters = 40
	}
	cfg := DefaultIngestionPoolConfig()
	f := newFixture(t, lanes, buckets, 2)
	p, err := NewIngestionPool(f.g, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx := context.Background()

	chain := make([]uint64, 48)
	for i := range chain {
		chain[i] = uint64(i*7919 + 13)
	}
	truth := make([]uint64, buckets)
	if !insertChain(f.g.Addressing(), truth, chain) {
		t.Fatal("insert")
	}
	seqs := ckf.SequenceHashes(chain)
	// Bucket and word of each chain element in truth.
	type loc struct {
		b    uint64
		slot int
	}
	locs := make([]loc, len(seqs))
	for i, h := range seqs {
		pr := f.g.Addressing().Probe(h)
		found := false
		for _, b := range []uint64{pr.BucketA, pr.BucketB} {
			for s := 0; s < 4 && !found; s++ {
				if ckf.Bucket(truth[b]).Slot(s) == pr.Fingerprint {
					locs[i], found = loc{b, s}, true
				}
			}
		}
		if !found {
			t.Fatal("locate")
		}
	}

	var wg sync.WaitGroup
	stop := make(chan struct{})
	var queryErr error
	var qwg sync.WaitGroup
	qwg.Add(1)
	go func() {
		defer qwg.Done()
		for q := 0; ; q++ {
			select {
			case <-stop:
				return
			default:
			}
			n := 1 + q%len(chain)
			res, err := f.g.FindPrefixMatches(chain[:n])
			if err != nil {
				if !errors.Is(err, index.ErrUnavailable) {
					queryErr = err
					return
				}
				continue
			}
			if res.ReadyLanes&^f.m.ConfiguredLanes() != 0 || res.ReadyLanes&(1<<15) != 0 {
				queryErr = errors.New("unconfigured lane reported")
				return
			}
			for l := 0; l < ckf.LaneCount; l++ {
				m, ok := res.Match(uint8(l))
				if !ok {
					continue
				}
				if m.Depth > uint32(n) || m.Pool != f.pools[l] || m.Lane != uint8(l) {
					queryErr = errors.New("bad match")
					return
				}
			}
		}
	}()

	for l := uint8(0); l < lanes; l++ {
		wg.Add(1)
		go func(lane uint8) {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(lane), 99))
			words := append([]uint64(nil), truth...)
			epoch, seq := uint64(0), uint64(0)
			recover := func() {
				for {
					epoch++
					if err := p.Assign(ctx, f.identity(lane), f.lease(lane, epoch)); err != nil {
						t.Errorf("lane %d assign: %v", lane, err)
						return
					}
					snap := &ckf.Snapshot{Identity: f.identity(lane), Lease: f.lease(lane, epoch), Sequence: seq, Buckets: append([]uint64(nil), words...)}
					out, err := p.InstallSnapshot(ctx, snap)
					if err == nil && out.Kind == index.OutcomeSnapshotInstalled {
						return
					}
				}
			}
			recover()
			for i := 0; i < iters; i++ {
				switch r.IntN(16) {
				case 0:
					_ = p.RetireLane(f.lease(lane, epoch))
					recover()
				case 1:
					recover() // reassign over an active lane
				default:
					// Toggle one chain element out and back in: two deltas.
					k := locs[r.IntN(len(locs))]
					for _, remove := range []bool{true, false} {
						if remove {
							words[k.b] = uint64(ckf.Bucket(words[k.b]).WithSlot(k.slot, 0))
						} else {
							words[k.b] = truth[k.b]
						}
						d := &ckf.Delta{Identity: f.identity(lane), Lease: f.lease(lane, epoch), BaseSequence: seq, Sequence: seq + 1,
							Images: []ckf.BucketImage{{Bucket: k.b, Value: words[k.b]}}}
						seq++
						if err := p.SubmitDelta(ctx, d); err != nil {
							recover()
						}
					}
				}
			}
			// Drain to the final state.
			for {
				out, err := p.CompleteDrain(ctx, ckf.DrainMarker{Lease: f.lease(lane, epoch), ExpectedSequence: seq})
				if err == nil && out.Kind == index.OutcomeDrainAcknowledged {
					return
				}
				recover()
			}
		}(l)
	}
	wg.Wait()
	close(stop)
	qwg.Wait()
	if queryErr != nil {
		t.Fatal(queryErr)
	}
	res, err := f.g.FindPrefixMatches(chain)
	if err != nil {
		t.Fatal(err)
	}
	if res.ReadyLanes != f.m.ConfiguredLanes() {
		t.Fatalf("final ready %b", res.ReadyLanes)
	}
	for l := 0; l < lanes; l++ {
		if res.Lanes[l].Depth != uint32(len(chain)) {
			t.Fatalf("lane %d final depth %d", l, res.Lanes[l].Depth)
		}
	}
}
