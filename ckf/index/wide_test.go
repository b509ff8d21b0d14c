package index

import (
	"errors"
	"fmt"
	"math/bits"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/ckf/producer"
	"pgregory.net/rapid"
)

// Tests of the lane counts beyond the reference's 16 (consumer §16).

// The global.rs ports of consumer §12 (and the query tests) at tables of 4
// and 64 lanes: the same lanes configured, rows of 4 and 64 words. A case
// that configures more lanes than the table has is skipped there.
func TestIngestorSpecCasesAtWidths(t *testing.T) {
	cases := map[string]func(*testing.T){
		"ManifestRejectsMixedDomainAndDuplicatePool":         TestManifestRejectsMixedDomainAndDuplicatePool,
		"ClosedIngestorNeverWrites":                          TestClosedIngestorNeverWrites,
		"IngestorCloseReleasesLane":                          TestIngestorCloseReleasesLane,
		"IngestorScratchSizedInBitmapWords":                  TestIngestorScratchSizedInBitmapWords,
		"SnapshotActivatesAndReassignClearsReadinessFirst":   TestSnapshotActivatesAndReassignClearsReadinessFirst,
		"ValidDeltaAdvancesSequenceAndWritesWord":            TestValidDeltaAdvancesSequenceAndWritesWord,
		"StaleSnapshotCannotRollBackActiveLane":              TestStaleSnapshotCannotRollBackActiveLane,
		"NewerSnapshotOnActiveLaneDeactivatesWithoutWrites":  TestNewerSnapshotOnActiveLaneDeactivatesWithoutWrites,
		"QueryResultCarriesPoolLaneAndMask":                  TestQueryResultCarriesPoolLaneAndMask,
		"QueryUnavailableWhenNothingReady":                   TestQueryUnavailableWhenNothingReady,
		"DuplicateAndStaleDeltasIgnoredWithoutWrites":        TestDuplicateAndStaleDeltasIgnoredWithoutWrites,
		"ForwardGapDeactivatesWithGapDisposition":            TestForwardGapDeactivatesWithGapDisposition,
		"InactiveSnapshotFailureIsRetryableOnSameLease":      TestInactiveSnapshotFailureIsRetryableOnSameLease,
		"NonContiguousSequenceDeactivates":                   TestNonContiguousSequenceDeactivates,
		"InvalidAndDuplicateImageIndicesRejectedBeforeWrite": TestInvalidAndDuplicateImageIndicesRejectedBeforeWrite,
		"EmptyDeltaIsMalformed":                              TestEmptyDeltaIsMalformed,
		"WrongIdentityOnCurrentLeaseDeactivatesBeforeWrite":  TestWrongIdentityOnCurrentLeaseDeactivatesBeforeWrite,
		"SupersededLeaseTrafficIgnored":                      TestSupersededLeaseTrafficIgnored,
		"WrongSizeSnapshotOnActiveLaneDeactivates":           TestWrongSizeSnapshotOnActiveLaneDeactivates,
		"DrainMarkerDetectsDroppedFinalDelta":                TestDrainMarkerDetectsDroppedFinalDelta,
		"AssignmentEpochStrictlyIncreasesAcrossRetire":       TestAssignmentEpochStrictlyIncreasesAcrossRetire,
		"AssignmentValidationOrderAndNoChange":               TestAssignmentValidationOrderAndNoChange,
		"IngestorRowPrecedence":                              TestIngestorRowPrecedence,
		"QueryDoesNotAllocate":                               TestQueryDoesNotAllocate,
	}
	defer func() { fixtureWidth = ckf.LaneCount }()
	for _, width := range []int{4, 64} {
		fixtureWidth = width
		for name, run := range cases {
			t.Run(fmt.Sprintf("lanes=%d/%s", width, name), run)
		}
	}
}

