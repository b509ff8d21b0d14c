package relay

import (
	"time"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/uber-go/tally/v4"
)

// relayMetrics caches the relay's metric handles under the "relay" sub-scope (ckf_relay_*).
// Tag keys: none, except "point" on events_rejected_total (the producer failure point, four values)
// and "reason" on snapshots_total (start, periodic, request, recovery): one set of keys per name,
// bounded values.
type relayMetrics struct {
	events, undecodable, deadLetters, capacity, unknownRemovals tally.Counter
	deltas, images, transactions, heartbeats, recoveries        tally.Counter
	requests, splits                                            tally.Counter
	checkpoints, checkpointsRejected, checkpointGaps            tally.Counter
	lagCommitErrors                                             tally.Counter
	checkpointBytes, restoredCheckpoint, appliedRecords         tally.Gauge
	snapshotBytes, inputLag                                     tally.Gauge
	checkpointDuration                                          tally.Histogram
	rejectedBy                                                  map[ckf.FailurePoint]tally.Counter
	snapshotsBy                                                 map[string]tally.Counter
	snapshotDuration                                            tally.Histogram
	occupancy, resident, lastSequence, fenced, started          tally.Gauge
}

// snapshotBuckets are the snapshot-duration histogram's explicit buckets: a barrier copy plus a
// chunked transactional write, from a small test filter (milliseconds) to 2^24 buckets (seconds).
var snapshotBuckets = tally.DurationBuckets{
	time.Millisecond, 5 * time.Millisecond, 10 * time.Millisecond, 25 * time.Millisecond, 50 * time.Millisecond,
	100 * time.Millisecond, 250 * time.Millisecond, 500 * time.Millisecond, time.Second, 2500 * time.Millisecond,
	5 * time.Second, 10 * time.Second,
}

// Snapshot reasons (the "reason" tag of ckf_relay_snapshots_total).
const (
	snapStart    = "start"
	snapPeriodic = "periodic"
	snapRequest  = "request"
	snapRecovery = "recovery"
)

func newRelayMetrics(root tally.Scope) *relayMetrics {
	if root == nil {
		root = tally.NoopScope
	}
	s := root.SubScope("relay")
	m := &relayMetrics{
		events:              s.Counter("events_total"),
		undecodable:         s.Counter("events_undecodable_total"),
		deadLetters:         s.Counter("dead_letters_total"),
		capacity:            s.Counter("capacity_omissions_total"),
		unknownRemovals:     s.Counter("unknown_removals_total"),
		deltas:              s.Counter("deltas_published_total"),
		images:              s.Counter("images_published_total"),
		transactions:        s.Counter("transactions_total"),
		heartbeats:          s.Counter("heartbeats_total"),
		recoveries:          s.Counter("recoveries_total"),
		requests:            s.Counter("snapshot_requests_total"),
		splits:              s.Counter("split_publications_total"),
		rejectedBy:          map[ckf.FailurePoint]tally.Counter{},
		snapshotsBy:         map[string]tally.Counter{},
		snapshotDuration:    s.Histogram("snapshot_duration_seconds", snapshotBuckets),
		snapshotBytes:       s.Gauge("snapshot_bytes"),
		inputLag:            s.Gauge("input_lag_records"),
		checkpoints:         s.Counter("checkpoints_total"),
		checkpointsRejected: s.Counter("checkpoints_rejected_total"),
		checkpointGaps:      s.Counter("checkpoint_gaps_total"),
		lagCommitErrors:     s.Counter("lag_commit_errors_total"),
		checkpointBytes:     s.Gauge("checkpoint_bytes"),
		restoredCheckpoint:  s.Gauge("restored_from_checkpoint"),
		appliedRecords:      s.Gauge("applied_records"),
		checkpointDuration:  s.Histogram("checkpoint_duration_seconds", snapshotBuckets),
		occupancy:           s.Gauge("filter_occupancy"),
		resident:            s.Gauge("resident_blocks"),
		lastSequence:        s.Gauge("last_sequence"),
		fenced:              s.Gauge("fenced"),
		started:             s.Gauge("started"),
	}
	for _, p := range []ckf.FailurePoint{ckf.BoundedRelocationFailure, ckf.PrecommitAllocationFailure,
		ckf.SourceProtocolFailure, ckf.PrewriteInvariantMismatch} {
		m.rejectedBy[p] = s.Tagged(map[string]string{"point": p.String()}).Counter("events_rejected_total")
	}
	for _, r := range []string{snapStart, snapPeriodic, snapRequest, snapRecovery} {
		m.snapshotsBy[r] = s.Tagged(map[string]string{"reason": r}).Counter("snapshots_total")
	}
	return m
}

// rejected returns the rejection counter of point (producer points only).
func (m *relayMetrics) rejected(p ckf.FailurePoint) tally.Counter {
	if c, ok := m.rejectedBy[p]; ok {
		return c
	}
	return m.rejectedBy[ckf.SourceProtocolFailure]
}
