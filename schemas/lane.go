package schemas

import "time"

// String methods of the enums below are generated from the constants' line
// comments, which are the Avro symbols (or, for union branches, record
// names); run make generate after changing a constant.
//go:generate go run golang.org/x/tools/cmd/stringer@v0.52.0 -type=LaneRecordKind -linecomment -output=lane_string.go

// LaneRecordKind says which branch of LaneRecord.body a record carries.
type LaneRecordKind uint8

const (
	// LaneSnapshotChunk: LaneRecord.Snapshot is set.
	LaneSnapshotChunk LaneRecordKind = iota + 1 // SnapshotChunk
	// LaneDelta: LaneRecord.Delta is set.
	LaneDelta // Delta
	// LaneHeartbeat: LaneRecord.Heartbeat is set.
	LaneHeartbeat // Heartbeat
	// LaneDrainMarker: LaneRecord.Drain is set.
	LaneDrainMarker // DrainMarker
)

// LaneRecord is one record of the lane topic (Avro record LaneRecord). Kind
// selects which of Snapshot, Delta, Heartbeat and Drain is meaningful; the
// others are ignored when encoding and zero after decoding. The branches are
// values rather than pointers so decoding a lane record does not allocate
// them.
type LaneRecord struct {
	Identity  ProducerIdentity
	Kind      LaneRecordKind
	Snapshot  SnapshotChunk
	Delta     Delta
	Heartbeat Heartbeat
	Drain     DrainMarker
	// Capacity is the producer's capacity state as of the record; absent
	// (null on the wire) when the writer does not report it.
	Capacity Optional[CapacityState]
	// Sources is the health of the DC's sources as of the record (engine
	// history lost); absent (null on the wire) when the writer does not
	// report it.
	Sources Optional[SourceHealth]
	// AsOf is the time up to which the lane reflects its DC's KV events when the relay wrote
	// the record: every KV event appended before it is in the state the record brings the lane
	// to. The zero Time (null on the wire) when the writer does not report it.
	AsOf time.Time
	// BlockSize is the tokens per block of the DC's engines as the relay read it from their
	// stored events; 0 (null on the wire) when the writer does not know it or does not report
	// it, or when the DC's engines disagree.
	BlockSize uint32
}

// SourceHealth is the state of a DC's sources (worker, rank) whose engine
// history a bridge lost (Avro record SourceHealth): a source is degraded
// from a clear written for lost history until a full clear. Each value
// travels as an Avro long and must be below 2^63.
type SourceHealth struct {
	// DegradedSources is the number of degraded sources: the DC may hold
	// blocks of theirs that the filter lacks, so answers may be short.
	DegradedSources uint64
	// LostHistoryClears counts the clears for lost history the relay read
	// since it started.
	LostHistoryClears uint64
}

func (h *SourceHealth) validate(base string) error {
	if h.DegradedSources > maxInt64 {
		return invalid(base+".degraded_sources", "%d does not fit an Avro long", h.DegradedSources)
	}
	if h.LostHistoryClears > maxInt64 {
		return invalid(base+".lost_history_clears", "%d does not fit an Avro long", h.LostHistoryClears)
	}
	return nil
}

// CapacityState is how full a producer's filter is and how many of the
// DC's cached blocks it misses for capacity (Avro record CapacityState).
// Each value travels as an Avro long and must be below 2^63.
type CapacityState struct {
	// ResidentBlocks is the number of fingerprints in the filter (occupied
	// slots).
	ResidentBlocks uint64
	// OmittedBlocks is the number of blocks the DC holds whose fingerprints
	// are not in the filter now: queries through them are under-reported.
	OmittedBlocks uint64
	// CapacityOmissions counts the capacity omissions since the producer's
	// state began; it never decreases within one producer state.
	CapacityOmissions uint64
}

// Occupancy returns the filter's occupied fraction for a filter of
// bucketCount buckets of slotsPerBucket slots (0 for an empty geometry).
func (c CapacityState) Occupancy(bucketCount uint64, slotsPerBucket uint8) float64 {
	slots := float64(bucketCount) * float64(slotsPerBucket)
	if slots == 0 {
		return 0
	}
	return float64(c.ResidentBlocks) / slots
}

func (c *CapacityState) validate(base string) error {
	for _, f := range []struct {
		name string
		v    uint64
	}{{"resident_blocks", c.ResidentBlocks}, {"omitted_blocks", c.OmittedBlocks}, {"capacity_omissions", c.CapacityOmissions}} {
		if f.v > maxInt64 {
			return invalid(base+"."+f.name, "%d does not fit an Avro long", f.v)
		}
	}
	return nil
}

