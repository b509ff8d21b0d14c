package producer

// Behaviour -> test (producer §13). Tests without a file name are in this file; 42-44, 48, 49
// and 55 test the shared core and live in package ckf.
//
//	 1 TestBehaviour01_SharedOwnership                      dcstate_test.go
//	 2 TestBehaviour02_ClearOneRankKeepsSiblingAndSharedHash
//	 3 TestBehaviour03_HostTierIgnoredUnknownRemoveCounted
//	 4 TestBehaviour04_CacheOwnerClearIgnored
//	 5 TestBehaviour05_UnknownResidencyFailsClosed
//	 6 TestBehaviour06_ReplacementBuilderResidency
//	 7 TestBehaviour07_CapacityFailureKeepsLineage
//	 8 TestBehaviour08_BatchedChainIsCanonical
//	 9 TestBehaviour09_ParentAddressedChainEqualsBatched
//	10 TestBehaviour10_VllmAndSglangIdsShareCanonicalOwner
//	11 TestBehaviour11_UnknownParentRejected
//	12 TestBehaviour12_RemapRejectsWholeBatch
//	13 TestBehaviour13_DifferentExternalIdsShareOwnership
//	14 TestBehaviour14_ClearRemovesAliases
//	15 TestBehaviour15_OmittedOwnerReadmittedByOtherSource
//	16 TestBehaviour16_RepeatedStoreReadmitsRelocationFree
//	17 TestBehaviour17_SaturatedRepeatNoNewOmission
//	18 TestBehaviour18_ChildOfOmittedParent
//	19 TestBehaviour19_RecoveryRebuildMatchesLive
//	20 TestBehaviour20_RecoveryRejectsWithoutPartialState
//	21 TestBehaviour21_LoraSaltedRemovalByLineage
//	22 TestBehaviour22_StoreThenRemoveInWindowPublishesNothing
//	23 TestBehaviour23_DisabledMaterialization
//	24 TestBehaviour24_ValidSiblingBeforeRemapCommitsNothing
//	25 TestBehaviour25_ReplacementFailureAfterPrefix
//	26 TestBehaviour26_StoreReservationFailureCommitsNothing
//	27 TestBehaviour27_SaturatedReplacementOmitsOnlyResidency
//	28 TestBehaviour28_ReplacingSharedOwnerPublishesNothing
//	29 TestBehaviour29_ReplacementDiffIncludesPendingWindow
//	30 TestBehaviour30_ReplacementBackToPublishedPublishesNothing
//	31 TestBehaviour31_BatchedReplacementOfTwoRanks
//	32 TestBehaviour32_BarrierSnapshotPlusBatchesReconstruct
//	33 TestBehaviour33_SnapshotAllocationFailurePreservesTail
//	34 TestBehaviour34_ReplayChurnSameMembership
//	35 TestBehaviour35_SameRepresentationBothPresent
//	36 TestBehaviour36_SnapshotSequenceThenDeltaThenMarker  publisher_test.go
//	37 TestBehaviour37_FinalRemovalPublishesZeroImage       publisher_test.go
//	38 TestBehaviour38_SinkFailureFencesAndRecovers         publisher_test.go
//	39 TestBehaviour39_ReplacementSnapshotEmitsOldTailFirst publisher_test.go
//	40 TestBehaviour40_FailedOldTailThenRetry               publisher_test.go
//	41 TestBehaviour41_SequenceRollover                     publisher_test.go
//	42 TestBehaviour42_ConfigBucketCountWithoutAllocating   ckf/vectors_test.go
//	43 TestBehaviour43_SwarMembershipAndSlotHelpers         ckf/vectors_test.go
//	44 TestBehaviour44_AddressingVectorsAndProperties       ckf/vectors_test.go
//	45 TestBehaviour45_FailedBoundedRelocationRestoresEveryWord mutator_test.go
//	46 TestBehaviour46_SameRepresentationKeepsTwoCopies     mutator_test.go
//	47 TestBehaviour47_InsertRemove128In64BucketsDrains     mutator_test.go
//	48 TestBehaviour48_CapacityDispositionAndMidApply       ckf/failure_test.go
//	49 TestBehaviour49_CapacityVsAllocationActions          ckf/failure_test.go
//	50 TestBehaviour50_AdapterPublishThenExactDrain         publisher_test.go
//	51 TestBehaviour51_AdapterDeliveryFailureRecovery       publisher_test.go
//	52 TestBehaviour52_AdapterFailedRecoveryKeepsAdmissionClosed publisher_test.go
//	53 TestBehaviour53_AdapterDroppedFinalDeltaCaught       publisher_test.go
//	54 TestBehaviour54_AdapterCapacityOmissionNeverRetiresLane publisher_test.go
//	55 TestBehaviour55_CanonicalRootAndChild                ckf/vectors_test.go

import (
	"errors"
	"maps"
	"math"
	"slices"
	"testing"

	"github.com/ckf-stream/ckf-stream/ckf"
)

func TestBehaviour01_SharedOwnership(t *testing.T) {
	s := mustDcState(t, cfgN(64, 1))
	a, b := pSrc(1, 0), pSrc(2, 0)
	mustApplyEvent(t, s, storeEv(a, pBlk(10, 0x5151)))
	mustApplyEvent(t, s, storeEv(b, pBlk(20, 0x5151)))
	if o, r := s.Owners(0x5151); o != 2 || !r || s.ResidentCount() != 1 {
		t.Fatalf("owners %d resident %v count %d", o, r, s.ResidentCount())
	}
	mustApplyEvent(t, s, removeEv(a, 10))
	if !s.Contains(0x5151) {
		t.Fatal("removing one owner must keep the hash")
	}
	mustApplyEvent(t, s, removeEv(b, 20))
	if s.owners.Len() != 0 || len(s.lineage) != 0 || s.ResidentCount() != 0 {
		t.Fatal("removing both must empty the state")
	}
	for _, w := range s.filter.words {
		if w != 0 {
			t.Fatal("filter not empty")
		}
	}
	mustInvariants(t, s)
}

