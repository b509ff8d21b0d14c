package index

import (
	"math/bits"
	"strconv"

	"github.com/ckf-stream/ckf-stream/ckf"
)

// Manifest is GlobalCkfManifest (consumer §2.1): the immutable description of
// one global indexer — its consumer instance, its single indexer domain, the
// CKF format every lane must publish, its lane count (the width of the
// transposed table: ckf.LaneCount from NewManifest, 1..ckf.MaxLanes from
// NewManifestN, consumer §16) and the fixed physical lane → PoolID map.
//
// Invariants established by NewManifest and never changed afterwards:
// every configured lane's pool belongs to Domain; no PoolID and no DcID
// appears on two lanes; at least one lane is configured. A new producer
// generation of the same pool reuses the same lane; the lane ↔ pool mapping
// never changes for the life of the indexer.
type Manifest struct {
	consumer   ckf.ConsumerInstanceID
	domain     ckf.IndexerDomainID
	format     ckf.FormatIdentity
	lanes      []ckf.PoolID // len = lane count; shared by copies, never written after NewManifestN
	configured uint64
}

// ManifestLanes is the lane → pool input of NewManifest: entry l is the pool
// of physical lane l, or nil when lane l is not configured (Rust's
// [Option<PoolId>; 16], extended to ckf.MaxLanes entries, consumer §16, so
// that one lane map serves a deployment of any lane count).
type ManifestLanes [ckf.MaxLanes]*ckf.PoolID

// Count returns the lane count of a table that holds every configured lane
// of ml: the highest configured lane + 1, 0 when none is configured.
func (ml *ManifestLanes) Count() int {
	for l := len(ml) - 1; l >= 0; l-- {
		if ml[l] != nil {
			return l + 1
		}
	}
	return 0
}

// ManifestWarningKind enumerates the non-fatal findings of NewManifest.
type ManifestWarningKind uint8

const (
	// WarnDefaultDerivedDomainAcrossDCs: more than one DC is configured and
	// at least one digest of the indexer domain is DefaultDerived, so the
	// DCs are joined on a default-derived identity. Allowed (consumer §2.1 rule 5);
	// the reference logs a warning.
	WarnDefaultDerivedDomainAcrossDCs ManifestWarningKind = iota + 1
)

// ManifestWarning is a non-fatal finding of NewManifest, returned as data
// (package ckf has no logger).
type ManifestWarning struct {
	Kind ManifestWarningKind
	// Domain is the manifest's indexer domain.
	Domain ckf.IndexerDomainID
	// ConfiguredDCs is the number of configured lanes (= distinct DCs).
	ConfiguredDCs int
}

// String renders the warning for a log line.
func (w ManifestWarning) String() string {
	switch w.Kind {
	case WarnDefaultDerivedDomainAcrossDCs:
		return "ckf: indexer domain " + w.Domain.String() + " relies on default-derived identity across " +
			strconv.Itoa(w.ConfiguredDCs) + " DCs"
	}
	return "ckf: manifest warning " + strconv.Itoa(int(w.Kind))
}

// ManifestErrorKind enumerates the manifest build errors (consumer §2.1).
type ManifestErrorKind uint8

const (
	// ManifestMixedIndexerDomain: a lane's pool belongs to another domain
	// (Lane set).
	ManifestMixedIndexerDomain ManifestErrorKind = iota + 1
	// ManifestDuplicatePool: a PoolID appears on two lanes (Pool set).
	ManifestDuplicatePool
	// ManifestDuplicateDcLane: a DcID appears on two lanes (Dc set). With a
	// single domain this is implied by DuplicatePool; kept as a guard.
	ManifestDuplicateDcLane
	// ManifestNoConfiguredLanes: no lane is configured.
	ManifestNoConfiguredLanes
	// ManifestInvalidLaneCount: NewManifestN was given a lane count outside
	// 1..ckf.MaxLanes (Lanes set; consumer §16).
	ManifestInvalidLaneCount
)

