package indexer

import (
	"time"

	"github.com/ckf-stream/ckf-stream/streams/query"
	"github.com/uber-go/tally/v4"
	"go.uber.org/zap"
)

// WatchNeverMatch gives a the first-block alarm over stats for the configured lanes, on the
// clock now, with metrics in scope, and returns the function that takes one sample (what the
// indexer's watch does every few seconds).
func WatchNeverMatch(a *API, stats *query.FirstBlockStats, configured uint64, now func() time.Time, scope tally.Scope) func() {
	a.neverMatch = newNeverMatchWatch(stats, configured, scope, zap.NewNop())
	a.neverMatch.now = now
	return func() { a.neverMatch.sample() }
}