func TestBehaviour02_ClearOneRankKeepsSiblingAndSharedHash(t *testing.T) {
	s := mustDcState(t, cfgN(64, 1))
	r0, r1, other := pSrc(1, 0), pSrc(1, 1), pSrc(2, 0)
	mustApplyEvent(t, s, storeEv(r0, pBlk(1, 0xAAAA), pBlk(2, 0xBBBB)))
	mustApplyEvent(t, s, storeEv(r1, pBlk(3, 0xAAAA)))
	mustApplyEvent(t, s, storeEv(other, pBlk(4, 0xAAAA)))
	chainB := ckf.CanonicalChild(0xAAAA, 0xBBBB)
	mustApplyEvent(t, s, clearEv(r0))
	if s.MemberBlockCount(r0) != 0 || s.MemberBlockCount(r1) != 1 || s.MemberBlockCount(other) != 1 {
		t.Fatalf("members %+v", s.MemberCounts())
	}
	if o, r := s.Owners(0xAAAA); o != 2 || !r {
		t.Fatalf("shared hash owners %d", o)
	}
	if o, _ := s.Owners(chainB); o != 0 {
		t.Fatal("rank-0-only hash must be gone")
	}
	mustInvariants(t, s)
}

func TestBehaviour03_HostTierIgnoredUnknownRemoveCounted(t *testing.T) {
	s := mustDcState(t, cfgN(64, 1))
	k := pSrc(1, 0)
	host := storeEv(k, pBlk(1, 0x77))
	host.StorageTier = StorageTierHostPinned
	out := s.ApplyEvent(host)
	if out.FirstError != nil || out.PublicationBoundary || out.Publication != nil || s.PendingEventCount() != 0 || len(s.lineage) != 0 {
		t.Fatalf("host-tier store must be ignored: %+v", out)
	}
	out = s.ApplyEvent(removeEv(k, 99))
	if out.FirstError != nil || out.UnknownRemovals != 1 || s.Stats().UnknownRemovals != 1 || !out.PublicationBoundary {
		t.Fatalf("unknown device remove: %+v stats %+v", out, s.Stats())
	}
}

func TestBehaviour04_CacheOwnerClearIgnored(t *testing.T) {
	s := mustDcState(t, cfgN(64, 10))
	k := pSrc(1, 0)
	mustApplyEvent(t, s, storeEv(k, pBlk(1, 0x77)))
	pending, dirty := s.PendingEventCount(), slices.Clone(s.win.dirty)
	ev := clearEv(k)
	ev.Residency = ResidencyCacheOwner
	out := s.ApplyEvent(ev)
	if !zeroOutcome(out) || s.PendingEventCount() != pending || !slices.Equal(dirty, s.win.dirty) || s.MemberBlockCount(k) != 1 {
		t.Fatalf("CacheOwner clear touched state: %+v", out)
	}
}

func TestBehaviour05_UnknownResidencyFailsClosed(t *testing.T) {
	s := mustDcState(t, cfgN(64, 10))
	k := pSrc(1, 0)
	mustApplyEvent(t, s, storeEv(k, pBlk(1, 0x77)))
	words, pending := s.CopyWords(), s.PendingEventCount()
	for _, ev := range []RouterEvent{
		func() RouterEvent { e := storeEv(k, pBlk(2, 0x88)); e.Residency = 9; return e }(),
		func() RouterEvent { e := removeEv(k, 1); e.Residency = 200; return e }(),
		func() RouterEvent { e := clearEv(k); e.Residency = 3; return e }(),
		func() RouterEvent { e := storeEv(k, pBlk(2, 0x88)); e.Residency = ResidencyCacheOwner; return e }(), // CacheOwner on Device
	} {
		out := s.ApplyEvent(ev)
		prodWantErr(t, out.FirstError, ckf.ErrUnsupportedResidencyDomain)
		if out.PublicationBoundary || out.Publication != nil {
			t.Fatal("no boundary on a rejected residency")
		}
	}
	if !slices.Equal(words, s.CopyWords()) || s.PendingEventCount() != pending || s.MemberBlockCount(k) != 1 {
		t.Fatal("rejected residency changed state")
	}
	if _, err := ParseResidencyDomain("gpu"); !errors.Is(err, ckf.ErrUnsupportedResidencyDomain) {
		t.Fatal("unknown wire string must fail closed")
	}
	// CacheOwner off the device tier resolves and is simply not primary.
	ev := storeEv(k, pBlk(2, 0x88))
	ev.Residency, ev.StorageTier = ResidencyCacheOwner, StorageTierDisk
	if out := s.ApplyEvent(ev); !zeroOutcome(out) {
		t.Fatalf("non-device CacheOwner store: %+v", out)
	}
}

func TestBehaviour06_ReplacementBuilderResidency(t *testing.T) {
	k := pSrc(1, 0)
	r := NewRankReplacement()
	if err := r.PushEvent(storeEv(k, pBlk(1, 0x11))); err != nil {
		t.Fatal(err)
	}
	co := clearEv(k)
	co.Residency = ResidencyCacheOwner
	if err := r.PushEvent(co); err != nil || r.Len() != 1 {
		t.Fatalf("CacheOwner clear must be ignored: %v", err)
	}
	bad := storeEv(k, pBlk(2, 0x22), pBlk(3, 0x33))
	bad.Residency = 42
	prodWantErr(t, r.PushEvent(bad), ckf.ErrUnsupportedResidencyDomain)
	if r.Len() != 1 {
		t.Fatal("rejected push left partial state")
	}
	prodWantErr(t, r.PushEvent(removeEv(k, 1)), ckf.ErrInvalidBlockSequence)
	prodWantErr(t, r.PushEvent(clearEv(k)), ckf.ErrInvalidBlockSequence)
	host := storeEv(k, pBlk(4, 0x44))
	host.StorageTier = StorageTierDisk
	if err := r.PushEvent(host); err != nil || r.Len() != 1 {
		t.Fatal("non-primary store must be ignored")
	}
}

