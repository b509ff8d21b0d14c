package index

import "github.com/ckf-stream/ckf-stream/ckf"

// The methods in this file are the seam for an in-process transport that admits
// assignments, snapshots and deltas before they reach a lane's ingestor (package
// ckf/index/pool, the spec's reference transport, consumer §4). The Kafka indexer does
// not use them: each of its lanes drives its own ingestor directly (design §1).

// ActivationGuard decides, after a snapshot's words were written, whether the lane may
// become ready; it must call activate (at most once) while holding whatever lock makes
// the decision atomic with respect to retirement, and report whether it did.
type ActivationGuard = activationGuard

// InstallSnapshotGuarded is InstallSnapshot with the lane's activation decided by guard
// (consumer §4.4); a nil guard always activates.
func (in *LaneIngestor) InstallSnapshotGuarded(s *ckf.Snapshot, guard ActivationGuard) IngestOutcome {
	return in.installSnapshot(s, guard)
}

// ValidateAssignment applies consumer §3.2 to an assignment of lane, given the last
// accepted assignment epoch of that lane (hasLast false when there was none); nil means
// valid.
func (m Manifest) ValidateAssignment(lane uint8, lastEpoch uint64, hasLast bool, id ckf.ProducerIdentity, lease ckf.LaneLease) *AssignmentError {
	return validateAssignment(&m, lane, lastEpoch, hasLast, id, lease)
}

// WithdrawReady clears the ready bits in bits (ingestor clear_ready), so that queries stop
// reading those lanes before the transport retires or fences them. It reaches lanes 0..31;
// WithdrawReady64 reaches every lane (consumer §16).
func (g *GlobalIndexer) WithdrawReady(bits uint32) { g.clearReadyLane(uint64(bits)) }

// WithdrawReady64 is WithdrawReady for lanes 0..63.
func (g *GlobalIndexer) WithdrawReady64(bits uint64) { g.clearReadyLane(bits) }
