package schemas

import (
	"context"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/ckf"
)

func testIdentity() ProducerIdentity {
	var sem, route Digest128
	for i := range sem {
		sem[i] = byte(i + 1)
		route[i] = byte(0xF0 - i)
	}
	return ProducerIdentity{
		Pool: PoolID{
			IdentityVersion: ckf.PoolIdentityVersion,
			Domain: IndexerDomainID{
				CacheSemantics: DigestIdentity{Digest: sem, Source: SourceExplicit},
				RoutingScope:   DigestIdentity{Digest: route, Source: SourceDefaultDerived},
			},
			DcID: 0xFEDCBA9876543210, // above 2^63: travels as a negative long
		},
		Incarnation:      43,
		LayoutGeneration: 47,
		Format: CkfFormat{
			Version:         1,
			Seed:            0x5DEECE66D1B54A33,
			BucketCount:     1 << 20,
			FingerprintBits: 16,
			SlotsPerBucket:  4,
		},
	}
}

func testTime(us int64) time.Time { return time.UnixMicro(us).UTC() }

// testWords returns n packed words with distinctive values.
func testWords(n int) PackedU64 {
	words := make([]uint64, n)
	for i := range words {
		words[i] = uint64(i)*0x9E3779B97F4A7C15 | 1
	}
	return AppendU64s(nil, words)
}

func testImages(n int, bucketCount uint64) PackedImages {
	var b []byte
	for i := 0; i < n; i++ {
		b = AppendImage(b, uint64(i*7919)%bucketCount, uint64(i)*0xDEADBEEFCAFEBABE)
	}
	return b
}

func testSnapshot(words int) LaneRecord {
	id := testIdentity()
	return LaneRecord{Identity: id, Kind: LaneSnapshotChunk, Snapshot: SnapshotChunk{
		Sequence: 1 << 40, ChunkIndex: 2, ChunkCount: 8, FirstBucket: 3 * 1024,
		TotalBuckets: id.Format.BucketCount, Words: testWords(words),
	}}
}

// laneTrailerNulls is how many one-byte nulls end a lane record that sets none of the optional
// fields appended within v1 (capacity, sources, as_of, block_size).
const laneTrailerNulls = 4

func testDelta(images int) LaneRecord {
	id := testIdentity()
	return LaneRecord{Identity: id, Kind: LaneDelta, Delta: Delta{
		BaseSequence: 1<<63 + 5, Sequence: 1<<63 + 6, Images: testImages(images, id.Format.BucketCount),
	}}
}

func testLaneRecords() map[string]LaneRecord {
	id := testIdentity()
	return map[string]LaneRecord{
		"snapshot":    testSnapshot(1024),
		"delta":       testDelta(64),
		"empty-delta": {Identity: id, Kind: LaneDelta, Delta: Delta{BaseSequence: 9, Sequence: 10, Images: PackedImages{}}},
		"heartbeat":   {Identity: id, Kind: LaneHeartbeat, Heartbeat: Heartbeat{LastSequence: 77, ProducerTime: testTime(1_780_000_000_123_456)}},
		"zero-time":   {Identity: id, Kind: LaneHeartbeat},
		"drain":       {Identity: id, Kind: LaneDrainMarker, Drain: DrainMarker{ExpectedSequence: 1<<64 - 1}},
		"delta-capacity": func() LaneRecord {
			r := testDelta(3)
			r.Capacity = Some(testCapacity())
			return r
		}(),
		"heartbeat-full-filter": {Identity: id, Kind: LaneHeartbeat, Heartbeat: Heartbeat{LastSequence: 78, ProducerTime: testTime(9)},
			Capacity: Some(CapacityState{ResidentBlocks: 1<<63 - 1, OmittedBlocks: 0, CapacityOmissions: 1<<63 - 1}),
			Sources:  Some(SourceHealth{DegradedSources: 3, LostHistoryClears: 1<<63 - 1})},
		"delta-as-of": func() LaneRecord {
			r := testDelta(2)
			r.Sources = Some(SourceHealth{DegradedSources: 1})
			r.AsOf = testTime(1_780_000_000_654_321)
			return r
		}(),
		"heartbeat-block-size": {Identity: id, Kind: LaneHeartbeat, Heartbeat: Heartbeat{LastSequence: 79, ProducerTime: testTime(10)},
			AsOf: testTime(1_780_000_000_000_001), BlockSize: 16},
		"delta-widest-block-size": func() LaneRecord {
			r := testDelta(1)
			r.BlockSize = 1<<32 - 1
			return r
		}(),
	}
}

