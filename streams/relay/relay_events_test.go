package relay

import (
	"reflect"
	"strings"
	"testing"

	"github.com/ckf-stream/ckf-stream/ckf/producer"
	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/ckf-stream/ckf-stream/streams"
	"github.com/ckf-stream/ckf-stream/streams/internal/enumtest"
)

// The enum mapping tests walk every value the source enum's generated String method names, so a
// constant added to a source enum (and generated) fails them until its table maps it.

func TestStorageTierMapsEveryValue(t *testing.T) {
	for _, tier := range enumtest.NamedValues[producer.StorageTier](t) {
		w := streams.Lookup(wireTiers[:], tier, schemas.TierUnknown)
		if int(tier) >= len(wireTiers) || w.String() != enumtest.WireName(tier) {
			t.Errorf("producer %v: wire %v", tier, w)
		}
		if back := RouterEventOf(&schemas.KvEvent{StorageTier: w}).StorageTier; back != tier {
			t.Errorf("producer %v: back from the wire as %v", tier, back)
		}
	}
	for _, w := range enumtest.NamedValues[schemas.StorageTier](t) {
		got := RouterEventOf(&schemas.KvEvent{StorageTier: w}).StorageTier
		if int(w) >= len(producerTiers) || w == schemas.TierUnknown && got != unknownTier || w != schemas.TierUnknown && enumtest.WireName(got) != w.String() {
			t.Errorf("wire %v: producer %v", w, got)
		}
	}
	if got := KvEventOf(producer.RouterEvent{StorageTier: unknownTier}).StorageTier; got != schemas.TierUnknown {
		t.Errorf("an unknown tier is written as %v", got)
	}
}

func TestResidencyMapsEveryValue(t *testing.T) {
	for _, r := range enumtest.NamedValues[producer.ResidencyDomain](t) {
		w := KvEventOf(producer.RouterEvent{Residency: r}).ResidencyDomain
		if int(r) >= len(wireResidencies) || w.Valid != (r != producer.ResidencyUnspecified) || w.Value != r.String() {
			t.Errorf("producer %q: wire %+v", r, w)
		}
		if back := RouterEventOf(&schemas.KvEvent{ResidencyDomain: w}).Residency; back != r {
			t.Errorf("producer %q: back from the wire as %v", r, back)
		}
		// The relay's table and the producer's own parser agree on every wire string.
		if parsed, err := producer.ParseResidencyDomain(w.Value); err != nil || parsed != r {
			t.Errorf("producer %q: ParseResidencyDomain(%q) = %v, %v", r, w.Value, parsed, err)
		}
	}
	for _, d := range []string{schemas.ResidencyWorker, schemas.ResidencyCacheOwner} {
		if r := RouterEventOf(&schemas.KvEvent{ResidencyDomain: schemas.Some(d)}).Residency; r.String() != d {
			t.Errorf("wire %q: producer %v", d, r)
		}
	}
	for _, d := range []string{"", "Worker", unknownResidencyWire} {
		if r := RouterEventOf(&schemas.KvEvent{ResidencyDomain: schemas.Some(d)}).Residency; r != unknownResidency {
			t.Errorf("wire %q: producer %v, want the unknown residency", d, r)
		}
	}
	if w := KvEventOf(producer.RouterEvent{Residency: unknownResidency}).ResidencyDomain; w != schemas.Some(unknownResidencyWire) {
		t.Errorf("an unknown residency is written as %+v", w)
	}
}

func TestKvEventKindMapsEveryValue(t *testing.T) {
	for _, k := range enumtest.NamedValues[producer.KvEventKind](t) {
		w := KvEventOf(producer.RouterEvent{Event: producer.KvCacheEvent{Kind: k}}).Kind
		if int(k) >= len(wireKinds) || w.String() != "Kv"+strings.ToUpper(k.String()[:1])+k.String()[1:] {
			t.Errorf("producer %v: wire %v", k, w)
		}
		if back := RouterEventOf(&schemas.KvEvent{Kind: w}).Event.Kind; back != k {
			t.Errorf("producer %v: back from the wire as %v", k, back)
		}
	}
	for _, w := range enumtest.NamedValues[schemas.KvEventKind](t) {
		if k := RouterEventOf(&schemas.KvEvent{Kind: w}).Event.Kind; int(w) >= len(producerKinds) || k == 0 {
			t.Errorf("wire %v: producer %v", w, k)
		}
	}
}

// TestRouterEventIntoReusesWithoutLeaking converts stores, removals and clears, in every order,
// into one reused RouterEvent (as the relay does): each result equals RouterEventOf's, so no
// block of a longer earlier event and no field of another kind survives into a later one; and
// once its slices have grown, a conversion allocates nothing.
func TestRouterEventIntoReusesWithoutLeaking(t *testing.T) {
	long := make([]schemas.KvBlock, 24)
	for i := range long {
		long[i] = schemas.KvBlock{BlockHash: uint64(100 + i), TokensHash: uint64(7 * i)}
	}
	events := []schemas.KvEvent{
		{WorkerID: 3, DpRank: 2, EventID: 9, StorageTier: schemas.TierDevice, Kind: schemas.KvStoredEvent, Stored: schemas.KvStored{
			ParentHash: schemas.Some[uint64](5), StartPosition: schemas.Some[uint32](16), Blocks: long, SharedCacheEligible: true}},
		{WorkerID: 4, StorageTier: schemas.TierDevice, ResidencyDomain: schemas.Some(schemas.ResidencyWorker), Kind: schemas.KvStoredEvent,
			Stored: schemas.KvStored{Blocks: long[:2]}},
		{WorkerID: 5, StorageTier: schemas.TierHostPinned, Kind: schemas.KvRemovedEvent, Removed: schemas.KvRemoved{BlockHashes: []uint64{1, 2, 3}}},
		{WorkerID: 6, StorageTier: schemas.TierDevice, Kind: schemas.KvClearedEvent},
	}
	norm := func(re producer.RouterEvent) producer.RouterEvent {
		if len(re.Event.Stored.Blocks) == 0 {
			re.Event.Stored.Blocks = nil
		}
		if len(re.Event.Removed) == 0 {
			re.Event.Removed = nil
		}
		return re
	}
	var re producer.RouterEvent
	for _, a := range events {
		for _, b := range events {
			for _, ev := range []schemas.KvEvent{a, b} {
				RouterEventInto(&ev, &re)
				if want := norm(RouterEventOf(&ev)); !reflect.DeepEqual(norm(re), want) {
					t.Fatalf("after a %v event, a %v event converts to\n %+v\nwant\n %+v", a.Kind, ev.Kind, re, want)
				}
			}
		}
	}
	allocs := testing.AllocsPerRun(50, func() {
		for i := range events {
			RouterEventInto(&events[i], &re)
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per %d conversions, want 0", allocs, len(events))
	}
}