func TestBehaviour07_CapacityFailureKeepsLineage(t *testing.T) {
	s := mustDcState(t, cfgN(1, 1)) // 2 buckets, 8 slots
	k := pSrc(1, 0)
	var blocks []StoredBlock
	for i := uint64(0); i < 20; i++ {
		blocks = append(blocks, pBlk(100+i, 0x1000+i))
	}
	out := s.ApplyEvent(storeEv(k, blocks...))
	prodWantErr(t, out.FirstError, ckf.ErrCapacityExhausted)
	if s.MemberBlockCount(k) != 20 || s.owners.Len() != 20 {
		t.Fatalf("lineage %d owners %d", s.MemberBlockCount(k), s.owners.Len())
	}
	if s.ResidentCount() >= 20 || s.ResidentCount() == 0 || s.LifetimeCapacityOmissions() != 20-s.ResidentCount() {
		t.Fatalf("resident %d omissions %d", s.ResidentCount(), s.LifetimeCapacityOmissions())
	}
	// OmittedCount is the owned blocks that are not resident, counted one by one.
	var notResident uint64
	for _, b := range blocks {
		c, _ := s.Lookup(k, b.BlockHash)
		if _, resident := s.Owners(c); !resident {
			notResident++
		}
	}
	if s.OmittedCount() != 20-s.ResidentCount() || s.OmittedCount() != notResident {
		t.Fatalf("omitted %d, want %d (%d counted)", s.OmittedCount(), 20-s.ResidentCount(), notResident)
	}
	// Removing the source settles its omissions: nothing is omitted any more.
	mustApplyEvent(t, s, clearEv(k))
	if s.OmittedCount() != 0 {
		t.Fatalf("omitted %d after the source cleared", s.OmittedCount())
	}
	mustInvariants(t, s) // includes: every resident hash is findable
}

func TestBehaviour08_BatchedChainIsCanonical(t *testing.T) {
	s := mustDcState(t, cfgN(64, 1))
	k := pSrc(1, 0)
	toks := []uint64{0x0123456789ABCDEF, 0x1111222233334444, 0xDEADBEEFCAFEBABE}
	mustApplyEvent(t, s, storeEv(k, pBlk(900, toks[0]), pBlk(901, toks[1]), pBlk(902, toks[2])))
	want := ckf.SequenceHashes(toks)
	for i, ext := range []ckf.ExternalBlockHash{900, 901, 902} {
		c, ok := s.Lookup(k, ext)
		if !ok || uint64(c) != want[i] || !s.Contains(c) {
			t.Fatalf("block %d canonical %#x, want %#x", i, uint64(c), want[i])
		}
		if o, _ := s.Owners(ckf.CanonicalHash(ext)); o != 0 {
			t.Fatal("external ids must not be indexed")
		}
	}
}

func TestBehaviour09_ParentAddressedChainEqualsBatched(t *testing.T) {
	k := pSrc(3, 1)
	batched := mustDcState(t, cfgN(64, 1))
	mustApplyEvent(t, batched, storeEv(k, pBlk(1, 11), pBlk(2, 22), pBlk(3, 33)))
	chained := mustDcState(t, cfgN(64, 1))
	mustApplyEvent(t, chained, storeEv(k, pBlk(1, 11)))
	mustApplyEvent(t, chained, storeChildEv(k, 1, pBlk(2, 22)))
	mustApplyEvent(t, chained, storeChildEv(k, 2, pBlk(3, 33)))
	if !maps.Equal(lineageOf(batched, k), lineageOf(chained, k)) || !maps.Equal(ownersSnapshot(batched), ownersSnapshot(chained)) {
		t.Fatal("parent-addressed chain differs from the batched chain")
	}
	if !slices.Equal(batched.CopyWords(), chained.CopyWords()) {
		t.Fatal("words differ")
	}
}

func TestBehaviour10_VllmAndSglangIdsShareCanonicalOwner(t *testing.T) {
	s := mustDcState(t, cfgN(64, 1))
	vllm, sglang := pSrc(1, 0), pSrc(2, 0)
	// Captured-style ids: vLLM uses large hashes, SGLang small sequential ids.
	mustApplyEvent(t, s, storeEv(vllm, pBlk(0x9f3c_52e1_07aa_4b10, 0xC0FFEE)))
	mustApplyEvent(t, s, storeEv(sglang, pBlk(17, 0xC0FFEE)))
	if o, r := s.Owners(0xC0FFEE); o != 2 || !r || s.owners.Len() != 1 || s.ResidentCount() != 1 {
		t.Fatalf("owners %d resident %v entries %d", o, r, s.owners.Len())
	}
}

func TestBehaviour11_UnknownParentRejected(t *testing.T) {
	s := mustDcState(t, cfgN(64, 1))
	k := pSrc(1, 0)
	mustApplyEvent(t, s, storeEv(k, pBlk(1, 11)))
	words := s.CopyWords()
	out := s.ApplyEvent(storeChildEv(k, 999, pBlk(2, 22), pBlk(3, 33)))
	prodWantErr(t, out.FirstError, ckf.ErrParentBlockNotFound)
	if s.MemberBlockCount(k) != 1 || s.owners.Len() != 1 || !slices.Equal(words, s.CopyWords()) || out.Publication != nil {
		t.Fatal("partial state after unknown parent")
	}
	if s.Stats().ParentNotFound != 1 {
		t.Fatal("parent_not_found not bumped")
	}
	// A parent known only to another source is unknown to this one.
	out = s.ApplyEvent(storeChildEv(pSrc(2, 0), 1, pBlk(2, 22)))
	prodWantErr(t, out.FirstError, ckf.ErrParentBlockNotFound)
}

