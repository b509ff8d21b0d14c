package workers

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/ckf-stream/ckf-stream/ckf"
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
// grow dst. It reads the index, so under Shared it runs under the read lock.
func (ix *Index) AppendLineage(dst []LineageRow, src ckf.SourceKey) []LineageRow {
	i, ok := ix.ids[src]
	if !ok {
		return dst
	}
	start := len(dst)
	for id, e := range ix.srcs[i].lin.all() {
		dst = append(dst, LineageRow{ID: id, Canonical: e.canonical(), Tiers: e.tiers})
	}
	slices.SortFunc(dst[start:], func(a, b LineageRow) int { return cmp.Compare(a.ID, b.ID) })
	return dst
}

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
// each row as a store without a parent of one block {ID, token hash Canonical} on each tier of
// its Tiers. ckf.CanonicalRoot is the identity, so the block's canonical is the row's, and a
// membership is keyed by its canonical alone (workers §2.2), so the restored source holds and
// answers exactly what the rows say, whatever chains its blocks were stored in.
//
// It returns an error, and stops, at the first row the index refuses: a Tiers of 0 or with a
// bit at or above TierCount, or an ID the source already maps to another canonical (a row
// repeated with another canonical, or rows restored over a source that holds other mappings).
// The rows before it stay applied. A row repeated with the same canonical is a duplicate store
// (workers §3.3) and changes nothing.
func (ix *Index) RestoreLineage(src ckf.SourceKey, rows []LineageRow) error {
	ev := producer.RouterEvent{WorkerID: src.Worker, Residency: producer.ResidencyWorker,
		Event: producer.KvCacheEvent{Kind: producer.KvEventStored, DpRank: src.Rank,
			Stored: producer.StoreData{Blocks: make([]producer.StoredBlock, 1)}}}
	for _, r := range rows {
		if r.Tiers == 0 || r.Tiers >= 1<<TierCount {
			return fmt.Errorf("workers: restoring %v external id %#x: tiers %#x", src, uint64(r.ID), r.Tiers)
		}
		ev.Event.Stored.Blocks[0] = producer.StoredBlock{BlockHash: r.ID, TokensHash: ckf.LocalBlockHash(r.Canonical)}
		for t := range TierCount {
			if r.Tiers&(1<<t) == 0 {
				continue
			}
			ev.StorageTier = producer.StorageTier(t)
			if err := ix.Apply(ev); err != nil {
				return fmt.Errorf("workers: restoring %v external id %#x on tier %v: %w", src, uint64(r.ID), ev.StorageTier, err)
			}
		}
	}
	return nil
}
