package workers

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/ckf/producer"
)

// The behaviour list of workers §9, one test each, ported from the crate's local-indexer tests
// (radix_tree.rs, positional.rs, lower_tier.rs, indexer/tests.rs) in this package's terms.

// ev builds events for one source; ext ids are the canonical hashes, as engines that hash
// like the router emit them.
type src struct {
	w    ckf.WorkerID
	r    ckf.DpRank
	tier producer.StorageTier
}

func (s src) store(parent []ckf.LocalBlockHash, blocks ...ckf.LocalBlockHash) producer.RouterEvent {
	chain := canonicals(append(slices.Clone(parent), blocks...))
	ev := producer.RouterEvent{WorkerID: s.w, StorageTier: s.tier}
	ev.Event.DpRank, ev.Event.Kind = s.r, producer.KvEventStored
	if len(parent) > 0 {
		ev.Event.Stored.HasParent, ev.Event.Stored.ParentHash = true, ckf.ExternalBlockHash(chain[len(parent)-1])
	}
	for i, b := range blocks {
		ev.Event.Stored.Blocks = append(ev.Event.Stored.Blocks, producer.StoredBlock{
			BlockHash: ckf.ExternalBlockHash(chain[len(parent)+i]), TokensHash: b})
	}
	return ev
}

// remove removes the blocks at positions of the chain.
func (s src) remove(chain []ckf.LocalBlockHash, positions ...int) producer.RouterEvent {
	c := canonicals(chain)
	ev := producer.RouterEvent{WorkerID: s.w, StorageTier: s.tier}
	ev.Event.DpRank, ev.Event.Kind = s.r, producer.KvEventRemoved
	for _, p := range positions {
		ev.Event.Removed = append(ev.Event.Removed, ckf.ExternalBlockHash(c[p]))
	}
	return ev
}

func (s src) clear() producer.RouterEvent {
	ev := producer.RouterEvent{WorkerID: s.w, StorageTier: s.tier}
	ev.Event.DpRank, ev.Event.Kind = s.r, producer.KvEventCleared
	return ev
}

func (s src) key() ckf.SourceKey { return ckf.SourceKey{Worker: s.w, Rank: s.r} }

func mustApply(t *testing.T, ix *Index, evs ...producer.RouterEvent) {
	t.Helper()
	for _, e := range evs {
		if err := ix.Apply(e); err != nil {
			t.Fatalf("apply %+v: %v", e, err)
		}
	}
}

// depths returns source -> device depth for query.
func depths(ix *Index, query ...ckf.LocalBlockHash) map[ckf.SourceKey]uint32 {
	var r Result
	ix.Match(canonicals(query), Options{}, &r)
	out := map[ckf.SourceKey]uint32{}
	for _, m := range r.Matches {
		if m.Device > 0 {
			out[m.Source] = m.Device
		}
	}
	return out
}

func matchOf(ix *Index, s src, query ...ckf.LocalBlockHash) Match {
	var r Result
	ix.Match(canonicals(query), Options{}, &r)
	for _, m := range r.Matches {
		if m.Source == s.key() {
			return m
		}
	}
	return Match{Source: s.key()}
}

func wantDepths(t *testing.T, got map[ckf.SourceKey]uint32, want map[ckf.SourceKey]uint32) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("depths %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("depths %v, want %v", got, want)
		}
	}
}

var (
	w0 = src{w: 0}
	w1 = src{w: 1}
	w2 = src{w: 2}
)

// TestStoreAndFind (tests.rs test_store_and_find): a stored chain matches in full.
func TestStoreAndFind(t *testing.T) {
	ix := New()
	mustApply(t, ix, w0.store(nil, 1, 2, 3))
	wantDepths(t, depths(ix, 1, 2, 3), map[ckf.SourceKey]uint32{w0.key(): 3})
}

// TestPartialMatch (test_partial_match): a query that diverges scores the common prefix.
func TestPartialMatch(t *testing.T) {
	ix := New()
	mustApply(t, ix, w0.store(nil, 1, 2, 3))
	wantDepths(t, depths(ix, 1, 2, 9), map[ckf.SourceKey]uint32{w0.key(): 2})
}

