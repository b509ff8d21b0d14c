package workers

import (
	"encoding/binary"
	"iter"
	"unsafe"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/ckf/internal/prefetch"
)

// chainTier is the device tier's map from canonical hash to holder value laid out by chain
// (workers §8): the holder entries of a stored chain sit next to each other, in runs of up to
// runCap nodes, so that a store, a removal and a query touch an event's entries in a few cache
// lines instead of one random slot each.
//
// Canonical hashes form a tree (a block's canonical is ckf.CanonicalChild of its parent's), and
// the runs are its paths: a node is either the head of its run, listed in heads (canonical →
// run+1), or the node right after its parent in the parent's run. So a node is found from its
// parent's node (the next node of the run, else heads), which every walk and every stored chain
// has at hand: a query walks from the root, a store starts at its parent's node (the source's
// lineage keeps each device membership's node, lineageEntry) and goes on from the node it has
// just found or made. A new node is appended to its parent's run when the parent is the run's
// last node and the run has room, else it heads a run of its own.
//
// A node counts the runs headed by its children (kids), and each head remembers its parent's
// node (runMeta.parent): a child that is not the next node of its parent's run is looked up in
// heads only when the parent has such runs, or when some head was made without its parent's
// node (an orphan: a device store whose parent the source holds on a lower tier only, and no
// node for it), so that a chain stored block after block costs no heads lookup past its first
// block.
//
// Nodes never move: a lineage entry keeps its node's place for as long as it holds the device
// tier. A node whose holder value drops to 0 stays while a later node of its run or a run of its
// children needs it; a run's trailing nodes with neither are cut off, and a run left with none
// is freed, its head forgotten and its parent's count of child runs lowered (which may let the
// parent go in turn).
type chainTier struct {
	nodes   []chainNode // run r is nodes[r*runCap : r*runCap+meta[r].len]
	kids    []uint16    // per node: runs headed by its children (saturates: then it stays)
	meta    []runMeta
	heads   holderTable // head canonical → run index + 1
	free    []uint32    // freed runs
	live    int         // nodes with a non-zero holder value
	orphans int         // live runs whose head was made without its parent's node
}

// runMeta is one run's length, whether its head is an orphan, and its head's parent node
// (noNode: a root's run, or an orphan's).
type runMeta struct {
	len    uint8
	orphan bool
	parent uint32
}

const kidsSaturated = ^uint16(0)

// chainNode is one canonical hash and its holder value (0: no holder; the node stays only as a
// way to the nodes after it). 12 bytes, no padding.
type chainNode struct {
	key [8]byte
	val uint32
}

func (n *chainNode) k() uint64 { return binary.LittleEndian.Uint64(n.key[:]) }

const (
	runCap = 16
	noNode = ^uint32(0) // no node: a place r*runCap+o never has every bit set below 2^32/runCap runs
)

// Len is the number of canonical hashes with a holder.
func (ct *chainTier) Len() int { return ct.live }

// Bytes is the memory the nodes, their counts, the runs' records and heads take.
func (ct *chainTier) Bytes() uint64 {
	return uint64(cap(ct.nodes))*uint64(unsafe.Sizeof(chainNode{})) + uint64(cap(ct.kids))*2 +
		uint64(cap(ct.meta))*uint64(unsafe.Sizeof(runMeta{})) + ct.heads.Bytes() + uint64(cap(ct.free))*4
}

// child returns the node of c, a child of the node at parent (noNode: c's parent has no node,
// or c is a root), or noNode.
func (ct *chainTier) child(parent uint32, c uint64) uint32 {
	if parent != noNode {
		if o := parent % runCap; o+1 < uint32(ct.meta[parent/runCap].len) && ct.nodes[parent+1].k() == c {
			return parent + 1
		}
		if ct.kids[parent] == 0 && ct.orphans == 0 {
			return noNode
		}
	}
	if v := ct.heads.get(c); v != 0 {
		return (v - 1) * runCap
	}
	return noNode
}

// childOrNew returns the node of c, a child of the node at parent (see child), making it (with
// holder value 0) when absent; orphan says that c has a parent canonical without a node (parent
// is then noNode).
func (ct *chainTier) childOrNew(parent uint32, c uint64, orphan bool) uint32 {
	if at := ct.child(parent, c); at != noNode {
		return at
	}
	if parent != noNode {
		m := &ct.meta[parent/runCap]
		if n := uint32(m.len); parent%runCap+1 == n && n < runCap {
			m.len++
			at := parent + 1
			ct.nodes[at] = chainNode{}
			binary.LittleEndian.PutUint64(ct.nodes[at].key[:], c)
			ct.kids[at] = 0
			return at
		}
		if ct.kids[parent] != kidsSaturated {
			ct.kids[parent]++
		}
	}
	var r uint32
	if n := len(ct.free); n > 0 {
		r = ct.free[n-1]
		ct.free = ct.free[:n-1]
	} else {
		r = uint32(len(ct.meta))
		ct.meta = append(ct.meta, runMeta{})
		ct.nodes = append(ct.nodes, make([]chainNode, runCap)...)
		ct.kids = append(ct.kids, make([]uint16, runCap)...)
	}
	ct.meta[r] = runMeta{len: 1, orphan: orphan, parent: parent}
	if orphan {
		ct.orphans++
	}
	at := r * runCap
	ct.nodes[at] = chainNode{}
	binary.LittleEndian.PutUint64(ct.nodes[at].key[:], c)
	ct.kids[at] = 0
	*ct.heads.upsert(c) = r + 1
	return at
}

