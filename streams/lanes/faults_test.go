package lanes_test

import (
	"encoding/binary"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/ckf-stream/ckf-stream/streams"
	"github.com/ckf-stream/ckf-stream/streams/internal/streamtest"
	"github.com/ckf-stream/ckf-stream/testenv"
)

type faultCase struct {
	name   string
	inject func(r *streamtest.RawLane, p *streamtest.Producer)
	// event and fault are the lane event the injection must yield.
	event schemas.LaneEventKind
	fault schemas.LaneFaultKind
	// deactivates: the lane leaves service (and recovers by seek, then by a requested
	// snapshot since the bad record stays in the log). Otherwise it stays ready throughout.
	deactivates bool
	deadLetter  bool
}

// TestIndexerLaneFaults injects every lane fault of the spec as real records on the lane topic.
// Each yields its exact fault in a lane event and leaves the table as it was; a deactivated lane
// seeks back to its snapshot, replays into the same bad record, asks for a snapshot, and then
// converges to the producer's exact state — the state of a replica that never faulted.
func TestIndexerLaneFaults(t *testing.T) {
	valid := func(p *streamtest.Producer) [2]uint64 { return [2]uint64{1, p.State.Word(1)} }
	last := func(p *streamtest.Producer) uint64 { return p.Publisher.LastSequence() }
	cases := []faultCase{
		{name: "gap", event: schemas.EventDeactivated, fault: schemas.FaultBaseSequenceMismatch, deactivates: true,
			inject: func(r *streamtest.RawLane, p *streamtest.Producer) { r.Delta(p.ID, last(p)+1, last(p)+2, valid(p)) }},
		{name: "non-contiguous", event: schemas.EventDeactivated, fault: schemas.FaultNonContiguousSequence, deactivates: true,
			inject: func(r *streamtest.RawLane, p *streamtest.Producer) { r.Delta(p.ID, last(p), last(p)+2, valid(p)) }},
		{name: "empty", event: schemas.EventDeactivated, fault: schemas.FaultEmptyDelta, deactivates: true,
			inject: func(r *streamtest.RawLane, p *streamtest.Producer) { r.Delta(p.ID, last(p), last(p)+1) }},
		{name: "duplicate-image", event: schemas.EventDeactivated, fault: schemas.FaultDuplicateImageIndex, deactivates: true,
			inject: func(r *streamtest.RawLane, p *streamtest.Producer) {
				r.Delta(p.ID, last(p), last(p)+1, valid(p), valid(p))
			}},
		{name: "out-of-range-image", event: schemas.EventDeactivated, fault: schemas.FaultInvalidImageIndex, deactivates: true, deadLetter: true,
			inject: func(r *streamtest.RawLane, p *streamtest.Producer) {
				// The encoder refuses such a record: encode a valid one and patch the last image's
				// bucket (the packed images end the record) to bucket_count.
				b := r.Encode(schemas.LaneRecord{Identity: streams.WireIdentity(p.ID), Kind: schemas.LaneDelta,
					Delta: schemas.Delta{BaseSequence: last(p), Sequence: last(p) + 1,
						Images: schemas.AppendImage(schemas.AppendImage(nil, 1, p.State.Word(1)), 2, 7)}})
				binary.LittleEndian.PutUint64(b[len(b)-schemas.ImageSize:], p.State.BucketCount())
				r.Value(b)
			}},
		{name: "wrong-identity", event: schemas.EventDeactivated, fault: schemas.FaultWrongIdentity, deactivates: true,
			inject: func(r *streamtest.RawLane, p *streamtest.Producer) {
				other := p.ID
				other.Incarnation++
				r.Delta(other, last(p), last(p)+1, valid(p))
			}},
		{name: "wrong-pool", event: schemas.EventDeactivated, fault: schemas.FaultWrongIdentity, deactivates: true, deadLetter: true,
			inject: func(r *streamtest.RawLane, p *streamtest.Producer) {
				other := p.ID
				other.Pool = streamtest.Pool(999)
				r.Delta(other, last(p), last(p)+1, valid(p))
			}},
		{name: "snapshot-while-ready", event: schemas.EventDeactivated, fault: schemas.FaultSnapshotWhileReady, deactivates: true,
			inject: func(r *streamtest.RawLane, p *streamtest.Producer) {
				r.Chunks(p.ID, last(p)+5, p.State.CopyWords(), 1000, []int{0, 1, 2})
			}},
		{name: "truncated", event: schemas.EventDeactivated, fault: schemas.FaultMalformedRecord, deactivates: true, deadLetter: true,
			inject: func(r *streamtest.RawLane, p *streamtest.Producer) {
				b := r.Encode(schemas.LaneRecord{Identity: streams.WireIdentity(p.ID), Kind: schemas.LaneDelta,
					Delta: schemas.Delta{BaseSequence: last(p), Sequence: last(p) + 1, Images: schemas.AppendImage(nil, 1, 2)}})
				r.Value(b[:len(b)-5])
			}},
		{name: "garbage", event: schemas.EventDeactivated, fault: schemas.FaultMalformedRecord, deactivates: true, deadLetter: true,
			inject: func(r *streamtest.RawLane, p *streamtest.Producer) { r.Value([]byte{0xde, 0xad, 0xbe, 0xef, 1, 2, 3}) }},
		{name: "bad-chunk-order", event: schemas.EventRecordRejected, fault: schemas.FaultSnapshotAssembly,
			inject: func(r *streamtest.RawLane, p *streamtest.Producer) {
				next := p.ID
				next.Incarnation++ // a new producer generation whose snapshot arrives out of order
				r.Chunks(next, 0, make([]uint64, p.State.BucketCount()), 1000, []int{0, 2, 1})
			}},
		{name: "foreign-pool-snapshot", event: schemas.EventRecordRejected, fault: schemas.FaultWrongLaneOwner, deadLetter: true,
			inject: func(r *streamtest.RawLane, p *streamtest.Producer) {
				other := p.ID
				other.Pool = streamtest.Pool(998)
				r.Chunks(other, 0, make([]uint64, p.State.BucketCount()), 1000, []int{0, 1, 2})
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			runFaultCase(t, tc)
		})
	}
}

