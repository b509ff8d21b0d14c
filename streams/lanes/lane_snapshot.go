package lanes

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/ckf/index"
	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/ckf-stream/ckf-stream/streams"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"
)

// assembly collects the chunks of one snapshot (design §3). Chunks must arrive in order, with
// one sequence, identity, chunk count and bucket count, covering the buckets contiguously;
// anything else abandons the snapshot and nothing becomes ready, except a repeat of a chunk
// already assembled (a mirror's replay, replayedChunk), which is skipped.
type assembly struct {
	active   bool
	skip     bool // header checks only: a stale snapshot a ready lane ignores, or one not wanted
	stale    bool // skipped because the ready lane already has its sequence
	identity ckf.ProducerIdentity
	sequence uint64
	count    uint32
	next     uint32
	bucket   uint64 // next expected first bucket
	total    uint64
	first    int64 // offset of chunk 0
	words    []uint64
}

func (a *assembly) reset() { a.active, a.skip = false, false }

// olderGeneration reports whether a is an older generation of the same pool than b: a lower
// producer incarnation, or the same incarnation with a lower layout generation. Relays choose
// strictly increasing incarnations across restarts (RelayConfig.Incarnation).
func olderGeneration(a, b ckf.ProducerIdentity) bool {
	if a.Pool != b.Pool {
		return false
	}
	return a.Incarnation < b.Incarnation || (a.Incarnation == b.Incarnation && a.LayoutGeneration < b.LayoutGeneration)
}

func (l *lane) abandonAssembly(offset int64, why string) {
	wasSkipped := l.asm.skip
	l.asm.reset()
	fault := &schemas.LaneFault{Kind: schemas.FaultSnapshotAssembly, Detail: why, Offset: schemas.Some(offset)}
	if wasSkipped || l.in.Ready() {
		l.stats.update(func(s *LaneStatus) { s.AssemblyFaults++ })
		l.event(schemas.LaneEvent{Kind: schemas.EventRecordRejected, Fault: fault})
		return
	}
	// An incomplete snapshot on a lane that is not ready: InactiveSnapshotInstallFailure,
	// RetrySnapshot — keep the lease, take the next snapshot.
	l.stats.update(func(s *LaneStatus) { s.AssemblyFaults++; s.Faults[fault.Kind.String()]++; s.LastFault = why })
	l.event(schemas.LaneEvent{Kind: schemas.EventAwaitingSnapshot, Fault: fault,
		Disposition: streams.WireDisposition(ckf.InactiveSnapshotInstallFailure)})
	l.askForRetrySnapshot(why)
}

// FormatMismatch says how a producer's filter format differs from the indexer's, field by field,
// and which settings make them agree: a bucket count follows the relay's relay.expected_blocks and
// the indexer's indexer.expected_blocks_per_dc (or indexer.bucket_count), the seed relay.seed and
// indexer.seed; the other fields differ only between incompatible builds.
func FormatMismatch(producer, indexer ckf.FormatIdentity) string {
	var diffs []string
	if producer.BucketCount != indexer.BucketCount {
		diffs = append(diffs, fmt.Sprintf("the relay's filter has %d buckets, this indexer's %d: "+
			"set indexer.expected_blocks_per_dc to the relays' relay.expected_blocks (or indexer.bucket_count to %d)",
			producer.BucketCount, indexer.BucketCount, producer.BucketCount))
	}
	if producer.Seed != indexer.Seed {
		diffs = append(diffs, fmt.Sprintf("the relay's seed is %#x, this indexer's %#x: relay.seed and indexer.seed must be equal",
			producer.Seed, indexer.Seed))
	}
	if producer.Version != indexer.Version || producer.FingerprintBits != indexer.FingerprintBits || producer.SlotsPerBucket != indexer.SlotsPerBucket {
		diffs = append(diffs, fmt.Sprintf("the relay's format is version %d (%d-bit fingerprints, %d slots), this indexer's version %d (%d-bit, %d slots): "+
			"relay and indexer builds are incompatible",
			producer.Version, producer.FingerprintBits, producer.SlotsPerBucket, indexer.Version, indexer.FingerprintBits, indexer.SlotsPerBucket))
	}
	return "snapshot format differs from the indexer's: " + strings.Join(diffs, "; ")
}

