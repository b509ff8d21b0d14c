package indexer_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/ckf-stream/ckf-stream/app/config"
	"github.com/ckf-stream/ckf-stream/app/indexer"
	"github.com/ckf-stream/ckf-stream/queryapi"
)

// TestManifestFollowsTheLaneMap (consumer §16): the manifest's table holds the lane map's highest
// lane + 1 lanes, so a 4-lane map builds a 4-lane table and lanes up to 63 are served; a lane
// beyond 63 is refused naming indexer.lanes.
func TestManifestFollowsTheLaneMap(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		lanes config.LaneMap
		count int
		mask  uint64
	}{
		{config.LaneMap{0: 0x10, 1: 0x11, 2: 0x12, 3: 0x13}, 4, 0xF},
		{config.LaneMap{0: 0x10, 15: 0x1f}, 16, 1 | 1<<15},
		{config.LaneMap{0: 0x10, 40: 0x38}, 41, 1 | 1<<40},
		{config.LaneMap{63: 0x3f}, 64, 1 << 63},
	} {
		ix := testConfig()
		ix.Lanes = tc.lanes
		m, _, err := indexer.BuildManifest(ix, 1)
		if err != nil {
			t.Fatalf("%v: %v", tc.lanes, err)
		}
		if m.LaneCount() != tc.count || m.ConfiguredLanes64() != tc.mask {
			t.Errorf("%v: %d lanes, configured %#x; want %d, %#x", tc.lanes, m.LaneCount(), m.ConfiguredLanes64(), tc.count, tc.mask)
		}
	}
	ix := testConfig()
	ix.Lanes = config.LaneMap{64: 1}
	var fe *config.FieldError
	if _, _, err := indexer.BuildManifest(ix, 1); !errors.As(err, &fe) || fe.Field != "indexer.lanes" {
		t.Errorf("lane 64: %v, want a refusal naming indexer.lanes", err)
	}
}

// TestAPILanesBeyond16 (consumer §16): an indexer of lanes 0, 1 and 40 answers POST
// /v1/prefix-matches over lane 40 in JSON (64-bit masks) and in the binary reply=3 and reply=2
// layouts, refuses reply=1 (16-bit masks) for a selection that reaches lane 40 while answering it
// for lanes 0 and 1, and lists lane 40 in GET /v1/lanes and on the page.
func TestAPILanesBeyond16(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.Lanes = config.LaneMap{0: 0x10, 1: 0x11, 40: 0x38}
	tb := newTableOf(t, cfg)
	chain := tb.chains[0][0]
	tb.install(t, 40, [][]uint64{chain[:5]})
	tb.eligible.Store(tb.g.ReadyLanes64())

	code, resp := tb.post(t, fmt.Sprintf(`{"local_block_hashes":%s}`, jsonList(chain)))
	if code != http.StatusOK || resp.ReadyLanes != 1|1<<1|1<<40 || len(resp.Matches) != 3 || resp.Matches[2].Lane != 40 ||
		resp.Matches[2].Depth != 5 || resp.Matches[2].DcID != "0000000000000038" {
		t.Fatalf("JSON answer: %d %+v", code, resp)
	}
	if code, resp := tb.post(t, fmt.Sprintf(`{"local_block_hashes":%s,"lane_mask":%d}`, jsonList(chain), uint64(1)<<40)); code != http.StatusOK ||
		resp.ReadyLanes != 1<<40 || len(resp.Matches) != 1 {
		t.Fatalf("JSON answer, lane_mask of lane 40: %d %+v", code, resp)
	}

	body := queryapi.AppendBinaryRequest(nil, chain)
	bin := binaryOK(t, tb.postBinary("/v1/prefix-matches?reply=3", bytes.NewReader(body), nil))
	if d, ok := bin.Depth(40); bin.ReadyLanes != 1|1<<1|1<<40 || !ok || d != 5 {
		t.Fatalf("reply=3: %+v", bin)
	}
	rec := tb.postBinary("/v1/prefix-matches?reply=2", bytes.NewReader(body), nil)
	states, err := queryapi.DecodeBinaryStatesReply(rec.Body.Bytes())
	if err != nil || len(states.Lanes) != 3 || states.Lanes[2].Lane != 40 || states.Lanes[2].Depth != 5 {
		t.Fatalf("reply=2: %d %+v %v", rec.Code, states, err)
	}
	rec = tb.postBinary("/v1/prefix-matches", bytes.NewReader(body), nil)
	if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), "reply=3") || !strings.Contains(rec.Body.String(), "up to 40") {
		t.Fatalf("reply=1 over every lane: %d %s", rec.Code, rec.Body)
	}
	if bin := binaryOK(t, tb.postBinary("/v1/prefix-matches?lane_mask=3", bytes.NewReader(body), nil)); bin.ReadyLanes != 0b11 {
		t.Fatalf("reply=1, lanes 0 and 1: %+v", bin)
	}

	v := tb.api.View()
	if v.LaneCount != 41 || v.ConfiguredLanes != 1|1<<1|1<<40 || len(v.Lanes) != 3 || v.Lanes[2].Lane != 40 ||
		v.Lanes[2].State != indexer.StateServing || !slices.Equal(v.ReadyLaneNumbers, []uint8{0, 1, 40}) {
		t.Fatalf("lanes view: %+v", v)
	}
	rec = httptest.NewRecorder()
	tb.mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/lanes", nil))
	if page := rec.Body.String(); rec.Code != http.StatusOK || !strings.Contains(page, `data-lane="40"`) ||
		!strings.Contains(page, fmt.Sprintf("%041b", uint64(1|1<<1|1<<40))) {
		t.Fatalf("lane page: %d, lane 40 or the 41-digit mask missing", rec.Code)
	}
}

// jsonList is a JSON list of hashes.
func jsonList(hashes []uint64) string {
	b, _ := json.Marshal(hashes)
	return string(b)
}