func TestBehaviour12_RemapRejectsWholeBatch(t *testing.T) {
	s := mustDcState(t, cfgN(64, 1))
	k := pSrc(1, 0)
	mustApplyEvent(t, s, storeEv(k, pBlk(1, 11)))
	out := s.ApplyEvent(storeEv(k, pBlk(2, 22), pBlk(1, 99)))
	prodWantErr(t, out.FirstError, ckf.ErrInvalidBlockSequence)
	if _, ok := s.Lookup(k, 2); ok || s.MemberBlockCount(k) != 1 {
		t.Fatal("remap committed part of the batch")
	}
	// Within one batch, too.
	out = s.ApplyEvent(storeEv(k, pBlk(5, 55), pBlk(5, 66)))
	prodWantErr(t, out.FirstError, ckf.ErrInvalidBlockSequence)
	mustInvariants(t, s)
}

func TestBehaviour13_DifferentExternalIdsShareOwnership(t *testing.T) {
	s := mustDcState(t, cfgN(64, 1))
	a, b := pSrc(1, 0), pSrc(2, 3)
	mustApplyEvent(t, s, storeEv(a, pBlk(100, 1), pBlk(101, 2), pBlk(102, 3)))
	mustApplyEvent(t, s, storeEv(b, pBlk(200, 1), pBlk(201, 2), pBlk(202, 3)))
	for _, c := range ckf.SequenceHashes([]uint64{1, 2, 3}) {
		if o, r := s.Owners(ckf.CanonicalHash(c)); o != 2 || !r {
			t.Fatalf("canonical %#x owners %d resident %v", c, o, r)
		}
	}
	if s.ResidentCount() != 3 {
		t.Fatalf("resident %d, want 3", s.ResidentCount())
	}
	mustInvariants(t, s)
}

func TestBehaviour14_ClearRemovesAliases(t *testing.T) {
	s := mustDcState(t, cfgN(64, 1))
	k := pSrc(1, 0)
	mustApplyEvent(t, s, storeEv(k, pBlk(1, 0x42)))
	mustApplyEvent(t, s, storeEv(k, pBlk(2, 0x42))) // alias of the same canonical
	if o, _ := s.Owners(0x42); o != 2 || s.ResidentCount() != 1 {
		t.Fatalf("alias owners %d", o)
	}
	out := mustApplyEvent(t, s, clearEv(k))
	if o, _ := s.Owners(0x42); o != 0 || s.ResidentCount() != 0 || len(s.lineage) != 0 {
		t.Fatal("clear left an alias")
	}
	if len(out.Publication) != 1 || out.Publication[0].Value != 0 {
		t.Fatalf("clear must publish the absolute zero word: %+v", out.Publication)
	}
}

func TestBehaviour15_OmittedOwnerReadmittedByOtherSource(t *testing.T) {
	a, b := pSrc(1, 0), pSrc(2, 0)
	s := fillTwoBucketState(t, a, ckf.DefaultMaxKicks)
	out := s.ApplyEvent(storeEv(a, pBlk(1, 0xABCD)))
	prodWantErr(t, out.FirstError, ckf.ErrCapacityExhausted)
	if o, r := s.Owners(0xABCD); o != 1 || r {
		t.Fatal("omitted owner must keep lineage and be non-resident")
	}
	mustApplyEvent(t, s, removeEv(a, 1000)) // frees a slot
	out = mustApplyEvent(t, s, storeEv(b, pBlk(77, 0xABCD)))
	if o, r := s.Owners(0xABCD); o != 2 || !r || !s.Contains(0xABCD) {
		t.Fatalf("other-source store must re-admit: owners %d resident %v", o, r)
	}
	if out.Publication == nil {
		t.Fatal("re-admission publishes")
	}
	mustInvariants(t, s)
}

func TestBehaviour16_RepeatedStoreReadmitsRelocationFree(t *testing.T) {
	a := pSrc(1, 0)
	s := fillTwoBucketState(t, a, ckf.DefaultMaxKicks)
	s.ApplyEvent(storeEv(a, pBlk(1, 0xABCD)))
	mustApplyEvent(t, s, removeEv(a, 1003))
	touches := s.tel.PhysicalTouches
	mustApplyEvent(t, s, storeEv(a, pBlk(1, 0xABCD))) // re-offer
	if _, r := s.Owners(0xABCD); !r {
		t.Fatal("repeated store must re-admit once a home bucket has room")
	}
	if s.tel.PhysicalTouches != touches+1 {
		t.Fatalf("re-admission must be relocation-free (one write), touches +%d", s.tel.PhysicalTouches-touches)
	}
	if o, _ := s.Owners(0xABCD); o != 1 {
		t.Fatal("re-offer must not add an owner")
	}
	mustInvariants(t, s)
}

func TestBehaviour17_SaturatedRepeatNoNewOmission(t *testing.T) {
	a := pSrc(1, 0)
	s := fillTwoBucketState(t, a, ckf.DefaultMaxKicks)
	s.ApplyEvent(storeEv(a, pBlk(1, 0xABCD)))
	if s.LifetimeCapacityOmissions() != 1 {
		t.Fatal("first omission")
	}
	out := s.ApplyEvent(storeEv(a, pBlk(1, 0xABCD)))
	if out.FirstError != nil || s.LifetimeCapacityOmissions() != 1 {
		t.Fatalf("saturated repeat: %v, omissions %d", out.FirstError, s.LifetimeCapacityOmissions())
	}
}

func TestBehaviour18_ChildOfOmittedParent(t *testing.T) {
	a := pSrc(1, 0)
	s := fillTwoBucketState(t, a, ckf.DefaultMaxKicks)
	s.ApplyEvent(storeEv(a, pBlk(1, 0xABCD)))
	s.ApplyEvent(storeChildEv(a, 1, pBlk(2, 0xEF)))
	c, ok := s.Lookup(a, 2)
	if !ok || c != ckf.CanonicalChild(0xABCD, 0xEF) {
		t.Fatal("child of an omitted parent must canonicalise through the parent's lineage")
	}
	out := s.ApplyEvent(removeEv(a, 2, 1))
	if out.FirstError != nil || out.UnknownRemovals != 0 {
		t.Fatalf("removal by external id: %+v", out)
	}
	mustInvariants(t, s)
}

