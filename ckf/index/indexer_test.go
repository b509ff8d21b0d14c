package index

// Behaviour map of consumer §12. Each line of that list and
// the test that checks it.
//
// global.rs
//   Manifest rejects a lane from another domain and a duplicated pool ..... TestManifestRejectsMixedDomainAndDuplicatePool
//   Default-derived domains may join across DCs (mask 0b11) ................ TestManifestDefaultDerivedDomainsJoinAcrossDCs
//   Validation scratch is sized in bitmap words ............................ TestIngestorScratchSizedInBitmapWords
//   Snapshot activates; reassign clears readiness before the lease
//   changes; a query with the previously captured mask succeeds ........... TestSnapshotActivatesAndReassignClearsReadinessFirst
//   A valid delta advances the sequence and writes the word ................ TestValidDeltaAdvancesSequenceAndWritesWord
//   A stale same-lease snapshot cannot roll back an active lane ............ TestStaleSnapshotCannotRollBackActiveLane
//   An unexpected newer snapshot on an active lane deactivates, no writes .. TestNewerSnapshotOnActiveLaneDeactivatesWithoutWrites
//   Query result carries pool, lane, captured mask; empty query depth 0 .... TestQueryResultCarriesPoolLaneAndMask
//   Duplicate and stale delta sequences are ignored without writes ......... TestDuplicateAndStaleDeltasIgnoredWithoutWrites
//   A forward gap deactivates with (ConsumerLane, KnownUnchanged, D&S) ..... TestForwardGapDeactivatesWithGapDisposition
//   Inactive snapshot failure is RetrySnapshot; corrected snapshot installs  TestInactiveSnapshotFailureIsRetryableOnSameLease
//   Non-contiguous sequence deactivates .................................... TestNonContiguousSequenceDeactivates
//   Duplicate / out-of-range image indices rejected before any write ....... TestInvalidAndDuplicateImageIndicesRejectedBeforeWrite
//   Empty current-stream delta is malformed ................................ TestEmptyDeltaIsMalformed
//   Wrong identity on the current lease deactivates before writing ........ TestWrongIdentityOnCurrentLeaseDeactivatesBeforeWrite
//   Superseded lease traffic is ignored, cannot invalidate the replacement . TestSupersededLeaseTrafficIgnored
//   Malformed (wrong size) snapshot on an active lane deactivates .......... TestWrongSizeSnapshotOnActiveLaneDeactivates
//   Drain marker: higher expected detects a dropped delta; exact acks ...... TestDrainMarkerDetectsDroppedFinalDelta
//   Assignment epoch must strictly increase, also after retire ............. TestAssignmentEpochStrictlyIncreasesAcrossRetire
//   A lane can have only one ingestion owner ............................... TestLaneHasSingleOwner
//   (also: consumer §3.3 row precedence, readiness/claim release) ................... TestIngestorRowPrecedence, TestIngestorCloseReleasesLane
//
// ingestion_pool.rs (package pool, pool/pool_test.go)
//   Async delta applied before a later awaited drain (sticky lane) ......... TestPoolAsyncDeltaAppliedBeforeDrain
//   Current-stream gap → fault with GAP disposition, only that lane ........ TestPoolGapFaultDeactivatesOnlyThatLane
//   Stale assignment cannot retire a ready replacement; foreign pool
//   assignment rejected without touching the ready lane .................... TestPoolStaleAndForeignAssignmentsRejected
//   A stale active snapshot is ignored without rollback .................... TestPoolStaleActiveSnapshotIgnored
//   Inactive snapshot failure keeps the lease retryable .................... TestPoolInactiveSnapshotFailureRetryable
//   Race: retirement during paused activation cannot be undone ............. TestPoolRetireDuringPausedActivation
//   Admission epoch exhaustion fences permanently .......................... TestPoolAdmissionEpochExhaustionFences
//   Outstanding-image limit is lane-attributable and fail-closed ........... TestPoolOutstandingImageLimit
//   Race: stalled worker → lag watchdog retires at the deadline ............ TestPoolLagWatchdogRetiresStalledLane
//   Worker health tracks each failed worker ................................ TestPoolWorkerHealthTracksEachFailedWorker
//   Race: saturation retires immediately, queued tail discarded ............ TestPoolSaturationRetiresAndDiscardsTail
//   Race: injected worker panic → readiness cleared, Uncertain, WorkerFailed TestPoolWorkerPanic
//   Sticky assignment is stable for (consumer, lane) ....................... TestPoolStickyWorkerFunction
//
// adapter.rs (pool/consumer_adapter_test.go; composed with the
// producer's DcState + Publisher)
//   Actor publication plus exact drain converge (sequence 1, ready) ........ TestAdapterPublicationAndDrainConverge
//   Delivery failure fences; recovery with a new lease (epoch 2, seq 0) .... TestAdapterDeliveryFailureRecovery
//   Failed recovery (epoch exhausted) keeps admission closed ............... TestAdapterRecoveryEpochExhausted
//   Dropped final delta detected by the marker and recovered (seq 1) ....... TestAdapterDroppedFinalDeltaRecovered
//   Capacity omission does not retire the lane ............................. TestAdapterCapacityOmissionKeepsLane
//
// search.rs / tests.rs (search_test.go, probe_test.go, pool/consumer_prop_test.go)
//   Window contract on [1,1,1,0,1,1,1,1] ................................... TestSearchWindowContract
//   Exponential prefetch schedule .......................................... TestSearchExponentialPrefetchSchedule
//   Grouped binary midpoints once per level (16 lanes) ..................... TestSearchGroupedBinaryMidpointsOncePerLevel
//   Overlapping windows stay per lane, stop at first miss .................. TestSearchOverlappingWindowsStayPerLane
//   Window 8 repairs holes at offsets 2..8; beyond stays advisory .......... TestSearchWindowRepairsNearHoles
//   Fallback: repairs a clipped false pivot ................................ TestSearchFallbackRepairsClippedFalsePivot
//   Fallback: staggered cursors grouped only at equal positions ............ TestSearchFallbackStaggeredCursorsGroupedAtEqualPositions
//   Fallback: second-order provenance skipped, no inverted range ........... TestSearchFallbackSecondOrderProvenanceSkipped
//   Fallback: documented false-predecessor residual ........................ TestSearchFallbackFalsePredecessorResidual
//   Stable capacity holes keep probe counts bounded ........................ TestSearchStableHolesBoundedProbes
//   Galloping = linear on monotone membership (property) ................... TestPropSearchEqualsLinearOnMonotone
//   16-lane search = 16 single-lane searches (property) .................... TestPropSearchLanesIndependent
//   SWAR probe equals the scalar reference ................................. TestProbeRowsEqualsReference
//   Max-depth variant (optional, test-only upstream) ....................... not implemented
//   Fallback-window study (expects default 2; ignored upstream) ............ TestSearchWindowStudy (CKF_STUDY=1)
//   Fixed-window study (no fallback, expects 8) ............................ not implemented (no no-fallback variant)
//   Bucket count helper, hash/probe vectors, SWAR membership and slot
//   helpers, bounded relocation rollback, distinct hashes with the same
//   representation, store/remove churn ..................................... producer-side tests (not in this half)
//
// tests.rs (Gen C) concurrency
//   Reader never sees unknown lanes or depth > query length ............... TestStressQueriesDuringIngestion

