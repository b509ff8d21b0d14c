package producer

import (
	"fmt"
	"maps"
	"slices"
	"testing"

	"github.com/ckf-stream/ckf-stream/ckf"
	"pgregory.net/rapid"
)

// TestDrainBatchesStayCallerOwned keeps every batch of a cadence-1 run, then appends to each
// one: small batches share a slab, so an append that wrote past a batch's end, or a drain that
// reused a handed-out region, would change another batch. Replaying the batches must also
// rebuild the state's words.
func TestDrainBatchesStayCallerOwned(t *testing.T) {
	s := mustDcState(t, cfgN(1<<10, 1))
	k := pSrc(1, 0)
	var batches, copies [][]ckf.BucketImage
	for i := uint64(0); i < 3*imageSlabLen; i++ {
		out := s.ApplyEvent(storeEv(k, pBlk(i+1, i*0x9E3779B97F4A7C15+7)))
		if out.Publication == nil {
			continue
		}
		batches = append(batches, out.Publication)
		copies = append(copies, slices.Clone(out.Publication))
	}
	for i, b := range batches {
		_ = append(b, ckf.BucketImage{Bucket: 1<<63 | uint64(i), Value: ^uint64(i)})
	}
	if len(batches) < imageSlabLen {
		t.Fatalf("only %d batches: the run did not span several slabs", len(batches))
	}
	words := make([]uint64, s.BucketCount())
	for i := range batches {
		if !slices.Equal(batches[i], copies[i]) {
			t.Fatalf("batch %d changed after it was returned: %v, returned as %v", i, batches[i], copies[i])
		}
		prodApplyImages(words, batches[i])
	}
	if !slices.Equal(words, s.CopyWords()) {
		t.Fatal("replaying the batches does not give the state's words")
	}
}

// TestOneBlockStoreDoesNotAllocate: a one-block store at cadence 1, drain included, allocates
// nothing per event in steady state (the tables' occasional growth and one slab per many
// batches round down to 0 in AllocsPerRun's integer average).
func TestOneBlockStoreDoesNotAllocate(t *testing.T) {
	s := mustDcState(t, cfgN(1<<14, 1))
	k := pSrc(1, 0)
	ev := storeEv(k, pBlk(0, 0))
	i := uint64(1)
	step := func() {
		ev.Event.Stored.Blocks[0] = pBlk(i, i*0x9E3779B97F4A7C15+1)
		if out := s.ApplyEvent(ev); out.FirstError != nil {
			t.Fatalf("store %d: %v", i, out.FirstError)
		}
		i++
	}
	for range 1000 {
		step()
	}
	if n := testing.AllocsPerRun(2000, step); n != 0 {
		t.Fatalf("a one-block store allocates %v per event", n)
	}
}

// TestStoreOneMatchesGeneralPath drives two states with the same random one-block events (roots
// and children, re-offers, remaps, unknown parents, non-zero start positions, removals) on a
// small table, so kicks and capacity omissions happen, and with reservations refused at random
// sites: the one-block path (storeOne) and the general path must give the same outcomes, call
// the reservation hook at the same sites in the same order, report the same delegate calls and
// end in the same state.
func TestStoreOneMatchesGeneralPath(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		cfg := cfgN(48, uint64(rapid.IntRange(1, 3).Draw(rt, "every")))
		cfg.MaxKicks = rapid.SampledFrom([]uint64{1, 3, ckf.DefaultMaxKicks}).Draw(rt, "kicks")
		fast, general := mustDcState(rt, cfg), mustDcState(rt, cfg)
		general.generalStoreOnly = true
		fastLog, generalLog := &delegateLog{}, &delegateLog{}
		fast.delegate, general.delegate = fastLog, generalLog
		var fastSites, generalSites []reserveSite
		steps := rapid.IntRange(1, 200).Draw(rt, "steps")
		for i := range steps {
			src := pSrc(ckf.WorkerID(1+rapid.IntRange(0, 1).Draw(rt, "worker")), 0)
			var ev RouterEvent
			if rapid.IntRange(0, 5).Draw(rt, "remove") == 0 {
				ev = removeEv(src, uint64(rapid.IntRange(1, 60).Draw(rt, "removed")))
			} else {
				blk := pBlk(uint64(rapid.IntRange(1, 60).Draw(rt, "ext")), uint64(rapid.IntRange(0, 90).Draw(rt, "tokens")))
				ev = storeEv(src, blk)
				switch rapid.IntRange(0, 5).Draw(rt, "shape") {
				case 0, 1:
					ev = storeChildEv(src, uint64(rapid.IntRange(1, 60).Draw(rt, "parent")), blk)
				case 2:
					ev.Event.Stored.HasStartPosition = true
					ev.Event.Stored.StartPosition = uint32(rapid.IntRange(0, 1).Draw(rt, "start"))
				}
			}
			refuse := reserveSite(rapid.IntRange(0, 30).Draw(rt, "refuse")) // mostly none
			fast.failReserve = func(x reserveSite) bool { fastSites = append(fastSites, x); return x == refuse }
			general.failReserve = func(x reserveSite) bool { generalSites = append(generalSites, x); return x == refuse }
			fo, gouts := fast.ApplyEvent(ev), general.ApplyEvent(ev)
			if fmt.Sprint(fo.FirstError) != fmt.Sprint(gouts.FirstError) || !slices.Equal(fo.Publication, gouts.Publication) ||
				fo.UnknownRemovals != gouts.UnknownRemovals || fo.PublicationBoundary != gouts.PublicationBoundary {
				rt.Fatalf("step %d %+v: one-block path %+v, general path %+v", i, ev, fo, gouts)
			}
			if !slices.Equal(fastSites, generalSites) {
				rt.Fatalf("step %d: reservation sites %v, general path %v", i, fastSites, generalSites)
			}
			if err := checkInvariants(fast); err != nil {
				rt.Fatalf("step %d: %v", i, err)
			}
		}
		if !slices.Equal(fast.CopyWords(), general.CopyWords()) || fast.filter.RngState() != general.filter.RngState() {
			rt.Fatal("words or RNG differ")
		}
		// Table capacities may differ: the general path writes an existing ownership record back
		// with an insertion, which may grow the table, the one-block path updates it in place.
		fs, gs := fast.Stats(), general.Stats()
		fs.OwnerBytes, gs.OwnerBytes = 0, 0
		if fs != gs || fast.Telemetry() != general.Telemetry() {
			rt.Fatalf("stats %+v, general path %+v", fs, gs)
		}
		if !maps.EqualFunc(allLineages(fast), allLineages(general), maps.Equal) || !maps.Equal(ownersSnapshot(fast), ownersSnapshot(general)) {
			rt.Fatal("lineage or ownership differs")
		}
		if !slices.Equal(fastLog.created, generalLog.created) || !slices.Equal(fastLog.removed, generalLog.removed) {
			rt.Fatalf("delegate calls %+v, general path %+v", fastLog, generalLog)
		}
	})
}