func TestNewManifestNLaneCount(t *testing.T) {
	d := testDomainOf(ckf.IdentityExplicit)
	format := ckf.NewFormatIdentity(ckf.DefaultSeed, 64)
	for _, n := range []int{0, ckf.MaxLanes + 1} {
		_, _, err := NewManifestN(testConsumer, d, format, make([]*ckf.PoolID, n))
		var me *ManifestError
		if !errors.Is(err, ErrInvalidLaneCount) || !errors.As(err, &me) || me.Lanes != n {
			t.Fatalf("%d lanes: %v", n, err)
		}
	}
	f := newFixtureN(t, 4, 4, 64, 2)
	if f.m.LaneCount() != 4 || f.g.LaneCount() != 4 || f.g.RowWords() != 4 || len(f.g.table.words) != 4*64 {
		t.Fatalf("4 lanes: lane count %d, row words %d", f.g.LaneCount(), f.g.RowWords())
	}
	if _, err := f.g.ClaimLane(4); !errors.Is(err, ErrInvalidLane) {
		t.Fatalf("lane 4 of 4: %v", err)
	}
	if f16 := newFixture(t, 1, 64, 2); f16.m.LaneCount() != ckf.LaneCount || f16.g.RowWords() != ckf.LaneCount {
		t.Fatal("NewManifest must keep 16 lanes of 16 words")
	}
	w := newFixtureN(t, 64, 64, 64, 2)
	if w.m.ConfiguredLanes64() != ^uint64(0) || w.m.ConfiguredLanes() != 0xFFFF {
		t.Fatalf("configured %x / %x", w.m.ConfiguredLanes64(), w.m.ConfiguredLanes())
	}
	if l, ok := w.m.LaneOf(w.pools[63]); !ok || l != 63 {
		t.Fatalf("LaneOf lane 63: %d %v", l, ok)
	}
	if p, ok := w.m.PoolOf(63); !ok || p != w.pools[63] {
		t.Fatal("PoolOf 63")
	}
	in := w.readyLane(63, 1, 0, nil)
	defer in.Close()
	if w.g.ReadyLanes64() != 1<<63 || w.g.ReadyLanes() != 0 || w.g.ClaimedLanes64() != 1<<63 {
		t.Fatalf("ready %x claimed %x", w.g.ReadyLanes64(), w.g.ClaimedLanes64())
	}
	// The 16-lane result cannot hold lane 63: a refusal, never a truncated mask.
	if _, err := w.g.FindPrefixMatches([]uint64{1}); !errors.Is(err, ErrLanesBeyond16) {
		t.Fatalf("16-lane query of a 64-lane manifest: %v", err)
	}
	res, err := w.g.FindPrefixMatches64(nil, nil)
	if err != nil || res.ReadyLanes != 1<<63 {
		t.Fatalf("empty wide query: %v %x", err, res.ReadyLanes)
	}
	if d, ok := res.Depth(63); !ok || d != 0 {
		t.Fatal("lane 63 captured at depth 0")
	}
	w.g.WithdrawReady64(1 << 63)
	if _, err := w.g.FindPrefixMatches64([]uint64{1}, nil); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("nothing ready: %v", err)
	}
}

// The production query at every width equals the linear reference over the
// per-lane scalar probe on random tables where each lane holds a chain to its
// own depth; at 16 lanes or fewer the 16-lane API answers the same.
func TestWideQueryEqualsLinearAtEveryWidth(t *testing.T) {
	const buckets = 1 << 10
	r := rand.New(rand.NewPCG(64, 65))
	for _, width := range testWidths {
		f := newFixtureN(t, width, width, buckets, ckf.DefaultVerificationWindow)
		chain := make([]uint64, 100)
		for i := range chain {
			chain[i] = r.Uint64()
		}
		var ready uint64
		for l := 0; l < width; l++ {
			if r.IntN(5) == 0 {
				continue // left unready
			}
			words := make([]uint64, buckets)
			insertChain(f.g.addr, words, chain[:r.IntN(len(chain)+1)])
			in := f.readyLane(uint8(l), 1, 0, words)
			defer in.Close()
			ready |= 1 << uint(l)
		}
		if ready == 0 {
			continue
		}
		var scratch []uint64
		for _, n := range []int{0, 1, 7, 64, 100} {
			got, err := f.g.FindPrefixMatches64(chain[:n], &scratch)
			if err != nil || got.ReadyLanes != ready {
				t.Fatalf("width %d: %v ready %x want %x", width, err, got.ReadyLanes, ready)
			}
			seq := ckf.SequenceHashes(chain[:n])
			want := ckf.LinearPrefixDepths64(n, ready, func(pos int) uint64 {
				p := f.g.addr.Probe(seq[pos])
				return probeRowsRefN(f.g.table.rowWords(p.BucketA), f.g.table.rowWords(p.BucketB), p.Fingerprint)
			})
			if got.Depths != want {
				t.Fatalf("width %d n %d: got %v want %v", width, n, got.Depths, want)
			}
			if width <= ckf.LaneCount {
				narrow, err := f.g.FindPrefixMatches(chain[:n])
				if err != nil || uint64(narrow.ReadyLanes) != ready || [ckf.LaneCount]uint32(got.Depths[:ckf.LaneCount]) != narrow.Depths() {
					t.Fatalf("width %d: 16-lane API %v %v", width, err, narrow.Depths())
				}
			}
		}
	}
}

// T11 at 64 lanes: a wide query does not allocate.
func TestWideQueryDoesNotAllocate(t *testing.T) {
	f := newFixtureN(t, 64, 64, 1024, 2)
	local := make([]uint64, 200)
	for i := range local {
		local[i] = uint64(i)*31 + 7
	}
	words := make([]uint64, 1024)
	insertChain(f.g.addr, words, local[:100])
	for _, l := range []uint8{0, 17, 40, 63} {
		in := f.readyLane(l, 1, 0, words)
		defer in.Close()
	}
	var scratch []uint64
	for _, sc := range []*[]uint64{nil, &scratch} {
		allocs := testing.AllocsPerRun(50, func() {
			res, err := f.g.FindPrefixMatches64(local, sc)
			if err != nil || res.Depths[63] < 100 {
				t.Fatal(err, res.Depths[63])
			}
		})
		if allocs != 0 {
			t.Fatalf("FindPrefixMatches64: %v allocs per query", allocs)
		}
	}
}

