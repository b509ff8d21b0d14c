package index

import (
	"github.com/ckf-stream/ckf-stream/ckf"
)

// LaneIngestor is GlobalCkfLaneIngestor (consumer §3): the single writer of one
// lane of a GlobalIndexer, obtained from ClaimLane. It is NOT safe for
// concurrent use: one goroutine (the lane's sticky worker) drives it. Its
// assignment, sequence and validation scratch are private; only the lane's
// table words and its ready bit are shared with queries.
//
// States: U (unassigned), W (assigned, awaiting a snapshot, not ready) and
// R (assigned, ready, installed sequence s). Every input is evaluated
// against the consumer §3.3 input × state table, top to bottom, first matching row
// wins. Invariants:
//
//   - validation of an input completes before its first table write
//     (all-or-nothing w.r.t. validation; application is one indivisible
//     word store at a time and not atomic for readers);
//   - readiness is cleared before the lease changes and before a snapshot's
//     first word is written, and set (after the last word) only by a
//     successful snapshot activation;
//   - stale or foreign traffic changes nothing and records no failure
//     disposition;
//   - deltas are never buffered across a gap: a fault deactivates the lane
//     (the assignment is kept) until a new snapshot.
//
// At this direct layer a deactivated lane may take a new snapshot on the
// same lease; the ingestion pool forbids that for gap-class faults by
// retiring the admission epoch.
type LaneIngestor struct {
	g      *GlobalIndexer
	lane   uint8
	bit    uint64
	pool   ckf.PoolID
	closed bool

	state        ingestorState
	identity     ckf.ProducerIdentity // valid unless state is unassigned
	lease        ckf.LaneLease        // valid unless state is unassigned
	lastEpoch    uint64
	hasLastEpoch bool
	installed    uint64 // meaningful in state ready

	lastFailure    ckf.FailureDisposition
	hasLastFailure bool

	// seen is the duplicate-detection bitmap (one bit per bucket,
	// ceil(bucket_count/64) words); touched lists the words set while
	// validating one delta so they can be cleared in O(images).
	seen    []uint64
	touched []uint32

	// small is the duplicate set of deltas of at most smallDeltaImages
	// images (findDuplicateSmall): slot = epoch<<32 | bucket, valid only
	// when its epoch is smallEpoch. 4 KiB that stay in L1, where the
	// bitmap's scattered words miss.
	small      [smallSetSlots]uint64
	smallEpoch uint32
}

const (
	// smallDeltaImages is the largest delta whose duplicate check uses the
	// small set; larger deltas use the bitmap. Producer deltas carry a
	// few dozen images (23 on average in the reference's measurements).
	smallDeltaImages = 64
	// smallSetBits sizes the small set: 2^9 slots keep it at most an eighth
	// full. At half full (128 slots) a 64-image delta took 7.1 ns per image,
	// the branches of its probes' collisions mispredicted; a quarter full
	// 3.4 ns, an eighth 2.5 ns (BenchmarkFindDuplicate, Intel Xeon).
	smallSetBits  = 9
	smallSetSlots = 1 << smallSetBits
)

// ingestorState is the ingestor's state of consumer §3.1: U, W or R. The
// shared ready bit is set exactly while the state is ready (set last, after
// the snapshot's words; cleared first, before anything else changes).
type ingestorState uint8

const (
	stateUnassigned ingestorState = iota // U: no assignment
	stateAwaiting                        // W: assigned, awaiting a snapshot, not ready
	stateReady                           // R: assigned, snapshot installed, queryable
)

// Lane returns the physical lane.
func (in *LaneIngestor) Lane() uint8 { return in.lane }

// Pool returns the lane's pool.
func (in *LaneIngestor) Pool() ckf.PoolID { return in.pool }

// Ready reports whether the lane is in state R.
func (in *LaneIngestor) Ready() bool { return in.state == stateReady }

// Assignment returns the current producer identity and lease; ok == false
// in state U.
func (in *LaneIngestor) Assignment() (ckf.ProducerIdentity, ckf.LaneLease, bool) {
	return in.identity, in.lease, in.state != stateUnassigned
}

// LastAssignmentEpoch returns the epoch of the last accepted assignment; ok
// == false before the first one. It survives Retire.
func (in *LaneIngestor) LastAssignmentEpoch() (uint64, bool) { return in.lastEpoch, in.hasLastEpoch }

