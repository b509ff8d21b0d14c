package producer

import (
	"slices"

	"github.com/ckf-stream/ckf-stream/ckf"
)

// remove is producer §7.4: it drops source's mapping of ext. It returns false (and
// changes nothing) for an unknown (source, ext) pair: removals never delete
// by fingerprint. On the last owner of a resident canonical it removes one
// fingerprint first; if that fingerprint is missing it returns
// ErrIndexerInvariantViolation with lineage and ownership unchanged.
func (s *DcState) remove(src ckf.SourceKey, ext ckf.ExternalBlockHash) (bool, error) {
	lin := s.lineageOf(src)
	c, ok := lin.Get(ext)
	if !ok {
		return false, nil
	}
	e := s.owners.Find(c)
	if e == nil || e.owners() == 0 {
		return false, ckf.NewEventError(ckf.EventIndexerInvariantViolation, "mapped canonical has no ownership entry")
	}
	if e.owners() == 1 && e.resident {
		if err := s.reserveDirty(1); err != nil {
			return false, err
		}
		t, err := s.filter.Remove(uint64(c))
		if err != nil {
			return false, err
		}
		s.markTouches([]Touch{t})
	}
	if e.owners() == 1 {
		if e.resident {
			s.residentCount--
		}
		s.owners.Delete(c)
		if s.delegate != nil {
			defer s.delegate.OnRemove(c) // after the lineage update below
		}
	} else {
		e.setOwners(e.owners() - 1)
	}
	lin.Delete(ext)
	if lin.Len() == 0 {
		delete(s.lineage, src)
		s.lastLin = nil
	}
	s.contributions--
	return true, nil
}

// prefetchRemovals prefetches what removing ids from src will read: first every id's lineage
// slot, then, for the ids src maps, the canonical's ownership slot and filter buckets, so the
// cache misses of one event overlap (ckf/internal/prefetch). It changes nothing.
func (s *DcState) prefetchRemovals(src ckf.SourceKey, ids []ckf.ExternalBlockHash) {
	lin := s.lineageOf(src)
	if len(ids) < 2 || lin == nil || !s.worthPrefetching() {
		return
	}
	for _, id := range ids {
		lin.Prefetch(id)
	}
	for _, id := range ids {
		if c, ok := lin.Get(id); ok {
			s.owners.Prefetch(c)
			s.filter.prefetch(uint64(c))
		}
	}
}

// removeMember drops every mapping of src (aliases included), after
// reserving min(mappings, bucket_count) dirty slots. Removals proceed in
// ascending external-id order (deterministic; any order yields the same
// membership). The first error is returned; later ids are still attempted.
func (s *DcState) removeMember(src ckf.SourceKey) error {
	lin := s.lineage[src]
	if lin.Len() == 0 {
		return nil
	}
	if err := s.reserveDirty(min(uint64(lin.Len()), s.format.BucketCount)); err != nil {
		return err
	}
	exts := slices.AppendSeq(make([]ckf.ExternalBlockHash, 0, lin.Len()), lin.Keys())
	slices.Sort(exts)
	var first error
	for _, e := range exts {
		if _, err := s.remove(src, e); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// EventOutcome is DcCkfEventOutcome.
type EventOutcome struct {
	// FirstError is the first error of the event, or nil. A
	// ErrCapacityExhausted error means lineage/ownership were committed and
	// only physical admission was omitted; any other error from a store
	// means nothing was committed.
	FirstError error
	// Publication is the drained batch at a publication boundary: nil for
	// none, otherwise non-empty absolute images (caller-owned).
	Publication []ckf.BucketImage
	// UnknownRemovals counts removal ids unknown to the source.
	UnknownRemovals int
	// PublicationBoundary reports pending_events >= publish_every_n_events
	// after this event (a drain happened, even if it yielded no batch).
	PublicationBoundary bool
}
