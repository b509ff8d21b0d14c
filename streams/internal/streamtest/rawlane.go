package streamtest

import (
	"context"
	"testing"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/ckf-stream/ckf-stream/streams"
	"github.com/twmb/franz-go/pkg/kgo"
)

// RawLane writes hand-made records to a lane partition, bypassing every producer-side check.
type RawLane struct {
	t     testing.TB
	e     *Env
	lane  uint8
	cl    *kgo.Client
	codec *schemas.Codec
	Last  int64 // offset of the last record written
}

func (e *Env) Raw(lane uint8) *RawLane {
	return &RawLane{t: e.T, e: e, lane: lane, codec: e.Codec,
		cl: e.Cluster.Client(e.T, streams.LaneWriterClientOpts()...)}
}

func (r *RawLane) Value(v []byte) {
	r.t.Helper()
	rec := &kgo.Record{Topic: r.e.Topics.Lanes, Partition: int32(r.lane), Value: v}
	if err := r.cl.ProduceSync(context.Background(), rec).FirstErr(); err != nil {
		r.t.Fatal(err)
	}
	r.Last = rec.Offset
}

func (r *RawLane) Encode(rec schemas.LaneRecord) []byte {
	r.t.Helper()
	b, err := r.codec.EncodeLaneRecord(rec)
	if err != nil {
		r.t.Fatalf("encode: %v", err)
	}
	return b
}

func (r *RawLane) Delta(id ckf.ProducerIdentity, base, seq uint64, images ...[2]uint64) {
	r.t.Helper()
	var packed []byte
	for _, im := range images {
		packed = schemas.AppendImage(packed, im[0], im[1])
	}
	r.Value(r.Encode(schemas.LaneRecord{Identity: streams.WireIdentity(id), Kind: schemas.LaneDelta,
		Delta: schemas.Delta{BaseSequence: base, Sequence: seq, Images: packed}}))
}

// Chunks writes a snapshot of words as chunks of size n, in the given chunk order.
func (r *RawLane) Chunks(id ckf.ProducerIdentity, seq uint64, words []uint64, n int, order []int) {
	r.t.Helper()
	count := (len(words) + n - 1) / n
	for _, i := range order {
		lo, hi := i*n, min((i+1)*n, len(words))
		r.Value(r.Encode(schemas.LaneRecord{Identity: streams.WireIdentity(id), Kind: schemas.LaneSnapshotChunk,
			Snapshot: schemas.SnapshotChunk{Sequence: seq, ChunkIndex: uint32(i), ChunkCount: uint32(count),
				FirstBucket: uint64(lo), TotalBuckets: uint64(len(words)), Words: schemas.AppendU64s(nil, words[lo:hi])}}))
	}
}