func runFaultCase(t *testing.T, tc faultCase) {
	const lane = 2
	e := streamtest.NewEnv(t, 4096) // 2,048 buckets: a snapshot is 3 chunks of 700 words
	p := e.Producer(lane, 1)
	p.Snapshot()
	p.StoreChain(6, nil, 0)
	p.StoreChain(6, p.Chains[0], 2)
	events := e.WatchEvents()
	dead := e.Records(e.Topics.DeadLetter, 1)
	ri := e.StartIndexer(e.Manifest(51, lane), e.IndexerConfig())
	streamtest.WaitLane(t, ri, p, streamtest.Converge)
	before := ri.Indexer.GlobalIndexer().LaneWords(lane)

	raw := e.Raw(lane)
	tc.inject(raw, p)
	ev := events.WaitFor(t, lane, streamtest.Converge, tc.event.String()+"("+tc.fault.String()+")", streamtest.FaultIs(tc.event, tc.fault))
	if tc.deactivates && (ev.Disposition == nil || ev.Disposition.Action != schemas.ActionDeactivateAndSnapshot) {
		t.Errorf("disposition %+v, want DEACTIVATE_AND_SNAPSHOT", ev.Disposition)
	}
	if tc.deactivates {
		// Replay from the snapshot reaches the same bad record: the lane asks for a snapshot and
		// waits, with the table exactly as before the bad record.
		events.WaitFor(t, lane, streamtest.Converge, "SNAPSHOT_REQUESTED", streamtest.KindIs(schemas.EventSnapshotRequested))
		if got := ri.Indexer.GlobalIndexer().LaneWords(lane); !slices.Equal(got, before) {
			t.Fatal("the table changed: the bad record or its replay wrote to the lane")
		}
		if ri.Indexer.EligibleLanes() != 0 {
			t.Fatal("a faulted lane is still eligible")
		}
		if st := streamtest.LaneStatus(ri, lane); st.Recoveries < 1 {
			t.Errorf("no recovery by seek happened: %+v", st)
		}
		p.Snapshot() // the relay answers the request
	} else {
		// The lane publishes its status after a record's effects: once its applied position
		// passes the injected records, whatever they did to the lane has happened.
		testenv.WaitUntil(t, streamtest.Converge, "the lane processes the injected records", func() bool { return streamtest.LaneStatus(ri, lane).AppliedOffset >= raw.Last })
		if ri.Indexer.GlobalIndexer().ReadyLanes()&(1<<lane) == 0 {
			t.Fatal("the lane left service; this fault must only reject the record")
		}
		if got := ri.Indexer.GlobalIndexer().LaneWords(lane); !slices.Equal(got, before) {
			t.Fatal("the table changed")
		}
	}
	p.StoreChain(5, p.Chains[1], 4)
	p.StoreChain(5, nil, 0)
	streamtest.WaitLane(t, ri, p, streamtest.Converge)
	if tc.deadLetter {
		testenv.WaitUntil(t, streamtest.Converge, "a dead-letter record", func() bool { return len(dead.Snapshot()) > 0 })
		d, err := e.Codec.DecodeDeadLetter(dead.Snapshot()[0].Value)
		if err != nil || d.SourceTopic != e.Topics.Lanes || d.SourcePartition != lane || d.Reason == "" {
			t.Fatalf("dead letter %+v (%v): want the source coordinates and a reason", d, err)
		}
	}
}

