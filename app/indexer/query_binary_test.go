package indexer_test

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/ckf-stream/ckf-stream/queryapi"
	"github.com/ckf-stream/ckf-stream/schemas"
)

// postBinary sends body as a binary request (target: the path and query) with the given extra
// headers and returns the recorder.
func (tb *table) postBinary(target string, body io.Reader, header map[string]string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodPost, target, body)
	req.Header.Set("Content-Type", queryapi.BinaryContentType)
	for k, v := range header {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	tb.mux.ServeHTTP(rec, req)
	return rec
}

// binaryOK decodes an OK binary answer, failing on anything else.
func binaryOK(t *testing.T, rec *httptest.ResponseRecorder) queryapi.BinaryReply {
	t.Helper()
	if rec.Code != http.StatusOK || rec.Header().Get("Content-Type") != queryapi.BinaryContentType {
		t.Fatalf("binary query: %d %q %q", rec.Code, rec.Header().Get("Content-Type"), rec.Body)
	}
	r, err := queryapi.DecodeBinaryReply(rec.Body.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// jsonProblem decodes a JSON problem answer of the given status.
func jsonProblem(t *testing.T, rec *httptest.ResponseRecorder, code int, status string) queryapi.PrefixMatchResponse {
	t.Helper()
	var resp queryapi.PrefixMatchResponse
	if rec.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("answer %d of type %q, want JSON: %q", rec.Code, rec.Header().Get("Content-Type"), rec.Body)
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &resp); err != nil {
		t.Fatalf("undecodable answer %q: %v", rec.Body, err)
	}
	if rec.Code != code || resp.Status != status || resp.Error == "" {
		t.Fatalf("answer %d %+v, want %d %s with an error", rec.Code, resp, code, status)
	}
	return resp
}

// sameAnswer checks that a binary reply says what the JSON reply to the same query says.
func sameAnswer(t *testing.T, bin queryapi.BinaryReply, js queryapi.PrefixMatchResponse) {
	t.Helper()
	if bin.QueryBlocks != js.QueryBlocks || bin.ReadyLanes != js.ReadyLanes || bin.IncompleteLanes != js.IncompleteLanes || len(bin.Depths) != len(js.Matches) {
		t.Fatalf("binary %+v, JSON %+v", bin, js)
	}
	for i, m := range js.Matches {
		if d, ok := bin.Depth(m.Lane); !ok || d != m.Depth || bin.Depths[i] != m.Depth {
			t.Fatalf("lane %d: binary depth %d,%v; JSON %d", m.Lane, d, ok, m.Depth)
		}
	}
}

// TestBinaryPrefixMatchesEqualJSON: a binary query answers what the same query in JSON answers,
// for every query of the JSON test's set, with and without a lane mask, with incomplete lanes;
// the correlation id header is echoed.
func TestBinaryPrefixMatchesEqualJSON(t *testing.T) {
	tb := newTable(t)
	rng := rand.New(rand.NewPCG(9, 9))
	var queries [][]uint64
	for _, chains := range tb.chains {
		for _, c := range chains {
			for _, k := range []int{0, 1, len(c) / 2, len(c)} {
				queries = append(queries, append(slices.Clone(c[:k]), randomChain(rng, 3)...), slices.Clone(c[:k]))
			}
		}
	}
	queries = append(queries, randomChain(rng, 40), nil)
	tb.incomplete.Store(1 << 1)
	sawDepth := false
	for _, q := range queries {
		for _, mask := range []string{"", "1", "2", "3", "65535"} {
			target, fields := "/v1/prefix-matches", map[string]any{"local_block_hashes": append([]uint64{}, q...)}
			if mask != "" {
				target += "?lane_mask=" + mask
				fields["lane_mask"] = json.Number(mask)
			}
			rec := tb.postBinary(target, bytes.NewReader(queryapi.AppendBinaryRequest(nil, q)), map[string]string{queryapi.CorrelationIDHeader: "bin-1"})
			bin := binaryOK(t, rec)
			if got := rec.Header().Get(queryapi.CorrelationIDHeader); got != "bin-1" {
				t.Fatalf("correlation id %q echoed as %q", "bin-1", got)
			}
			js, _ := json.Marshal(fields)
			code, resp := tb.post(t, string(js))
			if code != http.StatusOK {
				t.Fatalf("JSON %s: %d %+v", js, code, resp)
			}
			sameAnswer(t, bin, resp)
			sawDepth = sawDepth || slices.ContainsFunc(bin.Depths, func(d uint32) bool { return d > 0 })
		}
	}
	if !sawDepth {
		t.Fatal("no query found a cached prefix: the fixture is wrong")
	}
}

// TestBinaryPrefixMatchesEmpty: an empty body is an empty query, depth 0 on every ready lane,
// as an empty local_block_hashes list is.
func TestBinaryPrefixMatchesEmpty(t *testing.T) {
	tb := newTable(t)
	bin := binaryOK(t, tb.postBinary("/v1/prefix-matches", http.NoBody, nil))
	if bin.QueryBlocks != 0 || bin.ReadyLanes != 0b11 || !slices.Equal(bin.Depths, []uint32{0, 0}) {
		t.Fatalf("empty query: %+v", bin)
	}
}

// TestBinaryPrefixMatchesBadRequests: every refusal of a binary request is a JSON problem body
// with the JSON path's status: a length that is not a multiple of 8 (400), a body over the limit
// with or without a declared length (413), a bad or unknown query parameter or two correlation
// ids (400), a parameter on the binary type (415), no eligible lane (503).
func TestBinaryPrefixMatchesBadRequests(t *testing.T) {
	tb := newTable(t)
	for _, n := range []int{1, 7, 9, 15, 8*64 + 3} {
		resp := jsonProblem(t, tb.postBinary("/v1/prefix-matches", bytes.NewReader(make([]byte, n)), nil), http.StatusBadRequest, "INVALID_REQUEST")
		if !strings.Contains(resp.Error, "not a whole number of 8-byte") {
			t.Errorf("%d bytes: %q", n, resp.Error)
		}
	}
	big := make([]byte, queryapi.MaxRequestBytes+8)
	jsonProblem(t, tb.postBinary("/v1/prefix-matches", bytes.NewReader(big), nil), http.StatusRequestEntityTooLarge, "INVALID_REQUEST")
	// No Content-Length: the limit is found while reading.
	jsonProblem(t, tb.postBinary("/v1/prefix-matches", io.MultiReader(bytes.NewReader(big)), nil), http.StatusRequestEntityTooLarge, "INVALID_REQUEST")
	// Exactly the limit is a query (of 2^19 blocks).
	binaryOK(t, tb.postBinary("/v1/prefix-matches", io.MultiReader(bytes.NewReader(big[:queryapi.MaxRequestBytes])), nil))

	body := queryapi.AppendBinaryRequest(nil, []uint64{1, 2, 3})
	for _, target := range []string{"?lane_mask=18446744073709551616", "?lane_mask=x", "?lane_mask=-1", "?lane_mask=1&lane_mask=2", "?mask=1", "?lane_mask=1&x"} {
		jsonProblem(t, tb.postBinary("/v1/prefix-matches"+target, bytes.NewReader(body), nil), http.StatusBadRequest, "INVALID_REQUEST")
	}
	req := httptest.NewRequest(http.MethodPost, "/v1/prefix-matches", bytes.NewReader(body))
	req.Header.Set("Content-Type", queryapi.BinaryContentType)
	req.Header.Add(queryapi.CorrelationIDHeader, "a")
	req.Header.Add(queryapi.CorrelationIDHeader, "b")
	rec := httptest.NewRecorder()
	tb.mux.ServeHTTP(rec, req)
	jsonProblem(t, rec, http.StatusBadRequest, "INVALID_REQUEST")
	// A correlation id beyond the contract's limit is the Answerer's INVALID_REQUEST.
	jsonProblem(t, tb.postBinary("/v1/prefix-matches", bytes.NewReader(body), map[string]string{queryapi.CorrelationIDHeader: strings.Repeat("x", schemas.MaxCorrelationIDBytes+1)}),
		http.StatusBadRequest, "INVALID_REQUEST")

	req = httptest.NewRequest(http.MethodPost, "/v1/prefix-matches", bytes.NewReader(body))
	req.Header.Set("Content-Type", queryapi.BinaryContentType+"; version=2")
	rec = httptest.NewRecorder()
	tb.mux.ServeHTTP(rec, req)
	jsonProblem(t, rec, http.StatusUnsupportedMediaType, "INVALID_REQUEST")

	resp := jsonProblem(t, tb.postBinary("/v1/prefix-matches?lane_mask=32", bytes.NewReader(body), nil), http.StatusServiceUnavailable, "UNAVAILABLE")
	if resp.QueryBlocks != 3 {
		t.Errorf("unavailable answer %+v: query_blocks", resp)
	}
	tb.eligible.Store(0)
	rec = tb.postBinary("/v1/prefix-matches", bytes.NewReader(body), nil)
	jsonProblem(t, rec, http.StatusServiceUnavailable, "UNAVAILABLE")
	if rec.Header().Get("Retry-After") != "1" {
		t.Error("503 without Retry-After")
	}
}

// FuzzBinaryPrefixMatches sends arbitrary bodies as binary queries: a whole number of 8-byte
// words is answered 200 with a well-formed reply that equals the JSON answer to the same hashes;
// any other length is a 400 JSON problem body; nothing else happens.
func FuzzBinaryPrefixMatches(f *testing.F) {
	tb := newTable(f)
	f.Add([]byte{})
	f.Add([]byte{1})
	f.Add(queryapi.AppendBinaryRequest(nil, tb.chains[0][0][:5]))
	f.Add(append(queryapi.AppendBinaryRequest(nil, tb.chains[1][0]), 7, 7, 7))
	f.Fuzz(func(t *testing.T, body []byte) {
		rec := tb.postBinary("/v1/prefix-matches", bytes.NewReader(body), nil)
		if len(body)%8 != 0 {
			jsonProblem(t, rec, http.StatusBadRequest, "INVALID_REQUEST")
			return
		}
		bin := binaryOK(t, rec)
		hashes := make([]uint64, len(body)/8)
		for i := range hashes {
			hashes[i] = binary.LittleEndian.Uint64(body[8*i:])
		}
		js, _ := json.Marshal(map[string]any{"local_block_hashes": hashes})
		code, resp := tb.post(t, string(js))
		if code != http.StatusOK {
			t.Fatalf("JSON: %d %+v", code, resp)
		}
		sameAnswer(t, bin, resp)
	})
}
