package relay

import (
	"sync/atomic"
	"time"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/uber-go/tally/v4"
)

// The relay's one ledger: every counter and gauge is written once, by one call of the ledger
// (relayLedger's fields and methods), which keeps the value RelayStats reads (an atomic) and
// reports it to the tally handle of the same name in the same call. Code outside this file never
// writes a tally handle or an atomic of its own for a figure the ledger holds, so RelayStats and
// the ckf_relay_* metrics cannot disagree. The figures with no RelayStats field (occupancy,
// applied records, input lag, the durations, the per-point and per-reason splits) are metrics
// only and live in relayMetrics.

// ledgerCounter is a monotonic figure: RelayStats' value and its tally counter.
type ledgerCounter struct {
	v atomic.Uint64
	m tally.Counter // nil: a RelayStats figure with no metric
}

func (c *ledgerCounter) add(n uint64) {
	c.v.Add(n)
	if c.m != nil && n > 0 {
		c.m.Inc(int64(n))
	}
}

func (c *ledgerCounter) load() uint64 { return c.v.Load() }

// restate sets RelayStats' value to a recount from the state (the end of the replay); the
// metric, which counted the figures as they came, stays as it is.
func (c *ledgerCounter) restate(v uint64) { c.v.Store(v) }

// ledgerGauge is a level: RelayStats' value and its tally gauge.
type ledgerGauge struct {
	v atomic.Uint64
	m tally.Gauge // nil: a RelayStats figure with no metric
}

func (g *ledgerGauge) set(v uint64) {
	g.v.Store(v)
	if g.m != nil {
		g.m.Update(float64(v))
	}
}

func (g *ledgerGauge) load() uint64 { return g.v.Load() }

// ledgerFlag is a boolean level: RelayStats' value and its 0/1 tally gauge.
type ledgerFlag struct {
	v atomic.Bool
	m tally.Gauge
}

func (f *ledgerFlag) set(b bool) {
	f.v.Store(b)
	v := 0.0
	if b {
		v = 1
	}
	f.m.Update(v)
}

func (f *ledgerFlag) load() bool { return f.v.Load() }

// relayLedger backs RelayStats and the ckf_relay_* figures RelayStats shows.
type relayLedger struct {
	// Identity and position.
	incarnation, buckets ledgerGauge // stats only
	lastSequence         ledgerGauge // last_sequence
	started, fenced      ledgerFlag  // started, fenced

	// Input.
	events, replayed ledgerCounter // events_total counts both
	rejected         atomic.Uint64 // total of events_rejected_total{point}: reject
	undecodable      ledgerCounter // events_undecodable_total
	deadLetters      ledgerCounter // dead_letters_total
	capacity         ledgerCounter // capacity_omissions_total
	unknownRemovals  ledgerCounter // unknown_removals_total
	requests         ledgerCounter // snapshot_requests_total

	// Output.
	deltas, images, splits ledgerCounter            // deltas_published_total, images_published_total, split_publications_total
	txns, heartbeats, rec  ledgerCounter            // transactions_total, heartbeats_total, recoveries_total
	fenceRecoveries        ledgerCounter            // fence_recoveries_total
	writeFailures          [numCauses]ledgerCounter // write_failures_total{cause}
	snapshots              atomic.Uint64            // total of snapshots_total{reason}: snapshot
	snapMillis             ledgerGauge              // stats only (snapshot_duration_seconds has the distribution)
	resident               ledgerGauge              // resident_blocks

	// Checkpoints.
	checkpoints, checkpointsRejected, checkpointGaps ledgerCounter // checkpoints_total, checkpoints_rejected_total, checkpoint_gaps_total
	checkpointBytes                                  ledgerGauge   // checkpoint_bytes
	lastCheckpoint, restored                         ledgerGauge   // stats only (restored_from_checkpoint: restore)
	lagCommits                                       ledgerCounter // stats only

	// Silent engines (relay_silence.go).
	sources, silentSources ledgerGauge // sources, silent_sources

	// Block sizes (relay_blocksize.go).
	blockSizes ledgerGauge // block_sizes
	blockSize  ledgerGauge // block_size

	// Mirrored control topics not there yet (relay_mirrored.go).
	mirroredControlMissing ledgerGauge // mirrored_control_missing

	m *relayMetrics
}

