package indexer_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/app/config"
	"github.com/ckf-stream/ckf-stream/app/indexer"
	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/ckf/index"
	"github.com/ckf-stream/ckf-stream/ckf/producer"
	"github.com/ckf-stream/ckf-stream/queryapi"
	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/ckf-stream/ckf-stream/streams/lanes"
	"github.com/ckf-stream/ckf-stream/streams/query"
)

// The API tests build the indexer's table in-process: exact producer state (ckf.DcState), a
// barrier snapshot, and the lane ingestor installing it, exactly as a lane would from
// Kafka, without a broker. The Kafka path is covered by the integration tests in
// indexer_test.go.

const (
	testDomain = "c5000000000000000000000000000000:5c000000000000000000000000000000"
	testBlocks = 4096 // expected blocks per DC: 2,048 buckets
)

func testConfig() config.Indexer {
	ix := config.Default().Indexer
	ix.Domain = testDomain
	ix.Lanes = config.LaneMap{0: 0x10, 1: 0x11, 5: 0x15}
	ix.ExpectedBlocksPerDC = testBlocks
	ix.ConsumerInstanceID = 7
	return ix
}

type discardSink struct{}

func (discardSink) Enqueue(ckf.Delta) error { return nil }

// table is an in-process indexer state: lanes 0 and 1 installed with stored chains, lane 5
// configured but never ready.
type table struct {
	g           *index.GlobalIndexer
	eligible    atomic.Uint64
	incomplete  atomic.Uint64               // lanes whose DC reports omitted blocks
	asOf        [ckf.MaxLanes]atomic.Int64  // per lane, the time up to which it reflects its DC (µs)
	blockSizes  [ckf.MaxLanes]atomic.Uint32 // per lane, its engines' block size (0: none known)
	firstBlocks query.FirstBlockStats       // the answers' first-block counts (lanes 0 and 1 hold blocks)
	chains      map[uint8][][]uint64        // token-hash chains stored per lane
	api         *indexer.API
	mux         *http.ServeMux
}

func newTable(t testing.TB) *table {
	t.Helper()
	return newTableOf(t, testConfig())
}

// newTableOf is newTable over the lanes of cfg, which must map lanes 0 and 1.
func newTableOf(t testing.TB, cfg config.Indexer) *table {
	t.Helper()
	m, _, err := indexer.BuildManifest(cfg, 7)
	if err != nil {
		t.Fatal(err)
	}
	g, err := index.NewGlobalIndexer(m, ckf.DefaultSearchConfig())
	if err != nil {
		t.Fatal(err)
	}
	tb := &table{g: g, chains: map[uint8][][]uint64{}}
	rng := rand.New(rand.NewPCG(1, 2))
	shared := randomChain(rng, 8) // a system prompt both DCs hold
	tb.install(t, 0, [][]uint64{append(slices.Clone(shared), randomChain(rng, 12)...), randomChain(rng, 5)})
	tb.install(t, 1, [][]uint64{append(slices.Clone(shared), randomChain(rng, 3)...), tokenChain(4, 6)})
	tb.eligible.Store(g.ReadyLanes64())
	api, err := indexer.NewAPI(indexer.APIParams{
		Answerer: query.NewAnswerer(g, tb.eligibleLanes, query.IncompleteLanes(tb.incomplete.Load),
			query.LaneAsOf(func(l uint8) int64 { return tb.asOf[l].Load() }),
			query.CheckBlockSize(func(mask uint64, size uint32) error {
				return lanes.CheckBlockSize(g.Manifest(), mask, size, func(l uint8) uint32 { return tb.blockSizes[l].Load() })
			}),
			query.CountFirstBlocks(&tb.firstBlocks, func() uint64 { return 0b11 })),
		Lanes:    tb.statuses,
		Eligible: tb.eligibleLanes,
	})
	if err != nil {
		t.Fatal(err)
	}
	tb.api = api
	tb.mux = http.NewServeMux()
	for _, r := range api.Routes() {
		tb.mux.Handle(r.Pattern, r.Handler)
	}
	return tb
}

func (tb *table) eligibleLanes() uint64 { return tb.eligible.Load() }