// SnapshotChunk is one chunk of a barrier snapshot (Avro record
// SnapshotChunk).
type SnapshotChunk struct {
	Sequence     uint64
	ChunkIndex   uint32
	ChunkCount   uint32
	FirstBucket  uint64
	TotalBuckets uint64
	// Words holds the chunk's bucket words, WordSize bytes each, for buckets
	// FirstBucket, FirstBucket+1, ...
	Words PackedU64
}

// Delta carries the absolute images of the buckets that changed between
// BaseSequence and Sequence (Avro record Delta).
type Delta struct {
	BaseSequence uint64
	Sequence     uint64
	// Images holds the packed images, ImageSize bytes each.
	Images PackedImages
}

// Heartbeat is a liveness record (Avro record Heartbeat).
type Heartbeat struct {
	LastSequence uint64
	// ProducerTime travels with microsecond precision; decoders return UTC.
	ProducerTime time.Time
}

// DrainMarker ends a graceful producer stop (Avro record DrainMarker).
type DrainMarker struct {
	ExpectedSequence uint64
}

// MaxSnapshotChunkWords returns how many bucket words fit in one framed
// snapshot-chunk value of at most maxValueBytes bytes, leaving room for the
// frame header and the largest possible encoding of every other field. The
// caller budgets the Kafka record and batch overhead (key, headers, about
// 100 bytes of framing) itself: with the broker's default 1,048,588-byte
// limit, MaxSnapshotChunkWords(1<<20 - 4096) = 130,528 words is a safe
// choice.
func MaxSnapshotChunkWords(maxValueBytes int) int {
	n := (maxValueBytes - laneRecordOverhead) / WordSize
	return max(n, 0)
}

// laneRecordOverhead bounds the encoded size of a snapshot chunk without its
// words: frame header 5, identity at most 2*17 + 5 + 10 (pool) + 10 + 10 +
// 5+10+10+5+5 (format), union index 1, sequence 10, index 5, count 5, first
// 10, total 10, words length 5, capacity 1 + 3*10, sources 1 + 2*10 (207 in
// all); rounded up.
const laneRecordOverhead = 256

// validate applies the contract's rules that are not expressed by the Avro
// schema: identity rules, ranges and packed lengths.
func (r *LaneRecord) validate() error {
	if err := r.Identity.validate("identity"); err != nil {
		return err
	}
	return r.validateAfterIdentity()
}

// validateAfterIdentity is validate less the identity's own rules: for a record whose identity
// is known valid (LaneRecordDecoder).
func (r *LaneRecord) validateAfterIdentity() error {
	if c, ok := r.Capacity.Get(); ok {
		if err := c.validate("capacity"); err != nil {
			return err
		}
	}
	if h, ok := r.Sources.Get(); ok {
		if err := h.validate("sources"); err != nil {
			return err
		}
	}
	bc := r.Identity.Format.BucketCount
	switch r.Kind {
	case LaneSnapshotChunk:
		s := &r.Snapshot
		if s.ChunkCount == 0 || s.ChunkCount > maxInt32 {
			return invalid("body.chunk_count", "%d is not in [1, 2^31-1]", s.ChunkCount)
		}
		if s.ChunkIndex >= s.ChunkCount {
			return invalid("body.chunk_index", "%d is not below chunk_count %d", s.ChunkIndex, s.ChunkCount)
		}
		if s.TotalBuckets != bc {
			return invalid("body.total_buckets", "%d differs from identity.format.bucket_count %d", s.TotalBuckets, bc)
		}
		if len(s.Words) == 0 || len(s.Words)%WordSize != 0 {
			return invalid("body.words", "length %d is not a non-zero multiple of %d", len(s.Words), WordSize)
		}
		if n := uint64(s.Words.Len()); s.FirstBucket >= bc || n > bc-s.FirstBucket {
			return invalid("body.first_bucket", "buckets [%d, %d+%d) exceed total_buckets %d", s.FirstBucket, s.FirstBucket, n, bc)
		}
	case LaneDelta:
		im := r.Delta.Images
		if len(im)%ImageSize != 0 {
			return invalid("body.images", "length %d is not a multiple of %d", len(im), ImageSize)
		}
		// The largest bucket first, without a branch per image (every delta takes this path);
		// only a delta that has a bucket out of range looks for the first one.
		var largest uint64
		for rest := []byte(im); len(rest) >= ImageSize; rest = rest[ImageSize:] {
			largest = max(largest, le64(rest))
		}
		if largest >= bc {
			for i := 0; i < len(im); i += ImageSize {
				if b := le64(im[i:]); b >= bc {
					cause := &ImageRangeError{Index: i / ImageSize, Bucket: b, BucketCount: bc}
					return &fieldError{field: "body.images", detail: cause.Error(), cause: cause}
				}
			}
		}
	case LaneHeartbeat, LaneDrainMarker:
	default:
		return invalid("body", "unknown lane record kind %d", r.Kind)
	}
	return nil
}
