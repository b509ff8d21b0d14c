package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/ckf-stream/ckf-stream/app/config"
	"github.com/ckf-stream/ckf-stream/app/kafka"
	appload "github.com/ckf-stream/ckf-stream/app/loadgen"
	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/queryapi"
	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/ckf-stream/ckf-stream/streams/query"
)

// queryFlags are processor query's own flags.
type queryFlags struct {
	http      string
	hashes    string
	tokens    string
	blockSize uint
	lora      string
	namespace string
	extraKeys string
	cacheSalt string
	lanes     string
	maxAge    time.Duration
	timeout   time.Duration
	json      bool
	httpCreds httpClientFlags
	workers   bool
	topK      int
	dcs       string
}

func (f *queryFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.http, "http", "", "ask the indexer at this `URL` (http://host:port) instead of over Kafka")
	fs.StringVar(&f.hashes, "hashes", "", "comma-separated local block `hashes` (decimal or 0x hex), one per block")
	fs.StringVar(&f.tokens, "tokens", "", "comma-separated token `ids`; cut into blocks of --block-size")
	fs.UintVar(&f.blockSize, "block-size", 0, "tokens per block, required with --tokens")
	fs.StringVar(&f.lora, "lora", "", "LoRA name salting the token blocks")
	fs.StringVar(&f.namespace, "namespace", "", "cache namespace salting the token blocks")
	fs.StringVar(&f.extraKeys, "extra-keys", "", "with --tokens: the blocks' extra keys as `JSON`, entry i for block i, as block_extra_keys of the HTTP API (for example '[[[\"img-a\",1]],[[\"img-a\",-3]]]'; null for a block without)")
	fs.StringVar(&f.cacheSalt, "cache-salt", "", "with --tokens: the request's cache `salt`, appended to the first block's extra keys as vLLM and SGLang engines salt it (the bridge's rule)")
	fs.StringVar(&f.lanes, "lanes", "", "comma-separated `lanes` to ask (default: every lane)")
	fs.DurationVar(&f.maxAge, "max-age", 0, "answer lanes older than this `age` stale, without a depth (with --workers: DCs, without sources); 0: any age the freshness policy keeps")
	fs.DurationVar(&f.timeout, "timeout", 5*time.Second, "give up after this long")
	fs.BoolVar(&f.json, "json", false, "print the reply as JSON instead of a table")
	f.httpCreds.register(fs)
	fs.BoolVar(&f.workers, "workers", false, "ask the worker stage (processor workers) for per-worker answers: a replica at --http, or every DC of --dcs over Kafka (the first DC to answer without --dcs)")
	fs.IntVar(&f.topK, "top-k", 0, "with --workers: keep the best k sources (0: every source with a non-zero answer)")
	fs.StringVar(&f.dcs, "dcs", "", "with --workers: comma-separated DC `ids` (hex) that should answer")
}