// InstalledSequence returns the installed sequence; ok only in state R.
func (in *LaneIngestor) InstalledSequence() (uint64, bool) {
	if in.state != stateReady {
		return 0, false
	}
	return in.installed, true
}

// LastFailureDisposition returns the disposition recorded by the last input
// if it deactivated the lane (reset at the start of every input).
func (in *LaneIngestor) LastFailureDisposition() (ckf.FailureDisposition, bool) {
	return in.lastFailure, in.hasLastFailure
}

// ScratchWords returns the size of the validation bitmap in 64-bit words
// (ceil(bucket_count/64)).
func (in *LaneIngestor) ScratchWords() int { return len(in.seen) }

// Close releases the lane (Rust's drop): it clears the ready bit, then the
// claim bit. The ingestor must not be used afterwards; Close is idempotent.
func (in *LaneIngestor) Close() {
	if in.closed {
		return
	}
	in.closed = true
	in.clearReady()
	in.state = stateUnassigned
	in.g.releaseLane(in.bit)
}

// clearReady clears the shared ready bit and leaves state R (R -> W; U and
// W are unchanged).
func (in *LaneIngestor) clearReady() {
	if in.state == stateReady {
		in.state = stateAwaiting
	}
	in.g.clearReadyLane(in.bit)
}

// beginInput resets the last failure disposition (every input).
func (in *LaneIngestor) beginInput() { in.hasLastFailure = false }

// deactivate records the disposition of point, clears readiness and returns
// LaneDeactivated{fault}. The assignment is kept; nothing is written.
func (in *LaneIngestor) deactivate(f LaneFault, point ckf.FailurePoint) IngestOutcome {
	in.lastFailure = ckf.DispositionOf(point)
	in.hasLastFailure = true
	in.clearReady()
	return IngestOutcome{Kind: OutcomeLaneDeactivated, Fault: f}
}

// Assign validates (consumer §3.2: consumer instance, physical lane, lane owner,
// format, strictly increasing epoch) and, if valid, clears readiness first,
// then installs the assignment: last assignment epoch := lease.Epoch,
// installed := 0, state W. An invalid assignment returns *AssignmentError and
// changes nothing (a ready lane stays ready). A closed ingestor returns
// ErrIngestorClosed.
func (in *LaneIngestor) Assign(id ckf.ProducerIdentity, lease ckf.LaneLease) error {
	in.beginInput()
	if in.closed {
		return ErrIngestorClosed
	}
	if err := validateAssignment(&in.g.manifest, in.lane, in.lastEpoch, in.hasLastEpoch, id, lease); err != nil {
		return err
	}
	in.clearReady()
	in.state = stateAwaiting
	in.identity = id
	in.lease = lease
	in.lastEpoch = lease.Epoch
	in.hasLastEpoch = true
	in.installed = 0
	return nil
}

// Retire drops the assignment (state U): clears readiness, forgets the lease
// and installed sequence. The last assignment epoch survives, so a later
// Assign still needs a strictly greater epoch. Retire in U changes nothing.
func (in *LaneIngestor) Retire() {
	in.beginInput()
	if in.state == stateUnassigned {
		return
	}
	in.clearReady()
	in.state = stateUnassigned
	in.identity = ckf.ProducerIdentity{}
	in.lease = ckf.LaneLease{}
	in.installed = 0
}

// InstallSnapshot applies a barrier snapshot (consumer §3.3 rows install_snapshot).
// On a not-ready lane a well-formed snapshot clears readiness, stores every
// word (bucket 0..N-1) and activates the lane at s.Sequence (any value). On
// a ready lane a snapshot is either stale (ignored, not even validated) or a
// fault: a ready lane never accepts a newer snapshot in place.
func (in *LaneIngestor) InstallSnapshot(s *ckf.Snapshot) IngestOutcome {
	return in.installSnapshot(s, nil)
}

// activationGuard decides, after the words were written, whether the lane
// may become ready; it must call activate (at most once) while holding
// whatever lock makes the decision atomic with respect to retirement, and
// report whether it did. nil means "always activate" (direct layer).
type activationGuard func(activate func()) bool

