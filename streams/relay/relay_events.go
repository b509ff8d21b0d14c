package relay

import (
	"fmt"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/ckf/producer"
	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/ckf-stream/ckf-stream/streams"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"
)

// unknownTier and unknownResidency stand for wire values this build does not know. They are
// outside the defined constants on purpose: an unknown tier is not the Device tier (such an
// event is not primary and is ignored, as for any other non-device tier), and an unknown
// residency domain fails closed in DcState (UnsupportedResidencyDomain, no state change).
// unknownResidencyWire is what KvEventOf writes for a residency domain without a wire form.
const (
	unknownTier          producer.StorageTier     = 0xFF
	unknownResidency     producer.ResidencyDomain = 0xFF
	unknownResidencyWire                          = "unknown"
)

// The KV-event enum mappings, one table per direction (see streams.Lookup).
var (
	producerTiers = [...]producer.StorageTier{
		schemas.TierUnknown:    unknownTier,
		schemas.TierDevice:     producer.StorageTierDevice,
		schemas.TierHostPinned: producer.StorageTierHostPinned,
		schemas.TierDisk:       producer.StorageTierDisk,
		schemas.TierExternal:   producer.StorageTierExternal,
	}
	wireTiers = [...]schemas.StorageTier{
		producer.StorageTierDevice:     schemas.TierDevice,
		producer.StorageTierHostPinned: schemas.TierHostPinned,
		producer.StorageTierDisk:       schemas.TierDisk,
		producer.StorageTierExternal:   schemas.TierExternal,
	}
	// producerResidencies is keyed by the wire strings with a defined meaning; any other
	// present string is unknownResidency.
	producerResidencies = map[string]producer.ResidencyDomain{
		schemas.ResidencyWorker:     producer.ResidencyWorker,
		schemas.ResidencyCacheOwner: producer.ResidencyCacheOwner,
	}
	wireResidencies = [...]schemas.Optional[string]{
		producer.ResidencyUnspecified: {},
		producer.ResidencyWorker:      schemas.Some(schemas.ResidencyWorker),
		producer.ResidencyCacheOwner:  schemas.Some(schemas.ResidencyCacheOwner),
	}
	producerKinds = [...]producer.KvEventKind{
		schemas.KvStoredEvent:  producer.KvEventStored,
		schemas.KvRemovedEvent: producer.KvEventRemoved,
		schemas.KvClearedEvent: producer.KvEventCleared,
	}
	wireKinds = [...]schemas.KvEventKind{
		producer.KvEventStored:  schemas.KvStoredEvent,
		producer.KvEventRemoved: schemas.KvRemovedEvent,
		producer.KvEventCleared: schemas.KvClearedEvent,
	}
)

// RouterEventOf converts a decoded KV event to the producer's RouterEvent. It never fails:
// values the producer must reject (an unknown residency domain, an unknown kind) are carried
// so that DcState.ApplyEvent rejects them with the spec's outcome.
func RouterEventOf(ev *schemas.KvEvent) producer.RouterEvent {
	var re producer.RouterEvent
	RouterEventInto(ev, &re)
	return re
}

