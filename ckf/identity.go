package ckf

import (
	"cmp"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// String methods of the enums below are generated from the constants' line
// comments, which are the names logs, errors and metric labels show; run
// make generate after changing a constant.
//go:generate go run golang.org/x/tools/cmd/stringer@v0.52.0 -type=IdentitySource -linecomment -output=identity_string.go

// WorkerID identifies one engine worker (Dynamo's WorkerId, a u64).
type WorkerID uint64

// DpRank is the data-parallel rank of a worker (0 = DP disabled or the first
// rank).
type DpRank uint32

// SourceKey is the producer's source / member key (Dynamo's
// WorkerWithDpRank). Every lineage entry, ownership count and lifecycle
// operation of the exact producer is keyed by it. The total order is
// lexicographic (Worker, Rank); see Less and Compare.
type SourceKey struct {
	Worker WorkerID
	Rank   DpRank
}

// Compare orders source keys lexicographically by (Worker, Rank) and returns
// -1, 0 or +1.
func (k SourceKey) Compare(o SourceKey) int {
	if c := cmp.Compare(k.Worker, o.Worker); c != 0 {
		return c
	}
	return cmp.Compare(k.Rank, o.Rank)
}

// Less reports whether k sorts before o in (Worker, Rank) order.
func (k SourceKey) Less(o SourceKey) bool { return k.Compare(o) < 0 }

// String renders "<worker>:<rank>" in decimal. The form is diagnostic only;
// the spec does not define one (a choice, producer §1.1).
func (k SourceKey) String() string {
	return strconv.FormatUint(uint64(k.Worker), 10) + ":" + strconv.FormatUint(uint64(k.Rank), 10)
}

// IdentitySource says whether a logical identity digest was derived from
// defaults or from an explicitly supplied map.
//
// The zero value is IdentityDefaultDerived: a zero-valued identity therefore
// "relies on defaults", which is the conservative reading. The WAN proto's
// UNSPECIFIED=0 value has no Go counterpart here; a decoder must map proto 1
// to IdentityDefaultDerived and 2 to IdentityExplicit and reject 0.
type IdentitySource uint8

const (
	// IdentityDefaultDerived: the digest was computed from default material.
	IdentityDefaultDerived IdentitySource = iota // default_derived
	// IdentityExplicit: the digest was computed from an explicit map.
	IdentityExplicit // explicit
)

// Valid reports whether s is one of the two defined sources.
func (s IdentitySource) Valid() bool { return s <= IdentityExplicit }

// MarshalText encodes the snake_case name; an invalid value is an error.
func (s IdentitySource) MarshalText() ([]byte, error) {
	if !s.Valid() {
		return nil, fmt.Errorf("ckf: invalid identity source %d", uint8(s))
	}
	return []byte(s.String()), nil
}

// UnmarshalText accepts exactly "default_derived" or "explicit".
func (s *IdentitySource) UnmarshalText(b []byte) error {
	switch string(b) {
	case "default_derived":
		*s = IdentityDefaultDerived
	case "explicit":
		*s = IdentityExplicit
	default:
		return fmt.Errorf("ckf: unknown identity source %q", b)
	}
	return nil
}

// Digest128 is a 16-byte identity digest. How the digest is cut from the
// BLAKE3 output of the identity material is UNKNOWN in the spec and is done
// outside this package: ckf only builds the material (see
// CacheSemanticsMaterial, RoutingScopeMaterial) and compares digests.
type Digest128 [16]byte

// String renders the digest as 32 lowercase hex characters.
func (d Digest128) String() string { return hex.EncodeToString(d[:]) }

// Compare orders digests bytewise.
func (d Digest128) Compare(o Digest128) int {
	for i := range d {
		if c := cmp.Compare(d[i], o[i]); c != 0 {
			return c
		}
	}
	return 0
}

// CacheSemanticsID identifies the cache semantics (block size, hash format,
// selected material) a pool's hashes were computed under. Equality is over
// both the digest and the source.
type CacheSemanticsID struct {
	Digest Digest128
	Source IdentitySource
}

// String renders the digest only (32 lowercase hex), as Dynamo's Display.
func (id CacheSemanticsID) String() string { return id.Digest.String() }

// Compare orders by (Digest, Source).
func (id CacheSemanticsID) Compare(o CacheSemanticsID) int {
	if c := id.Digest.Compare(o.Digest); c != 0 {
		return c
	}
	return cmp.Compare(id.Source, o.Source)
}

// RoutingScopeID identifies the routing scope of a pool. Same shape and
// rendering as CacheSemanticsID.
type RoutingScopeID struct {
	Digest Digest128
	Source IdentitySource
}

// String renders the digest only (32 lowercase hex).
func (id RoutingScopeID) String() string { return id.Digest.String() }

// Compare orders by (Digest, Source).
func (id RoutingScopeID) Compare(o RoutingScopeID) int {
	if c := id.Digest.Compare(o.Digest); c != 0 {
		return c
	}
	return cmp.Compare(id.Source, o.Source)
}

// IndexerDomainID is the logical domain of one global indexer: exactly one
// cache semantics and one routing scope.
type IndexerDomainID struct {
	CacheSemantics CacheSemanticsID
	RoutingScope   RoutingScopeID
}

// String renders "<semantics>:<routing>".
func (id IndexerDomainID) String() string {
	return id.CacheSemantics.String() + ":" + id.RoutingScope.String()
}

// ErrInvalidIndexerDomain matches (errors.Is) every error of ParseIndexerDomainID.
var ErrInvalidIndexerDomain = errors.New("ckf: invalid indexer domain")

// ParseIndexerDomainID parses an indexer domain as String renders it: the cache-semantics digest
// and the routing-scope digest, 32 hex digits each (either case), joined by one colon. source is
// the identity source of both digests, which the text form does not carry. Anything else is an
// error wrapping ErrInvalidIndexerDomain, and the zero IndexerDomainID.
func ParseIndexerDomainID(s string, source IdentitySource) (IndexerDomainID, error) {
	if !source.Valid() {
		return IndexerDomainID{}, fmt.Errorf("%w: invalid identity source %d", ErrInvalidIndexerDomain, uint8(source))
	}
	sem, route, ok := strings.Cut(s, ":")
	var d [2]Digest128
	for i, part := range []string{sem, route} {
		if !ok || len(part) != 2*len(d[i]) {
			return IndexerDomainID{}, fmt.Errorf("%w: %q is not <32 hex digits>:<32 hex digits>", ErrInvalidIndexerDomain, s)
		}
		if _, err := hex.Decode(d[i][:], []byte(part)); err != nil {
			return IndexerDomainID{}, fmt.Errorf("%w: %q is not <32 hex digits>:<32 hex digits>: %w", ErrInvalidIndexerDomain, s, err)
		}
	}
	return IndexerDomainID{
		CacheSemantics: CacheSemanticsID{Digest: d[0], Source: source},
		RoutingScope:   RoutingScopeID{Digest: d[1], Source: source},
	}, nil
}

// ReliesOnDefaults reports whether either digest was default-derived.
func (id IndexerDomainID) ReliesOnDefaults() bool {
	return id.CacheSemantics.Source == IdentityDefaultDerived || id.RoutingScope.Source == IdentityDefaultDerived
}

// Compare orders by (CacheSemantics, RoutingScope).
func (id IndexerDomainID) Compare(o IndexerDomainID) int {
	if c := id.CacheSemantics.Compare(o.CacheSemantics); c != 0 {
		return c
	}
	return id.RoutingScope.Compare(o.RoutingScope)
}

// DcID is the stable logical data-centre id. It is stable across restarts
// and never derived from an endpoint identity.
type DcID uint64

// String renders 16 zero-padded lowercase hex digits.
func (d DcID) String() string { return fmt.Sprintf("%016x", uint64(d)) }

// PoolIdentityVersion is the identity_version the WAN proto carries in
// KvPoolId. PoolID itself has no such field (as in Dynamo).
const PoolIdentityVersion uint32 = 1

// PoolID is one DC-local producer plus its publication stream.
type PoolID struct {
	Domain IndexerDomainID
	Dc     DcID
}

// String renders "<domain>/<dc>".
func (p PoolID) String() string { return p.Domain.String() + "/" + p.Dc.String() }

// Compare orders by (Domain, Dc).
func (p PoolID) Compare(o PoolID) int {
	if c := p.Domain.Compare(o.Domain); c != 0 {
		return c
	}
	return cmp.Compare(p.Dc, o.Dc)
}

// ConsumerInstanceID identifies one consumer (global indexer) instance.
type ConsumerInstanceID uint64

// Format constants of DcCkfFormatIdentity (producer §1.4).
const (
	// FormatVersion1 is the only defined format_version.
	FormatVersion1 uint16 = 1
	// FormatFingerprintBits is the fingerprint width of every format.
	FormatFingerprintBits uint8 = 16
	// FormatSlotsPerBucket is the slot count of every bucket.
	FormatSlotsPerBucket uint8 = 4
)

// FormatIdentity is DcCkfFormatIdentity: the physical layout a producer
// publishes and a consumer must match exactly (equality = all five fields).
type FormatIdentity struct {
	Version         uint16
	Seed            uint64
	BucketCount     uint64
	FingerprintBits uint8
	SlotsPerBucket  uint8
}

// NewFormatIdentity returns the version-1 format (16-bit fingerprints, four
// slots) for the given seed and bucket count. It does not validate.
func NewFormatIdentity(seed, bucketCount uint64) FormatIdentity {
	return FormatIdentity{
		Version:         FormatVersion1,
		Seed:            seed,
		BucketCount:     bucketCount,
		FingerprintBits: FormatFingerprintBits,
		SlotsPerBucket:  FormatSlotsPerBucket,
	}
}

// Validate checks the fixed fields (version 1, 16 bits, 4 slots) and that
// BucketCount is a power of two >= 2. It does not apply the WAN cap
// MaxWireBucketCount (the producer config does not cap, producer §5.2); use
// ValidateWire for that.
func (f FormatIdentity) Validate() error {
	switch {
	case f.Version != FormatVersion1:
		return fmt.Errorf("ckf: unsupported format version %d", f.Version)
	case f.FingerprintBits != FormatFingerprintBits:
		return fmt.Errorf("ckf: unsupported fingerprint bits %d", f.FingerprintBits)
	case f.SlotsPerBucket != FormatSlotsPerBucket:
		return fmt.Errorf("ckf: unsupported slots per bucket %d", f.SlotsPerBucket)
	case f.BucketCount < 2 || f.BucketCount&(f.BucketCount-1) != 0:
		return fmt.Errorf("ckf: bucket count %d is not a power of two >= 2", f.BucketCount)
	}
	return nil
}

// ValidateWire is Validate plus the WAN cap BucketCount <= MaxWireBucketCount.
func (f FormatIdentity) ValidateWire() error {
	if err := f.Validate(); err != nil {
		return err
	}
	if f.BucketCount > MaxWireBucketCount {
		return fmt.Errorf("ckf: bucket count %d exceeds wire maximum %d", f.BucketCount, uint64(MaxWireBucketCount))
	}
	return nil
}

// ProducerIdentity is one physical CKF generation of a pool. Equality is
// over every field, including both digests and their sources. A new
// generation means a new sequence space and a new snapshot.
//
// How Incarnation and LayoutGeneration are chosen is UNKNOWN in the spec;
// the wire validator rejects LayoutGeneration == 0 (see ValidateWire).
type ProducerIdentity struct {
	Pool             PoolID
	Incarnation      uint64
	LayoutGeneration uint64
	Format           FormatIdentity
}

// String renders "<pool>#<incarnation>.<generation>" (diagnostic form; the
// spec defines none).
func (p ProducerIdentity) String() string {
	return p.Pool.String() + "#" + strconv.FormatUint(p.Incarnation, 10) + "." + strconv.FormatUint(p.LayoutGeneration, 10)
}

// ValidateWire applies the wire validator's rules: LayoutGeneration != 0 and
// a valid wire format.
func (p ProducerIdentity) ValidateWire() error {
	if p.LayoutGeneration == 0 {
		return fmt.Errorf("ckf: producer layout generation must be non-zero")
	}
	return p.Format.ValidateWire()
}

// LaneCount is CKF_LANE_COUNT = DC_COUNT: the reference's number of consumer
// lanes (DC pools) in one transposed table, whose lane masks are uint16. It
// is the lane count of every API that takes or returns a uint16 mask or a
// [LaneCount] array, and the lane count of a manifest built by
// index.NewManifest.
const LaneCount = 16

// MaxLanes is the largest lane count of one transposed table beyond the
// reference (consumer §16): a table configured for n lanes (1..MaxLanes,
// index.NewManifestN) has rows of about n words, and its wide APIs take and
// return uint64 lane masks and [MaxLanes] arrays.
const MaxLanes = 64

// LaneLease is the consumer-minted right to feed one physical lane. A new
// lease on a lane must carry a strictly greater Epoch than the previous one
// on that lane (enforced by the consumer). Leases never travel on the WAN.
type LaneLease struct {
	Consumer ConsumerInstanceID
	Lane     uint8
	Epoch    uint64
}

// Valid reports whether Lane < LaneCount.
func (l LaneLease) Valid() bool { return l.Lane < LaneCount }

// String renders "<consumer>/<lane>@<epoch>" in decimal (diagnostic form).
func (l LaneLease) String() string {
	return strconv.FormatUint(uint64(l.Consumer), 10) + "/" + strconv.Itoa(int(l.Lane)) + "@" + strconv.FormatUint(l.Epoch, 10)
}
