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
// hash) pairs, each run keyed by its first block's canonical hash, so that MatchLocal finds a
// prompt's chain by comparing its local hashes with a run's, as the crate's radix trees compare
// local hashes along an edge, instead of computing one dependent sequence hash per block
// (workers §5.4).
//
// Its runs are a memo of a pure function: canonical(parent, local) = ckf.CanonicalChild(parent,
// local) whatever the index holds, so a run stays true after its blocks are removed, and an
// answer never depends on which runs the memo holds, only its speed does. Runs
// are placed in pairs of places (two-way): a key's run goes to the first place of its pair, the
// run there moving to the second, so a pair keeps its two latest keys, and a query falls back
// to hashing where the memo has no run. Keyed by its own first block rather than by the block
// before it, each branch from a shared prefix (conversations after one system prompt) has a key
// of its own; keyed by the parent, they displaced each other.
//
// Cost: a store writes one run per runBlocks blocks (the event's chain is computed anyway);
// the table is at most memoMaxRuns runs (about 2.6 MiB: 664 bytes a run with its summary),
// grown with the number of runs stored (from memoMinRuns: a 128-block prompt's four runs then
// share a pair with a third about once in four thousand seeds, and a lost run costs its own
// blocks' hashes, not the rest's).
// Only stores write it, so queries under Shared's read lock only read it.
//
// Run summaries (sums) are the one part that is not a pure function: sums[i], when its n is not
// 0, says that the device tier map holds each of the first n canonicals of runs[i] with the
// holder value val, so that a query may pass those blocks without a lookup (walkDevice). The
// invariant that keeps it true: every entry a summary covers carries a reference to the
// summary's pair of places (holderSlot.run), every change of an entry's value or its deletion
// voids the summaries of the pair its reference names (void, from Index.gainAll, loseAll and
// lose: only the index's writers, under Shared's lock), a summary is written only with its
// references (summarize), a reference taken over by another pair voids the first pair's, a
// run that moves within its pair takes its summary along (the references name the pair), and a
// place whose run is replaced, or a table resized, loses its summaries. A stale reference (to a
// pair whose runs have changed since) can only void summaries that did not need it: a query's
// cost, never its answer.
type chainMemo struct {
	runs   []chainRun   // a power of two, or nil before the first store
	sums   []runSummary // sums[i] summarises runs[i]; an entry's reference names a pair, sums[2j:2j+2]
	shift  uint8        // home(parent) = mix(parent) >> shift
	seed   uint64
	stored int // runs written into an empty place since the last growth
}

// runSummary is what a device store last found of its run's holder values: the first n blocks
// of the run all have the holder value val in the device tier map (n = 0: no summary).
type runSummary struct {
	val, n uint32
}

// span is a piece of a query's chain that a run summary covers: the blocks at positions
// from..end-1 all have the device holder value val (chainMemo.fill, walkDevice).
type span struct {
	from, end, val uint32
}

// runBlocks is the most blocks one run holds: a store of up to 32 blocks is one run, a
// 128-block prompt four. A
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
// local[k] whose parent is canon[k-1] (for k > 0), and key is canon[0], kept beside n so that
// a lookup reads one line. n = 0: the place is empty.
//
// slot[k] is a hint, not a fact: the device tier map's slot that held canon[k] when a device
// store of the run last wrote it (noHint when none did). Slots move as entries are inserted and
// deleted around them and when the table is resized, so a query reads the hinted slot only to
// compare its key with canon[k], and looks the canonical up by its hash when the key differs
// (walkDevice): a stale hint costs that comparison, never an answer.
type chainRun struct {
	key   uint64
	n     uint32
	local [runBlocks]ckf.LocalBlockHash
	canon [runBlocks]ckf.CanonicalHash
	slot  [runBlocks]uint32
}

// noHint is a slot hint that names no slot.
const noHint = ^uint32(0)

// home is the first place of key's pair (an even index; the pair is home, home+1).
func (m *chainMemo) home(key uint64) uint64 {
	hi, lo := bits.Mul64(key^m.seed, mixFold)
	return (hi ^ lo) >> m.shift &^ 1
}

// find returns the place of the run keyed by key, or -1 (with runs to look in).
func (m *chainMemo) find(key uint64) int {
	i := m.home(key)
	if r := &m.runs[i]; r.key == key && r.n != 0 {
		return int(i)
	}
	if r := &m.runs[i+1]; r.key == key && r.n != 0 {
		return int(i) + 1
	}
	return -1
}

// bytes is the memory the memo takes.
func (m *chainMemo) bytes() uint64 {
	return uint64(len(m.runs)) * uint64(unsafe.Sizeof(chainRun{})+unsafe.Sizeof(runSummary{}))
}