func (tb *table) statuses() []lanes.LaneStatus {
	var out []lanes.LaneStatus
	m := tb.g.Manifest()
	for l := uint8(0); l < ckf.MaxLanes; l++ {
		if p, ok := m.PoolOf(l); ok {
			ready := tb.g.ReadyLanes64()&(1<<l) != 0
			st := lanes.LaneStatus{Lane: l, Pool: p.String(), Ready: ready, AppliedOffset: -1, HighWatermark: -1, SnapshotOffset: -1,
				BlockSize: tb.blockSizes[l].Load()}
			if ready {
				st.Phase = lanes.PhaseActive
				st.InstalledSequence, st.Snapshots, st.Deltas, st.Images = 3, 1, 2, 9
				st.AppliedOffset, st.HighWatermark = 41, 42
			}
			if l == 1 { // lane 1's DC reports a filter past its capacity
				st.Capacity = lanes.LaneCapacity{Reported: true, FilterOccupancy: 0.97, ResidentBlocks: 7946,
					OmittedBlocks: 3, CapacityOmissions: 12, OmissionsSinceSnapshot: 4}
			}
			out = append(out, st)
		}
	}
	return out
}

func randomChain(rng *rand.Rand, n int) []uint64 {
	c := make([]uint64, n)
	for i := range c {
		c[i] = rng.Uint64()
	}
	return c
}

// testTokens are the token ids of tokenChain: blocks of blockSize tokens.
func testTokens(blockSize, blocks int) []uint32 {
	toks := make([]uint32, blockSize*blocks)
	for i := range toks {
		toks[i] = uint32(1000 + i*7)
	}
	return toks
}

// tokenChain returns the local block hashes of testTokens, with the salt of lora "a" and
// namespace "ns".
func tokenChain(blockSize, blocks int) []uint64 {
	hs := ckf.TokenBlockHashes(testTokens(blockSize, blocks), blockSize, ckf.BlockSaltSeed("a", "ns"))
	out := make([]uint64, len(hs))
	for i, h := range hs {
		out[i] = uint64(h)
	}
	return out
}

// install stores chains in a fresh DcState for lane and installs its barrier snapshot.
func (tb *table) install(t testing.TB, lane uint8, chains [][]uint64) {
	t.Helper()
	m := tb.g.Manifest()
	state, err := producer.NewDcState(ckf.NewCkfConfig(testBlocks))
	if err != nil {
		t.Fatal(err)
	}
	if state.Format() != m.Format() {
		t.Fatalf("producer format %+v != manifest format %+v", state.Format(), m.Format())
	}
	pool, _ := m.PoolOf(lane)
	id := ckf.ProducerIdentity{Pool: pool, Incarnation: 1, LayoutGeneration: 1, Format: state.Format()}
	pub := producer.NewPublisher(id, 0, discardSink{})
	ext := uint64(1)
	for _, c := range chains {
		blocks := make([]producer.StoredBlock, len(c))
		for i, h := range c {
			blocks[i] = producer.StoredBlock{BlockHash: ckf.ExternalBlockHash(ext), TokensHash: ckf.LocalBlockHash(h)}
			ext++
		}
		out := state.ApplyEvent(producer.RouterEvent{WorkerID: 1, Event: producer.KvCacheEvent{Kind: producer.KvEventStored, Stored: producer.StoreData{Blocks: blocks}}})
		if out.FirstError != nil {
			t.Fatal(out.FirstError)
		}
		if len(out.Publication) > 0 {
			if _, err := pub.Publish(out.Publication); err != nil {
				t.Fatal(err)
			}
		}
	}
	lease := ckf.LaneLease{Consumer: m.ConsumerInstance(), Lane: lane, Epoch: 1}
	snap, err := pub.SnapshotAfterBarrier(state, lease)
	if err != nil {
		t.Fatal(err)
	}
	in, err := tb.g.ClaimLane(lane)
	if err != nil {
		t.Fatal(err)
	}
	if err := in.Assign(id, lease); err != nil {
		t.Fatal(err)
	}
	if out := in.InstallSnapshot(&snap); out.Kind != index.OutcomeSnapshotInstalled {
		t.Fatalf("lane %d: install: %v", lane, out)
	}
	tb.chains[lane] = chains
}

