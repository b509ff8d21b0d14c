package index

import (
	"math/bits"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/ckf/internal/search"
)

// Query path (consumer §6): find_prefix_matches.

// queryStackBlocks is the query length served from a stack buffer; longer
// queries allocate once in FindPrefixMatches, or use FindPrefixMatchesScratch.
const queryStackBlocks = 256

// probeCacheSize is the number of memoised probes (direct-mapped by
// position). The search asks for the same position at most a few times in
// close succession (prefetch, then probe; verification after binary), so a
// small cache avoids recomputing the xxh3 addressing without a per-position
// array.
const probeCacheSize = 32

// LaneMatch is one entry of a query result: the physical lane, its pool and
// the prefix depth d ("blocks 0..d-1 appear cached in that pool").
type LaneMatch struct {
	Lane  uint8
	Pool  ckf.PoolID
	Depth uint32
}

// PrefixMatches is the result of FindPrefixMatches, the 16-lane form. ReadyLanes is the ready
// mask the query captured (already restricted to configured lanes); Lanes[l]
// is meaningful iff bit l of ReadyLanes is set, and is present even when its
// depth is 0. It is a plain value (no allocation). An indexer that
// configures lanes beyond 15 answers with PrefixMatches64 (consumer §16).
type PrefixMatches struct {
	ReadyLanes uint16
	Lanes      [ckf.LaneCount]LaneMatch
}

// Match returns the entry of lane, ok == false when lane was not captured.
func (r *PrefixMatches) Match(lane uint8) (LaneMatch, bool) {
	if lane >= ckf.LaneCount || r.ReadyLanes&(1<<lane) == 0 {
		return LaneMatch{}, false
	}
	return r.Lanes[lane], true
}

// Depths returns the depth of every lane (0 for lanes not captured).
func (r *PrefixMatches) Depths() [ckf.LaneCount]uint32 {
	var d [ckf.LaneCount]uint32
	for l := 0; l < ckf.LaneCount; l++ {
		if r.ReadyLanes&(1<<uint(l)) != 0 {
			d[l] = r.Lanes[l].Depth
		}
	}
	return d
}

// FindPrefixMatches returns, for every lane that was ready when the query
// started, the depth of the longest prefix of localHashes (LocalBlockHash
// values, one per full block) that appears cached in that lane's pool.
//
// Steps (consumer §6.1): the ready mask is loaded exactly once (the only readiness
// read; a lane retired after that load is still searched and reported, a
// lane activated after it is not) and restricted to configured lanes; if
// nothing is ready the result is ErrUnavailable. An empty query returns
// depth 0 for every captured lane. Otherwise the canonical sequence hashes
// are computed, each position's probe is derived lazily, and the consumer §7 search
// runs with the configured verification window.
//
// Results are advisory (consumer §5.5, §7.8). No depth exceeds len(localHashes). It
// does not allocate for queries of up to 256 blocks; longer queries allocate
// the sequence-hash buffer once (use FindPrefixMatchesScratch to avoid that).
//
// PrefixMatches holds 16 lanes: an indexer whose manifest configures a lane
// beyond 15 refuses the query with ErrLanesBeyond16 (whatever is ready; no
// mask is ever cut short) and is queried with FindPrefixMatches64.
func (g *GlobalIndexer) FindPrefixMatches(localHashes []uint64) (PrefixMatches, error) {
	var buf [queryStackBlocks]uint64
	var seq []uint64
	if len(localHashes) <= queryStackBlocks {
		seq = buf[:0]
	}
	return g.findPrefixMatches(localHashes, seq)
}

// FindPrefixMatchesScratch is FindPrefixMatches with a caller-owned buffer
// for the sequence hashes: *scratch is grown when its capacity is below
// len(localHashes) and reused otherwise, so a caller that keeps one scratch
// per goroutine never allocates. scratch must not be shared between
// concurrent queries. A nil scratch behaves like FindPrefixMatches.
func (g *GlobalIndexer) FindPrefixMatchesScratch(localHashes []uint64, scratch *[]uint64) (PrefixMatches, error) {
	if scratch == nil {
		return g.FindPrefixMatches(localHashes)
	}
	if cap(*scratch) < len(localHashes) {
		*scratch = make([]uint64, 0, len(localHashes))
	}
	return g.findPrefixMatches(localHashes, (*scratch)[:0])
}

// findPrefixMatches runs the query; seq is an empty buffer whose capacity
// should cover len(local) (else it grows).
func (g *GlobalIndexer) findPrefixMatches(local []uint64, seq []uint64) (PrefixMatches, error) {
	return g.findPrefixMatchesCaptured(local, seq, uint16(g.ready.Load()))
}

