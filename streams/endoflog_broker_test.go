package streams_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/ckf-stream/ckf-stream/streams"
	"github.com/ckf-stream/ckf-stream/streams/internal/streamtest"
	"github.com/ckf-stream/ckf-stream/testenv"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap/zaptest"
)

// The end-of-log readers of the snapshot index: the topic is written with transactions like the
// relays write it, so its log ends with transaction markers that no data record carries. Where
// the end sits behind those markers (the last stable offset of a read_committed reader) is the
// broker's to show: those tests run on the shared broker. The rest (empty and deleted
// partitions, records after the listing, a held partition) is the reader's own logic and runs on
// an in-process kfake cluster.

// indexEnv is one test's snapshot-index topic, a transactional producer on it (records are
// placed on the partition they name), and the reader's connection.
type indexEnv struct {
	t     *testing.T
	topic string
	codec *schemas.Codec
	adm   *kadm.Client
	txn   *kgo.Client
	opts  []kgo.Opt
}

// compacted is the snapshot index's cleanup policy (the broker refuses DeleteRecords on it).
var compacted = testenv.TopicConfig("cleanup.policy", "compact")

// newIndexEnv creates the topic on k with topic options (none: the broker's defaults).
func newIndexEnv(t *testing.T, k *streamtest.Kafka, partitions int32, topic ...testenv.TopicOption) *indexEnv {
	t.Helper()
	codec, err := schemas.NewCodec(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	name := k.NewTopic(t, partitions, topic...)
	return &indexEnv{t: t, topic: name, codec: codec, adm: k.Admin(t),
		txn: k.Client(t, kgo.TransactionalID(testenv.UniqueName(t, "index-writer")),
			kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.DefaultProduceTopic(name)),
		opts: []kgo.Opt{kgo.SeedBrokers(k.Seeds()...)}}
}

// entry is an index record of lane at partition p; seq tells entries of one lane apart.
func (e *indexEnv) entry(p int32, lane uint8, seq uint64) *kgo.Record {
	e.t.Helper()
	v, err := e.codec.EncodeSnapshotIndexEntry(schemas.SnapshotIndexEntry{
		Lane: lane, Sequence: seq, ChunkCount: 1, WriteTime: time.Now(),
		Identity: schemas.ProducerIdentity{Incarnation: 1, LayoutGeneration: 1, Format: schemas.CkfFormat{BucketCount: 1024}},
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return &kgo.Record{Partition: p, Key: []byte("lane-" + strconv.Itoa(int(lane))), Value: v}
}

// write produces recs in one transaction, committed or aborted, and returns them with their
// offsets once the transaction's markers are on the partitions.
func (e *indexEnv) write(commit bool, recs ...*kgo.Record) []*kgo.Record {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), streamtest.Converge)
	defer cancel()
	if err := e.txn.BeginTransaction(); err != nil {
		e.t.Fatal(err)
	}
	if err := e.txn.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		e.t.Fatal(err)
	}
	if err := e.txn.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
		e.t.Fatal(err)
	}
	streamtest.WaitTransactionsSettled(e.t, e.adm, e.topic)
	return recs
}

// read runs the snapshot-index reader with extra client options.
func (e *indexEnv) read(extra ...kgo.Opt) (map[uint8]schemas.SnapshotIndexEntry, error) {
	ctx, cancel := context.WithTimeout(context.Background(), streamtest.Converge)
	defer cancel()
	return streams.ReadSnapshotIndexTopic(ctx, e.adm, append(append([]kgo.Opt{}, e.opts...), extra...), e.codec, e.topic, zaptest.NewLogger(e.t))
}

func (e *indexEnv) listEnd() *streams.EndOfLog {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), streamtest.Converge)
	defer cancel()
	end, err := streams.ListEndOfLog(ctx, e.adm, e.topic)
	if err != nil {
		e.t.Fatal(err)
	}
	return end
}

// wantEntries checks the lanes and sequences read.
func wantEntries(t *testing.T, got map[uint8]schemas.SnapshotIndexEntry, err error, want map[uint8]uint64) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	ok := len(got) == len(want)
	for lane, seq := range want {
		ok = ok && got[lane].Sequence == seq && got[lane].Lane == lane
	}
	if !ok {
		seqs := map[uint8]uint64{}
		for lane, e := range got {
			seqs[lane] = e.Sequence
		}
		t.Fatalf("entries read (lane: sequence) %v; want %v", seqs, want)
	}
}

// TestSnapshotIndexReadEndsAtCommitMarker: the index's log ends with a commit marker, so its end
// offset is one past a record that carries no data; the read must end there, not hang.
// On the shared broker: only it shows where a read_committed end sits behind a commit marker.
func TestSnapshotIndexReadEndsAtCommitMarker(t *testing.T) {
	e := newIndexEnv(t, streamtest.BrokerKafka(t), 1, compacted)
	recs := e.write(true, e.entry(0, 1, 1), e.entry(0, 2, 1))
	end, _ := e.listEnd().End(0)
	if last := recs[len(recs)-1].Offset; end != last+2 {
		t.Fatalf("end offset %d after the last entry at %d; want %d (behind the commit marker)", end, last, last+2)
	}
	got, err := e.read()
	wantEntries(t, got, err, map[uint8]uint64{1: 1, 2: 1})
}