// testCapacity is a capacity state with every field distinct and a multi-byte varint.
func testCapacity() CapacityState {
	return CapacityState{ResidentBlocks: 4000, OmittedBlocks: 17, CapacityOmissions: 300}
}

func testQueryRequests() map[string]QueryRequest {
	return map[string]QueryRequest{
		"hashes": {
			CorrelationID: "req-1", Input: InputLocalBlockHashes,
			Hashes: AppendU64s(nil, []uint64{0x0123456789ABCDEF, 0x1111222233334444, 0xDEADBEEFCAFEBABE}),
		},
		"tokens-full": {
			CorrelationID: "req-2 ✓", Input: InputTokenIDs,
			Tokens: AppendU32s(nil, []uint32{1, 2, 3, 4, 5, 0xFFFFFFFF}), BlockSize: 64,
			LoraName: "adapter-a", CacheNamespace: "tenant-7",
			LaneMask: Some[uint16](0x00F1), ReplyTopic: "router-3-replies", ReplyPartition: Some[int32](3),
			RequestTime: testTime(1_780_000_000_000_001), MaxAgeMillis: Some[int64](250),
			BlockExtraKeys: []ckf.ExtraKeys{{ckf.ExtraTupleValue(ckf.ExtraStringValue("img-a"), ckf.ExtraIntValue(-3)), ckf.ExtraStringValue("salt-1")}},
		},
		// Every kind of extra-key value, a block without keys between two with, and the entry of
		// a trailing partial block (8 tokens in blocks of 3: three windows).
		"extra-keys": {
			CorrelationID: "req-x", Input: InputTokenIDs, Tokens: AppendU32s(nil, []uint32{1, 2, 3, 4, 5, 6, 7, 8}), BlockSize: 3,
			BlockExtraKeys: []ckf.ExtraKeys{
				{ckf.ExtraNil(), ckf.ExtraBoolValue(true), ckf.ExtraIntValue(-1), ckf.ExtraUintValue(1<<64 - 1), ckf.ExtraFloatValue(0.5),
					ckf.ExtraStringValue("ü"), ckf.ExtraBytesValue([]byte{0, 0xff}), ckf.ExtraTupleValue(), ckf.ExtraTupleValue(ckf.ExtraTupleValue(ckf.ExtraIntValue(7)))},
				nil,
				{ckf.ExtraStringValue("salt")},
			},
		},
		"max-age-zero": {CorrelationID: "y", Input: InputLocalBlockHashes, Hashes: AppendU64s(nil, []uint64{1}), MaxAgeMillis: Some[int64](0)},
		"empty-mask":   {CorrelationID: "x", Input: InputLocalBlockHashes, Hashes: PackedU64{}, LaneMask: Some[uint16](0), ReplyPartition: Some[int32](0)},
		// consumer §16: lanes beyond 15, and every lane of a reader of 64.
		"mask64":     {CorrelationID: "w", Input: InputLocalBlockHashes, Hashes: AppendU64s(nil, []uint64{5}), LaneMask64: Some[uint64](1<<3 | 1<<40 | 1<<63)},
		"mask64-all": {CorrelationID: "v", Input: InputLocalBlockHashes, Hashes: PackedU64{}, LaneMask64: Some(AllLanes64)},
	}
}

