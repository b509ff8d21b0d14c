package lanes_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/ckf-stream/ckf-stream/streams"
	"github.com/ckf-stream/ckf-stream/streams/internal/streamtest"
	"github.com/ckf-stream/ckf-stream/testenv"
	"github.com/twmb/franz-go/pkg/kgo"
)

// mirror copies the committed records of a topic to another, as MirrorMaker 2 does between two
// regions (design §8): partition, key, value, headers and timestamp kept, at offsets of the
// copy's own (transaction markers are not copied). It copies what was committed since its last
// call; replay, when set, says after which copied record to copy the previous n records again
// (a mirror restarted from positions it flushed earlier).
type mirror struct {
	t        *testing.T
	e        *streamtest.Env
	src, dst string
	parts    int32
	next     map[int32]int64
	cl       *kgo.Client
	replay   func(r *kgo.Record) (n int)
}

func newMirror(t *testing.T, e *streamtest.Env, src, dst string, parts int32) *mirror {
	return &mirror{t: t, e: e, src: src, dst: dst, parts: parts, next: map[int32]int64{},
		cl: e.Cluster.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0))}
}

// sync copies what the source committed since the last sync and returns the copies, with their
// offsets, by partition.
func (m *mirror) sync() map[int32][]*kgo.Record {
	m.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), streamtest.Converge)
	defer cancel()
	end, err := streams.ListEndOfLog(ctx, m.e.Cluster.Admin(m.t), m.src)
	if err != nil {
		m.t.Fatal(err)
	}
	out := map[int32][]*kgo.Record{}
	for p := int32(0); p < m.parts; p++ {
		stop, _ := end.End(p)
		if m.next[p] >= stop {
			continue
		}
		cl := m.e.Cluster.Client(m.t, append([]kgo.Opt{kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{
			m.src: {p: kgo.NewOffset().At(m.next[p])}})}, streams.EndOfLogConsumerOpts()...)...)
		var copied []*kgo.Record
		for m.next[p] < stop {
			fs := cl.PollFetches(ctx)
			if err := fs.Err0(); err != nil {
				m.t.Fatal(err)
			}
			fs.EachRecord(func(r *kgo.Record) {
				if r.Offset >= stop {
					return
				}
				m.next[p] = r.Offset + 1
				if r.Attrs.IsControl() {
					return
				}
				copied = append(copied, r)
				if m.replay != nil {
					if n := m.replay(r); n > 0 {
						copied = append(copied, copied[len(copied)-1-n:len(copied)-1]...)
					}
				}
			})
		}
		cl.Close()
		for _, r := range copied {
			c := &kgo.Record{Topic: m.dst, Partition: p, Key: r.Key, Value: r.Value, Headers: r.Headers, Timestamp: r.Timestamp}
			if err := m.cl.ProduceSync(ctx, c).FirstErr(); err != nil {
				m.t.Fatal(err)
			}
			out[p] = append(out[p], c)
		}
	}
	return out
}

// chunkIndex decodes r as a snapshot chunk of sequence seq.
func chunkIndex(t *testing.T, codec *schemas.Codec, r *kgo.Record, seq uint64) (uint32, bool) {
	lr, err := codec.DecodeLaneRecord(r.Value)
	if err != nil {
		t.Fatal(err)
	}
	return lr.Snapshot.ChunkIndex, lr.Kind == schemas.LaneSnapshotChunk && lr.Snapshot.Sequence == seq
}

// newRemoteAndLocal starts an in-process cluster with two transactional producers, lane 3 (of
// another region, read through a mirror's copies) and lane 9 (local), each with a chain, a
// snapshot and a chain after it.
func newRemoteAndLocal(t *testing.T) (e *streamtest.Env, remote, local *streamtest.Producer) {
	t.Helper()
	e = streamtest.NewEnvOn(t, testenv.FakeCluster(t), 4096)
	remote, local = e.TransactionalProducer(3, 1), e.TransactionalProducer(9, 1)
	for _, p := range []*streamtest.Producer{remote, local} {
		p.StoreChain(5, nil, 0)
		p.Snapshot()
		p.StoreChain(8, nil, 0)
	}
	return e, remote, local
}

