package lanes

import (
	"strconv"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/ckf-stream/ckf-stream/streams"
	"github.com/uber-go/tally/v4"
)

// ledgerAgrees fails the test where the lane's status and its ckf_indexer_lane_* metrics (the
// rig's scope) disagree: every counter equals its status field, every fault kind's counter its
// count, the snapshot install histogram holds one value per installed snapshot, every gauge its
// field.
func (r *laneRig) ledgerAgrees(t *testing.T, when string) {
	t.Helper()
	st := r.status()
	snap := r.metrics.Snapshot()
	lane := strconv.Itoa(int(r.lane))
	counters := map[string]int64{}
	faults := map[string]int64{}
	for _, c := range snap.Counters() {
		if c.Tags()["lane"] != lane {
			continue
		}
		if kind, ok := c.Tags()["kind"]; ok {
			faults[kind] = c.Value()
			continue
		}
		counters[c.Name()] = c.Value()
	}
	for name, want := range map[string]uint64{
		"indexer.lane_deltas_total":                   st.Deltas,
		"indexer.lane_images_total":                   st.Images,
		"indexer.lane_snapshots_installed_total":      st.Snapshots,
		"indexer.lane_records_rejected_total":         st.Rejected,
		"indexer.lane_snapshot_assembly_faults_total": st.AssemblyFaults,
	} {
		if got := counters[name]; got != int64(want) {
			t.Errorf("%s: %s is %d, the status says %d", when, name, got, want)
		}
	}
	for kind, n := range st.Faults {
		if faults[kind] != int64(n) {
			t.Errorf("%s: lane_faults_total{kind=%s} is %d, the status says %d", when, kind, faults[kind], n)
		}
	}
	for kind, n := range faults {
		if _, ok := st.Faults[kind]; !ok && n != 0 {
			t.Errorf("%s: lane_faults_total{kind=%s} is %d, the status has no such fault", when, kind, n)
		}
	}
	var installs int64
	for _, h := range snap.Histograms() {
		if h.Tags()["lane"] == lane && h.Name() == "indexer.lane_snapshot_install_seconds" {
			for _, n := range h.Durations() {
				installs += n
			}
		}
	}
	if installs != int64(st.Snapshots) {
		t.Errorf("%s: lane_snapshot_install_seconds holds %d installs, the status says %d snapshots", when, installs, st.Snapshots)
	}
	gauges := map[string]float64{}
	for _, g := range snap.Gauges() {
		if g.Tags()["lane"] == lane {
			gauges[g.Name()] = g.Value()
		}
	}
	want := map[string]float64{
		"indexer.lane_last_stable_offset":     float64(st.HighWatermark),
		"indexer.lane_applied_offset":         float64(st.AppliedOffset),
		"indexer.lane_lag_records":            float64(st.LagRecords),
		"indexer.lane_lag_seconds":            st.LagTime.Seconds(),
		"indexer.lane_ready":                  b2f(st.Ready),
		"indexer.lane_excluded":               b2f(st.Excluded),
		"indexer.lane_installed_sequence":     float64(st.InstalledSequence),
		"indexer.lane_fetch_queue_bytes":      float64(st.QueuedBytes),
		"indexer.lane_fetch_paused":           b2f(st.FetchPaused),
		"indexer.lane_degraded_sources":       float64(st.Sources.DegradedSources),
		"indexer.lane_omitted_blocks":         float64(st.Capacity.OmittedBlocks),
		"indexer.lane_capacity_omissions":     float64(st.Capacity.CapacityOmissions),
		"indexer.lane_filter_occupancy_ratio": st.Capacity.FilterOccupancy,
	}
	for name, w := range want {
		if got := gauges[name]; got != w {
			t.Errorf("%s: %s is %v, the status says %v", when, name, got, w)
		}
	}
}

