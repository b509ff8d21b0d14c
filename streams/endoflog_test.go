package streams

import (
	"context"
	"errors"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// Unit tests of the end-of-log helper. The readers on the broker are tested in
// endoflog_broker_test.go and relay_replay_test.go.

func dataRecord(topic string, p int32, off int64) *kgo.Record {
	return &kgo.Record{Topic: topic, Partition: p, Offset: off}
}

func markerRecord(topic string, p int32, off int64) *kgo.Record {
	return &kgo.Record{Topic: topic, Partition: p, Offset: off,
		Attrs: kgo.NewRecordAttrs(kgo.RecordAttrsOpts{Transactional: true, Control: true})}
}

// fetchOf is one poll's result holding recs (grouped by topic and partition, in order).
func fetchOf(recs ...*kgo.Record) kgo.Fetches {
	var f kgo.Fetch
	for _, r := range recs {
		if len(f.Topics) == 0 || f.Topics[len(f.Topics)-1].Topic != r.Topic {
			f.Topics = append(f.Topics, kgo.FetchTopic{Topic: r.Topic})
		}
		ft := &f.Topics[len(f.Topics)-1]
		if len(ft.Partitions) == 0 || ft.Partitions[len(ft.Partitions)-1].Partition != r.Partition {
			ft.Partitions = append(ft.Partitions, kgo.FetchPartition{Partition: r.Partition})
		}
		fp := &ft.Partitions[len(ft.Partitions)-1]
		fp.Records = append(fp.Records, r)
	}
	return kgo.Fetches{f}
}

// chanPoller hands out the fetches the test sends; with none, a poll blocks like a broker long
// poll that has nothing to return, until ctx ends.
type chanPoller chan kgo.Fetches

func (c chanPoller) PollFetches(ctx context.Context) kgo.Fetches {
	select {
	case fs := <-c:
		return fs
	case <-ctx.Done():
		return kgo.NewErrFetch(ctx.Err())
	}
}

// TestEndOfLogObserve: empty partitions and partitions whose start passed their end are
// reached at once; a partition is reached by the record at end-1, transaction marker or not, or
// by any record past its end; records of other topics or partitions do not count.
func TestEndOfLogObserve(t *testing.T) {
	const topic = "kv"
	e := NewEndOfLog(topic,
		map[int32]int64{0: 0, 1: 5, 2: 3, 3: 0},
		map[int32]int64{0: 10, 1: 5, 2: 2, 3: 4})
	if got := e.Remaining(); got != 2 {
		t.Fatalf("remaining %d at listing; want 2 (partition 1 is empty, partition 2's start passed its end)", got)
	}
	if !slices.Equal(e.Partitions(), []int32{0, 1, 2, 3}) {
		t.Fatalf("partitions %v", e.Partitions())
	}
	if end, ok := e.End(0); !ok || end != 10 {
		t.Fatalf("end(0) = %d, %v", end, ok)
	}
	if !e.Observe(dataRecord(topic, 0, 8)) || e.Remaining() != 2 {
		t.Fatal("offset 8 of 10 is below the end and does not reach it")
	}
	if e.Observe(dataRecord("other", 0, 9)) || e.Observe(dataRecord(topic, 7, 9)) || e.Remaining() != 2 {
		t.Fatal("a record of another topic or of an unlisted partition counted")
	}
	if !e.Observe(markerRecord(topic, 0, 9)) || e.Remaining() != 1 {
		t.Fatal("the commit marker at end-1 must reach partition 0")
	}
	// Partition 3's records below its end were aborted (filtered by read_committed): the first
	// record it delivers is past the end, and it reaches the end all the same.
	if e.Observe(dataRecord(topic, 3, 6)) || !e.Reached() {
		t.Fatal("a record past the end must reach the partition and not count as below it")
	}
	if e.Observe(dataRecord(topic, 0, 10)) {
		t.Fatal("offset 10 of end 10 was written after the listing")
	}
}

// TestEndOfLogReadToEndNeedsNoTimer: a read ends when, and only when, every partition reaches its
// end. A day of silence between two fetches does not end it (a reader that takes silence for the
// end would have returned with partition 0 short of its end), the markers end it, and the data
// records past the end are not handed to the caller.
func TestEndOfLogReadToEndNeedsNoTimer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const topic = "index"
		e := NewEndOfLog(topic, map[int32]int64{}, map[int32]int64{0: 3, 1: 2})
		polls := make(chanPoller)
		var got []int64
		done := make(chan error, 1)
		go func() {
			done <- e.ReadToEnd(context.Background(), polls, func(r *kgo.Record) {
				got = append(got, int64(r.Partition)*100+r.Offset)
			})
		}()
		polls <- fetchOf(dataRecord(topic, 0, 0), dataRecord(topic, 0, 1), dataRecord(topic, 1, 0))
		time.Sleep(24 * time.Hour) // the bubble's clock: a silent day passes, then synctest.Wait lets the reader act on it
		synctest.Wait()
		select {
		case err := <-done:
			t.Fatalf("the read ended (%v) with partition 0 at offset 1 of end 3 and partition 1 at 0 of 2", err)
		default:
		}
		polls <- fetchOf(markerRecord(topic, 0, 2), dataRecord(topic, 0, 3), markerRecord(topic, 1, 1))
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if want := []int64{0, 1, 100}; !slices.Equal(got, want) {
			t.Fatalf("records handed over %v; want %v (no marker, nothing past the end)", got, want)
		}
	})
}