import (
	"errors"
	"testing"

	"github.com/ckf-stream/ckf-stream/ckf"
)

// ---- fixture ---------------------------------------------------------------

const testConsumer ckf.ConsumerInstanceID = 17

func testDomainOf(src ckf.IdentitySource) ckf.IndexerDomainID {
	var d ckf.IndexerDomainID
	d.CacheSemantics.Digest[0] = 0xC5
	d.CacheSemantics.Source = src
	d.RoutingScope.Digest[0] = 0x5C
	d.RoutingScope.Source = src
	return d
}

type fixture struct {
	t      testing.TB
	domain ckf.IndexerDomainID
	format ckf.FormatIdentity
	pools  [ckf.MaxLanes]ckf.PoolID
	m      Manifest
	g      *GlobalIndexer
}

// newFixture builds an indexer of the reference's 16 lanes with lanes
// 0..lanes-1 configured (pool DC = 100+lane), the given bucket count and
// window.
func newFixture(t testing.TB, lanes int, buckets uint64, window int) *fixture {
	if lanes > fixtureWidth {
		t.Skipf("needs %d lanes, the table has %d", lanes, fixtureWidth)
	}
	return newFixtureN(t, fixtureWidth, lanes, buckets, window)
}

// fixtureWidth is the lane count of newFixture's table: the reference's 16,
// except while TestIngestorSpecCasesAtWidths reruns the spec cases at 4 and
// 64 lanes (consumer §16).
var fixtureWidth = ckf.LaneCount

// newFixtureN is newFixture for a table of width lanes (NewManifestN,
// consumer §16) with lanes 0..configured-1 configured.
func newFixtureN(t testing.TB, width, configured int, buckets uint64, window int) *fixture {
	t.Helper()
	f := &fixture{t: t, domain: testDomainOf(ckf.IdentityExplicit), format: ckf.NewFormatIdentity(ckf.DefaultSeed, buckets)}
	ml := make([]*ckf.PoolID, width)
	for l := 0; l < configured; l++ {
		f.pools[l] = ckf.PoolID{Domain: f.domain, Dc: ckf.DcID(100 + l)}
		p := f.pools[l]
		ml[l] = &p
	}
	m, _, err := NewManifestN(testConsumer, f.domain, f.format, ml)
	if err != nil {
		t.Fatal(err)
	}
	f.m = m
	g, err := NewGlobalIndexer(m, ckf.SearchConfig{VerificationWindow: window})
	if err != nil {
		t.Fatal(err)
	}
	f.g = g
	return f
}

func (f *fixture) identity(lane uint8) ckf.ProducerIdentity {
	return ckf.ProducerIdentity{Pool: f.pools[lane], Incarnation: 4, LayoutGeneration: 1, Format: f.format}
}

func (f *fixture) lease(lane uint8, epoch uint64) ckf.LaneLease {
	return ckf.LaneLease{Consumer: testConsumer, Lane: lane, Epoch: epoch}
}

func (f *fixture) snapshot(lane uint8, epoch, seq uint64, words []uint64) *ckf.Snapshot {
	if words == nil {
		words = make([]uint64, f.format.BucketCount)
	}
	return &ckf.Snapshot{Identity: f.identity(lane), Lease: f.lease(lane, epoch), Sequence: seq, Buckets: words}
}

func (f *fixture) delta(lane uint8, epoch, base, seq uint64, images ...ckf.BucketImage) *ckf.Delta {
	return &ckf.Delta{Identity: f.identity(lane), Lease: f.lease(lane, epoch), BaseSequence: base, Sequence: seq, Images: images}
}

func (f *fixture) marker(lane uint8, epoch, expected uint64) ckf.DrainMarker {
	return ckf.DrainMarker{Lease: f.lease(lane, epoch), ExpectedSequence: expected}
}

// claim claims lane and fails the test on error.
func (f *fixture) claim(lane uint8) *LaneIngestor {
	f.t.Helper()
	in, err := f.g.ClaimLane(lane)
	if err != nil {
		f.t.Fatal(err)
	}
	return in
}

// readyLane claims lane, assigns epoch and installs a snapshot at seq.
func (f *fixture) readyLane(lane uint8, epoch, seq uint64, words []uint64) *LaneIngestor {
	f.t.Helper()
	in := f.claim(lane)
	if err := in.Assign(f.identity(lane), f.lease(lane, epoch)); err != nil {
		f.t.Fatal(err)
	}
	out := in.InstallSnapshot(f.snapshot(lane, epoch, seq, words))
	if out.Kind != OutcomeSnapshotInstalled || out.Sequence != seq {
		f.t.Fatalf("install: %v", out)
	}
	return in
}