// void drops the run summaries that may cover s's entry, if any do (s.run), and the entry's
// reference to them: the caller is about to change s's holder value or delete it.
func (m *chainMemo) void(s *holderSlot) {
	if s.run != 0 {
		m.drop(s.run)
		s.run = 0
	}
}

// drop voids the summaries of the pair that reference ref (1 + the pair's index) names. A
// reference past the table (left by a table since made smaller, which only tests do) names
// none.
func (m *chainMemo) drop(ref uint32) {
	if i := 2 * (ref - 1); i+1 < uint32(len(m.sums)) {
		m.sums[i].n, m.sums[i+1].n = 0, 0
	}
}

// pairRef is the reference (holderSlot.run) to place i's pair.
func pairRef(i uint32) uint32 { return i/2 + 1 }

// recordStore remembers a validated store's chain in runs of up to runBlocks blocks: blocks are
// the store's blocks and p their canonical hashes (store's prepared list, same order);
// hasParent: the store continues a chain. dev is the device tier map when the store is on the
// device tier (its tier pass done, so p's slots are hints of that map, chainRun.slot, and the
// runs' summaries are written from it), nil otherwise. A store of one root block (a checkpoint
// restore writes one per membership) is not remembered: its canonical is its local hash's
// (ckf.CanonicalRoot), and a run of it would take a place for one block.
func (m *chainMemo) recordStore(hasParent bool, blocks []producer.StoredBlock, p []prepared, dev *holderTable) {
	if !hasParent && len(p) == 1 {
		return
	}
	for from := 0; from < len(p); from += runBlocks {
		to := min(from+runBlocks, len(p))
		m.record(blocks[from:to], p[from:to], dev)
	}
}

// record writes one run (len(blocks) = len(p) <= runBlocks, at least 1), keyed by its first
// canonical, into the first place of its pair: over a run with the same key, else moving the
// run there to the second place (with its summary: the entries' references name the pair). The
// same run again, or a store of its first blocks only, keeps the run there and takes a device
// store's slot hints (another holder of the same prompt: the slots are where its store found
// the canonicals); a store on another tier leaves them and the run's summary (it changed no
// device value). A device store then summarises the run (summarize).
func (m *chainMemo) record(blocks []producer.StoredBlock, p []prepared, dev *holderTable) {
	if m.runs == nil {
		m.seed = rand.Uint64()
		m.resize(memoMinRuns)
	}
	key := uint64(p[0].canon)
	h := m.home(key)
	r := &m.runs[h]
	n := uint32(len(p))
	switch {
	case r.n >= n && r.key == key && r.canon[n-1] == p[n-1].canon:
		if dev != nil { // the same run again (another holder of the same prompt): it is already there
			for k := range p {
				if s := p[k].slot; s != noHint {
					r.slot[k] = s
				}
			}
			m.summarize(uint32(h), dev)
		}
		return
	case r.n == 0 || r.key != key:
		m.vacate(h)
	}
	r.key, r.n = key, n
	for k := range p {
		r.local[k] = blocks[k].TokensHash
		r.canon[k] = p[k].canon
		r.slot[k] = noHint
		if dev != nil {
			r.slot[k] = p[k].slot
		}
	}
	m.sums[h] = runSummary{}
	if dev != nil {
		m.summarize(uint32(h), dev)
	}
	if len(m.runs) < memoMaxRuns && 2*m.stored > len(m.runs) {
		m.resize(2 * len(m.runs))
	}
}

// summarize writes the summary of the run at place i from the device tier map dev: the
// holder value of its first block, and how many leading blocks share it, each of their entries
// referring to place i's pair (a reference to another pair voids that pair's summaries). It also
// corrects those blocks' slot hints, which later insertions of the same store may have moved.
// A block dev does not hold ends the summary: a store of the run's first blocks only (record
// keeps the longer run) holds those, not necessarily the rest.
//
// The loop here takes the usual blocks only (a hint that holds the block, an entry without a
// reference or with this one), without a call, so that it keeps its values in registers; the
// first other block hands the rest to summarizeFrom.
func (m *chainMemo) summarize(i uint32, dev *holderTable) {
	r := &m.runs[i]
	canon, hints := r.canon[:r.n], r.slot[:r.n]
	slots := dev.slots
	ref := pairRef(i)
	val := uint32(0)
	if len(canon) > 0 {
		if h := hints[0]; h < uint32(len(slots)) {
			val = slots[h].val
		}
	}
	for k, c := range canon {
		h := hints[k]
		if h >= uint32(len(slots)) {
			m.summarizeFrom(i, dev, k, val)
			return
		}
		s := &slots[h]
		if s.k() != uint64(c) || s.val != val || val == 0 || (s.run != ref && s.run != 0) {
			m.summarizeFrom(i, dev, k, val)
			return
		}
		s.run = ref
	}
	m.sums[i] = runSummary{val: val, n: uint32(len(canon))}
}

