package workers

import (
	"errors"
	"strings"
	"sync/atomic"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/ckf/workers"
	"github.com/uber-go/tally/v4"
)

// The replica's one ledger: every figure that Status and the ckf_workers_* metrics share is
// written by one call that updates both, so they cannot disagree.

type counter struct {
	v atomic.Uint64
	m tally.Counter
}

func (c *counter) add(n uint64) {
	if n == 0 {
		return
	}
	c.v.Add(n)
	c.m.Inc(int64(n))
}

func (c *counter) load() uint64 { return c.v.Load() }

type gauge struct {
	v atomic.Int64
	m tally.Gauge
}

func (g *gauge) set(v int64) {
	g.v.Store(v)
	g.m.Update(float64(v))
}

func (g *gauge) load() int64 { return g.v.Load() }

// rejectReasons are the values of events_rejected_total's reason label.
var rejectReasons = [...]string{"parent_not_found", "invalid_sequence", "unsupported_residency", "unknown_tier", "other"}

func rejectReason(err error) int {
	var ee *ckf.EventError
	switch {
	case errors.Is(err, workers.ErrUnknownTier):
		return 3
	case errors.As(err, &ee) && ee.Kind == ckf.EventParentBlockNotFound:
		return 0
	case errors.As(err, &ee) && ee.Kind == ckf.EventInvalidBlockSequence:
		return 1
	case errors.As(err, &ee) && ee.Kind == ckf.EventUnsupportedResidencyDomain:
		return 2
	}
	return 4
}

// ledger backs Status and the ckf_workers_* metrics.
type ledger struct {
	events, replayed, undecodable       counter
	rejected                            [len(rejectReasons)]counter
	unknownRemovals, unknownSources     counter
	duplicates, cacheOwner              counter
	deadLetters                         counter
	checkpoints, checkpointFailures     counter
	checkpointsRejected, checkpointGaps counter
	fetchErrors, lagCommitErrors        counter
	lostHistoryClears                   counter
	matchBlocks, matchFollowed          counter
	lagRecords, newestEventMs           gauge
	ready, restored                     gauge
	sources, rows, checkpointBytes      gauge
	degradedSources                     gauge
	ageSeconds                          tally.Gauge
	restoreSeconds                      tally.Histogram
	matchSeconds                        tally.Histogram
	lastTel                             workers.Telemetry
}

func newLedger(scope tally.Scope) *ledger {
	if scope == nil {
		scope = tally.NoopScope
	}
	s := scope.SubScope("workers")
	l := &ledger{}
	for _, c := range []struct {
		c    *counter
		name string
	}{
		{&l.events, "events_total"}, {&l.replayed, "events_replayed_total"}, {&l.undecodable, "events_undecodable_total"},
		{&l.unknownRemovals, "unknown_removals_total"}, {&l.unknownSources, "unknown_sources_total"},
		{&l.duplicates, "duplicate_blocks_total"}, {&l.cacheOwner, "cache_owner_events_total"},
		{&l.deadLetters, "dead_letters_total"}, {&l.checkpoints, "checkpoints_total"},
		{&l.checkpointFailures, "checkpoint_failures_total"}, {&l.checkpointsRejected, "checkpoints_rejected_total"},
		{&l.checkpointGaps, "checkpoint_gaps_total"}, {&l.fetchErrors, "fetch_errors_total"},
		{&l.lagCommitErrors, "lag_commit_errors_total"}, {&l.lostHistoryClears, "lost_history_clears_total"},
		{&l.matchBlocks, "match_blocks_total"}, {&l.matchFollowed, "match_blocks_followed_total"},
	} {
		c.c.m = s.Counter(c.name)
	}
	for i, r := range rejectReasons {
		l.rejected[i].m = s.Tagged(map[string]string{"reason": r}).Counter("events_rejected_total")
	}
	for _, g := range []struct {
		g    *gauge
		name string
	}{
		{&l.lagRecords, "lag_records"}, {&l.newestEventMs, "newest_event_timestamp_ms"}, {&l.ready, "ready"},
		{&l.restored, "restored_from_checkpoint"}, {&l.sources, "sources"}, {&l.rows, "lineage_rows"},
		{&l.checkpointBytes, "checkpoint_bytes"}, {&l.degradedSources, "degraded_sources"},
	} {
		g.g.m = s.Gauge(g.name)
	}
	l.ageSeconds = s.Gauge("age_seconds")
	l.restoreSeconds = s.Histogram("restore_duration_seconds", tally.MustMakeExponentialDurationBuckets(1e6, 2, 16))
	l.matchSeconds = s.Histogram("match_duration_seconds", tally.MustMakeExponentialDurationBuckets(500, 2, 16))
	return l
}

// telemetry adds the index's counters that moved since the last call.
func (l *ledger) telemetry(t workers.Telemetry) {
	l.unknownRemovals.add(t.UnknownRemovals - l.lastTel.UnknownRemovals)
	l.unknownSources.add(t.UnknownSources - l.lastTel.UnknownSources)
	l.duplicates.add(t.DuplicateBlocks - l.lastTel.DuplicateBlocks)
	l.cacheOwner.add(t.NotWorkerResidency - l.lastTel.NotWorkerResidency)
	l.lastTel = t
}

// matched counts a query's device walk (workers.Result.Followed): the positions it decided,
// and those it found by following the slab, without a lookup.
func (l *ledger) matched(res *workers.Result) {
	followed, walked := res.Followed()
	l.matchBlocks.add(uint64(walked))
	l.matchFollowed.add(uint64(followed))
}

// reasonOf names a rejection for a log line or a dead letter.
func reasonOf(err error) string {
	return strings.ReplaceAll(rejectReasons[rejectReason(err)], "_", " ")
}
