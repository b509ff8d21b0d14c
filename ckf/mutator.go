package ckf

import "math"

// Mutator (spec §6): SplitMix64, bounded-kick insertion with full rollback,
// and removal over the producer's packed lane.

// splitMixIncrement is the SplitMix64 state increment (golden ratio).
const splitMixIncrement uint64 = 0x9E3779B97F4A7C15

// SplitMix64 is the producer's relocation RNG. The zero value is a valid
// generator with state 0. Not safe for concurrent use.
type SplitMix64 struct{ State uint64 }

// Next advances the state by 0x9E3779B97F4A7C15 and returns the mixed
// output.
func (s *SplitMix64) Next() uint64 {
	s.State += splitMixIncrement
	z := s.State
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
	z = (z ^ (z >> 27)) * 0x94D049BB133111EB
	return z ^ (z >> 31)
}

// LaneRngSeed is lane_rng_seed(seed, lane): s = seed XOR ((lane+1) *
// 0x9E3779B97F4A7C15) (wrapping), and the first SplitMix64 output from s is
// the initial RNG state. The producer uses lane 0; for DefaultSeed the
// result is 0xC050D0A84124DB84.
func LaneRngSeed(seed, lane uint64) uint64 {
	s := SplitMix64{State: seed ^ ((lane + 1) * splitMixIncrement)}
	return s.Next()
}

// Touch is one logged physical write: Bucket held Before until the write.
type Touch struct {
	Bucket uint64
	Before uint64
}

// PackedFilter is the producer's packed lane (OwnedPackedCkfLane) plus the
// mutator state: bucket words (all zero at start, word order = bucket
// order), the addressing, the relocation RNG and the touched-log scratch.
//
// It is not safe for concurrent use: the exact producer owns it from one
// goroutine (actor model). Readers that need a concurrent view receive
// snapshots or deltas, never the words themselves.
type PackedFilter struct {
	addr    Addressing
	words   []uint64
	rng     SplitMix64
	touched []Touch
}

// NewPackedFilter allocates bucketCount zero words for addr (bucketCount =
// addr.BucketCount()) with the RNG at LaneRngSeed(addr.Seed(), 0) and a
// touched-log scratch of capacity maxKicks+1. A byte size that overflows
// returns ErrCapacityOverflow.
func NewPackedFilter(addr Addressing, maxKicks uint64) (*PackedFilter, error) {
	n := addr.BucketCount()
	if n == 0 || n > math.MaxInt/8 || maxKicks > MaxKicks {
		return nil, &BuildError{Kind: BuildCapacityOverflow}
	}
	return &PackedFilter{
		addr:    addr,
		words:   make([]uint64, n),
		rng:     SplitMix64{State: LaneRngSeed(addr.Seed(), 0)},
		touched: make([]Touch, 0, maxKicks+1),
	}, nil
}

// Addressing returns the filter's addressing.
func (f *PackedFilter) Addressing() Addressing { return f.addr }

// Words returns the live bucket words. The caller must not modify them and
// must not retain them across a mutation.
func (f *PackedFilter) Words() []uint64 { return f.words }

// Word returns bucket b's word.
func (f *PackedFilter) Word(b uint64) uint64 { return f.words[b] }

// RngState returns the current RNG state (diagnostic / tests).
func (f *PackedFilter) RngState() uint64 { return f.rng.State }

// Contains reports whether a fingerprint of hash is in either candidate
// bucket (false positives possible, no false negatives for resident
// hashes). It does not allocate.
func (f *PackedFilter) Contains(hash uint64) bool {
	p := f.addr.Probe(hash)
	return f.ContainsProbe(p)
}

// ContainsProbe is Contains for a precomputed probe. Both buckets are
// always loaded and tested without a data-dependent branch: a hit is equally
// likely to sit in either bucket, so a short-circuit would mispredict about
// half of all hits.
func (f *PackedFilter) ContainsProbe(p Probe) bool {
	w := f.words
	rep := BroadcastFingerprint(p.Fingerprint)
	da := w[p.BucketA] ^ rep
	db := w[p.BucketB] ^ rep
	return ((da-swarOne)&^da|(db-swarOne)&^db)&swarHigh != 0
}

// Insert stores one fingerprint of hash with at most maxKicks relocations
// (spec §6.2). On success it returns the touched log in write order (a
// bucket may appear more than once); the slice aliases internal scratch and
// is valid only until the next mutation. On failure it restores every
// logged word in reverse order, so the words are identical to before, and
// returns ErrCapacityExhausted with a nil log. The RNG is advanced even
// when it fails, and (when both candidates are full) even for maxKicks == 0
// ("relocation-free admission").
func (f *PackedFilter) Insert(hash uint64, maxKicks uint64) ([]Touch, error) {
	return f.InsertProbe(f.addr.Probe(hash), maxKicks)
}

// InsertProbe is Insert for a precomputed probe.
func (f *PackedFilter) InsertProbe(p Probe, maxKicks uint64) ([]Touch, error) {
	f.touched = f.touched[:0]
	if f.tryPlace(p.BucketA, p.Fingerprint) || f.tryPlace(p.BucketB, p.Fingerprint) {
		return f.touched, nil
	}
	bucket := p.BucketA
	if f.rng.Next()&1 != 0 {
		bucket = p.BucketB
	}
	fp := p.Fingerprint
	for k := uint64(0); k < maxKicks; k++ {
		before := f.words[bucket]
		slot := int(f.rng.Next() & 3)
		evicted := Bucket(before).Slot(slot)
		f.words[bucket] = uint64(Bucket(before).WithSlot(slot, fp))
		f.touched = append(f.touched, Touch{Bucket: bucket, Before: before})
		fp = evicted
		bucket = f.addr.AltBucket(bucket, fp)
		if f.tryPlace(bucket, fp) {
			return f.touched, nil
		}
	}
	for i := len(f.touched) - 1; i >= 0; i-- {
		t := f.touched[i]
		f.words[t.Bucket] = t.Before
	}
	f.touched = f.touched[:0]
	return nil, ErrCapacityExhausted
}

// tryPlace writes fp into bucket's lowest empty slot and logs the write.
func (f *PackedFilter) tryPlace(bucket uint64, fp uint16) bool {
	before := Bucket(f.words[bucket])
	s, ok := before.FreeSlot()
	if !ok {
		return false
	}
	f.words[bucket] = uint64(before.WithSlot(s, fp))
	f.touched = append(f.touched, Touch{Bucket: bucket, Before: uint64(before)})
	return true
}

// Remove clears one slot holding hash's fingerprint, trying bucket A then
// B (spec §6.3), and returns the write. Any slot with the same fingerprint
// in either candidate is equivalent (same representation). If neither
// bucket holds the fingerprint it returns ErrIndexerInvariantViolation (the
// caller believed the hash resident) and changes nothing.
func (f *PackedFilter) Remove(hash uint64) (Touch, error) {
	p := f.addr.Probe(hash)
	for _, b := range [2]uint64{p.BucketA, p.BucketB} {
		before := Bucket(f.words[b])
		if s, ok := before.First(p.Fingerprint); ok {
			f.words[b] = uint64(before.WithSlot(s, 0))
			return Touch{Bucket: b, Before: uint64(before)}, nil
		}
	}
	return Touch{}, eventErr(EventIndexerInvariantViolation, "fingerprint not found in either candidate bucket")
}

// OccupiedBuckets counts non-zero words (full scan; diagnostic only).
func (f *PackedFilter) OccupiedBuckets() uint64 {
	var n uint64
	for _, w := range f.words {
		if w != 0 {
			n++
		}
	}
	return n
}