// TestIndexerRestoresMirroredLane: an indexer reads lane 3 from a mirror's copy of another
// region's lane topic and snapshot index ("eu.<lanes>", "eu.<index>", MirrorMaker's default
// names) and lane 9 from its own lane topic. The source's relays write transactions, whose
// markers the mirror does not copy, so the index entry's offsets are wrong on the copy; the
// mirror also repeats the snapshot's first chunks once (a restart). The lane restores from the
// indexed snapshot found by time and sequence (at the copy's offset of chunk 0, never the
// entry's), skips the repeats, asks for no snapshot, converges, and follows live deltas mirrored
// after it started.
func TestIndexerRestoresMirroredLane(t *testing.T) {
	t.Parallel()
	e, remote, local := newRemoteAndLocal(t)
	remote.StoreChain(7, remote.Chains[0], 3)
	pos := remote.Snapshot() // the index points here, at the source's offsets
	seq := remote.Publisher.LastSequence()
	remote.StoreChain(4, nil, 0)

	lanesCopy := e.Cluster.NewTopic(t, ckf.LaneCount, testenv.TopicName(streams.MirroredTopic(streams.MirrorPolicyDefault, "eu", e.Topics.Lanes)))
	indexCopy := e.Cluster.NewTopic(t, 1, testenv.TopicName(streams.MirroredTopic(streams.MirrorPolicyDefault, "eu", e.Topics.SnapshotIndex)),
		testenv.TopicConfig("cleanup.policy", "compact"))
	lm := newMirror(t, e, e.Topics.Lanes, lanesCopy, ckf.LaneCount)
	lm.replay = func(r *kgo.Record) int {
		if i, ok := chunkIndex(t, e.Codec, r, seq); ok && i == 1 && r.Partition == 3 {
			return 2 // chunks 0 and 1 again
		}
		return 0
	}
	copies := lm.sync()[3]
	lm.replay = nil
	newMirror(t, e, e.Topics.SnapshotIndex, indexCopy, 1).sync()
	var chunk0 int64 = -1
	for _, c := range copies {
		if i, ok := chunkIndex(t, e.Codec, c, seq); ok && i == 0 {
			chunk0 = c.Offset
			break
		}
	}
	if chunk0 < 0 || chunk0 == pos.FirstOffset {
		t.Fatalf("chunk 0 of snapshot %d: source offset %d, copy at %d: the offsets should differ", seq, pos.FirstOffset, chunk0)
	}

	cfg := e.IndexerConfig()
	cfg.LaneSources = map[uint8]streams.LaneSource{3: streams.MirroredLaneSource(streams.MirrorPolicyDefault, "eu", e.Topics.Lanes, e.Topics.SnapshotIndex)}
	ri := e.StartIndexer(e.Manifest(31, 3, 9), cfg)
	streamtest.WaitLane(t, ri, remote, time.Minute)
	streamtest.WaitLane(t, ri, local, time.Minute)
	st := streamtest.LaneStatus(ri, 3)
	if st.SnapshotOffset != chunk0 || st.SnapshotRequests != 0 || st.ReplayedRecords != 2 || !strings.Contains(st.Source, "mirrored from eu") {
		t.Fatalf("lane 3: snapshot at %d (want the copy's %d; the entry says %d), %d snapshot requests (want 0), %d replayed records (want 2), source %q",
			st.SnapshotOffset, chunk0, pos.FirstOffset, st.SnapshotRequests, st.ReplayedRecords, st.Source)
	}
	if st := streamtest.LaneStatus(ri, 9); st.Source != e.Topics.Lanes || st.SnapshotOffset < 0 {
		t.Fatalf("lane 9: source %q, snapshot at %d", st.Source, st.SnapshotOffset)
	}
	t.Logf("lane 3 restored from the copy's offset %d (the entry's source offset %d)", chunk0, pos.FirstOffset)

	// Live: deltas written after the start reach the lane through the mirror.
	remote.StoreChain(6, remote.Chains[1], 2)
	remote.StoreChain(3, nil, 0)
	lm.sync()
	streamtest.WaitLane(t, ri, remote, time.Minute)
	streamtest.CompareQueries(t, ri.Indexer.GlobalIndexer(), streamtest.ReferenceIndexer(t, e.Manifest(31, 3, 9), remote, local), remote, local)
}

// TestIndexerStartsBeforeTheMirroredTopicsExist: an indexer whose lane 3 is read from another
// region's mirrored topics starts while those topics do not exist yet (the region's MirrorMaker
// has not created them: a region brought up before its peer, or before the mirror's first
// copy). The local lane 9 converges and answers; lane 3 waits, not ready, with its source named;
// once the mirror creates and fills the copies, lane 3 installs the mirrored snapshot and
// converges, with no restart of the indexer.
func TestIndexerStartsBeforeTheMirroredTopicsExist(t *testing.T) {
	t.Parallel()
	e, remote, local := newRemoteAndLocal(t)
	lanesCopyName := testenv.TopicName(streams.MirroredTopic(streams.MirrorPolicyDefault, "eu", e.Topics.Lanes))
	indexCopyName := testenv.TopicName(streams.MirroredTopic(streams.MirrorPolicyDefault, "eu", e.Topics.SnapshotIndex))
	cfg := e.IndexerConfig()
	cfg.LaneSources = map[uint8]streams.LaneSource{3: streams.MirroredLaneSource(streams.MirrorPolicyDefault, "eu", e.Topics.Lanes, e.Topics.SnapshotIndex)}
	ri := e.StartIndexer(e.Manifest(31, 3, 9), cfg)
	streamtest.WaitLane(t, ri, local, time.Minute)
	if ri.Indexer.GlobalIndexer().ReadyLanes64()&(1<<3) != 0 {
		t.Fatal("lane 3 ready before its mirrored topics exist")
	}
	if st := streamtest.LaneStatus(ri, 3); !strings.Contains(st.Source, "mirrored from eu") {
		t.Fatalf("lane 3's source %q", st.Source)
	}

	lanesCopy := e.Cluster.NewTopic(t, ckf.MaxLanes, lanesCopyName)
	indexCopy := e.Cluster.NewTopic(t, 1, indexCopyName, testenv.TopicConfig("cleanup.policy", "compact"))
	newMirror(t, e, e.Topics.Lanes, lanesCopy, ckf.MaxLanes).sync()
	newMirror(t, e, e.Topics.SnapshotIndex, indexCopy, 1).sync()
	streamtest.WaitLane(t, ri, remote, time.Minute)
	streamtest.CompareQueries(t, ri.Indexer.GlobalIndexer(), streamtest.ReferenceIndexer(t, e.Manifest(31, 3, 9), remote, local), remote, local)
}
