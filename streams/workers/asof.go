package workers

import (
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// as_of: the time up to which a replica reflects its DC's KV events (workers §10 in
// docs/spec/workers.md), by the relay's rules for its lanes (streams/internal/asof keeps them for
// both), so that a DC's age in a worker answer means what a lane's age means in a prefix-match
// answer. The replica's own loop polls (no poller goroutine, no publication window): it feeds
// an asof.Book, and publishes its as_of through the idle watch below for queries on any
// goroutine.

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
