package lanes_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/streams/lanes"
	"github.com/ckf-stream/ckf-stream/testenv"
	"github.com/twmb/franz-go/pkg/kgo"
)

func produceN(t *testing.T, cl *kgo.Client, topic string, partition int32, from, n int, size int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var rs []*kgo.Record
	for i := from; i < from+n; i++ {
		v := make([]byte, size)
		copy(v, fmt.Sprintf("p%d-%06d", partition, i))
		rs = append(rs, &kgo.Record{Topic: topic, Partition: partition, Value: v})
	}
	if err := cl.ProduceSync(ctx, rs...).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
}

func startFeed(t *testing.T, topic string, laneNums []int32, cfg lanes.FeedConfig) *lanes.LaneFeed {
	t.Helper()
	start := map[int32]kgo.Offset{}
	for _, l := range laneNums {
		start[l] = kgo.NewOffset().AtStart()
	}
	cl := testenv.Client(t, lanes.LaneConsumerOpts(topic, start)...)
	feed, err := lanes.NewLaneFeed(cl, topic, laneNums, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- feed.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("feed.Run: %v", err)
		}
	})
	return feed
}

// readUntil reads lane records until offset last is seen, checking offsets increase by one.
func readUntil(t *testing.T, feed *lanes.LaneFeed, lane int32, first, last int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	next := first
	for next <= last {
		b, err := feed.Next(ctx, lane)
		if err != nil {
			t.Fatalf("lane %d: waiting for offset %d: %v", lane, next, err)
		}
		for _, r := range b.Records {
			if r.Offset != next {
				t.Fatalf("lane %d: got offset %d, want %d", lane, r.Offset, next)
			}
			if want := fmt.Sprintf("p%d-%06d", lane, next); string(r.Value[:len(want)]) != want {
				t.Fatalf("lane %d offset %d: value %q, want %q", lane, r.Offset, r.Value[:len(want)], want)
			}
			next++
		}
	}
}

// TestLaneFeedBackpressurePausesOnlyThatLane: a lane nobody drains is paused at its byte bound
// while another lane keeps flowing; once drained, the paused lane resumes and loses nothing.
// Broker: franz-go's fetches of one partition paused while the other keeps fetching.
func TestLaneFeedBackpressurePausesOnlyThatLane(t *testing.T) {
	t.Parallel()
	topic := testenv.NewTopic(t, 2)
	prod := testenv.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	produceN(t, prod, topic, 0, 0, 400, 4096)
	produceN(t, prod, topic, 1, 0, 400, 4096)
	cfg := lanes.DefaultFeedConfig()
	cfg.PauseBytes, cfg.ResumeBytes = 64<<10, 16<<10
	feed := startFeed(t, topic, []int32{0, 1}, cfg)

	readUntil(t, feed, 1, 0, 399) // lane 1 flows while lane 0 is not drained at all
	testenv.WaitUntil(t, 30*time.Second, "lane 0 pauses", func() bool { return feed.Queue(0).Paused },
		func() string { return fmt.Sprintf("queue %+v", feed.Queue(0)) })
	if q := feed.Queue(0); q.Bytes > 64<<10+8<<20 || q.Pauses != 1 { // bound: the pause threshold plus one fetch's worth
		t.Fatalf("lane 0 queue %+v; want at most one fetch past the bound, paused once", q)
	}
	readUntil(t, feed, 0, 0, 399)
	if lso := feed.LastStableOffset(0); lso != 400 {
		t.Fatalf("lane 0 last stable offset %d, want 400", lso)
	}
}

// TestLaneFeedReportsLastStableOffset: while a transaction is open on a lane partition, its high
// watermark runs ahead of what a read_committed consumer can read; the feed reports the last
// stable offset (the open transaction's first offset), so a caught-up lane shows no lag, and the
// offset after the commit marker once the transaction commits. The transaction is opened before
// the feed starts, so every fetch response that carries records was made while it was open.
// Broker: the last stable offset a fetch response reports under an open transaction.
func TestLaneFeedReportsLastStableOffset(t *testing.T) {
	t.Parallel()
	topic := testenv.NewTopic(t, 1)
	prod := testenv.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	produceN(t, prod, topic, 0, 0, 10, 64)
	txn := testenv.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.TransactionalID(testenv.UniqueName(t, "lso")))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := txn.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := txn.ProduceSync(ctx, &kgo.Record{Topic: topic, Partition: 0, Value: []byte("p0-000010")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	ends, err := testenv.Admin(t).ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	if hwm, _ := ends.Lookup(topic, 0); hwm.Offset != 11 {
		t.Fatalf("high watermark %d with the transaction open, want 11", hwm.Offset)
	}

	feed := startFeed(t, topic, []int32{0}, lanes.DefaultFeedConfig())
	readUntil(t, feed, 0, 0, 9)
	if lso := feed.LastStableOffset(0); lso != 10 {
		t.Fatalf("last stable offset %d with the transaction open, want 10 (the high watermark is 11)", lso)
	}
	if err := txn.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	testenv.WaitUntil(t, time.Minute, "the feed reports the offset after the commit marker", func() bool {
		return feed.LastStableOffset(0) == 12
	}, func() string { return fmt.Sprintf("last stable offset %d", feed.LastStableOffset(0)) })
}

// TestLaneFeedSeekDiscardsQueued: after a seek, the lane's next record is the seek target, even
// when records past it were already queued.
// Broker: SetOffsets on a live client discards what it buffered.
func TestLaneFeedSeekDiscardsQueued(t *testing.T) {
	t.Parallel()
	topic := testenv.NewTopic(t, 1)
	prod := testenv.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	produceN(t, prod, topic, 0, 0, 50, 64)
	feed := startFeed(t, topic, []int32{0}, lanes.DefaultFeedConfig())
	readUntil(t, feed, 0, 0, 20)
	for i := 0; i < 3; i++ {
		feed.Seek(0, 7)
		readUntil(t, feed, 0, 7, 49)
	}
	produceN(t, prod, topic, 0, 50, 10, 64)
	readUntil(t, feed, 0, 50, 59)
}

func TestLaneFeedRejectsBadLanes(t *testing.T) {
	if _, err := lanes.NewLaneFeed(nil, "x", []int32{ckf.MaxLanes}, lanes.DefaultFeedConfig()); err == nil {
		t.Fatal("lane 64 accepted")
	}
	if _, err := lanes.NewLaneFeed(nil, "x", []int32{-1}, lanes.DefaultFeedConfig()); err == nil {
		t.Fatal("lane -1 accepted")
	}
	if _, err := lanes.NewLaneFeed(nil, "x", []int32{3, 3}, lanes.DefaultFeedConfig()); err == nil {
		t.Fatal("duplicate lane accepted")
	}
}
