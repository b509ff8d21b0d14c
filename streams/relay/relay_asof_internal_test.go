package relay

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// asOfStep is one event fed to an asOfTracker, then the as_of and caught-up state it must give.
type asOfStep struct {
	what string
	do   func(t *asOfTracker) time.Time // returns the as_of to check (at or asOf)
	want time.Time
	// caught is the expected caughtUp after the step.
	caught bool
}

// ms is a time at ms milliseconds on the test's clock.
func ms(n int) time.Time { return time.UnixMilli(1_780_000_000_000 + int64(n)) }

func applied(p int32, off int64, ts time.Time) func(*asOfTracker) time.Time {
	return func(t *asOfTracker) time.Time { t.Applied(p, off, ts); return t.AsOf() }
}

func fetched(p int32, end int64, at time.Time) func(*asOfTracker) time.Time {
	return func(t *asOfTracker) time.Time { t.Fetched(p, end, at); return t.AsOf() }
}

func stampAt(now time.Time, idle bool) func(*asOfTracker) time.Time {
	return func(t *asOfTracker) time.Time { return t.at(now, idle) }
}

// TestAsOfTracker walks the rule of relay.md "as_of" step by step: the replay (partitions not
// reached, reached, listed empty), partitions caught up with their latest fetch, behind it, or
// never fetched, and the poller waiting with nothing buffered or not.
func TestAsOfTracker(t *testing.T) {
	listed := ms(1000) // when the start-up listing was taken
	cases := []struct {
		name       string
		from, ends map[int32]int64
		steps      []asOfStep
	}{{
		name: "replay: unknown until every partition reaches its listed end, then the listing time",
		from: map[int32]int64{0: 0, 1: 3}, ends: map[int32]int64{0: 3, 1: 3}, // p1: checkpoint at its end
		steps: []asOfStep{
			{what: "nothing applied of p0", do: stampAt(ms(1100), true), want: time.Time{}},
			{what: "p0 record 0 (older than the listing)", do: applied(0, 0, ms(10)), want: ms(10)},
			{what: "p0 record 1", do: applied(0, 1, ms(20)), want: ms(20)},
			{what: "p0 record 2 reaches the listed end", do: applied(0, 2, ms(30)), want: listed, caught: true},
		},
	}, {
		name: "caught up with the latest fetch: the fetch's arrival; a partition never fetched keeps the listing",
		from: map[int32]int64{0: 0, 1: 0}, ends: map[int32]int64{0: 0, 1: 0},
		steps: []asOfStep{
			{what: "start", do: stampAt(ms(1001), false), want: listed, caught: true},
			{what: "p0 fetched with two records", do: fetched(0, 2, ms(2000)), want: listed},
			{what: "p0 record 0", do: applied(0, 0, ms(1500)), want: listed},
			{what: "p0 record 1: caught up as of the fetch, p1 never fetched", do: applied(0, 1, ms(1600)), want: listed, caught: true},
			{what: "p1 fetched, nothing new", do: fetched(1, 0, ms(2000)), want: ms(2000), caught: true},
		},
	}, {
		name: "behind: the newest applied record's timestamp, never the fetch's arrival",
		from: map[int32]int64{0: 0}, ends: map[int32]int64{0: 0},
		steps: []asOfStep{
			{what: "a fetch of 3 records arrives", do: fetched(0, 3, ms(5000)), want: listed},
			{what: "record 0, appended before the listing", do: applied(0, 0, ms(900)), want: listed},
			{what: "record 1", do: applied(0, 1, ms(4000)), want: ms(4000)},
			{what: "the poller waits, but the loop is behind", do: stampAt(ms(6000), true), want: ms(4000)},
			{what: "record 2 reaches the end", do: applied(0, 2, ms(4500)), want: ms(5000), caught: true},
		},
	}, {
		name: "waiting with everything applied: now; not waiting: the fetch bound",
		from: map[int32]int64{0: 0, 1: 0}, ends: map[int32]int64{0: 0, 1: 0},
		steps: []asOfStep{
			{what: "fetch of p0", do: fetched(0, 1, ms(2000)), want: listed},
			{what: "applied", do: applied(0, 0, ms(1900)), want: listed, caught: true},
			{what: "the poller is not waiting (a poll is buffered)", do: stampAt(ms(3000), false), want: listed, caught: true},
			{what: "the poller waits", do: stampAt(ms(3000), true), want: ms(3000), caught: true},
			{what: "later, still waiting: its own time", do: stampAt(ms(4000), true), want: ms(4000), caught: true},
			{what: "a new fetch: the wait's time stays a bound", do: fetched(1, 1, ms(4100)), want: ms(4000)},
			{what: "its record, older than the wait", do: applied(1, 0, ms(3900)), want: ms(4000), caught: true},
			{what: "not waiting: p0's latest bound is the wait", do: stampAt(ms(5000), false), want: ms(4000), caught: true},
		},
	}, {
		name: "a fetch whose arrival is unknown still raises the end",
		from: map[int32]int64{0: 0}, ends: map[int32]int64{0: 0},
		steps: []asOfStep{
			{what: "fetch of unknown arrival", do: fetched(0, 2, time.Time{}), want: listed},
			{what: "waiting, but records remain", do: stampAt(ms(2000), true), want: listed},
			{what: "record 0", do: applied(0, 0, ms(1200)), want: ms(1200)},
			{what: "record 1: caught up as of the listing only", do: applied(0, 1, ms(1300)), want: ms(1300), caught: true},
			{what: "waiting: now", do: stampAt(ms(2000), true), want: ms(2000), caught: true},
		},
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tr := newAsOfTracker(listed, c.from, c.ends)
			for _, s := range c.steps {
				if got := s.do(tr); !got.Equal(s.want) {
					t.Fatalf("%s: as_of %v, want %v", s.what, got, s.want)
				}
				if got := tr.CaughtUp(); got != s.caught {
					t.Fatalf("%s: caught up %v, want %v", s.what, got, s.caught)
				}
			}
		})
	}
}

