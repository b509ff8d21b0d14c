package schemas

// String methods of the enums below are generated from the constants' line
// comments, which are the Avro symbols (or, for union branches, record
// names); run make generate after changing a constant.
//go:generate go run golang.org/x/tools/cmd/stringer@v0.52.0 -type=StorageTier,KvEventKind -linecomment -output=kv_string.go

// StorageTier is where an event's blocks live (Avro enum StorageTier).
// Symbols unknown to this reader decode as TierUnknown.
type StorageTier uint8

// Storage tiers, in Avro symbol order.
const (
	TierUnknown    StorageTier = iota // UNKNOWN
	TierDevice                        // DEVICE
	TierHostPinned                    // HOST_PINNED
	TierDisk                          // DISK
	TierExternal                      // EXTERNAL
)

var storageTierSymbols = enumSymbols[StorageTier]()

// HeaderLostHistory is the record header that marks a KvCleared written in place of engine
// history the writer lost (a bridge whose engine's replay buffer no longer had the batches): its
// value is the lost range, two 8-byte big-endian sequence numbers. A relay counts such clears
// and the sources they leave degraded (LaneRecord.Sources).
const HeaderLostHistory = "ckf-bridge-lost"

// Residency domains with a defined meaning. KvEvent.ResidencyDomain carries
// any other string unchanged so the relay can fail closed on it.
const (
	ResidencyWorker     = "worker"
	ResidencyCacheOwner = "cache_owner"
)

// KvEventKind says which branch of KvEvent.data an event carries.
type KvEventKind uint8

const (
	// KvStoredEvent: KvEvent.Stored is set.
	KvStoredEvent KvEventKind = iota + 1 // KvStored
	// KvRemovedEvent: KvEvent.Removed is set.
	KvRemovedEvent // KvRemoved
	// KvClearedEvent: the event has no payload.
	KvClearedEvent // KvCleared
)

// KvEvent is one KV-cache event of an engine worker (Avro record KvEvent).
type KvEvent struct {
	WorkerID    uint64
	DpRank      uint32
	EventID     uint64
	StorageTier StorageTier
	// ResidencyDomain is absent for legacy producers.
	ResidencyDomain Optional[string]
	Kind            KvEventKind
	Stored          KvStored
	Removed         KvRemoved
}

// KvStored is a store event's payload (Avro record KvStored).
type KvStored struct {
	ParentHash          Optional[uint64]
	StartPosition       Optional[uint32]
	Blocks              []KvBlock
	SharedCacheEligible bool
	// BlockSize is the engine's tokens per block; 0 (null on the wire) when the writer does
	// not report it. A reported size is above 0 and fits a u32.
	BlockSize uint32
}

// KvBlock is one stored block (Avro record KvBlock).
type KvBlock struct {
	// BlockHash is the engine's external block hash.
	BlockHash uint64
	// TokensHash is the local block hash of the block's tokens.
	TokensHash uint64
}

// KvRemoved is a removal event's payload (Avro record KvRemoved).
type KvRemoved struct {
	BlockHashes []uint64
}

func (e *KvEvent) validate() error {
	if int(e.StorageTier) >= len(storageTierSymbols) {
		return invalid("storage_tier", "unknown tier %d", e.StorageTier)
	}
	switch e.Kind {
	case KvStoredEvent, KvRemovedEvent, KvClearedEvent:
	default:
		return invalid("data", "unknown event kind %d", e.Kind)
	}
	return nil
}