// findPrefixMatchesCaptured runs a query with an already captured ready
// mask (tests use it to replay a query that captured its mask before a
// concurrent retirement). A manifest that configures a lane beyond 15 is
// refused (ErrLanesBeyond16).
func (g *GlobalIndexer) findPrefixMatchesCaptured(local []uint64, seq []uint64, captured uint16) (PrefixMatches, error) {
	var res PrefixMatches
	if g.manifest.configured > 0xFFFF {
		return res, ErrLanesBeyond16
	}
	captured &= uint16(g.manifest.configured)
	if captured == 0 {
		return res, ErrUnavailable
	}
	res.ReadyLanes = captured
	for m := captured; m != 0; m &= m - 1 {
		l := bits.TrailingZeros16(m)
		res.Lanes[l] = LaneMatch{Lane: uint8(l), Pool: g.manifest.lanes[l]}
	}
	if len(local) == 0 {
		return res, nil
	}
	seq = ckf.AppendSequenceHashes(seq, local)
	q := queryProber{table: &g.table, addr: &g.addr, seq: seq}
	depths := search.FindWith(len(seq), captured, g.window, q.probe, q.prefetch, nil)
	for m := captured; m != 0; m &= m - 1 {
		l := bits.TrailingZeros16(m)
		res.Lanes[l].Depth = depths[l]
	}
	return res, nil
}

// PrefixMatches64 is the result of FindPrefixMatches64, the form of every
// lane count (consumer §16). ReadyLanes is the ready mask the query
// captured, restricted to configured lanes; Depths[l] is lane l's depth,
// meaningful iff bit l of ReadyLanes is set (0 otherwise). A lane's pool is
// Manifest().PoolOf(l). It is a plain value (no allocation).
type PrefixMatches64 struct {
	ReadyLanes uint64
	Depths     [ckf.MaxLanes]uint32
}

// Depth returns the depth of lane, ok == false when lane was not captured.
func (r *PrefixMatches64) Depth(lane uint8) (uint32, bool) {
	if lane >= ckf.MaxLanes || r.ReadyLanes&(1<<lane) == 0 {
		return 0, false
	}
	return r.Depths[lane], true
}

// FindPrefixMatches64 is FindPrefixMatchesScratch for an indexer of any lane
// count (consumer §16), with the same steps, guarantees and scratch rules
// (a nil scratch uses a stack buffer up to 256 blocks). When the captured
// lanes all lie below 16 it runs the 16-lane search over the first 16 words
// of each row, which is the whole row of a table of at most 16 lanes, so a
// query of such an indexer costs what FindPrefixMatches costs; otherwise the
// 64-lane search (search.FindWide) over whole rows. It does not allocate.
func (g *GlobalIndexer) FindPrefixMatches64(localHashes []uint64, scratch *[]uint64) (PrefixMatches64, error) {
	var buf [queryStackBlocks]uint64
	var seq []uint64
	switch {
	case scratch != nil:
		if cap(*scratch) < len(localHashes) {
			*scratch = make([]uint64, 0, len(localHashes))
		}
		seq = (*scratch)[:0]
	case len(localHashes) <= queryStackBlocks:
		seq = buf[:0]
	}
	return g.findPrefixMatches64(localHashes, seq, g.ready.Load())
}

// findPrefixMatches64 runs FindPrefixMatches64 with an already captured
// ready mask.
func (g *GlobalIndexer) findPrefixMatches64(local []uint64, seq []uint64, captured uint64) (PrefixMatches64, error) {
	var res PrefixMatches64
	captured &= g.manifest.configured
	if captured == 0 {
		return res, ErrUnavailable
	}
	res.ReadyLanes = captured
	if len(local) == 0 {
		return res, nil
	}
	seq = ckf.AppendSequenceHashes(seq, local)
	q := queryProber{table: &g.table, addr: &g.addr, seq: seq}
	if captured <= 0xFFFF {
		depths := search.FindWith(len(seq), uint16(captured), g.window, q.probe, q.prefetch, nil)
		copy(res.Depths[:ckf.LaneCount], depths[:])
		return res, nil
	}
	search.FindWide(&res.Depths, len(seq), captured, g.window, q.probe64, q.prefetch64, nil)
	return res, nil
}

// queryProber adapts the table to the search's probe/prefetch callbacks with
// a small direct-mapped probe cache. It lives on the query's stack.
type queryProber struct {
	table *transposedTable
	addr  *ckf.Addressing
	seq   []uint64
	tags  [probeCacheSize]int // position+1, 0 = empty
	cache [probeCacheSize]ckf.Probe
}

func (q *queryProber) at(pos int) ckf.Probe {
	slot := pos & (probeCacheSize - 1)
	if q.tags[slot] == pos+1 {
		return q.cache[slot]
	}
	p := q.addr.Probe(q.seq[pos])
	q.tags[slot] = pos + 1
	q.cache[slot] = p
	return p
}

// probe returns the hit mask of position pos over lanes 0..15; lanes are those the search
// decides with it, which probeSettled16 checks once more in row A when they miss.
func (q *queryProber) probe(pos int, lanes uint16) uint16 {
	p := q.at(pos)
	return q.table.probeSettled16(p.Fingerprint, p.BucketA, p.BucketB, lanes)
}

func (q *queryProber) prefetch(pos int) {
	p := q.at(pos)
	q.table.prefetch16(p.BucketA, p.BucketB)
}

// probe64 is probe over every lane of the row (the 64-lane search).
func (q *queryProber) probe64(pos int, lanes uint64) uint64 {
	p := q.at(pos)
	return q.table.probeSettled(p.Fingerprint, p.BucketA, p.BucketB, lanes)
}

func (q *queryProber) prefetch64(pos int) {
	p := q.at(pos)
	q.table.prefetch(p.BucketA, p.BucketB)
}