func replayReplacement(t testing.TB, evs []RouterEvent) *RankReplacement {
	t.Helper()
	r := NewRankReplacement()
	for _, ev := range evs {
		if err := r.PushEvent(ev); err != nil {
			t.Fatal(err)
		}
	}
	return r
}

func TestBehaviour19_RecoveryRebuildMatchesLive(t *testing.T) {
	s := mustDcState(t, cfgN(256, 1))
	a, b := pSrc(1, 0), pSrc(2, 0)
	evs := []RouterEvent{
		storeEv(a, pBlk(1, 11), pBlk(2, 22)),
		storeChildEv(a, 2, pBlk(3, 33)),
		storeEv(a, pBlk(4, 44)),
	}
	for _, ev := range evs {
		mustApplyEvent(t, s, ev)
	}
	mustApplyEvent(t, s, storeEv(b, pBlk(9, 11)))
	liveLineage, liveOwners := lineageOf(s, a), ownersSnapshot(s)
	if _, err := s.ReplaceRank(a, replayReplacement(t, evs)); err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(liveLineage, lineageOf(s, a)) || !maps.Equal(liveOwners, ownersSnapshot(s)) {
		t.Fatal("rebuild differs from live membership")
	}
	mustInvariants(t, s)
	out := mustApplyEvent(t, s, removeEv(a, 3))
	if out.UnknownRemovals != 0 || s.MemberBlockCount(a) != 3 {
		t.Fatal("live external removal after rebuild")
	}
	mustInvariants(t, s)
}

func TestBehaviour20_RecoveryRejectsWithoutPartialState(t *testing.T) {
	k := pSrc(1, 0)
	r := NewRankReplacement()
	if err := r.PushStore(StoreData{Blocks: []StoredBlock{pBlk(1, 11)}}); err != nil {
		t.Fatal(err)
	}
	// Child before parent.
	err := r.PushStore(StoreData{HasParent: true, ParentHash: 5, Blocks: []StoredBlock{pBlk(6, 66)}})
	prodWantErr(t, err, ckf.ErrParentBlockNotFound)
	// Non-zero orphan position.
	err = r.PushStore(StoreData{HasStartPosition: true, StartPosition: 3, Blocks: []StoredBlock{pBlk(7, 77)}})
	prodWantErr(t, err, ckf.ErrInvalidBlockSequence)
	if r.Len() != 1 {
		t.Fatalf("rejected pushes left partial state: %d mappings", r.Len())
	}
	if err := r.PushStore(StoreData{HasStartPosition: true, StartPosition: 0, Blocks: []StoredBlock{pBlk(8, 88)}}); err != nil {
		t.Fatal("start position 0 without parent is valid")
	}
	// The live path applies the same rule.
	s := mustDcState(t, cfgN(64, 1))
	ev := storeEv(k, pBlk(7, 77))
	ev.Event.Stored.HasStartPosition, ev.Event.Stored.StartPosition = true, 2
	prodWantErr(t, s.ApplyEvent(ev).FirstError, ckf.ErrInvalidBlockSequence)
	if len(s.lineage) != 0 {
		t.Fatal("partial live state")
	}
}

func TestBehaviour21_LoraSaltedRemovalByLineage(t *testing.T) {
	s := mustDcState(t, cfgN(64, 1))
	k := pSrc(1, 0)
	tok := ckf.TokenBlockHash([]uint32{1, 2, 3, 4}, ckf.BlockSaltSeed("my-lora", ""))
	plain := ckf.TokenBlockHash([]uint32{1, 2, 3, 4}, ckf.BlockSaltSeed("", ""))
	mustApplyEvent(t, s, storeEv(k, StoredBlock{BlockHash: 501, TokensHash: tok}))
	if !s.Contains(ckf.CanonicalHash(tok)) || s.Contains(ckf.CanonicalHash(plain)) && plain == tok {
		t.Fatal("salted canonical")
	}
	// Removing "by hash value" is not a thing: only the source's external id resolves.
	out := s.ApplyEvent(removeEv(k, uint64(tok)))
	if out.UnknownRemovals != 1 || !s.Contains(ckf.CanonicalHash(tok)) {
		t.Fatal("removal must resolve through external lineage only")
	}
	out = s.ApplyEvent(removeEv(k, 501))
	if out.UnknownRemovals != 0 || s.owners.Len() != 0 {
		t.Fatal("removal by external id")
	}
}

func TestBehaviour22_StoreThenRemoveInWindowPublishesNothing(t *testing.T) {
	s := mustDcState(t, cfgN(64, 2))
	k := pSrc(1, 0)
	out := mustApplyEvent(t, s, storeEv(k, pBlk(1, 0x99)))
	if out.PublicationBoundary {
		t.Fatal("cadence 2: first event is not a boundary")
	}
	out = mustApplyEvent(t, s, removeEv(k, 1))
	if !out.PublicationBoundary || out.Publication != nil || s.HasPendingPublication() {
		t.Fatalf("net reversion must publish nothing: %+v", out)
	}
	if s.Stats().NetRevertedBuckets != 1 || s.Stats().EmittedImages != 0 {
		t.Fatalf("stats %+v", s.Stats())
	}
}

func TestBehaviour23_DisabledMaterialization(t *testing.T) {
	s := mustDcState(t, cfgN(64, 1))
	k := pSrc(1, 0)
	s.SetPublicationMaterializationEnabled(false)
	out := mustApplyEvent(t, s, storeEv(k, pBlk(1, 0x99)))
	if !out.PublicationBoundary || out.Publication != nil || s.Stats().EmittedImages != 0 || s.HasPendingPublication() {
		t.Fatalf("disabled: %+v", out)
	}
	s.SetPublicationMaterializationEnabled(true)
	out = mustApplyEvent(t, s, storeEv(k, pBlk(2, 0x98)))
	if len(out.Publication) == 0 || s.Stats().EmittedImages != uint64(len(out.Publication)) {
		t.Fatalf("re-enabled: %+v", out)
	}
}

