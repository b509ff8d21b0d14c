package relay

import "testing"

// TestBlockSizesBookkeeping: the DC's size is the one size its sources report; a second size
// leaves none and describe names each size with its sources (the warning's sizes_by_source); a
// source that reports again the size it had changes nothing; a clear forgets its source.
func TestBlockSizesBookkeeping(t *testing.T) {
	var b blockSizes
	check := func(what string, changed, wantChanged bool, lane uint32, distinct int) {
		t.Helper()
		if changed != wantChanged || b.lane != lane || b.distinct != distinct {
			t.Fatalf("%s: changed %v, lane %d, %d sizes; want %v, %d, %d", what, changed, b.lane, b.distinct, wantChanged, lane, distinct)
		}
	}
	check("no size", b.note(sourceKey{1, 0}, 0), false, 0, 0)
	check("first source", b.note(sourceKey{1, 0}, 16), true, 16, 1)
	check("second source, same size", b.note(sourceKey{2, 0}, 16), false, 16, 1)
	check("same again", b.note(sourceKey{1, 0}, 16), false, 16, 1)
	check("another size", b.note(sourceKey{9, 1}, 32), true, 0, 2)
	if got, want := b.describe(), "16: worker 1 rank 0, worker 2 rank 0; 32: worker 9 rank 1"; got != want {
		t.Fatalf("describe: %q, want %q", got, want)
	}
	check("a clear of a source without a size", b.forget(sourceKey{5, 0}), false, 0, 2)
	check("the 32-token source clears", b.forget(sourceKey{9, 1}), true, 16, 1)
	check("a source changes its size", b.note(sourceKey{1, 0}, 8), true, 0, 2)
	check("the other follows", b.note(sourceKey{2, 0}, 8), true, 8, 1)
	for w := range uint64(20) {
		b.note(sourceKey{100 + w, 0}, 4)
	}
	if got, want := b.describe(), "4: worker 100 rank 0, worker 101 rank 0, worker 102 rank 0, worker 103 rank 0, worker 104 rank 0, "+
		"worker 105 rank 0, worker 106 rank 0, worker 107 rank 0, and 12 more; 8: worker 1 rank 0, worker 2 rank 0"; got != want {
		t.Fatalf("describe of many sources: %q, want %q", got, want)
	}
}
