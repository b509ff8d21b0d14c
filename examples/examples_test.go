// Package examples runs the client examples of docs/producers-and-routers.md against the real
// broker: examples/python (confluent-kafka + fastavro, schemas read from schemas/*.avsc) talks to
// a relay and an indexer built from this module, as a client written outside the project would.
package examples

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/app"
	"github.com/ckf-stream/ckf-stream/app/config"
	"github.com/ckf-stream/ckf-stream/app/indexer"
	"github.com/ckf-stream/ckf-stream/app/kafka"
	"github.com/ckf-stream/ckf-stream/app/relay"
	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/ckf-stream/ckf-stream/testenv"
	"github.com/twmb/franz-go/pkg/sr"
	"go.uber.org/fx"
)

// pythonDir holds the examples, their pinned requirements and (untracked) the virtual
// environment they run in.
const pythonDir = "python"

// python returns the interpreter of examples/python/.venv, which venv.sh creates, or refreshes
// when requirements.txt changed, and otherwise reuses, so only the first run pays for pip.
// Without python3 on the PATH the test is skipped: that is the one thing it cannot provide.
func python(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 is not installed: the Python client examples (examples/python) are not run")
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.Command("bash", filepath.Join(pythonDir, "venv.sh"))
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("examples/python/venv.sh: %v\n%s", err, stderr.Bytes())
	}
	py := strings.TrimSpace(stdout.String())
	if _, err := os.Stat(py); err != nil {
		t.Fatalf("examples/python/venv.sh printed %q: %v", py, err)
	}
	return py
}

// runPython runs one example script and returns its standard output; a non-zero exit fails t
// with both streams.
func runPython(t *testing.T, py, script string, args ...string) []byte {
	t.Helper()
	stdout, stderr, code := runPythonStatus(t, py, script, args...)
	if code != 0 {
		t.Fatalf("%s %s: exit status %d\nstdout:\n%s\nstderr:\n%s", script, strings.Join(args, " "), code, stdout, stderr)
	}
	return stdout
}

// runPythonStatus runs one example script and returns both streams and its exit status; a
// script that cannot be run or is killed fails t. The scripts' registry variables are left out
// of their environment, so that only --registry gives them one.
func runPythonStatus(t *testing.T, py, script string, args ...string) (stdout, stderr []byte, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, py, append([]string{filepath.Join(pythonDir, script)}, args...)...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "CKF_SCHEMA_REGISTRY_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exitErr *exec.ExitError
	if err != nil && (!errors.As(err, &exitErr) || exitErr.ExitCode() < 0) {
		t.Fatalf("%s %s: %v\nstdout:\n%s\nstderr:\n%s", script, strings.Join(args, " "), err, out.Bytes(), errOut.Bytes())
	}
	if exitErr != nil {
		code = exitErr.ExitCode()
	}
	return out.Bytes(), errOut.Bytes(), code
}

// tokenList renders token ids as the examples' --tokens flag takes them.
func tokenList(tokens []uint32) string {
	parts := make([]string, len(tokens))
	for i, tok := range tokens {
		parts[i] = strconv.FormatUint(uint64(tok), 10)
	}
	return strings.Join(parts, ",")
}