// Producer → consumer convergence at 64 lanes: random event streams through
// one producer DcState per lane, on lanes drawn anywhere in 0..63, reach the
// lanes as a snapshot and then deltas (one per flush). After the last
// delta every used lane's words equal its producer's words, every other
// lane is untouched, and a query over any stored chain reports, per lane,
// no less than the chain's resident prefix in that lane's producer and no
// more than its length.
func TestPropProducerConsumerConvergenceWide(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		buckets := rapid.SampledFrom([]uint64{16, 64, 256}).Draw(rt, "buckets")
		f := newFixtureN(t, ckf.MaxLanes, ckf.MaxLanes, buckets, ckf.DefaultVerificationWindow)
		nl := rapid.IntRange(1, 6).Draw(rt, "lanes")
		used := map[uint8]bool{63: true}
		for len(used) < nl {
			used[uint8(rapid.IntRange(0, 63).Draw(rt, "lane"))] = true
		}
		type laneState struct {
			st  *producer.DcState
			in  *LaneIngestor
			seq uint64
		}
		lanes := map[uint8]*laneState{}
		var usedMask uint64
		for l := range used {
			cfg := adapterConfig(t, buckets)
			cfg.PublishEveryNEvents = 1 << 30 // deltas are cut by Flush
			st, err := producer.NewDcState(cfg)
			if err != nil {
				rt.Fatal(err)
			}
			lanes[l] = &laneState{st: st, in: f.readyLane(l, 1, 0, st.CopyWords())}
			usedMask |= 1 << l
		}
		defer func() {
			for _, ls := range lanes {
				ls.in.Close()
			}
		}()
		order := slices.Sorted(func(yield func(uint8) bool) {
			for l := range lanes {
				if !yield(l) {
					return
				}
			}
		})
		var chains [][]uint64
		ext := uint64(1)
		flush := func(ls *laneState) {
			images := ls.st.Flush()
			if len(images) == 0 {
				return
			}
			d := f.delta(ls.in.Lane(), 1, ls.seq, ls.seq+1, images...)
			if out := ls.in.ApplyDelta(d); out.Kind != OutcomeDeltaApplied {
				rt.Fatalf("lane %d delta %d: %v", ls.in.Lane(), ls.seq+1, out)
			}
			ls.seq++
		}
		for i, steps := 0, rapid.IntRange(1, 40).Draw(rt, "steps"); i < steps; i++ {
			ls := lanes[rapid.SampledFrom(order).Draw(rt, "to")]
			var chain []uint64
			if len(chains) > 0 && rapid.Bool().Draw(rt, "reuse") {
				chain = rapid.SampledFrom(chains).Draw(rt, "chain")
			} else {
				for k := rapid.IntRange(1, 8).Draw(rt, "len"); k > 0; k-- {
					chain = append(chain, uint64(rapid.IntRange(1, 30).Draw(rt, "tok")))
				}
				chains = append(chains, chain)
			}
			ev := producer.RouterEvent{WorkerID: 1, StorageTier: producer.StorageTierDevice, Event: producer.KvCacheEvent{Kind: producer.KvEventStored}}
			for _, tok := range chain {
				ev.Event.Stored.Blocks = append(ev.Event.Stored.Blocks, producer.StoredBlock{BlockHash: ckf.ExternalBlockHash(ext), TokensHash: ckf.LocalBlockHash(tok)})
				ext++
			}
			if rapid.IntRange(0, 4).Draw(rt, "remove") == 0 {
				ev.Event = producer.KvCacheEvent{Kind: producer.KvEventRemoved, Removed: []ckf.ExternalBlockHash{ckf.ExternalBlockHash(ext - 1)}}
			}
			ls.st.ApplyEvent(ev)
			if rapid.IntRange(0, 2).Draw(rt, "flush") == 0 {
				flush(ls)
			}
		}
		for _, l := range order {
			flush(lanes[l])
		}
		for l := 0; l < ckf.MaxLanes; l++ {
			got := f.g.LaneWords(uint8(l))
			if ls, ok := lanes[uint8(l)]; ok {
				if !slices.Equal(got, ls.st.CopyWords()) {
					rt.Fatalf("lane %d words differ from its producer's", l)
				}
			} else if slices.ContainsFunc(got, func(w uint64) bool { return w != 0 }) {
				rt.Fatalf("unused lane %d was written", l)
			}
		}
		for _, chain := range chains {
			res, err := f.g.FindPrefixMatches64(chain, nil)
			if err != nil || res.ReadyLanes != usedMask {
				rt.Fatalf("query: %v ready %x want %x", err, res.ReadyLanes, usedMask)
			}
			for m := usedMask; m != 0; m &= m - 1 {
				l := bits.TrailingZeros64(m)
				resident := 0
				for _, h := range ckf.SequenceHashes(chain) {
					if _, ok := lanes[uint8(l)].st.Owners(ckf.CanonicalHash(h)); !ok {
						break
					}
					resident++
				}
				if d := int(res.Depths[l]); d < resident || d > len(chain) {
					rt.Fatalf("lane %d chain %v: depth %d, resident prefix %d", l, chain, d, resident)
				}
			}
		}
	})
}
