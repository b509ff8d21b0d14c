package streams

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Finding a snapshot on a mirrored lane (consumer §9.8, design §8). A mirror's offsets are not
// the source's, so the offsets a snapshot index entry holds mean nothing in another region; the
// entry's write time and the lane protocol's identity and sequence do. The relay stamps the
// snapshot's chunks before it writes the entry, on one clock, and MirrorMaker keeps the records'
// timestamps, so the first offset whose timestamp is at or after (write time - margin) lies at or
// before chunk 0 once the margin covers the time the relay took to write the chunks. Reading
// forward from there, chunk 0 of (identity, sequence) is met first; a later chunk of it met first
// means the margin was too short, and the seek is repeated with twice the margin.

// DefaultSnapshotSeekMargin is SnapshotSeek.Margin's default: the first seek lists the offset for
// one second before the entry's write time. A relay writes a snapshot of 2^20 buckets (8 MiB) in
// well under a second on a healthy cluster; a longer write costs one more listing per doubling.
const DefaultSnapshotSeekMargin = time.Second

// ErrSnapshotNotFound is the cause of a FindSnapshotByTime that read the partition up to its end
// without meeting chunk 0 of the snapshot: it is not mirrored yet, or no longer retained. The
// lane then asks for a snapshot, as it does when no snapshot is indexed.
var ErrSnapshotNotFound = errors.New("streams: the indexed snapshot is not on the partition")

// SnapshotSeek names the snapshot to find and where.
type SnapshotSeek struct {
	Topic     string
	Partition int32
	// Entry is the lane's snapshot index entry, read from the mirrored index: its identity,
	// sequence and write time are used, never its offsets.
	Entry schemas.SnapshotIndexEntry
	// Margin is the first seek's distance before Entry.WriteTime; each seek that lands inside
	// the snapshot doubles it. 0 takes DefaultSnapshotSeekMargin.
	Margin time.Duration
}

// SnapshotFound is where FindSnapshotByTime found the snapshot.
type SnapshotFound struct {
	// Offset is chunk 0's offset on the partition searched.
	Offset int64
	// Seeks is how many listings by time it took (1 when the first margin sufficed).
	Seeks int
	// Margin is the margin of the seek that found chunk 0.
	Margin time.Duration
	// Read is how many records were read, over every seek.
	Read int
}

// FindSnapshotByTime finds chunk 0 of the snapshot s.Entry names on partition s.Partition of
// s.Topic by the entry's write time, identity and sequence (consumer §9.8). opts carry the
// connection; the reader adds its assignment and reads read_committed (an aborted snapshot's
// chunks are never found). It reads each seek's records up to the partition's last stable offset
// as listed at the seek. The error wraps ErrSnapshotNotFound when chunk 0 is not on the
// partition, and ctx's error or the Kafka error of a listing or fetch otherwise.
func FindSnapshotByTime(ctx context.Context, adm *kadm.Client, opts []kgo.Opt, codec *schemas.Codec, s SnapshotSeek) (SnapshotFound, error) {
	margin := s.Margin
	if margin <= 0 {
		margin = DefaultSnapshotSeekMargin
	}
	var found SnapshotFound
	for {
		found.Seeks++
		found.Margin = margin
		start, end, atLogStart, err := seekRange(ctx, adm, s.Topic, s.Partition, s.Entry.WriteTime.Add(-margin))
		if err != nil {
			return found, err
		}
		if start >= end {
			return found, fmt.Errorf("%w: %s[%d] holds no record from %v on (log end %d)", ErrSnapshotNotFound,
				s.Topic, s.Partition, s.Entry.WriteTime.Add(-margin).UTC(), end)
		}
		chunk, at, read, err := readToChunk(ctx, opts, codec, s, start, end)
		found.Read += read
		switch {
		case err != nil:
			return found, err
		case chunk == 0:
			found.Offset = at
			return found, nil
		case chunk < 0:
			return found, fmt.Errorf("%w: no chunk of snapshot %d in %s[%d] offsets [%d,%d)", ErrSnapshotNotFound,
				s.Entry.Sequence, s.Topic, s.Partition, start, end)
		case atLogStart:
			// Landed on the log's first record and still inside the snapshot: its chunk 0 is
			// gone (retention) and no margin brings it back.
			return found, fmt.Errorf("%w: %s[%d] starts at chunk %d of snapshot %d", ErrSnapshotNotFound,
				s.Topic, s.Partition, chunk, s.Entry.Sequence)
		}
		margin *= 2
	}
}

