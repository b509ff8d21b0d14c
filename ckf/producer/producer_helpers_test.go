package producer

import (
	"errors"
	"fmt"
	"maps"
	"testing"

	"github.com/ckf-stream/ckf-stream/ckf"
)

// Test helpers shared by the producer tests (dcstate_test.go,
// publisher_test.go, producer_prop_test.go, producer_fuzz_test.go).

func pSrc(w ckf.WorkerID, r ckf.DpRank) ckf.SourceKey { return ckf.SourceKey{Worker: w, Rank: r} }

func pBlk(ext, tok uint64) StoredBlock {
	return StoredBlock{BlockHash: ckf.ExternalBlockHash(ext), TokensHash: ckf.LocalBlockHash(tok)}
}

func storeEv(k ckf.SourceKey, blocks ...StoredBlock) RouterEvent {
	return RouterEvent{WorkerID: k.Worker, Event: KvCacheEvent{DpRank: k.Rank, Kind: KvEventStored, Stored: StoreData{Blocks: blocks}}}
}

func storeChildEv(k ckf.SourceKey, parent uint64, blocks ...StoredBlock) RouterEvent {
	ev := storeEv(k, blocks...)
	ev.Event.Stored.HasParent = true
	ev.Event.Stored.ParentHash = ckf.ExternalBlockHash(parent)
	return ev
}

func removeEv(k ckf.SourceKey, ids ...uint64) RouterEvent {
	ext := make([]ckf.ExternalBlockHash, len(ids))
	for i, id := range ids {
		ext[i] = ckf.ExternalBlockHash(id)
	}
	return RouterEvent{WorkerID: k.Worker, Event: KvCacheEvent{DpRank: k.Rank, Kind: KvEventRemoved, Removed: ext}}
}

func clearEv(k ckf.SourceKey) RouterEvent {
	return RouterEvent{WorkerID: k.Worker, Event: KvCacheEvent{DpRank: k.Rank, Kind: KvEventCleared}}
}

// prodFataler is the subset of testing.TB that *rapid.T also implements.
type prodFataler interface {
	Helper()
	Fatalf(format string, args ...any)
}

func mustDcState(t prodFataler, cfg ckf.CkfConfig) *DcState {
	t.Helper()
	s, err := NewDcState(cfg)
	if err != nil {
		t.Fatalf("NewDcState: %v", err)
	}
	return s
}

// cfgN returns the defaults for n expected blocks with the given cadence.
func cfgN(n, every uint64) ckf.CkfConfig {
	c := ckf.NewCkfConfig(n)
	c.PublishEveryNEvents = every
	return c
}

func mustApplyEvent(t testing.TB, s *DcState, ev RouterEvent) EventOutcome {
	t.Helper()
	out := s.ApplyEvent(ev)
	if out.FirstError != nil {
		t.Fatalf("ApplyEvent(%+v): unexpected error %v", ev, out.FirstError)
	}
	return out
}

func prodWantErr(t testing.TB, got, want error) {
	t.Helper()
	if !errors.Is(got, want) {
		t.Fatalf("error = %v, want %v", got, want)
	}
}

// checkInvariants verifies the DcState ownership invariants (producer §7.1) by
// recomputing everything from the lineage.
func checkInvariants(s *DcState) error {
	counts := make(map[ckf.CanonicalHash]uint64)
	var contributions uint64
	for k, lin := range s.lineage {
		if lin.Len() == 0 {
			return fmt.Errorf("source %v has an empty lineage entry", k)
		}
		for _, c := range lin.All() {
			counts[c]++
			contributions++
		}
	}
	if contributions != s.contributions {
		return fmt.Errorf("contributions %d, recomputed %d", s.contributions, contributions)
	}
	if len(counts) != s.owners.Len() {
		return fmt.Errorf("owner entries %d, canonicals in lineage %d", s.owners.Len(), len(counts))
	}
	var resident uint64
	for c, e := range s.owners.All() {
		if e.owners() == 0 {
			return fmt.Errorf("canonical %#x has a zero-owner entry", uint64(c))
		}
		if uint64(e.owners()) != counts[c] {
			return fmt.Errorf("canonical %#x owners %d, mappings %d", uint64(c), e.owners(), counts[c])
		}
		if e.resident {
			resident++
			if !s.Contains(c) {
				return fmt.Errorf("resident canonical %#x not found by Contains", uint64(c))
			}
		}
	}
	if resident != s.residentCount {
		return fmt.Errorf("resident count %d, recomputed %d", s.residentCount, resident)
	}
	var slots uint64
	for _, w := range s.filter.words {
		slots += uint64(ckf.Bucket(w).Occupied())
	}
	if slots != s.residentCount {
		return fmt.Errorf("occupied slots %d, resident count %d", slots, s.residentCount)
	}
	// Window consistency.
	if len(s.win.dirty) != len(s.win.orig) {
		return fmt.Errorf("dirty list %d vs originals %d", len(s.win.dirty), len(s.win.orig))
	}
	seen := make(map[uint64]bool)
	for _, b := range s.win.dirty {
		if seen[b] || !s.win.marked(b) || b >= s.format.BucketCount {
			return fmt.Errorf("dirty bucket %d duplicated, unmarked or out of range", b)
		}
		seen[b] = true
	}
	var bits int
	for _, w := range s.win.bits {
		for ; w != 0; w &= w - 1 {
			bits++
		}
	}
	if bits != len(s.win.dirty) {
		return fmt.Errorf("dirty bitmap has %d bits, list %d", bits, len(s.win.dirty))
	}
	return nil
}

