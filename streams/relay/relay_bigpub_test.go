package relay_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/ckf/producer"
	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/ckf-stream/ckf-stream/streams"
	"github.com/ckf-stream/ckf-stream/streams/internal/streamtest"
	"github.com/ckf-stream/ckf-stream/streams/lanes"
	"github.com/ckf-stream/ckf-stream/testenv"
)

// Publications larger than one lane record: the relay splits them into consecutive deltas that
// each fit the lane topic's max.message.bytes, without a failed write, a recovery or a new
// incarnation.

// storeChains returns count store events of worker, each a new root chain of size blocks with
// fresh external ids from *nextExt, and the chains' token hashes (for queries).
func storeChains(rng *rand.Rand, worker ckf.WorkerID, count, size int, nextExt *uint64) ([]producer.RouterEvent, [][]uint64) {
	evs := make([]producer.RouterEvent, count)
	chains := make([][]uint64, count)
	for i := range evs {
		tokens := make([]uint64, size)
		blocks := make([]producer.StoredBlock, size)
		for j := range blocks {
			tokens[j] = rng.Uint64()
			blocks[j] = producer.StoredBlock{BlockHash: ckf.ExternalBlockHash(*nextExt), TokensHash: ckf.LocalBlockHash(tokens[j])}
			*nextExt++
		}
		evs[i] = storeEvent(ckf.SourceKey{Worker: worker}, producer.StoreData{Blocks: blocks})
		chains[i] = tokens
	}
	return evs, chains
}

// TestRelayClearOfAWorkerOf200kBlocks: a worker holding 200,000 blocks is cleared by one KV
// event while a relay runs and an indexer replica follows the lane. The clear changes about
// 100,000 buckets, 1.6 MB of images: more than one record of the lane topic (the broker's
// default limit) carries, so the relay publishes it as consecutive deltas. Nothing fails: no
// recovery, no snapshot besides the start-up one, the same incarnation, the replica's lane
// stays active on the same stream without a fault, and afterwards the replica's words and
// answers equal the relay's model.
func TestRelayClearOfAWorkerOf200kBlocks(t *testing.T) {
	t.Parallel()
	e := newRelayEnv(t, 250_000, 1)
	const lane = 4
	ri := e.StartIndexer(e.Manifest(41, lane), e.IndexerConfig())
	cfg := e.relayConfig(lane, testenv.UniqueName(t, "relay"))
	cfg.ChunkWords = streams.DefaultChunkWords
	rr := e.startRelay(cfg, true)

	rng := rand.New(rand.NewPCG(41, 200_000))
	nextExt := uint64(1)
	big, bigChains := storeChains(rng, 1, 200, 1000, &nextExt) // worker 1: 200 chains of 1,000 blocks
	kept, keptChains := storeChains(rng, 2, 40, 8, &nextExt)   // worker 2: survives the clear
	for i := 0; i < len(big); i += 20 {
		e.produce(big[i : i+20]...)
	}
	e.produce(kept...)
	applied := uint64(len(big) + len(kept))
	waitApplied(t, rr, applied)
	waitRelayLane(t, ri, rr, lane)
	if s := rr.r.Stats(); s.ResidentBlocks < 190_000 || s.CapacityOmissions != 0 {
		t.Fatalf("before the clear: %+v; want about 200,000 resident blocks and no omission", s)
	}
	before, laneBefore, id := rr.r.Stats(), streamtest.LaneStatus(ri, lane), rr.r.Identity()

	e.produce(producer.RouterEvent{WorkerID: 1, Event: producer.KvCacheEvent{Kind: producer.KvEventCleared}})
	waitApplied(t, rr, applied+1)
	words := waitRelayLane(t, ri, rr, lane) // same identity, the relay's sequence, the relay's words

	s, st := rr.r.Stats(), streamtest.LaneStatus(ri, lane)
	if s.SplitPublications != before.SplitPublications+1 || s.Deltas < before.Deltas+2 {
		t.Errorf("the clear: %d split publications, %d deltas (before %d, %d); want one publication split into several deltas",
			s.SplitPublications, s.Deltas, before.SplitPublications, before.Deltas)
	}
	if s.Recoveries != 0 || s.Snapshots != before.Snapshots || s.Fenced || s.Incarnation != before.Incarnation || rr.r.Identity() != id {
		t.Errorf("relay after the clear: %+v (before %+v); want no recovery, no new snapshot, the same incarnation", s, before)
	}
	if s.ResidentBlocks > 400 {
		t.Errorf("%d blocks resident after the clear; want only worker 2's", s.ResidentBlocks)
	}
	if st.Phase != lanes.PhaseActive || !st.Ready || st.Snapshots != laneBefore.Snapshots || st.Recoveries != 0 ||
		len(st.Faults) != 0 || st.SnapshotRequests != laneBefore.SnapshotRequests || st.Identity != laneBefore.Identity {
		t.Errorf("replica lane after the clear: %+v (before %+v); want active on the same stream, no snapshot, fault or recovery", st, laneBefore)
	}

	_, seq := rr.inspect(t)
	refIx := referenceIndexerWords(t, e.Manifest(41, lane), lane, rr.r.Identity(), seq, words)
	streamtest.CompareQueries(t, ri.Indexer.GlobalIndexer(), refIx, &streamtest.Producer{Lane: lane, Chains: append(keptChains, bigChains[:5]...)})
	hits := 0
	for _, c := range keptChains {
		if m, err := refIx.FindPrefixMatches(c); err == nil && m.Depths()[lane] > 0 {
			hits++
		}
	}
	if hits == 0 {
		t.Error("no chain of the worker that was not cleared is found: the comparison compared only misses")
	}
	t.Logf("clear: %d images in %d deltas", s.Images-before.Images, s.Deltas-before.Deltas)
}

