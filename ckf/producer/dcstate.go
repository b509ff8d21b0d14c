package producer

import (
	"encoding/binary"
	"math"
	"slices"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/ckf/internal/u64map"
)

// DcState is DcCkfState (producer §7, G3): the exact per-DC producer.
//
// It keeps, per source (worker, dp rank), the engine vocabulary
// external id -> canonical hash (the lineage), and per canonical hash the
// number of lineage mappings that point at it plus whether its fingerprint
// is physically in the filter. Invariants (checked by the property tests):
//
//   - a source entry exists only while it has at least one mapping;
//   - owners(c) == number of mappings (across all sources, aliases included)
//     whose canonical is c, and an ownership entry exists iff owners > 0;
//   - a canonical contributes exactly one physical fingerprint while
//     resident; extra owners only change the count;
//   - residentCount == number of resident entries;
//   - lineage and ownership commit even when the physical admission is
//     omitted for capacity (resident == false).
//
// Failure behaviour: every validation, overflow or reservation error of an
// event is raised before its first mutation, so an error other than
// ErrCapacityExhausted means nothing from that event was committed (see
// ApplyEvent for per-id removals).
//
// Concurrency: a DcState is owned by one goroutine (the pool actor); it has
// no internal synchronisation. Everything it hands out (batches, snapshot
// words) is the caller's: no other result shares it and the state never
// writes it again.
type DcState struct {
	cfg           ckf.CkfConfig
	format        ckf.FormatIdentity
	filter        *PackedFilter
	lineage       map[ckf.SourceKey]*lineageMap // never holds an empty lineage
	lastSrc       ckf.SourceKey                 // lineageOf's one-entry cache: lastLin is
	lastLin       *lineageMap                   // lineage[lastSrc] when non-nil
	owners        ownerMap
	residentCount uint64
	contributions uint64
	win           pubWindow
	tel           Telemetry
	storeBuf      storeScratch // the store path's working memory (dcstate_store.go)

	// delegate, when set, observes canonical creation/removal (G3
	// delegate variant). Never called by the off-side rebuild state.
	delegate CanonicalDelegate

	// failReserve, when set (tests only), makes the reservation at site
	// fail, simulating allocation failure (Go cannot observe a failed
	// allocation; see reserve).
	failReserve func(site reserveSite) bool

	// generalStoreOnly, when set (tests only), sends one-block stores through the general
	// store path instead of storeOne, so that tests can compare the two.
	generalStoreOnly bool
}

// CanonicalDelegate observes the set of canonical hashes with at least one
// owner (the G3 "delegate" variant, KvIndexerDelegate): OnCreate when a
// canonical goes from 0 to >0 owners, OnRemove when it goes back to 0.
// Residency is not reported (an omitted canonical is still created).
// Calls happen synchronously on the goroutine that owns the DcState, after
// the corresponding change is committed; the delegate must not call back
// into the DcState.
type CanonicalDelegate interface {
	OnCreate(c ckf.CanonicalHash)
	OnRemove(c ckf.CanonicalHash)
}

// NewDcStateWithDelegate is NewDcState with a delegate (nil = none).
func NewDcStateWithDelegate(cfg ckf.CkfConfig, d CanonicalDelegate) (*DcState, error) {
	s, err := NewDcState(cfg)
	if err != nil {
		return nil, err
	}
	s.delegate = d
	return s, nil
}

// lineageMap is one source's lineage, external id -> canonical hash; ownerMap is the ownership
// records, canonical hash -> ownerEntry. Both are open-addressing tables (ckf/internal/u64map):
// at 10^5–10^7 entries a Go map lookup costs two or three cache misses, one of these one.
type (
	lineageMap = u64map.Map[ckf.ExternalBlockHash, ckf.CanonicalHash]
	ownerMap   = u64map.Map[ckf.CanonicalHash, ownerEntry]
)

// ownerEntry is the ownership record of one canonical hash: its owner count and whether its
// fingerprint is in the filter. The count is kept as four little-endian bytes so that the record
// is 5 bytes with no alignment, and an ownership slot (8-byte key included) 13 bytes instead of
// 16: at 10^7 canonical hashes that is 30 MB less for the relay (ckf/internal/u64map).
type ownerEntry struct {
	ownerBytes [4]byte
	resident   bool
}

// newOwnerEntry returns the record of owners owners and the given residency.
func newOwnerEntry(owners uint32, resident bool) ownerEntry {
	var e ownerEntry
	e.setOwners(owners)
	e.resident = resident
	return e
}

// owners is the record's owner count.
func (e *ownerEntry) owners() uint32 { return binary.LittleEndian.Uint32(e.ownerBytes[:]) }

// setOwners sets the record's owner count.
func (e *ownerEntry) setOwners(n uint32) { binary.LittleEndian.PutUint32(e.ownerBytes[:], n) }