func mustInvariants(t testing.TB, s *DcState) {
	t.Helper()
	if err := checkInvariants(s); err != nil {
		t.Fatal(err)
	}
}

// prodCheckBatch verifies the consumer's batch rules: non-empty, unique
// in-range buckets.
func prodCheckBatch(bucketCount uint64, images []ckf.BucketImage) error {
	if images == nil {
		return nil
	}
	if len(images) == 0 {
		return errors.New("empty non-nil batch")
	}
	seen := make(map[uint64]bool, len(images))
	for _, im := range images {
		if im.Bucket >= bucketCount || seen[im.Bucket] {
			return fmt.Errorf("bucket %d out of range or duplicated", im.Bucket)
		}
		seen[im.Bucket] = true
	}
	return nil
}

func prodApplyImages(words []uint64, images []ckf.BucketImage) {
	for _, im := range images {
		words[im.Bucket] = im.Value
	}
}

// lineageOf copies source k's lineage into a Go map, for comparisons.
func lineageOf(s *DcState, k ckf.SourceKey) map[ckf.ExternalBlockHash]ckf.CanonicalHash {
	return maps.Collect(s.lineage[k].All())
}

// allLineages copies every source's lineage into Go maps, for comparisons.
func allLineages(s *DcState) map[ckf.SourceKey]map[ckf.ExternalBlockHash]ckf.CanonicalHash {
	out := make(map[ckf.SourceKey]map[ckf.ExternalBlockHash]ckf.CanonicalHash, len(s.lineage))
	for k, lin := range s.lineage {
		out[k] = maps.Collect(lin.All())
	}
	return out
}

// ownersSnapshot copies the ownership records into a Go map, for comparisons.
func ownersSnapshot(s *DcState) map[ckf.CanonicalHash]ownerEntry { return maps.Collect(s.owners.All()) }

func sortedCanonicals(s *DcState) []ckf.CanonicalHash { return sortedCanonicalKeys(&s.owners) }

// fillTwoBucketState returns a 2-bucket state (expected 1) whose eight
// slots are full, owned by source k through externals 1000..1007, with the
// window drained.
func fillTwoBucketState(t testing.TB, k ckf.SourceKey, maxKicks uint64) *DcState {
	t.Helper()
	cfg := cfgN(1, 1)
	cfg.MaxKicks = maxKicks
	s := mustDcState(t, cfg)
	if s.BucketCount() != 2 {
		t.Fatalf("bucket count %d", s.BucketCount())
	}
	for i := uint64(0); i < 8; i++ {
		mustApplyEvent(t, s, storeEv(k, pBlk(1000+i, 0xF111_0000+i)))
	}
	if s.residentCount != 8 {
		t.Fatalf("resident %d after 8 stores into 8 slots", s.residentCount)
	}
	return s
}

// prodRecordingSink records enqueued deltas; failNext makes the next Enqueue
// fail.
type prodRecordingSink struct {
	deltas   []ckf.Delta
	failNext int
	err      error
}

func (r *prodRecordingSink) Enqueue(d ckf.Delta) error {
	if r.failNext > 0 {
		r.failNext--
		if r.err != nil {
			return r.err
		}
		return errors.New("sink refused")
	}
	r.deltas = append(r.deltas, d)
	return nil
}

func prodIdentity(bucketCount uint64) ckf.ProducerIdentity {
	return ckf.ProducerIdentity{
		Pool: ckf.PoolID{
			Domain: ckf.IndexerDomainID{
				CacheSemantics: ckf.CacheSemanticsID{Digest: ckf.Digest128{1}, Source: ckf.IdentityExplicit},
				RoutingScope:   ckf.RoutingScopeID{Digest: ckf.Digest128{2}, Source: ckf.IdentityExplicit},
			},
			Dc: 7,
		},
		Incarnation:      4,
		LayoutGeneration: 1,
		Format:           ckf.NewFormatIdentity(ckf.DefaultSeed, bucketCount),
	}
}