// rejectSnapshot refuses a snapshot at its first chunk; its later chunks are orphans and are
// ignored (no assembly is active). The refusal is the lane's last fault (its status row) as well
// as a lane event and a dead letter: a lane whose every snapshot is refused never becomes ready,
// and its status must say why.
func (l *lane) rejectSnapshot(rec *kgo.Record, kind schemas.LaneFaultKind, what string) {
	l.deadLetter(rec, schemas.DeadLetterRejected, what)
	l.stats.update(func(s *LaneStatus) {
		s.Rejected++
		s.Faults[kind.String()]++
		s.LastFault, s.LastFaultTime = what, time.Now()
	})
	l.log.Warn("snapshot refused", zap.Int64("offset", rec.Offset), zap.String("reason", what))
	l.event(schemas.LaneEvent{Kind: schemas.EventRecordRejected,
		Fault: &schemas.LaneFault{Kind: kind, Detail: what, Offset: schemas.Some(rec.Offset)}})
}

// replayedChunk reports whether c repeats a chunk of the snapshot being assembled: the same
// producer identity, sequence, chunk count and bucket count, and an index below the next one
// expected. A mirror delivers at least once, and a mirror restarted in the middle of a snapshot
// writes some of its chunks again (design §8); the state at one sequence of one identity is one
// state, so the repeat carries the words already assembled (consumer §9.8).
func (a *assembly) replayedChunk(id ckf.ProducerIdentity, c *schemas.SnapshotChunk) bool {
	return a.active && id == a.identity && c.Sequence == a.sequence && c.ChunkCount == a.count &&
		c.TotalBuckets == a.total && c.ChunkIndex < a.next
}

func (l *lane) onChunk(rec *kgo.Record, id ckf.ProducerIdentity, c *schemas.SnapshotChunk) {
	if l.asm.replayedChunk(id, c) {
		l.stats.update(func(s *LaneStatus) { s.ReplayedRecords++ })
		return
	}
	if c.ChunkIndex == 0 {
		if l.asm.active {
			l.abandonAssembly(rec.Offset, "a new snapshot started before the previous one completed")
		}
		switch {
		case id.Pool != l.pool:
			l.rejectSnapshot(rec, schemas.FaultWrongLaneOwner, "pool "+id.Pool.String()+" does not own lane (owner "+l.pool.String()+")")
			return
		case id.Format != l.ix.g.Manifest().Format():
			l.rejectSnapshot(rec, schemas.FaultWrongFormat, FormatMismatch(id.Format, l.ix.g.Manifest().Format()))
			return
		case l.st.hasNewest && olderGeneration(id, l.st.newest):
			l.rejectSnapshot(rec, schemas.FaultStaleIncarnation, fmt.Sprintf(
				"snapshot of producer incarnation %d (layout %d) after the lane followed incarnation %d (layout %d)",
				id.Incarnation, id.LayoutGeneration, l.st.newest.Incarnation, l.st.newest.LayoutGeneration))
			return
		}
		identity, _, _ := l.in.Assignment()
		installed, ready := l.in.InstalledSequence()
		wanted, stale := true, false
		switch {
		case ready && id == identity && c.Sequence <= installed:
			wanted, stale = false, true // stale for a ready lane (consumer §3.3: IgnoredStaleOrDuplicate)
		case l.st.phase == PhaseWaitingForSnapshot && rec.Offset <= l.st.waitAfter:
			wanted = false // written before the fault that made this lane ask for a new one
		}
		l.asm = assembly{active: true, skip: !wanted, stale: stale, identity: id, sequence: c.Sequence, count: c.ChunkCount,
			total: c.TotalBuckets, first: rec.Offset, words: l.asm.words}
		if wanted && uint64(cap(l.asm.words)) < c.TotalBuckets {
			l.asm.words = make([]uint64, c.TotalBuckets)
		}
		if wanted {
			l.asm.words = l.asm.words[:c.TotalBuckets]
		} else {
			l.asm.words = l.asm.words[:0]
		}
	} else if !l.asm.active {
		return // a chunk of a snapshot whose start this replica did not read, or refused
	}
	a := &l.asm
	switch {
	case id != a.identity:
		l.abandonAssembly(rec.Offset, "chunk of another producer identity inside a snapshot")
		return
	case c.Sequence != a.sequence || c.ChunkCount != a.count || c.TotalBuckets != a.total:
		l.abandonAssembly(rec.Offset, fmt.Sprintf("chunk %d/%d of sequence %d does not match snapshot %d (%d chunks, %d buckets)",
			c.ChunkIndex, c.ChunkCount, c.Sequence, a.sequence, a.count, a.total))
		return
	case c.ChunkIndex != a.next:
		l.abandonAssembly(rec.Offset, fmt.Sprintf("chunk %d arrived, expected %d", c.ChunkIndex, a.next))
		return
	case c.FirstBucket != a.bucket:
		l.abandonAssembly(rec.Offset, fmt.Sprintf("chunk %d starts at bucket %d, expected %d", c.ChunkIndex, c.FirstBucket, a.bucket))
		return
	}
	n := uint64(c.Words.Len())
	if a.bucket+n > a.total || n == 0 {
		l.abandonAssembly(rec.Offset, fmt.Sprintf("chunk %d covers buckets [%d,%d) beyond %d", c.ChunkIndex, a.bucket, a.bucket+n, a.total))
		return
	}
	if !a.skip {
		c.Words.AppendTo(a.words[a.bucket:a.bucket])
	}
	a.bucket += n
	a.next++
	if a.next < a.count {
		return
	}
	if a.bucket != a.total {
		l.abandonAssembly(rec.Offset, fmt.Sprintf("snapshot ends at bucket %d of %d", a.bucket, a.total))
		return
	}
	// Complete. Recovery may seek to it if it is consistent with this lane's stream: a stale
	// snapshot of the installed identity, or one that installs.
	if a.stale {
		l.markSnapshot(a.first)
	}
	if !a.skip {
		l.install(rec)
	}
	a.reset()
}

