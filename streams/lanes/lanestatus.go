package lanes

import "time"

// LanePhase's String method is generated from the constants' line comments,
// the names the HTTP lane table shows; run make generate after changing one.
//go:generate go run golang.org/x/tools/cmd/stringer@v0.52.0 -type=LanePhase -linecomment -output=lanestatus_string.go

// LanePhase is where a lane stands in its recovery cycle on this replica. Together with the
// lane's LaneIngestor (consumer §3: unassigned, awaiting a snapshot, ready) it is the whole state
// of the lane; see laneState.
type LanePhase uint8

const (
	// PhaseAwaitingSnapshot: no snapshot is installed under the current lease; the lane installs
	// the next complete snapshot it reads (any position, any producer generation not older than
	// the newest one it followed).
	PhaseAwaitingSnapshot LanePhase = iota // awaiting_snapshot
	// PhaseActive: a snapshot is installed and deltas are applied.
	PhaseActive // active
	// PhaseReplaying: after a fault, the lane seeked back to the latest complete snapshot it knows
	// and replays from there; it becomes Active once it applies a record past the fault.
	PhaseReplaying // replaying
	// PhaseWaitingForSnapshot: replaying would fault again at the same place (or no snapshot is
	// known), so the lane asked the relay for a new snapshot and installs only one written after
	// the fault.
	PhaseWaitingForSnapshot // waiting_for_snapshot
	// PhaseDrained: the relay stopped gracefully; its drain marker matched the installed
	// sequence and the lane left answers at once. The next producer generation's snapshot brings
	// it back.
	PhaseDrained // drained
)

// LaneStatus is a point-in-time view of one lane, for the lane table, metrics and tests. It is
// published by the lane's goroutine whenever it has handled every record decoded so far, at
// every state change, and at least every check interval; the effects of a record are published
// before the position that includes it, so a reader that sees AppliedOffset >= o also sees every
// effect of the records up to o (faults, counters, readiness).
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
	AppliedOffset     int64 // last lane-partition offset processed (data or transaction marker); -1 before any
	HighWatermark     int64 // last stable offset seen by the fetcher; -1 before the first fetch
	LagRecords        int64
	LagTime           time.Duration
	SnapshotOffset    int64 // first offset of the latest complete snapshot known; -1 if none
	// QueuedBytes is how many fetched record bytes wait for the lane; FetchPaused says whether
	// the lane's partition is paused because they reached FeedConfig.PauseBytes (backpressure),
	// FetchPauses how often that happened.
	QueuedBytes int
	FetchPaused bool
	FetchPauses uint64
	Deltas      uint64
	Images      uint64
	Snapshots   uint64
	Heartbeats  uint64
	Rejected    uint64 // records dead-lettered
	// AssemblyFaults counts snapshots abandoned while being assembled (a chunk out of order, a
	// record between two chunks).
	AssemblyFaults   uint64
	Recoveries       uint64 // seeks back to a snapshot
	SnapshotRequests uint64
	Drains           uint64            // drain markers acknowledged
	Faults           map[string]uint64 // by fault kind
	LastFault        string
	LastFaultTime    time.Time
	// Capacity is the producer's capacity state as the lane's records last carried it.
	Capacity LaneCapacity
	// Sources is the health of the DC's sources as the lane's records last carried it.
	Sources LaneSources
	// BlockSize is the block size of the DC's engines as the lane's latest record carried it
	// (Indexer.LaneBlockSize); 0 when it carried none.
	BlockSize uint32
	// ReplayedRecords counts records skipped inside a snapshot's assembly as repeats (a mirror's
	// replay after a restart, consumer §9.8): chunks already assembled, and deltas of the
	// snapshot's producer at or below its sequence.
	ReplayedRecords uint64
	// Source is where the lane is read: its lane topic, and the region it is mirrored from
	// (streams.LaneSource).
	Source string
}

// LaneSources is the health of a lane's DC sources (schemas.SourceHealth), as the relay last
// reported it on the lane.
type LaneSources struct {
	// Reported says a lane record carried it (a relay of an earlier revision never does).
	Reported bool
	// DegradedSources are sources (worker, rank) whose engine history a bridge lost and cleared:
	// answers on the lane may be short while it is above 0 (Indexer.IncompleteLanes).
	DegradedSources uint64
	// LostHistoryClears counts the relay's clears for lost history since it started.
	LostHistoryClears uint64
}

// LaneCapacity is a lane's capacity state: how full the DC's filter is and how many of the DC's
// cached blocks it misses (schemas.CapacityState), as the relay last reported it on the lane.
type LaneCapacity struct {
	// Reported says a lane record carried the state; the other fields are zero until one did
	// (a relay of an earlier revision never reports it).
	Reported bool
	// FilterOccupancy is ResidentBlocks over the filter's slots (bucket count times slots per
	// bucket), in [0, 1].
	FilterOccupancy float64
	ResidentBlocks  uint64
	// OmittedBlocks are blocks the DC holds that its filter omitted for capacity: answers on the
	// lane may be short while it is above 0 (Indexer.IncompleteLanes).
	OmittedBlocks uint64
	// CapacityOmissions counts omissions since the producer's state began;
	// OmissionsSinceSnapshot, those since the lane's latest installed snapshot.
	CapacityOmissions      uint64
	OmissionsSinceSnapshot uint64
}