// word reads (bucket, lane).
func (f *fixture) word(b uint64, lane uint8) uint64 { return f.g.table.load(b, int(lane)) }

// insertChain places the canonical hashes of local into words (a lane
// image) with a naive cuckoo insert (no relocation: tests use sparse
// tables). It reports false if a bucket pair was full.
func insertChain(addr ckf.Addressing, words []uint64, local []uint64) bool {
	for _, h := range ckf.SequenceHashes(local) {
		if !insertHash(addr, words, h) {
			return false
		}
	}
	return true
}

func insertHash(addr ckf.Addressing, words []uint64, h uint64) bool {
	p := addr.Probe(h)
	for _, b := range []uint64{p.BucketA, p.BucketB} {
		if i, ok := ckf.Bucket(words[b]).FreeSlot(); ok {
			words[b] = uint64(ckf.Bucket(words[b]).WithSlot(i, p.Fingerprint))
			return true
		}
	}
	return false
}

// adapterConfig returns a producer config whose format equals the fixture's
// (same seed, bucket count).
func adapterConfig(t testing.TB, buckets uint64) ckf.CkfConfig {
	for n := uint64(1); ; n++ {
		if b, err := ckf.BucketCountFor(n); err == nil && b == buckets {
			return ckf.NewCkfConfig(n)
		} else if b > buckets {
			t.Fatalf("no config for %d buckets", buckets)
		}
	}
}

func mustKind(t *testing.T, got IngestOutcome, want OutcomeKind) {
	t.Helper()
	if got.Kind != want {
		t.Fatalf("outcome %v, want %v", got, want)
	}
}

func mustFault(t *testing.T, got IngestOutcome, want FaultKind) {
	t.Helper()
	if got.Kind != OutcomeLaneDeactivated || got.Fault.Kind != want {
		t.Fatalf("outcome %v, want lane_deactivated{%v}", got, want)
	}
}

// ---- manifest --------------------------------------------------------------

func TestManifestRejectsMixedDomainAndDuplicatePool(t *testing.T) {
	dom := testDomainOf(ckf.IdentityExplicit)
	other := dom
	other.RoutingScope.Digest[1] = 9
	format := ckf.NewFormatIdentity(ckf.DefaultSeed, 64)
	p0 := ckf.PoolID{Domain: dom, Dc: 1}
	foreign := ckf.PoolID{Domain: other, Dc: 2}

	_, _, err := NewManifest(testConsumer, dom, format, ManifestLanes{0: &p0, 3: &foreign})
	var me *ManifestError
	if !errors.Is(err, ErrMixedIndexerDomain) || !errors.As(err, &me) || me.Lane != 3 {
		t.Fatalf("mixed domain: %v", err)
	}
	dup := p0
	_, _, err = NewManifest(testConsumer, dom, format, ManifestLanes{0: &p0, 5: &dup})
	if !errors.Is(err, ErrDuplicatePool) || !errors.As(err, &me) || me.Pool != p0 {
		t.Fatalf("duplicate pool: %v", err)
	}
	_, _, err = NewManifest(testConsumer, dom, format, ManifestLanes{})
	if !errors.Is(err, ErrNoConfiguredLanes) {
		t.Fatalf("no lanes: %v", err)
	}
	// Lanes are checked in ascending order: the mixed-domain lane 1 is
	// reported before the duplicate on lane 2.
	_, _, err = NewManifest(testConsumer, dom, format, ManifestLanes{0: &p0, 1: &foreign, 2: &dup})
	if !errors.Is(err, ErrMixedIndexerDomain) {
		t.Fatalf("order: %v", err)
	}
	m, warns, err := NewManifest(testConsumer, dom, format, ManifestLanes{0: &p0, 7: {Domain: dom, Dc: 8}})
	if err != nil || len(warns) != 0 || m.ConfiguredLanes() != 0b1000_0001 {
		t.Fatalf("valid explicit manifest: %v %v %b", err, warns, m.ConfiguredLanes())
	}
	if l, ok := m.LaneOf(ckf.PoolID{Domain: dom, Dc: 8}); !ok || l != 7 {
		t.Fatal("LaneOf")
	}
}

func TestManifestDefaultDerivedDomainsJoinAcrossDCs(t *testing.T) {
	dom := testDomainOf(ckf.IdentityExplicit)
	dom.RoutingScope.Source = ckf.IdentityDefaultDerived
	format := ckf.NewFormatIdentity(ckf.DefaultSeed, 64)
	a, b := ckf.PoolID{Domain: dom, Dc: 1}, ckf.PoolID{Domain: dom, Dc: 2}
	m, warns, err := NewManifest(testConsumer, dom, format, ManifestLanes{0: &a, 1: &b})
	if err != nil {
		t.Fatal(err)
	}
	if m.ConfiguredLanes() != 0b11 {
		t.Fatalf("configured %b", m.ConfiguredLanes())
	}
	if len(warns) != 1 || warns[0].Kind != WarnDefaultDerivedDomainAcrossDCs || warns[0].ConfiguredDCs != 2 {
		t.Fatalf("warnings %v", warns)
	}
	// One DC on a default-derived domain: no warning.
	if _, warns, _ := NewManifest(testConsumer, dom, format, ManifestLanes{0: &a}); len(warns) != 0 {
		t.Fatalf("single DC warned: %v", warns)
	}
}

// ---- indexer and claiming ----------------------------------------------------

func TestNewGlobalIndexerValidatesWindowAndFormat(t *testing.T) {
	f := newFixture(t, 1, 64, 2)
	for _, w := range []int{0, 9, -3} {
		if _, err := NewGlobalIndexer(f.m, ckf.SearchConfig{VerificationWindow: w}); !errors.Is(err, ckf.ErrBuildInvalidVerificationWindow) {
			t.Fatalf("window %d: %v", w, err)
		}
	}
	if f.g.ReadyLanes() != 0 || f.g.ClaimedLanes() != 0 {
		t.Fatal("masks must start at 0")
	}
	bad := f.m
	bad.format.BucketCount = 48
	if _, err := NewGlobalIndexer(bad, ckf.DefaultSearchConfig()); err == nil {
		t.Fatal("non-power-of-two bucket count accepted")
	}
}