// request builds the query from the flags.
func (f *queryFlags) request() (schemas.QueryRequest, error) {
	var req schemas.QueryRequest
	switch {
	case f.hashes != "" && f.tokens != "":
		return req, errors.New("give --hashes or --tokens, not both")
	case f.hashes != "":
		hs, err := parseList(f.hashes, 64)
		if err != nil {
			return req, fmt.Errorf("--hashes: %w", err)
		}
		if f.blockSize != 0 || f.lora != "" || f.namespace != "" || f.extraKeys != "" || f.cacheSalt != "" {
			return req, errors.New("--block-size, --lora, --namespace, --extra-keys and --cache-salt go with --tokens")
		}
		req.Input, req.Hashes = schemas.InputLocalBlockHashes, schemas.AppendU64s(nil, hs)
	case f.tokens != "":
		ts, err := parseList(f.tokens, 32)
		if err != nil {
			return req, fmt.Errorf("--tokens: %w", err)
		}
		if f.blockSize > math.MaxUint32 || !schemas.ValidBlockSize(uint32(f.blockSize)) {
			return req, fmt.Errorf("--block-size %d is not in [1,%d] (required with --tokens)", f.blockSize, schemas.MaxBlockSize)
		}
		toks := make([]uint32, len(ts))
		for i, t := range ts {
			toks[i] = uint32(t)
		}
		req.Input, req.Tokens, req.BlockSize = schemas.InputTokenIDs, schemas.AppendU32s(nil, toks), uint32(f.blockSize)
		req.LoraName, req.CacheNamespace = f.lora, f.namespace
		extra, err := f.blockExtraKeys()
		if err != nil {
			return req, err
		}
		req.BlockExtraKeys = extra
		if err := schemas.CheckBlockExtraKeys(&req, len(extra)); err != nil {
			return req, fmt.Errorf("--extra-keys: %w", err)
		}
	default:
		return req, errors.New("give --hashes, or --tokens with --block-size")
	}
	if f.lanes != "" {
		ls, err := parseList(f.lanes, 8)
		if err != nil {
			return req, fmt.Errorf("--lanes: %w", err)
		}
		var mask uint64
		for _, l := range ls {
			if l >= ckf.MaxLanes {
				return req, fmt.Errorf("--lanes: lane %d is not in [0,%d]", l, ckf.MaxLanes-1)
			}
			mask |= 1 << l
		}
		req.LaneMask64 = schemas.Some(mask)
	}
	switch {
	case f.maxAge < 0:
		return req, fmt.Errorf("--max-age %v is negative", f.maxAge)
	case f.maxAge > 0:
		req.MaxAgeMillis = schemas.Some(f.maxAge.Milliseconds())
	}
	return req, nil
}

// blockExtraKeys reads --extra-keys (the HTTP API's block_extra_keys JSON) and appends
// --cache-salt to the first block's keys, where vLLM puts a request's cache_salt and where the
// bridge puts SGLang's (bridge/README.md).
func (f *queryFlags) blockExtraKeys() ([]ckf.ExtraKeys, error) {
	var extra []ckf.ExtraKeys
	if f.extraKeys != "" {
		dec := json.NewDecoder(strings.NewReader(f.extraKeys))
		if err := dec.Decode(&extra); err != nil {
			return nil, fmt.Errorf("--extra-keys: not a JSON list of the blocks' extra keys: %w", err)
		}
		if dec.More() {
			return nil, errors.New("--extra-keys: more than one JSON value")
		}
	}
	if f.cacheSalt != "" {
		if len(extra) == 0 {
			extra = make([]ckf.ExtraKeys, 1)
		}
		extra[0] = append(append(ckf.ExtraKeys(nil), extra[0]...), ckf.ExtraStringValue(f.cacheSalt))
	}
	if len(extra) == 0 {
		return nil, nil
	}
	return extra, nil
}

// parseList parses comma-separated unsigned integers of the given bit size (decimal, or 0x hex).
func parseList(s string, bitSize int) ([]uint64, error) {
	var out []uint64
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		v, err := strconv.ParseUint(part, 0, bitSize)
		if err != nil {
			return nil, fmt.Errorf("%q is not an unsigned %d-bit integer", part, bitSize)
		}
		out = append(out, v)
	}
	if len(out) == 0 {
		return nil, errors.New("the list is empty")
	}
	return out, nil
}

