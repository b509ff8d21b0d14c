package main

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/app/config"
	"github.com/ckf-stream/ckf-stream/app/httpserver"
	"github.com/ckf-stream/ckf-stream/app/indexer"
	"github.com/ckf-stream/ckf-stream/app/kafka"
	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/ckf/index"
	"github.com/ckf-stream/ckf-stream/ckf/producer"
	"github.com/ckf-stream/ckf-stream/streams/lanes"
	"github.com/ckf-stream/ckf-stream/streams/query"
	"github.com/ckf-stream/ckf-stream/testenv"
	"github.com/twmb/franz-go/pkg/kgo"
)

const testDomain = "c5000000000000000000000000000000:5c000000000000000000000000000000"

// TestIndexerConfigErrors: every invalid field of the indexer section stops processor indexer
// before it starts, with exit status 2 and a message naming the field.
func TestIndexerConfigErrors(t *testing.T) {
	ok := []string{"--indexer.domain=" + testDomain, "--indexer.lanes=0=0x10,1=0x11"}
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{nil, []string{
			"processor: config: indexer.domain: is required by the indexer",
			"processor: config: indexer.lanes: is required by the indexer",
		}},
		{[]string{"--indexer.lanes=0=1"}, []string{"processor: config: indexer.domain: is required by the indexer"}},
		{[]string{"--indexer.domain=" + testDomain}, []string{"processor: config: indexer.lanes: is required by the indexer"}},
		{append(ok, "--indexer.domain=abc"), []string{`processor: config: indexer.domain: "abc" is not <32 hex digits>:<32 hex digits>`}},
		{append(ok, "--indexer.domain_source=guessed"), []string{`processor: config: indexer.domain_source: "guessed" is not one of explicit, default_derived`}},
		{append(ok, "--indexer.lanes=64=0x10"), []string{"processor: config: indexer.lanes: lane 64 is not in [0,63]"}},
		{append(ok, "--indexer.lanes=0=7,3=7"), []string{"processor: config: indexer.lanes: DC 0x7 is on lanes 0 and 3"}},
		{append(ok, "--indexer.lanes=0=x"), []string{`DC id "x" of lane 0 is not an unsigned 64-bit integer`}},
		{append(ok, "--indexer.bucket_count=3"), []string{"processor: config: indexer.bucket_count: 3 is not 0 or a power of two in [2,16777216]"}},
		{append(ok, "--indexer.expected_blocks_per_dc=0"), []string{"processor: config: indexer.expected_blocks_per_dc: must be positive when indexer.bucket_count is 0"}},
		{append(ok, "--indexer.expected_blocks_per_dc=100000000000"), []string{"processor: config: indexer.expected_blocks_per_dc: 100000000000 needs more than 16777216 buckets"}},
		{append(ok, "--indexer.verification_window=0"), []string{"processor: config: indexer.verification_window: 0 is not in [1,8]"}},
		{append(ok, "--indexer.freshness.max_record_lag=-1"), []string{"processor: config: indexer.freshness.max_record_lag: must not be negative, got -1"}},
		{append(ok, "--indexer.freshness.max_time_lag=-1s"), []string{"processor: config: indexer.freshness.max_time_lag: must not be negative, got -1s"}},
		{append(ok, "--indexer.query_group="), []string{"processor: config: indexer.query_group: must not be empty"}},
		{append(ok, "--indexer.query_batch_size=70000"), []string{"processor: config: indexer.query_batch_size: must be in [1, 65536], got 70000"}},
	} {
		code, out, errOut := runCmd(t, nil, append([]string{"indexer", "--http.listen=127.0.0.1:0"}, tc.args...)...)
		if code != exitUsage || out != "" {
			t.Errorf("indexer %q: exit %d, stdout %q; want exit %d", tc.args, code, out, exitUsage)
		}
		for _, w := range tc.want {
			if !strings.Contains(errOut, w) {
				t.Errorf("indexer %q: stderr %q lacks %q", tc.args, errOut, w)
			}
		}
	}
}

type discardSink struct{}

func (discardSink) Enqueue(ckf.Delta) error { return nil }

