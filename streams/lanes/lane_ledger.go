package lanes

import (
	"sync"
	"time"

	"github.com/uber-go/tally/v4"
)

// The lanes' one ledger. A lane's figures are written once: into its LaneStatus, under the
// ledger's lock, by laneLedger.update. The same call reports every figure that has a
// ckf_indexer_lane_* metric from the status it just wrote (report): a counter by what its field
// grew since the last report, a gauge by its field's value. No code outside this file writes a
// lane's metric handle, so the status (Indexer.Lanes, the lane table) and the metrics cannot
// disagree (TestLaneLedgerAgrees). The snapshot install time is the one lane figure with no
// LaneStatus field: a histogram only, recorded by snapshotInstalled in the call that counts the
// snapshot.

// laneLedger is a lane's status and its metrics: written by the lane's goroutine, read by status
// readers, under mu.
type laneLedger struct {
	mu sync.Mutex
	s  LaneStatus
	m  *laneMetrics
	// sent are the status's counters as last reported to m.
	sent laneCounts
}

// laneCounts are the counters of a LaneStatus that have a metric.
type laneCounts struct {
	deltas, images, snapshots, rejected, assemblyFaults uint64
	faults                                              map[string]uint64
}

// newLaneLedger returns the ledger of a lane whose status starts as s, reporting to m.
func newLaneLedger(s LaneStatus, m *laneMetrics) *laneLedger {
	if s.Faults == nil {
		s.Faults = map[string]uint64{}
	}
	return &laneLedger{s: s, m: m, sent: laneCounts{faults: map[string]uint64{}}}
}

// update applies fn to the status and reports the metrics from the result.
func (g *laneLedger) update(fn func(s *LaneStatus)) {
	g.mu.Lock()
	fn(&g.s)
	g.report()
	g.mu.Unlock()
}

// snapshotInstalled counts a snapshot installed at sequence, and records how long it took.
func (g *laneLedger) snapshotInstalled(sequence uint64, took time.Duration) {
	g.mu.Lock()
	g.s.Snapshots++
	g.s.InstalledSequence = sequence
	g.m.snapshotInstall.RecordDuration(took)
	g.report()
	g.mu.Unlock()
}

// report writes every metric of the status from it. Called with mu held.
func (g *laneLedger) report() {
	s, m, c := &g.s, g.m, &g.sent
	grow(m.deltas, s.Deltas, &c.deltas)
	grow(m.images, s.Images, &c.images)
	grow(m.snapshots, s.Snapshots, &c.snapshots)
	grow(m.rejected, s.Rejected, &c.rejected)
	grow(m.assemblyFaults, s.AssemblyFaults, &c.assemblyFaults)
	for kind, n := range s.Faults {
		if sent := c.faults[kind]; n > sent {
			m.fault(kind).Inc(int64(n - sent))
			c.faults[kind] = n
		}
	}
	m.lso.Update(float64(s.HighWatermark))
	m.applied.Update(float64(s.AppliedOffset))
	m.lagRecords.Update(float64(s.LagRecords))
	m.lagSeconds.Update(s.LagTime.Seconds())
	m.ready.Update(b2f(s.Ready))
	m.excluded.Update(b2f(s.Excluded))
	m.installedSeq.Update(float64(s.InstalledSequence))
	m.queuedBytes.Update(float64(s.QueuedBytes))
	m.fetchPaused.Update(b2f(s.FetchPaused))
	if s.Capacity.Reported {
		m.occupancy.Update(s.Capacity.FilterOccupancy)
		m.omittedBlocks.Update(float64(s.Capacity.OmittedBlocks))
		m.omissions.Update(float64(s.Capacity.CapacityOmissions))
	}
	if s.Sources.Reported {
		m.degradedSources.Update(float64(s.Sources.DegradedSources))
	}
}

// grow adds to counter what v grew since *sent, and notes v as sent.
func grow(counter tally.Counter, v uint64, sent *uint64) {
	if v > *sent {
		counter.Inc(int64(v - *sent))
		*sent = v
	}
}

// appliedOffset is the status's AppliedOffset, without snapshot's copy of the fault map.
func (g *laneLedger) appliedOffset() int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.s.AppliedOffset
}

// snapshot returns a copy of the status.
func (g *laneLedger) snapshot() LaneStatus {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := g.s
	out.Faults = make(map[string]uint64, len(g.s.Faults))
	for k, v := range g.s.Faults {
		out.Faults[k] = v
	}
	return out
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