func (in *LaneIngestor) installSnapshot(s *ckf.Snapshot, guard activationGuard) IngestOutcome {
	in.beginInput()
	if in.state == stateUnassigned || s.Lease != in.lease {
		return IngestOutcome{Kind: OutcomeIgnoredForeignLease}
	}
	point := ckf.InactiveSnapshotInstallFailure
	if in.state == stateReady {
		point = ckf.ConsumerGapOrMalformedBeforeWrite
	}
	if s.Identity != in.identity {
		return in.deactivate(LaneFault{Kind: FaultWrongIdentity}, point)
	}
	if in.state == stateReady && s.Sequence <= in.installed {
		return IngestOutcome{Kind: OutcomeIgnoredStaleOrDuplicate, InstalledSequence: in.installed}
	}
	n := in.g.table.buckets
	if uint64(len(s.Buckets)) != n {
		return in.deactivate(LaneFault{Kind: FaultInvalidSnapshotBucketCount, Expected: n, Actual: uint64(len(s.Buckets))}, point)
	}
	if in.state == stateReady {
		return in.deactivate(LaneFault{Kind: FaultSnapshotWhileReady, Installed: in.installed, Sequence: s.Sequence}, ckf.ConsumerGapOrMalformedBeforeWrite)
	}
	// Well-formed, not ready: clear (already clear in W; the store is the
	// reference's explicit clear_ready before the first write), write,
	// activate.
	in.clearReady()
	in.g.table.storeColumn(int(in.lane), s.Buckets)
	activated := false
	activate := func() {
		in.installed = s.Sequence
		in.state = stateReady
		in.g.activateLane(in.bit)
		activated = true
	}
	if guard == nil {
		activate()
	} else {
		guard(activate)
	}
	if !activated {
		return IngestOutcome{Kind: OutcomeAwaitingSnapshot}
	}
	return IngestOutcome{Kind: OutcomeSnapshotInstalled, Sequence: s.Sequence}
}

// ApplyDelta applies one delta (consumer §3.3 rows apply_delta). Every check —
// identity, readiness, staleness (before base), base, overflow,
// contiguity, emptiness, index range (first offender in list order), then
// duplicates (at the repeat) — completes before the first store; a valid
// delta stores its images in list order, one 64-bit word store each
// (transposedTable.storeImages), and advances the installed sequence.
func (in *LaneIngestor) ApplyDelta(d *ckf.Delta) IngestOutcome {
	in.beginInput()
	if in.state == stateUnassigned || d.Lease != in.lease {
		return IngestOutcome{Kind: OutcomeIgnoredForeignLease}
	}
	if d.Identity != in.identity {
		return in.deactivate(LaneFault{Kind: FaultWrongIdentity}, ckf.ConsumerGapOrMalformedBeforeWrite)
	}
	if in.state != stateReady {
		return IngestOutcome{Kind: OutcomeAwaitingSnapshot}
	}
	s := in.installed
	if d.Sequence <= s {
		return IngestOutcome{Kind: OutcomeIgnoredStaleOrDuplicate, InstalledSequence: s}
	}
	if d.BaseSequence != s {
		return in.deactivate(LaneFault{Kind: FaultBaseSequenceMismatch, Expected: s, Actual: d.BaseSequence}, ckf.ConsumerGapOrMalformedBeforeWrite)
	}
	if d.BaseSequence == ^uint64(0) {
		return in.deactivate(LaneFault{Kind: FaultSequenceExhausted}, ckf.ConsumerGapOrMalformedBeforeWrite)
	}
	if d.Sequence != d.BaseSequence+1 {
		return in.deactivate(LaneFault{Kind: FaultNonContiguousSequence, Base: d.BaseSequence, Sequence: d.Sequence}, ckf.ConsumerGapOrMalformedBeforeWrite)
	}
	if len(d.Images) == 0 {
		return in.deactivate(LaneFault{Kind: FaultEmptyDelta}, ckf.ConsumerGapOrMalformedBeforeWrite)
	}
	n := in.g.table.buckets
	for i := range d.Images {
		if b := d.Images[i].Bucket; b >= n {
			return in.deactivate(LaneFault{Kind: FaultInvalidImageIndex, Bucket: b}, ckf.ConsumerGapOrMalformedBeforeWrite)
		}
	}
	// Every target is in range: request ownership of the lines now, so
	// their misses overlap with the duplicate check and with each other
	// (no semantic effect; a delta refused below only wasted the hint).
	in.g.table.prefetchImages(int(in.lane), d.Images)
	if dup, ok := in.findDuplicate(d.Images); ok {
		return in.deactivate(LaneFault{Kind: FaultDuplicateImageIndex, Bucket: dup}, ckf.ConsumerGapOrMalformedBeforeWrite)
	}
	in.g.table.storeImages(int(in.lane), d.Images)
	in.installed = d.Sequence
	return IngestOutcome{Kind: OutcomeDeltaApplied, Sequence: d.Sequence, Images: len(d.Images)}
}

