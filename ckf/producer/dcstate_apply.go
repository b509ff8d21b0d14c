package producer

// The producer's entry point: one engine event, dispatched to the store path (dcstate_store.go),
// the removal path or a source's clear (dcstate_remove.go), and the
// publication window it closes (dcstate_dirty.go).

import (
	"errors"

	"github.com/ckf-stream/ckf-stream/ckf"
)

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