func TestBehaviour24_ValidSiblingBeforeRemapCommitsNothing(t *testing.T) {
	s := mustDcState(t, cfgN(64, 1))
	k := pSrc(1, 0)
	mustApplyEvent(t, s, storeEv(k, pBlk(5, 0x55)))
	words := s.CopyWords()
	out := s.ApplyEvent(storeEv(k, pBlk(6, 0x66), pBlk(5, 0x77)))
	prodWantErr(t, out.FirstError, ckf.ErrInvalidBlockSequence)
	if _, ok := s.Lookup(k, 6); ok || out.Publication != nil || s.HasPendingPublication() || !slices.Equal(words, s.CopyWords()) {
		t.Fatal("valid sibling committed or something is left to publish")
	}
}

func TestBehaviour25_ReplacementFailureAfterPrefix(t *testing.T) {
	s := mustDcState(t, cfgN(64, 1))
	a, b := pSrc(1, 0), pSrc(2, 0)
	mustApplyEvent(t, s, storeEv(a, pBlk(1, 11)))
	mustApplyEvent(t, s, storeEv(b, pBlk(2, 22)))
	words, lin, own := s.CopyWords(), lineageOf(s, a), ownersSnapshot(s)

	// Builder: a valid prefix, then a failing push.
	r := NewRankReplacement()
	if err := r.PushStore(StoreData{Blocks: []StoredBlock{pBlk(1, 11), pBlk(3, 33)}}); err != nil {
		t.Fatal(err)
	}
	prodWantErr(t, r.PushStore(StoreData{Blocks: []StoredBlock{pBlk(3, 99)}}), ckf.ErrInvalidBlockSequence)

	// Rebuild: the first replacement installs, the second fails.
	calls := 0
	s.failReserve = func(site reserveSite) bool {
		if site == siteLineage {
			calls++
			return calls == 3 // retained-free run: a, then b fails
		}
		return false
	}
	rb := NewRankReplacement()
	_ = rb.PushStore(StoreData{Blocks: []StoredBlock{pBlk(2, 22), pBlk(4, 44)}})
	_, err := s.ReplaceRanks(map[ckf.SourceKey]*RankReplacement{a: r, b: rb, pSrc(3, 0): replayReplacement(t, []RouterEvent{storeEv(pSrc(3, 0), pBlk(5, 55))})})
	prodWantErr(t, err, ckf.ErrAllocationFailed)
	s.failReserve = nil
	if !slices.Equal(words, s.CopyWords()) || !maps.Equal(lin, lineageOf(s, a)) || !maps.Equal(own, ownersSnapshot(s)) || s.HasPendingPublication() {
		t.Fatal("failed replacement changed state or left something to publish")
	}
	mustInvariants(t, s)
}

func TestBehaviour26_StoreReservationFailureCommitsNothing(t *testing.T) {
	for _, site := range []reserveSite{siteLineage, siteDirty} {
		s := mustDcState(t, cfgN(64, 1))
		k := pSrc(1, 0)
		mustApplyEvent(t, s, storeEv(k, pBlk(1, 11)))
		words, own := s.CopyWords(), ownersSnapshot(s)
		s.failReserve = func(x reserveSite) bool { return x == site }
		out := s.ApplyEvent(storeChildEv(k, 1, pBlk(2, 22), pBlk(3, 33)))
		prodWantErr(t, out.FirstError, ckf.ErrAllocationFailed)
		s.failReserve = nil
		if !slices.Equal(words, s.CopyWords()) || !maps.Equal(own, ownersSnapshot(s)) || s.MemberBlockCount(k) != 1 || out.Publication != nil {
			t.Fatalf("site %d: reservation failure committed something", site)
		}
		if p, _ := ckf.FailurePointOfEventError(out.FirstError); p != ckf.PrecommitAllocationFailure {
			t.Fatal("allocation failure maps to PrecommitAllocationFailure")
		}
	}
	// Ownership overflow is also raised before any mutation.
	s := mustDcState(t, cfgN(64, 1))
	k := pSrc(1, 0)
	mustApplyEvent(t, s, storeEv(k, pBlk(1, 11)))
	s.owners.Find(11).setOwners(math.MaxUint32)
	out := s.ApplyEvent(storeEv(pSrc(2, 0), pBlk(9, 11), pBlk(10, 12)))
	prodWantErr(t, out.FirstError, ckf.ErrOwnershipDegreeOverflow)
	if s.MemberBlockCount(pSrc(2, 0)) != 0 {
		t.Fatal("overflow committed a mapping")
	}
}

func TestBehaviour27_SaturatedReplacementOmitsOnlyResidency(t *testing.T) {
	s := mustDcState(t, cfgN(1, 1))
	k := pSrc(1, 0)
	r := NewRankReplacement()
	var blocks []StoredBlock
	for i := uint64(0); i < 12; i++ {
		blocks = append(blocks, pBlk(i+1, 0x3000+i))
	}
	if err := r.PushStore(StoreData{Blocks: blocks}); err != nil {
		t.Fatal(err)
	}
	batch, err := s.ReplaceRank(k, r)
	if err != nil {
		t.Fatal(err)
	}
	if s.MemberBlockCount(k) != 12 || s.owners.Len() != 12 || s.ResidentCount() > 8 || s.LifetimeCapacityOmissions() == 0 {
		t.Fatalf("lineage %d owners %d resident %d omissions %d", s.MemberBlockCount(k), s.owners.Len(), s.ResidentCount(), s.LifetimeCapacityOmissions())
	}
	if s.LifetimeCapacityOmissions() != 12-s.ResidentCount() || len(batch) == 0 {
		t.Fatal("omission count / batch")
	}
	mustInvariants(t, s)
}