func testQueryReplies() map[string]QueryReply {
	id := testIdentity()
	return map[string]QueryReply{
		"ok": {
			CorrelationID: "req-1", Status: QueryOK, ReadyLanes: 0b1010_0000_0000_0101, QueryBlocks: 12,
			Lanes: []LaneMatch{
				{Lane: 0, DcID: id.Pool.DcID, Pool: id.Pool.String(), Depth: 12},
				{Lane: 2, DcID: 7, Pool: "p2", Depth: 0},
				{Lane: 15, DcID: 9, Pool: "p15", Depth: 3},
			},
			ReplyTime: testTime(1_780_000_000_000_900),
		},
		"unavailable": {CorrelationID: "req-2", Status: QueryUnavailable, ErrorMessage: "no ready lane", ReplyTime: testTime(5)},
		"invalid":     {CorrelationID: "", Status: QueryInvalidRequest, ErrorMessage: "schemas: truncated input", ReplyTime: testTime(6)},
		"incomplete": {
			CorrelationID: "req-3", Status: QueryOK, ReadyLanes: 0b1000_0000_0000_0001, QueryBlocks: 5, IncompleteLanes: 0b1000_0000_0000_0000,
			Lanes:     []LaneMatch{{Lane: 0, DcID: 1, Pool: "p0", Depth: 5}, {Lane: 15, DcID: 9, Pool: "p15", Depth: 2}},
			ReplyTime: testTime(10),
		},
		"lane-states": {
			CorrelationID: "req-4", Status: QueryOK, ReadyLanes: 0b1000_0000_0000_0011, QueryBlocks: 7, IncompleteLanes: 0b10,
			Lanes:     []LaneMatch{{Lane: 0, DcID: 1, Pool: "p0", Depth: 7}, {Lane: 1, DcID: 2, Pool: "p1", Depth: 0}},
			ReplyTime: testTime(1_780_000_000_000_900),
			LaneStates: []LaneState{{Lane: 0, State: LaneExact, AgeMillis: Some[int64](3)}, {Lane: 1, State: LaneIncomplete, AgeMillis: Some[int64](0)},
				{Lane: 4, State: LaneStale, AgeMillis: Some[int64](1 << 40)}, {Lane: 9, State: LaneUnavailable}},
		},
		"unavailable-states": {CorrelationID: "req-5", Status: QueryUnavailable, ErrorMessage: "no eligible lane is ready", ReplyTime: testTime(11),
			LaneStates: []LaneState{{Lane: 3, State: LaneUnavailable}}},
		// consumer §16: lanes beyond 15 in the 64-bit masks, the 16-bit ones their low bits.
		"lanes64": {
			CorrelationID: "req-6", Status: QueryOK, ReadyLanes: 1 << 3, QueryBlocks: 9, IncompleteLanes: 0,
			Lanes: []LaneMatch{{Lane: 3, DcID: 3, Pool: "p3", Depth: 9}, {Lane: 40, DcID: 40, Pool: "p40", Depth: 2},
				{Lane: 63, DcID: 1<<64 - 1, Pool: "p63", Depth: 0}},
			ReplyTime:    testTime(12),
			LaneStates:   []LaneState{{Lane: 3, State: LaneExact}, {Lane: 17, State: LaneStale}, {Lane: 40, State: LaneIncomplete}, {Lane: 63, State: LaneExact}},
			ReadyLanes64: 1<<3 | 1<<40 | 1<<63, IncompleteLanes64: 1 << 40,
		},
	}
}

func testLaneEvents() map[string]LaneEvent {
	id := testIdentity()
	return map[string]LaneEvent{
		"progress": {
			Lane: 3, Pool: id.Pool, ConsumerInstance: 1<<64 - 2, LeaseEpoch: Some[uint64](4), Kind: EventProgress,
			InstalledSequence: Some[uint64](1000), AppliedOffset: Some[int64](123456), HighWatermark: Some[int64](123460),
			LagRecords: Some[int64](3), LagMicros: Some[int64](1500), EventTime: testTime(1_780_000_000_000_000),
			Capacity: Some(testCapacity()),
		},
		"deactivated": {
			Lane: 15, Pool: id.Pool, ConsumerInstance: 5, Kind: EventDeactivated,
			Fault: &LaneFault{Kind: FaultBaseSequenceMismatch, Detail: "base 9, installed 7", Expected: Some[uint64](7), Actual: Some[uint64](9), Offset: Some[int64](4242)},
			Disposition: &FailureDisposition{
				Point: PointConsumerGapOrMalformedBeforeWrite, Domain: DomainConsumerLane, Commit: CommitKnownUnchanged,
				RecoveryDomain: Some(DomainConsumerLane), Action: ActionDeactivateAndSnapshot,
			},
			EventTime: testTime(7),
		},
		"rejected-no-recovery": {
			Lane: 0, Pool: id.Pool, Kind: EventRecordRejected,
			Fault:       &LaneFault{Kind: FaultMalformedRecord, Detail: ""},
			Disposition: &FailureDisposition{Point: PointBoundedRelocationFailure, Domain: DomainProducerCore, Commit: CommitExactCommittedPhysicalOmitted, Action: ActionContinueCapacityOmission},
			EventTime:   testTime(8),
		},
	}
}

