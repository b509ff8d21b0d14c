package ckf

import "math/bits"

// Specialised XXH3-64 for the two fixed input lengths of the hot paths
// (producer §2.2 and §3): 16 bytes (the sequence chain, seed 1337) and 8
// bytes (addressing, the filter seed). XXH3 chooses its mixing by input
// length; for 1..16 bytes it reads no more than two overlapping words of
// input and a few fixed words of its 192-byte default secret, so for a
// known length the whole function is a handful of word operations. The
// generic library call (github.com/zeebo/xxh3.HashSeed) takes a byte slice
// and dispatches on its length at run time; the specialised forms take the
// words directly. NextSequenceHash and Addressing.Probe inline into their
// callers (TestHotPathsInline); AppendSequenceHashes runs its own loop
// (sequenceChain).
//
// All are bit-identical to xxh3.HashSeed on the little-endian encoding of
// their inputs: TestNextSequenceHashMatchesXXH3,
// TestAppendSequenceHashesMatchesGenericChain,
// TestAddressingMixMatchesXXH3ForAnySeed, TestAddressingProbeMatchesGeneric,
// FuzzNextSequenceHash and FuzzAddressingProbe compare them over random and
// edge-case inputs, and the spec vectors (vectors_test.go) pin them.

// xxh3SecretWord* are little-endian 64-bit words of the XXH3 default secret
// (its bytes 8..55, read at the byte offset in the name), as the XXH3
// algorithm defines them. Only these six words are used by the 4..8- and
// 9..16-byte paths.
const (
	xxh3SecretWord8  uint64 = 0x1cad21f72c81017c
	xxh3SecretWord16 uint64 = 0xdb979083e96dd4de
	xxh3SecretWord24 uint64 = 0x1f67b3b7a4a44072
	xxh3SecretWord32 uint64 = 0x78e5c0cc4ee679cb
	xxh3SecretWord40 uint64 = 0x2172ffcc7dd05a82
	xxh3SecretWord48 uint64 = 0x8e2443f7744608b8
)

// The 9..16-byte path keys the first and the last eight input bytes with
// (secret[24:32] XOR secret[32:40]) + seed and (secret[40:48] XOR
// secret[48:56]) - seed. For exactly 16 bytes the two words do not overlap:
// they are parent and local. With the chain seed fixed, both keys are
// constants.
const (
	seqKeyLo = (xxh3SecretWord24 ^ xxh3SecretWord32) + ChainHashSeed
	seqKeyHi = (xxh3SecretWord40 ^ xxh3SecretWord48) - ChainHashSeed
)

// xxh3Avalanche is XXH3's final mix of the 9..16-byte path.
func xxh3Avalanche(h uint64) uint64 {
	h ^= h >> 37
	h *= xxh3AvalanchePrime
	return h ^ h>>32
}

// xxh3AvalanchePrime is the multiplier of xxh3Avalanche.
const xxh3AvalanchePrime uint64 = 0x165667919e3779f9

// xxh3Mix8Key returns the per-seed key of XXH3_64(LE64(v), seed), which
// Addressing.Probe evaluates as
//
//	h := rotl(v, 32) ^ rotl(v, 17) ^ rotl(v, 56) ^ key
//	h *= xxh3RRMXMXPrime; h ^= h>>35 + 8; h *= xxh3RRMXMXPrime; h ^= h >> 28
//
// Derivation from XXH3's 4..8-byte path: the seed is first widened by
// XOR-ing its byte-swapped low half into its high half; the input word is
// the first four bytes as the high half and the last four as the low half,
// which for an 8-byte input is rotl(v, 32); it is keyed by XOR with
// (secret[8:16] XOR secret[16:24]) - widened seed, and the keyed word x goes
// through the rrmxmx mix with length 8, which starts with
// x ^= rotl(x, 49) ^ rotl(x, 24). That step is linear in XOR, so with
// x = rotl(v, 32) ^ k it equals (rotl(v, 32) ^ rotl(v, 17) ^ rotl(v, 56)) ^
// (k ^ rotl(k, 49) ^ rotl(k, 24)); the second bracket depends only on the
// seed and is returned here. The three rotations of v are independent, which
// also shortens the dependency chain by two operations.
func xxh3Mix8Key(seed uint64) uint64 {
	widened := seed ^ uint64(bits.ReverseBytes32(uint32(seed)))<<32
	k := (xxh3SecretWord8 ^ xxh3SecretWord16) - widened
	return k ^ bits.RotateLeft64(k, 49) ^ bits.RotateLeft64(k, 24)
}

// xxh3RRMXMXPrime is the multiplier of XXH3's rrmxmx mix (4..8-byte path).
const xxh3RRMXMXPrime uint64 = 0x9fb21c651e98df25