func TestBehaviour28_ReplacingSharedOwnerPublishesNothing(t *testing.T) {
	s := mustDcState(t, cfgN(64, 1))
	a, b := pSrc(1, 0), pSrc(2, 0)
	mustApplyEvent(t, s, storeEv(a, pBlk(1, 0x42)))
	mustApplyEvent(t, s, storeEv(b, pBlk(2, 0x42)))
	batch, err := s.ReplaceRank(b, replayReplacement(t, []RouterEvent{storeEv(b, pBlk(2, 0x42))}))
	if err != nil || batch != nil || s.HasPendingPublication() {
		t.Fatalf("batch %v err %v", batch, err)
	}
	if o, _ := s.Owners(0x42); o != 2 {
		t.Fatal("owners")
	}
}

func TestBehaviour29_ReplacementDiffIncludesPendingWindow(t *testing.T) {
	s := mustDcState(t, cfgN(256, 1000))
	a, b := pSrc(1, 0), pSrc(2, 0)
	mustApplyEvent(t, s, storeEv(a, pBlk(1, 11), pBlk(2, 22)))
	_, base, err := s.BarrierSnapshot() // last published image
	if err != nil {
		t.Fatal(err)
	}
	mustApplyEvent(t, s, storeEv(b, pBlk(5, 55)))     // pending, unpublished
	mustApplyEvent(t, s, removeEv(a, 2))              // pending, unpublished
	mustApplyEvent(t, s, storeEv(a, pBlk(3, 0x3333))) // pending
	batch, err := s.ReplaceRank(a, replayReplacement(t, []RouterEvent{storeEv(a, pBlk(1, 11), pBlk(7, 77))}))
	if err != nil {
		t.Fatal(err)
	}
	if err := prodCheckBatch(s.BucketCount(), batch); err != nil {
		t.Fatal(err)
	}
	prodApplyImages(base, batch)
	if !slices.Equal(base, s.CopyWords()) {
		t.Fatal("base + images != current words")
	}
}

func TestBehaviour30_ReplacementBackToPublishedPublishesNothing(t *testing.T) {
	s := mustDcState(t, cfgN(64, 1000))
	a := pSrc(1, 0)
	if _, _, err := s.BarrierSnapshot(); err != nil { // published: empty
		t.Fatal(err)
	}
	mustApplyEvent(t, s, storeEv(a, pBlk(1, 11)))
	batch, err := s.ReplaceRank(a, NewRankReplacement())
	if err != nil || batch != nil || s.HasPendingPublication() {
		t.Fatalf("batch %v err %v", batch, err)
	}
}

func TestBehaviour31_BatchedReplacementOfTwoRanks(t *testing.T) {
	s := mustDcState(t, cfgN(256, 1))
	a, b, c := pSrc(1, 0), pSrc(1, 1), pSrc(2, 0)
	mustApplyEvent(t, s, storeEv(a, pBlk(1, 11)))
	mustApplyEvent(t, s, storeEv(b, pBlk(2, 22)))
	mustApplyEvent(t, s, storeEv(c, pBlk(3, 33)))
	base := s.CopyWords()
	batch, err := s.ReplaceRanks(map[ckf.SourceKey]*RankReplacement{
		a: replayReplacement(t, []RouterEvent{storeEv(a, pBlk(4, 44))}),
		b: replayReplacement(t, []RouterEvent{storeEv(b, pBlk(5, 55))}),
	})
	if err != nil {
		t.Fatal(err)
	}
	if s.MemberBlockCount(c) != 1 || !s.Contains(33) || !s.Contains(44) || !s.Contains(55) {
		t.Fatal("retained rank or replacements missing")
	}
	if o, _ := s.Owners(11); o != 0 {
		t.Fatal("replaced content still owned")
	}
	if err := prodCheckBatch(s.BucketCount(), batch); err != nil || batch == nil {
		t.Fatalf("one batch expected: %v", err)
	}
	prodApplyImages(base, batch)
	if !slices.Equal(base, s.CopyWords()) {
		t.Fatal("single batch must reach the rebuilt state")
	}
	mustInvariants(t, s)
}

func TestBehaviour32_BarrierSnapshotPlusBatchesReconstruct(t *testing.T) {
	s := mustDcState(t, cfgN(64, 3))
	ks := []ckf.SourceKey{pSrc(1, 0), pSrc(2, 0), pSrc(2, 1)}
	for i := uint64(0); i < 40; i++ {
		s.ApplyEvent(storeEv(ks[i%3], pBlk(i, i*31+7)))
	}
	tail, words, err := s.BarrierSnapshot()
	if err != nil {
		t.Fatal(err)
	}
	_ = tail // belongs to the old stream
	for i := uint64(0); i < 200; i++ {
		var out EventOutcome
		switch i % 4 {
		case 0, 1:
			out = s.ApplyEvent(storeEv(ks[i%3], pBlk(1000+i, i*977+3)))
		case 2:
			out = s.ApplyEvent(removeEv(ks[i%3], i-40, 1000+i-2))
		default:
			out = s.ApplyEvent(storeEv(ks[(i+1)%3], pBlk(i/2, (i/2)*31+7)))
		}
		if err := prodCheckBatch(s.BucketCount(), out.Publication); err != nil {
			t.Fatal(err)
		}
		prodApplyImages(words, out.Publication)
	}
	prodApplyImages(words, s.Flush())
	if !slices.Equal(words, s.CopyWords()) {
		t.Fatal("snapshot + batches != producer words")
	}
	mustInvariants(t, s)
}

func TestBehaviour33_SnapshotAllocationFailurePreservesTail(t *testing.T) {
	s := mustDcState(t, cfgN(64, 100))
	mustApplyEvent(t, s, storeEv(pSrc(1, 0), pBlk(1, 11)))
	s.failReserve = func(x reserveSite) bool { return x == siteSnapshot }
	_, _, err := s.BarrierSnapshot()
	prodWantErr(t, err, ckf.ErrBuildAllocationFailed)
	if !s.HasPendingPublication() {
		t.Fatal("tail lost")
	}
	s.failReserve = nil
	tail, words, err := s.BarrierSnapshot()
	if err != nil || len(tail) != 1 || !slices.Equal(words, s.CopyWords()) {
		t.Fatalf("next snapshot: tail %v err %v", tail, err)
	}
}

