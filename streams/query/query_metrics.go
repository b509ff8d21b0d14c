package query

import (
	"strings"
	"time"

	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/uber-go/tally/v4"
)

// queryMetrics caches the service's metric handles (scope "query", or ServiceParams.MetricsScope;
// the only tag is status on replies, three values).
type queryMetrics struct {
	requests, invalid, deadLetters, replyRejected tally.Counter
	batchFailures, commitFailures, fetchErrors    tally.Counter
	replies                                       [3]tally.Counter // by schemas.QueryStatus
	latency, answerLatency, commitLatency         tally.Histogram
	endToEnd                                      tally.Histogram
	// skipped counts the requests an Exchange skipped (another DC's worker query), created at the
	// first one so that the prefix-match service, which skips none, never exports it.
	skipped tally.Counter
	scope   tally.Scope
}

// queryLatencyBuckets span 5 µs (an answer on a warm table) to 10 s (a batch waiting out broker
// retries).
var queryLatencyBuckets = tally.DurationBuckets{
	5 * time.Microsecond, 10 * time.Microsecond, 25 * time.Microsecond, 50 * time.Microsecond,
	100 * time.Microsecond, 250 * time.Microsecond, 500 * time.Microsecond,
	time.Millisecond, 2500 * time.Microsecond, 5 * time.Millisecond, 10 * time.Millisecond,
	25 * time.Millisecond, 50 * time.Millisecond, 100 * time.Millisecond, 250 * time.Millisecond,
	500 * time.Millisecond, time.Second, 2500 * time.Millisecond, 5 * time.Second, 10 * time.Second,
}

func newQueryMetrics(root tally.Scope, scope string) queryMetrics {
	if root == nil {
		root = tally.NoopScope
	}
	s := root.SubScope(scope)
	m := queryMetrics{
		requests:       s.Counter("requests_total"),
		invalid:        s.Counter("invalid_requests_total"),
		deadLetters:    s.Counter("dead_letters_total"),
		replyRejected:  s.Counter("replies_undeliverable_total"),
		batchFailures:  s.Counter("batch_failures_total"),
		commitFailures: s.Counter("commit_failures_total"),
		fetchErrors:    s.Counter("fetch_errors_total"),
		scope:          s,
		// latency: from the poll that returned a request to the acknowledgement of every
		// output of its batch (the service's share of a Kafka round trip).
		latency: s.Histogram("latency_seconds", queryLatencyBuckets),
		// answerLatency: the table search alone (Answer).
		answerLatency: s.Histogram("answer_latency_seconds", queryLatencyBuckets),
		// endToEnd: from the router's request_time (its clock) to the acknowledgement of the
		// reply; only requests that carry a request_time. Clock skew between router and
		// indexer shifts it.
		endToEnd: s.Histogram("request_to_reply_seconds", queryLatencyBuckets),
		// commitLatency: one offset commit, issue to response (asynchronous: it delays no reply).
		commitLatency: s.Histogram("commit_latency_seconds", queryLatencyBuckets),
	}
	for st := schemas.QueryOK; st <= schemas.QueryInvalidRequest; st++ {
		m.replies[st] = s.Tagged(map[string]string{"status": strings.ToLower(st.String())}).Counter("replies_total")
	}
	return m
}

// skip counts a request an Exchange skipped.
func (m *queryMetrics) skip() {
	if m.skipped == nil {
		m.skipped = m.scope.Counter("not_selected_total")
	}
	m.skipped.Inc(1)
}