// testAnswerer returns an Answerer over an in-process table whose lane 0 (DC 0x10) holds the
// chain 1..8 of local block hashes and whose lane 1 (DC 0x11) is configured but not ready.
func testAnswerer(t *testing.T) *query.Answerer {
	t.Helper()
	ixc := config.Default().Indexer
	ixc.Domain, ixc.Lanes, ixc.ExpectedBlocksPerDC = testDomain, config.LaneMap{0: 0x10, 1: 0x11}, 4096
	m, _, err := indexer.BuildManifest(ixc, 1)
	if err != nil {
		t.Fatal(err)
	}
	g, err := index.NewGlobalIndexer(m, ckf.DefaultSearchConfig())
	if err != nil {
		t.Fatal(err)
	}
	state, err := producer.NewDcState(ckf.NewCkfConfig(4096))
	if err != nil {
		t.Fatal(err)
	}
	pool, _ := m.PoolOf(0)
	id := ckf.ProducerIdentity{Pool: pool, Incarnation: 1, LayoutGeneration: 1, Format: state.Format()}
	pub := producer.NewPublisher(id, 0, discardSink{})
	var blocks []producer.StoredBlock
	for h := uint64(1); h <= 8; h++ {
		blocks = append(blocks, producer.StoredBlock{BlockHash: ckf.ExternalBlockHash(100 + h), TokensHash: ckf.LocalBlockHash(h)})
	}
	out := state.ApplyEvent(producer.RouterEvent{WorkerID: 1, Event: producer.KvCacheEvent{Kind: producer.KvEventStored, Stored: producer.StoreData{Blocks: blocks}}})
	if out.FirstError != nil {
		t.Fatal(out.FirstError)
	}
	if _, err := pub.Publish(out.Publication); err != nil {
		t.Fatal(err)
	}
	lease := ckf.LaneLease{Consumer: 1, Lane: 0, Epoch: 1}
	snap, err := pub.SnapshotAfterBarrier(state, lease)
	if err != nil {
		t.Fatal(err)
	}
	in, err := g.ClaimLane(0)
	if err != nil {
		t.Fatal(err)
	}
	if err := in.Assign(id, lease); err != nil {
		t.Fatal(err)
	}
	if out := in.InstallSnapshot(&snap); out.Kind != index.OutcomeSnapshotInstalled {
		t.Fatalf("install: %v", out)
	}
	return query.NewAnswerer(g, nil)
}

