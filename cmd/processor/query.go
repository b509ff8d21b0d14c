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

// request builds the query from the flags: the flags fill a queryapi.PrefixMatchRequest (each
// flag is one field of the HTTP body) and its rules are the route's own
// (queryapi.PrefixMatchRequest.Request), stated with the flags' names; what is left here is
// reading each flag's text.
func (f *queryFlags) request() (schemas.QueryRequest, error) {
	var body queryapi.PrefixMatchRequest
	if f.hashes != "" {
		hs, err := parseList(f.hashes, 64)
		if err != nil {
			return schemas.QueryRequest{}, fmt.Errorf("--hashes: %w", err)
		}
		body.LocalBlockHashes = hs
	}
	if f.tokens != "" {
		ts, err := parseList(f.tokens, 32)
		if err != nil {
			return schemas.QueryRequest{}, fmt.Errorf("--tokens: %w", err)
		}
		body.TokenIDs = make([]uint32, len(ts))
		for i, t := range ts {
			body.TokenIDs[i] = uint32(t)
		}
	}
	if f.blockSize > math.MaxUint32 {
		return schemas.QueryRequest{}, fmt.Errorf("--block-size %d is not in [1,%d]", f.blockSize, schemas.MaxBlockSize)
	}
	body.BlockSize, body.LoraName, body.CacheNamespace = uint32(f.blockSize), f.lora, f.namespace
	extra, err := f.blockExtraKeys()
	if err != nil {
		return schemas.QueryRequest{}, err
	}
	body.BlockExtraKeys = extra
	if f.lanes != "" {
		ls, err := parseList(f.lanes, 8)
		if err != nil {
			return schemas.QueryRequest{}, fmt.Errorf("--lanes: %w", err)
		}
		var mask uint64
		for _, l := range ls {
			if l >= ckf.MaxLanes {
				return schemas.QueryRequest{}, fmt.Errorf("--lanes: lane %d is not in [0,%d]", l, ckf.MaxLanes-1)
			}
			mask |= 1 << l
		}
		body.LaneMask = &mask
	}
	switch {
	case f.maxAge < 0:
		return schemas.QueryRequest{}, fmt.Errorf("--max-age %v is negative", f.maxAge)
	case f.maxAge > 0:
		ms := uint64(f.maxAge.Milliseconds())
		body.MaxAgeMillis = &ms
	}
	req, err := body.Request()
	if err != nil {
		return req, errors.New(flagNames.Replace(strings.TrimPrefix(err.Error(), queryapi.ErrBadRequest.Error()+": ")))
	}
	return req, nil
}

// flagNames says the HTTP body's field names, in which the route's rules speak, as the flags
// that set them.
var flagNames = strings.NewReplacer("local_block_hashes", "--hashes", "token_ids", "--tokens", "block_size", "--block-size",
	"lora_name", "--lora", "cache_namespace", "--namespace", "block_extra_keys", "--extra-keys/--cache-salt", "max_age_ms", "--max-age")

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

// printReply prints the reply as a table of per-DC depths: the rows of the HTTP answer's lanes
// (queryapi.ResponseOf, the one mapping of a reply, whichever path asked).
func printReply(w io.Writer, r schemas.QueryReply, path string, took time.Duration) {
	fmt.Fprintf(w, "%s: %d blocks, %d lanes answered, %v over %s (correlation id %s)\n",
		r.Status, r.QueryBlocks, len(r.Lanes), took.Round(time.Microsecond), path, r.CorrelationID)
	if r.ErrorMessage != "" {
		fmt.Fprintln(w, "  "+r.ErrorMessage)
	}
	resp := queryapi.ResponseOf(&r, nil)
	if len(resp.Matches) == 0 && len(resp.Lanes) == 0 {
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "LANE\tDC\tSTATE\tAGE\tDEPTH\tOF\t")
	if len(resp.Lanes) == 0 { // an indexer that does not report lane states
		for _, m := range resp.Matches {
			fmt.Fprintf(tw, "%d\t%s\t-\t-\t%d\t%d\t\n", m.Lane, m.DcID, m.Depth, r.QueryBlocks)
		}
	}
	for _, l := range resp.Lanes {
		dc, age, depth := "-", "-", "-"
		if l.DcID != "" {
			dc = l.DcID
		}
		if l.AgeMillis != nil {
			age = (time.Duration(*l.AgeMillis) * time.Millisecond).String()
		}
		if l.Depth != nil {
			depth = strconv.FormatUint(uint64(*l.Depth), 10)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%d\t\n", l.Lane, dc, l.State, age, depth, r.QueryBlocks)
	}
	_ = tw.Flush()
}