// TestEmptyAndMissQuery (test_empty_query, test_miss_query): no blocks or an unknown first block
// answer nothing.
func TestEmptyAndMissQuery(t *testing.T) {
	ix := New()
	mustApply(t, ix, w0.store(nil, 1, 2, 3))
	wantDepths(t, depths(ix), map[ckf.SourceKey]uint32{})
	wantDepths(t, depths(ix, 9, 1, 2), map[ckf.SourceKey]uint32{})
}

// TestRemoveLastBlock (test_remove, test_partial_block_removal): removing the tail shortens the
// depth; the prefix still matches in full.
func TestRemoveLastBlock(t *testing.T) {
	ix := New()
	chain := []ckf.LocalBlockHash{1, 2, 3}
	mustApply(t, ix, w0.store(nil, chain...), w0.remove(chain, 2))
	wantDepths(t, depths(ix, 1, 2, 3), map[ckf.SourceKey]uint32{w0.key(): 2})
	wantDepths(t, depths(ix, 1, 2), map[ckf.SourceKey]uint32{w0.key(): 2})
}

// TestRemoveMidChainBlock (test_remove_mid_chain_block): removing block 3 of 1..5 stops the
// depth at 2; re-storing block 3 makes the source hold 1..5 again, so the depth is 5, where
// the crate's trees answer 3 (they orphan 4 and 5 within one compressed edge): workers §3.4's
// stated difference.
func TestRemoveMidChainBlock(t *testing.T) {
	ix := New()
	chain := []ckf.LocalBlockHash{1, 2, 3, 4, 5}
	mustApply(t, ix, w0.store(nil, chain...), w0.remove(chain, 2))
	wantDepths(t, depths(ix, chain...), map[ckf.SourceKey]uint32{w0.key(): 2})
	wantDepths(t, depths(ix, 1, 2), map[ckf.SourceKey]uint32{w0.key(): 2})
	mustApply(t, ix, w0.store([]ckf.LocalBlockHash{1, 2}, 3))
	wantDepths(t, depths(ix, chain...), map[ckf.SourceKey]uint32{w0.key(): 5})
}

// TestMultipleWorkersSharedPrefix (test_multiple_workers_shared_prefix): two workers share a
// prefix and diverge; each scores its own chain.
func TestMultipleWorkersSharedPrefix(t *testing.T) {
	ix := New()
	mustApply(t, ix, w0.store(nil, 1, 2, 3), w1.store(nil, 1, 2, 4))
	wantDepths(t, depths(ix, 1, 2, 3), map[ckf.SourceKey]uint32{w0.key(): 3, w1.key(): 2})
	wantDepths(t, depths(ix, 1, 2, 4), map[ckf.SourceKey]uint32{w0.key(): 2, w1.key(): 3})
}

// TestParentHashChains (test_parent_hash_chains, test_long_sequence_deep_continuation_chain):
// stores that continue from a parent extend the chain.
func TestParentHashChains(t *testing.T) {
	ix := New()
	mustApply(t, ix, w0.store(nil, 1, 2), w0.store([]ckf.LocalBlockHash{1, 2}, 3, 4),
		w0.store([]ckf.LocalBlockHash{1, 2, 3, 4}, 5))
	wantDepths(t, depths(ix, 1, 2, 3, 4, 5, 6), map[ckf.SourceKey]uint32{w0.key(): 5})
}

// TestRemoveWorker (test_remove_worker, remove_worker_drops_all_ranks): removing a worker drops
// every rank and no other worker.
func TestRemoveWorker(t *testing.T) {
	ix := New()
	w0r1 := src{w: 0, r: 1}
	mustApply(t, ix, w0.store(nil, 1, 2), w0r1.store(nil, 1, 2), w1.store(nil, 1))
	if n := ix.RemoveWorker(0); n != 2 {
		t.Fatalf("RemoveWorker dropped %d sources, want 2", n)
	}
	wantDepths(t, depths(ix, 1, 2), map[ckf.SourceKey]uint32{w1.key(): 1})
}

// TestMultipleDpRanks (test_multiple_dp_ranks): ranks of one worker are separate sources.
func TestMultipleDpRanks(t *testing.T) {
	ix := New()
	r1 := src{w: 0, r: 1}
	mustApply(t, ix, w0.store(nil, 1, 2, 3), r1.store(nil, 1, 2))
	wantDepths(t, depths(ix, 1, 2, 3), map[ckf.SourceKey]uint32{w0.key(): 3, r1.key(): 2})
}