// testIndexerHTTP serves the indexer API of testAnswerer.
func testIndexerHTTP(t *testing.T) string {
	t.Helper()
	ans := testAnswerer(t)
	api, err := indexer.NewAPI(indexer.APIParams{Answerer: ans, Lanes: func() []lanes.LaneStatus { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	for _, r := range api.Routes() {
		mux.Handle(r.Pattern, r.Handler)
	}
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL
}

// depthRow is lane 0's row of processor query's table: its DC, state (exact), age, depth (m[1])
// and the query's blocks (m[2]).
var depthRow = regexp.MustCompile(`(?m)^\s+0\s+0000000000000010\s+exact\s+\S+\s+(\d+)\s+(\d+)\s*$`)

func TestQueryCommandHTTP(t *testing.T) {
	url := testIndexerHTTP(t)
	code, out, errOut := runCmd(t, nil, "query", "--http", url, "--hashes", "1,2,3,0x4,5,77")
	if m := depthRow.FindStringSubmatch(out); code != exitOK || m == nil || m[1] != "5" || m[2] != "6" || !strings.HasPrefix(out, "OK: 6 blocks, 1 lanes answered") {
		t.Fatalf("query --hashes: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	// Tokens: blocks of 2 tokens hash to other values than 1..8, so the depth is 0.
	code, out, _ = runCmd(t, nil, "query", "--http", url, "--tokens", "1,2,3,4,5", "--block-size", "2", "--json")
	if code != exitOK || !strings.Contains(out, `"query_blocks": 2`) || !strings.Contains(out, `"depth": 0`) {
		t.Fatalf("query --tokens --json: exit %d, stdout %q", code, out)
	}
	// Lane 1 only: configured, never ready.
	code, out, _ = runCmd(t, nil, "query", "--http", url, "--hashes", "1", "--lanes", "1")
	if code != exitFailure || !strings.HasPrefix(out, "UNAVAILABLE: 1 blocks") {
		t.Fatalf("query --lanes 1: exit %d, stdout %q", code, out)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "give --hashes, or --tokens with --block-size"},
		{[]string{"--hashes", "1", "--tokens", "2"}, "not both"},
		{[]string{"--tokens", "1,2"}, "--block-size 0 is not in [1,65536]"},
		{[]string{"--hashes", "1,x"}, `--hashes: "x" is not an unsigned 64-bit integer`},
		{[]string{"--tokens", "4294967296", "--block-size", "1"}, `--tokens: "4294967296" is not an unsigned 32-bit integer`},
		{[]string{"--hashes", "1", "--lanes", "64"}, "--lanes: lane 64 is not in [0,63]"},
		{[]string{"--hashes", "1", "--block-size", "4"}, "go with --tokens"},
		{[]string{"--hashes", "1"}, "no Kafka cluster to ask"},
	} {
		code, _, errOut := runCmd(t, nil, append([]string{"query"}, tc.args...)...)
		if code != exitUsage || !strings.Contains(errOut, tc.want) {
			t.Errorf("query %q: exit %d, stderr %q; want %q", tc.args, code, errOut, tc.want)
		}
	}
	code, _, errOut = runCmd(t, nil, "query", "--http", "http://127.0.0.1:1", "--hashes", "1", "--timeout", "2s")
	if code != exitFailure || !strings.Contains(errOut, "processor: query:") {
		t.Errorf("query of nobody: exit %d, stderr %q", code, errOut)
	}
}

// TestQueryCommandKafka asks over Kafka a query service that answers from testAnswerer.
func TestQueryCommandKafka(t *testing.T) {
	queries, replies, dead := testenv.NewTopic(t, 2), testenv.NewTopic(t, 2), testenv.NewTopic(t, 1)
	codec, err := kafka.NewCodec(config.DefaultTopics(""))
	if err != nil {
		t.Fatal(err)
	}
	qcfg := query.DefaultQueryConfig()
	qcfg.RequestTopic, qcfg.ReplyTopic, qcfg.DeadLetterTopic, qcfg.Group = queries, replies, dead, testenv.UniqueName(t, "g")
	qs, err := query.NewQueryService(query.QueryServiceParams{
		Config:   qcfg,
		Answerer: testAnswerer(t), Codec: codec, ClientOpts: []kgo.Opt{kgo.SeedBrokers(testenv.Brokers(t)...)},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := qs.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = qs.Close(ctx)
	})
	brokers := strings.Join(testenv.Brokers(t), ",")
	for _, vars := range []map[string]string{
		{"KAFKA_BROKERS": brokers},
		// kafka.query_brokers, when set, is the query path's route: kafka.brokers (here a port
		// nothing listens on) is not used.
		{"KAFKA_BROKERS": "127.0.0.1:1", "CKF_KAFKA_QUERY_BROKERS": brokers},
	} {
		code, out, errOut := runCmd(t, vars, "query", "--topics.queries="+queries, "--topics.query_replies="+replies,
			"--topics.dead_letter="+dead, "--hashes", "1,2,3,9", "--timeout", "30s")
		if m := depthRow.FindStringSubmatch(out); code != exitOK || m == nil || m[1] != "3" || !strings.Contains(out, "over Kafka "+brokers) {
			t.Fatalf("query over Kafka with %v: exit %d, stdout %q, stderr %q", vars, code, out, errOut)
		}
	}
}

// TestLoadgenCommand runs a short load: events into per-DC topics on the broker, queries over
// HTTP to an in-process indexer API; the progress lines and the report come out, exit 0.
func TestLoadgenCommand(t *testing.T) {
	url := testIndexerHTTP(t)
	prefix := testenv.UniqueName(t, "lg") + "."
	vars := map[string]string{"KAFKA_BROKERS": strings.Join(testenv.Brokers(t), ","), "CKF_TOPIC_PREFIX": prefix}
	topics := config.DefaultTopics(prefix)
	kvTopics := []string{topics.KVEvents + ".dc-a", topics.KVEvents + ".dc-b"}
	t.Cleanup(func() {
		names := kvTopics
		for _, s := range kafka.TopicLayout(topics) {
			names = append(names, s.Name)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = testenv.Admin(t).DeleteTopics(ctx, names...)
	})
	// One configuration file for the whole deployment: its http.listen is the indexer's, here a
	// port another process holds; loadgen serves its /metrics on a free port instead of failing.
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	shared := filepath.Join(t.TempDir(), "deployment.yaml")
	if err := os.WriteFile(shared, []byte("http:\n  listen: "+held.Addr().String()+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runCmd(t, vars, "loadgen", "--config", shared, "--dcs=0xa,0xb", "--duration=2s", "--event-rate=400", "--query-rate=40",
		"--http", url, "--progress=500ms", "--seed=9")
	if code != exitOK {
		t.Fatalf("loadgen: exit %d, stdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	for _, re := range []string{
		`(?m)^loadgen +[0-9.]+s  events +\d+`,
		`events (\d{3,}) acknowledged`,
		`queries \d+ \([0-9.]+/s\): ok [1-9]\d*`,
		`query latency p50 [0-9.]+[µm]?s`,
		`workload: [1-9]\d* stores`,
		// The indexer here is not fed by the run's topics: with the run's own namespace, no
		// earlier state answers, and the report says its events never reached the index.
		`blocks salted with the cache namespace "loadgen-[0-9a-z]+"`,
		`no query found a block of this run`,
	} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("loadgen output lacks %s:\n%s", re, out)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ends, err := testenv.Admin(t).ListEndOffsets(ctx, kvTopics...)
	if err != nil {
		t.Fatal(err)
	}
	for _, topic := range kvTopics {
		var n int64
		for _, o := range ends[topic] {
			n += o.Offset
		}
		if n < 100 {
			t.Errorf("topic %s holds %d records", topic, n)
		}
	}
	if code, _, errOut := runCmd(t, vars, "loadgen", "--event-rate=-1"); code != exitUsage || !strings.Contains(errOut, "must not be negative") {
		t.Errorf("negative rate: exit %d, stderr %q", code, errOut)
	}
}

// TestQueryCommandLockedHTTP asks an indexer whose query API needs TLS and a bearer token:
// processor query --http presents them with --ca-file and --token-file, and a query without the
// token is refused with an error that says which flag gives it.
func TestQueryCommandLockedHTTP(t *testing.T) {
	dir := t.TempDir()
	pki, err := testenv.WritePKI(dir)
	if err != nil {
		t.Fatal(err)
	}
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte("a-token-of-sufficient-length\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	api, err := indexer.NewAPI(indexer.APIParams{Answerer: testAnswerer(t), Lanes: func() []lanes.LaneStatus { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := httpserver.New(httpserver.Params{Routes: api.Routes(), Config: config.HTTP{Listen: "127.0.0.1:0",
		TLS:  config.HTTPTLS{CertFile: pki.ServerCertFile, KeyFile: pki.ServerKeyFile},
		Auth: config.HTTPAuth{BearerTokenFile: tokenFile}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Stop(context.Background()) })
	url := "https://" + srv.Addr().String()

	code, out, errOut := runCmd(t, nil, "query", "--http", url, "--ca-file", pki.CAFile, "--token-file", tokenFile, "--hashes", "1,2,3")
	if code != exitOK || !strings.HasPrefix(out, "OK: 3 blocks") {
		t.Fatalf("query with the token: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no token", []string{"--ca-file", pki.CAFile}, exitFailure, "401 Unauthorized: the indexer's query API is locked"},
		{"untrusted certificate", []string{"--ca-file", pki.OtherCAFile, "--token-file", tokenFile}, exitFailure, "certificate signed by unknown authority"},
		{"certificate without its key", []string{"--ca-file", pki.CAFile, "--cert-file", pki.ClientCertFile}, exitUsage, "needs both its certificate and its key file"},
		{"missing token file", []string{"--token-file", filepath.Join(dir, "nothing")}, exitUsage, "token file: open"},
	} {
		code, _, errOut := runCmd(t, nil, append([]string{"query", "--http", url, "--hashes", "1"}, tc.args...)...)
		if code != tc.code || !strings.Contains(errOut, tc.want) {
			t.Errorf("%s: exit %d, stderr %q; want exit %d and %q", tc.name, code, errOut, tc.code, tc.want)
		}
	}
}
