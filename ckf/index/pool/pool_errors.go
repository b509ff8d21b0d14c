package pool

import (
	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/ckf/index"

	"errors"
	"strconv"
	"time"
)

// String methods of the enums below are generated from the constants' line
// comments, which are the names logs, errors and metric labels show; run
// make generate after changing a constant.
//go:generate go run golang.org/x/tools/cmd/stringer@v0.52.0 -type=PoolFaultKind -linecomment -output=pool_errors_string.go

// Ingestion-pool configuration, errors and fault diagnostics (consumer §4.1,
// §4.5–§4.7).

// Defaults of IngestionPoolConfig (consumer §1.2).
const (
	DefaultIngestionWorkers        = 4
	DefaultIngestionQueueCapacity  = 256
	DefaultIngestionControlTimeout = 10 * time.Second
	DefaultMaxDirtyToAppliedAge    = 10 * time.Millisecond
	minLagWatchdogPeriod           = 100 * time.Microsecond
	maxLagWatchdogPeriod           = 10 * time.Millisecond
)

// IngestionPoolConfig configures an IngestionPool. Start from
// DefaultIngestionPoolConfig; every field is validated (no zero value is
// silently replaced, except MaxOutstandingImagesPerLane where 0 means "one
// full lane", Rust's None).
type IngestionPoolConfig struct {
	// Workers is the number of lane-sticky worker goroutines (> 0, default
	// 4). Lanes map to workers with the sticky hash of consumer §4.2.
	Workers int
	// QueueCapacity is the bounded FIFO length per worker, shared by every
	// lane on that worker (> 0, default 256). A full queue on SubmitDelta
	// retires the submitting lane (saturation); a noisy neighbour can
	// therefore saturate another lane on the same worker — per-lane fairness
	// is explicitly not provided.
	QueueCapacity int
	// ControlTimeout bounds the enqueue and, separately, the reply wait of a
	// control operation (Assign, InstallSnapshot, CompleteDrain); > 0,
	// default 10 s. On expiry the lane is retired and ErrControlTimeout is
	// returned.
	ControlTimeout time.Duration
	// MaxOutstandingImagesPerLane bounds the images admitted but not yet
	// applied per lane; 0 means bucket_count (one full lane, the default),
	// negative is invalid. Exceeding it retires the lane.
	MaxOutstandingImagesPerLane int
	// MaxDirtyToAppliedAge bounds how long the oldest admitted delta of an
	// active lane may wait for its worker (> 0, default 10 ms). The lag
	// watchdog and SubmitDelta retire a lane that exceeds it.
	MaxDirtyToAppliedAge time.Duration
}

// DefaultIngestionPoolConfig returns the reference defaults.
func DefaultIngestionPoolConfig() IngestionPoolConfig {
	return IngestionPoolConfig{
		Workers:              DefaultIngestionWorkers,
		QueueCapacity:        DefaultIngestionQueueCapacity,
		ControlTimeout:       DefaultIngestionControlTimeout,
		MaxDirtyToAppliedAge: DefaultMaxDirtyToAppliedAge,
	}
}

// ErrInvalidPoolConfig is wrapped by every configuration error.
var ErrInvalidPoolConfig = errors.New("ckf: invalid ingestion pool config")

func (c IngestionPoolConfig) validate() error {
	bad := func(what string) error { return errors.Join(ErrInvalidPoolConfig, errors.New("ckf: "+what)) }
	switch {
	case c.Workers <= 0:
		return bad("worker count must be > 0")
	case c.QueueCapacity <= 0:
		return bad("queue capacity must be > 0")
	case c.ControlTimeout <= 0:
		return bad("control timeout must be > 0")
	case c.MaxOutstandingImagesPerLane < 0:
		return bad("max outstanding images per lane must be > 0 (or 0 for one full lane)")
	case c.MaxDirtyToAppliedAge <= 0:
		return bad("max dirty-to-applied age must be > 0")
	}
	return nil
}

// lagWatchdogPeriod is clamp(max_age/4, 100 µs, 10 ms).
func (c IngestionPoolConfig) lagWatchdogPeriod() time.Duration {
	p := c.MaxDirtyToAppliedAge / 4
	if p < minLagWatchdogPeriod {
		p = minLagWatchdogPeriod
	}
	if p > maxLagWatchdogPeriod {
		p = maxLagWatchdogPeriod
	}
	return p
}

