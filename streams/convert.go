package streams

import (
	"fmt"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/schemas"
)

// The conversions between the wire identities of package schemas and the algorithm's
// identities of package ckf. They are field-for-field: the wire adds only PoolId's
// identity_version, which must be ckf.PoolIdentityVersion.

// ErrIdentityVersion reports a wire pool id of an identity version this build does not know.
type ErrIdentityVersion struct{ Version uint32 }

func (e *ErrIdentityVersion) Error() string {
	return fmt.Sprintf("pool identity_version %d is not supported (want %d)", e.Version, ckf.PoolIdentityVersion)
}

// The enum mappings of this package are tables indexed by the source enum, so a value added
// to the source is either mapped in the table or visibly left out; convert_test.go walks every
// named value of every source enum (from its generated String method) and fails until the
// new value is mapped.

// Lookup returns table[v], or outside for a value beyond the table.
func Lookup[V ~uint8, T any](table []T, v V, outside T) T {
	if int(v) < len(table) {
		return table[v]
	}
	return outside
}

// wireSources is the wire form of each identity source.
var wireSources = [...]schemas.IdentitySource{
	ckf.IdentityDefaultDerived: schemas.SourceDefaultDerived,
	ckf.IdentityExplicit:       schemas.SourceExplicit,
}

// ckfSources is the identity source of each wire symbol.
var ckfSources = [...]ckf.IdentitySource{
	schemas.SourceDefaultDerived: ckf.IdentityDefaultDerived,
	schemas.SourceExplicit:       ckf.IdentityExplicit,
}

// wireSource and ckfSource map a value outside the enum (which validation elsewhere rejects)
// to DefaultDerived, the conservative reading of identity material.
func wireSource(s ckf.IdentitySource) schemas.IdentitySource {
	return Lookup(wireSources[:], s, schemas.SourceDefaultDerived)
}

func ckfSource(s schemas.IdentitySource) ckf.IdentitySource {
	return Lookup(ckfSources[:], s, ckf.IdentityDefaultDerived)
}

// WireDomain converts an indexer domain to its wire form.
func WireDomain(d ckf.IndexerDomainID) schemas.IndexerDomainID {
	return schemas.IndexerDomainID{
		CacheSemantics: schemas.DigestIdentity{Digest: schemas.Digest128(d.CacheSemantics.Digest), Source: wireSource(d.CacheSemantics.Source)},
		RoutingScope:   schemas.DigestIdentity{Digest: schemas.Digest128(d.RoutingScope.Digest), Source: wireSource(d.RoutingScope.Source)},
	}
}

// WirePool converts a pool id to its wire form (identity version 1).
func WirePool(p ckf.PoolID) schemas.PoolID {
	return schemas.PoolID{IdentityVersion: ckf.PoolIdentityVersion, Domain: WireDomain(p.Domain), DcID: uint64(p.Dc)}
}

// CkfPool converts a wire pool id, rejecting unknown identity versions.
func CkfPool(p schemas.PoolID) (ckf.PoolID, error) {
	if p.IdentityVersion != ckf.PoolIdentityVersion {
		return ckf.PoolID{}, &ErrIdentityVersion{Version: p.IdentityVersion}
	}
	d := p.Domain
	return ckf.PoolID{
		Domain: ckf.IndexerDomainID{
			CacheSemantics: ckf.CacheSemanticsID{Digest: ckf.Digest128(d.CacheSemantics.Digest), Source: ckfSource(d.CacheSemantics.Source)},
			RoutingScope:   ckf.RoutingScopeID{Digest: ckf.Digest128(d.RoutingScope.Digest), Source: ckfSource(d.RoutingScope.Source)},
		},
		Dc: ckf.DcID(p.DcID),
	}, nil
}

// WireIdentity converts a producer identity to its wire form.
func WireIdentity(id ckf.ProducerIdentity) schemas.ProducerIdentity {
	f := id.Format
	return schemas.ProducerIdentity{
		Pool:             WirePool(id.Pool),
		Incarnation:      id.Incarnation,
		LayoutGeneration: id.LayoutGeneration,
		Format: schemas.CkfFormat{Version: f.Version, Seed: f.Seed, BucketCount: f.BucketCount,
			FingerprintBits: f.FingerprintBits, SlotsPerBucket: f.SlotsPerBucket},
	}
}

// CkfIdentity converts a wire producer identity.
func CkfIdentity(id schemas.ProducerIdentity) (ckf.ProducerIdentity, error) {
	pool, err := CkfPool(id.Pool)
	if err != nil {
		return ckf.ProducerIdentity{}, err
	}
	f := id.Format
	return ckf.ProducerIdentity{
		Pool:             pool,
		Incarnation:      id.Incarnation,
		LayoutGeneration: id.LayoutGeneration,
		Format: ckf.FormatIdentity{Version: f.Version, Seed: f.Seed, BucketCount: f.BucketCount,
			FingerprintBits: f.FingerprintBits, SlotsPerBucket: f.SlotsPerBucket},
	}, nil
}