// TestClearOnlyRemovesTargetRank (test_clear_only_removes_target_dp_rank,
// test_remove_worker_dp_rank_only_clears_target_rank, cleared_event_only_removes_target_dp_rank).
func TestClearOnlyRemovesTargetRank(t *testing.T) {
	ix := New()
	r1 := src{w: 0, r: 1}
	mustApply(t, ix, w0.store(nil, 1, 2), r1.store(nil, 1, 2), r1.clear())
	wantDepths(t, depths(ix, 1, 2), map[ckf.SourceKey]uint32{w0.key(): 2})
}

// TestClearThenReuse (test_clear_then_reuse, test_long_sequence_clear_and_rebuild): a cleared
// source stores again from scratch.
func TestClearThenReuse(t *testing.T) {
	ix := New()
	mustApply(t, ix, w0.store(nil, 1, 2, 3), w0.clear(), w0.store(nil, 1, 2))
	wantDepths(t, depths(ix, 1, 2, 3), map[ckf.SourceKey]uint32{w0.key(): 2})
}

// TestClearRemovesLowerTiers (cleared_event_removes_all_lower_tier_state,
// cleared_event_preserves_shared_edges_for_other_workers): a worker-domain clear drops the
// source on every tier; other holders of the same blocks keep them.
func TestClearRemovesLowerTiers(t *testing.T) {
	ix := New()
	h0, h1 := src{w: 0, tier: producer.StorageTierHostPinned}, src{w: 1, tier: producer.StorageTierHostPinned}
	mustApply(t, ix, w0.store(nil, 1), h0.store([]ckf.LocalBlockHash{1}, 2), h1.store(nil, 1, 2), w0.clear())
	if m := matchOf(ix, w0, 1, 2); m.Total() != 0 {
		t.Fatalf("cleared source still answers %+v", m)
	}
	if m := matchOf(ix, w1, 1, 2); m.HostPinned != 2 {
		t.Fatalf("other worker's host run %+v, want 2", m)
	}
}

// TestRemoveNonexistent (test_remove_nonexistent_worker, test_remove_nonexistent_blocks): removals
// of unknown sources or ids change nothing and are counted.
func TestRemoveNonexistent(t *testing.T) {
	ix := New()
	chain := []ckf.LocalBlockHash{1, 2}
	mustApply(t, ix, w0.store(nil, chain...), w1.remove(chain, 0), w0.remove([]ckf.LocalBlockHash{7}, 0), w2.clear())
	ix.RemoveWorker(9)
	wantDepths(t, depths(ix, 1, 2), map[ckf.SourceKey]uint32{w0.key(): 2})
	tel := ix.Telemetry()
	if tel.UnknownRemovals != 2 || tel.UnknownSources != 3 {
		t.Fatalf("telemetry %+v: want 2 unknown removals, 3 unknown sources", tel)
	}
}

// TestDuplicateStore (test_duplicate_store_replay_warns_without_error,
// duplicate_store_is_idempotent_for_remove): a replayed store is counted and changes nothing;
// one removal then removes the block.
func TestDuplicateStore(t *testing.T) {
	ix := New()
	chain := []ckf.LocalBlockHash{1, 2}
	mustApply(t, ix, w0.store(nil, chain...), w0.store(nil, chain...))
	if d := ix.Telemetry().DuplicateBlocks; d != 2 {
		t.Fatalf("duplicates %d, want 2", d)
	}
	mustApply(t, ix, w0.remove(chain, 1))
	wantDepths(t, depths(ix, 1, 2), map[ckf.SourceKey]uint32{w0.key(): 1})
}

// TestMissingParentRejected (test_shared_prefix_branch_rejects_invalid_suffix_parent): a store
// whose parent the source never stored fails with ParentBlockNotFound and changes nothing.
func TestMissingParentRejected(t *testing.T) {
	ix := New()
	mustApply(t, ix, w0.store(nil, 1, 2))
	err := ix.Apply(w1.store([]ckf.LocalBlockHash{1, 2}, 3))
	if !errors.Is(err, ckf.ErrParentBlockNotFound) {
		t.Fatalf("err %v, want ParentBlockNotFound", err)
	}
	wantDepths(t, depths(ix, 1, 2, 3), map[ckf.SourceKey]uint32{w0.key(): 2})
	if ix.Telemetry().ParentNotFound != 1 {
		t.Fatalf("telemetry %+v", ix.Telemetry())
	}
}

