package streams

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// How big one lane record may be. The broker refuses a record batch larger than the topic's
// max.message.bytes (MESSAGE_TOO_LARGE) and franz-go refuses to build one larger than the
// client's ProducerBatchMaxBytes; both count the whole batch, so a record must fit in a batch of
// its own. A lane writer sizes its records against LaneWriterConfig.MaxRecordBytes from the
// codec's own encoding, measured once per writer (recordBudget); the relay reads the limit from
// the lane topic at every new incarnation (ReadTopicMaxMessageBytes, relayLaneRecordLimit).

const (
	// BatchOverheadBytes is what franz-go counts for a record batch besides its records (the
	// 61-byte v2 batch header and the 4-byte length in front of it); the broker counts 4 fewer.
	BatchOverheadBytes = 65
	// RecordFramingBytes bounds a record's framing besides its key and value bytes, every varint
	// at its widest: length 5, attributes 1, timestamp delta 10, offset delta 5, key length 5,
	// value length 5, header count 5.
	RecordFramingBytes = 36
	// bytesLengthGrowth bounds how much longer an Avro bytes field's length prefix gets between
	// empty (1 byte) and any length (a varint, at most 10 bytes).
	bytesLengthGrowth = 9
	// widestSequence is a sequence number whose Avro long encoding takes the most bytes (10).
	widestSequence = uint64(1) << 62

	// kafkaDefaultMessageMaxBytes is the broker's default message.max.bytes (1 MiB + 12).
	kafkaDefaultMessageMaxBytes = 1_048_588
	// FallbackLaneRecordBytes is the relay's limit when the lane topic's configuration cannot be
	// read (no DescribeConfigs permission, broker unreachable): the smaller of the broker's
	// default and franz-go's default batch limit.
	FallbackLaneRecordBytes = min(kafkaDefaultMessageMaxBytes, DefaultLaneRecordBytes)
	// MaxRelayLaneRecordBytes caps the limit the relay takes from a topic that allows larger
	// records: 16 MiB carries a million images, a whole 2^20-bucket filter's worth, and a larger
	// record only makes every replica's fetch of it longer and its buffers larger.
	MaxRelayLaneRecordBytes = 16 << 20
)

// ErrLaneRecordLimitTooSmall means the lane topic's max.message.bytes is below MinLaneRecordBytes, too
// small for a lane record, or the checkpoint topic's leaves no room for a checkpoint chunk. The
// relay's Run returns it (wrapped) at the incarnation that read it: raise the topic's
// max.message.bytes.
var ErrLaneRecordLimitTooSmall = errors.New("streams: lane topic's max.message.bytes is too small for lane records")

// laneRecordBudget is what one record of a writer's MaxRecordBytes carries.
type laneRecordBudget struct {
	maxImages int // images per delta
	maxWords  int // bucket words per snapshot chunk
}

// recordBudget measures the fixed part of the writer's delta and snapshot-chunk records with
// its own codec, identity and key, every varint at its widest, and returns how many images and
// words fit next to it in MaxRecordBytes. An error is a *ConfigError on MaxRecordBytes (no
// room for one image or word) or the codec's refusal of the identity.
func (w *LaneWriter) recordBudget() (laneRecordBudget, error) {
	room := w.cfg.MaxRecordBytes - BatchOverheadBytes - RecordFramingBytes - len(w.key)
	// Every record may carry a capacity state and the sources' health (ReportCapacity,
	// ReportSources): measure them at their widest too.
	widestCapacity := schemas.Some(schemas.CapacityState{ResidentBlocks: 1<<63 - 1, OmittedBlocks: 1<<63 - 1, CapacityOmissions: 1<<63 - 1})
	widestSources := schemas.Some(schemas.SourceHealth{DegradedSources: 1<<63 - 1, LostHistoryClears: 1<<63 - 1})
	delta, err := w.codec.EncodeLaneRecord(schemas.LaneRecord{Identity: w.identity, Kind: schemas.LaneDelta,
		Delta: schemas.Delta{BaseSequence: widestSequence, Sequence: widestSequence + 1}, Capacity: widestCapacity, Sources: widestSources})
	if err != nil {
		return laneRecordBudget{}, fmt.Errorf("streams: lane writer: measuring a delta: %w", err)
	}
	bc := w.identity.Format.BucketCount
	chunk, err := w.codec.EncodeLaneRecord(schemas.LaneRecord{Identity: w.identity, Kind: schemas.LaneSnapshotChunk,
		Snapshot: schemas.SnapshotChunk{Sequence: widestSequence, ChunkIndex: 1<<31 - 2, ChunkCount: 1<<31 - 1,
			FirstBucket: bc - 1, TotalBuckets: bc, Words: make(schemas.PackedU64, schemas.WordSize)}, Capacity: widestCapacity, Sources: widestSources})
	if err != nil {
		return laneRecordBudget{}, fmt.Errorf("streams: lane writer: measuring a snapshot chunk: %w", err)
	}
	b := laneRecordBudget{
		maxImages: imagesThatFit(room, len(delta)+bytesLengthGrowth),
		maxWords:  (room - (len(chunk) - schemas.WordSize + bytesLengthGrowth)) / schemas.WordSize,
	}
	if b.maxImages < 1 || b.maxWords < 1 {
		return laneRecordBudget{}, &ConfigError{Config: "lane writer", Field: "MaxRecordBytes",
			Reason: fmt.Sprintf("%d bytes leave no room for one image or word next to the record's fixed part", w.cfg.MaxRecordBytes)}
	}
	return b, nil
}