// post sends body to POST /v1/prefix-matches and decodes the answer.
func (tb *table) post(t *testing.T, body string) (int, queryapi.PrefixMatchResponse) {
	t.Helper()
	rec := httptest.NewRecorder()
	tb.mux.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/prefix-matches", strings.NewReader(body)))
	var resp queryapi.PrefixMatchResponse
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		t.Fatalf("POST %s: content type %q, body %s", body, ct, rec.Body)
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &resp); err != nil {
		t.Fatalf("POST %s: undecodable answer %q: %v", body, rec.Body, err)
	}
	return rec.Code, resp
}

// wantDirect checks resp against a direct GlobalIndexer.FindPrefixMatches of local, restricted
// to mask.
func wantDirect(t *testing.T, g *index.GlobalIndexer, local []uint64, mask uint16, resp queryapi.PrefixMatchResponse) {
	t.Helper()
	direct, err := g.FindPrefixMatches(local)
	if err != nil {
		t.Fatal(err)
	}
	var want []queryapi.DCMatch
	for l := uint8(0); l < ckf.LaneCount; l++ {
		if m, ok := direct.Match(l); ok && mask&(1<<l) != 0 {
			want = append(want, queryapi.DCMatch{Lane: l, DcID: m.Pool.Dc.String(), Pool: m.Pool.String(), Depth: m.Depth})
		}
	}
	if !slices.Equal(resp.Matches, want) || resp.QueryBlocks != uint32(len(local)) || resp.Status != "OK" {
		t.Fatalf("answer %+v; want status OK, %d blocks, matches %+v", resp, len(local), want)
	}
}

func TestPrefixMatchesByHashesEqualDirectSearch(t *testing.T) {
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
	queries = append(queries, randomChain(rng, 40))
	sawDepth := false
	for _, q := range queries {
		body, _ := json.Marshal(map[string]any{"local_block_hashes": q})
		code, resp := tb.post(t, string(body))
		if code != http.StatusOK {
			t.Fatalf("POST %s: %d %+v", body, code, resp)
		}
		wantDirect(t, tb.g, q, 0xFFFF, resp)
		for _, m := range resp.Matches {
			sawDepth = sawDepth || m.Depth > 0
		}
		if resp.ReadyLanes != 0b11 || !strings.HasPrefix(resp.CorrelationID, "http-") {
			t.Fatalf("ready lanes %b, correlation id %q", resp.ReadyLanes, resp.CorrelationID)
		}
	}
	if !sawDepth {
		t.Fatal("no query found a cached prefix: the fixture is wrong")
	}
	// The shared system prompt is cached in both DCs: both report at least its 8 blocks.
	body, _ := json.Marshal(queryapi.PrefixMatchRequest{CorrelationID: "mine", LocalBlockHashes: tb.chains[0][0][:10]})
	_, resp := tb.post(t, string(body))
	if resp.CorrelationID != "mine" || len(resp.Matches) != 2 || resp.Matches[0].Depth != 10 || resp.Matches[1].Depth < 8 {
		t.Fatalf("shared prefix: %+v", resp)
	}
	// An empty query answers depth 0 on every ready lane.
	if code, resp := tb.post(t, `{"local_block_hashes": []}`); code != http.StatusOK || resp.QueryBlocks != 0 || len(resp.Matches) != 2 || resp.Matches[0].Depth != 0 {
		t.Fatalf("empty query: %d %+v", code, resp)
	}
	// lane_mask restricts the answer.
	body, _ = json.Marshal(map[string]any{"local_block_hashes": tb.chains[0][0], "lane_mask": 2})
	_, resp = tb.post(t, string(body))
	wantDirect(t, tb.g, tb.chains[0][0], 2, resp)
}

