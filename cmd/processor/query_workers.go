package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/ckf-stream/ckf-stream/queryapi"
	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/ckf-stream/ckf-stream/workerapi"
)

// workerRequestOf is the body of POST /v1/worker-matches asking what req asks, with top_k and
// the DC filter (comma-separated DC ids).
func workerRequestOf(req schemas.QueryRequest, topK int, dcs string) (workerapi.WorkerMatchRequest, error) {
	if req.LaneMask.Valid {
		return workerapi.WorkerMatchRequest{}, fmt.Errorf("--lanes is the prefix-match route's; with --workers give --dcs")
	}
	p := queryapi.RequestOf(&req)
	out := workerapi.WorkerMatchRequest{CorrelationID: p.CorrelationID, LocalBlockHashes: p.LocalBlockHashes, TokenIDs: p.TokenIDs,
		BlockSize: p.BlockSize, LoraName: p.LoraName, CacheNamespace: p.CacheNamespace, TopK: topK}
	if out.LocalBlockHashes == nil && out.TokenIDs == nil {
		out.LocalBlockHashes = []uint64{}
	}
	for _, d := range strings.Split(dcs, ",") {
		if d = strings.TrimPrefix(strings.TrimSpace(d), "0x"); d != "" {
			out.DCs = append(out.DCs, d)
		}
	}
	return out, nil
}

// queryWorkers asks a worker-stage replica at url and prints its answer (a table, or JSON).
func queryWorkers(ctx context.Context, cl *http.Client, url string, body workerapi.WorkerMatchRequest, asJSON bool, stdout io.Writer) (int, error) {
	b, _ := json.Marshal(body)
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(url, "/")+workerapi.Path, bytes.NewReader(b))
	if err != nil {
		return exitUsage, err
	}
	hreq.Header.Set("Content-Type", "application/json")
	start := time.Now()
	resp, err := cl.Do(hreq)
	if err != nil {
		return exitFailure, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return exitFailure, err
	}
	var ans workerapi.WorkerMatchResponse
	if err := json.Unmarshal(raw, &ans); err != nil {
		return exitFailure, fmt.Errorf("HTTP %d: not a worker-match answer: %.200s", resp.StatusCode, raw)
	}
	took := time.Since(start)
	if asJSON {
		out, _ := json.MarshalIndent(ans, "", "  ")
		fmt.Fprintln(stdout, string(out))
	} else {
		printWorkerAnswer(stdout, &ans, url, took)
	}
	switch ans.Status {
	case workerapi.StatusOK:
		return exitOK, nil
	case workerapi.StatusInvalidRequest:
		return exitUsage, nil
	}
	return exitFailure, nil
}

func printWorkerAnswer(w io.Writer, a *workerapi.WorkerMatchResponse, url string, took time.Duration) {
	fmt.Fprintf(w, "%s from DC %s via HTTP %s in %v: %d blocks; replica age %d ms, lag %d records\n",
		a.Status, a.DcID, url, took.Round(time.Microsecond), a.QueryBlocks, a.Age.AgeMs, a.Age.LagRecords)
	if a.Error != "" {
		fmt.Fprintln(w, "error:", a.Error)
	}
	if a.Status == workerapi.StatusOK && !a.DcSelected {
		fmt.Fprintln(w, "this DC is not among --dcs: no sources")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "worker\trank\tdevice\thost_pinned\tdisk\texternal\t")
	for _, s := range a.Sources {
		fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t%d\t%d\t\n", s.WorkerID, s.DpRank, s.Device, s.HostPinned, s.Disk, s.External)
	}
	_ = tw.Flush()
}

// runWorkerQuery is processor query --workers.
func runWorkerQuery(ctx context.Context, f *queryFlags, req schemas.QueryRequest, stdout, stderr io.Writer) int {
	if f.http == "" {
		fmt.Fprintln(stderr, "processor: query: --workers needs --http URL (a processor workers replica)")
		return exitUsage
	}
	body, err := workerRequestOf(req, f.topK, f.dcs)
	if err == nil && f.topK < 0 {
		err = fmt.Errorf("--top-k %d is negative", f.topK)
	}
	if err != nil {
		fmt.Fprintln(stderr, "processor: query:", err)
		return exitUsage
	}
	cl, err := f.httpCreds.client(f.timeout)
	if err != nil {
		fmt.Fprintln(stderr, "processor: query:", err)
		return exitUsage
	}
	code, err := queryWorkers(ctx, cl, f.http, body, f.json, stdout)
	if err != nil {
		fmt.Fprintln(stderr, "processor: query:", err)
	}
	return code
}