// TestSelfReferencingStoreRejected (rejects_self_referencing_store): a store listing its own
// parent id as a block remaps that id and is rejected whole.
func TestSelfReferencingStoreRejected(t *testing.T) {
	ix := New()
	mustApply(t, ix, w0.store(nil, 1))
	ev := w0.store([]ckf.LocalBlockHash{1}, 2)
	ev.Event.Stored.Blocks[0].BlockHash = ev.Event.Stored.ParentHash
	if err := ix.Apply(ev); !errors.Is(err, ckf.ErrInvalidBlockSequence) {
		t.Fatalf("err %v, want InvalidBlockSequence", err)
	}
	wantDepths(t, depths(ix, 1, 2), map[ckf.SourceKey]uint32{w0.key(): 1})
}

// TestRemapWithinOneStoreRejected (workers §3.2): a source's first store that lists one external
// id at two blocks (two canonicals) remaps it and is rejected whole, whether the store is short
// enough to compare its blocks pairwise or long enough to be sorted (Index.remapsWithin's two
// ways); without the repeat, the same store is accepted.
func TestRemapWithinOneStoreRejected(t *testing.T) {
	for _, n := range []int{8, scanLimit, scanLimit + 1, 4 * scanLimit} {
		chain := make([]ckf.LocalBlockHash, n)
		for i := range chain {
			chain[i] = ckf.LocalBlockHash(i + 1)
		}
		ix := New()
		ev := w0.store(nil, chain...)
		ev.Event.Stored.Blocks[n-1].BlockHash = ev.Event.Stored.Blocks[n/2].BlockHash
		if err := ix.Apply(ev); !errors.Is(err, ckf.ErrInvalidBlockSequence) {
			t.Fatalf("%d blocks: err %v, want InvalidBlockSequence", n, err)
		}
		if srcs, rows := ix.LineageSize(); srcs != 0 || rows != 0 {
			t.Fatalf("%d blocks: the rejected store left %d sources, %d rows", n, srcs, rows)
		}
		mustApply(t, ix, w0.store(nil, chain...))
		wantDepths(t, depths(ix, chain...), map[ckf.SourceKey]uint32{w0.key(): uint32(n)})
	}
}

// TestLoraAdaptersDoNotConflict (test_different_lora_adapters_do_not_conflict,
// test_lora_base_same_tokens_no_seq_hash_mismatch, test_different_cache_namespaces_do_not_conflict):
// the same tokens under two salts are two chains.
func TestLoraAdaptersDoNotConflict(t *testing.T) {
	ix := New()
	tokens := []uint32{1, 2, 3, 4, 5, 6, 7, 8}
	base := ckf.TokenBlockHashes(tokens, 4, ckf.BlockSaltSeed("", ""))
	lora := ckf.TokenBlockHashes(tokens, 4, ckf.BlockSaltSeed("my-lora", ""))
	mustApply(t, ix, w0.store(nil, base...), w1.store(nil, lora...))
	wantDepths(t, depths(ix, base...), map[ckf.SourceKey]uint32{w0.key(): 2})
	wantDepths(t, depths(ix, lora...), map[ckf.SourceKey]uint32{w1.key(): 2})
}

// TestLongSequenceStaggered (test_long_sequence_staggered_lengths,
// test_long_sequence_multiple_workers_diverging, test_very_long_sequence): many workers holding
// prefixes of one long chain of different lengths each score their own length.
func TestLongSequenceStaggered(t *testing.T) {
	ix := New()
	chain := make([]ckf.LocalBlockHash, 1000)
	for i := range chain {
		chain[i] = ckf.LocalBlockHash(i + 1)
	}
	want := map[ckf.SourceKey]uint32{}
	for w := range 10 {
		s := src{w: ckf.WorkerID(w)}
		n := 100 * (w + 1)
		mustApply(t, ix, s.store(nil, chain[:n]...))
		want[s.key()] = uint32(n)
	}
	wantDepths(t, depths(ix, chain...), want)
}

