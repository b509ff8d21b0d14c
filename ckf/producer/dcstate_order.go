package producer

import (
	"math/bits"
	"slices"

	"github.com/ckf-stream/ckf-stream/ckf"
)

// Publication order: the order in which a drained batch lists its images.
//
// A consumer stores a delta's images one at a time while queries run, so
// every prefix of the list is a state some query can observe. A fingerprint
// relocated from bucket a to its alternate bucket b during the window must
// never be observed in neither: b's new image has to come before a's.

// Node states of the ordering scratch, one per dirty-list entry.
const (
	orderUnchanged uint8 = iota // word equals the window original: not emitted
	orderPending                // changed, not yet placed in the order
	orderEmitted                // placed in the order
)

// noEdge marks an unused or removed move edge.
const noEdge int32 = -1

// orderScratch is the ordering's working memory, kept in the window and
// reused by every drain: after the first few drains have grown it to the
// largest window seen, ordering allocates nothing. Indices are positions in
// the dirty list (first-touch order).
type orderScratch struct {
	// keys and vals are an open-addressing map bucket -> dirty index of the
	// changed buckets: keys hold bucket+1 (0 = empty), vals the index. Its
	// size is a power of two of at least twice the dirty count.
	keys []uint64
	vals []int32
	// moveTo and moveFp have four entries per node, one per slot of its
	// original word: the node the slot's fingerprint moved to (noEdge if
	// none) and the fingerprint.
	moveTo []int32
	moveFp []uint16
	// waiting counts, per node, its live moves whose destination is not
	// yet emitted: the node is ready when it reaches 0.
	waiting []int32
	state   []uint8
	// intoMoves lists, grouped by destination node, the move entries
	// (4*source+slot) that end there; after buildMoves intoStart[j] is the
	// end of node j's group (see intoRange).
	intoStart []int32
	intoMoves []int32
	// order is the emission order (dirty indices), the result.
	order []int32
	// stack holds released nodes to emit at once; path and pathMove the
	// current cycle search; onPath is path position+1 per node (0 = off).
	stack    []int32
	path     []int32
	pathMove []int32
	onPath   []int32
}

func (o *orderScratch) bytes() uint64 {
	return uint64(8*cap(o.keys) + 4*cap(o.vals) + 4*cap(o.moveTo) + 2*cap(o.moveFp) +
		4*cap(o.waiting) + cap(o.state) + 4*cap(o.intoStart) + 4*cap(o.intoMoves) +
		4*cap(o.order) + 4*cap(o.stack) + 4*cap(o.path) + 4*cap(o.pathMove) + 4*cap(o.onPath))
}

// resize returns s with length n, reusing its array when large enough.
func resize[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n, n+n/4)
	}
	return s[:n]
}

// slotCount returns how many of word's four slots hold fp (fp != 0).
func slotCount(word uint64, fp uint16) int {
	return bits.OnesCount64(ckf.ZeroLanes16(word ^ ckf.BroadcastFingerprint(fp)))
}

// replaceSlot returns word with its lowest slot holding from set to to;
// from must be present.
func replaceSlot(word uint64, from, to uint16) uint64 {
	m := ckf.ZeroLanes16(word ^ ckf.BroadcastFingerprint(from))
	shift := uint(bits.TrailingZeros64(m)) & 48
	return word&^(0xFFFF<<shift) | uint64(to)<<shift
}

