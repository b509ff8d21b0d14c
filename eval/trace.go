// Package eval replays LLM request traces through a simulated fleet of inference engines and
// measures what prefix-aware routing gains. It is the pure part of processor replay: the trace
// reader, the engines' KV caches (LRU eviction of unpinned blocks, as vLLM's prefix cache), the
// service-time model, the routing policies, the oracles and the report. It does no I/O besides
// reading a trace; app/replay drives one simulated fleet in real time through the real pipeline
// (KV events on Kafka, relays, lanes, the indexer) and runs every other policy here, in
// simulated time. docs/EVALUATION.md describes the method and the results.
package eval

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
)

// Request is one line of a trace: a prompt arriving at Time (milliseconds from the trace's
// start) whose KV blocks are HashIDs (equal ids at equal positions after equal ids are the same
// prefix block), with InputTokens prompt tokens and OutputTokens generated ones.
type Request struct {
	// Line is the request's line in the trace file, from 1.
	Line int
	// Time is the arrival time in milliseconds from the start of the trace.
	Time float64
	// InputTokens and OutputTokens are the prompt's and the answer's lengths in tokens.
	InputTokens, OutputTokens int
	// HashIDs are the prompt's blocks in order (the last one may cover a partial block).
	HashIDs []uint64
}

// TraceError is a malformed trace line: its number (from 1), the field at fault (empty when
// the line is not a JSON object at all) and why.
type TraceError struct {
	Line   int
	Field  string
	Reason string
}

// Error renders "trace line N: field F: reason".
func (e *TraceError) Error() string {
	if e.Field == "" {
		return fmt.Sprintf("trace line %d: %s", e.Line, e.Reason)
	}
	return fmt.Sprintf("trace line %d: field %q: %s", e.Line, e.Field, e.Reason)
}

// ErrEmptyTrace is returned for a trace without a single request.
var ErrEmptyTrace = errors.New("eval: the trace holds no request")

// TraceStats describes a trace as read.
type TraceStats struct {
	// Requests is the number of requests; Blocks the number of hash ids over all of them.
	Requests, Blocks int
	// Reordered counts requests whose timestamp is earlier than the line before's; the reader
	// sorts the trace by time (stably), so they are replayed in time order.
	Reordered int
	// InconsistentIDs counts hash-id occurrences that break prefix consistency: an id seen
	// before at another position or after another parent id. Blocks are keyed by their whole
	// prefix (BlockKeys), so such an occurrence is a block of its own: it reuses nothing it
	// would not reuse in a real prefix cache.
	InconsistentIDs int
	// UniqueBlocks is the number of distinct prefix blocks (the working set of an unbounded
	// cache); InfiniteHitRate the share of requested blocks that an unbounded single cache
	// shared by every request would hold.
	UniqueBlocks    int
	InfiniteHitRate float64
	// DurationMs is the last request's time.
	DurationMs float64
	// MeanInput, MeanOutput are the mean prompt and answer lengths in tokens.
	MeanInput, MeanOutput float64
}

// ReadTraceFile is ReadTrace of the file at path.
func ReadTraceFile(path string) ([]Request, TraceStats, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, TraceStats{}, err
	}
	defer f.Close()
	return ReadTrace(f)
}

// fields are the fields a trace line must carry; others are ignored.
var fields = []string{"timestamp", "input_length", "output_length", "hash_ids"}

// ReadTrace reads a trace of JSON lines ({timestamp, input_length, output_length, hash_ids};
// unknown fields are ignored, blank lines skipped) and returns its requests in time order. The
// first malformed line stops it with a *TraceError naming the line and the field.
func ReadTrace(r io.Reader) ([]Request, TraceStats, error) {
	var reqs []Request
	var st TraceStats
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<30)
	line := 0
	for sc.Scan() {
		line++
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		req, err := parseLine(line, b)
		if err != nil {
			return nil, st, err
		}
		if n := len(reqs); n > 0 && req.Time < reqs[n-1].Time {
			st.Reordered++
		}
		reqs = append(reqs, req)
	}
	if err := sc.Err(); err != nil {
		return nil, st, fmt.Errorf("eval: reading the trace after line %d: %w", line, err)
	}
	if len(reqs) == 0 {
		return nil, st, ErrEmptyTrace
	}
	slices.SortStableFunc(reqs, func(a, b Request) int {
		switch {
		case a.Time < b.Time:
			return -1
		case a.Time > b.Time:
			return 1
		}
		return 0
	})
	st.fill(reqs)
	return reqs, st, nil
}