// TestPythonHashesMatchCkf: the Python producer's hashing (xxhash's XXH3-64) gives the same salt
// seed, local block hashes and canonical chain as ckf, with and without the LoRA and namespace
// salts, including a trailing partial block that is dropped.
func TestPythonHashesMatchCkf(t *testing.T) {
	py := python(t)
	tokens := []uint32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 0xFFFFFFFF, 65536, 7, 7}
	for _, c := range []struct {
		blockSize       int
		lora, namespace string
	}{{4, "", ""}, {4, "sql-adapter", ""}, {3, "", "tenant-42"}, {5, "sql-adapter", "tenant-42"}} {
		var got struct {
			SaltSeed  uint64   `json:"salt_seed"`
			Local     []uint64 `json:"local_block_hashes"`
			Canonical []uint64 `json:"canonical_hashes"`
		}
		out := runPython(t, py, "producer.py", "--print-hashes", "--tokens", tokenList(tokens),
			"--block-size", strconv.Itoa(c.blockSize), "--lora", c.lora, "--namespace", c.namespace)
		if err := json.Unmarshal(out, &got); err != nil {
			t.Fatalf("%+v: %v in %s", c, err, out)
		}
		seed := ckf.BlockSaltSeed(c.lora, c.namespace)
		var local []uint64
		for _, h := range ckf.TokenBlockHashes(tokens, c.blockSize, seed) {
			local = append(local, uint64(h))
		}
		canonical := ckf.SequenceHashes(local)
		if got.SaltSeed != seed || !slices.Equal(got.Local, local) || !slices.Equal(got.Canonical, canonical) {
			t.Errorf("%+v: Python salt %d, local %v, canonical %v; ckf %d, %v, %v",
				c, got.SaltSeed, got.Local, got.Canonical, seed, local, canonical)
		}
	}
}

// exampleDomain is the indexer domain of the end-to-end tests (any 32:32 hex digits).
const exampleDomain = "0123456789abcdef0123456789abcdef:fedcba9876543210fedcba9876543210"

