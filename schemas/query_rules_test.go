package schemas

import (
	"strings"
	"testing"
)

// TestQueryBlockRules: the block size is 1 to MaxBlockSize; extra keys go with token ids, at
// most one entry per window of the block size, a trailing partial window counted, and none is
// always legal.
func TestQueryBlockRules(t *testing.T) {
	for n, want := range map[uint32]bool{0: false, 1: true, MaxBlockSize: true, MaxBlockSize + 1: false} {
		if ValidBlockSize(n) != want {
			t.Errorf("ValidBlockSize(%d) = %v", n, !want)
		}
	}
	tokens := func(n int) QueryRequest {
		return QueryRequest{Input: InputTokenIDs, Tokens: make(PackedU32, n*TokenSize), BlockSize: 4}
	}
	for _, c := range []struct {
		q       QueryRequest
		entries int
		err     string
	}{
		{QueryRequest{Input: InputLocalBlockHashes}, 0, ""},
		{QueryRequest{Input: InputLocalBlockHashes}, 1, "go with token_ids"},
		{tokens(8), 2, ""},
		{tokens(9), 3, ""},
		{tokens(8), 3, "block_extra_keys has 3 entries for 8 token ids in blocks of 4 (at most one per block: 2)"},
		{tokens(0), 1, "has 1 entries for 0 token ids"},
		{QueryRequest{Input: InputTokenIDs}, 1, "need a block_size"},
	} {
		err := CheckBlockExtraKeys(&c.q, c.entries)
		if (err == nil) != (c.err == "") || err != nil && !strings.Contains(err.Error(), c.err) {
			t.Errorf("%d tokens, block size %d, %d entries: %v, want %q", c.q.Tokens.Len(), c.q.BlockSize, c.entries, err, c.err)
		}
	}
}
