package workers

import (
	"bytes"
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
// never depends on what the memo holds, only its speed does. Nothing is ever invalidated. Runs
// are placed in pairs of places (two-way): a key's run goes to the first place of its pair, the
// run there moving to the second, so a pair keeps its two latest keys, and a query falls back
// to hashing where the memo has no run.
//
// Cost: a store writes one run per runBlocks blocks (the event's chain is computed anyway);
// the table is at most memoMaxRuns runs (about 2.6 MiB: 656 bytes a run), grown with the number
// of runs stored (from memoMinRuns: a 128-block prompt's four runs then share a pair with a third
// about once in four thousand seeds, and a lost run costs its own blocks' hashes, not the
// rest's).
// Only stores write it, so queries under Shared's read lock only read it.
type chainMemo struct {
	runs   []chainRun // a power of two, or nil before the first store
	shift  uint8      // home(parent) = mix(parent) >> shift
	seed   uint64
	stored int // runs written into an empty place since the last growth
}

// runBlocks is the most blocks one run holds: a store of up to 33 blocks is one run (its first
// block, a root, is its own key: ckf.CanonicalRoot needs no hash), a 128-block prompt four. A
// query pays for each run it follows (a lookup, a call, its slices) about as much as for four of
// its blocks, so longer runs cost less per block; 32 took 8–11 % of the instructions off a
// 128-block query against 16 (performance §9.1), and a run of 16 blocks or fewer leaves the rest
// of its place unused.
const runBlocks = 32

const (
	memoMinRuns = 256
	memoMaxRuns = 4096
)

// chainRun is one remembered run: canon[k] is the canonical hash of the block with local hash
// local[k] whose parent is canon[k-1] (parent for k = 0). n = 0: the place is empty.
//
// slot[k] is a hint, not a fact: the device tier map's slot that held canon[k] when a device
// store of the run last wrote it (noHint when none did). Slots move as entries are inserted and
// deleted around them and when the table is resized, so a query reads the hinted slot only to
// compare its key with canon[k], and looks the canonical up by its hash when the key differs
// (walkDevice): a stale hint costs that comparison, never an answer.
type chainRun struct {
	parent uint64
	n      uint32
	local  [runBlocks]ckf.LocalBlockHash
	canon  [runBlocks]ckf.CanonicalHash
	slot   [runBlocks]uint32
}

// noHint is a slot hint that names no slot.
const noHint = ^uint32(0)

// home is the first place of parent's pair (an even index; the pair is home, home+1).
func (m *chainMemo) home(parent uint64) uint64 {
	hi, lo := bits.Mul64(parent^m.seed, mixFold)
	return (hi ^ lo) >> m.shift &^ 1
}

// find returns the run keyed by parent, or nil.
func (m *chainMemo) find(parent uint64) *chainRun {
	h := m.home(parent)
	pair := m.runs[h : h+2 : h+2]
	if r := &pair[0]; r.parent == parent && r.n != 0 {
		return r
	}
	if r := &pair[1]; r.parent == parent && r.n != 0 {
		return r
	}
	return nil
}

// bytes is the memory the memo takes.
func (m *chainMemo) bytes() uint64 {
	return uint64(len(m.runs)) * uint64(unsafe.Sizeof(chainRun{}))
}

// recordStore remembers a validated store's chain: blocks are the store's blocks and p their
// canonical hashes (store's prepared list, same order); parent is the canonical hash of the
// store's parent when hasParent. device: the store is on the device tier, so p's slots are hints
// of the device tier map (chainRun.slot).
func (m *chainMemo) recordStore(hasParent bool, parent ckf.CanonicalHash, blocks []producer.StoredBlock, p []prepared, device bool) {
	from := 0
	if !hasParent {
		// A root block's canonical is its local hash's (ckf.CanonicalRoot), known to a query
		// without the memo: the first run starts after it, keyed by it.
		parent, from = p[0].canon, 1
	}
	for from < len(p) {
		to := min(from+runBlocks, len(p))
		m.record(uint64(parent), blocks[from:to], p[from:to], device)
		parent = p[to-1].canon
		from = to
	}
}

// record writes one run (len(blocks) = len(p) <= runBlocks, at least 1) into the first place
// of its pair: over a run with the same key, else moving the run there to the second place. The
// same run again takes a device store's slot hints (another holder of the same prompt: the
// slots are where its store found the canonicals); a store on another tier leaves them.
func (m *chainMemo) record(parent uint64, blocks []producer.StoredBlock, p []prepared, device bool) {
	if m.runs == nil {
		m.seed = rand.Uint64()
		m.resize(memoMinRuns)
	}
	h := m.home(parent)
	pair := m.runs[h : h+2 : h+2]
	r := &pair[0]
	n := uint32(len(p))
	switch {
	case r.n == n && r.parent == parent && r.canon[n-1] == p[n-1].canon:
		if device { // the same run again (another holder of the same prompt): it is already there
			for k := range p {
				if s := p[k].slot; s != noHint {
					r.slot[k] = s
				}
			}
		}
		return
	case r.n != 0 && r.parent != parent:
		if pair[1].n == 0 {
			m.stored++
		}
		pair[1] = *r
	case r.n == 0:
		m.stored++
	}
	r.parent, r.n = parent, n
	for k := range p {
		r.local[k] = blocks[k].TokensHash
		r.canon[k] = p[k].canon
		r.slot[k] = noHint
		if device {
			r.slot[k] = p[k].slot
		}
	}
	if len(m.runs) < memoMaxRuns && 2*m.stored > len(m.runs) {
		m.resize(2 * len(m.runs))
	}
}

// resize moves the runs into a table of n places (a power of two, at least 2); a pair keeps
// the two it receives last.
func (m *chainMemo) resize(n int) {
	old := m.runs
	m.runs = make([]chainRun, n)
	m.shift = uint8(64 - bits.TrailingZeros(uint(n)))
	m.stored = 0
	for i := range old {
		if o := &old[i]; o.n != 0 {
			h := m.home(o.parent)
			pair := m.runs[h : h+2 : h+2]
			if pair[0].n != 0 {
				if pair[1].n == 0 {
					m.stored++
				}
				pair[1] = pair[0]
			} else {
				m.stored++
			}
			pair[0] = *o
		}
	}
}

// copyMatching copies the run's canonical hashes and slot hints into out and hout for as long
// as its local hashes equal lq's (len(out) = len(hout) = len(lq) <= r.n), and returns how many
// it copied. The usual case, the whole piece equal, is one comparison of the two arrays' bytes
// (the runtime's vectorised memequal) and two copies (memmove), a few instructions per block
// where an element-by-element loop took twelve; only a piece that differs is scanned for where.
func (r *chainRun) copyMatching(out []ckf.CanonicalHash, hout []uint32, lq []ckf.LocalBlockHash) int {
	n := len(lq)
	rl := r.local[:n]
	k := n
	if !bytes.Equal(hashBytes(rl), hashBytes(lq)) {
		k = 0
		for k < n && rl[k] == lq[k] {
			k++
		}
	}
	copy(out[:k], r.canon[:k])
	copy(hout[:k], r.slot[:k])
	return k
}

// hashBytes views a slice of 64-bit hashes as its bytes (same memory).
func hashBytes[H ~uint64](s []H) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), 8*len(s))
}

