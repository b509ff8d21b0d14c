package lanes

import (
	"encoding/binary"
	"slices"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/ckf-stream/ckf-stream/streams"
)

type faultCase struct {
	name   string
	inject func(r *laneRig, p *rigProducer)
	// event and fault are the lane event the injection must yield.
	event schemas.LaneEventKind
	fault schemas.LaneFaultKind
	// deactivates: the lane leaves service (and recovers by seek, then by a requested
	// snapshot since the bad record stays in the log). Otherwise it stays ready throughout.
	deactivates bool
	deadLetter  bool
}

// TestIndexerLaneFaults injects every lane fault of the spec as records of the lane's partition,
// handed to the lane's owner in process (rig_internal_test.go). Each yields its exact fault in a
// lane event and leaves the table as it was; a deactivated lane seeks back to its snapshot,
// replays into the same bad record, asks for a snapshot, and then converges to the producer's
// exact state — the state of a replica that never faulted.
func TestIndexerLaneFaults(t *testing.T) {
	t.Parallel()
	valid := func(p *rigProducer) [2]uint64 { return [2]uint64{1, p.State.Word(1)} }
	last := func(p *rigProducer) uint64 { return p.Publisher.LastSequence() }
	cases := []faultCase{
		{name: "gap", event: schemas.EventDeactivated, fault: schemas.FaultBaseSequenceMismatch, deactivates: true,
			inject: func(r *laneRig, p *rigProducer) { r.delta(p.ID, last(p)+1, last(p)+2, valid(p)) }},
		{name: "non-contiguous", event: schemas.EventDeactivated, fault: schemas.FaultNonContiguousSequence, deactivates: true,
			inject: func(r *laneRig, p *rigProducer) { r.delta(p.ID, last(p), last(p)+2, valid(p)) }},
		{name: "empty", event: schemas.EventDeactivated, fault: schemas.FaultEmptyDelta, deactivates: true,
			inject: func(r *laneRig, p *rigProducer) { r.delta(p.ID, last(p), last(p)+1) }},
		{name: "duplicate-image", event: schemas.EventDeactivated, fault: schemas.FaultDuplicateImageIndex, deactivates: true,
			inject: func(r *laneRig, p *rigProducer) { r.delta(p.ID, last(p), last(p)+1, valid(p), valid(p)) }},
		{name: "out-of-range-image", event: schemas.EventDeactivated, fault: schemas.FaultInvalidImageIndex, deactivates: true, deadLetter: true,
			inject: func(r *laneRig, p *rigProducer) {
				// The encoder refuses such a record: encode a valid one and patch the last image's
				// bucket (the packed images end the record) to bucket_count.
				b := r.encode(schemas.LaneRecord{Identity: streams.WireIdentity(p.ID), Kind: schemas.LaneDelta,
					Delta: schemas.Delta{BaseSequence: last(p), Sequence: last(p) + 1,
						Images: schemas.AppendImage(schemas.AppendImage(nil, 1, p.State.Word(1)), 2, 7)}})
				binary.LittleEndian.PutUint64(b[len(b)-schemas.ImageSize:], p.State.BucketCount())
				r.append(b)
			}},
		{name: "wrong-identity", event: schemas.EventDeactivated, fault: schemas.FaultWrongIdentity, deactivates: true,
			inject: func(r *laneRig, p *rigProducer) {
				other := p.ID
				other.Incarnation++
				r.delta(other, last(p), last(p)+1, valid(p))
			}},
		{name: "wrong-pool", event: schemas.EventDeactivated, fault: schemas.FaultWrongIdentity, deactivates: true, deadLetter: true,
			inject: func(r *laneRig, p *rigProducer) {
				other := p.ID
				other.Pool = rigPool(999)
				r.delta(other, last(p), last(p)+1, valid(p))
			}},
		{name: "snapshot-while-ready", event: schemas.EventDeactivated, fault: schemas.FaultSnapshotWhileReady, deactivates: true,
			inject: func(r *laneRig, p *rigProducer) {
				r.chunks(p.ID, last(p)+5, p.State.CopyWords(), 1000, []int{0, 1, 2})
			}},
		{name: "truncated", event: schemas.EventDeactivated, fault: schemas.FaultMalformedRecord, deactivates: true, deadLetter: true,
			inject: func(r *laneRig, p *rigProducer) {
				b := r.encode(schemas.LaneRecord{Identity: streams.WireIdentity(p.ID), Kind: schemas.LaneDelta,
					Delta: schemas.Delta{BaseSequence: last(p), Sequence: last(p) + 1, Images: schemas.AppendImage(nil, 1, 2)}})
				r.append(b[:len(b)-5])
			}},
		{name: "garbage", event: schemas.EventDeactivated, fault: schemas.FaultMalformedRecord, deactivates: true, deadLetter: true,
			inject: func(r *laneRig, p *rigProducer) { r.append([]byte{0xde, 0xad, 0xbe, 0xef, 1, 2, 3}) }},
		{name: "bad-chunk-order", event: schemas.EventRecordRejected, fault: schemas.FaultSnapshotAssembly,
			inject: func(r *laneRig, p *rigProducer) {
				next := p.ID
				next.Incarnation++ // a new producer generation whose snapshot arrives out of order
				r.chunks(next, 0, make([]uint64, p.State.BucketCount()), 1000, []int{0, 2, 1})
			}},
		{name: "foreign-pool-snapshot", event: schemas.EventRecordRejected, fault: schemas.FaultWrongLaneOwner, deadLetter: true,
			inject: func(r *laneRig, p *rigProducer) {
				other := p.ID
				other.Pool = rigPool(998)
				r.chunks(other, 0, make([]uint64, p.State.BucketCount()), 1000, []int{0, 1, 2})
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
	r := newLaneRig(t, lane, 4096, testConfig()) // 2,048 buckets: a snapshot is 3 chunks of 700 words
	p := r.producer(1)
	p.snapshot()
	p.storeChain(6, nil, 0)
	p.storeChain(6, p.Chains[0], 2)
	r.mustConverge(p)
	before := r.words()

	tc.inject(r, p)
	injectedEnd := int64(len(r.log)) - 1
	r.drain()
	r.ledgerAgrees(t, "after the fault")
	ev := r.out.find(t, tc.event.String()+"("+tc.fault.String()+")", faultIs(tc.event, tc.fault))
	if tc.deactivates && (ev.Disposition == nil || ev.Disposition.Action != schemas.ActionDeactivateAndSnapshot) {
		t.Errorf("disposition %+v, want DEACTIVATE_AND_SNAPSHOT", ev.Disposition)
	}
	if tc.deactivates {
		// Replay from the snapshot reaches the same bad record: the lane asks for a snapshot and
		// waits, with the table exactly as before the bad record.
		r.out.find(t, "SNAPSHOT_REQUESTED", kindIs(schemas.EventSnapshotRequested))
		if len(r.out.requests) == 0 || r.out.requests[0].Lane != lane {
			t.Fatalf("snapshot requests %+v: want one for lane %d", r.out.requests, lane)
		}
		if got := r.words(); !slices.Equal(got, before) {
			t.Fatal("the table changed: the bad record or its replay wrote to the lane")
		}
		if r.ix.EligibleLanes() != 0 {
			t.Fatal("a faulted lane is still eligible")
		}
		if st := r.status(); st.Recoveries < 1 || st.Phase != PhaseWaitingForSnapshot {
			t.Errorf("no recovery by seek happened, or the lane does not wait for a snapshot: %+v", st)
		}
		p.snapshot() // the relay answers the request
	} else {
		if st := r.status(); st.AppliedOffset < injectedEnd {
			t.Fatalf("applied offset %d, want the injected records (up to %d) processed", st.AppliedOffset, injectedEnd)
		}
		if !r.ready() {
			t.Fatal("the lane left service; this fault must only reject the record")
		}
		if got := r.words(); !slices.Equal(got, before) {
			t.Fatal("the table changed")
		}
	}
	p.storeChain(5, p.Chains[1], 4)
	p.storeChain(5, nil, 0)
	r.mustConverge(p)
	r.ledgerAgrees(t, "converged")
	if tc.deadLetter {
		if len(r.out.dead) != 1 {
			t.Fatalf("%d dead letters, want exactly one (a replay does not repeat it)", len(r.out.dead))
		}
		d := r.out.dead[0]
		if d.SourceTopic != r.ix.cfg.Topics.Lanes || d.SourcePartition != lane || d.Reason == "" {
			t.Fatalf("dead letter %+v: want the source coordinates and a reason", d)
		}
	}
}

// TestAwaitingLaneAsksForSnapshot: a lane that is not ready and meets an incomplete snapshot
// (RetrySnapshot: keep the lease, take the next snapshot) also asks the relay for one, because
// an idle relay writes its next snapshot only after its SnapshotIdleInterval; the lane installs
// the snapshot that answers. A retry within RetrySnapshotRequestGap of the last request does not
// ask again.
func TestAwaitingLaneAsksForSnapshot(t *testing.T) {
	t.Parallel()
	const lane = 7
	cfg := testConfig()
	cfg.RetrySnapshotRequestGap = time.Hour // only the first incomplete snapshot asks
	r := newLaneRig(t, lane, 4096, cfg)
	p := r.producer(1)
	r.l.requestSnapshot("no snapshot retained", schemas.ReasonNoSnapshotRetained) // as Run does at start-up
	requested := kindIs(schemas.EventSnapshotRequested)
	if r.out.count(requested) != 1 {
		t.Fatalf("events %s: want one SNAPSHOT_REQUESTED at start-up", r.out.kinds())
	}
	r.l.st.lastRequest = time.Time{} // the start-up request was long ago: the gap passed

	r.chunks(p.ID, 0, make([]uint64, p.State.BucketCount()), 1000, []int{0, 2, 1})
	r.drain()
	r.out.find(t, "AWAITING_SNAPSHOT(SNAPSHOT_ASSEMBLY)", faultIs(schemas.EventAwaitingSnapshot, schemas.FaultSnapshotAssembly))
	if n, st := r.out.count(requested), r.status(); n != 2 || st.SnapshotRequests != 2 {
		t.Fatalf("%d SNAPSHOT_REQUESTED events, %d requests in the status: want 2 (the awaiting lane asks again)", n, st.SnapshotRequests)
	}
	// Within the gap, a second incomplete snapshot does not ask again.
	r.chunks(p.ID, 0, make([]uint64, p.State.BucketCount()), 1000, []int{1})
	r.chunks(p.ID, 0, make([]uint64, p.State.BucketCount()), 1000, []int{0, 2})
	r.drain()
	if n := r.out.count(requested); n != 2 {
		t.Fatalf("%d SNAPSHOT_REQUESTED events: a retry within the gap asked again", n)
	}
	p.snapshot() // the relay answers
	r.mustConverge(p)
}
