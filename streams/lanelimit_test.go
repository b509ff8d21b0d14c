package streams_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/ckf-stream/ckf-stream/streams"
	"github.com/ckf-stream/ckf-stream/streams/internal/streamtest"
)

// The split arithmetic: what one lane record carries, and how the relay cuts a publication
// into deltas that each fit.

// TestLaneRecordBudget: a delta of MaxDeltaImages images and a snapshot chunk of ChunkWords
// words, every other field at its widest encoding, fit in the record limit with the batch and
// record framing (franz-go's count: 65 bytes of batch, 36 of framing at most, the key); and the
// budget wastes less than one image or word beyond those fixed bounds. A limit that fits exactly
// n images carries n, one byte less carries n-1.
func TestLaneRecordBudget(t *testing.T) {
	codec := streamtest.ConfigCodec(t)
	id, _ := streamtest.LimitIdentity(t, ckf.NewCkfConfig(16))
	id.Format = ckf.NewFormatIdentity(ckf.DefaultSeed, 1<<24) // more buckets than a 16 MiB chunk has words
	wid := streams.WireIdentity(id)
	key := len(id.Pool.String())
	for _, limit := range []int{streams.MinLaneRecordBytes, 4096, 64 << 10, streams.DefaultLaneRecordBytes, 16 << 20} {
		w := streamtest.ClientlessWriter(t, codec, id, limit, 1<<30)
		n, words := w.MaxDeltaImages(), w.ChunkWords()
		fixedBound := streams.BatchOverheadBytes + streams.RecordFramingBytes + key
		// The capacity state a relay's records carry, at its widest.
		capacity := schemas.Some(schemas.CapacityState{ResidentBlocks: 1<<63 - 1, OmittedBlocks: 1<<63 - 1, CapacityOmissions: 1<<63 - 1})
		delta, err := codec.EncodeLaneRecord(schemas.LaneRecord{Identity: wid, Kind: schemas.LaneDelta, Delta: schemas.Delta{
			BaseSequence: 1<<63 + 5, Sequence: 1<<63 + 6, Images: make(schemas.PackedImages, n*schemas.ImageSize)}, Capacity: capacity})
		if err != nil {
			t.Fatal(err)
		}
		if size := len(delta) + fixedBound; size > limit {
			t.Errorf("limit %d: a delta of %d images takes %d bytes", limit, n, size)
		} else if limit-size >= schemas.ImageSize+streams.BytesLengthGrowth+20 {
			t.Errorf("limit %d: a delta of %d images takes %d bytes; room for another image is wasted", limit, n, size)
		}
		bc := wid.Format.BucketCount
		chunk, err := codec.EncodeLaneRecord(schemas.LaneRecord{Identity: wid, Kind: schemas.LaneSnapshotChunk, Snapshot: schemas.SnapshotChunk{
			Sequence: 1<<63 + 7, ChunkIndex: 1<<31 - 2, ChunkCount: 1<<31 - 1, FirstBucket: bc - uint64(words), TotalBuckets: bc,
			Words: make(schemas.PackedU64, words*schemas.WordSize)}, Capacity: capacity})
		if err != nil {
			t.Fatal(err)
		}
		if size := len(chunk) + fixedBound; size > limit {
			t.Errorf("limit %d: a chunk of %d words takes %d bytes", limit, words, size)
		} else if limit-size >= schemas.WordSize+streams.BytesLengthGrowth+20 {
			t.Errorf("limit %d: a chunk of %d words takes %d bytes; room for another word is wasted", limit, words, size)
		}
	}
	for _, n := range []int{15, 30, 61} { // the smallest limit, streams.MinLaneRecordBytes, carries 14
		limit := streamtest.ExactLimitFor(t, codec, id, n)
		if got := streamtest.ClientlessWriter(t, codec, id, limit, streams.DefaultChunkWords).MaxDeltaImages(); got != n {
			t.Errorf("limit %d: %d images; want exactly %d", limit, got, n)
		}
		if limit > streams.MinLaneRecordBytes {
			if got := streamtest.ClientlessWriter(t, codec, id, limit-1, streams.DefaultChunkWords).MaxDeltaImages(); got != n-1 {
				t.Errorf("limit %d: %d images; want %d", limit-1, got, n-1)
			}
		}
	}
	// The configured chunk size stands when it fits, and shrinks when it does not.
	if w := streamtest.ClientlessWriter(t, codec, id, streams.DefaultLaneRecordBytes, streams.DefaultChunkWords); w.ChunkWords() != streams.DefaultChunkWords {
		t.Errorf("the default record limit shrinks the default chunk to %d words", w.ChunkWords())
	}
	if w := streamtest.ClientlessWriter(t, codec, id, 64<<10, streams.DefaultChunkWords); w.ChunkWords() >= 64<<10/schemas.WordSize || w.ChunkWords() < 8000 {
		t.Errorf("a 64 KiB limit gives chunks of %d words", w.ChunkWords())
	}
}

// TestLaneWriterRefusesOversizedDelta: a delta over MaxDeltaImages is refused before anything is
// produced (the writer has no client: reaching the produce would panic).
func TestLaneWriterRefusesOversizedDelta(t *testing.T) {
	codec := streamtest.ConfigCodec(t)
	id, _ := streamtest.LimitIdentity(t, ckf.NewCkfConfig(4096))
	w := streamtest.ClientlessWriter(t, codec, id, 4096, streams.DefaultChunkWords)
	images := make([]ckf.BucketImage, w.MaxDeltaImages()+1)
	err := w.WriteDeltas(context.Background(), []ckf.Delta{{Identity: id, BaseSequence: 0, Sequence: 1, Images: images}})
	if !errors.Is(err, streams.ErrLaneRecordTooLarge) {
		t.Fatalf("got %v; want streams.ErrLaneRecordTooLarge", err)
	}
}

func TestSplitPublication(t *testing.T) {
	images := make([]ckf.BucketImage, 10)
	for i := range images {
		images[i] = ckf.BucketImage{Bucket: uint64(i), Value: uint64(100 + i)}
	}
	for _, tc := range []struct{ n, per, want int }{
		{1, 1, 1}, {3, 3, 1}, {4, 3, 2}, {6, 3, 2}, {7, 3, 3}, {10, 1, 10}, {10, 20, 1},
	} {
		pieces := streams.SplitPublication(images[:tc.n], tc.per)
		if len(pieces) != tc.want {
			t.Errorf("%d images at %d per delta: %d pieces; want %d", tc.n, tc.per, len(pieces), tc.want)
		}
		var joined []ckf.BucketImage
		for i, p := range pieces {
			if len(p) > tc.per || len(p) == 0 || (i < len(pieces)-1 && len(p) != tc.per) {
				t.Errorf("%d images at %d per delta: piece %d has %d", tc.n, tc.per, i, len(p))
			}
			if cap(p) != len(p) {
				t.Errorf("piece %d has room to grow into the next", i)
			}
			joined = append(joined, p...)
		}
		if !slices.Equal(joined, images[:tc.n]) {
			t.Errorf("%d images at %d per delta: pieces %v do not join to the publication", tc.n, tc.per, pieces)
		}
	}
}
