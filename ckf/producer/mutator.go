package producer

import (
	"math"
	"math/bits"
	"unsafe"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/ckf/internal/hugepage"
	"github.com/ckf-stream/ckf-stream/ckf/internal/prefetch"
)

// Mutator (producer §6): SplitMix64, bounded-kick insertion with full rollback,
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
	addr    ckf.Addressing
	words   []uint64
	rng     SplitMix64
	touched []Touch   // touched-log buffer, len == cap == maxKicks+1
	keys    probeKeys // inline addressing for the hot paths (mutator_addr.go)
}

// NewPackedFilter allocates bucketCount zero words for addr (bucketCount =
// addr.BucketCount()) with the RNG at LaneRngSeed(addr.Seed(), 0) and a
// touched-log scratch of capacity maxKicks+1, allocated once here (an
// insert does not allocate). A byte size that overflows returns
// ErrCapacityOverflow.
func NewPackedFilter(addr ckf.Addressing, maxKicks uint64) (*PackedFilter, error) {
	n := addr.BucketCount()
	if n == 0 || n > math.MaxInt/8 || maxKicks > ckf.MaxKicks {
		return nil, &ckf.BuildError{Kind: ckf.BuildCapacityOverflow}
	}
	words := make([]uint64, n)
	hugepage.Advise(words) // random bucket reads: huge pages spare most TLB misses
	return &PackedFilter{
		addr:    addr,
		words:   words,
		rng:     SplitMix64{State: LaneRngSeed(addr.Seed(), 0)},
		touched: make([]Touch, maxKicks+1),
		keys:    newProbeKeys(addr),
	}, nil
}

// Addressing returns the filter's addressing.
func (f *PackedFilter) Addressing() ckf.Addressing { return f.addr }

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
//
// Unlike the mutations it addresses through ckf.Addressing.Probe, which reads
// delta(fp) from the addressing's 256 KiB table instead of evaluating the
// second hash: a lookup has no relocation walk whose dependent chain the
// table read would lengthen, and independent lookups overlap that read with
// their neighbours' work (0.85x the time of the evaluated form for lookups in
// a 2^12-bucket filter, performance §9).
func (f *PackedFilter) Contains(hash uint64) bool {
	return f.ContainsProbe(f.addr.Probe(hash))
}

// prefetch starts loading both candidate buckets of hash (see ckf/internal/prefetch); an
// Insert, Remove or Contains of hash shortly after then finds them in cache.
func (f *PackedFilter) prefetch(hash uint64) {
	fp, a := f.keys.probe(hash)
	w := f.words
	prefetch.Line(unsafe.Pointer(&w[a]))
	prefetch.Line(unsafe.Pointer(&w[a^f.keys.delta(fp)]))
}

// ContainsProbe is Contains for a precomputed probe. Both buckets are
// always loaded and tested without a data-dependent branch: a hit is equally
// likely to sit in either bucket, so a short-circuit would mispredict about
// half of all hits.
func (f *PackedFilter) ContainsProbe(p ckf.Probe) bool {
	w := f.words
	rep := ckf.BroadcastFingerprint(p.Fingerprint)
	da := w[p.BucketA] ^ rep
	db := w[p.BucketB] ^ rep
	return ((da-ckf.SlotLowBits)&^da|(db-ckf.SlotLowBits)&^db)&ckf.SlotHighBits != 0
}

// Insert stores one fingerprint of hash with at most maxKicks relocations
// (producer §6.2). On success it returns the touched log in write order (a
// bucket may appear more than once); the slice aliases internal scratch and
// is valid only until the next mutation. On failure it restores every
// logged word in reverse order, so the words are identical to before, and
// returns ErrCapacityExhausted with a nil log. The RNG is advanced even
// when it fails, and (when both candidates are full) even for maxKicks == 0
// ("relocation-free admission").
func (f *PackedFilter) Insert(hash uint64, maxKicks uint64) ([]Touch, error) {
	fp, a := f.keys.probe(hash)
	words := f.words
	wa := words[a]
	if z := ckf.ZeroLanes16(wa); z != 0 {
		return f.place(a, wa, z, fp), nil
	}
	return f.insertB(fp, a, a^f.keys.delta(fp), wa, maxKicks)
}

// InsertProbe is Insert for a precomputed probe.
func (f *PackedFilter) InsertProbe(p ckf.Probe, maxKicks uint64) ([]Touch, error) {
	wa := f.words[p.BucketA]
	if z := ckf.ZeroLanes16(wa); z != 0 {
		return f.place(p.BucketA, wa, z, p.Fingerprint), nil
	}
	return f.insertB(p.Fingerprint, p.BucketA, p.BucketB, wa, maxKicks)
}

