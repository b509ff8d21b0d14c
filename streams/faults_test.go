package streams_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/ckf-stream/ckf-stream/streams"
	"github.com/ckf-stream/ckf-stream/testenv"
	"github.com/twmb/franz-go/pkg/kgo"
)

// rawLane writes hand-made records to a lane partition, bypassing every producer-side check.
type rawLane struct {
	t     testing.TB
	e     *testEnv
	lane  uint8
	cl    *kgo.Client
	codec *schemas.Codec
	last  int64 // offset of the last record written
}

func (e *testEnv) raw(lane uint8) *rawLane {
	return &rawLane{t: e.t, e: e, lane: lane, codec: e.codec,
		cl: e.cluster.Client(e.t, streams.LaneWriterClientOpts()...)}
}

func (r *rawLane) value(v []byte) {
	r.t.Helper()
	rec := &kgo.Record{Topic: r.e.topics.Lanes, Partition: int32(r.lane), Value: v}
	if err := r.cl.ProduceSync(context.Background(), rec).FirstErr(); err != nil {
		r.t.Fatal(err)
	}
	r.last = rec.Offset
}

func (r *rawLane) encode(rec schemas.LaneRecord) []byte {
	r.t.Helper()
	b, err := r.codec.EncodeLaneRecord(rec)
	if err != nil {
		r.t.Fatalf("encode: %v", err)
	}
	return b
}

func (r *rawLane) delta(id ckf.ProducerIdentity, base, seq uint64, images ...[2]uint64) {
	r.t.Helper()
	var packed []byte
	for _, im := range images {
		packed = schemas.AppendImage(packed, im[0], im[1])
	}
	r.value(r.encode(schemas.LaneRecord{Identity: streams.WireIdentity(id), Kind: schemas.LaneDelta,
		Delta: schemas.Delta{BaseSequence: base, Sequence: seq, Images: packed}}))
}

// chunks writes a snapshot of words as chunks of size n, in the given chunk order.
func (r *rawLane) chunks(id ckf.ProducerIdentity, seq uint64, words []uint64, n int, order []int) {
	r.t.Helper()
	count := (len(words) + n - 1) / n
	for _, i := range order {
		lo, hi := i*n, min((i+1)*n, len(words))
		r.value(r.encode(schemas.LaneRecord{Identity: streams.WireIdentity(id), Kind: schemas.LaneSnapshotChunk,
			Snapshot: schemas.SnapshotChunk{Sequence: seq, ChunkIndex: uint32(i), ChunkCount: uint32(count),
				FirstBucket: uint64(lo), TotalBuckets: uint64(len(words)), Words: schemas.AppendU64s(nil, words[lo:hi])}}))
	}
}