// TestLowerTierContinuation (missing_parent_tail_queries_exactly_from_last_matched_hash,
// mid_segment_continuation_works_without_materialization): the host run starts where the device
// run ends; the disk run where the host run ends.
func TestLowerTierContinuation(t *testing.T) {
	ix := New()
	host, disk := src{w: 0, tier: producer.StorageTierHostPinned}, src{w: 0, tier: producer.StorageTierDisk}
	all := []ckf.LocalBlockHash{1, 2, 3, 4, 5, 6}
	mustApply(t, ix, w0.store(nil, 1, 2), host.store(all[:2], 3, 4), disk.store(all[:4], 5))
	m := matchOf(ix, w0, all...)
	if m != (Match{Source: w0.key(), Device: 2, HostPinned: 2, Disk: 1}) {
		t.Fatalf("match %+v", m)
	}
}

// TestLowerTierFromRoot (root_workers_only_include_matching_root_edges): a source with no device
// blocks continues on a lower tier from the root when it holds the first block there.
func TestLowerTierFromRoot(t *testing.T) {
	ix := New()
	host := src{w: 1, tier: producer.StorageTierHostPinned}
	mustApply(t, ix, host.store(nil, 1, 2, 3), w0.store(nil, 1))
	if m := matchOf(ix, w1, 1, 2, 3); m != (Match{Source: w1.key(), HostPinned: 3}) {
		t.Fatalf("match %+v", m)
	}
	if m := matchOf(ix, w1, 9, 2, 3); m.Total() != 0 {
		t.Fatalf("match %+v, want none", m)
	}
}

// TestLowerTierHeldBeforeDeviceEndIsNotCounted (branch_matching_is_exact_by_parent_hash): a
// host block at a position the device run already covers does not extend the host run; the
// host run needs the block right after the device run.
func TestLowerTierHeldBeforeDeviceEndIsNotCounted(t *testing.T) {
	ix := New()
	host := src{w: 0, tier: producer.StorageTierHostPinned}
	mustApply(t, ix, w0.store(nil, 1, 2, 3), host.store(nil, 1, 2))
	if m := matchOf(ix, w0, 1, 2, 3, 4); m != (Match{Source: w0.key(), Device: 3}) {
		t.Fatalf("match %+v", m)
	}
}

// TestLowerTierRemoveStopsWalk (remove_stops_contiguous_walk_at_missing_edge,
// removing_one_owner_preserves_shared_edge_for_other_workers).
func TestLowerTierRemoveStopsWalk(t *testing.T) {
	ix := New()
	h0, h1 := src{w: 0, tier: producer.StorageTierHostPinned}, src{w: 1, tier: producer.StorageTierHostPinned}
	chain := []ckf.LocalBlockHash{1, 2, 3}
	mustApply(t, ix, h0.store(nil, chain...), h1.store(nil, chain...), h0.remove(chain, 1))
	if m := matchOf(ix, w0, chain...); m.HostPinned != 1 {
		t.Fatalf("match %+v, want host 1", m)
	}
	if m := matchOf(ix, w1, chain...); m.HostPinned != 3 {
		t.Fatalf("match %+v, want host 3", m)
	}
}

// TestCacheOwnerEventsIgnored (logical_domains_share_one_tree_without_sharing_ownership): events
// of the cache-owner domain hold no worker's blocks; on the device tier they are refused.
func TestCacheOwnerEventsIgnored(t *testing.T) {
	ix := New()
	ev := src{w: 0, tier: producer.StorageTierHostPinned}.store(nil, 1)
	ev.Residency = producer.ResidencyCacheOwner
	mustApply(t, ix, ev)
	dev := w0.store(nil, 1)
	dev.Residency = producer.ResidencyCacheOwner
	if err := ix.Apply(dev); !errors.Is(err, ckf.ErrUnsupportedResidencyDomain) {
		t.Fatalf("err %v", err)
	}
	if len(ix.Sources()) != 0 {
		t.Fatalf("sources %v", ix.Sources())
	}
}