// publicationOrder decides which buckets of the window a drain publishes and
// in which order, and leaves the result in s.win.order as dirty-list
// indices: exactly the buckets whose word differs from the window original,
// each once. It may rewrite some of those words (below); the caller
// publishes the words as they are after it returns.
//
// # The invariant
//
// Let I[x] be bucket x's word when the window opened (the last published
// word, w.orig) and F[x] its word now. A fingerprint value v lives in the
// bucket pair {a, b = a ^ delta(v)}; a query for it is answered by
// count(a, v) + count(b, v) > 0. Applying the list in order, every prefix
// leaves each bucket at I or F. The invariant: for every (v, pair) with a
// non-zero count before the batch and after it, every prefix has a
// non-zero count too. No transient false negative, in other words, for any
// block resident both before and after the delta.
//
// Only the two buckets of the pair matter. If just one of them is in the
// batch, a prefix shows either the before or the after count. If both are,
// the mixed prefix (F[a], I[b]) has count F_a(v) + I_b(v), which is zero
// while before and after are not exactly when I_a(v) > 0, F_a(v) = 0,
// I_b(v) = 0, F_b(v) > 0: v moved wholly out of a into b. That is a move
// edge a -> b, with the constraint "b before a"; the mirrored case gives
// the mirrored edge. So the invariant holds iff, for every move edge, the
// destination is emitted before the source. Each source slot gives at most
// one edge (a value's destination is fixed by the value), so a window of n
// changed buckets has at most 4n edges.
//
// # The order
//
// Kahn's algorithm over the edges: a bucket is ready once every bucket its
// fingerprints moved to is emitted. Buckets are scanned in first-touch
// order; a ready bucket is emitted, and a source that becomes ready because
// of it is emitted at once if the scan has already passed it, so the result
// is deterministic and otherwise keeps first-touch order. A last-touch-first
// order is not enough: a source touched again later in the window would
// come first.
//
// # Cycles
//
// The edges can form a cycle x0 -> x1 -> ... -> x(k-1) -> x0 (v_t moved
// from x_t to x_t+1; two fingerprints with the same delta swapped between
// the same pair in one window, or a kick walk that comes back to a bucket).
// No order of the final words avoids the gap then, and the consumer refuses
// a bucket twice in one delta, so no intermediate word can be shipped in
// the same delta either; for a swap between two buckets full of resident
// fingerprints no sequence of word stores confined to them exists at all.
// Instead the cycle is undone in the producer's words, which changes
// placement but not membership: each x_t+1 gives v_t back to x_t, taking the
// slot v_t occupies in x_t+1 for v_t+1 (F[x_t+1] := F[x_t+1] with one v_t
// replaced by v_t+1). Every v_t returns to a bucket of its own pair and
// every bucket keeps its slot count, so the multiset of (fingerprint, pair)
// and thus every lookup, removal and the resident count are unchanged. The
// rewrite removes exactly the k cycle edges (each source holds its value
// again) and creates none. In x_t only two counts change: v_t gains a copy
// and v_t-1 loses one. A new edge out of x_t needs a value in I[x_t] that
// F[x_t] no longer holds: v_t-1 is not in I[x_t] (it arrived). A new edge
// into x_t needs a value F[x_t] holds and I[x_t] does not: v_t is in I[x_t]
// (it left). Kahn then continues; a bucket whose word is back to its
// original is dropped from the batch. Each cycle removes at least two of
// the at most 4n edges, so the loop ends. Undone cycles are counted in
// Telemetry.UnrotatedCycles. The rewrite runs whether or not the batch is
// materialized, so the words depend on the events and the drain
// boundaries only.
//
// # What it does not cover
//
// The guarantee is about instants of the consumer's table. A probe loads
// its two buckets one after the other (consumer §5.5, weak read); if a
// delta moves a fingerprint from the bucket loaded second to the bucket
// loaded first and both stores fall between the two loads, the probe
// misses it, whatever the order of the two stores.
//
// Cost: O(n) over the dirty list plus O(4n) over the edges, and O(n) per
// undone cycle for the cycle search and the rescan. No allocation once
// the window's scratch has grown to the largest window.
func (s *DcState) publicationOrder() []int32 {
	w := &s.win
	o := &w.scratch
	words := s.filter.words
	n := len(w.dirty)
	o.order = o.order[:0]
	if n == 1 {
		// One dirty bucket, the usual window at cadence 1 (a placement without kicks, or one
		// removal): there is no move to order, and the bucket is published iff it changed.
		if words[w.dirty[0]] != w.orig[0] {
			o.order = append(o.order, 0)
		}
		return o.order
	}
	o.state = resize(o.state, n)
	changed := 0
	for i, b := range w.dirty {
		if words[b] != w.orig[i] {
			o.state[i] = orderPending
			changed++
		} else {
			o.state[i] = orderUnchanged
		}
	}
	if changed <= 1 {
		for i, st := range o.state {
			if st == orderPending {
				o.order = append(o.order, int32(i))
			}
		}
		return o.order
	}
	if w.oneWalk {
		// One walk over distinct buckets: each move goes from one bucket to the next one
		// touched, so the moves form a single path and last-touch-first puts every
		// destination before its source; a path has no cycle to undo.
		for i := n - 1; i >= 0; i-- {
			if o.state[i] == orderPending {
				o.order = append(o.order, int32(i))
			}
		}
		return o.order
	}
	o.buildSlotMap(w.dirty)
	o.buildMoves(s, n)
	o.emitAll(s, n)
	return o.order
}

// buildSlotMap fills the bucket -> dirty index map with the changed buckets.
func (o *orderScratch) buildSlotMap(dirty []uint64) {
	size := 8
	for size < 2*len(dirty) {
		size <<= 1
	}
	o.keys = resize(o.keys, size)
	o.vals = resize(o.vals, size)
	clear(o.keys)
	mask := uint64(size - 1)
	for i, b := range dirty {
		if o.state[i] != orderPending {
			continue
		}
		h := (b * 0x9E3779B97F4A7C15) >> 32 & mask
		for o.keys[h] != 0 {
			h = (h + 1) & mask
		}
		o.keys[h], o.vals[h] = b+1, int32(i)
	}
}

// indexOf returns the dirty index of changed bucket b, or noEdge.
func (o *orderScratch) indexOf(b uint64) int32 {
	mask := uint64(len(o.keys) - 1)
	for h := (b * 0x9E3779B97F4A7C15) >> 32 & mask; o.keys[h] != 0; h = (h + 1) & mask {
		if o.keys[h] == b+1 {
			return o.vals[h]
		}
	}
	return noEdge
}

