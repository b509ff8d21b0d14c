package streams_test

import (
	"context"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/ckf-stream/ckf-stream/streams"
	"github.com/ckf-stream/ckf-stream/streams/internal/streamtest"
	"github.com/ckf-stream/ckf-stream/testenv"
	"github.com/twmb/franz-go/pkg/kgo"
)

// streamDeltas returns n consecutive deltas of one image each, sequences 1..n.
func streamDeltas(n int) []ckf.Delta {
	ds := make([]ckf.Delta, n)
	for i := range ds {
		ds[i] = ckf.Delta{BaseSequence: uint64(i), Sequence: uint64(i + 1),
			Images: []ckf.BucketImage{{Bucket: uint64(i), Value: uint64(0x1000 + i)}}}
	}
	return ds
}

// TestLaneWriterStreamedDeltasCommitWithTheNextWrite: deltas streamed in two calls become one
// transaction with the next write, which carries two more; a read_committed reader then finds
// all four, in order, with their images.
func TestLaneWriterStreamedDeltasCommitWithTheNextWrite(t *testing.T) {
	e := streamtest.NewEnv(t, 1<<12)
	const lane = 3
	w := e.TransactionalProducer(lane, 1).Writer
	ds := streamDeltas(4)
	for _, part := range [][]ckf.Delta{ds[:1], ds[1:2]} {
		if err := w.StreamDeltas(part); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.WriteDeltas(context.Background(), ds[2:]); err != nil {
		t.Fatal(err)
	}
	recs := streamtest.LaneRecords(t, e.Topics.Lanes, lane)
	if len(recs) != len(ds) {
		t.Fatalf("%d committed records, want %d", len(recs), len(ds))
	}
	for i, rec := range recs {
		lr, err := e.Codec.DecodeLaneRecord(rec.Value)
		if err != nil {
			t.Fatal(err)
		}
		d := lr.Delta
		if lr.Kind != schemas.LaneDelta || d.Sequence != ds[i].Sequence || d.BaseSequence != ds[i].BaseSequence ||
			d.Images.Len() != 1 || d.Images.At(0).Bucket != ds[i].Images[0].Bucket || d.Images.At(0).Value != ds[i].Images[0].Value {
			t.Fatalf("record %d: %+v, want delta %+v", i, lr, ds[i])
		}
	}
}

// TestLaneWriterStreamedDeltaFailureAbortsTheCommit: a streamed delta that cannot be delivered
// (its partition does not exist) makes the write that would commit it fail instead of
// committing without it.
func TestLaneWriterStreamedDeltaFailureAbortsTheCommit(t *testing.T) {
	e := streamtest.NewEnv(t, 1<<12)
	topic := testenv.NewTopic(t, 1)
	id, _ := e.ProducerState(5, 1)
	cl := e.Cluster.Client(t, append(streams.LaneWriterClientOpts(), kgo.TransactionalID(testenv.UniqueName(t, "txn")))...)
	cfg := streams.DefaultLaneWriterConfig()
	cfg.LaneTopic, cfg.Lane, cfg.Transactional, cfg.WriteTimeout = topic, 5, true, 2*time.Second
	w, err := streams.NewLaneWriter(cl, e.Codec, id, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.StreamDeltas(streamDeltas(2)); err != nil {
		t.Fatal(err)
	}
	if err := w.WriteDeltas(context.Background(), nil); err == nil {
		t.Fatal("the write committed a transaction whose streamed deltas were never delivered")
	}
}

// TestLaneWriterCommitStreamedAsync: with nothing streamed there is nothing to commit (ok false);
// streamed deltas committed in the background are all visible to a read_committed reader once
// the outcome arrives, and the writer then starts the next transaction as usual.
func TestLaneWriterCommitStreamedAsync(t *testing.T) {
	e := streamtest.NewEnv(t, 1<<12)
	const lane = 4
	w := e.TransactionalProducer(lane, 1).Writer
	if _, ok := w.CommitStreamedAsync(context.Background()); ok {
		t.Fatal("a commit started with no streamed transaction open")
	}
	ds := streamDeltas(3)
	if err := w.StreamDeltas(ds[:2]); err != nil {
		t.Fatal(err)
	}
	done, ok := w.CommitStreamedAsync(context.Background())
	if !ok {
		t.Fatal("no commit started for the streamed transaction")
	}
	if err := <-done; err != nil {
		t.Fatalf("background commit: %v", err)
	}
	if recs := streamtest.LaneRecords(t, e.Topics.Lanes, lane); len(recs) != 2 {
		t.Fatalf("%d committed records after the background commit, want 2", len(recs))
	}
	if err := w.WriteDeltas(context.Background(), ds[2:]); err != nil {
		t.Fatalf("the write after a background commit: %v", err)
	}
	if recs := streamtest.LaneRecords(t, e.Topics.Lanes, lane); len(recs) != 3 {
		t.Fatalf("%d committed records, want 3", len(recs))
	}
}

// TestLaneWriterCommitStreamedAsyncFailure: a streamed delta that cannot be delivered makes the
// background commit report an error instead of committing without it.
func TestLaneWriterCommitStreamedAsyncFailure(t *testing.T) {
	e := streamtest.NewEnv(t, 1<<12)
	topic := testenv.NewTopic(t, 1)
	id, _ := e.ProducerState(5, 1)
	cl := e.Cluster.Client(t, append(streams.LaneWriterClientOpts(), kgo.TransactionalID(testenv.UniqueName(t, "txn")))...)
	cfg := streams.DefaultLaneWriterConfig()
	cfg.LaneTopic, cfg.Lane, cfg.Transactional, cfg.WriteTimeout = topic, 5, true, 2*time.Second
	w, err := streams.NewLaneWriter(cl, e.Codec, id, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.StreamDeltas(streamDeltas(2)); err != nil {
		t.Fatal(err)
	}
	done, ok := w.CommitStreamedAsync(context.Background())
	if !ok {
		t.Fatal("no commit started for the streamed transaction")
	}
	if err := <-done; err == nil {
		t.Fatal("the background commit committed a transaction whose streamed deltas were never delivered")
	}
}