// RouterEventInto is RouterEventOf writing into *re and reusing the capacity of its block slices
// (the relay, and the worker stage's replica, convert every KV record into one RouterEvent;
// neither producer.DcState nor ckf/workers retains an event's slices). An event without blocks
// may get an empty non-nil slice where RouterEventOf gives nil.
func RouterEventInto(ev *schemas.KvEvent, re *producer.RouterEvent) {
	*re = producer.RouterEvent{WorkerID: ckf.WorkerID(ev.WorkerID), StorageTier: streams.Lookup(producerTiers[:], ev.StorageTier, unknownTier),
		Event: producer.KvCacheEvent{Stored: producer.StoreData{Blocks: re.Event.Stored.Blocks[:0]}, Removed: re.Event.Removed[:0]}}
	if d, ok := ev.ResidencyDomain.Get(); ok {
		re.Residency = unknownResidency
		if r, known := producerResidencies[d]; known {
			re.Residency = r
		}
	}
	e := &re.Event
	e.EventID, e.DpRank = ev.EventID, ckf.DpRank(ev.DpRank)
	e.Kind = streams.Lookup(producerKinds[:], ev.Kind, 0)
	switch e.Kind {
	case producer.KvEventStored:
		s := &ev.Stored
		if p, ok := s.ParentHash.Get(); ok {
			e.Stored.HasParent, e.Stored.ParentHash = true, ckf.ExternalBlockHash(p)
		}
		if p, ok := s.StartPosition.Get(); ok {
			e.Stored.HasStartPosition, e.Stored.StartPosition = true, p
		}
		e.Stored.SharedCacheEligible = s.SharedCacheEligible
		for _, b := range s.Blocks {
			e.Stored.Blocks = append(e.Stored.Blocks, producer.StoredBlock{BlockHash: ckf.ExternalBlockHash(b.BlockHash), TokensHash: ckf.LocalBlockHash(b.TokensHash)})
		}
	case producer.KvEventRemoved:
		for _, h := range ev.Removed.BlockHashes {
			e.Removed = append(e.Removed, ckf.ExternalBlockHash(h))
		}
	}
}

// KvEventOf converts a RouterEvent to its wire form (engines, load generators and tests).
// Unknown tiers and residency values have no wire form and become TierUnknown and the
// string "unknown".
func KvEventOf(re producer.RouterEvent) schemas.KvEvent {
	ev := schemas.KvEvent{WorkerID: uint64(re.WorkerID), DpRank: uint32(re.Event.DpRank), EventID: re.Event.EventID,
		StorageTier:     streams.Lookup(wireTiers[:], re.StorageTier, schemas.TierUnknown),
		ResidencyDomain: streams.Lookup(wireResidencies[:], re.Residency, schemas.Some(unknownResidencyWire)),
		Kind:            streams.Lookup(wireKinds[:], re.Event.Kind, 0),
	}
	switch ev.Kind {
	case schemas.KvStoredEvent:
		s := &re.Event.Stored
		if s.HasParent {
			ev.Stored.ParentHash = schemas.Some(uint64(s.ParentHash))
		}
		if s.HasStartPosition {
			ev.Stored.StartPosition = schemas.Some(s.StartPosition)
		}
		ev.Stored.SharedCacheEligible = s.SharedCacheEligible
		ev.Stored.Blocks = make([]schemas.KvBlock, len(s.Blocks))
		for i, b := range s.Blocks {
			ev.Stored.Blocks[i] = schemas.KvBlock{BlockHash: uint64(b.BlockHash), TokensHash: uint64(b.TokensHash)}
		}
	case schemas.KvRemovedEvent:
		ev.Removed.BlockHashes = make([]uint64, len(re.Event.Removed))
		for i, h := range re.Event.Removed {
			ev.Removed.BlockHashes[i] = uint64(h)
		}
	}
	return ev
}

// RelayEventError is the reason a KV record was rejected, as it is logged and dead-lettered:
// the event's error with the failure point and action of the spec's disposition table.
type RelayEventError struct {
	Err         error
	Point       ckf.FailurePoint
	Disposition ckf.FailureDisposition
}

// Error implements error.
func (e *RelayEventError) Error() string {
	return fmt.Sprintf("%v (failure point %v, action %v)", e.Err, e.Point, e.Disposition.Action)
}

// Unwrap returns the event error.
func (e *RelayEventError) Unwrap() error { return e.Err }

