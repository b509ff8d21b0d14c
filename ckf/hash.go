package ckf

import (
	"encoding/binary"
	"math/bits"
	"slices"

	"github.com/zeebo/xxh3"
)

// Hashing (producer §2). Every hash is XXH3-64 (xxh3_64bits_withSeed) over
// little-endian integer encodings, computed with github.com/zeebo/xxh3.

// ChainHashSeed is CHAIN_XXH3_SEED, the seed of the rolling sequence hash
// and the unsalted token-block hash seed.
const ChainHashSeed uint64 = 1337

// LocalBlockHash is the hash of one block's token content (tokens_hash in
// KV events).
type LocalBlockHash uint64

// ExternalBlockHash is an engine-specific block id (block_hash, parent_hash
// and removal ids in KV events). It is opaque: it never enters the filter.
type ExternalBlockHash uint64

// CanonicalHash is CanonicalSequenceBlockHash: Dynamo's rolling sequence
// hash, the only value that enters ownership, the filter and publication.
type CanonicalHash uint64

// CanonicalRoot is root(local) = local.
func CanonicalRoot(local LocalBlockHash) CanonicalHash { return CanonicalHash(local) }

// CanonicalChild is child(parent, local) = NextSequenceHash(parent, local).
func CanonicalChild(parent CanonicalHash, local LocalBlockHash) CanonicalHash {
	return CanonicalHash(NextSequenceHash(uint64(parent), uint64(local)))
}

// NextSequenceHash is compute_next_seq_hash:
// XXH3_64(LE64(parent) || LE64(local), seed 1337). It does not allocate.
//
// It is XXH3's 9..16-byte path specialised to exactly 16 bytes and the
// constant seed (xxh3_small.go): the first eight input bytes are parent and
// the last eight are local, so the input is the two words themselves and no
// byte slice is built, and the seeded keys fold to the constants seqKeyLo
// and seqKeyHi. It inlines, so a block costs one 64×64→128-bit multiply and
// one avalanche multiply. Bit-identical to xxh3.HashSeed on the 16-byte
// encoding (TestNextSequenceHashMatchesXXH3, FuzzNextSequenceHash).
func NextSequenceHash(parent, local uint64) uint64 {
	lo := parent ^ seqKeyLo
	hi := local ^ seqKeyHi
	mh, ml := bits.Mul64(lo, hi)
	return xxh3Avalanche(16 + bits.ReverseBytes64(lo) + hi + (mh ^ ml))
}

// genericNextSequenceHash is the unspecialised formula: xxh3.HashSeed of the
// 16-byte little-endian encoding. It is the reference the specialised form is
// tested against.
func genericNextSequenceHash(parent, local uint64) uint64 {
	var b [16]byte
	binary.LittleEndian.PutUint64(b[0:8], parent)
	binary.LittleEndian.PutUint64(b[8:16], local)
	return xxh3.HashSeed(b[:], ChainHashSeed)
}

// SequenceHashes is compute_seq_hash_for_block: out[0] = local[0] and
// out[i] = NextSequenceHash(out[i-1], local[i]). An empty input yields an
// empty (nil) result. It allocates exactly one slice; see
// AppendSequenceHashes for the allocation-free form.
func SequenceHashes(local []uint64) []uint64 {
	if len(local) == 0 {
		return nil
	}
	return AppendSequenceHashes(make([]uint64, 0, len(local)), local)
}

// AppendSequenceHashes appends the sequence hashes of local to dst and
// returns the extended slice. It does not allocate when cap(dst)-len(dst) >=
// len(local); otherwise it grows dst once.
func AppendSequenceHashes(dst []uint64, local []uint64) []uint64 {
	if len(local) == 0 {
		return dst
	}
	n := len(dst)
	dst = slices.Grow(dst, len(local))[:n+len(local)]
	sequenceChain(dst[n:], local, seqKeyLo, 16)
	return dst
}

