package loadgen_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"github.com/ckf-stream/ckf-stream/app/config"
	"github.com/ckf-stream/ckf-stream/app/indexer"
	appload "github.com/ckf-stream/ckf-stream/app/loadgen"
	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/ckf/index"
	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/ckf-stream/ckf-stream/streams/lanes"
	"github.com/ckf-stream/ckf-stream/streams/query"
)

func TestHTTPRequestCarriesEveryField(t *testing.T) {
	req := schemas.QueryRequest{CorrelationID: "c1", Input: schemas.InputTokenIDs, Tokens: schemas.AppendU32s(nil, []uint32{1, 2, 3}),
		BlockSize: 2, LoraName: "l", CacheNamespace: "n", LaneMask: schemas.Some(uint16(6))}
	got := appload.HTTPRequest(req)
	mask := uint64(6)
	want := indexer.PrefixMatchRequest{CorrelationID: "c1", TokenIDs: []uint32{1, 2, 3}, BlockSize: 2, LoraName: "l", CacheNamespace: "n", LaneMask: &mask}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%+v, want %+v", got, want)
	}
	got = appload.HTTPRequest(schemas.QueryRequest{Input: schemas.InputLocalBlockHashes, Hashes: schemas.AppendU64s(nil, []uint64{7, 8})})
	if !reflect.DeepEqual(got.LocalBlockHashes, []uint64{7, 8}) || got.TokenIDs != nil || got.LaneMask != nil {
		t.Fatalf("hashes: %+v", got)
	}
}

// TestHTTPQueryStatuses: 200, 400 and 503 answers are replies with their status; anything else is
// an error.
func TestHTTPQueryStatuses(t *testing.T) {
	ixc := config.Default().Indexer
	ixc.Domain, ixc.Lanes, ixc.ExpectedBlocksPerDC = "c5000000000000000000000000000000:5c000000000000000000000000000000", config.LaneMap{3: 0xdc}, 64
	m, _, err := indexer.BuildManifest(ixc, 1)
	if err != nil {
		t.Fatal(err)
	}
	g, err := index.NewGlobalIndexer(m, ckf.DefaultSearchConfig())
	if err != nil {
		t.Fatal(err)
	}
	api, err := indexer.NewAPI(indexer.APIParams{Answerer: query.NewAnswerer(g, nil), Lanes: func() []lanes.LaneStatus { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	for _, r := range api.Routes() {
		mux.Handle(r.Pattern, r.Handler)
	}
	srv := httptest.NewServer(mux)
	defer srv.Close()
	query := appload.HTTPQuery(srv.Client(), srv.URL+"/")
	ctx := context.Background()

	reply, err := query(ctx, schemas.QueryRequest{Input: schemas.InputLocalBlockHashes, Hashes: schemas.AppendU64s(nil, []uint64{1, 2})})
	if err != nil || reply.Status != schemas.QueryUnavailable || reply.QueryBlocks != 2 || reply.ErrorMessage == "" {
		t.Fatalf("no lane ready: %+v, %v", reply, err)
	}
	reply, err = query(ctx, schemas.QueryRequest{Input: schemas.InputTokenIDs, Tokens: schemas.AppendU32s(nil, []uint32{1}), BlockSize: 0})
	if err != nil || reply.Status != schemas.QueryInvalidRequest || !strings.Contains(reply.ErrorMessage, "block_size") {
		t.Fatalf("block size 0: %+v, %v", reply, err)
	}
	if _, err := appload.HTTPQuery(srv.Client(), srv.URL+"/nowhere")(ctx, schemas.QueryRequest{Input: schemas.InputLocalBlockHashes}); err == nil || !strings.Contains(err.Error(), "404") {
		t.Fatalf("a wrong URL: %v", err)
	}
}

func TestReplyOf(t *testing.T) {
	r, err := appload.ReplyOf(indexer.PrefixMatchResponse{CorrelationID: "x", Status: "OK", QueryBlocks: 4, ReadyLanes: 1,
		Matches: []indexer.DCMatch{{Lane: 0, DcID: "000000000000dc01", Pool: "p", Depth: 3}}})
	want := schemas.QueryReply{CorrelationID: "x", Status: schemas.QueryOK, QueryBlocks: 4, ReadyLanes: 1,
		Lanes: []schemas.LaneMatch{{Lane: 0, DcID: 0xdc01, Pool: "p", Depth: 3}}}
	if err != nil || !reflect.DeepEqual(r, want) {
		t.Fatalf("%+v, %v", r, err)
	}
	if _, err := appload.ReplyOf(indexer.PrefixMatchResponse{Status: "MAYBE"}); err == nil {
		t.Fatal("an unknown status was accepted")
	}
	if _, err := appload.ReplyOf(indexer.PrefixMatchResponse{Status: "OK", Matches: []indexer.DCMatch{{DcID: "zz"}}}); err == nil {
		t.Fatal("a bad DC id was accepted")
	}
}

func TestHTTPRequestOfAnEmptyQuery(t *testing.T) {
	b, err := json.Marshal(appload.HTTPRequest(schemas.QueryRequest{Input: schemas.InputLocalBlockHashes}))
	if err != nil || !strings.Contains(string(b), `"local_block_hashes":[]`) || !strings.Contains(string(b), `"token_ids":null`) {
		t.Fatalf("%s, %v", b, err)
	}
}