func TestPrefixMatchesByTokensEqualDirectSearch(t *testing.T) {
	tb := newTable(t)
	for _, blocks := range []int{0, 1, 3, 6, 9} {
		toks := testTokens(4, 6)
		if blocks > 6 {
			toks = append(toks, testTokens(4, blocks)[6*4:]...)
			toks[len(toks)-1]++ // blocks beyond the stored chain differ
		} else {
			toks = toks[:blocks*4]
		}
		toks = append(toks, 5, 6) // a partial block, dropped
		body, _ := json.Marshal(map[string]any{"token_ids": toks, "block_size": 4, "lora_name": "a", "cache_namespace": "ns"})
		code, resp := tb.post(t, string(body))
		if code != http.StatusOK {
			t.Fatalf("POST %s: %d %+v", body, code, resp)
		}
		hs := ckf.TokenBlockHashes(toks, 4, ckf.BlockSaltSeed("a", "ns"))
		local := make([]uint64, len(hs))
		for i, h := range hs {
			local[i] = uint64(h)
		}
		wantDirect(t, tb.g, local, 0xFFFF, resp)
		if want := uint32(min(blocks, 6)); resp.Matches[1].Depth != want {
			t.Fatalf("%d blocks: lane 1 depth %d, want %d", blocks, resp.Matches[1].Depth, want)
		}
	}
	// Another salt hashes to other blocks: nothing matches.
	body, _ := json.Marshal(map[string]any{"token_ids": testTokens(4, 6), "block_size": 4})
	_, resp := tb.post(t, string(body))
	if resp.Matches[1].Depth != 0 {
		t.Fatalf("unsalted tokens matched: %+v", resp)
	}
}

func TestPrefixMatchesBadRequests(t *testing.T) {
	tb := newTable(t)
	for _, tc := range []struct{ body, want string }{
		{`{"local_block_hashes": [1, 2`, "the JSON value ends early"},
		{`{"local_block_hashes": [1,,2]}`, "invalid JSON at byte"},
		{``, "the body is empty"},
		{`[1,2,3]`, "not a prefix-match request"},
		{`{"local_block_hashes": [-1]}`, "field local_block_hashes"},
		{`{"local_block_hashes": ["12"]}`, "field local_block_hashes"},
		{`{"local_block_hashes": [1], "token_ids": [1]}`, "not both"},
		{`{}`, "give local_block_hashes, or token_ids with block_size"},
		{`{"local_block_hashes": null}`, "give local_block_hashes, or token_ids with block_size"},
		{`{"token_ids": [1,2,3]}`, "block_size 0 is not in [1,65536]"},
		{`{"token_ids": [1,2,3], "block_size": 0}`, "block_size 0 is not in [1,65536]"},
		{`{"token_ids": [1,2,3], "block_size": 65537}`, "block_size 65537 is not in [1,65536]"},
		{`{"token_ids": [1,2,3], "block_size": -4}`, "field block_size"},
		{`{"local_block_hashes": [1], "block_size": 4}`, "go with token_ids"},
		{`{"local_block_hashes": [1], "lane_mask": 18446744073709551616}`, "field lane_mask"}, // 64 lanes at most (consumer §16)
		{`{"local_block_hashes": [1], "hashes": [2]}`, `unknown field "hashes"`},
		{`{"local_block_hashes": [1]} {"local_block_hashes": [2]}`, "more than one JSON value"},
		{`{"local_block_hashes": [1], "correlation_id": "` + strings.Repeat("x", 300) + `"}`, "correlation_id must be 1..256 bytes"},
		// A null element would otherwise be read as the hash or token 0.
		{`{"local_block_hashes": [1, null, 3]}`, "local_block_hashes holds a null"},
		{`{"local_block_hashes": [null]}`, "local_block_hashes holds a null"},
		{`{"token_ids": [1, 2, null, 4], "block_size": 2}`, "token_ids holds a null"},
		{`{"token_ids": [4294967296], "block_size": 2}`, "field token_ids"},
		{`{"local_block_hashes": [1.5]}`, "field local_block_hashes"},
		// Every documented key at most once, matched as encoding/json matches (any case).
		{`{"local_block_hashes": [1], "local_block_hashes": [2]}`, `duplicate key "local_block_hashes"`},
		{`{"token_ids": [1, 2], "block_size": 2, "TOKEN_IDS": [3, 4]}`, `duplicate key "TOKEN_IDS"`},
		{`{"local_block_hashes": [1], "lane_mask": 1, "lane_mask": 2}`, `duplicate key "lane_mask"`},
		{`{"correlation_id": "a", "local_block_hashes": [1], "correlation_id": "b"}`, `duplicate key "correlation_id"`},
	} {
		code, resp := tb.post(t, tc.body)
		if code != http.StatusBadRequest || resp.Status != "INVALID_REQUEST" || !strings.Contains(resp.Error, tc.want) || len(resp.Matches) != 0 {
			t.Errorf("POST %.60q: %d %+v; want 400 INVALID_REQUEST with %q", tc.body, code, resp, tc.want)
		}
	}
	// A body beyond MaxRequestBytes is refused without reading it all.
	big := `{"local_block_hashes": [` + strings.Repeat("1234567890,", queryapi.MaxRequestBytes/11+1) + `1]}`
	if code, resp := tb.post(t, big); code != http.StatusRequestEntityTooLarge || !strings.Contains(resp.Error, "exceeds") {
		t.Errorf("big body: %d %+v", code, resp)
	}
	// Wrong method: the mux answers 405.
	rec := httptest.NewRecorder()
	tb.mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/prefix-matches", nil))
	if rec.Code != http.StatusMethodNotAllowed {
		t.Errorf("GET /v1/prefix-matches: %d", rec.Code)
	}
}

