package workers

import (
	"errors"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/ckf/producer"
)

// ErrUnknownTier rejects an event whose storage tier is none of producer.StorageTier's four.
// errors.Is matches it; nothing of the event was applied.
var ErrUnknownTier = errors.New("workers: unknown storage tier")

// Apply applies one KV event (workers §3). It returns nil when the event was applied, was
// redundant (duplicates, unknown removal ids and unknown sources are counted, not errors) or
// was ignored because it does not describe a worker's own residency (the cache-owner domain).
// Otherwise it returns an error and the event changed nothing:
//
//   - *ckf.EventError of kind EventUnsupportedResidencyDomain: an unknown residency encoding,
//     or cache-owner residency on the device tier (as producer.DcState.ApplyEvent);
//   - ErrUnknownTier: a tier outside producer.StorageTier's values;
//   - EventParentBlockNotFound: a store whose parent the source does not map on any tier;
//   - EventInvalidBlockSequence: a store without a parent but a non-zero start position, a
//     store that would map an external id of the source to another canonical hash, or an
//     undefined Kind.
func (ix *Index) Apply(ev producer.RouterEvent) error {
	if !ev.Residency.Known() {
		ix.tel.UnsupportedResidency++
		return ckf.NewEventError(ckf.EventUnsupportedResidencyDomain, ev.Residency.String())
	}
	kind := ev.Event.Kind
	if int(ev.StorageTier) >= TierCount {
		return ErrUnknownTier
	}
	if ev.Residency == producer.ResidencyCacheOwner {
		if ev.StorageTier == producer.StorageTierDevice && kind != producer.KvEventCleared {
			ix.tel.UnsupportedResidency++
			return ckf.NewEventError(ckf.EventUnsupportedResidencyDomain, "cache_owner residency on the device tier")
		}
		ix.tel.NotWorkerResidency++
		return nil
	}
	src := ev.Source()
	switch kind {
	case producer.KvEventStored:
		ix.tel.Events++
		return ix.store(src, ev.StorageTier, &ev.Event.Stored)
	case producer.KvEventRemoved:
		ix.tel.Events++
		ix.remove(src, ev.StorageTier, ev.Event.Removed)
		return nil
	case producer.KvEventCleared:
		ix.tel.Events++
		ix.Clear(src)
		return nil
	}
	ix.tel.InvalidKinds++
	return ckf.NewEventError(ckf.EventInvalidBlockSequence, "unknown event kind")
}

// store is workers §3.2: validate every block against the source's lineage, then commit.
func (ix *Index) store(key ckf.SourceKey, t producer.StorageTier, d *producer.StoreData) error {
	si := ix.sourceOf(key)
	var lin *lineageMap
	if si >= 0 {
		lin = ix.srcs[si].lin
	}
	var prev ckf.CanonicalHash
	havePrev := false
	if d.HasParent {
		e := lin.Find(d.ParentHash)
		if e == nil {
			ix.tel.ParentNotFound++
			return ckf.NewEventError(ckf.EventParentBlockNotFound, "parent not in source lineage")
		}
		prev, havePrev = e.canonical(), true
	} else if d.HasStartPosition && d.StartPosition != 0 {
		ix.tel.InvalidSequences++
		return ckf.NewEventError(ckf.EventInvalidBlockSequence, "non-zero start position without a parent")
	}
	p := ix.prep[:0]
	for _, b := range d.Blocks {
		var c ckf.CanonicalHash
		if havePrev {
			c = ckf.CanonicalChild(prev, b.TokensHash)
		} else {
			c = ckf.CanonicalRoot(b.TokensHash)
		}
		prev, havePrev = c, true
		if e := lin.Find(b.BlockHash); e != nil && e.canonical() != c {
			ix.prep = p
			ix.tel.InvalidSequences++
			return ckf.NewEventError(ckf.EventInvalidBlockSequence, "external id remapped to a different chain")
		}
		// The same external id earlier in this event at another position is a remap too
		// (its canonical differs unless the chain repeats a hash, which the scan accepts).
		for _, q := range p {
			if q.ext == b.BlockHash && q.canon != c {
				ix.prep = p
				ix.tel.InvalidSequences++
				return ckf.NewEventError(ckf.EventInvalidBlockSequence, "external id twice in one store")
			}
		}
		p = append(p, prepared{ext: b.BlockHash, canon: c})
	}
	ix.prep = p[:0]
	if len(p) == 0 {
		return nil
	}
	// Mutation starts here.
	var i uint32
	if si >= 0 {
		i = uint32(si)
	} else {
		var err error
		if i, err = ix.addSource(key); err != nil {
			return err
		}
		lin = ix.srcs[i].lin
	}
	bit := uint8(1) << t
	for _, q := range p {
		e, _ := lin.Upsert(q.ext)
		if e.tiers&bit != 0 {
			ix.tel.DuplicateBlocks++
			continue
		}
		if e.tiers == 0 {
			*e = newLineageEntry(q.canon)
		}
		e.tiers |= bit
		ix.gain(i, t, q.canon)
	}
	return nil
}

// remove is workers §3.4: each id in order; an id the source does not hold on t is counted.
func (ix *Index) remove(key ckf.SourceKey, t producer.StorageTier, ids []ckf.ExternalBlockHash) {
	si := ix.sourceOf(key)
	if si < 0 {
		if len(ids) > 0 {
			ix.tel.UnknownSources++
			ix.tel.UnknownRemovals += uint64(len(ids))
		}
		return
	}
	i := uint32(si)
	lin := ix.srcs[i].lin
	bit := uint8(1) << t
	for _, id := range ids {
		e := lin.Find(id)
		if e == nil || e.tiers&bit == 0 {
			ix.tel.UnknownRemovals++
			continue
		}
		c := e.canonical()
		e.tiers &^= bit
		if e.tiers == 0 {
			lin.Delete(id)
		}
		ix.lose(i, t, c)
	}
	if lin.Len() == 0 {
		ix.dropSource(i)
	}
}

// Clear drops every membership of src on every tier (workers §3.5): a Cleared event of the
// worker residency domain, and a dp rank's removal. A source the index holds nothing for is
// counted in Telemetry.UnknownSources.
func (ix *Index) Clear(src ckf.SourceKey) {
	si := ix.sourceOf(src)
	if si < 0 {
		ix.tel.UnknownSources++
		return
	}
	ix.clearIndex(uint32(si))
}

func (ix *Index) clearIndex(i uint32) {
	lin := ix.srcs[i].lin
	for ext, e := range lin.All() {
		c := e.canonical()
		for t := range TierCount {
			if e.tiers&(1<<t) != 0 {
				ix.lose(i, producer.StorageTier(t), c)
			}
		}
		_ = ext
	}
	*lin = lineageMap{}
	ix.dropSource(i)
}

// RemoveWorker drops every dp rank of worker (workers §3.6) and returns the number of sources
// it dropped; a worker with none is counted in Telemetry.UnknownSources.
func (ix *Index) RemoveWorker(worker ckf.WorkerID) int {
	var drop []uint32
	for k, i := range ix.ids {
		if k.Worker == worker {
			drop = append(drop, i)
		}
	}
	if len(drop) == 0 {
		ix.tel.UnknownSources++
	}
	for _, i := range drop {
		ix.clearIndex(i)
	}
	return len(drop)
}
