package streams

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/ckf/producer"
	"github.com/ckf-stream/ckf-stream/schemas"
)

// The split arithmetic: what one lane record carries, and how the relay cuts a publication
// into deltas that each fit.

func limitTestIdentity(t *testing.T, cfg ckf.CkfConfig) (ckf.ProducerIdentity, *producer.DcState) {
	t.Helper()
	state, err := producer.NewDcState(cfg)
	if err != nil {
		t.Fatal(err)
	}
	pool := ckf.PoolID{Domain: ckf.IndexerDomainID{
		CacheSemantics: ckf.CacheSemanticsID{Digest: ckf.Digest128{0xC5}, Source: ckf.IdentityExplicit},
		RoutingScope:   ckf.RoutingScopeID{Digest: ckf.Digest128{0x5C}, Source: ckf.IdentityExplicit},
	}, Dc: 104}
	return ckf.ProducerIdentity{Pool: pool, Incarnation: 1, LayoutGeneration: 1, Format: state.Format()}, state
}

func limitTestCodec(t *testing.T) *schemas.Codec {
	t.Helper()
	codec, err := schemas.NewCodec(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return codec
}

// limitTestWriter is a lane writer without a client (only its arithmetic is used).
func limitTestWriter(t *testing.T, codec *schemas.Codec, id ckf.ProducerIdentity, maxRecordBytes, chunkWords int) *LaneWriter {
	t.Helper()
	cfg := DefaultLaneWriterConfig()
	cfg.LaneTopic, cfg.MaxRecordBytes, cfg.ChunkWords = "lanes", maxRecordBytes, chunkWords
	w, err := NewLaneWriter(nil, codec, id, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// exactLimitFor returns the smallest record limit at which a delta carries n images.
func exactLimitFor(t *testing.T, codec *schemas.Codec, id ckf.ProducerIdentity, n int) int {
	t.Helper()
	for limit := MinLaneRecordBytes; limit < MinLaneRecordBytes+schemas.ImageSize*(n+64); limit++ {
		if limitTestWriter(t, codec, id, limit, DefaultChunkWords).MaxDeltaImages() >= n {
			return limit
		}
	}
	t.Fatalf("no limit up to %d carries %d images", MinLaneRecordBytes+schemas.ImageSize*(n+64), n)
	return 0
}

// TestLaneRecordBudget: a delta of MaxDeltaImages images and a snapshot chunk of ChunkWords
// words, every other field at its widest encoding, fit in the record limit with the batch and
// record framing (franz-go's count: 65 bytes of batch, 36 of framing at most, the key); and the
// budget wastes less than one image or word beyond those fixed bounds. A limit that fits exactly
// n images carries n, one byte less carries n-1.
func TestLaneRecordBudget(t *testing.T) {
	codec := limitTestCodec(t)
	id, _ := limitTestIdentity(t, ckf.NewCkfConfig(16))
	id.Format = ckf.NewFormatIdentity(ckf.DefaultSeed, 1<<24) // more buckets than a 16 MiB chunk has words
	wid := WireIdentity(id)
	key := len(id.Pool.String())
	for _, limit := range []int{MinLaneRecordBytes, 4096, 64 << 10, DefaultLaneRecordBytes, 16 << 20} {
		w := limitTestWriter(t, codec, id, limit, 1<<30)
		n, words := w.MaxDeltaImages(), w.ChunkWords()
		fixedBound := BatchOverheadBytes + RecordFramingBytes + key
		// The capacity state a relay's records carry, at its widest.
		capacity := schemas.Some(schemas.CapacityState{ResidentBlocks: 1<<63 - 1, OmittedBlocks: 1<<63 - 1, CapacityOmissions: 1<<63 - 1})
		delta, err := codec.EncodeLaneRecord(schemas.LaneRecord{Identity: wid, Kind: schemas.LaneDelta, Delta: schemas.Delta{
			BaseSequence: 1<<63 + 5, Sequence: 1<<63 + 6, Images: make(schemas.PackedImages, n*schemas.ImageSize)}, Capacity: capacity})
		if err != nil {
			t.Fatal(err)
		}
		if size := len(delta) + fixedBound; size > limit {
			t.Errorf("limit %d: a delta of %d images takes %d bytes", limit, n, size)
		} else if limit-size >= schemas.ImageSize+bytesLengthGrowth+20 {
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
		} else if limit-size >= schemas.WordSize+bytesLengthGrowth+20 {
			t.Errorf("limit %d: a chunk of %d words takes %d bytes; room for another word is wasted", limit, words, size)
		}
	}
	for _, n := range []int{15, 30, 61} { // the smallest limit, MinLaneRecordBytes, carries 14
		limit := exactLimitFor(t, codec, id, n)
		if got := limitTestWriter(t, codec, id, limit, DefaultChunkWords).MaxDeltaImages(); got != n {
			t.Errorf("limit %d: %d images; want exactly %d", limit, got, n)
		}
		if limit > MinLaneRecordBytes {
			if got := limitTestWriter(t, codec, id, limit-1, DefaultChunkWords).MaxDeltaImages(); got != n-1 {
				t.Errorf("limit %d: %d images; want %d", limit-1, got, n-1)
			}
		}
	}
	// The configured chunk size stands when it fits, and shrinks when it does not.
	if w := limitTestWriter(t, codec, id, DefaultLaneRecordBytes, DefaultChunkWords); w.ChunkWords() != DefaultChunkWords {
		t.Errorf("the default record limit shrinks the default chunk to %d words", w.ChunkWords())
	}
	if w := limitTestWriter(t, codec, id, 64<<10, DefaultChunkWords); w.ChunkWords() >= 64<<10/schemas.WordSize || w.ChunkWords() < 8000 {
		t.Errorf("a 64 KiB limit gives chunks of %d words", w.ChunkWords())
	}
}

// TestLaneWriterRefusesOversizedDelta: a delta over MaxDeltaImages is refused before anything is
// produced (the writer has no client: reaching the produce would panic).
func TestLaneWriterRefusesOversizedDelta(t *testing.T) {
	codec := limitTestCodec(t)
	id, _ := limitTestIdentity(t, ckf.NewCkfConfig(4096))
	w := limitTestWriter(t, codec, id, 4096, DefaultChunkWords)
	images := make([]ckf.BucketImage, w.MaxDeltaImages()+1)
	err := w.WriteDeltas(context.Background(), []ckf.Delta{{Identity: id, BaseSequence: 0, Sequence: 1, Images: images}})
	if !errors.Is(err, ErrLaneRecordTooLarge) {
		t.Fatalf("got %v; want ErrLaneRecordTooLarge", err)
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
		pieces := SplitPublication(images[:tc.n], tc.per)
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
