package relay

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ckf-stream/ckf-stream/streams/internal/asof"
	"github.com/twmb/franz-go/pkg/kgo"
)

// as_of: the time up to which the lane reflects its DC's KV events (relay.md, "as_of").
//
// Every lane record carries it (LaneRecord.AsOf): every KV event appended to the KV-events topic
// before as_of is in the state the record brings the lane to. The rules (per input partition,
// from the listing, fetches and applied records, the oldest taken) are streams/internal/asof's,
// which the worker stage shares; what is the relay's own is how it learns the times: the lower
// bound of a fetch's arrival (pollWatch, fetchBound), and when it is caught up now: when it has
// applied every fetch and every partition is caught up while its poller waits inside
// PollRecords with nothing buffered (asOfTracker.at).
//
// Events still in the open publication window are applied but not published: a record written
// while the window holds some carries the as_of of the moment it was last empty.

// asOfTracker is the relay's as_of bookkeeping: the shared rules (asof.Book) and, per
// partition, the start of the latest poll that returned it and took every buffered record (its
// next fetch was requested after it: fetchBound). Owned by the loop's goroutine; it reads no
// clock.
type asOfTracker struct {
	*asof.Book
	pollStart map[int32]time.Time
}

// newAsOfTracker starts the bookkeeping from the listing at start (asof.NewBook).
func newAsOfTracker(listedAt time.Time, from, ends map[int32]int64) *asOfTracker {
	return &asOfTracker{Book: asof.NewBook(listedAt, from, ends), pollStart: make(map[int32]time.Time, len(ends))}
}

// at is the as_of of the applied state at now: idle says the poller has been waiting inside
// PollRecords with nothing buffered, and no poll waits for the loop; then, if every partition
// is applied up to its end, the relay is caught up now (Sync). Otherwise the partitions' bounds.
func (t *asOfTracker) at(now time.Time, idle bool) time.Time {
	if idle && t.CaughtUp() {
		t.Sync(now)
	}
	return t.AsOf()
}

// fetchBound is the lower bound of the arrival of p's part of a poll whose own bound is base:
// the later of base and the start of the latest poll that returned p and took every buffered
// record (franz-go requests a partition again only once its buffered data is taken).
func (t *asOfTracker) fetchBound(p int32, base time.Time) time.Time {
	if s := t.pollStart[p]; s.After(base) {
		return s
	}
	return base
}

// polledAt records that a poll started at start returned p and took every buffered record.
func (t *asOfTracker) polledAt(p int32, start time.Time) {
	if start.After(t.pollStart[p]) {
		t.pollStart[p] = start
	}
}

// polled is one poll handed from the poller to the loop, with what the poller knows of when its
// fetches arrived.
type polled struct {
	fs kgo.Fetches
	// start is when the poll began (before it took anything).
	start time.Time
	// drained says the poll took every record buffered when it took them (fewer than the most
	// it may take): no part of a fetch it returned is left for the next poll.
	drained bool
	// fresh says nothing was buffered when the poll began: every fetch it returned arrived
	// while it waited.
	fresh bool
	// bound is a lower bound of the arrival of every fetch the poll returned: the first fetch
	// response read after the latest moment the poller found nothing buffered (zero: none
	// known).
	bound time.Time
}

// pollWatch is what the poller goroutine tells the loop about the input client's buffer: when
// it last found nothing buffered, the first fetch response read after that (through
// kgo.HookFetchBatchRead, on the client's goroutines), and whether it is waiting inside
// PollRecords now.
type pollWatch struct {
	armed     atomic.Bool
	firstRead atomic.Int64 // unix nanoseconds of the first batch read since armed; 0: none

	mu      sync.Mutex
	waiting bool      // inside PollRecords after finding nothing buffered at since
	since   time.Time // when it found nothing buffered

	// The poller goroutine's own: the latest moment it found nothing buffered, and the first
	// read after it.
	emptyAt, readAt time.Time
}

// OnFetchBatchRead implements kgo.HookFetchBatchRead: it stamps the first batch read after the
// poller armed the watch.
func (w *pollWatch) OnFetchBatchRead(kgo.BrokerMetadata, string, int32, kgo.FetchBatchMetrics) {
	if w.armed.Load() && w.armed.CompareAndSwap(true, false) {
		w.firstRead.Store(time.Now().UnixNano())
	}
}

