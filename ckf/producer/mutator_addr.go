package producer

import "github.com/ckf-stream/ckf-stream/ckf"

// Inline addressing for the mutator's hot paths. The functions below
// evaluate exactly the formulas of producer §3 (tested against Addressing for
// every fingerprint and against the published vectors), specialised to the
// input sizes the spec fixes: XXH3-64 of an 8-byte little-endian hash (the
// 4..8-byte path of XXH3) and of a 2-byte little-endian fingerprint (the
// 1..3-byte path). Evaluating them inline avoids a hash call with a length
// switch per probe, and computing delta(fp) instead of reading the 256 KiB
// table keeps a cache access off the dependent chain of a relocation walk
// once the table no longer fits in L2 next to the words.

// XXH3 default-secret words used by those two paths.
const (
	xxh3Secret32x uint64 = 0xbe4ba423 ^ 0x396cfeb8 // secret u32 words 0 and 4
	xxh64Prime2   uint64 = 14029467366897019727
	xxh64Prime3   uint64 = 1609587929392839161
)

// probeKeys are the seed-derived constants of the inline addressing.
type probeKeys struct {
	mask    uint64 // bucket_count - 1
	hashKey uint64 // ckf.Addressing.MixKey: the seeded part of XXH3(LE64(h), seed)
	altKey  uint64 // keyed-input constant of XXH3(LE16(fp), seed ^ domain)
}

func newProbeKeys(a ckf.Addressing) probeKeys {
	seed := a.Seed()
	return probeKeys{
		mask:    a.BucketCount() - 1,
		hashKey: a.MixKey(),
		altKey:  xxh3Secret32x + (seed ^ ckf.AlternateBucketDomain),
	}
}

// mix is XXH3_64(LE64(h), seed).
func (k *probeKeys) mix(h uint64) uint64 { return ckf.Mix8(h, k.hashKey) }

// probe returns fingerprint and bucket_a of h; bucket_b = a ^ delta(fp).
func (k *probeKeys) probe(h uint64) (uint16, uint64) {
	m := k.mix(h)
	fp := uint16(m)
	if fp == 0 {
		fp = 1
	}
	return fp, (m >> 16) & k.mask
}

// delta is delta(fp) of producer §3: XXH3_64(LE16(fp), seed ^ domain) & mask,
// 0 -> 1.
func (k *probeKeys) delta(fp uint16) uint64 {
	c := uint64(fp)
	x := (c<<16 | c>>8 | 2<<8) ^ k.altKey // 1..3-byte path input for len 2
	x ^= x >> 33
	x *= xxh64Prime2
	x ^= x >> 29
	x *= xxh64Prime3
	d := (x ^ x>>32) & k.mask
	if d == 0 {
		d = 1
	}
	return d
}