// TestRelaySmallLaneTopicLimit: on a lane topic whose max.message.bytes is 64 KiB, the relay
// reads the limit, shrinks its snapshot chunks (the configured default chunk is 960 KB) and
// splits publications into deltas that each fit: the start-up snapshot and a 20,000-block store
// go through without a failed write, and every record on the lane is within the limit.
func TestRelaySmallLaneTopicLimit(t *testing.T) {
	t.Parallel()
	const limit = 64 << 10
	e := newRelayEnv(t, 65_536, 1)
	e.Topics.Lanes = e.Cluster.NewTopic(t, ckf.LaneCount, testenv.TopicConfig("max.message.bytes", fmt.Sprint(limit)))
	const lane = 9
	ri := e.StartIndexer(e.Manifest(91, lane), e.IndexerConfig())
	cfg := e.relayConfig(lane, testenv.UniqueName(t, "relay"))
	cfg.ChunkWords = streams.DefaultChunkWords
	rr := e.startRelay(cfg, true)

	rng := rand.New(rand.NewPCG(91, 64))
	nextExt := uint64(1)
	evs, _ := storeChains(rng, 1, 2, 10_000, &nextExt) // each ~160 KB of images: three pieces
	e.produce(evs...)
	waitApplied(t, rr, uint64(len(evs)))
	waitRelayLane(t, ri, rr, lane)

	// The replica may ask for a snapshot before the relay's start-up one is on the lane (it
	// started first and found none); the relay answers that request with one more snapshot.
	// Any snapshot beyond the start-up one and the answered requests would be a failure's.
	s := rr.r.Stats()
	if s.SplitPublications < 2 || s.Recoveries != 0 || s.Fenced || s.Snapshots < 1 || s.Snapshots > 1+s.SnapshotRequests {
		t.Fatalf("stats %+v; want both stores split, no recovery and no snapshot besides the start-up one and answers to requests", s)
	}
	var chunks, deltas, largest int
	for _, r := range e.Cluster.PartitionRecords(t, e.Topics.Lanes, lane) {
		// A batch of this one record: the record batch header (61 bytes) and the record's
		// framing (at most 36 bytes) around its key and value.
		if size := 61 + 36 + len(r.Key) + len(r.Value); size > limit {
			t.Errorf("record at %d takes %d bytes in a batch; the topic's limit is %d", r.Offset, size, limit)
		}
		largest = max(largest, len(r.Value))
		lr, err := e.Codec.DecodeLaneRecord(r.Value)
		if err != nil {
			t.Fatalf("record at %d: %v", r.Offset, err)
		}
		switch lr.Kind {
		case schemas.LaneSnapshotChunk:
			chunks++
		case schemas.LaneDelta:
			deltas++
		}
	}
	if chunks < 4 || uint64(deltas) != s.Deltas || deltas < 6 {
		t.Fatalf("%d snapshot chunks and %d deltas on the lane (relay published %d); want the 256 KiB snapshot in several chunks and each store in several deltas",
			chunks, deltas, s.Deltas)
	}
	t.Logf("%d chunks, %d deltas; largest value %d bytes", chunks, deltas, largest)
}
