package indexer_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/app/indexer"
	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/uber-go/tally/v4"
)

// TestQueriesNeverMatchAlarm plants, through the HTTP query path, each way routers' hashes can
// miss the engines' while lane 1's DC holds the prompt (token blocks of 4 with LoRA "a" and
// namespace "ns"): another block size, another hash seed, no LoRA salt, no namespace salt, the
// engines' block hashes sent as local hashes, sequence hashes sent as local hashes, a tokenizer
// of another model. Each raises the lane's
// alarm within one window (60 s of the test's clock): the /v1/lanes view and the metric
// ckf_query_never_match say so. The right prompt raises none, a mix of hits and misses (a DC
// whose prompts are merely new) raises none, and neither do prompts that share only their first
// block with what the DC holds (every answer depth 1, as with sequence hashes, but the second
// hash names no stored block).
func TestQueriesNeverMatchAlarm(t *testing.T) {
	const blockSize, blocks = 4, 6
	toks := testTokens(blockSize, blocks)
	local := tokenChain(blockSize, blocks)
	asList := func(v any) string { b, _ := json.Marshal(v); return string(b) }
	seqs := ckf.SequenceHashes(local)
	wrongSeed := ckf.TokenBlockHashes(toks, blockSize, ckf.BlockSaltSeed("a", "ns")+1)
	otherTokenizer := make([]uint32, len(toks))
	for i, tk := range toks {
		otherTokenizer[i] = tk + 1
	}
	right := fmt.Sprintf(`{"token_ids": %s, "block_size": %d, "lora_name": "a", "cache_namespace": "ns", "lane_mask": 2}`, asList(toks), blockSize)
	for _, c := range []struct {
		cause string
		body  string
		alarm bool
	}{
		{"the engines' prompt", right, false},
		{"another block size", fmt.Sprintf(`{"token_ids": %s, "block_size": 8, "lora_name": "a", "cache_namespace": "ns", "lane_mask": 2}`, asList(toks)), true},
		{"another hash seed", fmt.Sprintf(`{"local_block_hashes": %s, "lane_mask": 2}`, asList(wrongSeed)), true},
		{"no LoRA salt", fmt.Sprintf(`{"token_ids": %s, "block_size": 4, "cache_namespace": "ns", "lane_mask": 2}`, asList(toks)), true},
		{"no namespace salt", fmt.Sprintf(`{"token_ids": %s, "block_size": 4, "lora_name": "a", "lane_mask": 2}`, asList(toks)), true},
		// The engines' own block hashes (external ids; install numbers lane 1's token chain 12..17)
		// where tokens hashes belong.
		{"engine block hashes sent as local hashes", `{"local_block_hashes": [12, 13, 14, 15, 16, 17], "lane_mask": 2}`, true},
		// Sequence hashes where local hashes belong: the first is the first local hash, so the
		// first block matches and every answer reads depth 1; the second hash, as sent, is the
		// stored second block's sequence hash (a chained stop).
		{"sequence hashes sent as local hashes", fmt.Sprintf(`{"local_block_hashes": %s, "lane_mask": 2}`, asList(seqs)), true},
		// The engines' prompt cut short after its first block, then new blocks: depth 1 on every
		// query, with a second hash that names no stored block. No alarm.
		{"prompts sharing only their first block", fmt.Sprintf(`{"local_block_hashes": [%d, 424242, 434343], "lane_mask": 2}`, local[0]), false},
		{"a tokenizer of another model", fmt.Sprintf(`{"token_ids": %s, "block_size": 4, "lora_name": "a", "cache_namespace": "ns", "lane_mask": 2}`, asList(otherTokenizer)), true},
		{"new prompts among matching ones", "", false},
	} {
		t.Run(c.cause, func(t *testing.T) {
			tb := newTable(t)
			now := time.Unix(1_780_000_000, 0)
			scope := tally.NewTestScope("", nil)
			sample := indexer.WatchNeverMatch(tb.api, &tb.firstBlocks, 0b10_0011, func() time.Time { return now }, scope)
			sample()
			for i := 0; i < 60; i++ {
				body := c.body
				if body == "" { // every other query a prompt no DC holds yet
					body = right
					if i%2 == 1 {
						body = fmt.Sprintf(`{"local_block_hashes": [%d, 2, 3], "lane_mask": 2}`, 7000+i)
					}
				}
				rec := httptest.NewRecorder()
				tb.mux.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/prefix-matches", strings.NewReader(body)))
				if rec.Code != http.StatusOK {
					t.Fatalf("query %d: %d %s", i, rec.Code, rec.Body)
				}
				now = now.Add(time.Second)
				if i%5 == 4 {
					sample()
				}
			}
			var lane1 *indexer.NeverMatchView
			for _, lv := range tb.api.View().Lanes {
				if lv.Lane == 1 {
					lane1 = lv.NeverMatch
				}
			}
			if lane1 == nil || lane1.Alarm != c.alarm || lane1.Searches < 50 {
				t.Fatalf("lane 1's never-match view %+v, want alarm %v after 60 queries in 60 s", lane1, c.alarm)
			}
			var gauge float64
			for _, g := range scope.Snapshot().Gauges() {
				if g.Name() == "query.never_match" && g.Tags()["lane"] == "1" {
					gauge = g.Value()
				}
			}
			if (gauge == 1) != c.alarm {
				t.Errorf("ckf_query_never_match{lane=1} %v, want alarm %v", gauge, c.alarm)
			}
		})
	}
}