// A closed ingestor no longer owns its lane: it refuses a new assignment and
// every other input sees it unassigned, so it never writes the table or the
// ready bit again, even while the lane has a new owner.
func TestClosedIngestorNeverWrites(t *testing.T) {
	f := newFixture(t, 1, 64, 2)
	words := make([]uint64, 64)
	words[3] = 7
	old := f.readyLane(0, 1, 5, words)
	old.Close()
	if f.g.ReadyLanes() != 0 || f.g.ClaimedLanes() != 0 {
		t.Fatalf("after Close: ready %b claimed %b", f.g.ReadyLanes(), f.g.ClaimedLanes())
	}
	owner := f.readyLane(0, 1, 9, make([]uint64, 64)) // the lane's new owner
	if err := old.Assign(f.identity(0), f.lease(0, 2)); !errors.Is(err, ErrIngestorClosed) {
		t.Fatalf("Assign on a closed ingestor: %v", err)
	}
	if out := old.InstallSnapshot(f.snapshot(0, 2, 10, words)); out.Kind != OutcomeIgnoredForeignLease {
		t.Fatalf("snapshot on a closed ingestor: %v", out)
	}
	if out := old.ApplyDelta(f.delta(0, 1, 5, 6, ckf.BucketImage{Bucket: 4, Value: 9})); out.Kind != OutcomeIgnoredForeignLease {
		t.Fatalf("delta on a closed ingestor: %v", out)
	}
	if f.word(3, 0) != 0 || f.word(4, 0) != 0 || f.g.ReadyLanes() != 1 || !owner.Ready() {
		t.Fatal("a closed ingestor wrote the table or the ready bit")
	}
}

func TestLaneHasSingleOwner(t *testing.T) {
	f := newFixture(t, 2, 64, 2)
	in := f.claim(0)
	if _, err := f.g.ClaimLane(0); !errors.Is(err, ErrLaneAlreadyClaimed) {
		t.Fatalf("second claim: %v", err)
	}
	if _, err := f.g.ClaimLane(16); !errors.Is(err, ErrInvalidLane) {
		t.Fatalf("lane 16: %v", err)
	}
	if _, err := f.g.ClaimLane(5); !errors.Is(err, ErrUnconfiguredLane) {
		t.Fatalf("unconfigured: %v", err)
	}
	if f.g.ClaimedLanes() != 1 {
		t.Fatalf("claimed %b", f.g.ClaimedLanes())
	}
	in.Close()
	if f.g.ClaimedLanes() != 0 {
		t.Fatal("close must release the claim")
	}
	in2 := f.claim(0) // released: claimable again
	in2.Close()
}

func TestIngestorCloseReleasesLane(t *testing.T) {
	f := newFixture(t, 1, 64, 2)
	in := f.readyLane(0, 1, 3, nil)
	if f.g.ReadyLanes() != 1 || f.g.ClaimedLanes() != 1 {
		t.Fatal("lane must be ready and claimed")
	}
	in.Close()
	in.Close() // idempotent
	if f.g.ReadyLanes() != 0 || f.g.ClaimedLanes() != 0 {
		t.Fatalf("after close ready=%b claimed=%b", f.g.ReadyLanes(), f.g.ClaimedLanes())
	}
}

func TestIngestorScratchSizedInBitmapWords(t *testing.T) {
	for _, n := range []uint64{2, 64, 128, 1024, 1 << 16} {
		f := newFixture(t, 1, n, 2)
		in := f.claim(0)
		if want := int((n + 63) / 64); in.ScratchWords() != want {
			t.Fatalf("buckets %d: scratch %d words, want %d", n, in.ScratchWords(), want)
		}
		in.Close()
	}
}

// ---- state machine -------------------------------------------------------------

func TestSnapshotActivatesAndReassignClearsReadinessFirst(t *testing.T) {
	f := newFixture(t, 2, 1024, 2)
	words := make([]uint64, 1024)
	local := []uint64{11, 22, 33, 44}
	if !insertChain(f.g.addr, words, local) {
		t.Fatal("insert")
	}
	in := f.claim(0)
	if err := in.Assign(f.identity(0), f.lease(0, 1)); err != nil {
		t.Fatal(err)
	}
	if f.g.ReadyLanes() != 0 {
		t.Fatal("assigned lane must not be ready")
	}
	mustKind(t, in.InstallSnapshot(f.snapshot(0, 1, 5, words)), OutcomeSnapshotInstalled)
	if f.g.ReadyLanes() != 1 {
		t.Fatal("snapshot must activate the lane")
	}
	if s, ok := in.InstalledSequence(); !ok || s != 5 {
		t.Fatalf("installed %d %v", s, ok)
	}
	captured := f.g.ReadyLanes()

	// Replacement assignment: readiness is cleared before the lease
	// changes (observe the ready bit from the activation guard's point of
	// view: after Assign returns the bit is clear and the lease is new).
	if err := in.Assign(f.identity(0), f.lease(0, 2)); err != nil {
		t.Fatal(err)
	}
	if f.g.ReadyLanes() != 0 || in.Ready() {
		t.Fatal("reassign must clear readiness")
	}
	if _, ok := in.InstalledSequence(); ok {
		t.Fatal("installed sequence must be none in W")
	}
	if _, err := f.g.FindPrefixMatches(local); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("new query must be unavailable: %v", err)
	}
	// A query that captured the mask before the reassignment still
	// succeeds (weak read) and sees the words.
	res, err := f.g.findPrefixMatchesCaptured(local, nil, captured)
	if err != nil || res.ReadyLanes != 1 || res.Lanes[0].Depth != 4 {
		t.Fatalf("captured query: %+v %v", res, err)
	}
}