type faultCase struct {
	name   string
	inject func(r *rawLane, p *testProducer)
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
	valid := func(p *testProducer) [2]uint64 { return [2]uint64{1, p.state.Word(1)} }
	last := func(p *testProducer) uint64 { return p.pub.LastSequence() }
	cases := []faultCase{
		{name: "gap", event: schemas.EventDeactivated, fault: schemas.FaultBaseSequenceMismatch, deactivates: true,
			inject: func(r *rawLane, p *testProducer) { r.delta(p.id, last(p)+1, last(p)+2, valid(p)) }},
		{name: "non-contiguous", event: schemas.EventDeactivated, fault: schemas.FaultNonContiguousSequence, deactivates: true,
			inject: func(r *rawLane, p *testProducer) { r.delta(p.id, last(p), last(p)+2, valid(p)) }},
		{name: "empty", event: schemas.EventDeactivated, fault: schemas.FaultEmptyDelta, deactivates: true,
			inject: func(r *rawLane, p *testProducer) { r.delta(p.id, last(p), last(p)+1) }},
		{name: "duplicate-image", event: schemas.EventDeactivated, fault: schemas.FaultDuplicateImageIndex, deactivates: true,
			inject: func(r *rawLane, p *testProducer) { r.delta(p.id, last(p), last(p)+1, valid(p), valid(p)) }},
		{name: "out-of-range-image", event: schemas.EventDeactivated, fault: schemas.FaultInvalidImageIndex, deactivates: true, deadLetter: true,
			inject: func(r *rawLane, p *testProducer) {
				// The encoder refuses such a record: encode a valid one and patch the last image's
				// bucket (the packed images end the record) to bucket_count.
				b := r.encode(schemas.LaneRecord{Identity: streams.WireIdentity(p.id), Kind: schemas.LaneDelta,
					Delta: schemas.Delta{BaseSequence: last(p), Sequence: last(p) + 1,
						Images: schemas.AppendImage(schemas.AppendImage(nil, 1, p.state.Word(1)), 2, 7)}})
				binary.LittleEndian.PutUint64(b[len(b)-schemas.ImageSize:], p.state.BucketCount())
				r.value(b)
			}},
		{name: "wrong-identity", event: schemas.EventDeactivated, fault: schemas.FaultWrongIdentity, deactivates: true,
			inject: func(r *rawLane, p *testProducer) {
				other := p.id
				other.Incarnation++
				r.delta(other, last(p), last(p)+1, valid(p))
			}},
		{name: "wrong-pool", event: schemas.EventDeactivated, fault: schemas.FaultWrongIdentity, deactivates: true, deadLetter: true,
			inject: func(r *rawLane, p *testProducer) {
				other := p.id
				other.Pool = testPool(999)
				r.delta(other, last(p), last(p)+1, valid(p))
			}},
		{name: "snapshot-while-ready", event: schemas.EventDeactivated, fault: schemas.FaultSnapshotWhileReady, deactivates: true,
			inject: func(r *rawLane, p *testProducer) {
				r.chunks(p.id, last(p)+5, p.state.CopyWords(), 1000, []int{0, 1, 2})
			}},
		{name: "truncated", event: schemas.EventDeactivated, fault: schemas.FaultMalformedRecord, deactivates: true, deadLetter: true,
			inject: func(r *rawLane, p *testProducer) {
				b := r.encode(schemas.LaneRecord{Identity: streams.WireIdentity(p.id), Kind: schemas.LaneDelta,
					Delta: schemas.Delta{BaseSequence: last(p), Sequence: last(p) + 1, Images: schemas.AppendImage(nil, 1, 2)}})
				r.value(b[:len(b)-5])
			}},
		{name: "garbage", event: schemas.EventDeactivated, fault: schemas.FaultMalformedRecord, deactivates: true, deadLetter: true,
			inject: func(r *rawLane, p *testProducer) { r.value([]byte{0xde, 0xad, 0xbe, 0xef, 1, 2, 3}) }},
		{name: "bad-chunk-order", event: schemas.EventRecordRejected, fault: schemas.FaultSnapshotAssembly,
			inject: func(r *rawLane, p *testProducer) {
				next := p.id
				next.Incarnation++ // a new producer generation whose snapshot arrives out of order
				r.chunks(next, 0, make([]uint64, p.state.BucketCount()), 1000, []int{0, 2, 1})
			}},
		{name: "foreign-pool-snapshot", event: schemas.EventRecordRejected, fault: schemas.FaultWrongLaneOwner, deadLetter: true,
			inject: func(r *rawLane, p *testProducer) {
				other := p.id
				other.Pool = testPool(998)
				r.chunks(other, 0, make([]uint64, p.state.BucketCount()), 1000, []int{0, 1, 2})
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
	e := newTestEnv(t, 4096) // 2,048 buckets: a snapshot is 3 chunks of 700 words
	p := e.producer(lane, 1)
	p.snapshot()
	p.storeChain(6, nil, 0)
	p.storeChain(6, p.chains[0], 2)
	events := e.watchEvents()
	dead := e.records(e.topics.DeadLetter, 1)
	ri := e.startIndexer(e.manifest(51, lane), e.indexerConfig())
	waitLane(t, ri, p, converge)
	before := ri.ix.GlobalIndexer().LaneWords(lane)

	raw := e.raw(lane)
	tc.inject(raw, p)
	ev := events.waitFor(t, lane, converge, tc.event.String()+"("+tc.fault.String()+")", faultIs(tc.event, tc.fault))
	if tc.deactivates && (ev.Disposition == nil || ev.Disposition.Action != schemas.ActionDeactivateAndSnapshot) {
		t.Errorf("disposition %+v, want DEACTIVATE_AND_SNAPSHOT", ev.Disposition)
	}
	if tc.deactivates {
		// Replay from the snapshot reaches the same bad record: the lane asks for a snapshot and
		// waits, with the table exactly as before the bad record.
		events.waitFor(t, lane, converge, "SNAPSHOT_REQUESTED", kindIs(schemas.EventSnapshotRequested))
		if got := ri.ix.GlobalIndexer().LaneWords(lane); !slices.Equal(got, before) {
			t.Fatal("the table changed: the bad record or its replay wrote to the lane")
		}
		if ri.ix.EligibleLanes() != 0 {
			t.Fatal("a faulted lane is still eligible")
		}
		if st := laneStatus(ri, lane); st.Recoveries < 1 {
			t.Errorf("no recovery by seek happened: %+v", st)
		}
		p.snapshot() // the relay answers the request
	} else {
		// The lane publishes its status after a record's effects: once its applied position
		// passes the injected records, whatever they did to the lane has happened.
		testenv.WaitUntil(t, converge, "the lane processes the injected records", func() bool { return laneStatus(ri, lane).AppliedOffset >= raw.last })
		if ri.ix.GlobalIndexer().ReadyLanes()&(1<<lane) == 0 {
			t.Fatal("the lane left service; this fault must only reject the record")
		}
		if got := ri.ix.GlobalIndexer().LaneWords(lane); !slices.Equal(got, before) {
			t.Fatal("the table changed")
		}
	}
	p.storeChain(5, p.chains[1], 4)
	p.storeChain(5, nil, 0)
	waitLane(t, ri, p, converge)
	if tc.deadLetter {
		testenv.WaitUntil(t, converge, "a dead-letter record", func() bool { return len(dead.snapshot()) > 0 })
		d, err := e.codec.DecodeDeadLetter(dead.snapshot()[0].Value)
		if err != nil || d.SourceTopic != e.topics.Lanes || d.SourcePartition != lane || d.Reason == "" {
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
	e := newTestEnv(t, 4096) // 2,048 buckets: a snapshot is 3 chunks of 1,000 words
	p := e.producer(lane, 1)
	events := e.watchEvents()
	cfg := e.indexerConfig()
	cfg.RetrySnapshotRequestGap = 50 * time.Millisecond
	ri := e.startIndexer(e.manifest(61, lane), cfg)

	requested := kindIs(schemas.EventSnapshotRequested)
	events.waitFor(t, lane, converge, "SNAPSHOT_REQUESTED (start-up: no snapshot retained)", requested)
	// The next request must not be held back by the gap: let the gap pass since the first one.
	first := time.Now()
	testenv.WaitUntil(t, converge, "the retry gap passes", func() bool { return time.Since(first) > cfg.RetrySnapshotRequestGap })
	e.raw(lane).chunks(p.id, 0, make([]uint64, p.state.BucketCount()), 1000, []int{0, 2, 1})
	events.waitFor(t, lane, converge, "AWAITING_SNAPSHOT(SNAPSHOT_ASSEMBLY)",
		faultIs(schemas.EventAwaitingSnapshot, schemas.FaultSnapshotAssembly))
	testenv.WaitUntil(t, converge, "the awaiting lane asks for a snapshot again", func() bool {
		return events.count(lane, requested) >= 2 && laneStatus(ri, lane).SnapshotRequests >= 2
	}, func() string { return fmt.Sprintf("%d requests", laneStatus(ri, lane).SnapshotRequests) })
	p.snapshot() // the relay answers
	waitLane(t, ri, p, converge)
}