// summarizeFrom is summarize from block k on, the blocks before it summarised with value val
// (when k > 0): every case.
//
//go:noinline
func (m *chainMemo) summarizeFrom(i uint32, dev *holderTable, k int, val uint32) {
	r := &m.runs[i]
	slots := dev.slots
	ref := pairRef(i)
	n := uint32(k)
	for ; n < r.n; n++ {
		c := uint64(r.canon[n])
		h := r.slot[n]
		if h >= uint32(len(slots)) || slots[h].k() != c || slots[h].val == 0 {
			at := dev.findHeld(c)
			if at < 0 {
				break
			}
			h = uint32(at)
			r.slot[n] = h
		}
		s := &slots[h]
		if n == 0 {
			val = s.val
		} else if s.val != val {
			break
		}
		if s.run != ref {
			if s.run != 0 {
				m.drop(s.run)
			}
			s.run = ref
		}
	}
	m.sums[i] = runSummary{val: val, n: n}
}

// resize moves the runs into a table of n places (a power of two, at least 2); a pair keeps
// the two it receives last. Every summary is dropped: the entries' references name the old
// pairs (a reference left naming a new pair voids at most summaries it does not cover).
func (m *chainMemo) resize(n int) {
	old := m.runs
	m.runs = make([]chainRun, n)
	m.sums = make([]runSummary, n)
	m.shift = uint8(64 - bits.TrailingZeros(uint(n)))
	m.stored = 0
	for i := range old {
		if o := &old[i]; o.n != 0 {
			h := m.home(o.key)
			m.vacate(h)
			m.runs[h] = *o
		}
	}
}

// vacate frees the first place of the pair at h (an even index) for a new run: a run there
// moves to the second place with its summary (its entries' references name the pair: still
// true), over whatever the second place held. A new run that takes a place empty until now
// counts in stored.
func (m *chainMemo) vacate(h uint64) {
	pair := m.runs[h : h+2 : h+2]
	if pair[0].n == 0 {
		m.stored++
		return
	}
	if pair[1].n == 0 {
		m.stored++
	}
	pair[1] = pair[0]
	m.sums[h+1] = m.sums[h]
}

// copyMatching copies the run's canonical hashes into out and their slot hints into hout for
// as long as its local hashes equal lq's (len(out) = len(hout) = len(lq) <= r.n), and returns
// how many blocks matched. It leaves out the first covered blocks (those a run summary answers
// for, which no walk reads) of the hints, and of the canonicals too unless full. The usual
// case, the whole piece equal, is one comparison of the two arrays' bytes (the runtime's
// vectorised memequal) and a copy or two (memmove), a few instructions per block where an
// element-by-element loop took twelve; only a piece that differs is scanned for where.
func (r *chainRun) copyMatching(out []ckf.CanonicalHash, hout []uint32, lq []ckf.LocalBlockHash, covered int, full bool) int {
	n := len(lq)
	rl := r.local[:n]
	k := n
	if !bytes.Equal(hashBytes(rl), hashBytes(lq)) {
		k = 0
		for k < n && rl[k] == lq[k] {
			k++
		}
	}
	if full {
		copy(out[:k], r.canon[:k])
	}
	if covered < k {
		if !full {
			copy(out[covered:k], r.canon[covered:k])
		}
		copy(hout[covered:k], r.slot[covered:k])
	}
	return k
}

// hashBytes views a slice of 64-bit hashes as its bytes (same memory).
func hashBytes[H ~uint64](s []H) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), 8*len(s))
}