func TestValidDeltaAdvancesSequenceAndWritesWord(t *testing.T) {
	f := newFixture(t, 1, 64, 2)
	in := f.readyLane(0, 1, 0, nil)
	out := in.ApplyDelta(f.delta(0, 1, 0, 1, ckf.BucketImage{Bucket: 7, Value: 0xABCD}, ckf.BucketImage{Bucket: 9, Value: 5}))
	if out.Kind != OutcomeDeltaApplied || out.Sequence != 1 || out.Images != 2 {
		t.Fatalf("outcome %v", out)
	}
	if s, _ := in.InstalledSequence(); s != 1 {
		t.Fatalf("installed %d", s)
	}
	if f.word(7, 0) != 0xABCD || f.word(9, 0) != 5 {
		t.Fatal("words not written")
	}
	mustKind(t, in.ApplyDelta(f.delta(0, 1, 1, 2, ckf.BucketImage{Bucket: 7, Value: 1})), OutcomeDeltaApplied)
	if f.word(7, 0) != 1 {
		t.Fatal("second delta")
	}
}

func TestStaleSnapshotCannotRollBackActiveLane(t *testing.T) {
	f := newFixture(t, 1, 64, 2)
	in := f.readyLane(0, 1, 3, nil)
	mustKind(t, in.ApplyDelta(f.delta(0, 1, 3, 4, ckf.BucketImage{Bucket: 1, Value: 42})), OutcomeDeltaApplied)
	old := make([]uint64, 64)
	old[1] = 7
	for _, seq := range []uint64{3, 4} {
		out := in.InstallSnapshot(f.snapshot(0, 1, seq, old))
		if out.Kind != OutcomeIgnoredStaleOrDuplicate || out.InstalledSequence != 4 {
			t.Fatalf("seq %d: %v", seq, out)
		}
	}
	// Not even validated: a stale snapshot of the wrong size is ignored too.
	mustKind(t, in.InstallSnapshot(f.snapshot(0, 1, 2, make([]uint64, 3))), OutcomeIgnoredStaleOrDuplicate)
	if f.word(1, 0) != 42 || !in.Ready() || f.g.ReadyLanes() != 1 {
		t.Fatal("stale snapshot rolled back the lane")
	}
	if _, ok := in.LastFailureDisposition(); ok {
		t.Fatal("stale traffic must not record a disposition")
	}
}

func TestNewerSnapshotOnActiveLaneDeactivatesWithoutWrites(t *testing.T) {
	f := newFixture(t, 1, 64, 2)
	in := f.readyLane(0, 1, 3, nil)
	newer := make([]uint64, 64)
	newer[5] = 99
	out := in.InstallSnapshot(f.snapshot(0, 1, 4, newer))
	mustFault(t, out, FaultSnapshotWhileReady)
	if out.Fault.Installed != 3 || out.Fault.Sequence != 4 {
		t.Fatalf("fault %+v", out.Fault)
	}
	if f.word(5, 0) != 0 {
		t.Fatal("snapshot-while-ready wrote")
	}
	if in.Ready() || f.g.ReadyLanes() != 0 {
		t.Fatal("lane must be deactivated")
	}
	if d, _ := in.LastFailureDisposition(); d != ckf.DispositionOf(ckf.ConsumerGapOrMalformedBeforeWrite) {
		t.Fatalf("disposition %+v", d)
	}
	if _, l, ok := in.Assignment(); !ok || l != f.lease(0, 1) {
		t.Fatal("assignment must be kept")
	}
}

func TestQueryResultCarriesPoolLaneAndMask(t *testing.T) {
	f := newFixture(t, 3, 1024, 2)
	local := []uint64{1, 2, 3, 4, 5, 6}
	w0 := make([]uint64, 1024)
	insertChain(f.g.addr, w0, local)
	w2 := make([]uint64, 1024)
	insertChain(f.g.addr, w2, local[:3])
	in0 := f.readyLane(0, 1, 1, w0)
	f.claim(1) // lane 1 claimed, never ready
	in2 := f.readyLane(2, 1, 1, w2)
	defer in0.Close()
	defer in2.Close()

	res, err := f.g.FindPrefixMatches(local)
	if err != nil {
		t.Fatal(err)
	}
	if res.ReadyLanes != 0b101 {
		t.Fatalf("captured %b", res.ReadyLanes)
	}
	m0, ok0 := res.Match(0)
	m2, ok2 := res.Match(2)
	_, ok1 := res.Match(1)
	if !ok0 || !ok2 || ok1 {
		t.Fatal("Match presence")
	}
	if m0 != (LaneMatch{Lane: 0, Pool: f.pools[0], Depth: 6}) || m2 != (LaneMatch{Lane: 2, Pool: f.pools[2], Depth: 3}) {
		t.Fatalf("matches %+v %+v", m0, m2)
	}
	// Empty query: Ok, every captured lane present with depth 0.
	res, err = f.g.FindPrefixMatches(nil)
	if err != nil || res.ReadyLanes != 0b101 || res.Lanes[2] != (LaneMatch{Lane: 2, Pool: f.pools[2]}) {
		t.Fatalf("empty query %+v %v", res, err)
	}
	// Unknown prefix: depth 0 but present.
	res, _ = f.g.FindPrefixMatches([]uint64{999, 1, 2})
	if d := res.Depths(); d[0] != 0 || d[2] != 0 || res.ReadyLanes != 0b101 {
		t.Fatalf("miss %+v", res)
	}
}

func TestQueryUnavailableWhenNothingReady(t *testing.T) {
	f := newFixture(t, 1, 64, 2)
	if _, err := f.g.FindPrefixMatches([]uint64{1}); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("err %v", err)
	}
	if _, err := f.g.FindPrefixMatches(nil); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("empty query with nothing ready: %v", err)
	}
}

