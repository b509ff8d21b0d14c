package lanes

import (
	"context"
	"testing"

	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestDecodeStageKeepsNoReleasedRecord: a run given back to the decode stage holds no reference
// to a record, in or beyond its length. A decoded record points into the batch it was fetched in,
// so a slot left filled kept that batch reachable, and after a catch-up's full runs the slots that
// the later, shorter runs never reach again kept their batches for good (the indexer's RSS
// stepped up at a broker restart in the soak and stayed there).
func TestDecodeStageKeepsNoReleasedRecord(t *testing.T) {
	codec, err := schemas.NewCodec(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	d := newLaneDecoder(nil, codec, 0)
	full := make([]*kgo.Record, decodeRunRecords)
	for i := range full {
		full[i] = &kgo.Record{Value: []byte{0xde, 0xad}, Offset: int64(i)}
	}
	// Every run fills up (a catch-up), then one record at a time (steady load).
	for range decodeBuffers {
		run := <-d.free
		if k := d.fill(run, 1, full); k != decodeRunRecords {
			t.Fatalf("a run took %d of %d records", k, decodeRunRecords)
		}
		d.release(run)
	}
	for range decodeBuffers {
		run := <-d.free
		d.fill(run, 1, full[:1])
		d.release(run)
	}
	for range decodeBuffers {
		run := <-d.free
		for i, r := range run.recs[:cap(run.recs)] {
			if r.rec != nil || len(r.lr.Delta.Images) != 0 {
				t.Fatalf("a released run's slot %d still holds the record at offset %d", i, r.rec.Offset)
			}
		}
		d.free <- run
	}
}