// TestLaneLedgerAgrees: a lane's status and its metrics are one ledger. The lane goes through
// every kind of figure (snapshots, deltas and images, capacity and sources carried by a
// heartbeat, a snapshot abandoned mid-assembly while ready, a foreign pool's snapshot refused, a
// malformed record that faults the lane and its recovery, exclusion by the freshness policy),
// and after each step every metric equals the status's field (ledgerAgrees).
func TestLaneLedgerAgrees(t *testing.T) {
	t.Parallel()
	r := newLaneRig(t, 3, 4096, testConfig())
	p := r.producer(1)
	p.snapshot()
	p.storeChain(6, nil, 0)
	r.mustConverge(p)
	r.ledgerAgrees(t, "installed, deltas applied")

	p.r.append(r.encode(schemas.LaneRecord{Identity: streams.WireIdentity(p.ID), Kind: schemas.LaneHeartbeat,
		Heartbeat: schemas.Heartbeat{LastSequence: p.Publisher.LastSequence(), ProducerTime: r.now},
		Capacity:  schemas.Some(schemas.CapacityState{ResidentBlocks: 900, OmittedBlocks: 7, CapacityOmissions: 11}),
		Sources:   schemas.Some(schemas.SourceHealth{DegradedSources: 2, LostHistoryClears: 3})}))
	r.drain()
	if st := r.status(); !st.Capacity.Reported || !st.Sources.Reported {
		t.Fatalf("the heartbeat's capacity and sources were not taken: %+v", st)
	}
	r.ledgerAgrees(t, "capacity and sources")

	next := p.ID
	next.Incarnation++
	r.chunks(next, 0, make([]uint64, p.State.BucketCount()), 1000, []int{0, 2, 1}) // out of order
	r.drain()
	if st := r.status(); st.AssemblyFaults == 0 {
		t.Fatalf("no assembly fault counted: %+v", st)
	}
	r.ledgerAgrees(t, "a snapshot abandoned while ready")

	other := p.ID
	other.Pool = rigPool(998)
	r.chunks(other, 0, make([]uint64, p.State.BucketCount()), 1000, []int{0, 1, 2})
	r.drain()
	if st := r.status(); st.Faults[schemas.FaultWrongLaneOwner.String()] == 0 {
		t.Fatalf("the foreign snapshot's refusal is not counted as a fault: %+v", st.Faults)
	}
	r.ledgerAgrees(t, "a foreign pool's snapshot refused")

	r.append([]byte{0xde, 0xad, 0xbe, 0xef, 1, 2, 3})
	r.drain()
	r.ledgerAgrees(t, "a malformed record")
	p.snapshot()
	p.storeChain(4, nil, 0)
	r.mustConverge(p)
	r.ledgerAgrees(t, "recovered")

	r.now = r.now.Add(2 * time.Hour) // past the freshness policy's time bound
	r.l.checkFreshness(r.now, false)
	if st := r.status(); !st.Excluded {
		t.Fatalf("the silent lane is not excluded: %+v", st)
	}
	r.ledgerAgrees(t, "excluded for lag")
}

// TestLaneLedgerReportsGrowthOnce: a counter reports what its field grew since the last report,
// however many updates it takes, and a fault kind first counted later still reaches its metric.
func TestLaneLedgerReportsGrowthOnce(t *testing.T) {
	scope := tally.NewTestScope("", nil)
	m := newIndexerMetrics(scope, func(uint8) bool { return true })
	g := newLaneLedger(LaneStatus{Lane: 5}, &m.lanes[5])
	for range 3 {
		g.update(func(s *LaneStatus) { s.Deltas += 2; s.Rejected++ })
	}
	g.update(func(s *LaneStatus) { s.Faults["malformed_record"]++ })
	g.update(func(*LaneStatus) {})
	got := map[string]int64{}
	for _, c := range scope.Snapshot().Counters() {
		if c.Tags()["lane"] == "5" {
			got[c.Name()+c.Tags()["kind"]] = c.Value()
		}
	}
	if got["indexer.lane_deltas_total"] != 6 || got["indexer.lane_records_rejected_total"] != 3 || got["indexer.lane_faults_totalmalformed_record"] != 1 {
		t.Fatalf("counters %v: want deltas 6, rejected 3, malformed_record faults 1", got)
	}
}