func TestDuplicateAndStaleDeltasIgnoredWithoutWrites(t *testing.T) {
	f := newFixture(t, 1, 64, 2)
	in := f.readyLane(0, 1, 0, nil)
	mustKind(t, in.ApplyDelta(f.delta(0, 1, 0, 1, ckf.BucketImage{Bucket: 2, Value: 1})), OutcomeDeltaApplied)
	mustKind(t, in.ApplyDelta(f.delta(0, 1, 1, 2, ckf.BucketImage{Bucket: 2, Value: 2})), OutcomeDeltaApplied)
	// Duplicate (sequence 2 again) and stale (sequence 1); staleness is
	// checked before the base, so a bogus base is still "ignored".
	for _, d := range []*ckf.Delta{
		f.delta(0, 1, 1, 2, ckf.BucketImage{Bucket: 2, Value: 100}),
		f.delta(0, 1, 0, 1, ckf.BucketImage{Bucket: 2, Value: 101}),
		f.delta(0, 1, 77, 1, ckf.BucketImage{Bucket: 2, Value: 102}),
	} {
		out := in.ApplyDelta(d)
		if out.Kind != OutcomeIgnoredStaleOrDuplicate || out.InstalledSequence != 2 {
			t.Fatalf("%+v: %v", d, out)
		}
	}
	if f.word(2, 0) != 2 || !in.Ready() {
		t.Fatal("ignored delta wrote or deactivated")
	}
}

func TestForwardGapDeactivatesWithGapDisposition(t *testing.T) {
	f := newFixture(t, 1, 64, 2)
	in := f.readyLane(0, 1, 5, nil)
	out := in.ApplyDelta(f.delta(0, 1, 6, 7, ckf.BucketImage{Bucket: 3, Value: 1}))
	mustFault(t, out, FaultBaseSequenceMismatch)
	if out.Fault.Expected != 5 || out.Fault.Actual != 6 {
		t.Fatalf("fault %+v", out.Fault)
	}
	want := ckf.FailureDisposition{Domain: ckf.DomainConsumerLane, Commit: ckf.CommitKnownUnchanged, RecoveryDomain: ckf.DomainConsumerLane, Action: ckf.ActionDeactivateAndSnapshot}
	if d, ok := in.LastFailureDisposition(); !ok || d != want {
		t.Fatalf("disposition %+v", d)
	}
	if f.word(3, 0) != 0 || in.Ready() || f.g.ReadyLanes() != 0 {
		t.Fatal("gap wrote or left the lane ready")
	}
	// The next input resets the disposition.
	mustKind(t, in.ApplyDelta(f.delta(0, 1, 5, 6, ckf.BucketImage{Bucket: 3, Value: 1})), OutcomeAwaitingSnapshot)
	if _, ok := in.LastFailureDisposition(); ok {
		t.Fatal("disposition must reset at the next input")
	}
	if !errors.Is(out.Fault, ErrFaultBaseSequenceMismatch) {
		t.Fatal("errors.Is on LaneFault")
	}
}

func TestInactiveSnapshotFailureIsRetryableOnSameLease(t *testing.T) {
	f := newFixture(t, 1, 64, 2)
	in := f.claim(0)
	if err := in.Assign(f.identity(0), f.lease(0, 1)); err != nil {
		t.Fatal(err)
	}
	out := in.InstallSnapshot(f.snapshot(0, 1, 3, make([]uint64, 63)))
	mustFault(t, out, FaultInvalidSnapshotBucketCount)
	if out.Fault.Expected != 64 || out.Fault.Actual != 63 {
		t.Fatalf("fault %+v", out.Fault)
	}
	want := ckf.FailureDisposition{Domain: ckf.DomainConsumerLane, Commit: ckf.CommitKnownUnchanged, RecoveryDomain: ckf.DomainConsumerLane, Action: ckf.ActionRetrySnapshot}
	if d, ok := in.LastFailureDisposition(); !ok || d != want {
		t.Fatalf("disposition %+v", d)
	}
	bad := f.snapshot(0, 1, 3, nil)
	bad.Identity.Incarnation++
	mustFault(t, in.InstallSnapshot(bad), FaultWrongIdentity)
	if d, _ := in.LastFailureDisposition(); d.Action != ckf.ActionRetrySnapshot {
		t.Fatalf("wrong identity on W: %+v", d)
	}
	words := make([]uint64, 64)
	words[10] = 0x1234
	out = in.InstallSnapshot(f.snapshot(0, 1, 3, words))
	if out.Kind != OutcomeSnapshotInstalled || out.Sequence != 3 || f.word(10, 0) != 0x1234 || f.g.ReadyLanes() != 1 {
		t.Fatalf("corrected snapshot: %v", out)
	}
}

func TestNonContiguousSequenceDeactivates(t *testing.T) {
	f := newFixture(t, 1, 64, 2)
	in := f.readyLane(0, 1, 5, nil)
	out := in.ApplyDelta(f.delta(0, 1, 5, 7, ckf.BucketImage{Bucket: 1, Value: 1}))
	mustFault(t, out, FaultNonContiguousSequence)
	if out.Fault.Base != 5 || out.Fault.Sequence != 7 || f.word(1, 0) != 0 {
		t.Fatalf("fault %+v", out.Fault)
	}
}

