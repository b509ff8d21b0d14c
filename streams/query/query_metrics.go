package query

import (
	"strings"
	"time"

	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/uber-go/tally/v4"
)

// PathMetrics are the metrics every path into an Answerer reports, one set per scope: the Kafka
// query service (QueryService, scope "query" tagged path="kafka" by the indexer) and the
// indexer's HTTP handlers (the same scope tagged path="http") share the names and the buckets
// here, so that each name is one family of series: ckf_query_replies_total{path="http",
// status="unavailable"} is the HTTP path's unavailable count. The worker stage's Kafka service
// reports the same set under its own scope (ckf_workers_query_*).
type PathMetrics struct {
	// Requests counts the requests read; Invalid those refused before an answer (undecodable
	// or breaking a request rule).
	Requests, Invalid tally.Counter
	// Replies counts the replies by status (schemas.QueryStatus).
	Replies [3]tally.Counter
	// Latency is the path's whole handling of a request: on Kafka, from the poll that returned
	// it to the acknowledgement of every output of its batch (the service's share of a round
	// trip); over HTTP, decode, answer, encode and write. AnswerLatency is the table search
	// alone (Answerer.Answer).
	Latency, AnswerLatency tally.Histogram
}

// LatencyBuckets are the buckets of every query latency histogram: 5 µs (an answer on a warm
// table) to 10 s (a batch waiting out broker retries).
var LatencyBuckets = tally.DurationBuckets{
	5 * time.Microsecond, 10 * time.Microsecond, 25 * time.Microsecond, 50 * time.Microsecond,
	100 * time.Microsecond, 250 * time.Microsecond, 500 * time.Microsecond,
	time.Millisecond, 2500 * time.Microsecond, 5 * time.Millisecond, 10 * time.Millisecond,
	25 * time.Millisecond, 50 * time.Millisecond, 100 * time.Millisecond, 250 * time.Millisecond,
	500 * time.Millisecond, time.Second, 2500 * time.Millisecond, 5 * time.Second, 10 * time.Second,
}

// NewPathMetrics returns the handles of s (a nil s reports nowhere).
func NewPathMetrics(s tally.Scope) PathMetrics {
	if s == nil {
		s = tally.NoopScope
	}
	m := PathMetrics{
		Requests:      s.Counter("requests_total"),
		Invalid:       s.Counter("invalid_requests_total"),
		Latency:       s.Histogram("latency_seconds", LatencyBuckets),
		AnswerLatency: s.Histogram("answer_latency_seconds", LatencyBuckets),
	}
	for st := schemas.QueryOK; st <= schemas.QueryInvalidRequest; st++ {
		m.Replies[st] = s.Tagged(map[string]string{"status": strings.ToLower(st.String())}).Counter("replies_total")
	}
	return m
}

// queryMetrics caches the service's metric handles (scope "query", or ServiceParams.MetricsScope):
// the set every path reports, and the Kafka path's own.
type queryMetrics struct {
	PathMetrics
	deadLetters, replyRejected                 tally.Counter
	batchFailures, commitFailures, fetchErrors tally.Counter
	rejoins                                    tally.Counter
	commitLatency, endToEnd                    tally.Histogram
	// skipped counts the requests an Exchange skipped (another DC's worker query), created at the
	// first one so that the prefix-match service, which skips none, never exports it.
	skipped tally.Counter
	scope   tally.Scope
}

func newQueryMetrics(root tally.Scope, scope string) queryMetrics {
	if root == nil {
		root = tally.NoopScope
	}
	s := root.SubScope(scope)
	return queryMetrics{
		PathMetrics:    NewPathMetrics(s),
		deadLetters:    s.Counter("dead_letters_total"),
		replyRejected:  s.Counter("replies_undeliverable_total"),
		batchFailures:  s.Counter("batch_failures_total"),
		rejoins:        s.Counter("rejoins_total"),
		commitFailures: s.Counter("commit_failures_total"),
		fetchErrors:    s.Counter("fetch_errors_total"),
		scope:          s,
		// endToEnd: from the router's request_time (its clock) to the acknowledgement of the
		// reply; only requests that carry a request_time. Clock skew between router and
		// indexer shifts it.
		endToEnd: s.Histogram("request_to_reply_seconds", LatencyBuckets),
		// commitLatency: one offset commit, issue to response (asynchronous: it delays no reply).
		commitLatency: s.Histogram("commit_latency_seconds", LatencyBuckets),
	}
}

// skip counts a request an Exchange skipped.
func (m *queryMetrics) skip() {
	if m.skipped == nil {
		m.skipped = m.scope.Counter("not_selected_total")
	}
	m.skipped.Inc(1)
}