// findDuplicate returns the first repeated bucket (at the repeat). All
// buckets are < the table's bucket count (checked before). Deltas of up to
// smallDeltaImages images use the small set, larger ones the bitmap; both
// give the same answer (TestFindDuplicateSmallMatchesBitmap).
func (in *LaneIngestor) findDuplicate(images []ckf.BucketImage) (uint64, bool) {
	if len(images) <= smallDeltaImages && in.g.table.buckets <= 1<<32 {
		return in.findDuplicateSmall(images)
	}
	return in.findDuplicateBitmap(images)
}

// findDuplicateSmall is findDuplicate over an open-addressing set of
// smallSetSlots slots with linear probing, keyed by a multiplicative hash
// of the bucket. Nothing is cleared between deltas: each call takes a new
// epoch, and a slot is occupied only if it carries the current one (the
// array is zeroed once every 2^32 - 1 calls, when the epoch wraps). Buckets
// fit in the low 32 bits (bucket counts are at most 2^32, ckf.NewAddressing).
// At most half the slots are filled, so a probe sequence ends at an empty
// slot; a hostile choice of buckets costs at most len(images) probes per
// image.
func (in *LaneIngestor) findDuplicateSmall(images []ckf.BucketImage) (uint64, bool) {
	in.smallEpoch++
	if in.smallEpoch == 0 {
		in.small = [smallSetSlots]uint64{}
		in.smallEpoch = 1
	}
	tag := uint64(in.smallEpoch) << 32
	for i := range images {
		b := images[i].Bucket
		want := tag | b
		h := (b * 0x9E3779B97F4A7C15) >> (64 - smallSetBits)
		for {
			slot := in.small[h%smallSetSlots]
			if slot == want {
				return b, true
			}
			if slot&^(1<<32-1) != tag {
				in.small[h%smallSetSlots] = want
				break
			}
			h++
		}
	}
	return 0, false
}

// findDuplicateBitmap is findDuplicate over the bitmap scratch (one bit per
// bucket); the scratch is left all-zero.
func (in *LaneIngestor) findDuplicateBitmap(images []ckf.BucketImage) (uint64, bool) {
	seen := in.seen
	touched := in.touched[:0]
	dup, found := uint64(0), false
	for i := range images {
		b := images[i].Bucket
		w, bit := b>>6, uint64(1)<<(b&63)
		if seen[w]&bit != 0 {
			dup, found = b, true
			break
		}
		if seen[w] == 0 {
			touched = append(touched, uint32(w))
		}
		seen[w] |= bit
	}
	for _, w := range touched {
		seen[w] = 0
	}
	in.touched = touched[:0]
	return dup, found
}

// CompleteDrain checks a drain marker (consumer §3.3 rows complete_drain): on the
// current lease, a ready lane whose installed sequence equals
// m.ExpectedSequence acknowledges; anything else is a gap-class
// TerminalSequenceMismatch (actual = installed sequence if ready, none
// otherwise) — it detects a final delta that no later delta would reveal.
func (in *LaneIngestor) CompleteDrain(m ckf.DrainMarker) IngestOutcome {
	in.beginInput()
	if in.state == stateUnassigned || m.Lease != in.lease {
		return IngestOutcome{Kind: OutcomeIgnoredForeignLease}
	}
	if in.state == stateReady && in.installed == m.ExpectedSequence {
		return IngestOutcome{Kind: OutcomeDrainAcknowledged, InstalledSequence: in.installed}
	}
	f := LaneFault{Kind: FaultTerminalSequenceMismatch, Expected: m.ExpectedSequence}
	if in.state == stateReady {
		f.Actual, f.HasActual = in.installed, true
	}
	return in.deactivate(f, ckf.ConsumerGapOrMalformedBeforeWrite)
}