func TestInvalidAndDuplicateImageIndicesRejectedBeforeWrite(t *testing.T) {
	f := newFixture(t, 1, 64, 2)
	in := f.readyLane(0, 1, 0, nil)
	out := in.ApplyDelta(f.delta(0, 1, 0, 1, ckf.BucketImage{Bucket: 1, Value: 1}, ckf.BucketImage{Bucket: 64, Value: 2}, ckf.BucketImage{Bucket: 70, Value: 3}))
	mustFault(t, out, FaultInvalidImageIndex)
	if out.Fault.Bucket != 64 || f.word(1, 0) != 0 {
		t.Fatalf("first offender / write: %+v", out.Fault)
	}

	// Reuse the lane: new lease + snapshot.
	if err := in.Assign(f.identity(0), f.lease(0, 2)); err != nil {
		t.Fatal(err)
	}
	mustKind(t, in.InstallSnapshot(f.snapshot(0, 2, 0, nil)), OutcomeSnapshotInstalled)
	out = in.ApplyDelta(f.delta(0, 2, 0, 1, ckf.BucketImage{Bucket: 1, Value: 1}, ckf.BucketImage{Bucket: 2, Value: 2}, ckf.BucketImage{Bucket: 1, Value: 3}))
	mustFault(t, out, FaultDuplicateImageIndex)
	if out.Fault.Bucket != 1 || f.word(1, 0) != 0 || f.word(2, 0) != 0 {
		t.Fatalf("duplicate: %+v", out.Fault)
	}
	// Range is checked before duplicates (row order), whatever the list
	// order.
	if err := in.Assign(f.identity(0), f.lease(0, 3)); err != nil {
		t.Fatal(err)
	}
	mustKind(t, in.InstallSnapshot(f.snapshot(0, 3, 0, nil)), OutcomeSnapshotInstalled)
	out = in.ApplyDelta(f.delta(0, 3, 0, 1, ckf.BucketImage{Bucket: 1}, ckf.BucketImage{Bucket: 1}, ckf.BucketImage{Bucket: 99}))
	mustFault(t, out, FaultInvalidImageIndex)
	// The scratch is clean afterwards: a valid delta reusing bucket 1 works.
	if err := in.Assign(f.identity(0), f.lease(0, 4)); err != nil {
		t.Fatal(err)
	}
	mustKind(t, in.InstallSnapshot(f.snapshot(0, 4, 0, nil)), OutcomeSnapshotInstalled)
	mustKind(t, in.ApplyDelta(f.delta(0, 4, 0, 1, ckf.BucketImage{Bucket: 1, Value: 8}, ckf.BucketImage{Bucket: 2, Value: 9})), OutcomeDeltaApplied)
}

func TestEmptyDeltaIsMalformed(t *testing.T) {
	f := newFixture(t, 1, 64, 2)
	in := f.readyLane(0, 1, 0, nil)
	mustFault(t, in.ApplyDelta(f.delta(0, 1, 0, 1)), FaultEmptyDelta)
}

func TestWrongIdentityOnCurrentLeaseDeactivatesBeforeWrite(t *testing.T) {
	f := newFixture(t, 1, 64, 2)
	in := f.readyLane(0, 1, 0, nil)
	d := f.delta(0, 1, 0, 1, ckf.BucketImage{Bucket: 4, Value: 4})
	d.Identity.LayoutGeneration = 2
	mustFault(t, in.ApplyDelta(d), FaultWrongIdentity)
	if f.word(4, 0) != 0 || f.g.ReadyLanes() != 0 {
		t.Fatal("delta identity fault wrote or kept ready")
	}
	// Snapshot with a wrong identity on a ready lane: GAP class.
	if err := in.Assign(f.identity(0), f.lease(0, 2)); err != nil {
		t.Fatal(err)
	}
	mustKind(t, in.InstallSnapshot(f.snapshot(0, 2, 0, nil)), OutcomeSnapshotInstalled)
	s := f.snapshot(0, 2, 1, nil)
	s.Buckets[4] = 4
	s.Identity.Format.Seed++
	mustFault(t, in.InstallSnapshot(s), FaultWrongIdentity)
	if d, _ := in.LastFailureDisposition(); d.Action != ckf.ActionDeactivateAndSnapshot {
		t.Fatalf("disposition %+v", d)
	}
	if f.word(4, 0) != 0 || f.g.ReadyLanes() != 0 {
		t.Fatal("snapshot identity fault wrote or kept ready")
	}
}

func TestSupersededLeaseTrafficIgnored(t *testing.T) {
	f := newFixture(t, 1, 64, 2)
	in := f.readyLane(0, 1, 0, nil)
	if err := in.Assign(f.identity(0), f.lease(0, 2)); err != nil {
		t.Fatal(err)
	}
	mustKind(t, in.InstallSnapshot(f.snapshot(0, 2, 9, nil)), OutcomeSnapshotInstalled)
	// Old-lease traffic of every kind, including malformed payloads.
	mustKind(t, in.ApplyDelta(f.delta(0, 1, 0, 1, ckf.BucketImage{Bucket: 1, Value: 1})), OutcomeIgnoredForeignLease)
	mustKind(t, in.ApplyDelta(f.delta(0, 1, 0, 1)), OutcomeIgnoredForeignLease)
	mustKind(t, in.InstallSnapshot(f.snapshot(0, 1, 20, make([]uint64, 3))), OutcomeIgnoredForeignLease)
	mustKind(t, in.CompleteDrain(f.marker(0, 1, 1)), OutcomeIgnoredForeignLease)
	if !in.Ready() || f.g.ReadyLanes() != 1 || f.word(1, 0) != 0 {
		t.Fatal("superseded traffic invalidated the replacement")
	}
	if _, ok := in.LastFailureDisposition(); ok {
		t.Fatal("foreign traffic recorded a disposition")
	}
	mustKind(t, in.CompleteDrain(f.marker(0, 2, 9)), OutcomeDrainAcknowledged)
}

func TestWrongSizeSnapshotOnActiveLaneDeactivates(t *testing.T) {
	f := newFixture(t, 1, 64, 2)
	in := f.readyLane(0, 1, 0, nil)
	big := make([]uint64, 65)
	big[0] = 77
	out := in.InstallSnapshot(f.snapshot(0, 1, 1, big))
	mustFault(t, out, FaultInvalidSnapshotBucketCount)
	if d, _ := in.LastFailureDisposition(); d.Action != ckf.ActionDeactivateAndSnapshot {
		t.Fatalf("disposition %+v", d)
	}
	if f.word(0, 0) != 0 || f.g.ReadyLanes() != 0 {
		t.Fatal("wrote or stayed ready")
	}
}

