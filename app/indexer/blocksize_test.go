package indexer_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/ckf-stream/ckf-stream/queryapi"
)

// TestTokenQueryOfAnotherBlockSizeRefused (consumer §6.5) over HTTP: lane 1's engines publish
// blocks of 4 tokens; a token query (JSON, both the plain and the general parser's forms) with
// block_size 8 that selects lane 1 is answered 400 INVALID_REQUEST naming 8, 4, the lane and
// its DC; with 4 it is answered; lane 0 (no size known) and a binary query of local block hashes
// are not judged; /v1/lanes shows each lane's block_size.
func TestTokenQueryOfAnotherBlockSizeRefused(t *testing.T) {
	tb := newTable(t)
	tb.blockSizes[1].Store(4)
	post := func(body string) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		tb.mux.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/prefix-matches", strings.NewReader(body)))
		return rec
	}
	toks := "[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16]"
	for _, body := range []string{
		fmt.Sprintf(`{"token_ids": %s, "block_size": 8}`, toks),
		fmt.Sprintf(`{"token_ids": %s, "block_size": 8, "lane_mask": 2, "correlation_id": "c-1"}`, toks),
		fmt.Sprintf(`{"token_ids": %s, "block_size": 8, "lora_name": "", "block_extra_keys": [null]}`, toks),
	} {
		resp := jsonProblem(t, post(body), http.StatusBadRequest, "INVALID_REQUEST")
		if !strings.Contains(resp.Error, "block_size 8, but the engines of lane 1 (dc 0000000000000011) publish blocks of 4 tokens") {
			t.Fatalf("%s: error %q", body, resp.Error)
		}
	}
	for _, body := range []string{
		fmt.Sprintf(`{"token_ids": %s, "block_size": 4}`, toks),
		fmt.Sprintf(`{"token_ids": %s, "block_size": 8, "lane_mask": 1}`, toks), // lane 0 knows no size
	} {
		if rec := post(body); rec.Code != http.StatusOK {
			t.Fatalf("%s: %d %s", body, rec.Code, rec.Body)
		}
	}
	binaryOK(t, tb.postBinary("/v1/prefix-matches", bytes.NewReader(queryapi.AppendBinaryRequest(nil, []uint64{1, 2})), nil))

	rec := httptest.NewRecorder()
	tb.mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/lanes", nil))
	var view struct {
		Lanes []struct {
			Lane      uint8  `json:"lane"`
			BlockSize uint32 `json:"block_size"`
		} `json:"lanes"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &view); err != nil {
		t.Fatal(err)
	}
	got := map[uint8]uint32{}
	for _, l := range view.Lanes {
		got[l.Lane] = l.BlockSize
	}
	if len(got) != 3 || got[0] != 0 || got[1] != 4 || got[5] != 0 {
		t.Fatalf("/v1/lanes block sizes %v, want lane 1 at 4, lanes 0 and 5 without", got)
	}
}
