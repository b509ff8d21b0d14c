package schemas

import (
	"encoding/hex"
	"strconv"
)

// String methods of the enums below are generated from the constants' line
// comments, which are the Avro symbols (or, for union branches, record
// names); run make generate after changing a constant.
//go:generate go run golang.org/x/tools/cmd/stringer@v0.52.0 -type=IdentitySource -linecomment -output=identity_string.go

// MaxBucketCount is the largest bucket_count a decoder accepts (2^40
// buckets, 8 TiB of words). It bounds what a consumer may be asked to
// allocate for a lane; real deployments stay far below it.
const MaxBucketCount = 1 << 40

// IdentitySource says where identity material came from (Avro enum
// IdentitySource).
type IdentitySource uint8

const (
	// SourceDefaultDerived: the material was derived from runtime defaults.
	SourceDefaultDerived IdentitySource = iota // DEFAULT_DERIVED
	// SourceExplicit: an operator supplied an explicit map.
	SourceExplicit // EXPLICIT
)

var identitySourceSymbols = enumSymbols[IdentitySource]()

// Digest128 is a 16-byte identity digest (Avro fixed Digest128).
type Digest128 [16]byte

// String returns the 32 lowercase hex digits of the digest.
func (d Digest128) String() string { return hex.EncodeToString(d[:]) }

// DigestIdentity is a digest plus the source of its material (Avro record
// DigestIdentity). Both are part of identity equality.
type DigestIdentity struct {
	Digest Digest128
	Source IdentitySource
}

// IndexerDomainID is the logical indexer domain (Avro record
// IndexerDomainId).
type IndexerDomainID struct {
	CacheSemantics DigestIdentity
	RoutingScope   DigestIdentity
}

// String returns "<cache_semantics hex>:<routing_scope hex>".
func (d IndexerDomainID) String() string {
	return d.CacheSemantics.Digest.String() + ":" + d.RoutingScope.Digest.String()
}

// PoolID identifies one DC-local producer and its publication stream (Avro
// record PoolId).
type PoolID struct {
	// IdentityVersion is ckf.PoolIdentityVersion for records of this namespace.
	// It travels as an Avro int, so values above 2^31-1 cannot be encoded.
	IdentityVersion uint32
	Domain          IndexerDomainID
	DcID            uint64
}

// String returns "<domain>/<dc_id as 16 lowercase hex digits>", the display
// form QueryReply.lanes[].pool carries.
func (p PoolID) String() string {
	dc := strconv.FormatUint(p.DcID, 16)
	const zeros = "0000000000000000"
	return p.Domain.String() + "/" + zeros[:16-len(dc)] + dc
}

// CkfFormat is the filter format (Avro record CkfFormat). Producer and
// consumer must agree on every field.
type CkfFormat struct {
	Version         uint16
	Seed            uint64
	BucketCount     uint64
	FingerprintBits uint8
	SlotsPerBucket  uint8
}

// ProducerIdentity is one physical CKF generation of a pool (Avro record
// ProducerIdentity). It is comparable with ==, which compares every field as
// the spec's identity equality requires.
type ProducerIdentity struct {
	Pool             PoolID
	Incarnation      uint64
	LayoutGeneration uint64
	Format           CkfFormat
}

func (p PoolID) validate(path string) error { return p.validateAt(path, "") }

// validateAt is validate for the field path+suffix; the path is joined only for an error, so
// validating a valid record (every lane record does) builds no string.
func (p PoolID) validateAt(path, suffix string) error {
	if p.IdentityVersion > maxInt32 {
		return invalid(path+suffix+".identity_version", "%d does not fit an Avro int", p.IdentityVersion)
	}
	if p.Domain.CacheSemantics.Source > SourceExplicit {
		return invalid(path+suffix+".indexer_domain.cache_semantics.source", "unknown source %d", p.Domain.CacheSemantics.Source)
	}
	if p.Domain.RoutingScope.Source > SourceExplicit {
		return invalid(path+suffix+".indexer_domain.routing_scope.source", "unknown source %d", p.Domain.RoutingScope.Source)
	}
	return nil
}

func (id *ProducerIdentity) validate(path string) error {
	if err := id.Pool.validateAt(path, ".pool"); err != nil {
		return err
	}
	if id.LayoutGeneration == 0 {
		return invalid(path+".layout_generation", "must not be 0")
	}
	bc := id.Format.BucketCount
	if bc < 2 || bc > MaxBucketCount || bc&(bc-1) != 0 {
		return invalid(path+".format.bucket_count", "%d is not a power of two in [2, 2^40]", bc)
	}
	return nil
}
