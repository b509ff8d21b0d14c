package relay_test

import (
	"strconv"
	"testing"

	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestRelayStampsTheDCBlockSize: the relay learns its DC's block size from the engines' stored
// events and every lane record it writes carries it (the start-up snapshot and the heartbeats
// after it); when a source of another block size appears the sizes disagree, the records carry
// none and ckf_relay_block_sizes (RelayStats.BlockSizes) reads 2; the source's clear (an engine
// restarting) ends the disagreement.
func TestRelayStampsTheDCBlockSize(t *testing.T) {
	t.Parallel()
	e := newBrokerRelayEnv(t, 4096, 1)
	const lane = 13
	cfg := e.relayConfig(lane, "")
	stored := func(worker uint64, hash uint64, size uint32) *kgo.Record {
		v, err := e.Codec.EncodeKvEvent(schemas.KvEvent{WorkerID: worker, StorageTier: schemas.TierDevice, Kind: schemas.KvStoredEvent,
			Stored: schemas.KvStored{Blocks: []schemas.KvBlock{{BlockHash: hash, TokensHash: hash * 7}}, BlockSize: size}})
		if err != nil {
			t.Fatal(err)
		}
		return &kgo.Record{Topic: e.kvTopic, Key: []byte(strconv.FormatUint(worker, 10)), Value: v}
	}
	e.produceRaw(stored(1, 11, 16), stored(2, 21, 16), stored(3, 31, 0)) // worker 3: a producer of an earlier revision
	rr := e.startRelay(cfg, true)
	if s := rr.r.Stats(); s.BlockSize != 16 || s.BlockSizes != 1 {
		t.Fatalf("after the replay: block size %d, %d sizes; want 16, 1", s.BlockSize, s.BlockSizes)
	}
	waitHeartbeats(t, rr, 1)
	lastBlockSize := func() (uint32, int) {
		recs := readLaneRecords(t, e, lane)
		var snapshot int
		var last uint32
		for _, r := range recs {
			lr, err := e.Codec.DecodeLaneRecord(r.Value)
			if err != nil {
				t.Fatal(err)
			}
			if lr.Kind == schemas.LaneSnapshotChunk && lr.BlockSize == 16 {
				snapshot++
			}
			last = lr.BlockSize
		}
		return last, snapshot
	}
	if last, snap := lastBlockSize(); last != 16 || snap == 0 {
		t.Fatalf("lane records: the last carries block size %d, %d snapshot chunks carry 16; want 16 and at least one", last, snap)
	}

	e.produceRaw(stored(4, 41, 32))
	waitApplied(t, rr, 4)
	if s := rr.r.Stats(); s.BlockSize != 0 || s.BlockSizes != 2 {
		t.Fatalf("sources of 16 and 32: block size %d, %d sizes; want 0, 2", s.BlockSize, s.BlockSizes)
	}
	waitHeartbeats(t, rr, 1)
	if last, _ := lastBlockSize(); last != 0 {
		t.Fatalf("sources of 16 and 32: the last lane record carries block size %d, want none", last)
	}

	cleared, err := e.Codec.EncodeKvEvent(schemas.KvEvent{WorkerID: 4, Kind: schemas.KvClearedEvent})
	if err != nil {
		t.Fatal(err)
	}
	e.produceRaw(&kgo.Record{Topic: e.kvTopic, Key: []byte("4"), Value: cleared})
	waitApplied(t, rr, 5)
	if s := rr.r.Stats(); s.BlockSize != 16 || s.BlockSizes != 1 {
		t.Fatalf("after the 32-token source's clear: block size %d, %d sizes; want 16, 1", s.BlockSize, s.BlockSizes)
	}
	waitHeartbeats(t, rr, 1)
	if last, _ := lastBlockSize(); last != 16 {
		t.Fatalf("after the clear: the last lane record carries block size %d, want 16", last)
	}
}
