package producer

import (
	"math"
	"slices"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/ckf/internal/u64map"
)

// RemoveRank is remove_rank: drop every mapping of source, then force a
// drain, returning the batch (nil if none). On error (a reservation failure
// before any change, or an invariant violation part-way) it returns the
// error without draining, like Rust's `?`: whatever was applied stays
// pending for the next drain.
func (s *DcState) RemoveRank(source ckf.SourceKey) ([]ckf.BucketImage, error) {
	if err := s.removeMember(source); err != nil {
		return nil, err
	}
	return s.drain(), nil
}

// RemoveWorker is remove_worker: every source with that worker id (all dp
// ranks), after one up-front reservation of min(total mappings,
// bucket_count) dirty slots; then a forced drain. Errors as RemoveRank.
func (s *DcState) RemoveWorker(worker ckf.WorkerID) ([]ckf.BucketImage, error) {
	var keys []ckf.SourceKey
	var total uint64
	for _, k := range s.sortedSources() {
		if k.Worker == worker {
			keys = append(keys, k)
			total += uint64(s.lineage[k].Len())
		}
	}
	if err := s.reserveDirty(min(total, s.format.BucketCount)); err != nil {
		return nil, err
	}
	var first error
	for _, k := range keys {
		if err := s.removeMember(k); err != nil && first == nil {
			first = err
		}
	}
	if first != nil {
		return nil, first
	}
	return s.drain(), nil
}

// RankReplacement is DcCkfRankReplacement: the replay-ordered dump of one
// rank, validated against its own lineage as it is built. Every push is
// atomic: a failing push leaves the replacement unchanged.
type RankReplacement struct {
	lineage    lineageMap
	mappings   []newMapping
	candidates []ckf.CanonicalHash
	seen       u64map.Map[ckf.CanonicalHash, struct{}]
}

// NewRankReplacement returns an empty replacement (installing it removes
// the rank).
func NewRankReplacement() *RankReplacement {
	return &RankReplacement{}
}

// Len returns the number of mappings.
func (r *RankReplacement) Len() int { return len(r.mappings) }

// PushStore runs the store prepare logic against the replacement's own
// lineage: parents must precede children (ParentBlockNotFound), a
// positional entry with a non-zero start and no parent is
// InvalidBlockSequence, a remap is InvalidBlockSequence.
func (r *RankReplacement) PushStore(d StoreData) error {
	p, err := prepareStore(&r.lineage, &d)
	if err != nil {
		return err
	}
	for _, m := range p.mappings {
		r.lineage.Put(m.ext, m.canon)
		r.mappings = append(r.mappings, m)
		if _, seen := r.seen.Upsert(m.canon); !seen {
			r.candidates = append(r.candidates, m.canon)
		}
	}
	return nil
}

// PushEvent ignores non-primary events (CacheOwner clears included),
// rejects an unresolvable residency with ErrUnsupportedResidencyDomain and
// any primary event other than Stored with ErrInvalidBlockSequence. The
// event's worker/rank are not checked against the replaced rank (the spec
// does not say; the caller addresses the replacement).
func (r *RankReplacement) PushEvent(ev RouterEvent) error {
	primary, err := ev.targetsPrimary()
	if err != nil {
		return err
	}
	if !primary {
		return nil
	}
	if ev.Event.Kind != KvEventStored {
		return ckf.NewEventError(ckf.EventInvalidBlockSequence, "replacement accepts only stored events")
	}
	return r.PushStore(ev.Event.Stored)
}

// ReplaceRank is ReplaceRanks for one rank.
func (s *DcState) ReplaceRank(source ckf.SourceKey, r *RankReplacement) ([]ckf.BucketImage, error) {
	return s.ReplaceRanks(map[ckf.SourceKey]*RankReplacement{source: r})
}