func TestBehaviour34_ReplayChurnSameMembership(t *testing.T) {
	s := mustDcState(t, cfgN(32, 1))
	a, b := pSrc(1, 0), pSrc(2, 0)
	for i := uint64(0); i < 30; i++ {
		mustApplyEvent(t, s, storeEv(a, pBlk(i, 0x100+i)))
		if i%3 == 0 {
			mustApplyEvent(t, s, storeEv(b, pBlk(500+i, 0x100+i)))
		}
	}
	lin, own := lineageOf(s, a), ownersSnapshot(s)
	canon := sortedCanonicals(s)
	for i := uint64(0); i < 30; i += 2 {
		mustApplyEvent(t, s, removeEv(a, i))
	}
	for i := uint64(0); i < 30; i += 2 {
		mustApplyEvent(t, s, storeEv(a, pBlk(i, 0x100+i)))
	}
	if !maps.Equal(lin, lineageOf(s, a)) || !maps.Equal(own, ownersSnapshot(s)) || !slices.Equal(canon, sortedCanonicals(s)) {
		t.Fatal("churn changed lineage/ownership")
	}
	for _, c := range canon {
		if !s.Contains(c) {
			t.Fatal("churn lost membership")
		}
	}
	mustInvariants(t, s) // bytes may differ; not asserted
}

func TestBehaviour35_SameRepresentationBothPresent(t *testing.T) {
	s := mustDcState(t, cfgN(1, 1))
	h1, h2 := sameProbePair(t, s.Addressing())
	k := pSrc(1, 0)
	mustApplyEvent(t, s, storeEv(k, pBlk(1, h1)))
	mustApplyEvent(t, s, storeEv(k, pBlk(2, h2)))
	if s.ResidentCount() != 2 {
		t.Fatal("two residents")
	}
	mustApplyEvent(t, s, removeEv(k, 1))
	if !s.Contains(ckf.CanonicalHash(h2)) {
		t.Fatal("second hash lost when the first was removed")
	}
	mustApplyEvent(t, s, removeEv(k, 2))
	if s.Contains(ckf.CanonicalHash(h2)) || s.ResidentCount() != 0 {
		t.Fatal("not removed")
	}
	mustInvariants(t, s)
}

func TestRemoveWorkerAndRankForcedDrain(t *testing.T) {
	s := mustDcState(t, cfgN(64, 100))
	mustApplyEvent(t, s, storeEv(pSrc(1, 0), pBlk(1, 11)))
	mustApplyEvent(t, s, storeEv(pSrc(1, 1), pBlk(2, 22)))
	mustApplyEvent(t, s, storeEv(pSrc(2, 0), pBlk(3, 33)))
	batch, err := s.RemoveWorker(1)
	if err != nil || len(batch) == 0 || s.HasPendingPublication() {
		t.Fatalf("remove worker: %v %v", batch, err)
	}
	if !s.Contains(33) || len(s.lineage) != 1 {
		t.Fatal("other worker affected")
	}
	batch, err = s.RemoveRank(pSrc(2, 0))
	if err != nil || len(batch) != 1 || batch[0].Value != 0 || s.owners.Len() != 0 {
		t.Fatalf("remove rank: %v %v", batch, err)
	}
	if b, _ := s.RemoveRank(pSrc(9, 9)); b != nil {
		t.Fatal("unknown rank publishes nothing")
	}
	st := s.Stats()
	if st.MemberCount != 0 || st.FilterBytes != 8*s.BucketCount() || st.InsertionScratchCapacity != ckf.DefaultMaxKicks+1 {
		t.Fatalf("stats %+v", st)
	}
	if !errors.Is(s.ApplyEvent(RouterEvent{Event: KvCacheEvent{Kind: 0}}).FirstError, ckf.ErrInvalidBlockSequence) {
		t.Fatal("undefined kind")
	}
}

func zeroOutcome(o EventOutcome) bool {
	return o.FirstError == nil && o.Publication == nil && o.UnknownRemovals == 0 && !o.PublicationBoundary
}

type delegateLog struct{ created, removed []ckf.CanonicalHash }

func (d *delegateLog) OnCreate(c ckf.CanonicalHash) { d.created = append(d.created, c) }
func (d *delegateLog) OnRemove(c ckf.CanonicalHash) { d.removed = append(d.removed, c) }

func TestDelegateVariantObservesCanonicalLifecycle(t *testing.T) {
	log := &delegateLog{}
	s, err := NewDcStateWithDelegate(cfgN(64, 1), log)
	if err != nil {
		t.Fatal(err)
	}
	a, b := pSrc(1, 0), pSrc(2, 0)
	mustApplyEvent(t, s, storeEv(a, pBlk(1, 11), pBlk(2, 22)))
	mustApplyEvent(t, s, storeEv(b, pBlk(9, 11)))
	if len(log.created) != 2 || len(log.removed) != 0 {
		t.Fatalf("created %v", log.created)
	}
	mustApplyEvent(t, s, removeEv(a, 1))
	if len(log.removed) != 0 {
		t.Fatal("shared canonical still owned")
	}
	mustApplyEvent(t, s, removeEv(b, 9))
	if !slices.Equal(log.removed, []ckf.CanonicalHash{11}) {
		t.Fatalf("removed %v", log.removed)
	}
	log.created, log.removed = nil, nil
	if _, err := s.ReplaceRank(a, replayReplacement(t, []RouterEvent{storeEv(a, pBlk(5, 55))})); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(log.created, []ckf.CanonicalHash{55}) || !slices.Equal(log.removed, []ckf.CanonicalHash{ckf.CanonicalChild(11, 22)}) {
		t.Fatalf("rebuild delegate calls: created %v removed %v", log.created, log.removed)
	}
	mustInvariants(t, s)
}
