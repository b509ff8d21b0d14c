package streams_test

import (
	"context"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/ckf-stream/ckf-stream/streams"
	"github.com/ckf-stream/ckf-stream/streams/internal/streamtest"
	"github.com/twmb/franz-go/pkg/kgo"
)

// readAll reads topic of k from its start until n records arrived.
func readAll(t *testing.T, k *streamtest.Kafka, topic string, n int) []*kgo.Record {
	t.Helper()
	cl := k.Client(t, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	ctx, cancel := context.WithTimeout(context.Background(), streamtest.Converge)
	defer cancel()
	var out []*kgo.Record
	for len(out) < n {
		fs := cl.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			t.Fatalf("reading %s: %v (%d of %d records)", topic, err, len(out), n)
		}
		out = append(out, fs.Records()...)
	}
	return out
}

// TestOutputsProduceAndCountFailures (in process, kfake): the indexer's side records land on their
// topics, keyed by lane (lane events, snapshot requests) or by the source key (dead letters),
// with the consumer instance and times filled in; a record the codec refuses and one whose
// topic does not exist are counted as failed, not retried.
func TestOutputsProduceAndCountFailures(t *testing.T) {
	k := streamtest.NewFakeKafka(t)
	topics := streams.OutputTopics{LaneEvents: k.NewTopic(t, 2), DeadLetter: k.NewTopic(t, 1), Control: k.NewTopic(t, 1)}
	codec, err := schemas.NewCodec(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	out := streams.NewOutputs(k.Client(t, kgo.UnknownTopicRetries(1)), codec, 42, topics, nil)
	before := time.Now()
	out.LaneEvent(schemas.LaneEvent{Lane: 7, Kind: schemas.EventProgress})
	src := &kgo.Record{Topic: "lanes", Partition: 3, Offset: 99, Key: []byte("k"), Value: []byte("bad bytes")}
	out.DeadLetter(src, schemas.DeadLetterMalformed, "not a lane record", "indexer")
	out.RequestSnapshot(4, streamtest.Pool(9), schemas.ReasonFaultRecovery, "why", 123)
	if err := out.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := out.Failed(); n != 0 {
		t.Fatalf("%d outputs failed", n)
	}

	ev := readAll(t, k, topics.LaneEvents, 1)[0]
	e, err := codec.DecodeLaneEvent(ev.Value)
	if err != nil || string(ev.Key) != "lane-7" || e.Lane != 7 || e.Kind != schemas.EventProgress || e.ConsumerInstance != 42 || e.EventTime.Before(before.Truncate(time.Millisecond)) {
		t.Errorf("lane event key %q: %+v (%v)", ev.Key, e, err)
	}
	dl := readAll(t, k, topics.DeadLetter, 1)[0]
	d, err := codec.DecodeDeadLetter(dl.Value)
	if err != nil || string(dl.Key) != "k" || d.SourceTopic != "lanes" || d.SourcePartition != 3 || d.SourceOffset != 99 ||
		string(d.Value) != "bad bytes" || d.ReasonCode != schemas.DeadLetterMalformed || d.Component != "indexer" {
		t.Errorf("dead letter key %q: %+v (%v)", dl.Key, d, err)
	}
	sr := readAll(t, k, topics.Control, 1)[0]
	c, err := codec.DecodeControlRecord(sr.Value)
	if err != nil || string(sr.Key) != "lane-4" || c.Kind != schemas.ControlSnapshotRequest || c.SnapshotRequest.Lane != 4 ||
		c.SnapshotRequest.Requester != 42 || c.SnapshotRequest.AfterOffset != 123 || c.SnapshotRequest.Reason != schemas.ReasonFaultRecovery {
		t.Errorf("snapshot request key %q: %+v (%v)", sr.Key, c, err)
	}

	// Failures are counted: a topic that does not exist, and a lane event the codec refuses.
	missing := streams.NewOutputs(k.Client(t, kgo.UnknownTopicRetries(1)), codec, 42,
		streams.OutputTopics{LaneEvents: "no-such-topic"}, nil)
	missing.LaneEvent(schemas.LaneEvent{Lane: 1, Kind: schemas.EventProgress})
	missing.LaneEvent(schemas.LaneEvent{Lane: 1, Kind: schemas.LaneEventKind(250)})
	if err := missing.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := missing.Failed(); n != 2 {
		t.Fatalf("%d outputs failed, want 2 (a missing topic, an unencodable event)", n)
	}
}