// TestAsOfFetchBound: a partition's fetch arrived after the start of the latest poll that
// returned the partition and took every buffered record; a poll that may have left part of a
// fetch behind moves nothing.
func TestAsOfFetchBound(t *testing.T) {
	tr := newAsOfTracker(ms(0), map[int32]int64{0: 0}, map[int32]int64{0: 0})
	if got := tr.fetchBound(0, ms(100)); !got.Equal(ms(100)) {
		t.Fatalf("never polled: %v, want the poll's own bound", got)
	}
	tr.polledAt(0, ms(500))
	if got := tr.fetchBound(0, ms(100)); !got.Equal(ms(500)) {
		t.Fatalf("after a draining poll at 500: %v", got)
	}
	if got := tr.fetchBound(0, ms(700)); !got.Equal(ms(700)) {
		t.Fatalf("a later poll bound: %v", got)
	}
	if got := tr.fetchBound(9, ms(100)); !got.Equal(ms(100)) {
		t.Fatalf("unknown partition: %v", got)
	}
}

// TestPollWatchWaiting: the loop takes the relay as caught up now only while the poller waits
// since before the stamp and no fetch response was read since it found nothing buffered.
func TestPollWatchWaiting(t *testing.T) {
	var w pollWatch
	if w.waitingAt(ms(10)) {
		t.Fatal("waiting before any poll")
	}
	w.waiting, w.since = true, ms(5)
	w.armed.Store(true)
	if !w.waitingAt(ms(10)) {
		t.Fatal("not waiting while inside the poll since 5")
	}
	if w.waitingAt(ms(4)) {
		t.Fatal("waiting at 4, before the wait began")
	}
	w.OnFetchBatchRead(kgo.BrokerMetadata{}, "kv", 0, kgo.FetchBatchMetrics{})
	if w.waitingAt(ms(10)) {
		t.Fatal("waiting after a fetch response was read")
	}
}