// fill sets chain[i] to the canonical hash of local[:i+1] (ckf.CanonicalRoot,
// ckf.CanonicalChild), and hints[i] to the device slot hint of chain[i] (chainRun.slot; noHint
// where the memo has none). At each position it hashes the block (one hash) and looks for the
// run keyed by that canonical; it takes the run for as long as the run's local hashes equal the
// prompt's, and goes on from the first block after. Where no run starts, it looks again one
// block on. After more than runBlocks blocks in a row without a run the rest is hashed without
// looking: a run lost to a later store costs at most its own blocks' looks, and a prompt the memo
// does not know costs that many looks (len(chain) = len(local) >= 1).
//
// It appends to spans the pieces of the chain that run summaries cover (runSummary), in
// increasing position, and returns the result. The hints of blocks in spans are not written
// (no walk reads them), and neither are their canonicals unless full: a device walk needs no
// canonical that a span answers for, the caller's chain and the lower tiers' walks do.
func (m *chainMemo) fill(chain []ckf.CanonicalHash, hints []uint32, local []ckf.LocalBlockHash, spans []span, full bool) []span {
	n := len(local)
	chain, hints = chain[:n], hints[:n]
	prev := ckf.CanonicalRoot(local[0])
	pos, misses := 0, 0
	for pos < n {
		if m.runs == nil || misses > runBlocks {
			hashChain(chain[pos:], hints[pos:], local[pos:], prev, pos)
			break
		}
		c := prev // block pos's canonical: the root's, or hashed below
		if pos > 0 {
			c = childOf(prev, local[pos])
		}
		// The run keyed by c: the first place of its pair, else the second (written out here:
		// a call would spill the loop's values).
		i := m.home(uint64(c))
		r := &m.runs[i]
		if r.key != uint64(c) || r.n == 0 {
			i++
			r = &m.runs[i]
		}
		if r.key == uint64(c) && r.n != 0 {
			sum := m.sums[i]
			cnt := min(n-pos, int(r.n))
			k := cnt
			// The usual case, a piece the prompt follows whole and the run's summary covers,
			// needs no copy unless full: one comparison of the arrays' bytes.
			if full || int(sum.n) < cnt || !bytes.Equal(hashBytes(r.local[:cnt]), hashBytes(local[pos:pos+cnt])) {
				k = r.copyMatching(chain[pos:pos+cnt], hints[pos:pos+cnt], local[pos:pos+cnt], int(sum.n), full)
			}
			if k > 0 {
				if sum.n > 0 {
					spans = append(spans, span{from: uint32(pos), end: uint32(pos) + min(uint32(k), sum.n), val: sum.val})
				}
				pos += k
				prev = r.canon[k-1]
				misses = 0
				continue
			}
		}
		chain[pos], hints[pos] = c, noHint
		prev = c
		pos++
		misses++
	}
	return spans
}

// follow is fill for a query given as its canonical chain: it sets hints[i] to the device slot
// hint of chain[i] (noHint where the memo has none) and appends the spans that run summaries
// cover, following the run keyed by each position's canonical for as long as the run's
// canonicals equal the chain's (one comparison of the arrays' bytes where the whole piece
// agrees). Where no run starts it looks again one block on, and after followMisses blocks in a
// row without a run it stops looking (len(hints) = len(chain) >= 1).
func (m *chainMemo) follow(chain []ckf.CanonicalHash, hints []uint32, spans []span) []span {
	n := len(chain)
	hints = hints[:n]
	pos, misses := 0, 0
	if m.runs == nil {
		misses = followMisses // nothing to follow
	}
	for pos < n && misses < followMisses {
		if i := m.find(uint64(chain[pos])); i >= 0 {
			r := &m.runs[i]
			cnt := min(n-pos, int(r.n))
			k := cnt
			if q := chain[pos : pos+cnt]; !bytes.Equal(hashBytes(r.canon[:cnt]), hashBytes(q)) {
				k = 0
				for k < cnt && r.canon[k] == q[k] {
					k++
				}
			}
			if k > 0 {
				covered := 0
				if sum := m.sums[i]; sum.n > 0 {
					covered = min(k, int(sum.n))
					spans = append(spans, span{from: uint32(pos), end: uint32(pos + covered), val: sum.val})
				}
				copy(hints[pos+covered:pos+k], r.slot[covered:k])
				pos += k
				misses = 0
				continue
			}
		}
		hints[pos] = noHint
		pos++
		misses++
	}
	for ; pos < n; pos++ {
		hints[pos] = noHint
	}
	return spans
}

// followMisses is how many blocks in a row without a run follow looks at before it stops: a
// look is a lookup, and fill, which must hash those blocks anyway, looks as far.
const followMisses = runBlocks + 1

// childOf is ckf.CanonicalChild, not inlined: the hash's code would crowd fill's loop.
//
//go:noinline
func childOf(parent ckf.CanonicalHash, local ckf.LocalBlockHash) ckf.CanonicalHash {
	return ckf.CanonicalChild(parent, local)
}

// hashChain sets chain[i] to the canonical hash of the block at position at+i, whose local hash
// is local[i] (ckf.CanonicalRoot at position 0, else ckf.CanonicalChild of chain[i-1], or of
// prev for i = 0), and hints[i] to noHint. Not inlined: the hash's code would crowd fill's loop.
//
//go:noinline
func hashChain(chain []ckf.CanonicalHash, hints []uint32, local []ckf.LocalBlockHash, prev ckf.CanonicalHash, at int) {
	chain, hints = chain[:len(local)], hints[:len(local)]
	for i, l := range local {
		if at+i == 0 {
			prev = ckf.CanonicalRoot(l)
		} else {
			prev = ckf.CanonicalChild(prev, l)
		}
		chain[i], hints[i] = prev, noHint
	}
}