// fill sets chain[i] to the canonical hash of local[:i+1] (ckf.CanonicalRoot,
// ckf.CanonicalChild), and hints[i] to the device slot hint of chain[i] (chainRun.slot; noHint
// where the memo has none): from the memo's runs as long as their local hashes match the query's,
// hashing one block where no run continues the chain and looking again after it. After more
// than runBlocks blocks in a row without a run the rest is hashed without looking: a run lost
// to a later store costs at most its own blocks before the next one is found, and a prompt the
// memo does not know costs that many looks (len(chain) = len(local) >= 1).
func (m *chainMemo) fill(chain []ckf.CanonicalHash, hints []uint32, local []ckf.LocalBlockHash) {
	chain, hints = chain[:len(local)], hints[:len(local)]
	prev := ckf.CanonicalRoot(local[0])
	chain[0], hints[0] = prev, noHint
	pos := 1
	if m.runs != nil {
		misses := 0
		for pos < len(local) && misses <= runBlocks {
			if r := m.find(uint64(prev)); r != nil {
				n := min(int(r.n), len(local)-pos)
				if k := r.copyMatching(chain[pos:pos+n], hints[pos:pos+n], local[pos:pos+n]); k > 0 {
					pos += k
					prev = chain[pos-1]
					misses = 0
					continue
				}
			}
			prev = ckf.CanonicalChild(prev, local[pos])
			chain[pos], hints[pos] = prev, noHint
			pos++
			misses++
		}
	}
	for ; pos < len(local); pos++ {
		prev = ckf.CanonicalChild(prev, local[pos])
		chain[pos], hints[pos] = prev, noHint
	}
}
