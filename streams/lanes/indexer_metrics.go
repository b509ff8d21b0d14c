package lanes

import (
	"strconv"
	"time"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/uber-go/tally/v4"
)

// indexerMetrics caches the indexer's per-lane metric handles, which only the lanes' ledger
// writes (lane_ledger.go) (one set of tag keys per metric
// name, lane as the only tag: bounded cardinality). Only configured lanes get series: a lane
// outside the manifest would otherwise export ready 0 forever and page the lane-not-ready alert
// (deploy/prometheus/alerts.yml); its handles are no-ops.
type indexerMetrics struct {
	lanes           [ckf.MaxLanes]laneMetrics
	lagCommits      tally.Counter
	lagCommitErrors tally.Counter
}

type laneMetrics struct {
	scope                                tally.Scope
	deltas, images, snapshots, rejected  tally.Counter
	assemblyFaults                       tally.Counter
	lso, applied, lagRecords, lagSeconds tally.Gauge
	ready, excluded, installedSeq        tally.Gauge
	queuedBytes, fetchPaused             tally.Gauge
	occupancy, omittedBlocks, omissions  tally.Gauge
	degradedSources                      tally.Gauge
	snapshotInstall                      tally.Histogram
}

var installBuckets = tally.DurationBuckets{
	time.Millisecond, 2 * time.Millisecond, 5 * time.Millisecond, 10 * time.Millisecond, 20 * time.Millisecond,
	50 * time.Millisecond, 100 * time.Millisecond, 250 * time.Millisecond, time.Second, 5 * time.Second,
}

func newIndexerMetrics(root tally.Scope, configured func(lane uint8) bool) *indexerMetrics {
	if root == nil {
		root = tally.NoopScope
	}
	s := root.SubScope("indexer")
	m := &indexerMetrics{lagCommits: s.Counter("lag_commits_total"), lagCommitErrors: s.Counter("lag_commit_errors_total")}
	for l := range m.lanes {
		ls := tally.NoopScope
		if configured(uint8(l)) {
			ls = s.Tagged(map[string]string{"lane": strconv.Itoa(l)})
		}
		m.lanes[l] = laneMetrics{
			scope:          ls,
			deltas:         ls.Counter("lane_deltas_total"),
			images:         ls.Counter("lane_images_total"),
			snapshots:      ls.Counter("lane_snapshots_installed_total"),
			rejected:       ls.Counter("lane_records_rejected_total"),
			assemblyFaults: ls.Counter("lane_snapshot_assembly_faults_total"),
			lso:            ls.Gauge("lane_last_stable_offset"),
			applied:        ls.Gauge("lane_applied_offset"),
			lagRecords:     ls.Gauge("lane_lag_records"),
			lagSeconds:     ls.Gauge("lane_lag_seconds"),
			ready:          ls.Gauge("lane_ready"),
			excluded:       ls.Gauge("lane_excluded"),
			installedSeq:   ls.Gauge("lane_installed_sequence"),
			queuedBytes:    ls.Gauge("lane_fetch_queue_bytes"),
			fetchPaused:    ls.Gauge("lane_fetch_paused"),
			// The relay's capacity state as the lane's records carry it (schemas.CapacityState):
			// omitted blocks above 0 mean answers on the lane may be short.
			occupancy:     ls.Gauge("lane_filter_occupancy_ratio"),
			omittedBlocks: ls.Gauge("lane_omitted_blocks"),
			// A gauge, not a counter: it mirrors the relay's count, which restarts with a new
			// producer state.
			omissions: ls.Gauge("lane_capacity_omissions"),
			// Sources of the lane's DC left degraded by lost engine history
			// (schemas.SourceHealth): above 0, answers on the lane may be short.
			degradedSources: ls.Gauge("lane_degraded_sources"),
			snapshotInstall: ls.Histogram("lane_snapshot_install_seconds", installBuckets),
		}
	}
	return m
}

// fault is the lane's counter of faults of the given kind. The kind tag set is fixed per metric
// name.
func (l *laneMetrics) fault(kind string) tally.Counter {
	return l.scope.Tagged(map[string]string{"kind": kind}).Counter("lane_faults_total")
}
