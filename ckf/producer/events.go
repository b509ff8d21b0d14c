package producer

import (
	"strconv"

	"github.com/ckf-stream/ckf-stream/ckf"
)

// String methods of the enums below are generated from the constants' line
// comments, which are the names logs, errors and metric labels show; run
// make generate after changing a constant.
//go:generate go run golang.org/x/tools/cmd/stringer@v0.52.0 -type=StorageTier,ResidencyDomain,KvEventKind -linecomment -output=events_string.go

// Go model of Dynamo's RouterEvent / KvCacheEvent (producer §7.2–§7.3,
// consumer §10). Plain values; the producer never retains them.

// StorageTier is the storage medium an event refers to. Only
// StorageTierDevice events (and clears) reach the filter. The zero value is
// Device, the tier of legacy events that carry none.
type StorageTier uint8

const (
	// StorageTierDevice: accelerator memory (the primary tier).
	StorageTierDevice StorageTier = iota // device
	// StorageTierHostPinned: pinned host memory.
	StorageTierHostPinned // host_pinned
	// StorageTierDisk: local disk.
	StorageTierDisk // disk
	// StorageTierExternal: external/remote storage.
	StorageTierExternal // external
)

// ResidencyDomain is the event's (wire) residency domain. The exact wire
// strings are UNKNOWN in the spec; ParseResidencyDomain accepts "",
// "worker" and "cache_owner" (our choice), which are also the String names
// (the empty line comment of ResidencyUnspecified is its empty name). Any value other than the three
// constants is an unknown encoding and fails closed with
// ErrUnsupportedResidencyDomain.
type ResidencyDomain uint8

const (
	// ResidencyUnspecified: absent on the wire (legacy "all"), treated as
	// Worker.
	ResidencyUnspecified ResidencyDomain = iota //
	// ResidencyWorker: the worker's own residency (primary).
	ResidencyWorker // worker
	// ResidencyCacheOwner: a shared cache owner's residency (never primary;
	// invalid for Device-tier stores/removes).
	ResidencyCacheOwner // cache_owner
)

// Known reports whether r is one of the three defined encodings.
func (r ResidencyDomain) Known() bool { return r <= ResidencyCacheOwner }

// ParseResidencyDomain decodes a wire string; unknown strings return
// ErrUnsupportedResidencyDomain.
func ParseResidencyDomain(s string) (ResidencyDomain, error) {
	switch s {
	case "":
		return ResidencyUnspecified, nil
	case "worker":
		return ResidencyWorker, nil
	case "cache_owner":
		return ResidencyCacheOwner, nil
	}
	return 0, ckf.NewEventError(ckf.EventUnsupportedResidencyDomain, strconv.Quote(s))
}

// KvEventKind selects the payload of a KvCacheEvent.
type KvEventKind uint8

const (
	// KvEventStored: blocks were stored (KvCacheEvent.Stored).
	KvEventStored KvEventKind = iota + 1 // stored
	// KvEventRemoved: blocks were removed (KvCacheEvent.Removed).
	KvEventRemoved // removed
	// KvEventCleared: the (worker, dp rank) member dropped everything.
	KvEventCleared // cleared
)

// StoredBlock is one stored block: the engine's external id and the token
// content hash. Multimodal extra info is ignored by the CKF and not
// modelled.
type StoredBlock struct {
	BlockHash  ckf.ExternalBlockHash
	TokensHash ckf.LocalBlockHash
}

// StoreData is KvCacheStoreData. ParentHash is meaningful only when
// HasParent; StartPosition only when HasStartPosition.
type StoreData struct {
	HasParent           bool
	ParentHash          ckf.ExternalBlockHash
	HasStartPosition    bool
	StartPosition       uint32
	Blocks              []StoredBlock
	SharedCacheEligible bool
}

// KvCacheEvent is one engine event for (worker, DpRank). Exactly the
// payload selected by Kind is meaningful; any other Kind is rejected with
// ErrInvalidBlockSequence.
type KvCacheEvent struct {
	EventID uint64
	DpRank  ckf.DpRank
	Kind    KvEventKind
	Stored  StoreData
	Removed []ckf.ExternalBlockHash
}

// RouterEvent is a KV event addressed to one worker.
type RouterEvent struct {
	WorkerID    ckf.WorkerID
	StorageTier StorageTier
	Residency   ResidencyDomain
	Event       KvCacheEvent
}

// Source returns the event's source key (worker, dp rank).
func (e RouterEvent) Source() ckf.SourceKey {
	return ckf.SourceKey{Worker: e.WorkerID, Rank: e.Event.DpRank}
}

// targetsPrimary is the residency gate (producer §7.2 step 1). It returns
// (primary, nil), or (false, ErrUnsupportedResidencyDomain) when the domain
// cannot be resolved:
//
//   - any unknown encoding fails closed, clears included (our choice: the
//     encoding is parsed before the kind is considered);
//   - Cleared: CacheOwner -> not primary; Worker/unspecified -> primary;
//     the storage tier is not checked;
//   - other events: CacheOwner on the Device tier is invalid; otherwise
//     primary iff the tier is Device.
func (e RouterEvent) targetsPrimary() (bool, error) {
	if !e.Residency.Known() {
		return false, ckf.NewEventError(ckf.EventUnsupportedResidencyDomain, e.Residency.String())
	}
	if e.Event.Kind == KvEventCleared {
		return e.Residency != ResidencyCacheOwner, nil
	}
	if e.Residency == ResidencyCacheOwner {
		if e.StorageTier == StorageTierDevice {
			return false, ckf.NewEventError(ckf.EventUnsupportedResidencyDomain, "cache_owner residency on the device tier")
		}
		return false, nil
	}
	return e.StorageTier == StorageTierDevice, nil
}