// TestSnapshotIndexReadEndsAtAbortedTail: partition 0 ends with an aborted transaction after a
// committed one, partition 1 holds nothing but an aborted transaction. The aborted entries are
// not read, and the read ends at the abort markers.
// On the shared broker: only it shows the last stable offset behind aborted transactions.
func TestSnapshotIndexReadEndsAtAbortedTail(t *testing.T) {
	e := newIndexEnv(t, streamtest.BrokerKafka(t), 2, compacted)
	e.write(true, e.entry(0, 1, 1))
	e.write(false, e.entry(0, 1, 2), e.entry(0, 5, 1), e.entry(1, 6, 1))
	got, err := e.read()
	wantEntries(t, got, err, map[uint8]uint64{1: 1})
}

// TestEndOfLogEmptyAndDeletedPartitions: empty partitions, and a partition whose records were
// all deleted (log start = end), are caught up without reading; a topic with nothing to read
// is not fetched at all; a missing topic is a typed error.
func TestEndOfLogEmptyAndDeletedPartitions(t *testing.T) {
	e := newIndexEnv(t, streamtest.NewFakeKafka(t), 3) // cleanup.policy=delete, so that records can be deleted
	if end := e.listEnd(); end.Remaining() != 0 {
		t.Fatalf("an empty topic has %d partitions to read", end.Remaining())
	}
	// A client that cannot be built proves that nothing is fetched when nothing is pending.
	broken := []kgo.Opt{kgo.ConsumeTopics(e.topic)} // conflicts with the reader's assignment
	if err := e.listEnd().Read(context.Background(), broken, func(*kgo.Record) {}); err != nil {
		t.Fatalf("read of an empty topic: %v; want nil without a client", err)
	}

	e.write(true, e.entry(0, 3, 1))
	e.write(true, e.entry(2, 4, 1), e.entry(2, 7, 1))
	ctx := context.Background()
	ends, err := e.adm.ListEndOffsets(ctx, e.topic)
	if err != nil {
		t.Fatal(err)
	}
	del := kadm.Offsets{}
	o, _ := ends.Lookup(e.topic, 2)
	del.Add(kadm.Offset{Topic: e.topic, Partition: 2, At: o.Offset})
	if resp, err := e.adm.DeleteRecords(ctx, del); err != nil || resp.Error() != nil {
		t.Fatalf("delete records: %v %v", err, resp.Error())
	}
	if end := e.listEnd(); end.Remaining() != 1 {
		t.Fatalf("%d partitions to read; want 1 (partition 1 is empty, partition 2's start is its end)", end.Remaining())
	}
	got, err := e.read()
	wantEntries(t, got, err, map[uint8]uint64{3: 1})

	// A missing topic is retried (its metadata may not have reached every broker yet) until
	// the context ends, and then reported as missing.
	mctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	_, err = streams.ListEndOfLog(mctx, e.adm, testenv.UniqueName(t, "missing"))
	var eol *streams.EndOfLogError
	if !errors.As(err, &eol) || !errors.Is(err, kerr.UnknownTopicOrPartition) {
		t.Fatalf("listing a missing topic: %v; want an *EndOfLogError wrapping UNKNOWN_TOPIC_OR_PARTITION", err)
	}
}

// TestEndOfLogExcludesRecordsAfterListing: entries committed after the end was listed are not
// part of the read, even when the same fetch returns them.
func TestEndOfLogExcludesRecordsAfterListing(t *testing.T) {
	e := newIndexEnv(t, streamtest.NewFakeKafka(t), 1, compacted)
	e.write(true, e.entry(0, 1, 1))
	end := e.listEnd()
	e.write(true, e.entry(0, 1, 2), e.entry(0, 3, 1))
	ctx, cancel := context.WithTimeout(context.Background(), streamtest.Converge)
	defer cancel()
	got := map[uint8]schemas.SnapshotIndexEntry{}
	err := end.Read(ctx, e.opts, func(r *kgo.Record) {
		ent, err := e.codec.DecodeSnapshotIndexEntry(r.Value)
		if err != nil {
			t.Errorf("offset %d: %v", r.Offset, err)
		}
		got[ent.Lane] = ent
	})
	wantEntries(t, got, err, map[uint8]uint64{1: 1})
	got, err = e.read() // a new listing includes them
	wantEntries(t, got, err, map[uint8]uint64{1: 2, 3: 1})
}

// TestSnapshotIndexReadWaitsForHeldPartition: partition 1 becomes fetchable only after the
// reader's client has spent two long polls (1 s each) without it, while partition 0 was read at
// once. A reader that takes a poll without records for the end (the 500 ms poll this package
// used before the end-of-log reader) would return without partition 1's entries; this one
// waits for them.
func TestSnapshotIndexReadWaitsForHeldPartition(t *testing.T) {
	e := newIndexEnv(t, streamtest.NewFakeKafka(t), 2, compacted)
	e.write(true, e.entry(0, 1, 1), e.entry(1, 2, 1))
	e.write(true, e.entry(1, 2, 2))
	hold := streamtest.NewFetchHold(e.topic, 2, 1)
	readDone, released := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(released)
		select {
		case <-hold.Held():
			hold.Release()
		case <-readDone: // the read ended with partition 1 still held: the check below fails
		}
	}()
	got, err := e.read(kgo.WithHooks(hold), kgo.FetchMaxWait(time.Second))
	close(readDone)
	<-released
	wantEntries(t, got, err, map[uint8]uint64{1: 1, 2: 2})
}
