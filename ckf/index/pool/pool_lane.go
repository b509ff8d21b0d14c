package pool

import (
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ckf-stream/ckf-stream/ckf"
)

// laneState is the pool-side admission state of one lane (consumer §4.3). The
// permanently fenced state is the separate terminal flag laneControl.fenced.
type laneState uint8

const (
	laneUnassigned laneState = iota
	laneTransitioning
	laneAwaitingSnapshot
	laneActive
	laneRetired
)

// laneControl is the per-lane admission control block (consumer §4.3).
//
// Locking: mu (the admission mutex) guards every field below it and is held
// only briefly, never while waiting for a worker. transition serialises the
// control operations (Assign, InstallSnapshot, CompleteDrain) of one lane
// and IS held while waiting for the worker's reply; SubmitDelta, the lag
// watchdog, RetireLane and worker-side bookkeeping take only mu.
//
// Epoch fencing: epoch is bumped on every assignment and every retirement
// and published (atomic store) to published, which the worker compares
// with the epoch each command carried at admission. A command admitted
// under an older epoch is stale and never runs; a command that was running
// when the epoch moved has its effect retired right after it (consumer §4.4).
// Readiness can only be published by a snapshot activation, which runs under
// mu and re-checks the epoch, so an in-flight command can never re-publish
// readiness after a retirement.
type laneControl struct {
	lane   uint8
	bit    uint32
	worker int

	transition sync.Mutex

	published atomic.Uint64 // copy of epoch for the worker
	fenced    atomic.Bool   // terminal: admission epoch exhausted

	mu                sync.Mutex
	epoch             uint64
	state             laneState
	lease             ckf.LaneLease
	hasLease          bool
	lastAssignEpoch   uint64
	hasLastAssign     bool
	nextDeltaID       uint64
	outstandingImages int
	outstanding       outstandingFIFO // admitted, not yet applied; oldest first
}

// retireAdmissionLocked is retire-admission (consumer §4.3); mu must be held. It
// clears the ready bit while holding mu, bumps and publishes the epoch,
// drops the lease and moves to Retired. If the epoch would overflow the
// lane is permanently fenced instead and ErrAdmissionEpochExhausted is
// returned.
func (p *IngestionPool) retireAdmissionLocked(lc *laneControl) error {
	if lc.fenced.Load() {
		p.g.WithdrawReady(lc.bit)
		return ErrAdmissionEpochExhausted
	}
	if lc.epoch == math.MaxUint64 {
		p.fenceLocked(lc)
		return ErrAdmissionEpochExhausted
	}
	p.g.WithdrawReady(lc.bit)
	lc.epoch++
	lc.state = laneRetired
	lc.lease, lc.hasLease = ckf.LaneLease{}, false
	lc.published.Store(lc.epoch)
	return nil
}

// fenceLocked permanently fences the lane (mu held): ready bit cleared,
// state Retired, lease dropped, fenced set. Workers retire the lane's
// ingestor on their next command for it.
func (p *IngestionPool) fenceLocked(lc *laneControl) {
	p.g.WithdrawReady(lc.bit)
	lc.state = laneRetired
	lc.lease, lc.hasLease = ckf.LaneLease{}, false
	lc.fenced.Store(true)
}

// retireIfEpochLocked retires admission only if the epoch is still epoch
// (a newer assignment must not be retired by an old command's fault).
func (p *IngestionPool) retireIfEpochLocked(lc *laneControl, epoch uint64) {
	if lc.epoch == epoch && !lc.fenced.Load() {
		_ = p.retireAdmissionLocked(lc)
	}
}

// releaseDelta removes the outstanding entry id (applied or discarded) and
// its images. Entries are released in FIFO order except for a saturated
// submit, which removes its own (newest) entry.
func (lc *laneControl) releaseDeltaLocked(id uint64) {
	if images, ok := lc.outstanding.remove(id); ok {
		lc.outstandingImages -= images
	}
}

// lagExceededLocked reports whether the oldest outstanding delta was
// admitted at least maxAge before now.
func (lc *laneControl) lagExceededLocked(now time.Time, maxAge time.Duration) bool {
	return lc.outstanding.Len() > 0 && now.Sub(lc.outstanding.oldest().admitted) >= maxAge
}

// stickyWorker is the sticky lane → worker function of consumer §4.2 (a SplitMix64
// finaliser over consumer XOR lane·golden-ratio), reduced mod workers.
func stickyWorker(consumer ckf.ConsumerInstanceID, lane uint8, workers int) int {
	v := uint64(consumer) ^ (uint64(lane) * 0x9E3779B97F4A7C15)
	v ^= v >> 30
	v *= 0xBF58476D1CE4E5B9
	v ^= v >> 27
	v *= 0x94D049BB133111EB
	v ^= v >> 31
	return int(v % uint64(workers))
}
