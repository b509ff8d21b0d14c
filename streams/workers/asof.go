package workers

import (
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// as_of: the time up to which a replica reflects its DC's KV events (workers §10 in
// docs/spec/workers.md). Every KV event appended to the KV-events topic before as_of is in the
// index the replica answers from. The rules are the relay's for its lanes (streams/relay's
// relay.md, "as_of"), so that a DC's age in a worker answer means what a lane's age means in a
// prefix-match answer: per partition the latest of the time it was last seen caught up with its
// end, the Kafka timestamp of the last record applied from it, and the time the whole replica was
// last caught up; as_of is the oldest partition's. The relay's bookkeeping (relay_asof.go) is
// unexported and bound to its poller goroutine, and exporting it would change streams/relay, so
// the replica keeps this smaller copy: its own loop polls (no poller goroutine, no publication
// window), which leaves the per-partition bounds and the idle watch.

// asOfBook holds, per KV partition, what the replica knows of how far it reflects it. Owned by
// the loop's goroutine; it reads no clock.
type asOfBook struct {
	parts  map[int32]*partAsOf
	synced time.Time // the latest time the whole replica was caught up
}

// partAsOf is one partition's bookkeeping.
type partAsOf struct {
	next     int64     // the next offset to apply
	end      int64     // the highest end (last stable offset) seen: the listing's, then fetches'
	endAt    time.Time // the latest time an end at or below end was seen
	caughtAt time.Time // the latest such time that next has reached (zero: none)
	lastTs   time.Time // the Kafka timestamp of the last record applied (zero: none)
}

// newAsOfBook starts from the listing at start: each partition's next offset (from) and its end as
// listed at listedAt, a time read before the listing. A partition already at its end is caught up
// as of listedAt.
func newAsOfBook(listedAt time.Time, from, ends map[int32]int64) *asOfBook {
	b := &asOfBook{parts: make(map[int32]*partAsOf, len(ends))}
	for p, end := range ends {
		pa := &partAsOf{next: from[p], end: end, endAt: listedAt}
		if pa.next >= pa.end {
			pa.caughtAt = listedAt
		}
		b.parts[p] = pa
	}
	return b
}

// applied records that the record at offset of partition p, with Kafka timestamp ts, is applied.
func (b *asOfBook) applied(p int32, offset int64, ts time.Time) {
	pa := b.parts[p]
	if pa == nil {
		return
	}
	pa.next = max(pa.next, offset+1)
	if ts.After(pa.lastTs) {
		pa.lastTs = ts
	}
	if pa.next >= pa.end && pa.endAt.After(pa.caughtAt) {
		pa.caughtAt = pa.endAt
	}
}

// fetched records that a fetch which arrived no earlier than at reported end for p. A zero at
// (arrival unknown) still raises the end, so that the partition is not taken as caught up before
// its records are applied.
func (b *asOfBook) fetched(p int32, end int64, at time.Time) {
	pa := b.parts[p]
	if pa == nil {
		return
	}
	pa.end = max(pa.end, end)
	if at.After(pa.endAt) {
		pa.endAt = at
	}
	if pa.next >= pa.end && pa.endAt.After(pa.caughtAt) {
		pa.caughtAt = pa.endAt
	}
}

// caughtUp reports whether every partition is applied up to the end it was last seen with.
func (b *asOfBook) caughtUp() bool {
	for _, pa := range b.parts {
		if pa.next < pa.end {
			return false
		}
	}
	return true
}

// sync records that the whole replica was caught up at at.
func (b *asOfBook) sync(at time.Time) {
	if at.After(b.synced) {
		b.synced = at
	}
}

// asOf is the oldest partition's bound; zero while some partition has none (its replay has not
// reached its end and nothing was applied from it).
func (b *asOfBook) asOf() time.Time {
	var out time.Time
	first := true
	for _, pa := range b.parts {
		t := pa.caughtAt
		if pa.lastTs.After(t) {
			t = pa.lastTs
		}
		if b.synced.After(t) {
			t = b.synced
		}
		if t.IsZero() {
			return time.Time{}
		}
		if first || t.Before(out) {
			out, first = t, false
		}
	}
	return out
}

// idleWatch lets queries, on any goroutine, tell that the replica is caught up at this moment:
// the loop waits inside PollRecords, having found nothing buffered while every partition was
// applied up to its end, and no fetch response has been read since (kgo.HookFetchBatchRead).
// franz-go long-polls with FetchMinBytes 1, so a record appended ends the wait.
type idleWatch struct {
	armed     atomic.Bool
	firstRead atomic.Int64 // Unix ns of the first batch read since armed; 0: none
	// waitingSince is the Unix ns at which the loop found nothing buffered while caught up and
	// began to wait; 0 while it is not waiting so.
	waitingSince atomic.Int64
	// asOf is the loop's latest as_of in Unix µs (0: none), for queries while it is not waiting.
	asOf atomic.Int64
}

// OnFetchBatchRead implements kgo.HookFetchBatchRead: it stamps the first batch read after the
// loop armed the watch.
func (w *idleWatch) OnFetchBatchRead(kgo.BrokerMetadata, string, int32, kgo.FetchBatchMetrics) {
	if w.armed.Load() && w.armed.CompareAndSwap(true, false) {
		w.firstRead.Store(time.Now().UnixNano())
	}
}

// at is the as_of of the index at now: now itself while the loop waits caught up with nothing
// read since, else the loop's latest value (zero: none).
func (w *idleWatch) at(now time.Time) time.Time {
	if s := w.waitingSince.Load(); s != 0 && s <= now.UnixNano() && w.firstRead.Load() == 0 {
		return now
	}
	if us := w.asOf.Load(); us != 0 {
		return time.UnixMicro(us)
	}
	return time.Time{}
}

// publish makes t the value queries read while the loop is not waiting.
func (w *idleWatch) publish(t time.Time) {
	if t.IsZero() {
		w.asOf.Store(0)
		return
	}
	w.asOf.Store(t.UnixMicro())
}