// TestTopKAndSourceFilter: top k keeps the best by depth; a source filter keeps only those.
func TestTopKAndSourceFilter(t *testing.T) {
	ix := New()
	for w := range 5 {
		s := src{w: ckf.WorkerID(w)}
		mustApply(t, ix, s.store(nil, []ckf.LocalBlockHash{1, 2, 3, 4, 5}[:w+1]...))
	}
	var r Result
	q := canonicals([]ckf.LocalBlockHash{1, 2, 3, 4, 5})
	ix.Match(q, Options{TopK: 2, Frequencies: true}, &r)
	if len(r.Matches) != 2 || r.Matches[0].Source.Worker != 4 || r.Matches[1].Source.Worker != 3 {
		t.Fatalf("top 2 %+v", r.Matches)
	}
	if !slices.Equal(r.Frequencies, []uint32{5, 4, 3, 2, 1}) {
		t.Fatalf("frequencies %v", r.Frequencies)
	}
	ix.Match(q, Options{Sources: []ckf.SourceKey{{Worker: 1}, {Worker: 3}, {Worker: 77}}}, &r)
	if len(r.Matches) != 2 || r.Matches[0].Device != 4 || r.Matches[1].Device != 2 {
		t.Fatalf("filtered %+v", r.Matches)
	}
}

// TestAliasesKeepMembership: two external ids of one source for the same chain position keep the
// block until both are removed.
func TestAliasesKeepMembership(t *testing.T) {
	ix := New()
	a := w0.store(nil, 1)
	b := w0.store(nil, 1)
	b.Event.Stored.Blocks[0].BlockHash = 12345
	mustApply(t, ix, a, b)
	rm := w0.remove([]ckf.LocalBlockHash{1}, 0)
	mustApply(t, ix, rm)
	wantDepths(t, depths(ix, 1), map[ckf.SourceKey]uint32{w0.key(): 1})
	rm.Event.Removed[0] = 12345
	mustApply(t, ix, rm)
	wantDepths(t, depths(ix, 1), map[ckf.SourceKey]uint32{})
}

// TestMatchDoesNotAllocate: a warm Result answers without allocating (workers §5.4).
func TestMatchDoesNotAllocate(t *testing.T) {
	ix := New()
	chain := make([]ckf.LocalBlockHash, 128)
	for i := range chain {
		chain[i] = ckf.LocalBlockHash(i + 1)
	}
	for w := range 64 {
		s := src{w: ckf.WorkerID(w)}
		mustApply(t, ix, s.store(nil, chain[:64+w]...))
		mustApply(t, ix, src{w: ckf.WorkerID(w), tier: producer.StorageTierHostPinned}.store(chain[:64+w], chain[64+w:]...))
	}
	q := canonicals(chain)
	var r Result
	opt := Options{TopK: 8, Frequencies: true, Sources: []ckf.SourceKey{{Worker: 3}, {Worker: 60}}}
	ix.Match(q, opt, &r)
	if n := testing.AllocsPerRun(100, func() { ix.Match(q, opt, &r) }); n != 0 {
		t.Fatalf("Match allocates %.1f times per query", n)
	}
	ix.Match(q, Options{}, &r)
	if len(r.Matches) != 64 || r.Matches[0] != (Match{Source: ckf.SourceKey{Worker: 63}, Device: 127, HostPinned: 1}) {
		t.Fatalf("matches %d, first %+v", len(r.Matches), r.Matches[0])
	}
	// A device-only index: Match answers from the walk's groups (workers §5.4), MatchLocal
	// follows the local hashes through the slab (workers §5.4); neither allocates either.
	dev := New()
	for w := range 64 {
		mustApply(t, dev, src{w: ckf.WorkerID(w)}.store(nil, chain[:64+w]...))
	}
	var c []ckf.CanonicalHash
	dev.MatchLocal(chain, opt, &r, &c)
	if n := testing.AllocsPerRun(100, func() { dev.Match(q, opt, &r) }); n != 0 {
		t.Fatalf("Match (device only) allocates %.1f times per query", n)
	}
	if n := testing.AllocsPerRun(100, func() { dev.MatchLocal(chain, opt, &r, &c) }); n != 0 {
		t.Fatalf("MatchLocal allocates %.1f times per query", n)
	}
	dev.MatchLocal(chain, opt, &r, nil)
	if n := testing.AllocsPerRun(100, func() { dev.MatchLocal(chain, opt, &r, nil) }); n != 0 {
		t.Fatalf("MatchLocal without a chain allocates %.1f times per query", n)
	}
	dev.MatchLocal(chain, Options{}, &r, &c)
	if len(r.Matches) != 64 || r.Matches[0] != (Match{Source: ckf.SourceKey{Worker: 63}, Device: 127}) || !slices.Equal(c, q) {
		t.Fatalf("matches %d, first %+v", len(r.Matches), r.Matches[0])
	}
}