// imagesThatFit is how many packed images fit in room bytes next to a fixed part of fixed bytes.
func imagesThatFit(room, fixed int) int { return max(room-fixed, 0) / schemas.ImageSize }

// SplitPublication cuts images into consecutive pieces of at most maxImages each (maxImages >=
// 1), in order: the pieces' concatenation is images. Each piece aliases images with its
// capacity cut at its end, so appending to one cannot overwrite the next.
func SplitPublication(images []ckf.BucketImage, maxImages int) [][]ckf.BucketImage {
	pieces := make([][]ckf.BucketImage, 0, (len(images)+maxImages-1)/maxImages)
	for len(images) > 0 {
		n := min(len(images), maxImages)
		pieces = append(pieces, images[:n:n])
		images = images[n:]
	}
	return pieces
}

// ReadTopicMaxMessageBytes returns topic's effective max.message.bytes and where it is set: the
// topic's own override, or the broker's message.max.bytes (or its default) when the topic has
// none; DescribeConfigs reports the effective value either way, with its source.
func ReadTopicMaxMessageBytes(ctx context.Context, adm *kadm.Client, topic string) (int, string, error) {
	rcs, err := adm.DescribeTopicConfigs(ctx, topic)
	if err != nil {
		return 0, "", err
	}
	rc, err := rcs.On(topic, nil)
	if err == nil {
		err = rc.Err
	}
	if err != nil {
		return 0, "", err
	}
	for _, c := range rc.Configs {
		if c.Key != "max.message.bytes" {
			continue
		}
		v, err := strconv.Atoi(c.MaybeValue())
		if err != nil {
			return 0, "", fmt.Errorf("max.message.bytes %q: %w", c.MaybeValue(), err)
		}
		return v, c.Source.String(), nil
	}
	return 0, "", errors.New("max.message.bytes not reported")
}

// LaneBatchMaxBytes is the lane client's batch limit: limit for the lane topic, franz-go's
// default for the snapshot index (one small entry per transaction).
//
// The lane topic's limit is set even when it is below franz-go's default: franz-go packs
// consecutive records of a partition into one batch up to its own limit, so with the default a
// transaction of several small deltas could become one batch over a 64 KiB topic's limit, and
// the broker would refuse the whole batch. Above the default it lets a delta be as large as the
// topic allows (fewer pieces per publication), up to MaxRelayLaneRecordBytes, far below the
// 100 MiB franz-go writes to a broker at once.
//
// The relay's checkpoint topic gets its own limit the same way (checkpointLimit: 0 = none).
func LaneBatchMaxBytes(laneTopic string, limit int, checkpointTopic string, checkpointLimit int) kgo.Opt {
	return kgo.ProducerBatchMaxBytesFn(func(topic string) int32 {
		switch {
		case topic == laneTopic:
			return int32(limit)
		case checkpointLimit > 0 && topic == checkpointTopic:
			return int32(checkpointLimit)
		}
		return DefaultLaneRecordBytes
	})
}