// TestPrefixMatchesContentType: a JSON content type, with at most charset=utf-8, or none is
// answered; any other is refused with 415 before the body is looked at.
func TestPrefixMatchesContentType(t *testing.T) {
	tb := newTable(t)
	body := `{"local_block_hashes": [1, 2]}`
	for _, tc := range []struct {
		contentType string
		code        int
	}{
		{"", http.StatusOK},
		{"application/json", http.StatusOK},
		{"Application/JSON; charset=UTF-8", http.StatusOK},
		{"application/json;charset=utf-8", http.StatusOK},
		{"application/x-www-form-urlencoded", http.StatusUnsupportedMediaType},
		{"text/plain", http.StatusUnsupportedMediaType},
		{"application/json; charset=latin1", http.StatusUnsupportedMediaType},
		{"application/json; version=2", http.StatusUnsupportedMediaType},
		{"application/json; charset", http.StatusUnsupportedMediaType}, // not a media type
	} {
		req := httptest.NewRequest(http.MethodPost, "/v1/prefix-matches", strings.NewReader(body))
		if tc.contentType != "" {
			req.Header.Set("Content-Type", tc.contentType)
		}
		rec := httptest.NewRecorder()
		tb.mux.ServeHTTP(rec, req)
		var resp queryapi.PrefixMatchResponse
		if err := json.Unmarshal(rec.Body.Bytes(), &resp); err != nil {
			t.Fatalf("%q: undecodable answer %q: %v", tc.contentType, rec.Body, err)
		}
		if rec.Code != tc.code {
			t.Errorf("Content-Type %q: %d %+v, want %d", tc.contentType, rec.Code, resp, tc.code)
			continue
		}
		if tc.code == http.StatusUnsupportedMediaType {
			if resp.Status != "INVALID_REQUEST" || !strings.Contains(resp.Error, "unsupported media type") || rec.Header().Get("Accept") != "application/json, application/octet-stream" {
				t.Errorf("Content-Type %q: %+v, Accept %q", tc.contentType, resp, rec.Header().Get("Accept"))
			}
		} else if resp.Status != "OK" {
			t.Errorf("Content-Type %q: %+v", tc.contentType, resp)
		}
	}
}