// applyRecord decodes and applies one KV record to the live state, publishing the state's
// publication batch when the event closed one (not during the replay: the start-up snapshot
// carries the replay's state). live says whether the record is new (at or past its partition's
// end listed when this incarnation started): it counts as a live event, and only live
// rejections are dead-lettered; replayed ones were dead-lettered by the incarnation that first
// read them. A live record read before every partition finished its replay is applied before
// the start-up snapshot, which carries it. A non-nil error is fatal to Run.
func (rl *relayLoop) applyRecord(rec *kgo.Record, live bool) error {
	r := rl.r
	if !rl.replaying && !rl.state.HasPendingPublication() {
		rl.frozenAsOf = rl.appliedAsOf() // the window opens: records written meanwhile carry this
	}
	rl.asOf.Applied(rec.Partition, rec.Offset, rec.Timestamp)
	if err := r.codec.DecodeKvEventInto(rec.Value, &rl.kvEvent); err != nil {
		r.c.undecodable.add(1)
		rl.reject(rec, live, schemas.DeadLetterReasonOf(err), "undecodable KV event: "+err.Error(), err)
		return nil
	}
	rl.noteBlockSize(&rl.kvEvent)
	cleared := rl.kvEvent.Kind == schemas.KvClearedEvent
	if cleared {
		rl.noteClear(rec, &rl.kvEvent)
	}
	rl.noteSource(rec.Timestamp, cleared)
	RouterEventInto(&rl.kvEvent, &rl.routerEvent)
	out := rl.state.ApplyEvent(rl.routerEvent)
	if live {
		rl.pollLive++
	} else {
		rl.pollReplayed++
	}
	if out.UnknownRemovals > 0 {
		r.c.unknownRemovals.add(uint64(out.UnknownRemovals))
	}
	if out.FirstError != nil {
		if err := rl.onEventError(rec, live, out.FirstError); err != nil {
			return err
		}
	}
	if !rl.replaying {
		if len(out.Publication) > 0 {
			rl.publish(out.Publication)
		}
		if out.PublicationBoundary {
			rl.pendingSince = zeroTime
		} else if rl.pendingSince.IsZero() && rl.state.HasPendingPublication() {
			rl.pendingSince = rl.now()
		}
	}
	return nil
}

// countApplied adds the events applied since the last call to the relay's counters and metrics:
// once per poll rather than per event (Stats and the metrics move at poll boundaries).
func (rl *relayLoop) countApplied() {
	r := rl.r
	if n := rl.pollLive; n > 0 {
		r.c.events.add(n)
	}
	if n := rl.pollReplayed; n > 0 {
		r.c.replayed.add(n)
	}
	rl.pollLive, rl.pollReplayed = 0, 0
}

// onEventError follows the event error's disposition (producer §8.4, §9).
func (rl *relayLoop) onEventError(rec *kgo.Record, live bool, err error) error {
	r := rl.r
	point, _ := ckf.FailurePointOfEventError(err)
	d := ckf.DispositionOf(point)
	if d.Action == ckf.ActionContinueCapacityOmission {
		// The event committed exactly (lineage and ownership); only physical admission was
		// omitted. Nothing is retired and nothing is dead-lettered: count the omissions.
		tel := rl.state.Telemetry()
		if n := tel.CapacityFailures - rl.lastCapacity; n > 0 {
			r.c.capacity.add(n)
		}
		rl.lastCapacity = tel.CapacityFailures
		return nil
	}
	ee := &RelayEventError{Err: err, Point: point, Disposition: d}
	r.c.reject(point)
	rl.reject(rec, live, schemas.DeadLetterRejected, ee.Error(), ee)
	if d.Action == ckf.ActionFenceAndRebuildProducer {
		return fmt.Errorf("%w: %w", ErrProducerInvariant, ee)
	}
	return nil
}

// reject dead-letters a live record and logs it; replayed records are only logged at debug.
func (rl *relayLoop) reject(rec *kgo.Record, live bool, code schemas.DeadLetterReason, reason string, err error) {
	r := rl.r
	if !live {
		r.log.Debug("replayed KV event rejected again", zap.Int32("partition", rec.Partition), zap.Int64("offset", rec.Offset), zap.Error(err))
		return
	}
	r.log.Warn("KV event rejected", zap.Int32("partition", rec.Partition), zap.Int64("offset", rec.Offset), zap.Error(err))
	if rl.out == nil {
		return
	}
	rl.out.DeadLetter(rec, code, reason, "relay")
	r.c.deadLetters.add(1)
}