// TestSharedConcurrentReaders: queries under Shared run beside the writer (go test -race) and
// every answer is one the index had between two events: a source's depth is one of the lengths
// it ever stored.
func TestSharedConcurrentReaders(t *testing.T) {
	sh := NewShared(New())
	chain := make([]ckf.LocalBlockHash, 32)
	for i := range chain {
		chain[i] = ckf.LocalBlockHash(i + 1)
	}
	q := canonicals(chain)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan string, 4)
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var r Result
			for {
				select {
				case <-stop:
					return
				default:
				}
				sh.Match(q, Options{}, &r)
				for _, m := range r.Matches {
					if m.Device%8 != 0 {
						select {
						case errs <- "torn answer":
						default:
						}
					}
				}
			}
		}()
	}
	for round := range 200 {
		s := src{w: ckf.WorkerID(round % 4)}
		n := 8 * (1 + round%4)
		if err := sh.Apply(s.store(nil, chain[:n]...)); err != nil {
			t.Fatal(err)
		}
		if round%3 == 0 {
			sh.Clear(s.key())
		}
	}
	close(stop)
	wg.Wait()
	select {
	case e := <-errs:
		t.Fatal(e)
	default:
	}
}

// TestSnapshotReadBesideApply (workers §2.2, §7): a lineage snapshot shares the index's buckets
// (copy on write), so goroutines reading it while the index stores, removes and clears on every
// source must read exactly the rows of the state it was taken at; under -race, an index that
// wrote a shared bucket is also a reported race.
func TestSnapshotReadBesideApply(t *testing.T) {
	sh := NewShared(New())
	chain := func(round, n int) []ckf.LocalBlockHash {
		c := make([]ckf.LocalBlockHash, n)
		for i := range c {
			c[i] = ckf.LocalBlockHash(round<<16 | i + 1)
		}
		return c
	}
	apply := func(ev producer.RouterEvent) {
		if err := sh.Apply(ev); err != nil {
			t.Fatal(err)
		}
	}
	for round := range 64 {
		apply(src{w: ckf.WorkerID(round % 8)}.store(nil, chain(round, 24)...))
	}
	want := allRows(sh.ix)
	snap := sh.SnapshotLineage()
	got := make(chan map[ckf.SourceKey][]LineageRow, 2)
	for range 2 {
		go func() { got <- allRows(snap) }()
	}
	for round := 64; round < 128; round++ {
		s := src{w: ckf.WorkerID(round % 8)}
		// Half the sources are first written by a removal, half by a store: each path that
		// writes a lineage must copy a shared one.
		rm := s.remove(chain(round-64, 24), 23, 22, 21, 20, 19, 18, 17, 16, 15, 14, 13, 12)
		st := s.store(nil, chain(round, 24)...)
		if round%2 == 0 {
			rm, st = st, rm
		}
		apply(rm)
		apply(st)
		if round%16 == 0 {
			sh.Clear(s.key())
		}
	}
	for range 2 {
		if g := <-got; !reflect.DeepEqual(g, want) {
			t.Fatalf("rows read beside the index's events differ from the state the snapshot was taken at")
		}
	}
	if g := allRows(snap); !reflect.DeepEqual(g, want) {
		t.Fatalf("the snapshot changed with the index")
	}
}

// TestMembershipIsKeyedByCanonical (workers §2, §2.2): a membership is (source, tier, canonical
// hash), however the block came to be stored. Index.RestoreLineage (a replica's checkpoint
// restore) applies a source's rows as one-block stores without a parent whose local hash is the
// membership's canonical (ckf.CanonicalRoot of a canonical is that canonical), in ascending
// external id, not in chain order; the restored source must answer as the one that stored the
// chain, and a store under a restored parent must extend it. A layout that finds a block only
// through its parent's (performance §9.1, the chain layout) fails here.
func TestMembershipIsKeyedByCanonical(t *testing.T) {
	ix := New()
	chain := []ckf.LocalBlockHash{1, 2, 3, 4, 5}
	canon := canonicals(chain)
	live, restored := src{w: 1}, src{w: 2}
	mustApply(t, ix, live.store(nil, chain[:4]...))
	rows := ix.AppendLineage(nil, live.key())
	for i, r := range rows {
		if len(rows) != 4 || !slices.Contains(canon[:4], r.Canonical) || (i > 0 && rows[i-1].ID >= r.ID) {
			t.Fatalf("rows %+v: want the chain's 4 canonicals in ascending id", rows)
		}
	}
	if err := ix.RestoreLineage(restored.key(), rows); err != nil {
		t.Fatal(err)
	}
	wantDepths(t, depths(ix, chain...), map[ckf.SourceKey]uint32{live.key(): 4, restored.key(): 4})
	mustApply(t, ix, restored.store(chain[:4], 5))
	wantDepths(t, depths(ix, chain...), map[ckf.SourceKey]uint32{live.key(): 4, restored.key(): 5})
	if st := ix.Stats(); st.Canonicals[producer.StorageTierDevice] != 5 || st.Memberships[producer.StorageTierDevice] != 9 {
		t.Fatalf("stats %+v: want 5 canonicals, 9 memberships", st)
	}
}

