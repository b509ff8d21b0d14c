package relay_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/ckf/producer"
	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/ckf-stream/ckf-stream/streams/internal/streamtest"
	"github.com/ckf-stream/ckf-stream/streams/relay"
	"github.com/ckf-stream/ckf-stream/testenv"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The relay's state checkpoints: a restart restores the newest usable checkpoint and replays
// only the KV events after it, so the KV topic's old records may be deleted; a damaged
// checkpoint is reported, dead-lettered and skipped; the published input offsets are visible to
// lag tools as a consumer group's committed offsets.

// checkpointRelayConfig is relayConfig with a checkpoint topic and a checkpoint after every n
// KV records (no time trigger, so the tests know which checkpoint exists).
func (e *relayEnv) checkpointRelayConfig(lane uint8, n uint64) relay.RelayConfig {
	cfg := e.relayConfig(lane, testenv.UniqueName(e.T, "relay"))
	cfg.Topics.Checkpoints = e.Cluster.NewTopic(e.T, ckf.LaneCount)
	cfg.CheckpointInterval = 0
	cfg.CheckpointEveryEvents = n
	cfg.CheckpointChunkBytes = 4096 // several chunks even for a small state
	cfg.LagCommitInterval = 0
	return cfg
}

// produceKV writes evs to the KV topic, each on partition byWorker, and returns the end offsets
// after them.
func (e *relayEnv) produceKV(evs []producer.RouterEvent) kadm.Offsets {
	e.T.Helper()
	cl := e.Cluster.Client(e.T, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	ctx, cancel := context.WithTimeout(context.Background(), streamtest.Converge)
	defer cancel()
	if err := cl.ProduceSync(ctx, e.kvRecords(evs, byWorker)...).FirstErr(); err != nil {
		e.T.Fatal(err)
	}
	ends, err := e.Cluster.Admin(e.T).ListEndOffsets(ctx, e.kvTopic)
	if err != nil {
		e.T.Fatal(err)
	}
	return ends.Offsets()
}

// waitCheckpoints waits until the relay committed n checkpoints.
func waitCheckpoints(t *testing.T, rr *runningRelay, n uint64) {
	t.Helper()
	testenv.WaitUntil(t, streamtest.Converge, fmt.Sprintf("%d relay checkpoints", n), func() bool { return rr.r.Stats().Checkpoints >= n },
		func() string { return fmt.Sprintf("stats %+v", rr.r.Stats()) })
}

// TestRelayRestartsFromCheckpointAfterRetention: a relay replays 200 KV events at its first
// start (no checkpoint yet), checkpoints them, applies 150 more live and stops, which checkpoints
// those too. The 350 are then deleted from the KV topic (DeleteRecords, what retention does) and
// 100 more are written. The restarted relay restores the stop's checkpoint, replays exactly the
// 100 events after it, and its exact state equals a reference that applied all 450 without
// stopping. Meanwhile the lag group shows the published offsets: the KV topic's end once the
// live events are published.
func TestRelayRestartsFromCheckpointAfterRetention(t *testing.T) {
	// On the shared broker: the log start a real broker moves on DeleteRecords (what retention does) is what this test shows.
	t.Parallel()
	e := newBrokerRelayEnv(t, 4096, 2)
	const lane = 11
	cfg := e.checkpointRelayConfig(lane, 200)
	g := newKvGen(21)
	a := g.take(200)
	e.produceKV(a)

	rr := e.startRelay(cfg, true)
	if s := rr.r.Stats(); s.ReplayedEvents != 200 || s.RestoredCheckpoint != 0 {
		t.Fatalf("first start: %+v; want the 200 events replayed from the start, no checkpoint restored", s)
	}
	waitCheckpoints(t, rr, 1)
	b := g.take(150)
	afterB := e.produceKV(b)
	waitApplied(t, rr, 350)

	adm := e.Cluster.Admin(t)
	group := rr.r.Config().LagGroup
	testenv.WaitUntil(t, streamtest.Converge, "the lag group's offsets reach the KV topic's end", func() bool {
		got, err := adm.FetchOffsets(context.Background(), group)
		if err != nil || got.Error() != nil {
			return false
		}
		ok := true
		afterB.Each(func(o kadm.Offset) {
			c, found := got.Lookup(o.Topic, o.Partition)
			ok = ok && found && c.At == o.At
		})
		return ok
	}, func() string { return fmt.Sprintf("stats %+v", rr.r.Stats()) })
	if s := rr.r.Stats(); s.Checkpoints != 1 {
		t.Fatalf("%d checkpoints; want exactly 1 (150 events since do not reach the 200-event trigger)", s.Checkpoints)
	}
	if err := rr.stop(); err != nil {
		t.Fatal(err)
	}
	if s := rr.r.Stats(); s.Checkpoints != 2 {
		t.Fatalf("%d checkpoints after the graceful stop; want 2: the stop checkpoints the 150 events since the first", s.Checkpoints)
	}

	ctx, cancel := context.WithTimeout(context.Background(), streamtest.Converge)
	defer cancel()
	deleted, err := adm.DeleteRecords(ctx, afterB)
	if err == nil {
		err = deleted.Error()
	}
	if err != nil {
		t.Fatal(err)
	}
	c := g.take(100)
	e.produceKV(c)

	rr2 := e.startRelay(cfg, true)
	s := rr2.r.Stats()
	if s.RestoredCheckpoint == 0 || s.ReplayedEvents != 100 || s.CheckpointGaps != 0 || s.CheckpointsRejected != 0 {
		t.Fatalf("restart: %+v; want the stop's checkpoint restored and exactly the 100 events after it replayed", s)
	}
	compareOwnership(t, rr2, newReference(t, e, a, b, c), g)
}

// TestRelayFallsBackFromDamagedCheckpoint: after two good checkpoints, the checkpoint partition
// gets a record that is not a checkpoint record and a newer, well-framed checkpoint whose
// payload is not a producer state. The restarted relay rejects both (counted, dead-lettered
// with the reason), restores the second good checkpoint and replays nothing.
func TestRelayFallsBackFromDamagedCheckpoint(t *testing.T) {
	t.Parallel()
	e := newRelayEnv(t, 4096, 2)
	const lane = 12
	cfg := e.checkpointRelayConfig(lane, 100)
	g := newKvGen(22)
	a := g.take(100)
	e.produceKV(a)
	rr := e.startRelay(cfg, true)
	waitCheckpoints(t, rr, 1)
	b := g.take(100)
	e.produceKV(b)
	waitCheckpoints(t, rr, 2)
	good := rr.r.Stats().LastCheckpoint
	if err := rr.stop(); err != nil {
		t.Fatal(err)
	}

	pool := cfg.Pool.String()
	cl := e.Cluster.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	ctx, cancel := context.WithTimeout(context.Background(), streamtest.Converge)
	defer cancel()
	rec := func(v []byte) *kgo.Record {
		return &kgo.Record{Topic: cfg.Topics.Checkpoints, Partition: lane, Key: []byte(pool), Value: v}
	}
	if err := cl.ProduceSync(ctx, rec([]byte("not a checkpoint record"))).FirstErr(); err != nil {
		t.Fatal(err)
	}
	chunks, manifest := relay.CheckpointRecordValues(good+1, pool, lane, e.kvTopic, []byte("a payload that is no producer state"), 10)
	var rs []*kgo.Record
	for _, v := range chunks {
		rs = append(rs, rec(v))
	}
	if err := cl.ProduceSync(ctx, rs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if err := cl.ProduceSync(ctx, rec(manifest(rs[0].Offset))).FirstErr(); err != nil {
		t.Fatal(err)
	}

	rr2 := e.startRelay(cfg, true)
	s := rr2.r.Stats()
	if s.RestoredCheckpoint != good || s.CheckpointsRejected != 2 || s.ReplayedEvents != 0 {
		t.Fatalf("restart: %+v; want checkpoint %d restored, 2 rejected, nothing replayed", s, good)
	}
	compareOwnership(t, rr2, newReference(t, e, a, b), g)

	dl := e.Cluster.Client(t, kgo.ConsumeTopics(e.Topics.DeadLetter), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	var dls []schemas.DeadLetter
	for len(dls) < 2 && ctx.Err() == nil {
		dl.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
			d, err := e.Codec.DecodeDeadLetter(r.Value)
			if err != nil {
				t.Fatal(err)
			}
			if d.Component == "relay-checkpoint" {
				dls = append(dls, d)
			}
		})
	}
	if len(dls) != 2 {
		t.Fatalf("%d checkpoint dead letters; want 2", len(dls))
	}
	for _, d := range dls {
		if d.SourceTopic != cfg.Topics.Checkpoints || d.Reason == "" {
			t.Errorf("dead letter %+v", d)
		}
	}
	magic, state := 0, 0
	for _, d := range dls {
		switch {
		case containsFold(d.Reason, "relay checkpoint at offset"): // the payload, decoded by the producer
			state++
		case containsFold(d.Reason, "not a relay checkpoint record"):
			magic++
		}
	}
	if magic != 1 || state != 1 {
		t.Errorf("reasons %q, %q: want one bad magic and one unusable state", dls[0].Reason, dls[1].Reason)
	}
}

// TestRelayIdleWritesNoCheckpoint: the time trigger checkpoints a relay that applied events (20,
// replayed at start), and an idle one not again: while five heartbeats pass (each proving the loop ran its timers for
// one heartbeat interval, four checkpoint intervals), no second checkpoint is written.
func TestRelayIdleWritesNoCheckpoint(t *testing.T) {
	t.Parallel()
	e := newRelayEnv(t, 4096, 2)
	const lane = 13
	cfg := e.checkpointRelayConfig(lane, 0)
	cfg.CheckpointInterval = 50 * time.Millisecond
	g := newKvGen(23)
	e.produceKV(g.take(20))
	rr := e.startRelay(cfg, true) // the 20 events are replayed before the first checkpoint is due
	waitCheckpoints(t, rr, 1)
	waitHeartbeats(t, rr, 5)
	if n := rr.r.Stats().Checkpoints; n != 1 {
		t.Fatalf("%d checkpoints; want 1: nothing was applied after the first", n)
	}
}

// TestRelaySnapshotsByDeltaBytes: with SnapshotDeltaRatio 1 (and the other triggers off) a
// snapshot follows once the deltas since the previous one weigh one snapshot (8 bytes per
// bucket), checked once per loop pass: over eight batches of events, each applied and followed
// by a heartbeat (the loop ran its triggers after it), the relay writes periodic snapshots, and
// never more than the deltas' weight over the snapshot's size.
func TestRelaySnapshotsByDeltaBytes(t *testing.T) {
	t.Parallel()
	e := newRelayEnv(t, 4096, 2)
	const lane = 14
	cfg := e.relayConfig(lane, testenv.UniqueName(t, "relay"))
	cfg.SnapshotDeltaRatio = 1
	rr := e.startRelay(cfg, true)
	g := newKvGen(24)
	for i := 1; i <= 8; i++ {
		e.produceKV(g.take(50))
		waitApplied(t, rr, uint64(50*i))
		waitHeartbeats(t, rr, 1)
	}
	s := rr.r.Stats()
	snapshot := 8 * s.BucketCount
	weight := s.Images*16 + s.Deltas*128 // streams' deltaRecordWeight
	periodic := s.Snapshots - 1          // the start-up snapshot
	if periodic < 2 || periodic > weight/snapshot {
		t.Fatalf("%d periodic snapshots for %d bytes of deltas at %d bytes per snapshot; want 2..%d (%+v)", periodic, weight, snapshot, weight/snapshot, s)
	}
}

// TestRelayCheckpointsFitASmallTopic: on a checkpoint topic whose max.message.bytes is 64 KiB,
// the relay cuts its chunks to fit (the configured 900,000 bytes would not): its checkpoints
// commit without a recovery, and a restart restores the last one.
func TestRelayCheckpointsFitASmallTopic(t *testing.T) {
	t.Parallel()
	e := newRelayEnv(t, 1<<14, 2)
	const lane = 15
	cfg := e.checkpointRelayConfig(lane, 300)
	cfg.Topics.Checkpoints = e.Cluster.NewTopic(t, ckf.LaneCount, testenv.TopicConfig("max.message.bytes", "65536"))
	cfg.CheckpointChunkBytes = relay.DefaultRelayCheckpointChunkBytes
	g := newKvGen(25)
	a := g.take(300)
	e.produceKV(a)
	rr := e.startRelay(cfg, true)
	waitCheckpoints(t, rr, 1)
	if s := rr.r.Stats(); s.Recoveries != 0 || s.CheckpointBytes <= 65536 {
		t.Fatalf("%+v; want a checkpoint larger than one record, committed without a recovery", s)
	}
	if err := rr.stop(); err != nil {
		t.Fatal(err)
	}
	rr2 := e.startRelay(cfg, true)
	if s := rr2.r.Stats(); s.RestoredCheckpoint == 0 || s.ReplayedEvents != 0 {
		t.Fatalf("restart: %+v; want the checkpoint restored, nothing replayed", s)
	}
	compareOwnership(t, rr2, newReference(t, e, a), g)
}

// TestRelayKeepsDegradedSourcesAcrossRestart: a source a bridge cleared for lost engine history
// stays degraded in the relay's lane records after the relay restarts from a checkpoint written
// after the clear; the restarted relay once reported the DC healthy (the clear precedes the
// checkpoint, so the tail it replays does not hold it).
func TestRelayKeepsDegradedSourcesAcrossRestart(t *testing.T) {
	t.Parallel()
	e := newBrokerRelayEnv(t, 4096, 2)
	const lane = 12
	cfg := e.checkpointRelayConfig(lane, 20)
	g := newKvGen(23)
	lost := relay.KvEventOf(producer.RouterEvent{WorkerID: 9, Event: producer.KvCacheEvent{Kind: producer.KvEventCleared}})
	v, err := e.Codec.EncodeKvEvent(lost)
	if err != nil {
		t.Fatal(err)
	}
	e.produceKV(g.take(10))
	e.produceRaw(&kgo.Record{Topic: e.kvTopic, Key: []byte("9"), Value: v,
		Headers: []kgo.RecordHeader{{Key: schemas.HeaderLostHistory, Value: make([]byte, 16)}}})
	e.produceKV(g.take(10))
	rr := e.startRelay(cfg, true)
	waitCheckpoints(t, rr, 1)
	if err := rr.stop(); err != nil {
		t.Fatal(err)
	}
	e.produceKV(g.take(5))
	rr2 := e.startRelay(cfg, true)
	if s := rr2.r.Stats(); s.RestoredCheckpoint == 0 || s.ReplayedEvents != 5 {
		t.Fatalf("restart: %+v; want a checkpoint restored and the 5 events after it replayed", s)
	}
	waitHeartbeats(t, rr2, 1)
	recs := readLaneRecords(t, e, lane)
	last, err := e.Codec.DecodeLaneRecord(recs[len(recs)-1].Value)
	if err != nil {
		t.Fatal(err)
	}
	if h, ok := last.Sources.Get(); !ok || h.DegradedSources != 1 || h.LostHistoryClears != 1 {
		t.Fatalf("the restarted relay's last lane record reports sources %+v (set %v); want 1 degraded, 1 clear", h, ok)
	}
}