// TestIncompleteLanes: lanes whose DC reports omitted blocks are marked in answers (the mask and
// each match), only among the lanes the answer covers; /v1/lanes shows the capacity state of the
// lanes that report one.
func TestIncompleteLanes(t *testing.T) {
	tb := newTable(t)
	body := `{"local_block_hashes": [1, 2, 3]}`
	if _, resp := tb.post(t, body); resp.IncompleteLanes != 0 || resp.Matches[0].Incomplete || resp.Matches[1].Incomplete {
		t.Fatalf("nothing incomplete: %+v", resp)
	}
	tb.incomplete.Store(1<<1 | 1<<5) // lane 5 is not ready: not covered, not marked
	code, resp := tb.post(t, body)
	if code != http.StatusOK || resp.IncompleteLanes != 1<<1 || resp.Matches[0].Incomplete || !resp.Matches[1].Incomplete {
		t.Fatalf("lane 1 incomplete: %d %+v", code, resp)
	}
	rec := httptest.NewRecorder()
	tb.mux.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/prefix-matches", strings.NewReader(body)))
	if raw := rec.Body.String(); strings.Count(raw, `"incomplete":true`) != 1 || !strings.Contains(raw, `"incomplete_lanes":2`) {
		t.Fatalf("JSON %s: want one match marked and the mask", raw)
	}
	v := tb.api.View()
	for _, lv := range v.Lanes {
		switch {
		case lv.Lane == 1 && (lv.Capacity == nil || *lv.Capacity != indexer.CapacityView{FilterOccupancyRatio: 0.97, ResidentBlocks: 7946,
			OmittedBlocks: 3, CapacityOmissions: 12, OmissionsSinceSnapshot: 4}):
			t.Errorf("lane 1 capacity %+v", lv.Capacity)
		case lv.Lane != 1 && lv.Capacity != nil:
			t.Errorf("lane %d reports no capacity state, shows %+v", lv.Lane, lv.Capacity)
		}
	}
}

// TestPrefixMatchesLaneStates: the JSON answer lists every configured lane with its state and
// age (lane 5, never ready, as unavailable with no age), and the reply time; max_age_ms answers
// an older lane stale, without a depth and out of matches; the binary form gives the same with
// reply=2.
func TestPrefixMatchesLaneStates(t *testing.T) {
	tb := newTable(t)
	now := time.Now()
	tb.asOf[0].Store(now.Add(-20 * time.Millisecond).UnixMicro())
	tb.asOf[1].Store(now.Add(-time.Hour).UnixMicro())
	code, resp := tb.post(t, `{"local_block_hashes": [1, 2, 3]}`)
	if code != http.StatusOK || len(resp.Lanes) != 3 || resp.ReplyTime.Before(now) {
		t.Fatalf("no bound: %d %+v", code, resp)
	}
	for i, want := range []struct {
		lane     uint8
		state    string
		minAge   int64
		hasAge   bool
		hasDepth bool
	}{{0, "exact", 20, true, true}, {1, "exact", 3_600_000, true, true}, {5, "unavailable", 0, false, false}} {
		la := resp.Lanes[i]
		if la.Lane != want.lane || la.State != want.state || (la.AgeMillis != nil) != want.hasAge ||
			(la.AgeMillis != nil && *la.AgeMillis < want.minAge) || (la.Depth != nil) != want.hasDepth || la.Pool == "" {
			t.Errorf("lane entry %d: %+v (age %v, depth %v), want %+v", i, la, la.AgeMillis, la.Depth, want)
		}
	}
	code, resp = tb.post(t, `{"local_block_hashes": [1, 2, 3], "max_age_ms": 60000}`)
	if code != http.StatusOK || len(resp.Matches) != 1 || resp.Matches[0].Lane != 0 || resp.Lanes[1].State != "stale" || resp.Lanes[1].Depth != nil {
		t.Fatalf("max_age_ms 60 s: %d %+v", code, resp)
	}
	code, resp = tb.post(t, `{"local_block_hashes": [1], "max_age_ms": 1, "lane_mask": 2}`)
	if code != http.StatusServiceUnavailable || resp.Error != "every eligible lane is older than max_age_ms" || len(resp.Lanes) != 1 || resp.Lanes[0].State != "stale" {
		t.Fatalf("only lane 1, too old: %d %+v", code, resp)
	}
	if code, resp := tb.post(t, `{"local_block_hashes": [1], "max_age_ms": -5}`); code != http.StatusBadRequest || !strings.Contains(resp.Error, "max_age_ms") {
		t.Fatalf("negative max_age_ms: %d %+v", code, resp)
	}

	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodPost, "/v1/prefix-matches?reply=2&max_age_ms=60000", bytes.NewReader(queryapi.AppendBinaryRequest(nil, []uint64{1, 2, 3})))
	req.Header.Set("Content-Type", queryapi.BinaryContentType)
	tb.mux.ServeHTTP(rec, req)
	got, err := queryapi.DecodeBinaryStatesReply(rec.Body.Bytes())
	if rec.Code != http.StatusOK || err != nil || len(got.Lanes) != 3 {
		t.Fatalf("binary reply=2: %d %v %+v", rec.Code, err, got)
	}
	if l := got.Lanes; l[0].State != schemas.LaneExact || l[0].Depth == queryapi.BinaryAbsent || l[1].State != schemas.LaneStale ||
		l[1].Depth != queryapi.BinaryAbsent || l[2].State != schemas.LaneUnavailable || l[2].AgeMillis != queryapi.BinaryAbsent {
		t.Errorf("binary lane entries %+v", l)
	}
}

