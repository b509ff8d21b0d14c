package streams

import (
	"sync"
	"time"
)

// LanePhase's String method is generated from the constants' line comments,
// the names the HTTP lane table shows; run make generate after changing one.
//go:generate go run golang.org/x/tools/cmd/stringer@v0.52.0 -type=LanePhase -linecomment -output=lanestatus_string.go

// LanePhase is where a lane runner stands in its recovery cycle.
type LanePhase uint8

const (
	// PhaseAwaitingSnapshot: no snapshot installed under the current lease; the runner installs
	// the next complete snapshot it reads.
	PhaseAwaitingSnapshot LanePhase = iota // awaiting_snapshot
	// PhaseActive: a snapshot is installed and deltas are applied.
	PhaseActive // active
	// PhaseReplaying: after a fault, the runner seeked back to the latest complete snapshot it
	// knows and replays from there.
	PhaseReplaying // replaying
	// PhaseWaitingForSnapshot: replaying would fault again at the same place (or no snapshot is
	// known), so the runner asked the relay for a new snapshot and waits for one written after
	// the fault.
	PhaseWaitingForSnapshot // waiting_for_snapshot
)

// LaneStatus is a point-in-time view of one lane, for the lane table, metrics and tests.
type LaneStatus struct {
	Lane     uint8
	Pool     string
	Phase    LanePhase
	Ready    bool // queryable per the table's ready mask
	Excluded bool // excluded from answers by the freshness policy
	// Identity is the producer identity of the installed or expected stream ("" before any).
	Identity          string
	LeaseEpoch        uint64
	InstalledSequence uint64
	AppliedOffset     int64 // last lane-partition offset processed; -1 before any
	HighWatermark     int64 // -1 before the first fetch
	LagRecords        int64
	LagTime           time.Duration
	SnapshotOffset    int64 // first offset of the latest complete snapshot known; -1 if none
	Deltas            uint64
	Images            uint64
	Snapshots         uint64
	Heartbeats        uint64
	Rejected          uint64 // records dead-lettered
	Recoveries        uint64 // seeks back to a snapshot
	SnapshotRequests  uint64
	Faults            map[string]uint64 // by fault kind
	LastFault         string
	LastFaultTime     time.Time
}

// laneStats is the mutable part of a lane's status, written by the lane's runner goroutine and
// read by status readers under mu.
type laneStats struct {
	mu sync.Mutex
	s  LaneStatus
}

func (l *laneStats) update(fn func(s *LaneStatus)) {
	l.mu.Lock()
	fn(&l.s)
	l.mu.Unlock()
}

func (l *laneStats) snapshot() LaneStatus {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.s
	out.Faults = make(map[string]uint64, len(l.s.Faults))
	for k, v := range l.s.Faults {
		out.Faults[k] = v
	}
	return out
}
