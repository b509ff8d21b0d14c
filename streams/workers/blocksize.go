package workers

import (
	"fmt"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/ckf-stream/ckf-stream/streams/lanes"
)

// The DC's block sizes, as the worker stage reads them from the KV events itself: every stored
// event carries its engine's tokens per block (KvStored.block_size), the replica keeps the last
// size each source (worker, rank) reported and forgets it at the source's clear, as the relay
// does for its lane records (consumer §6.5). A token-id query chunked with a size that no source
// of the DC publishes cannot match a block of this DC, so it is refused, naming both sizes, as
// the prefix-match path refuses it. Unlike a lane, the replica answers per source, so sources
// that disagree do not switch the rule off: a query of any size some source publishes is
// answered (its blocks can match those sources'), one of another size is refused. Sources that
// reported no size (producers of an earlier revision, loadgen's events) teach nothing; a DC with
// none is never judged. Nothing of this is checkpointed: a restarted replica learns the sizes
// again from the events it reads after its checkpoint, and judges no query until then.

// ErrBlockSizeMismatch is the cause of a token-id query CheckBlockSize refuses: the prefix-match
// path's (lanes.ErrBlockSizeMismatch), so callers test one error for both.
var ErrBlockSizeMismatch = lanes.ErrBlockSizeMismatch

// BlockSizeError is CheckBlockSize's refusal: its message is the sentence a router reads
// ("block_size 32, but the engines of dc 00000000000000a1 publish blocks of 16 tokens"), and it
// matches ErrBlockSizeMismatch.
type BlockSizeError struct{ msg string }

// Error implements error.
func (e *BlockSizeError) Error() string { return e.msg }

// Is makes the error match ErrBlockSizeMismatch.
func (e *BlockSizeError) Is(target error) bool { return target == ErrBlockSizeMismatch }

// sizeSource is one source of the DC's KV events.
type sizeSource struct {
	worker uint64
	rank   uint32
}

// blockSizes is the per-source bookkeeping: bySource is owned by the replica's loop goroutine;
// the snapshot is what queries and the status read, replaced whole at every change.
type blockSizes struct {
	bySource map[sizeSource]uint32
	snap     atomic.Pointer[sizeSnapshot]
}

// sizeSnapshot is the DC's sizes at one moment: ascending, each with its sources rendered.
type sizeSnapshot struct {
	sizes   []uint32
	sources []string // sources[i] names the sources of sizes[i]
}

// observe learns the block size of a decoded event's source when it is a store that reports one,
// and forgets the source at a clear.
func (b *blockSizes) observe(ev *schemas.KvEvent) {
	key := sizeSource{ev.WorkerID, ev.DpRank}
	switch ev.Kind {
	case schemas.KvStoredEvent:
		size := ev.Stored.BlockSize
		if size == 0 || b.bySource[key] == size {
			return
		}
		if b.bySource == nil {
			b.bySource = map[sizeSource]uint32{}
		}
		b.bySource[key] = size
	case schemas.KvClearedEvent:
		if _, ok := b.bySource[key]; !ok {
			return
		}
		delete(b.bySource, key)
	default:
		return
	}
	b.publish()
}

// describeSources is how many sources of one size a snapshot names.
const describeSources = 8

// publish replaces the snapshot with the sizes of bySource.
func (b *blockSizes) publish() {
	bySize := map[uint32][]sizeSource{}
	for k, s := range b.bySource {
		bySize[s] = append(bySize[s], k)
	}
	snap := &sizeSnapshot{}
	for size := range bySize {
		snap.sizes = append(snap.sizes, size)
	}
	slices.Sort(snap.sizes)
	for _, size := range snap.sizes {
		srcs := bySize[size]
		slices.SortFunc(srcs, func(x, y sizeSource) int {
			if x.worker != y.worker {
				if x.worker < y.worker {
					return -1
				}
				return 1
			}
			return int(int64(x.rank) - int64(y.rank)) // ranks are u32: the difference fits
		})
		names := make([]string, 0, min(len(srcs), describeSources)+1)
		for _, k := range srcs[:min(len(srcs), describeSources)] {
			names = append(names, fmt.Sprintf("worker %d rank %d", k.worker, k.rank))
		}
		if n := len(srcs) - describeSources; n > 0 {
			names = append(names, fmt.Sprintf("and %d more", n))
		}
		snap.sources = append(snap.sources, strings.Join(names, ", "))
	}
	b.snap.Store(snap)
}

// load returns the current snapshot (empty before any size is known).
func (b *blockSizes) load() *sizeSnapshot {
	if s := b.snap.Load(); s != nil {
		return s
	}
	return &sizeSnapshot{}
}

// check applies the rule to a token-id query of size tokens per block for DC dc.
func (s *sizeSnapshot) check(dc string, size uint32) error {
	if len(s.sizes) == 0 || slices.Contains(s.sizes, size) {
		return nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "block_size %d, but the engines of dc %s publish blocks of ", size, dc)
	if len(s.sizes) == 1 {
		fmt.Fprintf(&b, "%d tokens", s.sizes[0])
		return &BlockSizeError{msg: b.String()}
	}
	for i, k := range s.sizes {
		if i > 0 {
			b.WriteString("; of ")
		}
		fmt.Fprintf(&b, "%d tokens (%s)", k, s.sources[i])
	}
	return &BlockSizeError{msg: b.String()}
}

// describe renders each size with its sources: "16: worker 7 rank 0, worker 8 rank 0; 32: ...".
func (s *sizeSnapshot) describe() string {
	parts := make([]string, len(s.sizes))
	for i, k := range s.sizes {
		parts[i] = fmt.Sprintf("%d: %s", k, s.sources[i])
	}
	return strings.Join(parts, "; ")
}

// CheckBlockSize applies the DC's block-size rule to a token-id query chunked into blocks of
// size tokens: nil when no source of the DC has reported a size, or some source reports size;
// else a *BlockSizeError (it matches ErrBlockSizeMismatch) naming the query's size and the
// sizes the DC's engines publish (with their sources when there are several). Safe for
// concurrent use; it allocates only for an error.
func (r *Replica) CheckBlockSize(size uint32) error {
	return r.sizes.load().check(r.cfg.DC.String(), size)
}

// BlockSizes returns the distinct block sizes the DC's sources report, ascending (empty when
// none is known), and each size with its sources ("16: worker 7 rank 0; 32: worker 9 rank 1").
func (r *Replica) BlockSizes() ([]uint32, string) {
	s := r.sizes.load()
	return slices.Clone(s.sizes), s.describe()
}
