package lanes

import (
	"context"
	"testing"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/ckf-stream/ckf-stream/streams"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestDecodeStageRuns: the decode stage cuts a lane's records into runs of at most
// decodeRunRecords records and decodeRunImages images, a larger delta alone in its run, in
// offset order and without losing a record; undecodable records and transaction markers travel
// on for the owner to judge.
func TestDecodeStageRuns(t *testing.T) {
	codec, err := schemas.NewCodec(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	pool := ckf.PoolID{Dc: 1}
	id := ckf.ProducerIdentity{Pool: pool, Incarnation: 1, LayoutGeneration: 1, Format: ckf.NewFormatIdentity(ckf.DefaultSeed, 1<<14)}
	delta := func(seq uint64, images int) *kgo.Record {
		var packed []byte
		for j := range images {
			packed = schemas.AppendImage(packed, uint64(j), seq)
		}
		v, err := codec.EncodeLaneRecord(schemas.LaneRecord{Identity: streams.WireIdentity(id), Kind: schemas.LaneDelta,
			Delta: schemas.Delta{BaseSequence: seq - 1, Sequence: seq, Images: packed}})
		if err != nil {
			t.Fatal(err)
		}
		return &kgo.Record{Value: v}
	}
	var recs []*kgo.Record
	images := []int{10_000, 3000, 3000, 3000, 1}
	for i, n := range images {
		recs = append(recs, delta(uint64(i+1), n))
	}
	recs = append(recs, &kgo.Record{Value: []byte{0xde, 0xad}}, &kgo.Record{}) // garbage, an empty record
	for range decodeRunRecords + 3 {
		recs = append(recs, delta(uint64(len(recs)+1), 1))
	}
	for i, r := range recs {
		r.Offset = int64(i)
	}

	d := newLaneDecoder(nil, codec, 0)
	var sizes []int
	next := 0
	for rest := recs; len(rest) > 0; {
		run := <-d.free
		k := d.fill(run, 7, rest)
		if k < 1 || k > decodeRunRecords || run.epoch != 7 {
			t.Fatalf("a run took %d records (epoch %d)", k, run.epoch)
		}
		total := 0
		for i := range run.recs {
			out := &run.recs[i]
			if out.rec.Offset != int64(next) {
				t.Fatalf("record at offset %d decoded in place of %d", out.rec.Offset, next)
			}
			if out.deltaOK() {
				if len(out.images) != out.lr.Delta.Images.Len() || out.images[0].Value != out.lr.Delta.Sequence {
					t.Fatalf("offset %d: %d images decoded, want %d", next, len(out.images), out.lr.Delta.Images.Len())
				}
				total += len(out.images)
			}
			next++
		}
		if total > decodeRunImages && k > 1 {
			t.Fatalf("a run of %d records holds %d images", k, total)
		}
		sizes = append(sizes, k)
		rest = rest[k:]
		d.release(run)
	}
	if next != len(recs) {
		t.Fatalf("%d of %d records decoded", next, len(recs))
	}
	// 10,000 images alone; 3,000 + 3,000 fit, the third 3,000 starts the next run; the rest fill
	// runs of decodeRunRecords.
	if len(sizes) < 4 || sizes[0] != 1 || sizes[1] != 2 {
		t.Fatalf("run sizes %v", sizes)
	}
}

// TestDecodeStageHandsOnBadRecords: a record that does not decode reaches the owner with its
// error, and is not a delta.
func TestDecodeStageHandsOnBadRecords(t *testing.T) {
	codec, err := schemas.NewCodec(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	d := newLaneDecoder(nil, codec, 0)
	run := <-d.free
	if k := d.fill(run, 0, []*kgo.Record{{Value: []byte{0xde, 0xad, 0xbe, 0xef}}, {}}); k != 2 {
		t.Fatalf("took %d records", k)
	}
	for i, out := range run.recs {
		if out.err == nil || out.deltaOK() || out.panicked != nil {
			t.Fatalf("record %d decoded as %+v", i, out)
		}
	}
}