// TestEndOfLogReadToEndErrors: the context ending first and a fetch error end the read with a
// typed error that wraps the cause.
func TestEndOfLogReadToEndErrors(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := NewEndOfLog("kv", map[int32]int64{}, map[int32]int64{0: 1})
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		err := e.ReadToEnd(ctx, make(chanPoller), func(*kgo.Record) {})
		var eol *EndOfLogError
		if !errors.Is(err, context.DeadlineExceeded) || !errors.As(err, &eol) || eol.Op != "wait" || eol.Topic != "kv" {
			t.Fatalf("read with an ended context: %v; want an *EndOfLogError wrapping DeadlineExceeded", err)
		}
	})

	e := NewEndOfLog("kv", map[int32]int64{}, map[int32]int64{0: 1, 1: 1})
	polls := make(chanPoller, 1)
	polls <- kgo.Fetches{{Topics: []kgo.FetchTopic{{Topic: "kv", Partitions: []kgo.FetchPartition{
		{Partition: 1, Err: kerr.TopicAuthorizationFailed}}}}}}
	err := e.ReadToEnd(context.Background(), polls, func(*kgo.Record) {})
	var eol *EndOfLogError
	if !errors.Is(err, kerr.TopicAuthorizationFailed) || !errors.As(err, &eol) || eol.Partition != 1 || eol.Op != "fetch" {
		t.Fatalf("read with a fetch error: %v; want an *EndOfLogError of partition 1 wrapping the error", err)
	}
}

// stepClock is a listing's clock that moves only when the listing pauses: each pause passes at
// once, moves the clock by its length and then calls moved (when set) with the new time. Only
// the listing's goroutine uses it while it runs.
type stepClock struct {
	t     time.Time
	moved func(time.Time)
}

func (c *stepClock) clock() listingClock {
	return listingClock{
		now: func() time.Time { return c.t },
		after: func(d time.Duration) <-chan time.Time {
			c.t = c.t.Add(d)
			if c.moved != nil {
				c.moved(c.t)
			}
			ch := make(chan time.Time, 1)
			ch <- c.t
			return ch
		},
	}
}

// TestListingWaitsForLeadersPastOffsetListRetry: a partition whose leader is not there yet
// (NOT_LEADER_OR_FOLLOWER, the 64 freshly created topics of a loaded broker) is listed again
// for as long as the context allows, past OffsetListRetry of the listing's clock, with a log
// line every ListingWaitLogEvery naming what it waits for; the listing then succeeds. A topic
// the brokers do not know (UNKNOWN_TOPIC_OR_PARTITION) is still given up after OffsetListRetry:
// it is missing, and waiting does not create it. The broker is kfake, the clock the listing's
// own (the pauses pass at once).
func TestListingWaitsForLeadersPastOffsetListRetry(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const topic = "eol-leaderless"
	if err := c.CreateTopic(topic, 2, nil); err != nil {
		t.Fatal(err)
	}
	// The client's own retries are off (each listing is one request), and its metadata is not
	// cached between two listings.
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.MetadataMinAge(10*time.Millisecond), kgo.RequestRetries(0))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx := context.Background()
	core, logs := observer.New(zap.WarnLevel)
	start := time.Unix(1_800_000_000, 0)
	clk := &stepClock{t: start}
	w := ListingWait{Log: zap.New(core), clock: clk.clock()}

	// Every listing is answered NOT_LEADER_OR_FOLLOWER until the leaders are elected, 45 s into
	// the listing's clock.
	elected := start.Add(45 * time.Second)
	h := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.ListOffsets}, Topic: topic, Err: kerr.NotLeaderForPartition, Count: -1})
	clk.moved = func(now time.Time) {
		if !now.Before(elected) && clk.moved != nil {
			h.Remove()
			clk.moved = nil
		}
	}
	e, err := w.ListEndOfLog(ctx, adm, topic)
	if err != nil {
		t.Fatalf("listing while the leaders were missing for %v of its clock: %v; want it to wait for them", clk.t.Sub(start), err)
	}
	if len(e.Partitions()) != 2 {
		t.Fatalf("partitions %v, want 2", e.Partitions())
	}
	waited := clk.t.Sub(start)
	if waited < elected.Sub(start) || h.Hits() < 2 {
		t.Fatalf("the listing waited %v of its clock (%d answers without a leader); want it to wait until the election at %v",
			waited, h.Hits(), elected.Sub(start))
	}
	lines := logs.FilterMessageSnippet("waiting for the brokers").All()
	// One line every ListingWaitLogEvery, the first after one period: the count is the periods
	// waited, or one fewer where the last period ended during the last pause.
	if most := int(waited / ListingWaitLogEvery); len(lines) < most-1 || len(lines) > most {
		t.Fatalf("%d log lines over %v of waiting, want %d or %d (one every %v)", len(lines), waited, most-1, most, ListingWaitLogEvery)
	}
	for _, l := range lines {
		if got := l.ContextMap()["listing"]; got != "end of log of "+topic {
			t.Fatalf("log line names the listing %q, want the end of log of %s", got, topic)
		}
	}

	// A topic the brokers do not know: given up after OffsetListRetry, not waited for.
	clk.t = start
	_, err = w.ListEndOfLog(ctx, adm, "eol-never-created")
	var eol *EndOfLogError
	if !errors.As(err, &eol) || !errors.Is(err, kerr.UnknownTopicOrPartition) {
		t.Fatalf("listing an unknown topic: %v; want an *EndOfLogError wrapping UNKNOWN_TOPIC_OR_PARTITION", err)
	}
	if waited := clk.t.Sub(start); waited < OffsetListRetry || waited > OffsetListRetry+offsetListMaxBackoff {
		t.Fatalf("an unknown topic was retried for %v of the listing's clock, want OffsetListRetry %v (up to one pause more)", waited, OffsetListRetry)
	}
}