// buildMoves finds every move edge (see publicationOrder) and the reverse
// lists.
func (o *orderScratch) buildMoves(s *DcState, n int) {
	w := &s.win
	words := s.filter.words
	keys := &s.filter.keys
	o.moveTo = resize(o.moveTo, 4*n)
	o.moveFp = resize(o.moveFp, 4*n)
	o.waiting = resize(o.waiting, n)
	o.intoStart = resize(o.intoStart, n+1)
	clear(o.waiting)
	clear(o.intoStart)
	for i, a := range w.dirty {
		for k := range 4 {
			o.moveTo[4*i+k] = noEdge
		}
		if o.state[i] != orderPending {
			continue
		}
		before, after := w.orig[i], words[a]
		for k := range 4 {
			v := uint16(before >> (16 * k))
			if v == 0 || slotCount(after, v) != 0 || slotCount(before&(1<<(16*k)-1), v) != 0 {
				continue // empty, still here, or a duplicate of a lower slot
			}
			b := a ^ keys.delta(v)
			j := o.indexOf(b)
			if j == noEdge || slotCount(w.orig[j], v) != 0 || slotCount(words[b], v) == 0 {
				continue // removed, not moved (or b already held it)
			}
			o.moveTo[4*i+k], o.moveFp[4*i+k] = j, v
			o.waiting[i]++
			o.intoStart[j+1]++
		}
	}
	for j := range n {
		o.intoStart[j+1] += o.intoStart[j]
	}
	o.intoMoves = resize(o.intoMoves, int(o.intoStart[n]))
	// Fill forward (each list in source order); afterwards intoStart[j] is
	// the end of list j, which is where list j+1 starts.
	for e, j := range o.moveTo {
		if j != noEdge {
			o.intoMoves[o.intoStart[j]] = int32(e)
			o.intoStart[j]++
		}
	}
}

// intoRange returns the move entries ending at node j.
func (o *orderScratch) intoRange(j int32) []int32 {
	start := int32(0)
	if j > 0 {
		start = o.intoStart[j-1]
	}
	return o.intoMoves[start:o.intoStart[j]]
}

// emitAll runs Kahn's algorithm with cycle undoing (see publicationOrder).
func (o *orderScratch) emitAll(s *DcState, n int) {
	o.onPath = resize(o.onPath, n)
	clear(o.onPath)
	cursor := 0
	for {
		for ; cursor < n; cursor++ {
			if o.state[cursor] == orderPending && o.waiting[cursor] == 0 {
				o.emit(int32(cursor), cursor)
			}
		}
		first := slices.Index(o.state, orderPending)
		if first < 0 {
			return
		}
		// Every pending node waits on a pending node: there is a cycle.
		low := o.undoCycle(s, int32(first))
		cursor = int(low)
	}
}

// emit appends node x to the order and emits at once every source it
// releases that the scan (at cursor) has already passed.
func (o *orderScratch) emit(x int32, cursor int) {
	o.stack = append(o.stack[:0], x)
	for len(o.stack) > 0 {
		y := o.stack[len(o.stack)-1]
		o.stack = o.stack[:len(o.stack)-1]
		o.state[y] = orderEmitted
		o.order = append(o.order, y)
		for _, e := range o.intoRange(y) {
			if o.moveTo[e] != y {
				continue // removed by a cycle undo
			}
			src := e / 4
			o.waiting[src]--
			if o.waiting[src] == 0 && o.state[src] == orderPending && int(src) < cursor {
				o.stack = append(o.stack, src)
			}
		}
	}
}

// undoCycle follows live moves from pending node start until a node
// repeats, rewrites the words of that cycle (see publicationOrder), removes
// its edges and returns the lowest index on it.
func (o *orderScratch) undoCycle(s *DcState, start int32) int32 {
	o.path, o.pathMove = o.path[:0], o.pathMove[:0]
	x := start
	for o.onPath[x] == 0 {
		o.path = append(o.path, x)
		o.onPath[x] = int32(len(o.path))
		e := int32(noEdge)
		for k := range int32(4) {
			if j := o.moveTo[4*x+k]; j != noEdge && o.state[j] == orderPending {
				e = 4*x + k
				break
			}
		}
		// A pending node with waiting > 0 always has such a move.
		o.pathMove = append(o.pathMove, e)
		x = o.moveTo[e]
	}
	at := int(o.onPath[x]) - 1
	cycle, moves := o.path[at:], o.pathMove[at:]
	w := &s.win
	words := s.filter.words
	low := cycle[0]
	for t, src := range cycle {
		in := moves[(t+len(moves)-1)%len(moves)] // the move into src
		out := moves[t]                          // the move out of src
		b := w.dirty[src]
		words[b] = replaceSlot(words[b], o.moveFp[in], o.moveFp[out])
		low = min(low, src)
	}
	for t, src := range cycle {
		o.moveTo[moves[t]] = noEdge
		o.waiting[src]--
	}
	for _, p := range o.path {
		o.onPath[p] = 0
	}
	for _, src := range cycle {
		if words[w.dirty[src]] == w.orig[src] {
			o.state[src] = orderUnchanged // net-reverted by the undo
		}
	}
	s.tel.UnrotatedCycles = satAdd(s.tel.UnrotatedCycles, 1)
	return low
}
