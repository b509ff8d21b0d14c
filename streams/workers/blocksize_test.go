package workers

import (
	"errors"
	"slices"
	"testing"

	"github.com/ckf-stream/ckf-stream/schemas"
)

// TestBlockSizesRule: the DC's sizes are learned per source from stored events (a size of 0
// teaches nothing) and forgotten at the source's clear; a token query is refused only when no
// source publishes its size, with the prefix-match path's sentence (both sizes, and each size's
// sources when the sources disagree), and the refusal matches ErrBlockSizeMismatch.
func TestBlockSizesRule(t *testing.T) {
	var b blockSizes
	stored := func(worker uint64, rank, size uint32) *schemas.KvEvent {
		return &schemas.KvEvent{WorkerID: worker, DpRank: rank, Kind: schemas.KvStoredEvent, Stored: schemas.KvStored{BlockSize: size}}
	}
	check := func(size uint32) error { return b.load().check("00000000000000a1", size) }
	if err := check(32); err != nil {
		t.Fatalf("no size known: %v", err)
	}
	b.observe(stored(7, 0, 0)) // an event without a size
	if err := check(32); err != nil || len(b.load().sizes) != 0 {
		t.Fatalf("a store without a size taught %v: %v", b.load().sizes, err)
	}
	b.observe(stored(7, 0, 16))
	b.observe(stored(8, 1, 16))
	if err := check(16); err != nil {
		t.Fatalf("the engines' size: %v", err)
	}
	err := check(32)
	var be *BlockSizeError
	if !errors.Is(err, ErrBlockSizeMismatch) || !errors.As(err, &be) ||
		err.Error() != "block_size 32, but the engines of dc 00000000000000a1 publish blocks of 16 tokens" {
		t.Fatalf("another size: %v", err)
	}
	// A source of another size: either size is answered, a third refused with both named.
	b.observe(stored(9, 0, 32))
	if check(16) != nil || check(32) != nil {
		t.Fatal("a size some source publishes was refused")
	}
	if err := check(8); err == nil || err.Error() != "block_size 8, but the engines of dc 00000000000000a1 publish blocks of 16 tokens (worker 7 rank 0, worker 8 rank 1); of 32 tokens (worker 9 rank 0)" {
		t.Fatalf("a size none publishes: %v", err)
	}
	if got := b.load().describe(); got != "16: worker 7 rank 0, worker 8 rank 1; 32: worker 9 rank 0" {
		t.Fatalf("describe: %q", got)
	}
	// A clear forgets its source: worker 9 restarted, perhaps with another size.
	b.observe(&schemas.KvEvent{WorkerID: 9, Kind: schemas.KvClearedEvent})
	if !slices.Equal(b.load().sizes, []uint32{16}) || check(32) == nil {
		t.Fatalf("after worker 9's clear: sizes %v, 32 refused %v", b.load().sizes, check(32))
	}
	// Removals teach nothing; a snapshot read before a change keeps its sizes.
	before := b.load()
	b.observe(&schemas.KvEvent{WorkerID: 7, Kind: schemas.KvRemovedEvent})
	b.observe(stored(10, 0, 64))
	if !slices.Equal(before.sizes, []uint32{16}) || !slices.Equal(b.load().sizes, []uint32{16, 64}) {
		t.Fatalf("snapshots: before %v, now %v", before.sizes, b.load().sizes)
	}
}
