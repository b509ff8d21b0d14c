package eval

import (
	"encoding/binary"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/zeebo/xxh3"
)

// The mapping of a trace's hash ids to the project's block hashes (docs/EVALUATION.md, "Block
// hashes"). It is deterministic and depends on nothing but the id and its prefix:
//
//   - the local block hash (KvBlock.tokens_hash, and what routers query with) of hash id h is
//     XXH3-64(LE64(h), seed 1337): the id stands for the block's tokens;
//   - the canonical hash of a block is the relay's own chain over the local hashes
//     (docs/producers-and-routers.md, section 5): c0 = l0, ci = XXH3-64(LE64(ci-1) || LE64(li),
//     seed 1337);
//   - the simulated engines use the canonical hash as their own block id (KvBlock.block_hash,
//     parent_hash and removals), as vLLM's prefix-cache ids also hash the whole prefix.
//
// A block is therefore identified by its whole prefix: the same id after different prefixes
// (an id that is not prefix-consistent) is two different blocks, as it would be in an engine.

// LocalHash is the local block hash of hash id h: XXH3-64(LE64(h), seed 1337).
func LocalHash(h uint64) uint64 {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], h)
	return xxh3.HashSeed(b[:], ckf.ChainHashSeed)
}

// LocalHashes returns the local block hashes of ids.
func LocalHashes(ids []uint64) []uint64 {
	out := make([]uint64, len(ids))
	for i, h := range ids {
		out[i] = LocalHash(h)
	}
	return out
}

// BlockKeys returns the canonical hashes of ids' blocks: the chain of their local hashes. The
// simulated engines name blocks by them.
func BlockKeys(ids []uint64) []uint64 {
	return ckf.SequenceHashes(LocalHashes(ids))
}