func TestDrainMarkerDetectsDroppedFinalDelta(t *testing.T) {
	f := newFixture(t, 1, 64, 2)
	in := f.readyLane(0, 1, 0, nil)
	mustKind(t, in.ApplyDelta(f.delta(0, 1, 0, 1, ckf.BucketImage{Bucket: 1, Value: 1})), OutcomeDeltaApplied)
	out := in.CompleteDrain(f.marker(0, 1, 1))
	if out.Kind != OutcomeDrainAcknowledged || out.InstalledSequence != 1 {
		t.Fatalf("exact drain: %v", out)
	}
	// Delta 2 is lost; the marker expects 2.
	out = in.CompleteDrain(f.marker(0, 1, 2))
	mustFault(t, out, FaultTerminalSequenceMismatch)
	if out.Fault.Expected != 2 || !out.Fault.HasActual || out.Fault.Actual != 1 {
		t.Fatalf("fault %+v", out.Fault)
	}
	// On a not-ready lane the actual is none.
	out = in.CompleteDrain(f.marker(0, 1, 2))
	mustFault(t, out, FaultTerminalSequenceMismatch)
	if out.Fault.HasActual {
		t.Fatalf("fault %+v", out.Fault)
	}
	if d, _ := in.LastFailureDisposition(); d.Action != ckf.ActionDeactivateAndSnapshot {
		t.Fatalf("disposition %+v", d)
	}
}

func TestAssignmentEpochStrictlyIncreasesAcrossRetire(t *testing.T) {
	f := newFixture(t, 2, 64, 2)
	in := f.claim(0)
	// The very first assignment accepts epoch 0.
	if err := in.Assign(f.identity(0), f.lease(0, 0)); err != nil {
		t.Fatal(err)
	}
	err := in.Assign(f.identity(0), f.lease(0, 0))
	var ae *AssignmentError
	if !errors.Is(err, ErrStaleAssignmentEpoch) || !errors.As(err, &ae) || ae.MinimumExclusive != 0 || ae.Actual != 0 {
		t.Fatalf("same epoch: %v", err)
	}
	if err := in.Assign(f.identity(0), f.lease(0, 5)); err != nil {
		t.Fatal(err)
	}
	in.Retire()
	if _, _, ok := in.Assignment(); ok {
		t.Fatal("retire must drop the assignment")
	}
	if err := in.Assign(f.identity(0), f.lease(0, 5)); !errors.Is(err, ErrStaleAssignmentEpoch) || !errors.Is(err, ErrAssignment) {
		t.Fatalf("after retire: %v", err)
	}
	if err := in.Assign(f.identity(0), f.lease(0, 6)); err != nil {
		t.Fatal(err)
	}
}

func TestAssignmentValidationOrderAndNoChange(t *testing.T) {
	f := newFixture(t, 2, 64, 2)
	in := f.readyLane(0, 3, 1, nil)
	cases := []struct {
		name  string
		id    ckf.ProducerIdentity
		lease ckf.LaneLease
		want  error
	}{
		{"consumer", f.identity(1), ckf.LaneLease{Consumer: 99, Lane: 1, Epoch: 1}, ErrWrongConsumerInstance},
		{"lane", f.identity(1), f.lease(1, 1), ErrWrongPhysicalLane},
		{"owner", f.identity(1), f.lease(0, 1), ErrWrongLaneOwner},
		{"format", func() ckf.ProducerIdentity { id := f.identity(0); id.Format.Seed++; return id }(), f.lease(0, 1), ErrWrongFormat},
		{"epoch", f.identity(0), f.lease(0, 3), ErrStaleAssignmentEpoch},
	}
	for _, c := range cases {
		if err := in.Assign(c.id, c.lease); !errors.Is(err, c.want) {
			t.Fatalf("%s: %v", c.name, err)
		}
		if !in.Ready() || f.g.ReadyLanes() != 1 {
			t.Fatalf("%s: invalid assign changed readiness", c.name)
		}
	}
}

// consumer §3.3 "first matching row wins": identity before staleness, staleness
// before base, base before contiguity/emptiness, emptiness before range.
func TestIngestorRowPrecedence(t *testing.T) {
	f := newFixture(t, 1, 64, 2)
	in := f.readyLane(0, 1, 5, nil)
	d := f.delta(0, 1, 0, 3) // stale AND empty AND wrong base
	d.Identity.Incarnation = 99
	mustFault(t, in.ApplyDelta(d), FaultWrongIdentity)

	in.Assign(f.identity(0), f.lease(0, 2))
	in.InstallSnapshot(f.snapshot(0, 2, 5, nil))
	mustKind(t, in.ApplyDelta(f.delta(0, 2, 9, 4)), OutcomeIgnoredStaleOrDuplicate)
	mustFault(t, in.ApplyDelta(f.delta(0, 2, 4, 9)), FaultBaseSequenceMismatch)

	in.Assign(f.identity(0), f.lease(0, 3))
	in.InstallSnapshot(f.snapshot(0, 3, 5, nil))
	mustFault(t, in.ApplyDelta(f.delta(0, 3, 5, 7)), FaultNonContiguousSequence)

	in.Assign(f.identity(0), f.lease(0, 4))
	in.InstallSnapshot(f.snapshot(0, 4, 5, nil))
	mustFault(t, in.ApplyDelta(f.delta(0, 4, 5, 6)), FaultEmptyDelta)

	// Unassigned: everything is foreign.
	in.Retire()
	mustKind(t, in.ApplyDelta(f.delta(0, 4, 5, 6)), OutcomeIgnoredForeignLease)
	mustKind(t, in.InstallSnapshot(f.snapshot(0, 4, 5, nil)), OutcomeIgnoredForeignLease)
	mustKind(t, in.CompleteDrain(f.marker(0, 4, 5)), OutcomeIgnoredForeignLease)

	// W: a current-lease delta (right identity) is ignored as awaiting.
	in.Assign(f.identity(0), f.lease(0, 5))
	mustKind(t, in.ApplyDelta(f.delta(0, 5, 0, 1, ckf.BucketImage{Bucket: 1, Value: 1})), OutcomeAwaitingSnapshot)
	if f.word(1, 0) != 0 {
		t.Fatal("awaiting delta wrote")
	}
	// A snapshot with any sequence (even 0) activates W.
	mustKind(t, in.InstallSnapshot(f.snapshot(0, 5, 0, nil)), OutcomeSnapshotInstalled)
}