// TestPythonExtraKeysMatchCkf: the Python contract's extra-key encoding (block_extra_keys of the
// Kafka request) is ckf's canonical encoding byte for byte, and its hashes of blocks with extra
// keys are ckf.TokenBlockHashesExtra's.
func TestPythonExtraKeysMatchCkf(t *testing.T) {
	py := python(t)
	const blocks = `[[["img-a", 1], "salt-1"], null, [null, true, -5, 18446744073709551615, 0.25, {"bytes": "00ff"}, [[7]]]]`
	cmd := exec.Command(py, "-c", `import json, sys, ckf_contract as cc
blocks = json.loads(sys.argv[1])
enc = cc.block_extra_keys([b or [] for b in blocks])
print(json.dumps({"items": [e.hex() for e in enc], "local": cc.local_block_hashes_extra(list(range(1, 14)), 4, [b or [] for b in blocks], "sql-adapter")}))`, blocks)
	cmd.Dir = pythonDir
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("python: %v", err)
	}
	var got struct {
		Items []string `json:"items"`
		Local []uint64 `json:"local"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("%s: %v", out, err)
	}
	var keys []ckf.ExtraKeys
	if err := json.Unmarshal([]byte(blocks), &keys); err != nil {
		t.Fatal(err)
	}
	tokens := make([]uint32, 13)
	for i := range tokens {
		tokens[i] = uint32(i + 1)
	}
	var local []uint64
	for _, h := range ckf.TokenBlockHashesExtra(tokens, 4, keys, ckf.BlockSaltSeed("sql-adapter", "")) {
		local = append(local, uint64(h))
	}
	if !slices.Equal(got.Local, local) || len(got.Items) != len(keys) {
		t.Fatalf("Python hashes %x (%d items), ckf %x", got.Local, len(got.Items), local)
	}
	for i, k := range keys {
		if want := hex.EncodeToString(k.AppendCanonical(nil)); got.Items[i] != want {
			t.Errorf("block %d: Python %s, ckf %s", i, got.Items[i], want)
		}
	}
}

// The router's exit statuses (router.py's help, examples/python/README.md).
const (
	exitTimeout        = 1
	exitUnavailable    = 3
	exitInvalidRequest = 4
	exitUnreadable     = 5
	exitKafka          = 6
)

// example is a relay for DC 0xa1 on lane 3 and an indexer (lanes and its Kafka query service) on
// the real broker, which the Python examples talk to.
type example struct {
	py      string
	brokers string
	cfg     config.Config
	kvTopic string // the DC's own KV-events topic, which the relay reads
	ix      *indexer.Indexer
}

// startExample starts the relay and the indexer with the settings of both tests plus extra
// (for example the schema registry), waits until lane 3 is ready on the indexer, and stops both
// and deletes their topics when the test ends.
func startExample(t *testing.T, extra ...string) *example {
	t.Helper()
	e := &example{py: python(t), brokers: strings.Join(testenv.Brokers(t), ",")}
	prefix := testenv.UniqueName(t, "examples") + "."
	e.kvTopic = prefix + "kv-events.dc-a1" // each relay reads its own DC's topic
	cfg, err := config.Load(config.Sources{
		Args: append([]string{
			"--kafka.brokers=" + e.brokers, "--topic_prefix=" + prefix,
			"--topics.kv_events=" + e.kvTopic, "--http.listen=127.0.0.1:0", "--log.level=warn",
			"--indexer.domain=" + exampleDomain, "--indexer.lanes=3=0xa1", "--indexer.expected_blocks_per_dc=4096",
			"--indexer.query_group=" + prefix + "queries",
			"--relay.dc_id=0xa1", "--relay.lane=3", "--relay.expected_blocks=4096", "--relay.heartbeat_interval=100ms",
		}, extra...),
		LookupEnv: func(string) (string, bool) { return "", false },
	})
	if err != nil {
		t.Fatal(err)
	}
	e.cfg = cfg
	t.Cleanup(func() {
		var names []string
		for _, s := range kafka.TopicLayout(cfg.Topics) {
			names = append(names, s.Name)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = testenv.Admin(t).DeleteTopics(ctx, names...)
	})
	var rl *relay.Relay
	startApp(t, app.New(cfg, relay.Module, fx.Populate(&rl)))
	select {
	case <-rl.Streams().Started():
	case <-time.After(time.Minute):
		t.Fatal("the relay did not start within a minute")
	}
	startApp(t, app.New(cfg, indexer.Module, fx.Populate(&e.ix)))
	testenv.WaitUntil(t, time.Minute, "lane 3 ready on the indexer", func() bool { return e.ix.API().Ready(context.Background()) == nil })
	return e
}

// The stored prompt of both tests: six blocks of four tokens, salted by a LoRA adapter; the
// prompt asked for is those tokens plus two more blocks (and a partial one), so it matches six of
// its eight blocks.
const blockSize, lora = 4, "sql-adapter"

func storedTokens() []uint32 {
	stored := make([]uint32, 6*blockSize)
	for i := range stored {
		stored[i] = uint32(1000 + i)
	}
	return stored
}

func promptTokens() []uint32 {
	return append(storedTokens(), 1, 2, 3, 4, 5, 6, 7, 8, 9)
}

// produce runs the Python producer: the stored blocks by worker 7 in three events of two blocks
// (the second and third name their parent), with the producer flags extra. It then waits until
// the indexer's answer shows them: the events become a delta that the indexer applies.
func (e *example) produce(t *testing.T, extra ...string) {
	t.Helper()
	runPython(t, e.py, "producer.py", append([]string{"--bootstrap", e.brokers, "--topic", e.kvTopic,
		"--worker-id", "7", "--tokens", tokenList(storedTokens()), "--block-size", strconv.Itoa(blockSize), "--lora", lora,
		"--blocks-per-event", "2", "--first-block-id", "0x100"}, extra...)...)
	req := schemas.QueryRequest{CorrelationID: "wait", Input: schemas.InputTokenIDs, Tokens: schemas.AppendU32s(nil, promptTokens()),
		BlockSize: blockSize, LoraName: lora}
	testenv.WaitUntil(t, time.Minute, "the stored blocks visible to the indexer", func() bool {
		r := e.ix.Answerer().AnswerPooled(&req)
		return r.Status == schemas.QueryOK && len(r.Lanes) == 1 && r.Lanes[0].Depth == 6
	})
}

// routerReply is what router.py prints.
type routerReply struct {
	Status       string `json:"status"`
	ErrorMessage string `json:"error_message"`
	QueryBlocks  int    `json:"query_blocks"`
	ReadyLanes   int    `json:"ready_lanes"`
	// IncompleteLanes is read by fastavro from the reply's trailing field (nil if absent).
	IncompleteLanes *int `json:"incomplete_lanes"`
	Lanes           []struct {
		Lane  int    `json:"lane"`
		DcID  uint64 `json:"dc_id"`
		Pool  string `json:"pool"`
		Depth int    `json:"depth"`
	} `json:"lanes"`
	LaneStates []struct {
		Lane  int    `json:"lane"`
		State string `json:"state"`
		AgeMs *int64 `json:"age_ms"`
	} `json:"lane_states"`
}

// route runs the Python router against the indexer's topics with the router flags args and
// returns its reply, its stderr and its exit status; output that is not a reply leaves the reply
// empty.
func (e *example) route(t *testing.T, args ...string) (routerReply, []byte, int) {
	t.Helper()
	stdout, stderr, code := runPythonStatus(t, e.py, "router.py", append([]string{"--bootstrap", e.brokers,
		"--request-topic", e.cfg.Topics.Queries, "--reply-topic", e.cfg.Topics.QueryReplies}, args...)...)
	var r routerReply
	if len(bytes.TrimSpace(stdout)) > 0 {
		if err := json.Unmarshal(stdout, &r); err != nil {
			t.Fatalf("router output %q: %v\nstderr:\n%s", stdout, err, stderr)
		}
	}
	return r, stderr, code
}

// checkDepths asks for the prompt with and without the LoRA salt (router flags extra) and checks
// the depths: 6 on lane 3 with the salt, 0 without (the same tokens hash to other blocks).
func (e *example) checkDepths(t *testing.T, extra ...string) {
	t.Helper()
	ask := func(loraName string) routerReply {
		t.Helper()
		r, stderr, code := e.route(t, append([]string{"--tokens", tokenList(promptTokens()), "--block-size", strconv.Itoa(blockSize),
			"--lora", loraName, "--timeout", "60"}, extra...)...)
		if code != 0 {
			t.Fatalf("router (lora %q): exit status %d, want 0\n%s", loraName, code, stderr)
		}
		return r
	}
	r := ask(lora)
	wantPool := exampleDomain + "/00000000000000a1"
	if r.Status != "OK" || r.QueryBlocks != 8 || r.ReadyLanes != 1<<3 || len(r.Lanes) != 1 ||
		r.Lanes[0].Lane != 3 || r.Lanes[0].DcID != 0xa1 || r.Lanes[0].Pool != wantPool || r.Lanes[0].Depth != 6 {
		t.Errorf("router with the LoRA salt: %+v; want OK, 8 blocks, lane 3 (DC 0xa1, %s) at depth 6", r, wantPool)
	}
	if r.IncompleteLanes == nil || *r.IncompleteLanes != 0 { // the relay's filter holds every block
		t.Errorf("router: incomplete_lanes %v, want 0", r.IncompleteLanes)
	}
	// The relay stamps its lane records' as_of; its heartbeats keep the idle lane's age low.
	if len(r.LaneStates) != 1 || r.LaneStates[0].Lane != 3 || r.LaneStates[0].State != "EXACT" || r.LaneStates[0].AgeMs == nil || *r.LaneStates[0].AgeMs > 60_000 {
		t.Errorf("router: lane states %+v, want lane 3 EXACT with an age", r.LaneStates)
	}
	// A bound of 0 ms: the lane is older (UNAVAILABLE, exit 3, lane 3 STALE with its age and no
	// depth), unless its age reads 0 at that moment (OK, EXACT).
	r, stderr, code := e.route(t, append([]string{"--hashes", "1,2", "--max-age-ms", "0", "--timeout", "60"}, extra...)...)
	switch {
	case len(r.LaneStates) != 1 || r.LaneStates[0].AgeMs == nil:
		t.Errorf("router with --max-age-ms 0: exit %d, %+v; want lane 3 with its age\n%s", code, r, stderr)
	case *r.LaneStates[0].AgeMs > 0 && (code != 3 || r.LaneStates[0].State != "STALE" || len(r.Lanes) != 0):
		t.Errorf("router with --max-age-ms 0: exit %d, %+v; want 3 and lane 3 STALE without a depth\n%s", code, r, stderr)
	case *r.LaneStates[0].AgeMs == 0 && (code != 0 || r.LaneStates[0].State != "EXACT"):
		t.Errorf("router with --max-age-ms 0 at age 0: exit %d, %+v; want 0 and lane 3 EXACT\n%s", code, r, stderr)
	}
	if r := ask(""); r.Status != "OK" || r.QueryBlocks != 8 || len(r.Lanes) != 1 || r.Lanes[0].Depth != 0 {
		t.Errorf("router without the salt: %+v; want OK, 8 blocks, depth 0", r)
	}
	// A cache salt (block_extra_keys on the Kafka request): the stored blocks have none, so the
	// salted first block is another block and nothing matches.
	r, stderr, code = e.route(t, append([]string{"--tokens", tokenList(promptTokens()), "--block-size", strconv.Itoa(blockSize),
		"--lora", lora, "--cache-salt", "tenant-salt", "--timeout", "60"}, extra...)...)
	if code != 0 || r.Status != "OK" || r.QueryBlocks != 8 || len(r.Lanes) != 1 || r.Lanes[0].Depth != 0 {
		t.Errorf("router with a cache salt: exit %d, %+v; want OK, 8 blocks, depth 0\n%s", code, r, stderr)
	}
}

// checkDeaf: a request nobody answers (here: a request topic no indexer reads, as for a partition
// whose replica died) is sent again after --attempt-timeout with a new correlation id each time,
// and the router exits 1 at --timeout.
func (e *example) checkDeaf(t *testing.T, deaf string, extra ...string) {
	t.Helper()
	_, stderr, code := runPythonStatus(t, e.py, "router.py", append([]string{"--bootstrap", e.brokers,
		"--request-topic", deaf, "--reply-topic", e.cfg.Topics.QueryReplies, "--hashes", "1,2,3",
		"--attempt-timeout", "1", "--timeout", "3.5"}, extra...)...)
	resent := regexp.MustCompile(`no reply to ([0-9a-f]{32}) within 1\.0s; sent again as ([0-9a-f]{32})`).FindAllStringSubmatch(string(stderr), -1)
	if code != exitTimeout || len(resent) < 2 || resent[0][2] != resent[1][1] || resent[0][1] == resent[0][2] {
		t.Errorf("router on a deaf topic: exit status %d, resends %q; want %d after at least two resends with new ids\n%s",
			code, resent, exitTimeout, stderr)
	}
}

// TestPythonProducerAndRouter runs the Python producer (KvEvents on the DC's own KV-events
// topic) and the Python router (a QueryRequest by token ids, its reply found by correlation id)
// against a relay and an indexer with the built-in schema ids, and checks the depths the router
// prints, then the router's exit statuses for a request nobody answers (1), a request the
// indexer refuses (4), lanes none of which is ready (3) and a request topic that does not exist
// (6).
func TestPythonProducerAndRouter(t *testing.T) {
	e := startExample(t)
	e.produce(t)
	e.checkDepths(t)
	e.checkDeaf(t, testenv.NewTopic(t, 1))
	e.checkRefusals(t)
	_, stderr, code := runPythonStatus(t, e.py, "router.py", "--bootstrap", e.brokers,
		"--request-topic", e.cfg.Topics.Queries+".missing", "--reply-topic", e.cfg.Topics.QueryReplies, "--hashes", "1")
	if code != exitKafka || !strings.Contains(string(stderr), e.cfg.Topics.Queries+".missing") {
		t.Errorf("router on a missing request topic: exit status %d, want %d naming the topic\n%s", code, exitKafka, stderr)
	}
}

// checkRefusals: a block size over the contract's 65536 is answered INVALID_REQUEST (exit 4),
// and a request for lane 5 alone, which no DC writes, UNAVAILABLE (exit 3). Router flags extra.
func (e *example) checkRefusals(t *testing.T, extra ...string) {
	t.Helper()
	r, stderr, code := e.route(t, append([]string{"--tokens", "1,2,3,4", "--block-size", strconv.Itoa(schemas.MaxBlockSize + 1),
		"--timeout", "60"}, extra...)...)
	if code != exitInvalidRequest || r.Status != "INVALID_REQUEST" || !strings.Contains(r.ErrorMessage, "block_size") {
		t.Errorf("router with block size %d: exit status %d, reply %+v; want %d, INVALID_REQUEST about block_size\n%s",
			schemas.MaxBlockSize+1, code, r, exitInvalidRequest, stderr)
	}
	r, stderr, code = e.route(t, append([]string{"--hashes", "1,2", "--lanes", "5", "--timeout", "60"}, extra...)...)
	if code != exitUnavailable || r.Status != "UNAVAILABLE" {
		t.Errorf("router for lane 5 alone: exit status %d, reply %+v; want %d, UNAVAILABLE\n%s", code, r, exitUnavailable, stderr)
	}
}

// TestPythonProducerAndRouterWithRegistry runs the relay and the indexer with a schema registry
// (schema_registry.urls: they register the contract under <topic>-value and write the registry's
// ids), and the Python producer and router with --registry: the same depths as with the
// built-in ids, and the same exit statuses. A router without --registry exits 5 on the reply
// and names --registry; with --registry, a subject that does not hold the schema exits 5 too,
// naming the subject, and so does the producer.
func TestPythonProducerAndRouterWithRegistry(t *testing.T) {
	reg := testenv.Registry(t)
	e := startExample(t, "--schema_registry.urls="+reg)
	withRegistry := []string{"--registry", reg}
	e.produce(t, withRegistry...)
	e.checkDepths(t, withRegistry...)
	e.checkRefusals(t, withRegistry...)

	// The reply carries the registry's id, which a router without the registry cannot read.
	_, stderr, code := e.route(t, "--hashes", "1,2", "--timeout", "60")
	if code != exitUnreadable || !strings.Contains(string(stderr), "--registry") || !strings.Contains(string(stderr), "is not the built-in one") {
		t.Errorf("router without --registry: exit status %d, want %d naming --registry\n%s", code, exitUnreadable, stderr)
	}

	// A request topic whose subject does not hold the request schema: the router says so.
	deaf := testenv.NewTopic(t, 1)
	_, stderr, code = runPythonStatus(t, e.py, "router.py", "--bootstrap", e.brokers, "--registry", reg,
		"--request-topic", deaf, "--reply-topic", e.cfg.Topics.QueryReplies, "--hashes", "1")
	if code != exitUnreadable || !strings.Contains(string(stderr), deaf+"-value") || !strings.Contains(string(stderr), reg) {
		t.Errorf("router on a topic without a subject: exit status %d, want %d naming the subject and the registry\n%s",
			code, exitUnreadable, stderr)
	}
	_, stderr, code = runPythonStatus(t, e.py, "producer.py", "--bootstrap", e.brokers, "--registry", reg,
		"--topic", deaf, "--tokens", "1,2,3,4", "--block-size", "4")
	if code != exitUnreadable || !strings.Contains(string(stderr), deaf+"-value") {
		t.Errorf("producer on a topic without a subject: exit status %d, want %d naming the subject\n%s", code, exitUnreadable, stderr)
	}
	// Once the subject holds it (as a process with that topic would register it), nobody answers.
	registerSchema(t, reg, deaf+"-value", schemas.TypeQueryRequest.Schema())
	e.checkDeaf(t, deaf, withRegistry...)
}

// registerSchema registers an Avro schema under subject, as the processes do at start
// (POST /subjects/{subject}/versions), and deletes the subject when the test ends.
func registerSchema(t *testing.T, registry, subject, schema string) {
	t.Helper()
	cl, err := sr.NewClient(sr.URLs(registry))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := cl.RegisterSchema(ctx, subject, sr.Schema{Schema: schema, Type: sr.TypeAvro}, -1, -1); err != nil {
		t.Fatalf("registering %s at %s: %v", subject, registry, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := cl.DeleteSubject(ctx, subject, sr.SoftDelete); err != nil {
			t.Errorf("deleting %s at %s: %v", subject, registry, err)
		}
	})
}

// startApp starts a and stops it when the test ends.
func startApp(t *testing.T, a *fx.App) {
	t.Helper()
	if err := a.Err(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := a.Stop(ctx); err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("stop: %v", err)
		}
	})
}
