package streams_test

import (
	"context"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/ckf/producer"
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

// The streamed writes' tests run on an in-process kfake cluster: they check what the writer puts
// in a transaction and when it commits or aborts it, which a read_committed reader of kfake shows
// as well as a broker. The end of a log behind transaction markers (the last stable offset) is
// left to endoflog_broker_test.go on the shared broker.

// streamWriter returns a transactional LaneWriter of lane on topic of k, with writeTimeout
// (0: the default), and the codec it writes with.
func streamWriter(t *testing.T, k *streamtest.Kafka, topic string, lane uint8, writeTimeout time.Duration) (*streams.LaneWriter, *schemas.Codec) {
	t.Helper()
	codec, err := schemas.NewCodec(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	state, err := producer.NewDcState(ckf.NewCkfConfig(1 << 12))
	if err != nil {
		t.Fatal(err)
	}
	id := ckf.ProducerIdentity{Pool: streamtest.Pool(100 + uint64(lane)), Incarnation: 1, LayoutGeneration: 1, Format: state.Format()}
	cl := k.Client(t, append(streams.LaneWriterClientOpts(), kgo.TransactionalID(testenv.UniqueName(t, "txn")))...)
	cfg := streams.DefaultLaneWriterConfig()
	cfg.LaneTopic, cfg.Lane, cfg.Transactional = topic, lane, true
	if writeTimeout > 0 {
		cfg.WriteTimeout = writeTimeout
	}
	w, err := streams.NewLaneWriter(cl, codec, id, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return w, codec
}

// TestLaneWriterStreamedDeltasCommitWithTheNextWrite: deltas streamed in two calls become one
// transaction with the next write, which carries two more; a read_committed reader then finds
// all four, in order, with their images.
func TestLaneWriterStreamedDeltasCommitWithTheNextWrite(t *testing.T) {
	k := streamtest.NewFakeKafka(t)
	const lane = 3
	lanes := k.NewTopic(t, 16)
	w, codec := streamWriter(t, k, lanes, lane, 0)
	ds := streamDeltas(4)
	for _, part := range [][]ckf.Delta{ds[:1], ds[1:2]} {
		if err := w.StreamDeltas(part); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.WriteDeltas(context.Background(), ds[2:]); err != nil {
		t.Fatal(err)
	}
	recs := k.PartitionRecords(t, lanes, lane)
	if len(recs) != len(ds) {
		t.Fatalf("%d committed records, want %d", len(recs), len(ds))
	}
	for i, rec := range recs {
		lr, err := codec.DecodeLaneRecord(rec.Value)
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
	k := streamtest.NewFakeKafka(t)
	w, _ := streamWriter(t, k, k.NewTopic(t, 1), 5, 2*time.Second)
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
	k := streamtest.NewFakeKafka(t)
	const lane = 4
	lanes := k.NewTopic(t, 16)
	w, _ := streamWriter(t, k, lanes, lane, 0)
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
	if recs := k.PartitionRecords(t, lanes, lane); len(recs) != 2 {
		t.Fatalf("%d committed records after the background commit, want 2", len(recs))
	}
	if err := w.WriteDeltas(context.Background(), ds[2:]); err != nil {
		t.Fatalf("the write after a background commit: %v", err)
	}
	if recs := k.PartitionRecords(t, lanes, lane); len(recs) != 3 {
		t.Fatalf("%d committed records, want 3", len(recs))
	}
}

// TestLaneWriterCommitStreamedAsyncFailure: a streamed delta that cannot be delivered makes the
// background commit report an error instead of committing without it.
func TestLaneWriterCommitStreamedAsyncFailure(t *testing.T) {
	k := streamtest.NewFakeKafka(t)
	w, _ := streamWriter(t, k, k.NewTopic(t, 1), 5, 2*time.Second)
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