// poll takes the next poll from cl (at most max records), as the poller goroutine's loop: it
// first takes whatever is buffered without waiting; when nothing is, the moment is a fresh
// point (nothing buffered: every later fetch arrives after it) and it waits in PollRecords,
// marked as waiting for the loop (waitingAt).
func (w *pollWatch) poll(ctx context.Context, cl *kgo.Client, max int, now func() time.Time) polled {
	start := now()
	w.firstRead.Store(0)
	w.armed.Store(true) // before the take: a read after start is seen
	p := polled{start: start}
	// A nil context takes what is buffered and returns without waiting (kgo.Client.PollRecords).
	//lint:ignore SA1012 nil is franz-go's documented way to poll without waiting
	if p.fs = cl.PollRecords(nil, max); len(p.fs) == 0 {
		p.fresh = true
		w.emptyAt, w.readAt = start, time.Time{}
		w.mu.Lock()
		w.waiting, w.since = true, start
		w.mu.Unlock()
		p.fs = cl.PollRecords(ctx, max)
		w.mu.Lock()
		w.waiting = false
		w.mu.Unlock()
		if fr := w.firstRead.Load(); fr != 0 {
			w.readAt = time.Unix(0, fr)
		}
	} else {
		w.armed.Store(false)
	}
	p.drained = p.fs.NumRecords() < max
	p.bound = w.readAt
	if p.bound.IsZero() {
		p.bound = w.emptyAt
	}
	return p
}

// waitingAt reports whether the poller has been waiting inside PollRecords since before t with
// nothing buffered and no fetch response read since: the relay has nothing to apply at t but
// what the loop already holds.
func (w *pollWatch) waitingAt(t time.Time) bool {
	w.mu.Lock()
	waiting, since := w.waiting, w.since
	w.mu.Unlock()
	return waiting && !since.After(t) && w.firstRead.Load() == 0
}

// notePoll feeds the tracker with what a poll says before its records are applied: when the
// poll arrived fresh (after a wait with nothing buffered) and the loop had applied everything and
// was caught up before its first fetch arrived, the relay was caught up until then; every
// partition of the KV topic the poll answered without error reports its last stable offset as of
// the poll's arrival.
func (rl *relayLoop) notePoll(p polled) {
	if p.fresh && !p.bound.IsZero() && !rl.appliedAt.After(p.bound) && rl.asOf.CaughtUp() {
		rl.asOf.Sync(p.bound)
	}
	kv := rl.cfg.Topics.KVEvents
	p.fs.EachPartition(func(fp kgo.FetchTopicPartition) {
		if fp.Topic != kv || fp.Err != nil {
			return
		}
		end := fp.LastStableOffset
		if end < 0 { // a broker that does not report it: the high watermark (read_uncommitted's end)
			end = fp.HighWatermark
		}
		rl.asOf.Fetched(fp.Partition, end, rl.asOf.fetchBound(fp.Partition, p.bound))
		if p.drained {
			rl.asOf.polledAt(fp.Partition, p.start)
		}
	})
}

// appliedAsOf is the as_of of the state applied so far: the tracker's, after noting that the
// relay is caught up now if its poller waits with nothing buffered, no poll is waiting for the
// loop and every partition is applied up to its end.
func (rl *relayLoop) appliedAsOf() time.Time {
	now := rl.now()
	return rl.asOf.at(now, len(rl.fetchCh) == 0 && rl.watch.waitingAt(now))
}

// laneAsOf is the as_of every lane record carries (LaneWriter.ReportAsOf): the applied state's
// when the publication window is empty (every applied event is in a delta written or being
// written in the same transaction), else the one of the moment the window was last empty. It
// runs on the loop's goroutine and sets ckf_relay_as_of_lag_seconds.
func (rl *relayLoop) laneAsOf() time.Time {
	v := rl.frozenAsOf
	if !rl.state.HasPendingPublication() {
		v = rl.appliedAsOf()
	}
	if !v.IsZero() {
		rl.r.metrics.asOfLag.Update(max(rl.now().Sub(v), 0).Seconds())
	}
	return v
}