// The procedure below is producer §6.2 step for step (a, then b, then the walk). It
// departs from a literal transcription only where nothing can observe it:
// the lowest empty slot is found with one SWAR mask instead of a branch per
// slot, delta(fp) is computed rather than read from the 256 KiB table (a
// cache access less on each step of the walk's dependent chain), and the
// RNG state and the touched log live in registers and in a buffer allocated
// once, so the walk neither appends nor writes the filter struct per step.

// place writes fp into the lowest empty slot of bucket (whose word is
// before; z = ZeroLanes16(before) != 0) and returns the one-entry log.
func (f *PackedFilter) place(bucket, before, z uint64, fp uint16) []Touch {
	f.words[bucket] = before | uint64(fp)<<(uint(bits.TrailingZeros64(z))&48)
	log := f.touched
	log[0] = Touch{Bucket: bucket, Before: before}
	return log[:1:1]
}

// insertB continues Insert once bucket a (word wa) is known to be full.
func (f *PackedFilter) insertB(fp uint16, a, b, wa, maxKicks uint64) ([]Touch, error) {
	wb := f.words[b]
	if z := ckf.ZeroLanes16(wb); z != 0 {
		return f.place(b, wb, z, fp), nil
	}
	return f.relocate(fp, a, b, wa, wb, maxKicks)
}

// relocate is the bounded kick walk of producer §6.2, entered when both candidates
// (words wa, wb) are full. It is a separate function so that its loop gets
// a register allocation of its own.
func (f *PackedFilter) relocate(fp uint16, a, b, wa, wb, maxKicks uint64) ([]Touch, error) {
	words := f.words
	rng, r := splitMixStep(f.rng.State) // drawn even when maxKicks == 0
	bucket, before := a, wa
	if r&1 != 0 {
		bucket, before = b, wb
	}
	log := f.touched
	if uint64(len(log)) <= maxKicks {
		log = f.growTouched(maxKicks)
	}
	keys := f.keys
	for k := uint64(0); k < maxKicks; k++ {
		rng, r = splitMixStep(rng)
		shift := uint(r&3) * 16
		words[bucket] = before&^(0xFFFF<<shift) | uint64(fp)<<shift
		log[k] = Touch{Bucket: bucket, Before: before}
		fp = uint16(before >> shift) // the evicted fingerprint
		bucket ^= keys.delta(fp)
		before = words[bucket]
		if z := ckf.ZeroLanes16(before); z != 0 {
			words[bucket] = before | uint64(fp)<<(uint(bits.TrailingZeros64(z))&48)
			log[k+1] = Touch{Bucket: bucket, Before: before}
			f.rng.State = rng
			return log[: k+2 : k+2], nil
		}
	}
	f.rng.State = rng
	for i := int(maxKicks) - 1; i >= 0; i-- {
		t := log[i]
		words[t.Bucket] = t.Before
	}
	return nil, ckf.ErrCapacityExhausted
}

// growTouched enlarges the touched-log buffer for a call whose maxKicks
// exceeds the one the filter was built with.
func (f *PackedFilter) growTouched(maxKicks uint64) []Touch {
	f.touched = make([]Touch, maxKicks+1)
	return f.touched
}

// splitMixStep is SplitMix64.Next on a state held in a register: it returns
// the advanced state and the output.
func splitMixStep(s uint64) (uint64, uint64) {
	s += splitMixIncrement
	z := s
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
	z = (z ^ (z >> 27)) * 0x94D049BB133111EB
	return s, z ^ (z >> 31)
}

// Remove clears one slot holding hash's fingerprint, trying bucket A then
// B (producer §6.3), and returns the write. Any slot with the same fingerprint
// in either candidate is equivalent (same representation). If neither
// bucket holds the fingerprint it returns ErrIndexerInvariantViolation (the
// caller believed the hash resident) and changes nothing. Both words are
// loaded before either is tested; the lowest matching slot of A wins, then
// the lowest of B, exactly as the sequential search would choose.
func (f *PackedFilter) Remove(hash uint64) (Touch, error) {
	fp, a := f.keys.probe(hash)
	b := a ^ f.keys.delta(fp)
	words := f.words
	wa, wb := words[a], words[b]
	rep := ckf.BroadcastFingerprint(fp)
	ma, mb := ckf.ZeroLanes16(wa^rep), ckf.ZeroLanes16(wb^rep)
	bucket, before, m := a, wa, ma
	if ma == 0 {
		bucket, before, m = b, wb, mb
	}
	if m == 0 {
		return Touch{}, ckf.NewEventError(ckf.EventIndexerInvariantViolation, "fingerprint not found in either candidate bucket")
	}
	words[bucket] = before &^ (0xFFFF << (uint(bits.TrailingZeros64(m)) & 48))
	return Touch{Bucket: bucket, Before: before}, nil
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