func TestPrefixMatchesUnavailable(t *testing.T) {
	tb := newTable(t)
	body := `{"local_block_hashes": [1, 2, 3], "lane_mask": 32}` // lane 5 only: never ready
	code, resp := tb.post(t, body)
	if code != http.StatusServiceUnavailable || resp.Status != "UNAVAILABLE" || resp.Error == "" || len(resp.Matches) != 0 || resp.QueryBlocks != 3 {
		t.Fatalf("lane 5 only: %d %+v", code, resp)
	}
	tb.eligible.Store(0) // every lane excluded by freshness
	code, resp = tb.post(t, `{"local_block_hashes": [1, 2, 3]}`)
	if code != http.StatusServiceUnavailable || resp.Status != "UNAVAILABLE" || !strings.Contains(resp.Error, "eligible") {
		t.Fatalf("nothing eligible: %d %+v", code, resp)
	}
}

func TestLanesJSONAndPage(t *testing.T) {
	if v := newTable(t).api.View(); !slices.Equal(v.ConfiguredLaneNumbers, []uint8{0, 1, 5}) || !slices.Equal(v.ReadyLaneNumbers, []uint8{0, 1}) {
		t.Errorf("lane numbers: configured %v, ready %v; want [0 1 5] and [0 1] (masks %#x, %#x)", v.ConfiguredLaneNumbers, v.ReadyLaneNumbers, v.ConfiguredLanes, v.ReadyLanes)
	}
	tb := newTable(t)
	rec := httptest.NewRecorder()
	tb.mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/lanes", nil))
	if rec.Code != http.StatusOK || rec.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("GET /v1/lanes: %d %s", rec.Code, rec.Header())
	}
	var v indexer.LanesView
	if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil {
		t.Fatal(err)
	}
	if v.Domain != testDomain || v.ConsumerInstance != "0000000000000007" || v.ConfiguredLanes != 0b100011 ||
		v.ReadyLanes != 0b11 || v.EligibleLanes != 0b11 || v.Ready || !strings.Contains(v.NotReady, "lanes 5 have not been ready") ||
		v.BucketCount != 2048 || len(v.Lanes) != 3 {
		t.Fatalf("lanes view: %+v", v)
	}
	want := []struct {
		lane  uint8
		dc    string
		state string
	}{{0, "0000000000000010", indexer.StateServing}, {1, "0000000000000011", indexer.StateServing}, {5, "0000000000000015", indexer.StateStarting}}
	for i, w := range want {
		l := v.Lanes[i]
		if l.Lane != w.lane || l.DcID != w.dc || l.State != w.state {
			t.Errorf("lane row %d: %+v, want %+v", i, l, w)
		}
	}
	for i, answer := range []string{"exact", "exact", "unavailable"} { // as an answer gives them; no lane has an age yet
		if l := v.Lanes[i]; l.AnswerState != answer || l.AgeMillis != nil {
			t.Errorf("lane %d: answer state %q, age %v; want %q and none", l.Lane, l.AnswerState, l.AgeMillis, answer)
		}
	}
	if l := v.Lanes[0]; l.Phase != "active" || l.InstalledSequence != 3 || l.HighWatermark != 42 || l.Images != 9 {
		t.Errorf("lane 0 row: %+v", l)
	}
	for _, path := range []string{"/", "/lanes"} {
		rec := httptest.NewRecorder()
		tb.mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		body := rec.Body.String()
		if rec.Code != http.StatusOK || !strings.HasPrefix(rec.Header().Get("Content-Type"), "text/html") {
			t.Fatalf("GET %s: %d %s", path, rec.Code, rec.Header())
		}
		for _, s := range []string{`http-equiv="refresh"`, testDomain, "<td>5</td>", "0000000000000015", `<tr class="serving" data-lane="0"`, `<tr class="starting" data-lane="5"`, "not ready",
			// lane 1's DC filter, past its capacity; the others report none
			"97.0 % full", "<li>3 blocks omitted: the DC&#39;s filter is full, answers may be short</li>", "not reported"} {
			if !strings.Contains(body, s) {
				t.Errorf("GET %s lacks %q:\n%s", path, s, body)
			}
		}
	}
	// Unknown paths stay 404 (the page is "/" exactly).
	rec = httptest.NewRecorder()
	tb.mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/nope", nil))
	if rec.Code != http.StatusNotFound {
		t.Errorf("GET /nope: %d", rec.Code)
	}
}

