package index

import (
	"encoding/binary"
	"testing"

	"github.com/ckf-stream/ckf-stream/ckf"
)

// fuzzReader decodes fuzz input into small integers; it returns zeros when
// the input is exhausted.
type fuzzReader struct{ b []byte }

func (r *fuzzReader) byte() byte {
	if len(r.b) == 0 {
		return 0
	}
	v := r.b[0]
	r.b = r.b[1:]
	return v
}

func (r *fuzzReader) u64() uint64 {
	var buf [8]byte
	n := copy(buf[:], r.b)
	r.b = r.b[n:]
	return binary.LittleEndian.Uint64(buf[:])
}

// small returns a sequence-like value clustered around the interesting
// range (0..7) with occasional extremes.
func (r *fuzzReader) small() uint64 {
	switch v := r.byte(); {
	case v == 0xFF:
		return ^uint64(0)
	case v == 0xFE:
		return ^uint64(0) - 1
	default:
		return uint64(v & 7)
	}
}

// FuzzLaneIngestor drives one lane ingestor with arbitrary sequences of
// assignments, snapshots (arbitrary sizes, identities, sequences), deltas
// (arbitrary bases, sequences and images, including out-of-range and
// duplicate buckets) and drain markers. Invariants after every input: no
// panic; an input that does not report SnapshotInstalled or DeltaApplied
// leaves the table untouched; DeltaApplied changes exactly its images;
// the shared ready bit equals the ingestor's readiness; other lanes are
// never written.
func FuzzLaneIngestor(f *testing.F) {
	f.Add([]byte{0, 1, 1, 0, 0, 2, 0, 1, 1, 3, 5, 9, 4, 1})
	f.Add([]byte{0, 0, 1, 0, 16, 2, 0, 1, 2, 3, 5, 3, 5, 4, 2, 3, 0xFF, 0xFF})
	f.Add([]byte{0, 3, 1, 1, 0, 1, 3, 0, 2, 0, 1, 0, 4, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		const buckets = 16
		fx := newFixture(t, 2, buckets, 2)
		in := fx.claim(0)
		other := fx.claim(1)
		defer other.Close()
		defer in.Close()
		r := &fuzzReader{b: data}
		epoch := uint64(0)
		before := make([]uint64, buckets)
		for steps := 0; len(r.b) > 0 && steps < 64; steps++ {
			copy(before, fx.g.LaneWords(0))
			op := r.byte() % 6
			leaseEpoch := epoch
			if r.byte()%4 == 0 {
				leaseEpoch = r.small() // possibly foreign
			}
			id := fx.identity(0)
			if r.byte()%8 == 0 {
				id.Incarnation++
			}
			var out IngestOutcome
			switch op {
			case 0: // assign
				e := r.small()
				if in.Assign(id, fx.lease(0, e)) == nil {
					epoch = e
				}
				for b, v := range fx.g.LaneWords(0) {
					if v != before[b] {
						t.Fatal("assign wrote")
					}
				}
				continue
			case 1: // snapshot
				n := buckets
				if v := r.byte(); v%5 == 0 {
					n = int(v % 40)
				}
				words := make([]uint64, n)
				for i := range words {
					words[i] = uint64(r.byte())
				}
				s := &ckf.Snapshot{Identity: id, Lease: fx.lease(0, leaseEpoch), Sequence: r.small(), Buckets: words}
				out = in.InstallSnapshot(s)
				if out.Kind == OutcomeSnapshotInstalled {
					for b, v := range fx.g.LaneWords(0) {
						if v != words[b] {
							t.Fatal("snapshot words not installed")
						}
					}
				}
			case 2: // delta
				k := int(r.byte() % 6)
				imgs := make([]ckf.BucketImage, k)
				for i := range imgs {
					imgs[i] = ckf.BucketImage{Bucket: uint64(r.byte() % 20), Value: r.u64()}
				}
				d := &ckf.Delta{Identity: id, Lease: fx.lease(0, leaseEpoch), BaseSequence: r.small(), Sequence: r.small(), Images: imgs}
				out = in.ApplyDelta(d)
				if out.Kind == OutcomeDeltaApplied {
					want := append([]uint64(nil), before...)
					for _, im := range imgs {
						want[im.Bucket] = im.Value
					}
					for b, v := range fx.g.LaneWords(0) {
						if v != want[b] {
							t.Fatal("delta applied wrongly")
						}
					}
				}
			case 3: // drain
				out = in.CompleteDrain(ckf.DrainMarker{Lease: fx.lease(0, leaseEpoch), ExpectedSequence: r.small()})
			case 4:
				in.Retire()
			case 5: // snapshot that is always well formed on the current lease
				out = in.InstallSnapshot(fx.snapshot(0, epoch, r.small(), nil))
			}
			if out.Kind != OutcomeSnapshotInstalled && out.Kind != OutcomeDeltaApplied {
				for b, v := range fx.g.LaneWords(0) {
					if v != before[b] {
						t.Fatalf("op %d outcome %v wrote bucket %d", op, out, b)
					}
				}
			}
			if out.Kind == OutcomeLaneDeactivated {
				if d, ok := in.LastFailureDisposition(); !ok || d.Domain != ckf.DomainConsumerLane {
					t.Fatalf("deactivation without consumer disposition: %+v", d)
				}
			}
			if (fx.g.ReadyLanes()&1 != 0) != in.Ready() {
				t.Fatalf("ready bit %b vs ingestor %v", fx.g.ReadyLanes(), in.Ready())
			}
			if _, ok := in.InstalledSequence(); ok != in.Ready() {
				t.Fatal("installed sequence outside R")
			}
			for _, v := range fx.g.LaneWords(1) {
				if v != 0 {
					t.Fatal("another lane was written")
				}
			}
		}
	})
}