// Telemetry is the producer's saturating diagnostic counters (producer §7.1).
type Telemetry struct {
	UnknownRemovals        uint64
	ParentNotFound         uint64
	CapacityFailures       uint64
	PhysicalTouches        uint64
	DistinctTouchedBuckets uint64
	EmittedImages          uint64
	NetRevertedBuckets     uint64
	// UnrotatedCycles counts relocation cycles a drain undid in the words
	// so that its batch could be ordered without a transient false
	// negative (see publicationOrder); not part of producer §7.1.
	UnrotatedCycles uint64
}

// satAdd adds saturating at MaxUint64.
func satAdd(a, b uint64) uint64 {
	if s := a + b; s >= a {
		return s
	}
	return math.MaxUint64
}

// reserveSite names a pre-commit reservation point.
type reserveSite uint8

const (
	siteLineage reserveSite = iota + 1
	siteDirty
	siteSnapshot
	siteRebuild
)

// NewDcState validates cfg and builds an empty producer: zero words, RNG at
// LaneRngSeed(seed, 0), materialization enabled. Errors are *BuildError:
// config errors, and ErrCapacityOverflow for a bucket count above 2^32 or
// a byte size that overflows. Go cannot report a failed allocation (the
// runtime aborts), so the producer config, which applies no cap (producer §5.2),
// should be bounded by the caller; the WAN cap MaxWireBucketCount (2^24
// buckets, 128 MiB of words) is reached at about 53.7 M expected blocks.
func NewDcState(cfg ckf.CkfConfig) (*DcState, error) {
	n, err := cfg.BucketCount()
	if err != nil {
		return nil, err
	}
	addr, err := ckf.NewAddressing(n, cfg.Seed)
	if err != nil {
		return nil, &ckf.BuildError{Kind: ckf.BuildCapacityOverflow}
	}
	return newDcStateWith(cfg, addr)
}

func newDcStateWith(cfg ckf.CkfConfig, addr ckf.Addressing) (*DcState, error) {
	f, err := NewPackedFilter(addr, cfg.MaxKicks)
	if err != nil {
		return nil, err
	}
	n := addr.BucketCount()
	return &DcState{
		cfg:     cfg,
		format:  addr.Format(),
		filter:  f,
		lineage: make(map[ckf.SourceKey]*lineageMap),
		win:     newPubWindow(n),
	}, nil
}

// reserve performs a pre-commit reservation of n units at site. Go aborts
// the process on a real allocation failure, so the only observable
// failures are an impossible size (n beyond what fits in memory) and the
// test hook; both return ErrAllocationFailed before any mutation.
func (s *DcState) reserve(site reserveSite, n uint64) error {
	if s.failReserve != nil && s.failReserve(site) {
		return ckf.NewEventError(ckf.EventAllocationFailed, "reservation refused")
	}
	if n > math.MaxInt/16 {
		return ckf.NewEventError(ckf.EventAllocationFailed, "reservation too large")
	}
	return nil
}

// reserveDirty reserves room for n more dirty buckets, capped at the
// buckets not yet dirty.
func (s *DcState) reserveDirty(n uint64) error {
	free := s.format.BucketCount - uint64(len(s.win.dirty))
	n = min(n, free)
	if err := s.reserve(siteDirty, n); err != nil {
		return err
	}
	s.win.grow(int(n))
	return nil
}

// Config returns the validated configuration.
func (s *DcState) Config() ckf.CkfConfig { return s.cfg }

// Format returns the producer's FormatIdentity.
func (s *DcState) Format() ckf.FormatIdentity { return s.format }

// Addressing returns the producer's addressing.
func (s *DcState) Addressing() ckf.Addressing { return s.filter.addr }

// BucketCount returns the number of buckets.
func (s *DcState) BucketCount() uint64 { return s.format.BucketCount }

// Word returns bucket b's current word.
func (s *DcState) Word(b uint64) uint64 { return s.filter.words[b] }

// CopyWords returns a copy of all bucket words in bucket order.
func (s *DcState) CopyWords() []uint64 { return slices.Clone(s.filter.words) }

// Contains probes both candidate buckets of canonical (false positives
// possible; never a false negative for a resident canonical). It does not
// allocate.
func (s *DcState) Contains(canonical ckf.CanonicalHash) bool {
	return s.filter.Contains(uint64(canonical))
}

// Telemetry returns the counters.
func (s *DcState) Telemetry() Telemetry { return s.tel }

// LifetimeCapacityOmissions returns telemetry.capacity_failures.
func (s *DcState) LifetimeCapacityOmissions() uint64 { return s.tel.CapacityFailures }

// ResidentCount returns the number of resident canonical hashes (=
// occupied slots).
func (s *DcState) ResidentCount() uint64 { return s.residentCount }

