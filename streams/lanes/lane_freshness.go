package lanes

import (
	"time"

	"github.com/ckf-stream/ckf-stream/schemas"
	"go.uber.org/zap"
)

// publish hands what the lane did since the last call to its ledger (status and metrics): one lock and a
// few counter updates per fetched batch, not per delta.
func (l *lane) publish() {
	deltas, images := l.st.newDeltas, l.st.newImages
	l.st.newDeltas, l.st.newImages = 0, 0
	installed, _ := l.in.InstalledSequence()
	applied := l.st.applied
	capacity := l.capacityStatus()
	l.stats.update(func(s *LaneStatus) {
		s.Deltas += deltas
		s.Images += images
		s.AppliedOffset = applied
		if installed > 0 {
			s.InstalledSequence = installed
		}
		s.Capacity = capacity
		if l.st.hasSources {
			s.Sources = LaneSources{Reported: true, DegradedSources: l.st.sources.DegradedSources,
				LostHistoryClears: l.st.sources.LostHistoryClears}
		}
	})
}

// capacityStatus is the lane's capacity state as the status table shows it.
func (l *lane) capacityStatus() LaneCapacity {
	if !l.st.hasCapacity {
		return LaneCapacity{}
	}
	c := l.st.capacity
	f := l.ix.g.Manifest().Format()
	out := LaneCapacity{Reported: true, ResidentBlocks: c.ResidentBlocks, OmittedBlocks: c.OmittedBlocks,
		CapacityOmissions: c.CapacityOmissions, FilterOccupancy: c.Occupancy(f.BucketCount, f.SlotsPerBucket)}
	// A new producer state (a relay that lost its checkpoint) restarts the counter.
	if c.CapacityOmissions >= l.st.snapOmissions {
		out.OmissionsSinceSnapshot = c.CapacityOmissions - l.st.snapOmissions
	} else {
		out.OmissionsSinceSnapshot = c.CapacityOmissions
	}
	return out
}

// checkFreshness applies the freshness policy: a lane whose applied position lags the
// partition's last stable offset by more than MaxRecordLag records, or whose age is over
// MaxTimeLag (the time up to which it reflects its DC's KV events, LaneAsOf: the relay fell
// silent, or behind its input), is excluded from answers until it catches up. The lane consumer keeps transaction markers (kgo.KeepControlRecords),
// so the lag in records is exact: a caught-up lane has applied the offset just below the last
// stable offset. The table's ready bit is not touched; exclusion is the indexer's eligibility
// mask. Progress events go out every ProgressInterval.
func (l *lane) checkFreshness(now time.Time, force bool) {
	lso := l.ix.feed.LastStableOffset(int32(l.num))
	ready := l.in.Ready()
	// A ready lane lags by what it has not read; one that is not ready, by everything since the
	// last record it applied while ready (it may read on, refusing what it reads: its answers do
	// not move).
	pos := l.st.applied
	if !ready {
		pos = min(l.st.usable, l.st.applied)
	}
	lag := int64(0)
	if lso >= 0 {
		lag = max(lso-(pos+1), 0)
	}
	// The lane's age: since the time up to which it reflects its DC's KV events, which the relay
	// stamps (a relay that stopped, or fell behind its input, ages its lane even while its
	// heartbeats arrive), or since its last record from a relay that does not stamp it.
	var age time.Duration
	if at := l.ix.LaneAsOf(l.num); at > 0 {
		age = max(now.Sub(time.UnixMicro(at)), 0)
	} else if !l.st.appliedTime.IsZero() {
		age = max(now.Sub(l.st.appliedTime), 0)
	}
	pol := l.ix.cfg.Freshness
	stale := ready && ((pol.MaxRecordLag > 0 && lag > pol.MaxRecordLag) || (pol.MaxTimeLag > 0 && age > pol.MaxTimeLag))
	queue := l.ix.feed.Queue(int32(l.num))
	l.stats.update(func(s *LaneStatus) {
		s.HighWatermark, s.LagRecords, s.LagTime = lso, lag, age
		s.Ready, s.Excluded = ready, stale
		s.QueuedBytes, s.FetchPaused, s.FetchPauses = queue.Bytes, queue.Paused, queue.Pauses
	})
	if stale != l.st.excluded {
		l.st.excluded = stale
		l.ix.setExcluded(l.bit, stale)
		l.ix.noteEligibility()
		// A lane that stopped being ready left answers for a reason its own event reported (a
		// fault, a drain); its exclusion is dropped without a READMITTED event.
		if ready {
			kind := schemas.EventReadmitted
			if stale {
				kind = schemas.EventExcludedForLag
			}
			l.event(schemas.LaneEvent{Kind: kind, LagMicros: schemas.Some(age.Microseconds())})
			l.log.Info("lane freshness changed", zap.Bool("excluded", stale), zap.Int64("lag_records", lag), zap.Duration("lag_time", age))
		}
	}
	if force || (l.ix.cfg.ProgressInterval > 0 && now.Sub(l.st.lastProgress) >= l.ix.cfg.ProgressInterval) {
		l.st.lastProgress = now
		l.event(schemas.LaneEvent{Kind: schemas.EventProgress, LagMicros: schemas.Some(age.Microseconds())})
	}
}
