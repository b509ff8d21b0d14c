package streams_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/ckf-stream/ckf-stream/streams"
	"github.com/ckf-stream/ckf-stream/streams/internal/streamtest"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// mirroredLane is a lane partition as a mirror leaves it: records with the timestamps their
// relay gave them, at offsets of the mirror's own (in process, kfake: the seek by time and the
// read forward are the finder's logic; what a real mirror keeps is TestRegionsMirrorLanes').
type mirroredLane struct {
	t     *testing.T
	k     *streamtest.Kafka
	topic string
	codec *schemas.Codec
	cl    *kgo.Client
	id    schemas.ProducerIdentity
}

func newMirroredLane(t *testing.T) *mirroredLane {
	codec, err := schemas.NewCodec(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	k := streamtest.NewFakeKafka(t)
	topic := k.NewTopic(t, 2)
	return &mirroredLane{t: t, k: k, topic: topic, codec: codec,
		cl: k.Client(t, kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner())),
		id: schemas.ProducerIdentity{Incarnation: 7, LayoutGeneration: 1, Format: schemas.CkfFormat{BucketCount: 4}}}
}

func (m *mirroredLane) put(at time.Time, lr schemas.LaneRecord) int64 {
	m.t.Helper()
	lr.Identity = m.id
	v, err := m.codec.EncodeLaneRecord(lr)
	if err != nil {
		m.t.Fatal(err)
	}
	r := &kgo.Record{Partition: 1, Value: v, Timestamp: at}
	if err := m.cl.ProduceSync(context.Background(), r).FirstErr(); err != nil {
		m.t.Fatal(err)
	}
	return r.Offset
}

func (m *mirroredLane) delta(at time.Time, seq uint64) {
	m.put(at, schemas.LaneRecord{Kind: schemas.LaneDelta,
		Delta: schemas.Delta{BaseSequence: seq - 1, Sequence: seq, Images: schemas.AppendImage(nil, 1, seq)}})
}

// chunk writes chunk i of a 4-chunk snapshot of sequence seq (one bucket per chunk).
func (m *mirroredLane) chunk(at time.Time, seq uint64, i uint32) int64 {
	return m.put(at, schemas.LaneRecord{Kind: schemas.LaneSnapshotChunk, Snapshot: schemas.SnapshotChunk{
		Sequence: seq, ChunkIndex: i, ChunkCount: 4, FirstBucket: uint64(i), TotalBuckets: 4,
		Words: schemas.AppendU64s(nil, []uint64{uint64(i) + 1})}})
}

func (m *mirroredLane) find(entry schemas.SnapshotIndexEntry, margin time.Duration) (streams.SnapshotFound, error) {
	ctx, cancel := context.WithTimeout(context.Background(), streamtest.Converge)
	defer cancel()
	return streams.FindSnapshotByTime(ctx, m.k.Admin(m.t), []kgo.Opt{kgo.SeedBrokers(m.k.Seeds()...)}, m.codec,
		streams.SnapshotSeek{Topic: m.topic, Partition: 1, Entry: entry, Margin: margin})
}