// Pool errors. Rejections (index.ErrUnconfiguredLane, ErrLaneUnassigned,
// ErrLaneRetired, ErrAwaitingSnapshot, *index.AssignmentError,
// ErrAdmissionEpochExhausted, ErrPoolClosed) made no consumer write and
// carry no disposition; the others retire the lane (see
// PoolErrorDisposition).
var (
	// ErrLaneUnassigned: the lane has never been assigned.
	ErrLaneUnassigned = errors.New("ckf: lane unassigned")
	// ErrLaneRetired: the lane's admission was retired (or the lease does
	// not match, or the command became stale while queued).
	ErrLaneRetired = errors.New("ckf: lane retired")
	// ErrAwaitingSnapshot: a delta for a lane that has no snapshot yet.
	ErrAwaitingSnapshot = errors.New("ckf: lane awaiting snapshot")
	// ErrAdmissionEpochExhausted: the lane's admission epoch (or delta id)
	// would overflow; the lane is permanently fenced.
	ErrAdmissionEpochExhausted = errors.New("ckf: admission epoch exhausted")
	// ErrSaturated: the worker queue was full; the submitting lane was
	// retired.
	ErrSaturated = errors.New("ckf: ingestion queue saturated")
	// ErrOutstandingImageLimit matches every *OutstandingImageLimitError.
	ErrOutstandingImageLimit = errors.New("ckf: outstanding image limit")
	// ErrDirtyToAppliedAgeExceeded: the oldest outstanding delta of the lane
	// waited at least MaxDirtyToAppliedAge; the lane was retired.
	ErrDirtyToAppliedAgeExceeded = errors.New("ckf: dirty-to-applied age exceeded")
	// ErrControlTimeout: a control command was not enqueued or answered in
	// ControlTimeout; the lane was retired.
	ErrControlTimeout = errors.New("ckf: control timeout")
	// ErrWorkerFailed: the lane's worker failed (panic); readiness of all
	// its lanes was cleared.
	ErrWorkerFailed = errors.New("ckf: ingestion worker failed")
	// ErrPoolClosed: the pool was closed.
	ErrPoolClosed = errors.New("ckf: ingestion pool closed")
)

// OutstandingImageLimitError reports a delta whose admission would exceed
// the lane's outstanding-image limit. errors.Is(err,
// ErrOutstandingImageLimit) holds.
type OutstandingImageLimitError struct {
	Lane      uint8
	Requested int
	Limit     int
}

// Error implements error.
func (e *OutstandingImageLimitError) Error() string {
	return "ckf: lane " + strconv.Itoa(int(e.Lane)) + " outstanding images " + strconv.Itoa(e.Requested) +
		" exceed limit " + strconv.Itoa(e.Limit)
}

// Is matches ErrOutstandingImageLimit.
func (e *OutstandingImageLimitError) Is(target error) bool { return target == ErrOutstandingImageLimit }

// PoolErrorDisposition maps a pool error to its failure disposition (consumer §4.7):
// Saturated and OutstandingImageLimit are gap-class
// (ConsumerGapOrMalformedBeforeWrite); DirtyToAppliedAgeExceeded,
// ControlTimeout and WorkerFailed are ConsumerWorkerFailureMidApply
// (uncertain). Rejections have none (ok == false).
func PoolErrorDisposition(err error) (ckf.FailureDisposition, bool) {
	switch {
	case errors.Is(err, ErrSaturated), errors.Is(err, ErrOutstandingImageLimit):
		return ckf.DispositionOf(ckf.ConsumerGapOrMalformedBeforeWrite), true
	case errors.Is(err, ErrDirtyToAppliedAgeExceeded), errors.Is(err, ErrControlTimeout), errors.Is(err, ErrWorkerFailed):
		return ckf.DispositionOf(ckf.ConsumerWorkerFailureMidApply), true
	}
	return ckf.FailureDisposition{}, false
}

// PoolFaultKind enumerates the diagnostics posted on the fault channel.
type PoolFaultKind uint8

const (
	// PoolFaultLaneDeactivated: an ingestor input deactivated the lane
	// (Fault set).
	PoolFaultLaneDeactivated PoolFaultKind = iota + 1 // lane_deactivated
	// PoolFaultSaturated: the worker queue was full on SubmitDelta.
	PoolFaultSaturated // saturated
	// PoolFaultOutstandingImageLimit: Requested > Limit.
	PoolFaultOutstandingImageLimit // outstanding_image_limit
	// PoolFaultDirtyToAppliedAgeExceeded: lag bound exceeded (watchdog or
	// submit).
	PoolFaultDirtyToAppliedAgeExceeded // dirty_to_applied_age_exceeded
	// PoolFaultControlTimeout: a control command timed out.
	PoolFaultControlTimeout // control_timeout
	// PoolFaultWorkerFailed: a worker panicked (Worker, Lanes set).
	PoolFaultWorkerFailed // worker_failed
)

// PoolFault is one best-effort diagnostic of the ingestion pool. Readiness
// is the authoritative signal; faults are dropped when the channel is full.
type PoolFault struct {
	Kind PoolFaultKind
	// Lane is the affected lane (for WorkerFailed: see Lanes).
	Lane uint8
	// Lanes is the mask of lanes whose readiness was cleared by a worker
	// failure.
	Lanes uint16
	// Worker is the worker index (WorkerFailed).
	Worker int
	// Fault is the lane fault of LaneDeactivated.
	Fault index.LaneFault
	// Requested and Limit describe OutstandingImageLimit.
	Requested, Limit int
	// Panic is the recovered value of WorkerFailed.
	Panic any
	// Disposition is the failure disposition of the fault.
	Disposition ckf.FailureDisposition
}