// emptied is called when the node at at may no longer be needed (its holder value dropped to 0,
// or its last child run went): the run's trailing nodes without a holder or a child run are cut
// off, and a run left with none is freed, which may let its parent go in turn.
func (ct *chainTier) emptied(at uint32) {
	for at != noNode {
		r := at / runCap
		m := &ct.meta[r]
		n := uint32(m.len)
		if at%runCap+1 != n {
			return // a later node of the run is still reached through this one
		}
		base := r * runCap
		for n > 0 && ct.nodes[base+n-1].val == 0 && ct.kids[base+n-1] == 0 {
			n--
		}
		m.len = uint8(n)
		if n > 0 {
			return
		}
		if i := ct.heads.find(ct.nodes[base].k()); i >= 0 {
			ct.heads.deleteAt(i)
		}
		ct.free = append(ct.free, r)
		if m.orphan {
			ct.orphans--
		}
		p := m.parent
		*m = runMeta{}
		if p == noNode || ct.kids[p] == kidsSaturated {
			return
		}
		ct.kids[p]--
		if ct.kids[p] != 0 || ct.nodes[p].val != 0 {
			return
		}
		at = p
	}
}

// find returns the node of c wherever it is, or noNode: a head is one lookup, a node inside a run
// a scan of every run. Only Holds and a store whose parent's node the source's lineage does not
// name (a device store whose parent the source holds on a lower tier only) need it.
func (ct *chainTier) find(c uint64) uint32 {
	if v := ct.heads.get(c); v != 0 {
		return (v - 1) * runCap
	}
	for r := range ct.meta {
		base := uint32(r) * runCap
		for o := uint32(1); o < uint32(ct.meta[r].len); o++ {
			if ct.nodes[base+o].k() == c {
				return base + o
			}
		}
	}
	return noNode
}

// Prefetch starts loading the cache line of node at.
func (ct *chainTier) Prefetch(at uint32) {
	prefetch.Line(unsafe.Pointer(&ct.nodes[at]))
}

// all yields every node with a holder, in an unspecified order; the tier must not change
// meanwhile.
func (ct *chainTier) all() iter.Seq2[ckf.CanonicalHash, uint32] {
	return func(yield func(ckf.CanonicalHash, uint32) bool) {
		for r := range ct.meta {
			base := uint32(r) * runCap
			for o := range uint32(ct.meta[r].len) {
				if nd := &ct.nodes[base+o]; nd.val != 0 && !yield(ckf.CanonicalHash(nd.k()), nd.val) {
					return
				}
			}
		}
	}
}

// runChain is the device walk's scan (walkDevice): from position from, whose parent is the node
// at at (noNode before the root), the first position whose holder value differs from cur, that
// value and the position's node; len(query), cur and the last node when there is none. A
// position whose canonical has no node has value 0 (and node noNode). Along a run it compares
// the query's canonicals with the run's next nodes, one load of each; it looks a canonical up
// in heads only where the run does not continue with it and the node before may have a child
// run (kids) or some head is an orphan. This loop is most of a query's work: it holds only what
// it needs, so that the compiler keeps it in registers.
func runChain(ct *chainTier, query []ckf.CanonicalHash, from int, cur uint32, at uint32) (int, uint32, uint32) {
	nodes, meta, kids, orphans := ct.nodes, ct.meta, ct.kids, ct.orphans
	hs, seed, shift := ct.heads.slots, ct.heads.seed, ct.heads.shift
	pos := from
	for pos < len(query) {
		if at != noNode {
			end := at - at%runCap + uint32(meta[at/runCap].len)
			for at+1 < end && pos < len(query) {
				nd := &nodes[at+1]
				if nd.k() != uint64(query[pos]) {
					break
				}
				at++
				if nd.val != cur {
					return pos, nd.val, at
				}
				pos++
			}
			if pos == len(query) {
				break
			}
		}
		next := noNode
		if at == noNode || kids[at] != 0 || orphans != 0 {
			if v := probe(hs, seed, shift, uint64(query[pos])); v != 0 {
				next = (v - 1) * runCap
			}
		}
		at = next
		v := uint32(0)
		if at != noNode {
			v = nodes[at].val
		}
		if v != cur {
			return pos, v, at
		}
		pos++
	}
	return len(query), cur, at
}