// TestAwaitingLaneAsksForSnapshot: a lane that is not ready and meets an incomplete snapshot
// (RetrySnapshot: keep the lease, take the next snapshot) also asks the relay for one, because
// an idle relay writes its next snapshot only after its SnapshotIdleInterval; the lane installs
// the snapshot that answers.
func TestAwaitingLaneAsksForSnapshot(t *testing.T) {
	t.Parallel()
	const lane = 7
	e := streamtest.NewEnv(t, 4096) // 2,048 buckets: a snapshot is 3 chunks of 1,000 words
	p := e.Producer(lane, 1)
	events := e.WatchEvents()
	cfg := e.IndexerConfig()
	cfg.RetrySnapshotRequestGap = 50 * time.Millisecond
	ri := e.StartIndexer(e.Manifest(61, lane), cfg)

	requested := streamtest.KindIs(schemas.EventSnapshotRequested)
	events.WaitFor(t, lane, streamtest.Converge, "SNAPSHOT_REQUESTED (start-up: no snapshot retained)", requested)
	// The next request must not be held back by the gap: let the gap pass since the first one.
	first := time.Now()
	testenv.WaitUntil(t, streamtest.Converge, "the retry gap passes", func() bool { return time.Since(first) > cfg.RetrySnapshotRequestGap })
	e.Raw(lane).Chunks(p.ID, 0, make([]uint64, p.State.BucketCount()), 1000, []int{0, 2, 1})
	events.WaitFor(t, lane, streamtest.Converge, "AWAITING_SNAPSHOT(SNAPSHOT_ASSEMBLY)",
		streamtest.FaultIs(schemas.EventAwaitingSnapshot, schemas.FaultSnapshotAssembly))
	testenv.WaitUntil(t, streamtest.Converge, "the awaiting lane asks for a snapshot again", func() bool {
		return events.Count(lane, requested) >= 2 && streamtest.LaneStatus(ri, lane).SnapshotRequests >= 2
	}, func() string { return fmt.Sprintf("%d requests", streamtest.LaneStatus(ri, lane).SnapshotRequests) })
	p.Snapshot() // the relay answers
	streamtest.WaitLane(t, ri, p, streamtest.Converge)
}
