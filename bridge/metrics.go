package bridge

import (
	"time"

	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/uber-go/tally/v4"
)

// metrics caches the bridge's handles under the "bridge" sub-scope (ckf_bridge_*), named by
// Prometheus conventions: counters end in _total, durations are _seconds. Tag keys: "kind" on events (engine events by
// kind: stored, removed, cleared, filtered, unknown_removal, orphaned) and on records (written KvEvents
// by kind), bounded values.
type metrics struct {
	batches, replayed, duplicates, restarts, gaps, lost tally.Counter
	undecodable, refused, deadLetters, bufferFull       tally.Counter
	malformedMessages, produceErrors, reconnects        tally.Counter
	replayRetries, lostClears, dialFailures             tally.Counter
	buffered, sequenceLag, degradedRanks                tally.Gauge
	unreachableRanks                                    tally.Gauge
	produceLatency                                      tally.Histogram
	eventsBy                                            map[string]tally.Counter
	recordsBy                                           [4]tally.Counter
}

var produceBuckets = tally.DurationBuckets{
	500 * time.Microsecond, time.Millisecond, 2500 * time.Microsecond, 5 * time.Millisecond, 10 * time.Millisecond,
	25 * time.Millisecond, 50 * time.Millisecond, 100 * time.Millisecond, 250 * time.Millisecond, 500 * time.Millisecond,
	time.Second, 5 * time.Second,
}

func newMetrics(root tally.Scope) *metrics { return newWorkerMetrics(root, "") }

// newWorkerMetrics is newMetrics for one engine of a Fleet (worker non-empty): the counters are
// the fleet's, shared by its engines; the gauges carry the tag "worker".
func newWorkerMetrics(root tally.Scope, worker string) *metrics {
	if root == nil {
		root = tally.NoopScope
	}
	s := root.SubScope("bridge")
	gauges := s
	if worker != "" {
		gauges = s.Tagged(map[string]string{"worker": worker})
	}
	m := &metrics{
		batches:           s.Counter("batches_total"),
		replayed:          s.Counter("replayed_batches_total"),
		duplicates:        s.Counter("duplicate_batches_total"),
		restarts:          s.Counter("engine_restarts_total"),
		gaps:              s.Counter("gaps_total"),
		lost:              s.Counter("lost_batches_total"),
		undecodable:       s.Counter("undecodable_batches_total"),
		refused:           s.Counter("refused_batches_total"),
		deadLetters:       s.Counter("dead_letters_total"),
		bufferFull:        s.Counter("buffer_full_total"),
		malformedMessages: s.Counter("malformed_messages_total"),
		produceErrors:     s.Counter("produce_errors_total"),
		reconnects:        s.Counter("socket_reopens_total"),
		replayRetries:     s.Counter("replay_retries_total"),
		lostClears:        s.Counter("lost_history_clears_total"),
		dialFailures:      s.Counter("engine_dial_failures_total"),
		unreachableRanks:  gauges.Gauge("engine_unreachable_ranks"),
		degradedRanks:     gauges.Gauge("degraded_ranks"),
		buffered:          gauges.Gauge("buffered_batches"),
		sequenceLag:       gauges.Gauge("sequence_lag_batches"),
		produceLatency:    s.Histogram("produce_latency_seconds", produceBuckets),
		eventsBy:          map[string]tally.Counter{},
	}
	for _, k := range []string{"stored", "removed", "cleared", "filtered", "unknown_removal", "orphaned"} {
		m.eventsBy[k] = s.Tagged(map[string]string{"kind": k}).Counter("events_total")
	}
	for k, name := range map[schemas.KvEventKind]string{schemas.KvStoredEvent: "stored", schemas.KvRemovedEvent: "removed", schemas.KvClearedEvent: "cleared"} {
		m.recordsBy[k] = s.Tagged(map[string]string{"kind": name}).Counter("records_total")
	}
	return m
}

func (m *metrics) event(kind string, n int) {
	if n > 0 {
		m.eventsBy[kind].Inc(int64(n))
	}
}

func (m *metrics) records(k schemas.KvEventKind) {
	if int(k) < len(m.recordsBy) && m.recordsBy[k] != nil {
		m.recordsBy[k].Inc(1)
	}
}