// ManifestError is a GlobalCkfManifest build error. errors.Is matches the
// sentinel of the same kind (ErrMixedIndexerDomain, ErrDuplicatePool,
// ErrDuplicateDcLane, ErrNoConfiguredLanes) whatever the payload.
type ManifestError struct {
	Kind ManifestErrorKind
	Lane uint8      // MixedIndexerDomain
	Pool ckf.PoolID // DuplicatePool
	Dc   ckf.DcID   // DuplicateDcLane
	// Lanes is the refused lane count (InvalidLaneCount).
	Lanes int
}

// Error implements error.
func (e *ManifestError) Error() string {
	switch e.Kind {
	case ManifestMixedIndexerDomain:
		return "ckf: manifest lane " + strconv.Itoa(int(e.Lane)) + " belongs to another indexer domain"
	case ManifestDuplicatePool:
		return "ckf: manifest pool " + e.Pool.String() + " configured on two lanes"
	case ManifestDuplicateDcLane:
		return "ckf: manifest DC " + e.Dc.String() + " configured on two lanes"
	case ManifestNoConfiguredLanes:
		return "ckf: manifest has no configured lanes"
	case ManifestInvalidLaneCount:
		return "ckf: manifest lane count " + strconv.Itoa(e.Lanes) + " is not in [1," + strconv.Itoa(ckf.MaxLanes) + "]"
	}
	return "ckf: manifest error " + strconv.Itoa(int(e.Kind))
}

// Is matches any *ManifestError of the same kind.
func (e *ManifestError) Is(target error) bool {
	t, ok := target.(*ManifestError)
	return ok && t.Kind == e.Kind
}

// Sentinels for errors.Is against manifest build errors.
var (
	ErrMixedIndexerDomain error = &ManifestError{Kind: ManifestMixedIndexerDomain}
	ErrDuplicatePool      error = &ManifestError{Kind: ManifestDuplicatePool}
	ErrDuplicateDcLane    error = &ManifestError{Kind: ManifestDuplicateDcLane}
	ErrNoConfiguredLanes  error = &ManifestError{Kind: ManifestNoConfiguredLanes}
	ErrInvalidLaneCount   error = &ManifestError{Kind: ManifestInvalidLaneCount}
)

// NewManifest validates and builds a manifest. Lanes are checked in
// ascending order; for each configured lane: (1) its pool's domain must be
// domain (MixedIndexerDomain{lane}); (2) its PoolID must not have appeared
// on a lower lane (DuplicatePool{pool}); (3) its DcID must not have appeared
// (DuplicateDcLane{dc}). Then (4) at least one lane must be configured
// (NoConfiguredLanes). The first violation is returned.
//
// When more than one DC is configured and domain relies on a
// DefaultDerived digest, the manifest is still built and one
// WarnDefaultDerivedDomainAcrossDCs warning is returned (consumer §2.1 rule 5).
//
// The format is not validated here; NewGlobalIndexer validates it when it
// sizes the table.
//
// The table has 16 lanes (ckf.LaneCount) when every configured lane lies
// below 16, as every manifest built before consumer §16 had, and otherwise
// the highest configured lane + 1 (NewManifestN sizes a table to a lane count
// of its caller's choice).
func NewManifest(consumer ckf.ConsumerInstanceID, domain ckf.IndexerDomainID, format ckf.FormatIdentity, lanes ManifestLanes) (Manifest, []ManifestWarning, error) {
	return NewManifestN(consumer, domain, format, lanes[:max(ckf.LaneCount, lanes.Count())])
}

