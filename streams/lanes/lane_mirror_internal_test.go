package lanes

import (
	"testing"

	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/twmb/franz-go/pkg/kgo"
)

// A mirror's replays on a lane partition (design §8, consumer §9.8): a MirrorMaker killed and
// restarted resumes from the source positions it last flushed, so a contiguous run of records
// already delivered arrives again, in order. The lane handles it by the protocol's sequences.

// relog replaces the rig's partition by recs, in order, at offsets 0, 1, ... (a mirror writes
// copies at offsets of its own).
func (r *laneRig) relog(recs []*kgo.Record) {
	r.log = nil
	for _, rec := range recs {
		c := *rec
		c.Offset = int64(len(r.log))
		r.log = append(r.log, &c)
	}
}

// TestMirrorReplayInsideASnapshot: replays inside two snapshots, the first while the lane is
// not ready (chunks 0 and 1 again after chunk 1), the second while it is (the last delta before
// the snapshot and chunks 0 and 1 again after chunk 1): the lane skips the repeats
// (ReplayedRecords), installs the first snapshot (the second is stale for the ready lane,
// consumer §3.3) without an assembly fault or a snapshot request, and converges. A second replay, of the whole snapshot and the deltas after it on the ready lane,
// is stale and changes nothing. A chunk above the next expected one is still a gap that
// abandons the assembly.
func TestMirrorReplayInsideASnapshot(t *testing.T) {
	t.Parallel()
	r := newLaneRig(t, 3, 4096, testConfig()) // 2,048 buckets: a snapshot is 3 chunks of 700 words
	p := r.producer(1)
	first1 := p.snapshot()
	p.storeChain(8, nil, 0)
	p.storeChain(8, nil, 0)
	lastDelta := int64(len(r.log)) - 1
	first := p.snapshot()
	if n := int64(len(r.log)) - first; n != 3 || first1 != 0 || lastDelta <= first1+2 {
		t.Fatalf("the snapshot has %d chunks (want 3), the first starts at %d, the last delta is at %d", n, first1, lastDelta)
	}
	p.storeChain(8, nil, 0)
	p.storeChain(4, p.Chains[0], 5)
	source := r.log
	// The lane is not ready during the first snapshot, ready during the second.
	mirrored := append([]*kgo.Record{}, source[0], source[1])
	mirrored = append(mirrored, source[0], source[1]) // a replay from chunk 0
	mirrored = append(mirrored, source[2:first]...)
	c0, c1, c2 := source[first], source[first+1], source[first+2]
	mirrored = append(mirrored, c0, c1)
	mirrored = append(mirrored, source[lastDelta], c0, c1) // a replay from the delta before it
	mirrored = append(mirrored, c2)
	mirrored = append(mirrored, source[first+3:]...)
	r.relog(mirrored)
	r.mustConverge(p)
	st := r.status()
	if st.ReplayedRecords != 5 || st.Snapshots != 1 || len(st.Faults) != 0 || st.SnapshotRequests != 0 {
		t.Fatalf("replayed %d records (want 5: two chunks, then a delta and two chunks), %d snapshots, faults %v, %d snapshot requests; events %s",
			st.ReplayedRecords, st.Snapshots, st.Faults, st.SnapshotRequests, r.out.kinds())
	}
	if n := r.out.count(faultIs(schemas.EventAwaitingSnapshot, schemas.FaultSnapshotAssembly)); n != 0 {
		t.Fatalf("%d assembly faults: events %s", n, r.out.kinds())
	}

	// The whole snapshot and the deltas after it again, on the ready lane: stale, nothing moves.
	before := len(r.log)
	for _, rec := range append([]*kgo.Record{c0, c1, c2}, source[first+3:]...) {
		r.append(rec.Value)
	}
	r.mustConverge(p)
	if st := r.status(); st.Snapshots != 1 || len(st.Faults) != 0 || !r.ready() {
		t.Fatalf("after replaying %d records on the ready lane: %d snapshots, faults %v, ready %v", len(r.log)-before, st.Snapshots, st.Faults, r.ready())
	}

	// A gap is not a replay: chunk 2 after chunk 0 abandons the assembly of the next snapshot.
	next := int64(len(r.log))
	p.snapshot()
	gapped := append([]*kgo.Record{}, r.log[:next]...)
	gapped = append(gapped, r.log[next], r.log[next+2])
	r.relog(gapped)
	r.drain()
	if n := r.out.count(faultIs(schemas.EventRecordRejected, schemas.FaultSnapshotAssembly)); n != 1 {
		t.Fatalf("%d rejected assemblies after chunk 2 followed chunk 0, want 1: events %s", n, r.out.kinds())
	}
}