// OmittedCount returns the number of owned canonical hashes that are not
// resident: blocks the DC holds whose fingerprints a capacity omission kept
// out of the filter and that no removal or re-store has settled since. A
// query misses them, so it is the count of what answers under-report now
// (LifetimeCapacityOmissions, by contrast, only grows).
func (s *DcState) OmittedCount() uint64 { return uint64(s.owners.Len()) - s.residentCount }

// Owners returns canonical's owner count and residency (0, false if
// absent).
func (s *DcState) Owners(canonical ckf.CanonicalHash) (owners uint32, resident bool) {
	e, _ := s.owners.Get(canonical)
	return e.owners(), e.resident
}

// Lookup returns the canonical hash source maps ext to.
func (s *DcState) Lookup(source ckf.SourceKey, ext ckf.ExternalBlockHash) (ckf.CanonicalHash, bool) {
	return s.lineage[source].Get(ext)
}

// MemberBlockCount returns the number of mappings of source.
func (s *DcState) MemberBlockCount(source ckf.SourceKey) int { return s.lineage[source].Len() }

// MemberCount is one source and its mapping count.
type MemberCount struct {
	Source ckf.SourceKey
	Blocks int
}

// MemberCounts returns every source with its mapping count, sorted by
// source.
func (s *DcState) MemberCounts() []MemberCount {
	out := make([]MemberCount, 0, len(s.lineage))
	for k, m := range s.lineage {
		out = append(out, MemberCount{Source: k, Blocks: m.Len()})
	}
	slices.SortFunc(out, func(a, b MemberCount) int { return a.Source.Compare(b.Source) })
	return out
}

// sortedSources returns the source keys in ascending order.
func (s *DcState) sortedSources() []ckf.SourceKey {
	keys := make([]ckf.SourceKey, 0, len(s.lineage))
	for k := range s.lineage {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, ckf.SourceKey.Compare)
	return keys
}

// lineageOf returns src's lineage, or nil when src has none. Consecutive events mostly come
// from the same source, so the last answer is kept: a hit spares the Go map lookup of a struct
// key. Whoever deletes a lineage from s.lineage resets lastLin (a replaced or restored state
// starts from its own, consistent fields).
func (s *DcState) lineageOf(src ckf.SourceKey) *lineageMap {
	if s.lastLin != nil && s.lastSrc == src {
		return s.lastLin
	}
	lin := s.lineage[src]
	if lin != nil {
		s.lastSrc, s.lastLin = src, lin
	}
	return lin
}

// lineageBytes is the memory of every source's lineage table.
func (s *DcState) lineageBytes() uint64 {
	var n uint64
	for _, lin := range s.lineage {
		n += lin.Bytes()
	}
	return n
}

// DcStats is the diagnostic stats view (producer §7.8).
type DcStats struct {
	// Aggregation.
	MemberCount         uint64
	ContributionCount   uint64
	UniqueBlockCount    uint64
	UnknownRemovals     uint64
	ParentNotFound      uint64
	CapacityFailures    uint64
	OccupiedBucketCount uint64 // full scan of non-zero words
	OccupiedSlotCount   uint64 // = resident count
	// Publication.
	PendingEvents          uint64
	PhysicalTouches        uint64
	DistinctTouchedBuckets uint64
	EmittedImages          uint64
	NetRevertedBuckets     uint64
	// Memory. LineageBytes and OwnerBytes are the tables' allocated slots
	// (capacity, not entries).
	LineageEntries           uint64
	OwnerEntries             uint64
	LineageBytes             uint64
	OwnerBytes               uint64
	FilterBytes              uint64
	DirtyTrackingBytes       uint64
	InsertionScratchCapacity uint64
}

// Stats computes the stats (O(bucket_count) for OccupiedBucketCount).
func (s *DcState) Stats() DcStats {
	return DcStats{
		MemberCount:              uint64(len(s.lineage)),
		ContributionCount:        s.contributions,
		UniqueBlockCount:         uint64(s.owners.Len()),
		UnknownRemovals:          s.tel.UnknownRemovals,
		ParentNotFound:           s.tel.ParentNotFound,
		CapacityFailures:         s.tel.CapacityFailures,
		OccupiedBucketCount:      s.filter.OccupiedBuckets(),
		OccupiedSlotCount:        s.residentCount,
		PendingEvents:            s.win.pending,
		PhysicalTouches:          s.tel.PhysicalTouches,
		DistinctTouchedBuckets:   s.tel.DistinctTouchedBuckets,
		EmittedImages:            s.tel.EmittedImages,
		NetRevertedBuckets:       s.tel.NetRevertedBuckets,
		LineageEntries:           s.contributions,
		OwnerEntries:             uint64(s.owners.Len()),
		LineageBytes:             s.lineageBytes(),
		OwnerBytes:               s.owners.Bytes(),
		FilterBytes:              8 * s.format.BucketCount,
		DirtyTrackingBytes:       s.win.bytes(),
		InsertionScratchCapacity: uint64(cap(s.filter.touched)),
	}
}