// TestFindSnapshotByTime: the finder lists the offset for (write time - margin), reads forward
// to chunk 0 of the entry's identity and sequence, and doubles the margin when it meets a later
// chunk first. The lane holds an older snapshot of the same identity, a slow snapshot write (its
// last chunk 1.6 s after its first), and a replayed run of chunks (a mirror's restart); the
// entry's offsets are the source's and wrong here. A sequence not on the partition is
// ErrSnapshotNotFound after one read to the end.
func TestFindSnapshotByTime(t *testing.T) {
	m := newMirroredLane(t)
	t0 := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	for i := range 4 {
		m.chunk(t0, 1, uint32(i)) // an older snapshot of the same identity
	}
	for s := uint64(2); s < 10; s++ {
		m.delta(t0.Add(time.Duration(s)*time.Second), s)
	}
	tSnap := t0.Add(20 * time.Second)
	first := m.chunk(tSnap, 9, 0)
	m.chunk(tSnap.Add(400*time.Millisecond), 9, 1)
	m.chunk(tSnap.Add(800*time.Millisecond), 9, 2)
	m.chunk(tSnap.Add(400*time.Millisecond), 9, 1) // replayed by a restarted mirror
	m.chunk(tSnap.Add(800*time.Millisecond), 9, 2)
	m.chunk(tSnap.Add(1600*time.Millisecond), 9, 3)
	for s := uint64(10); s < 15; s++ {
		m.delta(tSnap.Add(2*time.Second+time.Duration(s)*time.Millisecond), s)
	}
	entry := schemas.SnapshotIndexEntry{Lane: 1, Identity: m.id, Sequence: 9, FirstOffset: 5000, LastOffset: 5003, ChunkCount: 4,
		WriteTime: tSnap.Add(2 * time.Second)}

	// A 500 ms margin lists the first record at or after 1.5 s into the write (chunk 3), 1 s
	// the first at or after 1 s (chunk 3 again), 2 s chunk 0.
	got, err := m.find(entry, 500*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if got.Offset != first || got.Seeks != 3 || got.Margin != 2*time.Second {
		t.Fatalf("found %+v, want chunk 0 at offset %d after 3 seeks with a 2s margin", got, first)
	}
	t.Logf("chunk 0 at offset %d (the entry said %d): %d seeks, margin %v, %d records read", got.Offset, entry.FirstOffset, got.Seeks, got.Margin, got.Read)

	// A margin that covers the write at once: one seek.
	if got, err := m.find(entry, 10*time.Second); err != nil || got.Offset != first || got.Seeks != 1 {
		t.Fatalf("with a 10s margin: %+v, %v; want offset %d in one seek", got, err, first)
	}

	// Another producer incarnation's snapshot of the same sequence is not the entry's.
	other := entry
	other.Identity.Incarnation++
	if got, err := m.find(other, 10*time.Second); !errors.Is(err, streams.ErrSnapshotNotFound) {
		t.Fatalf("a snapshot of another incarnation: %+v, %v; want ErrSnapshotNotFound", got, err)
	}
	// An entry newer than every record: nothing at or after its time.
	later := entry
	later.Sequence, later.WriteTime = 20, tSnap.Add(time.Minute)
	if got, err := m.find(later, time.Second); !errors.Is(err, streams.ErrSnapshotNotFound) || got.Seeks != 1 {
		t.Fatalf("an entry not mirrored yet: %+v, %v; want ErrSnapshotNotFound after one seek", got, err)
	}
}

// TestFindSnapshotByTimeChunkZeroGone: a seek that lands on the log's first record inside the
// snapshot (chunk 0 deleted by retention) cannot move earlier; the finder says so instead of
// doubling the margin for ever.
func TestFindSnapshotByTimeChunkZeroGone(t *testing.T) {
	m := newMirroredLane(t)
	t0 := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	m.chunk(t0, 3, 0)
	m.chunk(t0.Add(time.Second), 3, 1)
	m.chunk(t0.Add(2*time.Second), 3, 2)
	m.chunk(t0.Add(3*time.Second), 3, 3)
	ctx := context.Background()
	del := kadm.Offsets{}
	del.AddOffset(m.topic, 1, 1, -1)
	res, err := m.k.Admin(t).DeleteRecords(ctx, del)
	if err == nil {
		err = res.Error()
	}
	if err != nil {
		t.Fatal(err)
	}
	entry := schemas.SnapshotIndexEntry{Lane: 1, Identity: m.id, Sequence: 3, ChunkCount: 4, WriteTime: t0.Add(3 * time.Second)}
	got, err := m.find(entry, 10*time.Millisecond)
	if !errors.Is(err, streams.ErrSnapshotNotFound) {
		t.Fatalf("chunk 0 deleted: %+v, %v; want ErrSnapshotNotFound", got, err)
	}
	t.Logf("%v after %d seeks", err, got.Seeks)
}
