package loadgen_test

import (
	"context"
	"net/http"
	"net/http/httptest"
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
	if _, err := appload.HTTPQuery(srv.Client(), srv.URL+"/nowhere")(ctx, schemas.QueryRequest{Input: schemas.InputLocalBlockHashes}); err == nil || !strings.Contains(err.Error(), "404") || !strings.Contains(err.Error(), "point --http at an indexer") {
		t.Fatalf("a wrong URL: %v", err)
	}
}
