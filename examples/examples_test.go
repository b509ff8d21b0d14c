// Package examples runs the client examples of docs/producers-and-routers.md against the real
// broker: examples/python (confluent-kafka + fastavro, schemas read from schemas/*.avsc) talks to
// a relay and an indexer built from this module, as a client written outside the project would.
package examples

import (
	"bytes"
	"context"
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
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, py, append([]string{filepath.Join(pythonDir, script)}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\nstdout:\n%s\nstderr:\n%s", script, strings.Join(args, " "), err, stdout.Bytes(), stderr.Bytes())
	}
	return stdout.Bytes()
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

// exampleDomain is the indexer domain of the end-to-end test (any 32:32 hex digits).
const exampleDomain = "0123456789abcdef0123456789abcdef:fedcba9876543210fedcba9876543210"

// TestPythonProducerAndRouter runs a relay for DC 0xa1 on lane 3 and an indexer (lanes and its
// Kafka query service) against the real broker, then the Python producer (KvEvents on the DC's
// own KV-events topic) and the Python router (a QueryRequest by token ids, its reply found by
// correlation id), and checks the depths the router prints.
func TestPythonProducerAndRouter(t *testing.T) {
	py := python(t)
	prefix := testenv.UniqueName(t, "examples") + "."
	kvTopic := prefix + "kv-events.dc-a1" // each relay reads its own DC's topic
	cfg, err := config.Load(config.Sources{
		Args: []string{
			"--kafka.brokers=" + strings.Join(testenv.Brokers(t), ","), "--topic_prefix=" + prefix,
			"--topics.kv_events=" + kvTopic, "--http.listen=127.0.0.1:0", "--log.level=warn",
			"--indexer.domain=" + exampleDomain, "--indexer.lanes=3=0xa1", "--indexer.expected_blocks_per_dc=4096",
			"--indexer.query_group=" + prefix + "queries",
			"--relay.dc_id=0xa1", "--relay.lane=3", "--relay.expected_blocks=4096", "--relay.heartbeat_interval=100ms",
		},
		LookupEnv: func(string) (string, bool) { return "", false },
	})
	if err != nil {
		t.Fatal(err)
	}
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
	var ix *indexer.Indexer
	startApp(t, app.New(cfg, indexer.Module, fx.Populate(&ix)))
	testenv.WaitUntil(t, time.Minute, "lane 3 ready on the indexer", func() bool { return ix.API().Ready(context.Background()) == nil })

	// Six blocks of four tokens stored by worker 7 in three events of two blocks (the second and
	// third name their parent), salted by a LoRA adapter; a prompt of those tokens plus two more
	// blocks then matches six of its eight blocks.
	const blockSize, lora = 4, "sql-adapter"
	stored := make([]uint32, 6*blockSize)
	for i := range stored {
		stored[i] = uint32(1000 + i)
	}
	prompt := append(append([]uint32(nil), stored...), 1, 2, 3, 4, 5, 6, 7, 8, 9)
	runPython(t, py, "producer.py", "--bootstrap", strings.Join(testenv.Brokers(t), ","), "--topic", kvTopic,
		"--worker-id", "7", "--tokens", tokenList(stored), "--block-size", strconv.Itoa(blockSize), "--lora", lora,
		"--blocks-per-event", "2", "--first-block-id", "0x100")
	// The events become a delta that the indexer applies; wait for the answer to show it.
	req := schemas.QueryRequest{CorrelationID: "wait", Input: schemas.InputTokenIDs, Tokens: schemas.AppendU32s(nil, prompt),
		BlockSize: blockSize, LoraName: lora}
	testenv.WaitUntil(t, time.Minute, "the stored blocks visible to the indexer", func() bool {
		r := ix.Answerer().AnswerPooled(&req)
		return r.Status == schemas.QueryOK && len(r.Lanes) == 1 && r.Lanes[0].Depth == 6
	})

	type reply struct {
		Status      string `json:"status"`
		QueryBlocks int    `json:"query_blocks"`
		ReadyLanes  int    `json:"ready_lanes"`
		// IncompleteLanes is read by fastavro from the reply's trailing field (nil if absent).
		IncompleteLanes *int `json:"incomplete_lanes"`
		Lanes           []struct {
			Lane  int    `json:"lane"`
			DcID  uint64 `json:"dc_id"`
			Pool  string `json:"pool"`
			Depth int    `json:"depth"`
		} `json:"lanes"`
	}
	ask := func(loraName string) reply {
		t.Helper()
		out := runPython(t, py, "router.py", "--bootstrap", strings.Join(testenv.Brokers(t), ","),
			"--request-topic", cfg.Topics.Queries, "--reply-topic", cfg.Topics.QueryReplies,
			"--tokens", tokenList(prompt), "--block-size", strconv.Itoa(blockSize), "--lora", loraName, "--timeout", "60")
		var r reply
		if err := json.Unmarshal(out, &r); err != nil {
			t.Fatalf("router output %q: %v", out, err)
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
	// The same tokens without the LoRA salt hash to other blocks: nothing is cached for them.
	if r := ask(""); r.Status != "OK" || r.QueryBlocks != 8 || len(r.Lanes) != 1 || r.Lanes[0].Depth != 0 {
		t.Errorf("router without the salt: %+v; want OK, 8 blocks, depth 0", r)
	}
	// A request nobody answers (here: a request topic no indexer reads, as for a partition whose
	// replica died) is sent again after --attempt-timeout with a new correlation id each time.
	deaf := testenv.NewTopic(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, py, filepath.Join(pythonDir, "router.py"), "--bootstrap", strings.Join(testenv.Brokers(t), ","),
		"--request-topic", deaf, "--reply-topic", cfg.Topics.QueryReplies, "--hashes", "1,2,3",
		"--attempt-timeout", "1", "--timeout", "3.5")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err = cmd.Run()
	var exitErr *exec.ExitError
	resent := regexp.MustCompile(`no reply to ([0-9a-f]{32}) within 1\.0s; sent again as ([0-9a-f]{32})`).FindAllStringSubmatch(stderr.String(), -1)
	if !errors.As(err, &exitErr) || exitErr.ExitCode() != 1 || len(resent) < 2 || resent[0][2] != resent[1][1] || resent[0][1] == resent[0][2] {
		t.Errorf("router on a deaf topic: %v, resends %q; want exit 1 after at least two resends with new ids\n%s", err, resent, stderr.Bytes())
	}
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