// TestRestoreLineageRefusesBadRows (workers §2.2): rows the index could not have written are
// refused with an error naming the row: tiers 0 or past the four (nothing applied), and an
// external id the source already maps to another canonical (the rows before it applied, in a
// chunk of rows applied together too). A source the index holds nothing for has no rows.
func TestRestoreLineageRefusesBadRows(t *testing.T) {
	ix := New()
	a := src{w: 1}
	if rows := ix.AppendLineage(nil, a.key()); len(rows) != 0 {
		t.Fatalf("rows of an unknown source: %+v", rows)
	}
	for _, tiers := range []uint8{0, 1 << TierCount, 0xff} {
		err := ix.RestoreLineage(a.key(), []LineageRow{{ID: 7, Canonical: 70, Tiers: 1}, {ID: 8, Canonical: 80, Tiers: tiers}})
		if err == nil || !strings.Contains(err.Error(), "0x8") {
			t.Fatalf("tiers %#x: %v, want the row of external id 0x8 refused", tiers, err)
		}
		if rows := ix.AppendLineage(nil, a.key()); len(rows) != 0 {
			t.Fatalf("after tiers %#x: rows %+v, want none", tiers, rows)
		}
	}
	var rows []LineageRow
	for id := range ckf.ExternalBlockHash(10) {
		rows = append(rows, LineageRow{ID: id + 1, Canonical: ckf.CanonicalHash(10 * (id + 1)), Tiers: 1})
	}
	rows = append(rows, LineageRow{ID: 5, Canonical: 51, Tiers: 1}) // 5 maps to 50 four rows before
	err := ix.RestoreLineage(a.key(), rows)
	if !errors.Is(err, ckf.ErrInvalidBlockSequence) || !strings.Contains(err.Error(), "0x5 ") {
		t.Fatalf("external id 5 restored at another canonical: %v", err)
	}
	if got := ix.AppendLineage(nil, a.key()); !slices.Equal(got, rows[:10]) {
		t.Fatalf("rows %+v, want the ten before the refused one", got)
	}
	if err := ix.RestoreLineage(a.key(), rows[:6]); err != nil {
		t.Fatal(err) // the same rows again: duplicates
	}
	for _, r := range rows[:10] {
		ix.Apply(producer.RouterEvent{WorkerID: a.w, Event: producer.KvCacheEvent{Kind: producer.KvEventRemoved,
			Removed: []ckf.ExternalBlockHash{r.ID}}})
	}
	if err := ix.RestoreLineage(a.key(), []LineageRow{{ID: 7, Canonical: 70, Tiers: 1}}); err != nil {
		t.Fatal(err)
	}
	err = ix.RestoreLineage(a.key(), []LineageRow{{ID: 7, Canonical: 71, Tiers: 1}})
	if !errors.Is(err, ckf.ErrInvalidBlockSequence) {
		t.Fatalf("external id 7 restored at another canonical: %v", err)
	}
	if err := ix.RestoreLineage(a.key(), []LineageRow{{ID: 7, Canonical: 70, Tiers: 1 | 1<<producer.StorageTierDisk}}); err != nil {
		t.Fatal(err) // the same mapping on one more tier: a duplicate, then an addition
	}
	if rows := ix.AppendLineage(nil, a.key()); len(rows) != 1 || rows[0].Tiers != 1|1<<producer.StorageTierDisk {
		t.Fatalf("rows %+v", rows)
	}
	if s, r := ix.LineageSize(); s != 1 || r != 1 {
		t.Fatalf("LineageSize %d, %d; want 1, 1", s, r)
	}
}
