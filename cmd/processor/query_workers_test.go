package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/ckf-stream/ckf-stream/workerapi"
)

// TestQueryWorkersCarriesStateAndAge: processor query --workers --max-age asks with max_age_ms,
// and prints each answer's state and the DC's age (or that it has none).
func TestQueryWorkersCarriesStateAndAge(t *testing.T) {
	t.Parallel()
	req := schemas.QueryRequest{Input: schemas.InputLocalBlockHashes, Hashes: schemas.AppendU64s(nil, []uint64{1, 2}), MaxAgeMillis: schemas.Some[int64](1500)}
	body, err := workerRequestOf(req, 0, "dc01")
	if err != nil || body.MaxAgeMillis == nil || *body.MaxAgeMillis != 1500 {
		t.Fatalf("body %+v, %v: want max_age_ms 1500", body, err)
	}
	var out bytes.Buffer
	printWorkerAnswer(&out, &workerapi.WorkerMatchResponse{Status: workerapi.StatusUnavailable, State: workerapi.StateStale, DcID: "000000000000dc01",
		DcSelected: true, QueryBlocks: 2, Age: workerapi.ReplicaAge{AgeMs: 4200, LagRecords: 17}, Error: "dc 000000000000dc01 is older than max_age_ms 1500 (its age is 4200 ms)"},
		"HTTP x", time.Millisecond)
	if first, _, _ := strings.Cut(out.String(), "\n"); first != "UNAVAILABLE from DC 000000000000dc01 via HTTP x in 1ms: state stale, 2 blocks; DC age 4200 ms, lag 17 records" {
		t.Fatalf("first line %q", first)
	}
	out.Reset()
	printWorkerAnswer(&out, &workerapi.WorkerMatchResponse{Status: workerapi.StatusUnavailable, State: workerapi.StateUnavailable, DcID: "000000000000dc01",
		Age: workerapi.ReplicaAge{AgeMs: -1}}, "Kafka y", 0)
	if !strings.Contains(out.String(), "state unavailable, 0 blocks; DC age unknown") {
		t.Fatalf("%q", out.String())
	}
}