func runQuery(args []string, stdout, stderr io.Writer, lookupEnv func(string) (string, bool)) int {
	var f queryFlags
	fs := flag.NewFlagSet("query", flag.ContinueOnError)
	f.register(fs)
	cfg, code, ok := load(fs, args, stdout, stderr, lookupEnv)
	if !ok {
		return code
	}
	req, err := f.request()
	if err != nil {
		fmt.Fprintln(stderr, "processor: query:", err)
		return exitUsage
	}
	ctx, cancel := context.WithTimeout(context.Background(), f.timeout)
	defer cancel()
	if f.workers {
		return runWorkerQuery(ctx, cfg, &f, req, stdout, stderr)
	}
	path := "HTTP " + f.http
	start := time.Now()
	var reply schemas.QueryReply
	if f.http != "" {
		cl, cerr := f.httpCreds.client(f.timeout)
		if cerr != nil {
			fmt.Fprintln(stderr, "processor: query:", cerr)
			return exitUsage
		}
		reply, err = appload.HTTPQuery(cl, f.http)(ctx, req)
	} else {
		if len(cfg.Kafka.Brokers) == 0 {
			fmt.Fprintln(stderr, "processor: query: no Kafka cluster to ask: set kafka.brokers (KAFKA_BROKERS), or use --http URL")
			return exitUsage
		}
		path = "Kafka " + strings.Join(cfg.Kafka.QuerySeeds(), ",")
		reply, err = queryKafka(ctx, cfg, f.timeout, req)
	}
	took := time.Since(start)
	if err != nil {
		fmt.Fprintln(stderr, "processor: query:", err)
		return exitFailure
	}
	if f.json {
		b, _ := json.MarshalIndent(queryapi.ResponseOf(&reply, nil), "", "  ") // the HTTP answer's form, whichever path asked
		fmt.Fprintln(stdout, string(b))
	} else {
		printReply(stdout, reply, path, took)
	}
	switch reply.Status {
	case schemas.QueryOK:
		return exitOK
	case schemas.QueryInvalidRequest:
		return exitUsage
	}
	return exitFailure
}

// queryKafka sends one request through a query.QueryClient (its own reply partition, read
// from its end) and waits for the reply.
func queryKafka(ctx context.Context, cfg config.Config, timeout time.Duration, req schemas.QueryRequest) (schemas.QueryReply, error) {
	opts, err := kafka.ClientOpts(cfg.Kafka, cfg.Kafka.QuerySeeds())
	if err != nil {
		return schemas.QueryReply{}, err
	}
	codec, err := kafka.OpenCodec(ctx, cfg.Topics, cfg.SchemaRegistry)
	if err != nil {
		return schemas.QueryReply{}, err
	}
	qcfg := query.DefaultQueryClientConfig()
	qcfg.CallTimeout, qcfg.StartTimeout = timeout, timeout
	qc, err := query.NewQueryClient(ctx, query.QueryClientParams{Config: qcfg, Codec: codec, ClientOpts: opts})
	if err != nil {
		return schemas.QueryReply{}, err
	}
	defer qc.Close()
	queryapi.Widen(&req) // this command reads answers of up to 64 lanes (consumer §16)
	return qc.Query(ctx, req)
}

// printReply prints the reply as a table of per-DC depths.
func printReply(w io.Writer, r schemas.QueryReply, path string, took time.Duration) {
	fmt.Fprintf(w, "%s: %d blocks, %d lanes answered, %v over %s (correlation id %s)\n",
		r.Status, r.QueryBlocks, len(r.Lanes), took.Round(time.Microsecond), path, r.CorrelationID)
	if r.ErrorMessage != "" {
		fmt.Fprintln(w, "  "+r.ErrorMessage)
	}
	if len(r.Lanes) == 0 && len(r.LaneStates) == 0 {
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "LANE\tDC\tSTATE\tAGE\tDEPTH\tOF\t")
	if len(r.LaneStates) == 0 { // an indexer that does not report lane states
		for _, l := range r.Lanes {
			fmt.Fprintf(tw, "%d\t%s\t-\t-\t%d\t%d\t\n", l.Lane, ckf.DcID(l.DcID), l.Depth, r.QueryBlocks)
		}
	}
	j := 0
	for _, s := range r.LaneStates {
		dc, age, depth := "-", "-", "-"
		for j < len(r.Lanes) && r.Lanes[j].Lane < s.Lane {
			j++
		}
		if j < len(r.Lanes) && r.Lanes[j].Lane == s.Lane {
			dc = ckf.DcID(r.Lanes[j].DcID).String()
			if s.State.HasDepth() {
				depth = strconv.FormatUint(uint64(r.Lanes[j].Depth), 10)
			}
		}
		if a, ok := s.AgeMillis.Get(); ok {
			age = (time.Duration(a) * time.Millisecond).String()
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%d\t\n", s.Lane, dc, queryapi.LaneStateName(s.State), age, depth, r.QueryBlocks)
	}
	_ = tw.Flush()
}
