package workers

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/ckf/internal/prefetch"
	"github.com/ckf-stream/ckf-stream/ckf/producer"
)

// The lineage as rows (workers §2.2): what a checkpoint of the index holds, read out of the
// index itself, so that a replicated read model needs no copy of its own.

// LineageRow is one external id of a source's lineage (workers §2.1): the canonical hash the
// source maps it to and the tiers it is held on (bit t: producer.StorageTier t). In a row that
// AppendLineage wrote, Tiers is never 0 and has no bit at or above TierCount.
type LineageRow struct {
	ID        ckf.ExternalBlockHash
	Canonical ckf.CanonicalHash
	Tiers     uint8
}

// AppendLineage appends source src's lineage to dst in ascending ID order and returns the
// extended slice; a source the index holds nothing for appends nothing. Together with Sources,
// the rows are the whole index: RestoreLineage of every source's rows into an empty index gives
// an index with the same lineages, memberships and answers (workers §2.2).
//
// Cost: one pass over the source's lineage buckets and a sort of its rows; it allocates only to
// grow dst. Under Shared, rows are read from a snapshot (Shared.SnapshotLineage).
func (ix *Index) AppendLineage(dst []LineageRow, src ckf.SourceKey) []LineageRow {
	i, ok := ix.ids[src]
	if !ok {
		return dst
	}
	return appendRows(dst, ix.srcs[i].lin, ix.slab.pages)
}

// appendRows appends lin's rows to dst in ascending ID order, each row's canonical read from the
// slab's pages at its entry's position.
func appendRows(dst []LineageRow, lin *lineageTable, pages [][]slabBlock) []LineageRow {
	start := len(dst)
	for id, e := range lin.all() {
		pos := e.position()
		dst = append(dst, LineageRow{ID: id, Canonical: pages[pos>>slabPageBits][pos&slabPageMask].canon, Tiers: e.tiers})
	}
	slices.SortFunc(dst[start:], func(a, b LineageRow) int { return cmp.Compare(a.ID, b.ID) })
	return dst
}

// LineageSnapshot is every source's lineage at one state of the index (Index.SnapshotLineage),
// to be read while the index goes on changing: a replica encodes its checkpoint from one on a
// goroutine of its own, so that applying events stops only to take it, not for the sort and the
// encoding (streams/workers). It never changes; any number of goroutines may read it at once.
//
// Memory ordering: the index never writes a lineage bucket or a slab page after sharing it (it
// writes a copy), so the snapshot's readers race with nothing, the index's own reads of those
// buckets and pages included; a goroutine other than the index's must receive the snapshot
// through a synchronising operation (a channel, a go statement, a lock), as with any value.
//
// Memory: none at first; it shares each source's lineage buckets and the slab's pages (where the
// rows' canonicals are) with the index, which copies a source's buckets (about 23 bytes per row,
// workers §8) or a page of the slab (1.5 MiB) before it next writes them, so that while a
// snapshot is held what the index has written since is held twice.
type LineageSnapshot struct {
	keys  []ckf.SourceKey // in SourceKey order
	lins  []lineageTable  // lins[j] is keys[j]'s, buckets shared with the index (lineageTable.share)
	pages [][]slabBlock   // the slab's pages, shared with the index (slab.share)
	rows  int
}

// SnapshotLineage takes a snapshot of every source's lineage in O(sources), with no work per
// row: each source's buckets and the slab's pages are shared with the snapshot and copied by the
// index only before its next write to them (copy on write, workers §2.2). It changes the index
// (the tables' and pages' shared marks): Shared.SnapshotLineage runs it under the write lock.
func (ix *Index) SnapshotLineage() *LineageSnapshot {
	s := &LineageSnapshot{keys: make([]ckf.SourceKey, len(ix.order)), lins: make([]lineageTable, len(ix.order)), pages: ix.slab.share()}
	for j, i := range ix.order {
		lin := ix.srcs[i].lin
		s.keys[j] = ix.keys[i]
		s.lins[j] = lineageTable{buckets: lin.share(), live: lin.live}
		s.rows += lin.live
	}
	return s
}

// Sources returns the snapshot's sources in SourceKey order (a new slice).
func (s *LineageSnapshot) Sources() []ckf.SourceKey { return slices.Clone(s.keys) }

// AppendLineage is Index.AppendLineage on the snapshot.
func (s *LineageSnapshot) AppendLineage(dst []LineageRow, src ckf.SourceKey) []LineageRow {
	j, ok := slices.BinarySearchFunc(s.keys, src, ckf.SourceKey.Compare)
	if !ok {
		return dst
	}
	return appendRows(dst, &s.lins[j], s.pages)
}

// LineageSize is Index.LineageSize on the snapshot.
func (s *LineageSnapshot) LineageSize() (sources, rows int) { return len(s.keys), s.rows }