func testControlRecords() map[string]ControlRecord {
	return map[string]ControlRecord{
		"snapshot-request": {Kind: ControlSnapshotRequest, SnapshotRequest: SnapshotRequest{
			Lane: 9, Pool: testIdentity().Pool, Requester: 1<<64 - 1, Reason: ReasonFaultRecovery,
			Detail: "replay hit DUPLICATE_IMAGE_INDEX at 77", AfterOffset: 77, RequestTime: testTime(9),
		}},
		"any-snapshot": {Kind: ControlSnapshotRequest, SnapshotRequest: SnapshotRequest{
			Lane: 0, Pool: testIdentity().Pool, Reason: ReasonNoSnapshotRetained, AfterOffset: -1, RequestTime: testTime(10),
		}},
	}
}

func testDeadLetters() map[string]DeadLetter {
	return map[string]DeadLetter{
		"full": {
			SourceTopic: "ckf-lanes", SourcePartition: 4, SourceOffset: 99, SourceTimestamp: testTime(11),
			Key: []byte("k"), Value: []byte{1, 0, 0, 0, 9, 0xFF}, ReasonCode: DeadLetterUnknownSchemaID,
			Reason: "schemas: unknown schema id", Component: "indexer", DeadLetterTime: testTime(12),
		},
		"nulls":     {SourceTopic: "kv-events", ReasonCode: DeadLetterRejected, DeadLetterTime: testTime(13)},
		"empty-key": {SourceTopic: "t", Key: []byte{}, Value: []byte{}, ReasonCode: DeadLetterMalformed, DeadLetterTime: testTime(14)},
	}
}

func testKvEvents() map[string]KvEvent {
	return map[string]KvEvent{
		"stored": {
			WorkerID: 1<<64 - 3, DpRank: 1<<32 - 1, EventID: 17, StorageTier: TierDevice, ResidencyDomain: Some(ResidencyWorker),
			Kind: KvStoredEvent, Stored: KvStored{
				ParentHash: Some[uint64](0xAAAA_BBBB_CCCC_DDDD), StartPosition: Some[uint32](4),
				Blocks:              []KvBlock{{BlockHash: 1, TokensHash: 0x0123456789ABCDEF}, {BlockHash: 1<<63 + 1, TokensHash: 2}},
				SharedCacheEligible: true, BlockSize: 16,
			},
		},
		"stored-widest-block-size": {WorkerID: 4, StorageTier: TierDevice, Kind: KvStoredEvent, Stored: KvStored{
			Blocks: []KvBlock{{BlockHash: 7, TokensHash: 8}}, BlockSize: 1<<32 - 1}},
		"stored-root": {WorkerID: 1, StorageTier: TierHostPinned, Kind: KvStoredEvent, Stored: KvStored{Blocks: []KvBlock{{BlockHash: 5, TokensHash: 6}}}},
		"removed":     {WorkerID: 2, DpRank: 1, StorageTier: TierDevice, ResidencyDomain: Some("some-future-domain"), Kind: KvRemovedEvent, Removed: KvRemoved{BlockHashes: []uint64{1, 1<<64 - 1}}},
		"cleared":     {WorkerID: 3, StorageTier: TierUnknown, ResidencyDomain: Some(ResidencyCacheOwner), Kind: KvClearedEvent},
	}
}

func newTestCodec(t testing.TB, opts ...Opt) *Codec {
	t.Helper()
	c, err := NewCodec(context.Background(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
