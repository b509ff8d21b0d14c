package producer

import (
	"errors"
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

// ApplyEvent is apply_event (producer §7.2).
//
//  1. Residency gate: a non-primary event returns the zero outcome and
//     changes nothing (no counters); an unresolvable residency returns
//     ErrUnsupportedResidencyDomain with no state change.
//  2. pending_events += 1.
//  3. Stored: store path; k > 0 omissions add k to capacity_failures and
//     report ErrCapacityExhausted; ParentBlockNotFound bumps
//     parent_not_found. Removed: each id in order, unknown ids counted,
//     successful siblings stay applied, first error retained. Cleared:
//     drop only this (worker, dp rank).
//  4. unknown_removals telemetry += the event's unknown count.
//  5. If pending_events >= publish_every_n_events, drain (may yield none).
//
// An event with an undefined Kind is rejected with ErrInvalidBlockSequence
// before step 2 (our choice; the Rust enum cannot express it).
func (s *DcState) ApplyEvent(ev RouterEvent) EventOutcome {
	var out EventOutcome
	primary, err := ev.targetsPrimary()
	if err != nil {
		out.FirstError = err
		return out
	}
	if !primary {
		return out
	}
	kind := ev.Event.Kind
	if kind != KvEventStored && kind != KvEventRemoved && kind != KvEventCleared {
		out.FirstError = ckf.NewEventError(ckf.EventInvalidBlockSequence, "unknown event kind")
		return out
	}
	s.win.pending = satAdd(s.win.pending, 1)
	src := ev.Source()
	switch kind {
	case KvEventStored:
		k, err := s.storeBatch(src, &ev.Event.Stored)
		if err != nil {
			if errors.Is(err, ckf.ErrParentBlockNotFound) {
				s.tel.ParentNotFound = satAdd(s.tel.ParentNotFound, 1)
			}
			out.FirstError = err
		} else if k > 0 {
			s.tel.CapacityFailures = satAdd(s.tel.CapacityFailures, k)
			out.FirstError = ckf.NewEventError(ckf.EventCapacityExhausted, "bounded relocation omitted a fingerprint")
		}
	case KvEventRemoved:
		s.prefetchRemovals(src, ev.Event.Removed)
		for _, id := range ev.Event.Removed {
			ok, err := s.remove(src, id)
			switch {
			case err != nil:
				if out.FirstError == nil {
					out.FirstError = err
				}
			case !ok:
				out.UnknownRemovals++
			}
		}
	case KvEventCleared:
		out.FirstError = s.removeMember(src)
	}
	s.tel.UnknownRemovals = satAdd(s.tel.UnknownRemovals, uint64(out.UnknownRemovals))
	if s.win.pending >= s.cfg.PublishEveryNEvents {
		out.PublicationBoundary = true
		out.Publication = s.drain()
	}
	return out
}