func newRelayLedger(m *relayMetrics) *relayLedger {
	l := &relayLedger{m: m}
	l.lastSequence.m = m.lastSequence
	l.started.m, l.fenced.m = m.started, m.fenced
	l.events.m, l.replayed.m = m.events, m.events
	l.undecodable.m, l.deadLetters.m = m.undecodable, m.deadLetters
	l.capacity.m, l.unknownRemovals.m, l.requests.m = m.capacity, m.unknownRemovals, m.requests
	l.deltas.m, l.images.m, l.splits.m = m.deltas, m.images, m.splits
	l.txns.m, l.heartbeats.m, l.rec.m = m.transactions, m.heartbeats, m.recoveries
	l.fenceRecoveries.m = m.fenceRecoveries
	for c := range numCauses {
		l.writeFailures[c].m = m.writeFailuresBy[c]
	}
	l.resident.m = m.resident
	l.checkpoints.m, l.checkpointsRejected.m, l.checkpointGaps.m = m.checkpoints, m.checkpointsRejected, m.checkpointGaps
	l.checkpointBytes.m = m.checkpointBytes
	l.sources.m, l.silentSources.m = m.sources, m.silentSources
	l.blockSizes.m, l.blockSize.m = m.blockSizes, m.blockSize
	l.mirroredControlMissing.m = m.mirroredControlMissing
	return l
}

// writeFailed counts a failed lane write by its cause.
func (l *relayLedger) writeFailed(c failCause) { l.writeFailures[c].add(1) }

// reject counts an event rejected by the state at its failure point.
func (l *relayLedger) reject(p ckf.FailurePoint) {
	l.rejected.Add(1)
	l.m.rejected(p).Inc(1)
}

// snapshot counts a committed snapshot of reason, its duration and size.
func (l *relayLedger) snapshot(reason string, took time.Duration, bytes int) {
	l.snapshots.Add(1)
	l.snapMillis.set(uint64(took.Milliseconds()))
	l.m.snapshotsBy[reason].Inc(1)
	l.m.snapshotDuration.RecordDuration(took)
	l.m.snapshotBytes.Update(float64(bytes))
}

// restore records the checkpoint a run started from.
func (l *relayLedger) restore(id uint64) {
	l.restored.set(id)
	l.m.restoredCheckpoint.Update(1)
}

// relayMetrics caches the relay's metric handles under the "relay" sub-scope (ckf_relay_*); the
// ledger writes those it shares with RelayStats.
// Tag keys: none, except "point" on events_rejected_total (the producer failure point, four values),
// "reason" on snapshots_total (start, periodic, request, recovery) and "cause" on
// write_failures_total (timeout, fence, error): one set of keys per name, bounded values.
type relayMetrics struct {
	events, undecodable, deadLetters, capacity, unknownRemovals tally.Counter
	deltas, images, transactions, heartbeats, recoveries        tally.Counter
	fenceRecoveries                                             tally.Counter
	requests, splits                                            tally.Counter
	checkpoints, checkpointsRejected, checkpointGaps            tally.Counter
	lagCommitErrors                                             tally.Counter
	checkpointBytes, restoredCheckpoint, appliedRecords         tally.Gauge
	snapshotBytes, inputLag, asOfLag                            tally.Gauge
	kvIdle, sources, silentSources                              tally.Gauge
	blockSizes, blockSize                                       tally.Gauge
	mirroredControlMissing                                      tally.Gauge
	checkpointDuration                                          tally.Histogram
	rejectedBy                                                  map[ckf.FailurePoint]tally.Counter
	writeFailuresBy                                             [numCauses]tally.Counter
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
		fenceRecoveries:     s.Counter("fence_recoveries_total"),
		requests:            s.Counter("snapshot_requests_total"),
		splits:              s.Counter("split_publications_total"),
		rejectedBy:          map[ckf.FailurePoint]tally.Counter{},
		snapshotsBy:         map[string]tally.Counter{},
		snapshotDuration:    s.Histogram("snapshot_duration_seconds", snapshotBuckets),
		snapshotBytes:       s.Gauge("snapshot_bytes"),
		inputLag:            s.Gauge("input_lag_records"),
		asOfLag:             s.Gauge("as_of_lag_seconds"),
		kvIdle:              s.Gauge("kv_idle_seconds"),
		sources:             s.Gauge("sources"),
		silentSources:       s.Gauge("silent_sources"),
		blockSizes:          s.Gauge("block_sizes"),
		blockSize:           s.Gauge("block_size"),
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
	m.mirroredControlMissing = s.Gauge("mirrored_control_missing")
	for _, p := range []ckf.FailurePoint{ckf.BoundedRelocationFailure, ckf.PrecommitAllocationFailure,
		ckf.SourceProtocolFailure, ckf.PrewriteInvariantMismatch} {
		m.rejectedBy[p] = s.Tagged(map[string]string{"point": p.String()}).Counter("events_rejected_total")
	}
	for c := range numCauses {
		m.writeFailuresBy[c] = s.Tagged(map[string]string{"cause": c.String()}).Counter("write_failures_total")
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