// ReplaceRanks is the transactional off-side rebuild (producer §7.5): a fresh state
// with the same config (fresh RNG, empty filter) re-installs every retained
// source in ascending source order from its lineage, then each replacement
// in ascending order (nil = empty). Any error leaves s untouched and
// discards the rebuild. On success s becomes the rebuilt state and one
// forced drain returns a single absolute-image batch that moves consumers
// from the LAST PUBLISHED image to the rebuilt words: buckets dirty in the
// old window are compared with their stored originals, all others with the
// old words. A replacement that changes nothing physical returns nil.
// Telemetry carries over (capacity_failures and physical_touches summed
// with the rebuild's), as does the materialization flag. With a delegate,
// after the swap OnRemove is called for canonicals owned before but not
// after, then OnCreate for those owned after but not before (map order).
func (s *DcState) ReplaceRanks(repl map[ckf.SourceKey]*RankReplacement) ([]ckf.BucketImage, error) {
	if err := s.reserve(siteRebuild, s.format.BucketCount); err != nil {
		return nil, err
	}
	ns, err := newDcStateWith(s.cfg, s.filter.addr)
	if err != nil {
		return nil, &ckf.EventError{Kind: ckf.EventAllocationFailed, Detail: err.Error()}
	}
	ns.failReserve = s.failReserve
	for _, k := range s.sortedSources() {
		if _, replaced := repl[k]; replaced {
			continue
		}
		lin := s.lineage[k]
		ms := make([]newMapping, 0, lin.Len())
		for e, c := range lin.All() {
			ms = append(ms, newMapping{ext: e, canon: c})
		}
		slices.SortFunc(ms, func(a, b newMapping) int {
			switch {
			case a.ext < b.ext:
				return -1
			case a.ext > b.ext:
				return 1
			}
			return 0
		})
		cands := make([]ckf.CanonicalHash, 0, len(ms))
		for _, m := range ms {
			cands = append(cands, m.canon)
		}
		if err := ns.install(k, ms, cands); err != nil {
			return nil, err
		}
	}
	keys := make([]ckf.SourceKey, 0, len(repl))
	for k := range repl {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, ckf.SourceKey.Compare)
	for _, k := range keys {
		r := repl[k]
		if _, exists := ns.lineage[k]; exists {
			return nil, ckf.NewEventError(ckf.EventIndexerInvariantViolation, "replacement source already installed")
		}
		if r == nil || len(r.mappings) == 0 {
			continue
		}
		if err := ns.install(k, r.mappings, r.candidates); err != nil {
			return nil, err
		}
	}

	// Diff against the last published image.
	ns.win.reset()
	ns.win.materialize = s.win.materialize
	for i, b := range s.win.dirty {
		if ns.filter.words[b] != s.win.orig[i] {
			ns.win.mark(b, s.win.orig[i])
		}
	}
	for b, w := range s.filter.words {
		if s.win.marked(uint64(b)) {
			continue
		}
		if w != ns.filter.words[b] {
			ns.win.mark(uint64(b), w)
		}
	}
	ns.win.pending = 1
	tel := s.tel
	tel.CapacityFailures = satAdd(tel.CapacityFailures, ns.tel.CapacityFailures)
	tel.PhysicalTouches = satAdd(tel.PhysicalTouches, ns.tel.PhysicalTouches)
	ns.tel = tel
	old := s.owners
	ns.delegate = s.delegate
	*s = *ns
	if d := s.delegate; d != nil {
		for c := range old.Keys() {
			if !s.owners.Has(c) {
				d.OnRemove(c)
			}
		}
		for c := range s.owners.Keys() {
			if !old.Has(c) {
				d.OnCreate(c)
			}
		}
	}
	return s.drain(), nil
}

// install adds one source's mappings to a rebuild state: owner increments
// are validated for overflow before mutation, then mappings are inserted
// and each candidate not yet resident is admitted with max_kicks
// relocations; omissions only bump capacity_failures.
func (s *DcState) install(src ckf.SourceKey, ms []newMapping, cands []ckf.CanonicalHash) error {
	if len(ms) == 0 {
		return nil
	}
	incs := ownerIncrements(ms)
	for _, ci := range incs {
		if e, _ := s.owners.Get(ci.canon); uint64(e.owners())+ci.n > math.MaxUint32 {
			return ckf.NewEventError(ckf.EventOwnershipDegreeOverflow, "owner count would exceed 2^32-1")
		}
	}
	if err := s.reserve(siteLineage, uint64(len(ms))); err != nil {
		return err
	}
	lin := u64map.New[ckf.ExternalBlockHash, ckf.CanonicalHash](len(ms))
	for _, m := range ms {
		lin.Put(m.ext, m.canon)
	}
	s.lineage[src] = lin
	for _, ci := range incs {
		e, _ := s.owners.Upsert(ci.canon)
		e.setOwners(e.owners() + uint32(ci.n))
	}
	s.contributions += uint64(len(ms))
	for _, c := range cands {
		ok, err := s.admit(c, s.cfg.MaxKicks)
		if err != nil {
			return err
		}
		if !ok {
			s.tel.CapacityFailures = satAdd(s.tel.CapacityFailures, 1)
		}
	}
	return nil
}
