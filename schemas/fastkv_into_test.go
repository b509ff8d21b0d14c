package schemas

import (
	"errors"
	"reflect"
	"slices"
	"testing"
)

// kvEventNilBlocks is e with empty block slices set to nil: DecodeKvEventInto may leave an empty
// non-nil slice where DecodeKvEvent leaves nil, and nothing else may differ.
func kvEventNilBlocks(e KvEvent) KvEvent {
	if len(e.Stored.Blocks) == 0 {
		e.Stored.Blocks = nil
	}
	if len(e.Removed.BlockHashes) == 0 {
		e.Removed.BlockHashes = nil
	}
	return e
}

// TestDecodeKvEventIntoMatchesDecodeKvEvent decodes every kind of event, in every order, into one
// reused KvEvent: each result equals DecodeKvEvent's, so nothing of an earlier, larger event
// (blocks, optional fields, the other kind's payload) survives into a later one.
func TestDecodeKvEventIntoMatchesDecodeKvEvent(t *testing.T) {
	c := newTestCodec(t)
	events := testKvEvents()
	big := events["stored"]
	big.Stored.Blocks = nil
	for i := range 40 {
		big.Stored.Blocks = append(big.Stored.Blocks, KvBlock{BlockHash: uint64(i + 1), TokensHash: uint64(i * 7)})
	}
	events["stored-big"] = big
	names := make([]string, 0, len(events))
	for name := range events {
		names = append(names, name)
	}
	slices.Sort(names)
	var order []string // every ordered pair, so each kind follows each other kind
	for _, a := range names {
		for _, b := range names {
			order = append(order, a, b)
		}
	}
	var into KvEvent
	for i, name := range order {
		b, err := c.EncodeKvEvent(events[name])
		if err != nil {
			t.Fatal(err)
		}
		want, err := c.DecodeKvEvent(b)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.DecodeKvEventInto(b, &into); err != nil {
			t.Fatalf("step %d (%s): %v", i, name, err)
		}
		if !reflect.DeepEqual(kvEventNilBlocks(into), want) {
			t.Fatalf("step %d (%s) after %s:\n into %+v\n want %+v", i, name, order[max(i-1, 0)], into, want)
		}
	}
}

// TestDecodeKvEventIntoErrors: a truncated or unframed record fails with DecodeKvEvent's error.
func TestDecodeKvEventIntoErrors(t *testing.T) {
	c := newTestCodec(t)
	b, err := c.EncodeKvEvent(testKvEvents()["stored"])
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range [][]byte{b[:len(b)-3], b[:2], nil} {
		_, want := c.DecodeKvEvent(bad)
		var e KvEvent
		got := c.DecodeKvEventInto(bad, &e)
		if want == nil || got == nil || got.Error() != want.Error() {
			t.Fatalf("%d bytes: DecodeKvEventInto error %v, DecodeKvEvent error %v", len(bad), got, want)
		}
		if errors.Is(want, ErrInvalidField) != errors.Is(got, ErrInvalidField) {
			t.Fatalf("%d bytes: sentinels differ: %v against %v", len(bad), got, want)
		}
	}
}

// TestDecodeKvEventIntoReusesBlocks: once the slices have grown, decoding events of the known
// residency domains allocates nothing (an unknown domain's string is the one allocation left).
func TestDecodeKvEventIntoReusesBlocks(t *testing.T) {
	c := newTestCodec(t)
	removed := testKvEvents()["removed"]
	removed.ResidencyDomain = Some(ResidencyWorker)
	var rs [][]byte
	for _, e := range []KvEvent{testKvEvents()["stored"], removed, testKvEvents()["stored-root"], testKvEvents()["cleared"]} {
		b, err := c.EncodeKvEvent(e)
		if err != nil {
			t.Fatal(err)
		}
		rs = append(rs, b)
	}
	var e KvEvent
	allocs := testing.AllocsPerRun(100, func() {
		for _, b := range rs {
			if err := c.DecodeKvEventInto(b, &e); err != nil {
				t.Fatal(err)
			}
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per 4 decodes, want 0", allocs)
	}
}