func (st *TraceStats) fill(reqs []Request) {
	type seen struct {
		pos    int
		parent uint64
		root   bool
	}
	first := map[uint64]seen{}
	unique := map[uint64]struct{}{}
	var hits int
	var in, out float64
	for _, r := range reqs {
		st.Requests++
		st.Blocks += len(r.HashIDs)
		in += float64(r.InputTokens)
		out += float64(r.OutputTokens)
		for i, id := range r.HashIDs {
			s := seen{pos: i, root: i == 0}
			if i > 0 {
				s.parent = r.HashIDs[i-1]
			}
			if f, ok := first[id]; !ok {
				first[id] = s
			} else if f != s {
				st.InconsistentIDs++
			}
		}
		for _, k := range BlockKeys(r.HashIDs) {
			if _, ok := unique[k]; ok {
				hits++
			} else {
				unique[k] = struct{}{}
			}
		}
	}
	st.UniqueBlocks = len(unique)
	if st.Blocks > 0 {
		st.InfiniteHitRate = float64(hits) / float64(st.Blocks)
	}
	st.DurationMs = reqs[len(reqs)-1].Time
	st.MeanInput, st.MeanOutput = in/float64(st.Requests), out/float64(st.Requests)
}

func parseLine(line int, b []byte) (Request, error) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(b, &obj); err != nil {
		return Request{}, &TraceError{Line: line, Reason: "not a JSON object: " + err.Error()}
	}
	for _, f := range fields {
		if _, ok := obj[f]; !ok {
			return Request{}, &TraceError{Line: line, Field: f, Reason: "missing"}
		}
	}
	req := Request{Line: line}
	var ts float64
	if err := json.Unmarshal(obj["timestamp"], &ts); err != nil || math.IsNaN(ts) || ts < 0 {
		return Request{}, &TraceError{Line: line, Field: "timestamp", Reason: "want a non-negative number of milliseconds, got " + clip(obj["timestamp"])}
	}
	req.Time = ts
	var err error
	if req.InputTokens, err = count(obj["input_length"]); err != nil {
		return Request{}, &TraceError{Line: line, Field: "input_length", Reason: err.Error()}
	}
	if req.OutputTokens, err = count(obj["output_length"]); err != nil {
		return Request{}, &TraceError{Line: line, Field: "output_length", Reason: err.Error()}
	}
	var ids []json.Number
	dec := json.NewDecoder(bytes.NewReader(obj["hash_ids"]))
	dec.UseNumber()
	if err := dec.Decode(&ids); err != nil || ids == nil {
		return Request{}, &TraceError{Line: line, Field: "hash_ids", Reason: "want an array of non-negative integers, got " + clip(obj["hash_ids"])}
	}
	req.HashIDs = make([]uint64, len(ids))
	for i, n := range ids {
		v, err := strconv.ParseUint(n.String(), 10, 64)
		if err != nil {
			return Request{}, &TraceError{Line: line, Field: "hash_ids", Reason: fmt.Sprintf("element %d: want a non-negative integer, got %s", i, n)}
		}
		req.HashIDs[i] = v
	}
	return req, nil
}

// count parses a non-negative integer that fits an int.
func count(raw json.RawMessage) (int, error) {
	var n json.Number
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&n); err != nil {
		return 0, fmt.Errorf("want a non-negative integer, got %s", clip(raw))
	}
	v, err := strconv.ParseUint(n.String(), 10, 31)
	if err != nil {
		return 0, fmt.Errorf("want a non-negative integer below 2^31, got %s", n)
	}
	return int(v), nil
}

func clip(raw json.RawMessage) string {
	if len(raw) > 40 {
		return string(raw[:40]) + "..."
	}
	return string(raw)
}

// Window returns the requests arriving in [from, from+length) milliseconds of trace time, counted
// from the trace's first request (reqs is in time order, as ReadTrace returns it), with their
// times shifted so that the first window instant is 0; length 0 means to the end. A trace cut
// from a longer one, whose first timestamp is late, is thus replayed from its first request,
// not after waiting from time 0 to it.
func Window(reqs []Request, from, length float64) []Request {
	if len(reqs) > 0 {
		from += reqs[0].Time
	}
	var out []Request
	for _, r := range reqs {
		if r.Time < from || (length > 0 && r.Time >= from+length) {
			continue
		}
		r.Time -= from
		out = append(out, r)
	}
	return out
}
