package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/ckf-stream/ckf-stream/app/config"
	"github.com/ckf-stream/ckf-stream/app/kafka"
	"github.com/ckf-stream/ckf-stream/queryapi"
	"github.com/ckf-stream/ckf-stream/schemas"
	streamworkers "github.com/ckf-stream/ckf-stream/streams/workers"
	"github.com/ckf-stream/ckf-stream/workerapi"
)

// workerRequestOf is the body of POST /v1/worker-matches asking what req asks (its age bound,
// --max-age, included), with top_k and the DC filter (comma-separated DC ids).
func workerRequestOf(req schemas.QueryRequest, topK int, dcs string) (workerapi.WorkerMatchRequest, error) {
	if req.LaneMask.Valid || req.LaneMask64.Valid {
		return workerapi.WorkerMatchRequest{}, fmt.Errorf("--lanes is the prefix-match route's; with --workers give --dcs")
	}
	p := queryapi.RequestOf(&req)
	out := workerapi.WorkerMatchRequest{CorrelationID: p.CorrelationID, LocalBlockHashes: p.LocalBlockHashes, TokenIDs: p.TokenIDs,
		BlockSize: p.BlockSize, LoraName: p.LoraName, CacheNamespace: p.CacheNamespace, BlockExtraKeys: p.BlockExtraKeys, TopK: topK,
		MaxAgeMillis: p.MaxAgeMillis}
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
		printWorkerAnswer(stdout, &ans, "HTTP "+url, took)
	}
	switch ans.Status {
	case workerapi.StatusOK:
		return exitOK, nil
	case workerapi.StatusInvalidRequest:
		return exitUsage, nil
	}
	return exitFailure, nil
}

// printWorkerAnswer prints a on one line (status, DC, state, the DC's age: workers §10 in
// docs/spec/workers.md), then the sources as a table.
func printWorkerAnswer(w io.Writer, a *workerapi.WorkerMatchResponse, path string, took time.Duration) {
	state, age := a.State, "unknown"
	if state == "" {
		state = "none"
	}
	if a.Age.AgeMs >= 0 {
		age = strconv.FormatInt(a.Age.AgeMs, 10) + " ms"
	}
	fmt.Fprintf(w, "%s from DC %s via %s in %v: state %s, %d blocks; DC age %s, lag %d records\n",
		a.Status, a.DcID, path, took.Round(time.Microsecond), state, a.QueryBlocks, age, a.Age.LagRecords)
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

// runWorkerQuery is processor query --workers: over HTTP with --http, else over Kafka.
func runWorkerQuery(ctx context.Context, cfg config.Config, f *queryFlags, req schemas.QueryRequest, stdout, stderr io.Writer) int {
	body, err := workerRequestOf(req, f.topK, f.dcs)
	if err == nil && f.topK < 0 {
		err = fmt.Errorf("--top-k %d is negative", f.topK)
	}
	if err != nil {
		fmt.Fprintln(stderr, "processor: query:", err)
		return exitUsage
	}
	if f.http == "" {
		return queryWorkersKafka(ctx, cfg, req, body, f.json, stdout, stderr)
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

// queryWorkersKafka asks over Kafka (the worker query topic) and prints the first reply of every
// DC that answers: every DC of --dcs, or the first DC to answer without it. Each reply is
// printed as the HTTP path prints its answer (the same table, or the same JSON).
func queryWorkersKafka(ctx context.Context, cfg config.Config, req schemas.QueryRequest, body workerapi.WorkerMatchRequest, asJSON bool, stdout, stderr io.Writer) int {
	if len(cfg.Kafka.Brokers) == 0 {
		fmt.Fprintln(stderr, "processor: query: no Kafka cluster to ask: set kafka.brokers (KAFKA_BROKERS), or use --http URL")
		return exitUsage
	}
	q := schemas.WorkerQueryRequest{CorrelationID: "cli-" + strconv.FormatInt(time.Now().UnixNano(), 36), Input: req.Input, Hashes: req.Hashes,
		Tokens: req.Tokens, BlockSize: req.BlockSize, LoraName: req.LoraName, CacheNamespace: req.CacheNamespace,
		BlockExtraKeys: req.BlockExtraKeys, TopK: uint32(body.TopK), MaxAgeMillis: req.MaxAgeMillis}
	for _, d := range body.DCs {
		v, err := strconv.ParseUint(d, 16, 64)
		if err != nil {
			fmt.Fprintf(stderr, "processor: query: --dcs: %q is not a DC id (hex)\n", d)
			return exitUsage
		}
		q.DcIDs = append(q.DcIDs, v)
	}
	want := max(len(q.DcIDs), 1)
	path := "Kafka " + strings.Join(cfg.Kafka.QuerySeeds(), ",")
	start := time.Now()
	replies, err := askWorkersKafka(ctx, cfg, q, want)
	took := time.Since(start)
	code := exitOK
	for i := range replies {
		ans := workerapi.FromKafkaReply(&replies[i])
		if asJSON {
			out, _ := json.MarshalIndent(ans, "", "  ")
			fmt.Fprintln(stdout, string(out))
		} else {
			printWorkerAnswer(stdout, &ans, path, took)
		}
		switch {
		case ans.Status == workerapi.StatusInvalidRequest:
			code = exitUsage
		case ans.Status == workerapi.StatusUnavailable && code == exitOK:
			code = exitFailure
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "processor: query: %d of %d DCs answered: %v\n", len(replies), want, err)
		return exitFailure
	}
	return code
}

// askWorkersKafka sends q on the worker query topic with a client of its own and returns the
// first reply of want DCs (streams/workers.QueryClient: a DC whose replica died without leaving
// its group is asked again on a partition another replica serves, after 250 ms).
func askWorkersKafka(ctx context.Context, cfg config.Config, q schemas.WorkerQueryRequest, want int) ([]schemas.WorkerQueryReply, error) {
	opts, err := kafka.ClientOpts(cfg.Kafka, cfg.Kafka.QuerySeeds())
	if err != nil {
		return nil, err
	}
	codec, err := kafka.OpenCodec(ctx, cfg.Topics, cfg.SchemaRegistry)
	if err != nil {
		return nil, err
	}
	qcfg := streamworkers.DefaultQueryClientConfig(codec)
	if d, ok := ctx.Deadline(); ok && time.Until(d) > 0 {
		qcfg.CallTimeout, qcfg.StartTimeout = time.Until(d), time.Until(d)
	}
	qc, err := streamworkers.NewQueryClient(ctx, streamworkers.QueryClientParams{Config: qcfg, Codec: codec, ClientOpts: opts})
	if err != nil {
		return nil, err
	}
	defer qc.Close()
	return qc.Ask(ctx, q, want)
}