// markSnapshot records the first offset of the latest complete snapshot recovery may seek to.
func (l *lane) markSnapshot(first int64) {
	l.st.snapStart = first
	l.stats.update(func(s *LaneStatus) { s.SnapshotOffset = first })
}

// install assigns the lane (a new lease) when its ingestor has no assignment or follows another
// producer identity, then installs the assembled snapshot (consumer §3.3).
func (l *lane) install(rec *kgo.Record) {
	a := &l.asm
	identity, _, assigned := l.in.Assignment()
	wasReady := l.in.Ready()
	if !assigned || identity != a.identity {
		l.st.leaseEpoch++
		lease := ckf.LaneLease{Consumer: l.ix.g.Manifest().ConsumerInstance(), Lane: l.num, Epoch: l.st.leaseEpoch}
		if err := l.in.Assign(a.identity, lease); err != nil {
			var ae *index.AssignmentError
			if errors.As(err, &ae) {
				l.event(schemas.LaneEvent{Kind: schemas.EventRecordRejected, Fault: streams.AssignmentFault(ae, a.first)})
			}
			l.log.Error("lane assignment failed", zap.Error(err))
			return
		}
		wasReady = false // Assign cleared readiness before the lease changed
		l.stats.update(func(s *LaneStatus) { s.Identity, s.LeaseEpoch = a.identity.String(), lease.Epoch })
		l.event(schemas.LaneEvent{Kind: schemas.EventAssigned})
	}
	_, lease, _ := l.in.Assignment()
	start := time.Now()
	out := l.in.InstallSnapshot(&ckf.Snapshot{Identity: a.identity, Lease: lease, Sequence: a.sequence, Buckets: a.words})
	switch out.Kind {
	case index.OutcomeSnapshotInstalled:
		l.st.newest, l.st.hasNewest = a.identity, true
		l.st.snapOmissions = l.st.capacity.CapacityOmissions // the last chunk's, noted before it was handled
		l.markSnapshot(a.first)
		if l.st.phase != PhaseReplaying || rec.Offset > l.st.faultAt {
			l.setPhase(PhaseActive)
		}
		l.st.waitAfter = -1
		l.stats.snapshotInstalled(out.Sequence, time.Since(start))
		l.event(schemas.LaneEvent{Kind: schemas.EventSnapshotInstalled})
		l.log.Info("snapshot installed", zap.Uint64("sequence", out.Sequence), zap.Int64("offset", a.first),
			zap.Duration("took", time.Since(start)))
	case index.OutcomeLaneDeactivated:
		// Consumer consumer §3.3: a snapshot fault on a lane that is not ready is retry-class (INACT); on a
		// ready lane it is gap-class.
		point := ckf.InactiveSnapshotInstallFailure
		if wasReady {
			point = ckf.ConsumerGapOrMalformedBeforeWrite
		}
		l.fault(point, streams.WireFault(out.Fault, rec.Offset))
	}
	// IgnoredStaleOrDuplicate cannot happen: a stale snapshot is skipped at its first chunk.
}