// seekRange lists the first offset at or after t and the partition's last stable offset, and
// says whether that first offset is the log's first (a seek that lands there cannot move
// earlier).
func seekRange(ctx context.Context, adm *kadm.Client, topic string, p int32, t time.Time) (start, end int64, atLogStart bool, err error) {
	var byTime, ends kadm.ListedOffsets
	err = RetryListing(ctx, func() (err error) {
		if byTime, err = adm.ListOffsetsAfterMilli(ctx, t.UnixMilli(), topic); err == nil {
			err = byTime.Error()
		}
		if err == nil {
			if ends, err = adm.ListCommittedOffsets(ctx, topic); err == nil {
				err = ends.Error()
			}
		}
		return err
	})
	if err != nil {
		return 0, 0, false, fmt.Errorf("streams: listing %s[%d] by time: %w", topic, p, err)
	}
	at, ok1 := byTime.Lookup(topic, p)
	e, ok2 := ends.Lookup(topic, p)
	if !ok1 || !ok2 {
		return 0, 0, false, fmt.Errorf("streams: listing %s[%d] by time: %w", topic, p, ErrNoPartitions)
	}
	if at.Offset < 0 { // no record at or after t
		return e.Offset, e.Offset, false, nil
	}
	starts, err := adm.ListStartOffsets(ctx, topic)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return 0, 0, false, fmt.Errorf("streams: listing the start of %s[%d]: %w", topic, p, err)
	}
	so, _ := starts.Lookup(topic, p)
	return max(at.Offset, so.Offset), e.Offset, at.Offset <= so.Offset, nil
}

// readToChunk reads [start, end) of the partition until it meets a chunk of the entry's snapshot,
// and returns that chunk's index and offset, or index -1 when it met none.
func readToChunk(ctx context.Context, opts []kgo.Opt, codec *schemas.Codec, s SnapshotSeek, start, end int64) (chunk int64, at int64, read int, err error) {
	all := append(slices.Clip(opts), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{s.Topic: {s.Partition: kgo.NewOffset().At(start)}}))
	cl, err := kgo.NewClient(append(all, EndOfLogConsumerOpts()...)...)
	if err != nil {
		return 0, 0, 0, fmt.Errorf("streams: reading %s[%d]: %w", s.Topic, s.Partition, err)
	}
	defer cl.Close()
	for {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return 0, 0, read, fmt.Errorf("streams: reading %s[%d] for snapshot %d: %w", s.Topic, s.Partition, s.Entry.Sequence, err)
		}
		var ferr error
		fs.EachError(func(t string, p int32, err error) {
			if ferr == nil {
				ferr = fmt.Errorf("streams: reading %s[%d]: %w", t, p, err)
			}
		})
		if ferr != nil {
			return 0, 0, read, ferr
		}
		chunk, at := int64(-1), int64(-1)
		reached := false
		fs.EachRecord(func(r *kgo.Record) {
			if reached || chunk >= 0 {
				return
			}
			if r.Offset+1 >= end {
				reached = true
			}
			if r.Offset >= end || r.Attrs.IsControl() {
				return
			}
			read++
			if i, ok := chunkOf(codec, r, &s.Entry); ok {
				chunk, at = int64(i), r.Offset
			}
		})
		if chunk >= 0 {
			return chunk, at, read, nil
		}
		if reached {
			return -1, -1, read, nil
		}
	}
}

// chunkOf returns the chunk index of r when r is a snapshot chunk of the entry's identity and
// sequence. A record that does not decode is not one.
func chunkOf(codec *schemas.Codec, r *kgo.Record, e *schemas.SnapshotIndexEntry) (uint32, bool) {
	lr, err := codec.DecodeLaneRecord(r.Value)
	if err != nil || lr.Kind != schemas.LaneSnapshotChunk || lr.Identity != e.Identity || lr.Snapshot.Sequence != e.Sequence {
		return 0, false
	}
	return lr.Snapshot.ChunkIndex, true
}