// LineageSize returns the number of sources and of lineage rows (external ids) over all of
// them, in O(sources).
func (ix *Index) LineageSize() (sources, rows int) {
	for i := range ix.srcs {
		if lin := ix.srcs[i].lin; lin != nil {
			rows += lin.live
		}
	}
	return len(ix.ids), rows
}

// RestoreLineage applies rows, one source's lineage as AppendLineage writes it, to the index:
// each row as if stored without a parent, one block {ID, token hash Canonical} on each tier of
// its Tiers. ckf.CanonicalRoot is the identity, so the block's canonical is the row's, and a
// membership is keyed by its canonical alone (workers §2.2), so the restored source holds and
// answers exactly what the rows say, whatever chains its blocks were stored in. A row repeated
// with the same canonical is a duplicate (workers §3.3) and changes nothing.
//
// It returns an error naming the first row the index refuses: a Tiers of 0 or with a bit at or
// above TierCount (then nothing is applied), or an ID the source already maps to another
// canonical (a row repeated with another canonical, or rows restored over a source that holds
// other mappings; then the rows before it stay applied).
//
// Cost: a new source's lineage grows once, to hold every row, before the rest of its rows; the
// rows of each tier are applied restoreChunk at a time, as one store of that many blocks
// (Index.commit), so that their cache lines are prefetched together on a large index; no
// canonical is hashed. A row's parent is not known, so its block is looked for as a run's head
// (restored rows are heads, each a run of its own: slab); an index that has applied stores has
// blocks that are not heads, and restoring into one first lists those by canonical, a pass over
// the slab per call.
func (ix *Index) RestoreLineage(src ckf.SourceKey, rows []LineageRow) error {
	for _, r := range rows {
		if r.Tiers == 0 || r.Tiers >= 1<<TierCount {
			return fmt.Errorf("workers: restoring %v external id %#x: tiers %#x", src, uint64(r.ID), r.Tiers)
		}
	}
	var nonHeads map[ckf.CanonicalHash]uint32 // a row's block may be one (Index.placeAll)
	if ix.slab.blocks > ix.slab.heads.Len() {
		nonHeads = make(map[ckf.CanonicalHash]uint32, ix.slab.blocks-ix.slab.heads.Len())
		for pos, b := range ix.slab.all() {
			if !ix.slab.isHead(pos) {
				nonHeads[b.canon] = pos
			}
		}
	}
	for t := range producer.StorageTier(TierCount) {
		bit := uint8(1) << t
		for rest := rows; len(rest) > 0; {
			p := ix.scratchPrep(restoreChunk)[:0]
			for len(rest) > 0 && len(p) < restoreChunk {
				if r := rest[0]; r.Tiers&bit != 0 {
					// A root's canonical is its local hash (ckf.CanonicalRoot).
					p = append(p, prepared{ext: r.ID, canon: r.Canonical, local: ckf.LocalBlockHash(r.Canonical), pos: noPos})
				}
				rest = rest[1:]
			}
			if len(p) == 0 {
				continue
			}
			si := ix.sourceOf(src)
			ix.prefetchPrepared(si, t, p)
			if ix.commit(src, si, t, p, noPos, false, nonHeads) == nil {
				if si < 0 { // the source's first rows: its lineage grows once for all of them
					ix.srcs[ix.sourceOf(src)].lin.reserve(len(rows))
				}
				continue
			}
			// Refused, and undone: apply the chunk's rows one at a time to name the one refused.
			for k := range p {
				one := p[k : k+1]
				if err := ix.commit(src, ix.sourceOf(src), t, one, noPos, false, nonHeads); err != nil {
					return fmt.Errorf("workers: restoring %v external id %#x on tier %v: %w", src, uint64(one[0].ext), t, err)
				}
			}
		}
	}
	return nil
}

// restoreChunk is how many rows RestoreLineage applies as one store.
const restoreChunk = 64

// prefetchPrepared prefetches, on an index larger than the caches, the lines that committing p
// (blocks of source si, or -1, on tier t) reads: each id's two lineage buckets and, on a lower
// tier, each canonical's tier-map lines, in one prefetch.Lines call (as a store does,
// Index.store).
func (ix *Index) prefetchPrepared(si int32, t producer.StorageTier, p []prepared) {
	if !ix.worthPrefetching() {
		return
	}
	addrs, n := ix.scratchAddrs(4*len(p)), 0
	if si >= 0 {
		if lin := ix.srcs[si].lin; len(lin.buckets) != 0 {
			for k := range p {
				addrs[2*k], addrs[2*k+1] = lin.lines(p[k].ext)
			}
			n = 2 * len(p)
		}
	}
	if tm := &ix.tiers[t]; t != producer.StorageTierDevice && tm.live != 0 {
		tm.runLinesOf(addrs[n:n+2*len(p)], p)
		n += 2 * len(p)
	}
	prefetch.Lines(addrs[:n])
}