func TestReadiness(t *testing.T) {
	tb := newTable(t)
	ctx := context.Background()
	if err := tb.api.Ready(ctx); !errors.Is(err, indexer.ErrNotReady) || !strings.Contains(err.Error(), "lanes 5 have not been ready since start") {
		t.Fatalf("lane 5 never ready: %v", err)
	}
	tb.install(t, 5, [][]uint64{{1, 2, 3}})
	tb.eligible.Store(tb.g.ReadyLanes64())
	if err := tb.api.Ready(ctx); err != nil {
		t.Fatalf("every lane ready: %v", err)
	}
	// Lane 1 falls behind: degraded, still ready.
	tb.eligible.Store(0b100001)
	if err := tb.api.Ready(ctx); err != nil {
		t.Fatalf("lane 1 degraded: %v", err)
	}
	if v := tb.api.View(); v.Lanes[1].State != indexer.StateDegraded || !v.Ready {
		t.Fatalf("lane 1 should show as degraded: %+v", v.Lanes[1])
	}
	// Every lane degraded: not ready.
	tb.eligible.Store(0)
	if err := tb.api.Ready(ctx); !errors.Is(err, indexer.ErrNotReady) || !strings.Contains(err.Error(), "no lane is eligible") {
		t.Fatalf("all degraded: %v", err)
	}
}

// BenchmarkHTTPLoopback measures the query endpoint over a real loopback connection (one
// keep-alive client, sequential requests of 64 blocks) and reports the p50 and p99 of a request
// as p50-ns and p99-ns (a benchmark: a latency depends on the machine and its load, so no test
// asserts one).
func BenchmarkHTTPLoopback(b *testing.B) {
	tb := newTable(b)
	srv := httptest.NewServer(tb.mux)
	defer srv.Close()
	q := append(slices.Clone(tb.chains[0][0]), randomChain(rand.New(rand.NewPCG(3, 3)), 44)...)
	body, _ := json.Marshal(map[string]any{"local_block_hashes": q})
	cl := srv.Client()
	post := func() time.Duration {
		start := time.Now()
		resp, err := cl.Post(srv.URL+"/v1/prefix-matches", "application/json", bytes.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("status %d", resp.StatusCode)
		}
		return time.Since(start)
	}
	for range 200 { // warm-up: connection, buffers
		post()
	}
	var lat []time.Duration
	for b.Loop() {
		lat = append(lat, post())
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds()), "p99-ns")
}

// BenchmarkQueryHandler is the HTTP query path without the network: decode, answer, encode, for a
// query of 64 blocks by hashes.
func BenchmarkQueryHandler(b *testing.B) {
	tb := newTable(b)
	q := append(slices.Clone(tb.chains[0][0]), randomChain(rand.New(rand.NewPCG(3, 3)), 44)...)
	body, _ := json.Marshal(map[string]any{"local_block_hashes": q})
	h := tb.api.QueryHandler()
	b.ReportAllocs()
	for b.Loop() {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/prefix-matches", bytes.NewReader(body)))
		if rec.Code != http.StatusOK {
			b.Fatal(rec.Code)
		}
	}
}
