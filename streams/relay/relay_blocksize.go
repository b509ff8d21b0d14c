package relay

import (
	"fmt"
	"slices"
	"strings"

	"github.com/ckf-stream/ckf-stream/schemas"
	"go.uber.org/zap"
)

// The DC's block size (consumer §6.5): every stored event of an engine carries its tokens per
// block (KvStored.block_size), the relay keeps the last size each source (worker, rank)
// reported, and every lane record carries the size those sources agree on
// (LaneRecord.block_size), which the indexer holds token-id queries to. Sources that disagree
// leave the lane without a size: the filter then holds blocks of each size, a query of either
// size can match the blocks of the engines of that size, and refusing the minority's size would
// refuse queries that match. The disagreement is counted (ckf_relay_block_sizes above 1) and
// logged with every size and its sources instead. Nothing of this is checkpointed: a restarted
// relay learns the sizes again from the events it replays after its checkpoint and from the
// live ones, and its records carry no size until then (the indexer judges no query by them).

// blockSizes is the per-source bookkeeping; owned by the relay's loop goroutine.
type blockSizes struct {
	bySource map[sourceKey]uint32
	// lane is the size every record carries: the one size of bySource, 0 when there is none or
	// more than one. distinct is how many sizes bySource holds.
	lane     uint32
	distinct int
}

// note records the block size a stored event of source reported and says whether the DC's
// sizes changed (a new size, or a size no source reports any more).
func (b *blockSizes) note(source sourceKey, size uint32) bool {
	if size == 0 || b.bySource[source] == size {
		return false
	}
	if b.bySource == nil {
		b.bySource = map[sourceKey]uint32{}
	}
	b.bySource[source] = size
	return b.update()
}

// forget drops a cleared source (an engine that restarted, perhaps with another block size,
// clears its blocks first: its next store says its size) and says whether the DC's sizes changed.
func (b *blockSizes) forget(source sourceKey) bool {
	if _, ok := b.bySource[source]; !ok {
		return false
	}
	delete(b.bySource, source)
	return b.update()
}

// update recomputes lane and distinct and says whether either changed.
func (b *blockSizes) update() bool {
	sizes := b.sizes()
	lane := uint32(0)
	if len(sizes) == 1 {
		lane = sizes[0]
	}
	changed := len(sizes) != b.distinct || lane != b.lane
	b.distinct, b.lane = len(sizes), lane
	return changed
}

// sizes returns the distinct sizes the sources report, ascending.
func (b *blockSizes) sizes() []uint32 {
	var out []uint32
	for _, s := range b.bySource {
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	slices.Sort(out)
	return out
}

// describe renders each size with the sources that report it, for the disagreement's log:
// "16: worker 7 rank 0, worker 8 rank 0; 32: worker 9 rank 1". Past describeSources sources of
// one size the rest are counted ("and 120 more"), so a DC of many workers logs one short line.
func (b *blockSizes) describe() string {
	var parts []string
	for _, size := range b.sizes() {
		var srcs []sourceKey
		for k, s := range b.bySource {
			if s == size {
				srcs = append(srcs, k)
			}
		}
		slices.SortFunc(srcs, func(x, y sourceKey) int {
			if x.worker != y.worker {
				return cmpU64(x.worker, y.worker)
			}
			return cmpU64(uint64(x.rank), uint64(y.rank))
		})
		names := make([]string, 0, min(len(srcs), describeSources)+1)
		for _, k := range srcs[:min(len(srcs), describeSources)] {
			names = append(names, fmt.Sprintf("worker %d rank %d", k.worker, k.rank))
		}
		if n := len(srcs) - describeSources; n > 0 {
			names = append(names, fmt.Sprintf("and %d more", n))
		}
		parts = append(parts, fmt.Sprintf("%d: %s", size, strings.Join(names, ", ")))
	}
	return strings.Join(parts, "; ")
}

// describeSources is how many sources of one size describe names.
const describeSources = 8

func cmpU64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// noteBlockSize learns the block size of the decoded event's source when it is a store that
// reports one, and forgets it at a clear; a change of the DC's sizes is counted and logged (a
// disagreement as a warning).
func (rl *relayLoop) noteBlockSize(ev *schemas.KvEvent) {
	key := sourceKey{ev.WorkerID, ev.DpRank}
	var changed bool
	switch ev.Kind {
	case schemas.KvStoredEvent:
		changed = rl.bs.note(key, ev.Stored.BlockSize)
	case schemas.KvClearedEvent:
		changed = rl.bs.forget(key)
	}
	if !changed {
		return
	}
	r := rl.r
	r.c.blockSizes.set(uint64(rl.bs.distinct))
	r.c.blockSize.set(uint64(rl.bs.lane))
	if rl.bs.distinct > 1 {
		r.log.Warn("the DC's engines publish different block sizes: lane records carry none, and token queries are not checked against it",
			zap.Int("block_sizes", rl.bs.distinct), zap.String("sizes_by_source", rl.bs.describe()))
		return
	}
	if rl.bs.lane != 0 {
		r.log.Info("the DC's block size", zap.Uint32("block_size", rl.bs.lane), zap.String("sizes_by_source", rl.bs.describe()))
	}
}

// laneBlockSize is the block size every lane record carries (LaneWriter.ReportBlockSize).
func (rl *relayLoop) laneBlockSize() uint32 { return rl.bs.lane }
