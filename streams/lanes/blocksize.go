package lanes

import (
	"errors"
	"fmt"
	"math/bits"
	"strconv"
	"strings"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/ckf/index"
)

// ErrBlockSizeMismatch is the cause of a token-id query refused by CheckBlockSize.
var ErrBlockSizeMismatch = errors.New("lanes: the query's block size is not the engines'")

// BlockSizeError is CheckBlockSize's refusal: its message is the sentence a router reads ("block_size
// 32, but the engines of lanes 0-3 (dc …) publish blocks of 16 tokens"), and it matches
// ErrBlockSizeMismatch.
type BlockSizeError struct{ msg string }

// Error implements error.
func (e *BlockSizeError) Error() string { return e.msg }

// Is makes the error match ErrBlockSizeMismatch.
func (e *BlockSizeError) Is(target error) bool { return target == ErrBlockSizeMismatch }

// LaneBlockSize returns the block size of lane l's DC engines as the lane's latest applied record
// carried it (schemas.LaneRecord.BlockSize), or 0 when that record carried none (a relay of an
// earlier revision, a relay that has read no stored event with a size yet, a DC whose engines
// disagree) or the lane has applied no record. Safe for concurrent use: an atomic load.
func (ix *Indexer) LaneBlockSize(l uint8) uint32 {
	if l >= ckf.MaxLanes {
		return 0
	}
	return ix.blockSize[l].Load()
}

// CheckBlockSize applies consumer §6.5's rule to a token-id query chunked into blocks of size
// tokens that selects the lanes of mask: nil when every selected lane that knows its engines'
// block size (LaneBlockSize) knows size (lanes that know none are not judged), else a
// *BlockSizeError (it matches ErrBlockSizeMismatch) whose message names the query's size, each
// other size and the lanes and DCs that publish it. Pass it to NewAnswerer
// (query.CheckBlockSize). It allocates only for an error. Safe for concurrent use.
func (ix *Indexer) CheckBlockSize(mask uint64, size uint32) error {
	return CheckBlockSize(ix.g.Manifest(), mask, size, ix.LaneBlockSize)
}

// CheckBlockSize is Indexer.CheckBlockSize over the block sizes known gives per lane (0: none),
// the DCs named from m's lanes.
func CheckBlockSize(m index.Manifest, mask uint64, size uint32, known func(lane uint8) uint32) error {
	var wrong uint64
	for ms := mask; ms != 0; ms &= ms - 1 {
		l := uint8(bits.TrailingZeros64(ms))
		if k := known(l); k != 0 && k != size {
			wrong |= 1 << l
		}
	}
	if wrong == 0 {
		return nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "block_size %d, but the engines of ", size)
	first := true
	for wrong != 0 {
		k := known(uint8(bits.TrailingZeros64(wrong)))
		var group uint64
		for ms := wrong; ms != 0; ms &= ms - 1 {
			l := uint8(bits.TrailingZeros64(ms))
			if known(l) == k {
				group |= 1 << l
			}
		}
		wrong &^= group
		if !first {
			b.WriteString("; of ")
		}
		first = false
		fmt.Fprintf(&b, "%s (%s) publish blocks of %d tokens", laneList(group), dcList(m, group), k)
	}
	return &BlockSizeError{msg: b.String()}
}

// laneList renders a lane mask as "lane 2" or "lanes 0-3, 5".
func laneList(mask uint64) string {
	var parts []string
	for m := mask; m != 0; {
		lo := bits.TrailingZeros64(m)
		hi := lo
		for hi+1 < ckf.MaxLanes && m&(1<<(hi+1)) != 0 {
			hi++
		}
		if lo == hi {
			parts = append(parts, strconv.Itoa(lo))
		} else {
			parts = append(parts, strconv.Itoa(lo)+"-"+strconv.Itoa(hi))
		}
		m &^= (1<<(hi+1) - 1) &^ (1<<lo - 1)
	}
	if bits.OnesCount64(mask) == 1 {
		return "lane " + parts[0]
	}
	return "lanes " + strings.Join(parts, ", ")
}

// dcList renders the DCs of a lane mask as "dc 00000000000000a1" or "dcs …, …", in lane order.
func dcList(man index.Manifest, mask uint64) string {
	var dcs []string
	for m := mask; m != 0; m &= m - 1 {
		if pool, ok := man.PoolOf(uint8(bits.TrailingZeros64(m))); ok {
			dcs = append(dcs, pool.Dc.String())
		}
	}
	if len(dcs) == 1 {
		return "dc " + dcs[0]
	}
	return "dcs " + strings.Join(dcs, ", ")
}
