package producer

import (
	"slices"
	"testing"

	"github.com/ckf-stream/ckf-stream/ckf"
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
