package workers

import (
	"math/bits"
	"math/rand/v2"
	"unsafe"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/ckf/producer"
)

// chainMemo remembers the canonical chains of recent stores as runs of (local hash, canonical
// hash) pairs, each run keyed by the canonical hash before it, so that MatchLocal finds a
// prompt's chain by comparing its local hashes with a run's, as the crate's radix trees compare
// local hashes along an edge, instead of computing one dependent sequence hash per block
// (workers §5.4).
//
// It is a memo of a pure function: canonical(parent, local) = ckf.CanonicalChild(parent, local)
// whatever the index holds, so a run stays true after its blocks are removed, and an answer
// never depends on what the memo holds, only its speed does. Nothing is ever invalidated; a
// run is overwritten by a later store whose key falls in the same place (direct-mapped), and a
// query falls back to hashing where the memo has no run.
//
// Cost: a store writes one run per runBlocks blocks (the event's chain is computed anyway);
// the table is at most memoMaxRuns runs (about 1.1 MiB), grown with the number of runs stored.
// Only stores write it, so queries under Shared's read lock only read it.
type chainMemo struct {
	runs   []chainRun // a power of two, or nil before the first store
	shift  uint8      // home(parent) = mix(parent) >> shift
	seed   uint64
	stored int // runs written into an empty place since the last growth
}

// runBlocks is the most blocks one run holds: a 16-block store is one run (its first block,
// a root, is its own key: ckf.CanonicalRoot needs no hash), a 128-block prompt eight.
const runBlocks = 16

const (
	memoMinRuns = 64
	memoMaxRuns = 4096
)

// chainRun is one remembered run: canon[k] is the canonical hash of the block with local hash
// local[k] whose parent is canon[k-1] (parent for k = 0). n = 0: the place is empty.
type chainRun struct {
	parent uint64
	n      uint32
	local  [runBlocks]ckf.LocalBlockHash
	canon  [runBlocks]ckf.CanonicalHash
}

func (m *chainMemo) home(parent uint64) uint64 {
	hi, lo := bits.Mul64(parent^m.seed, mixFold)
	return (hi ^ lo) >> m.shift
}

// bytes is the memory the memo takes.
func (m *chainMemo) bytes() uint64 {
	return uint64(len(m.runs)) * uint64(unsafe.Sizeof(chainRun{}))
}

// recordStore remembers a validated store's chain: blocks are the store's blocks and p their
// canonical hashes (store's prepared list, same order); parent is the canonical hash of the
// store's parent when hasParent.
func (m *chainMemo) recordStore(hasParent bool, parent ckf.CanonicalHash, blocks []producer.StoredBlock, p []prepared) {
	from := 0
	if !hasParent {
		// A root block's canonical is its local hash's (ckf.CanonicalRoot), known to a query
		// without the memo: the first run starts after it, keyed by it.
		parent, from = p[0].canon, 1
	}
	for from < len(p) {
		to := min(from+runBlocks, len(p))
		m.record(uint64(parent), blocks[from:to], p[from:to])
		parent = p[to-1].canon
		from = to
	}
}

// record writes one run (len(blocks) = len(p) <= runBlocks, at least 1).
func (m *chainMemo) record(parent uint64, blocks []producer.StoredBlock, p []prepared) {
	if m.runs == nil {
		m.seed = rand.Uint64()
		m.resize(memoMinRuns)
	}
	r := &m.runs[m.home(parent)]
	n := uint32(len(p))
	if r.n == n && r.parent == parent && r.canon[n-1] == p[n-1].canon {
		return // the same run again (another holder of the same prompt): it is already there
	}
	if r.n == 0 {
		m.stored++
	}
	r.parent, r.n = parent, n
	for k := range p {
		r.local[k] = blocks[k].TokensHash
		r.canon[k] = p[k].canon
	}
	if len(m.runs) < memoMaxRuns && 2*m.stored > len(m.runs) {
		m.resize(2 * len(m.runs))
	}
}

// resize moves the runs into a table of n places (a power of two); runs that land on the same
// place keep the last one.
func (m *chainMemo) resize(n int) {
	old := m.runs
	m.runs = make([]chainRun, n)
	m.shift = uint8(64 - bits.TrailingZeros(uint(n)))
	m.stored = 0
	for i := range old {
		if o := &old[i]; o.n != 0 {
			r := &m.runs[m.home(o.parent)]
			if r.n == 0 {
				m.stored++
			}
			*r = *o
		}
	}
}

// fill sets chain[i] to the canonical hash of local[:i+1] (ckf.CanonicalRoot,
// ckf.CanonicalChild): from the memo's runs as long as their local hashes match the query's.
// Where no run continues the chain, the rest is hashed without looking at the memo again: a
// later run would have to continue a canonical that no remembered store reached, which only
// an overwritten run leaves behind (len(chain) = len(local) >= 1).
func (m *chainMemo) fill(chain []ckf.CanonicalHash, local []ckf.LocalBlockHash) {
	chain = chain[:len(local)]
	prev := ckf.CanonicalRoot(local[0])
	chain[0] = prev
	runs := m.runs
	pos := 1
	for pos < len(local) && len(runs) > 0 {
		r := &runs[m.home(uint64(prev))]
		if r.parent != uint64(prev) || r.n == 0 {
			break
		}
		n := min(int(r.n), len(local)-pos)
		lq, out := local[pos:pos+n], chain[pos:pos+n]
		rl, rc := r.local[:len(lq)], r.canon[:len(lq)]
		k := 0
		for ; k < len(lq); k++ {
			if rl[k] != lq[k] {
				break
			}
			out[k] = rc[k]
		}
		if k == 0 {
			break
		}
		pos += k
		prev = chain[pos-1]
	}
	for ; pos < len(local); pos++ {
		prev = ckf.CanonicalChild(prev, local[pos])
		chain[pos] = prev
	}
}
