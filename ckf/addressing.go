package ckf

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"sync"

	"github.com/zeebo/xxh3"
)

// AlternateBucketDomain is XOR'ed into the filter seed for the
// alternate-bucket hash (ALTERNATE_BUCKET_DOMAIN).
const AlternateBucketDomain uint64 = 0x9E3779B97F4A7C15

// Probe is CkfProbe: the fingerprint of a canonical hash and its two
// candidate buckets. Fingerprint is never 0 and BucketA != BucketB.
type Probe struct {
	Fingerprint uint16
	BucketA     uint64
	BucketB     uint64
}

// Addressing maps a canonical hash to its Probe (producer §3):
//
//	mixed       = XXH3_64(LE64(h), seed)
//	fingerprint = uint16(mixed), 0 -> 1
//	bucket_a    = (mixed >> 16) & mask
//	bucket_b    = alternate(bucket_a, fingerprint)
//	alternate(b, fp) = b XOR delta(fp)
//	delta(fp)   = XXH3_64(LE16(fp), seed XOR AlternateBucketDomain) & mask, 0 -> 1
//
// delta depends only on the fingerprint, so it is precomputed for all 65,536
// fingerprints at construction (identical to the direct formula; tested).
// The table is shared by every Addressing with the same (seed, bucket count)
// and never written after construction, so an Addressing is immutable, safe
// to copy and safe for concurrent use without synchronisation. (Memory
// ordering: a table is completely written before sync.Map.LoadOrStore
// publishes it, and every reader obtains it through sync.Map.Load or from
// the goroutine that stored it, so the sync.Map's happens-before edge
// covers all 65,536 entries.)
//
// The zero Addressing is not usable; build one with NewAddressing.
type Addressing struct {
	mask   uint64
	mixKey uint64 // xxh3Mix8Key(seed): the seeded part of XXH3_64(LE64(h), seed)
	delta  *altTable
	seed   uint64
}

// altTable holds delta(fp) for every fingerprint. Entries are uint32 (the
// masked delta fits whenever bucketCount <= 2^32; larger tables are rejected
// by NewAddressing, see there).
type altTable [1 << 16]uint32

// maxAddressingBucketCount bounds NewAddressing so that the masked delta fits
// in the uint32 table. 2^32 buckets are 32 GiB of producer words, far above
// the WAN cap of 2^24.
const maxAddressingBucketCount = 1 << 32

type altKey struct{ seed, mask uint64 }

var altTables sync.Map // altKey -> *altTable

// NewAddressing builds the addressing for a power-of-two bucketCount >= 2
// (and <= 2^32, an implementation bound recorded in the report) and the
// filter seed. An invalid bucket count returns an error wrapping
// ErrInvalidBucketCount and a zero Addressing.
func NewAddressing(bucketCount, seed uint64) (Addressing, error) {
	if bucketCount < 2 || bucketCount&(bucketCount-1) != 0 || bucketCount > maxAddressingBucketCount {
		return Addressing{}, fmt.Errorf("%w: %d (need a power of two in 2..=2^32)", ErrInvalidBucketCount, bucketCount)
	}
	mask := bucketCount - 1
	key := altKey{seed: seed, mask: mask}
	if t, ok := altTables.Load(key); ok {
		return Addressing{mask: mask, mixKey: xxh3Mix8Key(seed), delta: t.(*altTable), seed: seed}, nil
	}
	t := new(altTable)
	for fp := 0; fp < 1<<16; fp++ {
		t[fp] = uint32(directAltDelta(uint16(fp), seed, mask))
	}
	actual, _ := altTables.LoadOrStore(key, t)
	return Addressing{mask: mask, mixKey: xxh3Mix8Key(seed), delta: actual.(*altTable), seed: seed}, nil
}

// directAltDelta is the unmemoised delta(fp) of producer §3.
func directAltDelta(fp uint16, seed, mask uint64) uint64 {
	var b [2]byte
	binary.LittleEndian.PutUint16(b[:], fp)
	d := xxh3.HashSeed(b[:], seed^AlternateBucketDomain) & mask
	if d == 0 {
		d = 1
	}
	return d
}

// BucketCount returns the number of buckets (mask + 1).
func (a Addressing) BucketCount() uint64 { return a.mask + 1 }

// Seed returns the filter seed.
func (a Addressing) Seed() uint64 { return a.seed }

// Format returns the version-1 FormatIdentity of this addressing.
func (a Addressing) Format() FormatIdentity { return NewFormatIdentity(a.seed, a.mask+1) }

// Probe computes the fingerprint and candidate buckets of hash. It does not
// allocate, branch or bounds-check, and it inlines into its callers: mixed
// is the specialised 8-byte XXH3 (see xxh3Mix8Key; the mix is written out
// here because a call to a helper, even an inlined one, would take Probe
// over the inliner's budget), the zero fingerprint becomes 1 by
// arithmetic, and a uint16 index into the 65,536-entry delta table
// needs no check. Equal to the generic formula (genericProbe) for every
// hash and seed (TestAddressingProbeMatchesGeneric, FuzzAddressingProbe).
func (a Addressing) Probe(hash uint64) Probe {
	// Mix8(hash, a.mixKey), written out: the call would take Probe past the inlining budget.
	mixed := (bits.RotateLeft64(hash, 32) ^ bits.RotateLeft64(hash, 17) ^ bits.RotateLeft64(hash, 56) ^ a.mixKey) * xxh3RRMXMXPrime
	mixed = (mixed ^ (mixed>>35 + 8)) * xxh3RRMXMXPrime
	mixed ^= mixed >> 28
	fp := uint16(mixed)
	fp += uint16((uint32(fp) - 1) >> 31) // 0 -> 1: only 0 - 1 reaches bit 31
	ba := (mixed >> 16) & a.mask
	return Probe{Fingerprint: fp, BucketA: ba, BucketB: ba ^ uint64(a.delta[fp])}
}

// genericProbe is Probe computed with the generic library call: the
// reference the specialised form is tested against.
func (a Addressing) genericProbe(hash uint64) Probe {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], hash)
	mixed := xxh3.HashSeed(b[:], a.seed)
	fp := uint16(mixed)
	if fp == 0 {
		fp = 1
	}
	ba := (mixed >> 16) & a.mask
	return Probe{Fingerprint: fp, BucketA: ba, BucketB: ba ^ uint64(a.delta[fp])}
}

// MixKey is the seeded constant of this addressing's hash mix: Mix8(hash, a.MixKey()) is
// XXH3_64(LE64(hash), seed), the mix Probe starts from.
func (a Addressing) MixKey() uint64 { return a.mixKey }

// Mix8 is XXH3_64(LE64(hash), seed) given key = xxh3Mix8Key(seed) (Addressing.MixKey): XXH3's
// 4..8-byte path with its seeded part folded into key (see xxh3Mix8Key). It inlines.
func Mix8(hash, key uint64) uint64 {
	mixed := (bits.RotateLeft64(hash, 32) ^ bits.RotateLeft64(hash, 17) ^ bits.RotateLeft64(hash, 56) ^ key) * xxh3RRMXMXPrime
	mixed = (mixed ^ (mixed>>35 + 8)) * xxh3RRMXMXPrime
	return mixed ^ mixed>>28
}

// AltBucket is alternate(bucket, fp) = bucket XOR delta(fp). It is an
// involution: AltBucket(AltBucket(b, fp), fp) == b, and never returns bucket
// itself. bucket must be < BucketCount().
func (a Addressing) AltBucket(bucket uint64, fp uint16) uint64 {
	return bucket ^ uint64(a.delta[fp])
}