// sequenceChain sets out[0] = local[0] and out[i] = NextSequenceHash(out[i-1],
// local[i]); len(local) >= len(out) >= 1. It is NextSequenceHash unrolled
// into the loop with the chain's critical path (the multiply, the
// avalanche and the keying of the next parent) kept as short as the
// algorithm allows:
//
//   - the terms of the sum that do not depend on the multiply are added
//     first, so only the last addition waits for it;
//   - the next parent's key is XOR-ed into the avalanche's last step
//     alongside its shift instead of after it: lo' = (acc ^ keyLo) ^
//     (acc >> 32) is out[i] ^ keyLo with one operation less on the path.
//
// keyLo (seqKeyLo) and length (16) are parameters, not constants, and the
// function is not inlined, because the compiler moves constant terms of a
// sum or an XOR to the end of the expression, which would put them back on
// the critical path.
//
//go:noinline
func sequenceChain(out, local []uint64, keyLo, length uint64) {
	local = local[:len(out)] // same length: no bounds checks in the loop
	prev := local[0]
	out[0] = prev
	lo := prev ^ keyLo
	for i := 1; i < len(out); i++ {
		hi := local[i] ^ seqKeyHi
		mh, ml := bits.Mul64(lo, hi)
		acc := bits.ReverseBytes64(lo) + hi + length + (mh ^ ml)
		acc ^= acc >> 37
		acc *= xxh3AvalanchePrime
		out[i] = acc ^ acc>>32
		lo = (acc ^ keyLo) ^ (acc >> 32)
	}
}

// BlockSaltSeed returns the seed of the token-block hash (producer §2.2): 1337,
// plus (wrapping) XXH3_64(loraName, seed 0) when loraName is non-empty, plus
// (wrapping) XXH3_64(cacheNamespace, seed 1) when cacheNamespace is
// non-empty.
func BlockSaltSeed(loraName, cacheNamespace string) uint64 {
	seed := ChainHashSeed
	if loraName != "" {
		seed += xxh3.HashStringSeed(loraName, 0)
	}
	if cacheNamespace != "" {
		seed += xxh3.HashStringSeed(cacheNamespace, 1)
	}
	return seed
}

// TokenBlockHash hashes one block of token ids:
// XXH3_64(LE32(t0) || ... || LE32(t{k-1}), saltSeed). Use BlockSaltSeed to
// obtain saltSeed. A block with extra keys (multimodal identifiers, a cache
// salt) is hashed by TokenBlockHashExtra, which equals this function when
// there are none.
func TokenBlockHash(tokens []uint32, saltSeed uint64) LocalBlockHash {
	var stack [256]byte
	var buf []byte
	if n := 4 * len(tokens); n <= len(stack) {
		buf = stack[:n]
	} else {
		buf = make([]byte, n)
	}
	for i, t := range tokens {
		binary.LittleEndian.PutUint32(buf[4*i:], t)
	}
	return LocalBlockHash(xxh3.HashSeed(buf, saltSeed))
}

// TokenBlockHashes splits tokens into windows of blockSize tokens (the
// trailing partial block is dropped) and hashes each with TokenBlockHash.
// blockSize <= 0 yields nil.
func TokenBlockHashes(tokens []uint32, blockSize int, saltSeed uint64) []LocalBlockHash {
	if blockSize <= 0 {
		return nil
	}
	n := len(tokens) / blockSize
	out := make([]LocalBlockHash, 0, n)
	for i := 0; i < n; i++ {
		out = append(out, TokenBlockHash(tokens[i*blockSize:(i+1)*blockSize], saltSeed))
	}
	return out
}

// TokenSequenceHashes is what a router computes for a prompt: the local hashes of its full
// token blocks (TokenBlockHashes with saltSeed) chained into sequence hashes (SequenceHashes),
// which are the canonical hashes a DC holds for that prefix. blockSize <= 0 or fewer than
// blockSize tokens yield nil.
func TokenSequenceHashes(tokens []uint32, blockSize int, saltSeed uint64) []CanonicalHash {
	return canonicalChain(TokenBlockHashes(tokens, blockSize, saltSeed))
}

// canonicalChain chains local block hashes into the canonical hashes of their prefixes (nil for
// none).
func canonicalChain(local []LocalBlockHash) []CanonicalHash {
	if len(local) == 0 {
		return nil
	}
	out := make([]CanonicalHash, len(local))
	out[0] = CanonicalRoot(local[0])
	for i := 1; i < len(local); i++ {
		out[i] = CanonicalChild(out[i-1], local[i])
	}
	return out
}

// EagleTokenBlockHashes is the Eagle variant: windows of blockSize+1 tokens
// starting every blockSize tokens; a window that would run past the end is
// dropped (interpretation: "trailing partial block dropped" applied to the
// (blockSize+1)-token window). blockSize <= 0 yields nil.
func EagleTokenBlockHashes(tokens []uint32, blockSize int, saltSeed uint64) []LocalBlockHash {
	if blockSize <= 0 {
		return nil
	}
	var out []LocalBlockHash
	for start := 0; start+blockSize+1 <= len(tokens); start += blockSize {
		out = append(out, TokenBlockHash(tokens[start:start+blockSize+1], saltSeed))
	}
	return out
}
