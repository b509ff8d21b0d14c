package lanes

import "github.com/uber-go/tally/v4"

// SetMetrics makes ix report its metrics to scope instead of the one it was built with, so that a
// test started through a harness that passes none reads the indexer's one ledger. Call it before
// Run.
func SetMetrics(ix *Indexer, scope tally.Scope) {
	ix.metrics = newIndexerMetrics(scope, func(l uint8) bool { _, ok := ix.g.Manifest().PoolOf(l); return ok })
}

// SetAfterPlan makes ix call f once its start-up plan is made, before its lane consumer exists.
// Call it before Run.
func SetAfterPlan(ix *Indexer, f func()) { ix.afterPlan = f }
