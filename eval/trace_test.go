package eval

import (
	"errors"
	"strings"
	"testing"
)

func TestReadTrace(t *testing.T) {
	in := `{"timestamp": 5, "input_length": 1000, "output_length": 10, "hash_ids": [0, 1], "extra": {"x": 1}}

{"timestamp": 3, "input_length": 1500, "output_length": 20, "hash_ids": [0, 1, 2]}
{"timestamp": 9.5, "input_length": 600, "output_length": 0, "hash_ids": [7, 1]}
`
	reqs, st, err := ReadTrace(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if len(reqs) != 3 || reqs[0].Line != 3 || reqs[1].Line != 1 || reqs[2].Time != 9.5 {
		t.Fatalf("requests %+v: want time order, lines 3, 1, 4", reqs)
	}
	// Line 4's id 1 follows 7, not 0: not prefix-consistent, counted, and a block of its own.
	if st.Reordered != 1 || st.InconsistentIDs != 1 || st.Requests != 3 || st.Blocks != 7 || st.UniqueBlocks != 5 {
		t.Errorf("stats %+v", st)
	}
	if got, want := st.InfiniteHitRate, 2.0/7; got != want {
		t.Errorf("infinite-cache hit rate %v, want %v", got, want)
	}
}

func TestReadTraceErrors(t *testing.T) {
	good := `{"timestamp": 0, "input_length": 1, "output_length": 1, "hash_ids": [1]}` + "\n"
	for _, tc := range []struct {
		line, field, reason string
	}{
		{`not json`, "", "not a JSON object"},
		{`[1, 2]`, "", "not a JSON object"},
		{`{"input_length": 1, "output_length": 1, "hash_ids": [1]}`, "timestamp", "missing"},
		{`{"timestamp": -1, "input_length": 1, "output_length": 1, "hash_ids": [1]}`, "timestamp", "non-negative"},
		{`{"timestamp": "0", "input_length": 1, "output_length": 1, "hash_ids": [1]}`, "timestamp", "non-negative"},
		{`{"timestamp": 0, "input_length": 1.5, "output_length": 1, "hash_ids": [1]}`, "input_length", "integer"},
		{`{"timestamp": 0, "input_length": 1, "output_length": -2, "hash_ids": [1]}`, "output_length", "integer"},
		{`{"timestamp": 0, "input_length": 1, "output_length": 1, "hash_ids": null}`, "hash_ids", "array"},
		{`{"timestamp": 0, "input_length": 1, "output_length": 1, "hash_ids": [1, -3]}`, "hash_ids", "element 1"},
		{`{"timestamp": 0, "input_length": 1, "output_length": 1, "hash_ids": "1,2"}`, "hash_ids", "array"},
	} {
		_, _, err := ReadTrace(strings.NewReader(good + good + tc.line + "\n" + good))
		var te *TraceError
		if !errors.As(err, &te) {
			t.Errorf("%s: %v, want a *TraceError", tc.line, err)
			continue
		}
		if te.Line != 3 || te.Field != tc.field || !strings.Contains(te.Reason, tc.reason) {
			t.Errorf("%s: %+v, want line 3, field %q, reason with %q", tc.line, te, tc.field, tc.reason)
		}
		if tc.field != "" && !strings.Contains(err.Error(), `trace line 3: field "`+tc.field+`"`) {
			t.Errorf("message %q does not name the line and the field", err)
		}
	}
	if _, _, err := ReadTrace(strings.NewReader("\n\n")); !errors.Is(err, ErrEmptyTrace) {
		t.Errorf("empty trace: %v", err)
	}
}

func TestWindow(t *testing.T) {
	reqs := []Request{{Time: 0}, {Time: 1000}, {Time: 2500}, {Time: 4000}}
	w := Window(reqs, 1000, 2000)
	if len(w) != 2 || w[0].Time != 0 || w[1].Time != 1500 {
		t.Errorf("window %+v", w)
	}
	if len(Window(reqs, 0, 0)) != 4 {
		t.Error("length 0 is to the end")
	}
	// A slice of a longer trace, whose first request came at 30 minutes: counted from it.
	late := []Request{{Time: 1_800_000}, {Time: 1_801_000}, {Time: 1_803_500}}
	if w := Window(late, 0, 0); len(w) != 3 || w[0].Time != 0 || w[2].Time != 3500 {
		t.Errorf("late trace from its start: %+v", w)
	}
	if w := Window(late, 1000, 2000); len(w) != 1 || w[0].Time != 0 {
		t.Errorf("late trace, window 1 s to 3 s: %+v", w)
	}
}

func TestBlockKeys(t *testing.T) {
	a, b := BlockKeys([]uint64{0, 1, 2}), BlockKeys([]uint64{0, 1, 3})
	if a[0] != b[0] || a[1] != b[1] || a[2] == b[2] {
		t.Errorf("shared prefixes must share keys: %x %x", a, b)
	}
	// The same id after another prefix is another block.
	if c := BlockKeys([]uint64{5, 1}); c[1] == a[1] {
		t.Error("id 1 after 5 has the key of id 1 after 0")
	}
	if a[0] != LocalHash(0) {
		t.Error("a root's key is its local hash (the relay's canonical root)")
	}
}