// NewManifestN is NewManifest for a table of len(lanes) lanes (consumer
// §16): entry l is the pool of physical lane l, or nil. The lane count must
// be in 1..ckf.MaxLanes, else *ManifestError InvalidLaneCount (checked
// before the lanes); the lanes are then checked as NewManifest checks them.
// The transposed table's rows follow the lane count (rows of 4 words for 4
// lanes, 64 for 64), so a deployment pays for the lanes it configures, not
// for the ceiling. NewManifest(…) is NewManifestN(…, lanes[:16]) for a lane
// map within lanes 0..15.
func NewManifestN(consumer ckf.ConsumerInstanceID, domain ckf.IndexerDomainID, format ckf.FormatIdentity, lanes []*ckf.PoolID) (Manifest, []ManifestWarning, error) {
	if len(lanes) < 1 || len(lanes) > ckf.MaxLanes {
		return Manifest{}, nil, &ManifestError{Kind: ManifestInvalidLaneCount, Lanes: len(lanes)}
	}
	m := Manifest{consumer: consumer, domain: domain, format: format, lanes: make([]ckf.PoolID, len(lanes))}
	for l, p := range lanes {
		if p == nil {
			continue
		}
		if p.Domain != domain {
			return Manifest{}, nil, &ManifestError{Kind: ManifestMixedIndexerDomain, Lane: uint8(l)}
		}
		for prev := 0; prev < l; prev++ {
			if m.configured&(1<<uint(prev)) != 0 && m.lanes[prev] == *p {
				return Manifest{}, nil, &ManifestError{Kind: ManifestDuplicatePool, Pool: *p}
			}
		}
		for prev := 0; prev < l; prev++ {
			if m.configured&(1<<uint(prev)) != 0 && m.lanes[prev].Dc == p.Dc {
				return Manifest{}, nil, &ManifestError{Kind: ManifestDuplicateDcLane, Dc: p.Dc}
			}
		}
		m.lanes[l] = *p
		m.configured |= 1 << uint(l)
	}
	if m.configured == 0 {
		return Manifest{}, nil, &ManifestError{Kind: ManifestNoConfiguredLanes}
	}
	var warnings []ManifestWarning
	if n := bits.OnesCount64(m.configured); n > 1 && domain.ReliesOnDefaults() {
		warnings = append(warnings, ManifestWarning{Kind: WarnDefaultDerivedDomainAcrossDCs, Domain: domain, ConfiguredDCs: n})
	}
	return m, warnings, nil
}

// ConsumerInstance returns the consumer instance id.
func (m Manifest) ConsumerInstance() ckf.ConsumerInstanceID { return m.consumer }

// IndexerDomain returns the single indexer domain.
func (m Manifest) IndexerDomain() ckf.IndexerDomainID { return m.domain }

// Format returns the CKF format every lane must match.
func (m Manifest) Format() ckf.FormatIdentity { return m.format }

// LaneCount returns the number of lanes of the manifest's table:
// ckf.LaneCount for a manifest of NewManifest, len(lanes) for one of
// NewManifestN (consumer §16).
func (m Manifest) LaneCount() int { return len(m.lanes) }

// ConfiguredLanes returns the mask of configured lanes among lanes 0..15
// (bit l ⇔ lane l has a pool): the whole mask of a manifest of at most 16
// lanes. A manifest of more lanes reports the rest through
// ConfiguredLanes64 only.
func (m Manifest) ConfiguredLanes() uint16 { return uint16(m.configured) }

// ConfiguredLanes64 returns the mask of configured lanes of every lane
// (consumer §16).
func (m Manifest) ConfiguredLanes64() uint64 { return m.configured }

// PoolOf returns the pool of lane, ok == false when lane is not below the
// lane count or is not configured.
func (m Manifest) PoolOf(lane uint8) (ckf.PoolID, bool) {
	if int(lane) >= len(m.lanes) || m.configured&(1<<lane) == 0 {
		return ckf.PoolID{}, false
	}
	return m.lanes[lane], true
}

// LaneOf returns the lane of pool, ok == false when pool is not configured.
func (m Manifest) LaneOf(pool ckf.PoolID) (uint8, bool) {
	for c := m.configured; c != 0; c &= c - 1 {
		l := bits.TrailingZeros64(c)
		if m.lanes[l] == pool {
			return uint8(l), true
		}
	}
	return 0, false
}
