package asof

import (
	"testing"
	"time"
)

// TestBookBounds: the bookkeeping's rules (the package comment; relay.md "as_of", workers §10) on made-up
// facts: a partition at its listed end is reflected up to the listing; one behind its end is
// reflected up to its last applied record's timestamp, and stays there however late it is asked,
// which is what makes a lagging consumer's age grow; reaching the end seen by a fetch moves it to
// that fetch's arrival; the whole consumer caught up moves every partition on.
func TestBookBounds(t *testing.T) {
	t.Parallel()
	base := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return base.Add(time.Duration(ms) * time.Millisecond) }
	listed := at(1000)
	b := NewBook(listed, map[int32]int64{0: 4, 1: 0}, map[int32]int64{0: 4, 1: 3})
	if got := b.AsOf(); !got.IsZero() {
		t.Fatalf("partition 1 not yet replayed: as_of %v, want none", got)
	}
	b.Applied(1, 0, at(-5000))
	if got := b.AsOf(); !got.Equal(at(-5000)) {
		t.Fatalf("partition 1 behind after its first record: as_of %v, want that record's timestamp", got)
	}
	b.Applied(1, 1, at(-4000))
	b.Applied(1, 2, at(-3000))
	if got := b.AsOf(); !got.Equal(listed) || !b.CaughtUp() {
		t.Fatalf("both partitions at their listed ends: as_of %v, want the listing's %v", got, listed)
	}
	// A fetch arriving no earlier than 2000 reports partition 1's end at 5: behind again, so it is
	// bounded by what it reached (the listing) until its records are applied.
	b.Fetched(1, 5, at(2000))
	b.Fetched(0, 4, at(2000))
	if got := b.AsOf(); !got.Equal(listed) || b.CaughtUp() {
		t.Fatalf("partition 1 behind its fetched end: as_of %v, want %v", got, listed)
	}
	b.Applied(1, 3, at(1500))
	if got := b.AsOf(); !got.Equal(at(1500)) {
		t.Fatalf("one of two pending records applied: as_of %v, want its timestamp", got)
	}
	b.Applied(1, 4, at(1600))
	if got := b.AsOf(); !got.Equal(at(2000)) {
		t.Fatalf("partition 1 at the fetched end: as_of %v, want the fetch's arrival", got)
	}
	b.Sync(at(9000))
	if got := b.AsOf(); !got.Equal(at(9000)) {
		t.Fatalf("whole consumer caught up at 9000: as_of %v", got)
	}
}
