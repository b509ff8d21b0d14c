package schemas

import (
	"errors"
	"runtime"
	"testing"
)

// allocPerDecode returns the bytes allocated by one call of fn, averaged.
func allocPerDecode(fn func()) uint64 {
	const runs = 50
	fn()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for range runs {
		fn()
	}
	runtime.ReadMemStats(&after)
	return (after.TotalAlloc - before.TotalAlloc) / runs
}

// Hostile declared lengths and counts must be rejected before anything of
// their size is allocated.
func TestDecodeAllocationIsBounded(t *testing.T) {
	c := newTestCodec(t)
	hostile := map[string]struct {
		in  []byte
		dec func([]byte) error
	}{}
	add := func(name string, rt RecordType, body []byte) {
		in := frame(BuiltinID(rt), body)
		var dec func([]byte) error
		switch rt {
		case TypeKvEvent:
			dec = func(b []byte) error { _, err := c.DecodeKvEvent(b); return err }
		case TypeQueryReply:
			dec = func(b []byte) error { _, err := c.DecodeQueryReply(b); return err }
		case TypeDeadLetter:
			dec = func(b []byte) error { _, err := c.DecodeDeadLetter(b); return err }
		case TypeLaneRecord:
			dec = func(b []byte) error { _, err := c.DecodeLaneRecord(b); return err }
		}
		hostile[name] = struct {
			in  []byte
			dec func([]byte) error
		}{in, dec}
	}
	kvRemoved := func(count int64) []byte {
		b := appendLong(appendLong(appendLong(appendLong(appendLong(appendLong(nil, 1), 0), 0), 1), 0), 1)
		return appendLong(b, count)
	}
	add("kv removed 2^31-1 hashes", TypeKvEvent, kvRemoved(1<<31-1))
	add("kv removed 2^62 hashes", TypeKvEvent, kvRemoved(1<<62))
	add("dead letter 2^40-byte topic", TypeDeadLetter, appendLong(nil, 1<<40))
	add("lane record 2^40-byte images", TypeLaneRecord, func() []byte {
		l := okLane()
		l.tail = func(b []byte) []byte { return appendLong(appendLong(appendLong(b, 1), 2), 1<<40) }
		return l.bytes()
	}())
	for name, h := range hostile {
		if err := h.dec(h.in); !errors.Is(err, ErrTruncated) {
			t.Fatalf("%s: %v", name, err)
		}
		if n := allocPerDecode(func() { _ = h.dec(h.in) }); n > 4096 {
			t.Fatalf("%s: %d bytes allocated for a %d-byte input", name, n, len(h.in))
		}
	}
}

// A writer schema fetched from a registry may be recursive; the bounds
// checker stops at its depth limit instead of exhausting the stack.
func TestSkimRecursiveSchema(t *testing.T) {
	n, err := parseSchema(`{"type":"record","name":"List","namespace":"x","fields":[
		{"name":"v","type":"long"},{"name":"next","type":["null","List"]}]}`)
	if err != nil {
		t.Fatal(err)
	}
	var ok []byte
	for range 3 {
		ok = append(ok, 2, 2) // v=1, branch List
	}
	ok = append(ok, 2, 0) // v=1, null
	if err := skim(n, ok); err != nil {
		t.Fatalf("valid list: %v", err)
	}
	var deep []byte
	for range 10_000 {
		deep = append(deep, 2, 2)
	}
	if err := skim(n, deep); !errors.Is(err, ErrMalformed) {
		t.Fatalf("deep list: %v", err)
	}
}

func TestParseSchemaErrors(t *testing.T) {
	for _, s := range []string{
		`{"type":"record","name":"A","fields":[{"name":"x","type":"Missing"}]}`,
		`{"type":"enum","name":"E","symbols":[]}`,
		`{"type":"fixed","name":"F","size":-1}`,
		`[]`,
		`not json`,
	} {
		if _, err := parseSchema(s); err == nil {
			t.Fatalf("parseSchema(%s) accepted", s)
		}
	}
}
