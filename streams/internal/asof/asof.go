// Package asof keeps the bookkeeping behind as_of, the time up to which a consumer of a DC's
// KV-events topic reflects it: every KV event appended to the topic before as_of is in the state
// the consumer has applied. The relay stamps it on every lane record (streams/relay, relay.md
// "as_of") and the worker stage answers with it (workers §10 in docs/spec/workers.md); both
// derive it by the same rules, kept here once:
//
//   - a partition applied up to the end (last stable offset) that an observation reported is
//     reflected up to the time of that observation: the listing of the ends at start, or a
//     fetch, whose time is a lower bound of its arrival;
//   - a partition behind the end it was last seen with is reflected up to the Kafka timestamp of
//     the last record applied from it, or the time it was last caught up, whichever is later;
//   - when the consumer is caught up on every partition while its poll waits with nothing
//     buffered, it is caught up at that moment (Book.Sync): a record appended ends the wait
//     (franz-go long-polls with FetchMinBytes 1);
//   - as_of is the oldest partition's bound.
//
// A Book is pure bookkeeping: it reads no clock and is owned by one goroutine (the consumer's
// loop); what other goroutines need of it the owner publishes.
package asof

import "time"

// Book holds, per KV partition, what the consumer knows of how far it reflects it.
type Book struct {
	parts  map[int32]*part
	synced time.Time // the latest time the whole consumer was caught up (Sync)
}

// part is one partition's bookkeeping.
type part struct {
	next     int64     // the next offset to apply
	end      int64     // the highest end (last stable offset) observed: the listing's, then fetches'
	endAt    time.Time // the latest time of an observation of an end at or below end
	caughtAt time.Time // the latest observation time whose end next has reached (zero: none)
	lastTs   time.Time // the Kafka timestamp of the last record applied (zero: none)
}

// NewBook starts the bookkeeping from the listing at start: every partition's next offset to
// apply (from) and its end as listed at listedAt, a time taken before the listing. A partition
// whose next offset is at its end is caught up as of listedAt; the others are once the replay
// reaches their end. Partitions absent from ends are not tracked (their events are ignored).
func NewBook(listedAt time.Time, from, ends map[int32]int64) *Book {
	b := &Book{parts: make(map[int32]*part, len(ends))}
	for p, end := range ends {
		pa := &part{next: from[p], end: end, endAt: listedAt}
		if pa.next >= pa.end {
			pa.caughtAt = listedAt
		}
		b.parts[p] = pa
	}
	return b
}

// Applied records that the record at offset of partition p, with Kafka timestamp ts, is applied
// (its effect, if any, is in the state).
func (b *Book) Applied(p int32, offset int64, ts time.Time) {
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

// Fetched records that a fetch which arrived no earlier than at reported end (the partition's
// last stable offset) for p. The partition's end becomes the highest reported, and the time of
// reaching it the latest observation time: reaching the highest end reaches every lower one. A
// zero at (arrival unknown) still raises the end, so that the partition is not taken as caught
// up before its records are applied.
func (b *Book) Fetched(p int32, end int64, at time.Time) {
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

// CaughtUp reports whether every partition is applied up to the end it was last seen with.
func (b *Book) CaughtUp() bool {
	for _, pa := range b.parts {
		if pa.next < pa.end {
			return false
		}
	}
	return true
}

// Sync records that the whole consumer was caught up at at: every record appended before it is
// applied, on every partition.
func (b *Book) Sync(at time.Time) {
	if at.After(b.synced) {
		b.synced = at
	}
}

// AsOf is the time up to which the applied state reflects the topic: over the partitions, the
// oldest of each one's latest bound (caught up, last record applied, whole consumer caught up).
// Zero when a partition has no bound yet (before its replay reached its end and nothing was
// applied from it).
func (b *Book) AsOf() time.Time {
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
