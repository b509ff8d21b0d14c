package pool

import (
	"math/bits"
	"sync/atomic"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/ckf/index"
)

// cmdKind enumerates worker commands.
type cmdKind uint8

const (
	cmdAssign cmdKind = iota + 1
	cmdSnapshot
	cmdDelta
	cmdDrain
	cmdRun // test hook: run fn on the worker (pause it, inject a panic)
)

// command is one unit of work on a worker queue. Every lane command carries
// the lane's admission epoch at the time it was admitted.
type command struct {
	kind     cmdKind
	lane     uint8
	epoch    uint64
	identity ckf.ProducerIdentity // assign
	lease    ckf.LaneLease        // assign
	snapshot *ckf.Snapshot
	delta    *ckf.Delta
	deltaID  uint64
	marker   ckf.DrainMarker
	fn       func()
	reply    chan reply // control commands only (buffered 1)
}

// reply answers a control command. stale means the worker discarded the
// command because its epoch was no longer the lane's or the lane was
// fenced.
type reply struct {
	out   index.IngestOutcome
	err   error
	stale bool
}

// worker is one lane-sticky ingestion goroutine. ingestors and observed are
// touched only by the worker goroutine; failed, dead and done are shared.
type worker struct {
	idx       int
	q         chan command
	lanes     uint16 // lanes routed to this worker
	ingestors [ckf.LaneCount]*index.LaneIngestor
	observed  [ckf.LaneCount]uint64 // last published epoch seen per lane

	failed atomic.Bool
	dead   chan struct{} // closed when the worker failed
	done   chan struct{} // closed when the goroutine exited
}

// runWorker is the worker loop. A panic in a command is recovered: the
// worker is marked failed, the readiness of all its lanes is cleared and a
// WorkerFailed fault is posted; the goroutine then exits (its queue is
// abandoned; later operations on its lanes return ErrWorkerFailed). On exit
// — failure or Close — the worker releases its lanes' ingestors (ready bit
// cleared, claim released).
func (p *IngestionPool) runWorker(w *worker) {
	defer close(w.done)
	defer func() {
		for _, in := range w.ingestors {
			if in != nil {
				in.Close()
			}
		}
	}()
	defer func() {
		if r := recover(); r != nil {
			p.failWorker(w, r)
		}
	}()
	for {
		select {
		case <-p.quit:
			// Close retired every lane before quit, so whatever is still
			// queued is stale: drain it (control callers get their
			// LaneRetired reply, delta entries are released) and exit.
			for {
				select {
				case cmd := <-w.q:
					p.handle(w, &cmd)
				default:
					return
				}
			}
		case cmd := <-w.q:
			p.handle(w, &cmd)
		}
	}
}

// failWorker marks w failed and fails closed for all its lanes.
func (p *IngestionPool) failWorker(w *worker, panicValue any) {
	w.failed.Store(true)
	close(w.dead)
	for m := w.lanes; m != 0; m &= m - 1 {
		p.g.WithdrawReady(1 << uint(bits.TrailingZeros16(m)))
	}
	p.postFault(PoolFault{Kind: PoolFaultWorkerFailed, Worker: w.idx, Lanes: w.lanes, Panic: panicValue,
		Disposition: ckf.DispositionOf(ckf.ConsumerWorkerFailureMidApply)})
}

// handle runs one command with the epoch fencing of consumer §4.4.
func (p *IngestionPool) handle(w *worker, cmd *command) {
	if cmd.kind == cmdRun {
		cmd.fn()
		return
	}
	lc := p.lanes[cmd.lane]
	in := w.ingestors[cmd.lane]
	if cmd.kind == cmdDelta {
		defer func() {
			lc.mu.Lock()
			lc.releaseDeltaLocked(cmd.deltaID)
			lc.mu.Unlock()
		}()
	}
	// 1. Permanently fenced lane: retire the ingestor, reject.
	if lc.fenced.Load() {
		in.Retire()
		p.rejectStale(cmd)
		return
	}
	// 2. The admission epoch moved since this worker last looked: the lane
	// was reassigned or retired, so drop the ingestor's lease first.
	published := lc.published.Load()
	if w.observed[cmd.lane] != published {
		in.Retire()
		w.observed[cmd.lane] = published
	}
	// 3. Commands admitted under another epoch are stale.
	if cmd.epoch != published {
		p.rejectStale(cmd)
		return
	}
	// 4. Run the ingestor operation.
	var r reply
	switch cmd.kind {
	case cmdAssign:
		if err := in.Assign(cmd.identity, cmd.lease); err != nil {
			r.err = err
		}
	case cmdSnapshot:
		r.out = in.InstallSnapshotGuarded(cmd.snapshot, p.activationGuard(lc, cmd))
	case cmdDelta:
		r.out = in.ApplyDelta(cmd.delta)
	case cmdDrain:
		r.out = in.CompleteDrain(cmd.marker)
	}
	disposition, hasDisposition := in.LastFailureDisposition()
	// Re-check: if the lane was fenced or retired while the command ran, its
	// effect is retired again, so an in-flight command can never leave the
	// ingestor ready after a retirement.
	if lc.fenced.Load() || lc.published.Load() != cmd.epoch {
		in.Retire()
	}
	if r.out.Kind == index.OutcomeLaneDeactivated && hasDisposition {
		switch disposition.Action {
		case ckf.ActionRetrySnapshot:
			// Lease stays usable; the lane keeps awaiting a snapshot.
		case ckf.ActionDeactivateAndSnapshot:
			lc.mu.Lock()
			p.retireIfEpochLocked(lc, cmd.epoch)
			lc.mu.Unlock()
		default:
			panic("ckf: unexpected lane fault action " + disposition.Action.String())
		}
		p.postFault(PoolFault{Kind: PoolFaultLaneDeactivated, Lane: cmd.lane, Fault: r.out.Fault, Disposition: disposition})
	}
	if cmd.reply != nil {
		cmd.reply <- r
	}
}

// rejectStale answers a discarded control command; stale deltas are
// dropped silently.
func (p *IngestionPool) rejectStale(cmd *command) {
	if cmd.reply != nil {
		cmd.reply <- reply{stale: true}
	}
}

// activationGuard returns the pool's snapshot activation guard (consumer §4.4): under
// the admission mutex, activate only if the lane is not fenced, its epoch is
// still the command's, its lease is the snapshot's lease and it is
// AwaitingSnapshot; the lane then becomes Active in the same critical
// section. Because retire-admission clears the ready bit under the same
// mutex, a retirement that happens while the snapshot's words are being
// written is never undone by the activation.
func (p *IngestionPool) activationGuard(lc *laneControl, cmd *command) index.ActivationGuard {
	return func(activate func()) bool {
		if h := p.hooks.beforeActivate; h != nil {
			h(cmd.lane)
		}
		lc.mu.Lock()
		defer lc.mu.Unlock()
		if lc.fenced.Load() || lc.epoch != cmd.epoch || !lc.hasLease || lc.lease != cmd.snapshot.Lease || lc.state != laneAwaitingSnapshot {
			return false
		}
		activate()
		lc.state = laneActive
		return true
	}
}

// runOnWorker enqueues fn on worker i (blocking) — test hook used to pause a
// worker or inject a panic.
func (p *IngestionPool) runOnWorker(i int, fn func()) {
	p.workers[i].q <- command{kind: cmdRun, fn: fn}
}
