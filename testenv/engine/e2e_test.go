//go:build linux

package engine

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/app/config"
	appkafka "github.com/ckf-stream/ckf-stream/app/kafka"
	"github.com/ckf-stream/ckf-stream/bridge/engineemu"
	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/testenv"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
)

// blockSize is the engines' and the bridges' block size in the end-to-end test.
const blockSize = 16

// dcID is the one DC of the test: both engines' bridges write to its KV-events topic.
const dcID = 0xdc01

// e2e is one deployment: a relay and an indexer replica for one DC, engines (Python emulators)
// and one bridge per engine, under a topic prefix and an indexer domain of their own.
type e2e struct {
	t       testing.TB
	seeds   []string
	topics  config.Topics
	logDir  string
	common  []string
	relay   *proc
	indexer *proc
}

func newE2E(t testing.TB) *e2e {
	t.Helper()
	var d [32]byte
	if _, err := rand.Read(d[:]); err != nil {
		t.Fatal(err)
	}
	s := &e2e{t: t, seeds: testenv.Brokers(t)}
	prefix := testenv.UniqueName(t, "ckfe") + "-"
	domain := hex.EncodeToString(d[:16]) + ":" + hex.EncodeToString(d[16:])
	s.topics = config.DefaultTopics(prefix)
	s.logDir = filepath.Join(t.TempDir(), "logs")
	if err := os.MkdirAll(s.logDir, 0o755); err != nil {
		t.Fatal(err)
	}
	s.common = []string{
		"KAFKA_BROKERS=" + strings.Join(s.seeds, ","),
		"CKF_TOPIC_PREFIX=" + prefix,
		"CKF_INDEXER_DOMAIN=" + domain,
		fmt.Sprintf("CKF_INDEXER_LANES=0=%#x", dcID),
		"CKF_INDEXER_EXPECTED_BLOCKS_PER_DC=16384",
		"CKF_RELAY_EXPECTED_BLOCKS=16384",
		"CKF_METRICS_REPORT_INTERVAL=100ms",
		"CKF_SHUTDOWN_TIMEOUT=10s",
		"CKF_LOG_LEVEL=info",
	}
	s.relay = newProc(t, s.logDir, "relay", append(slices.Clone(s.common),
		fmt.Sprintf("CKF_RELAY_DC_ID=%#x", dcID), "CKF_RELAY_LANE=0",
		"CKF_RELAY_SNAPSHOT_EVERY_DELTAS=400", "CKF_RELAY_SNAPSHOT_INTERVAL=5s"), "relay")
	s.indexer = newProc(t, s.logDir, "indexer", append(slices.Clone(s.common),
		"CKF_INDEXER_CONSUMER_INSTANCE_ID=1001", "CKF_INDEXER_QUERY_GROUP="+prefix+"queries"), "indexer")
	t.Logf("topic prefix %s, logs in %s", prefix, s.logDir)
	t.Cleanup(func() {
		var names []string
		for _, sp := range appkafka.TopicLayout(s.topics) {
			names = append(names, sp.Name)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = testenv.Admin(t).DeleteTopics(ctx, names...)
	})
	return s
}

// start creates the topic layout (so that no process races another to create it) and starts the
// relay and the indexer.
func (s *e2e) start() {
	s.t.Helper()
	cl := testenv.Default(s.t).Client(s.t)
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, sp := range appkafka.TopicLayout(s.topics) {
		resp, err := adm.CreateTopic(ctx, sp.Partitions, -1, sp.Configs, sp.Name)
		if err == nil {
			err = resp.Err
		}
		if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
			s.t.Fatalf("create %s: %v", sp.Name, err)
		}
	}
	s.relay.Start()
	s.relay.WaitReady(time.Minute)
	s.indexer.Start()
	s.indexer.WaitReady(time.Minute)
}

// bridge prepares (does not start) a bridge for an engine whose rank 0 PUB and ROUTER ports
// are pub and replay.
func (s *e2e) bridge(name string, worker uint64, ranks, pub, replay int, extra ...string) *proc {
	env := append(slices.Clone(s.common),
		fmt.Sprintf("CKF_BRIDGE_ENDPOINT=tcp://127.0.0.1:%d", pub),
		fmt.Sprintf("CKF_BRIDGE_REPLAY_ENDPOINT=tcp://127.0.0.1:%d", replay),
		"CKF_BRIDGE_WORKER_ID="+strconv.FormatUint(worker, 10),
		"CKF_BRIDGE_RANKS="+strconv.Itoa(ranks),
		"CKF_BRIDGE_BLOCK_SIZE="+strconv.Itoa(blockSize),
		// A dropped final batch is found by the idle re-check; a short one keeps the test short.
		"CKF_BRIDGE_IDLE_RECHECK=500ms")
	return newProc(s.t, s.logDir, name, append(env, extra...), "bridge")
}

// depth asks the indexer for the prefix depth of tokens under lora.
func (s *e2e) depth(tokens []uint32, lora string) (int, error) {
	body, _ := json.Marshal(map[string]any{"token_ids": tokens, "block_size": blockSize, "lora_name": lora})
	c := &http.Client{Timeout: 3 * time.Second}
	resp, err := c.Post("http://"+s.indexer.HTTP+"/v1/prefix-matches", "application/json", bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("%s: %s", resp.Status, b)
	}
	var a struct {
		Matches []struct {
			Depth int `json:"depth"`
		} `json:"matches"`
	}
	if err := json.Unmarshal(b, &a); err != nil || len(a.Matches) != 1 {
		return 0, fmt.Errorf("answer %s: %v", b, err)
	}
	return a.Matches[0].Depth, nil
}

// oracle is the union of the engines' exact models: the canonical hash of every block resident
// on GPU in the DC (the value the relay inserts and a query probes), and the chains to ask for.
type oracle struct {
	resident map[ckf.CanonicalHash]bool
	queries  []query
}

type query struct {
	tokens   []uint32
	lora     string
	resident bool // a resident chain (else a chain stored elsewhere or evicted)
}

// canonical is the chain a query by tokens under lora looks up, at the engines' block size.
func canonical(tokens []uint32, lora string) []ckf.CanonicalHash {
	return ckf.TokenSequenceHashes(tokens, blockSize, ckf.BlockSaltSeed(lora, ""))
}

// readModel asks an emulator for its model.
func readModel(t testing.TB, e *emulator, dir string) engineemu.Model {
	t.Helper()
	path := filepath.Join(dir, e.name+"-model.json")
	e.do(map[string]any{"cmd": "model", "path": path})
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var m engineemu.Model
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func newOracle(models ...engineemu.Model) *oracle {
	o := &oracle{resident: map[ckf.CanonicalHash]bool{}}
	for _, m := range models {
		for _, r := range m.Ranks {
			for _, c := range r.Resident {
				for _, h := range canonical(c.Tokens, c.LoRAName) {
					o.resident[h] = true
				}
				o.queries = append(o.queries, query{tokens: c.Tokens, lora: c.LoRAName, resident: true})
				if c.LoRAName != "" {
					// The same tokens without the adapter are other blocks.
					o.queries = append(o.queries, query{tokens: c.Tokens})
				}
			}
			for i, c := range r.Absent {
				if i%3 == 0 { // a sample keeps the number of HTTP queries small
					o.queries = append(o.queries, query{tokens: c.Tokens, lora: c.LoRAName})
				}
			}
		}
	}
	return o
}

// expected is the depth the exact state guarantees: the leading blocks resident in the DC.
func (o *oracle) expected(q query) int {
	n := 0
	for _, h := range canonical(q.tokens, q.lora) {
		if !o.resident[h] {
			break
		}
		n++
	}
	return n
}

// report compares the indexer's answers with the oracle.
type report struct {
	queries, exact, short, long int
	firstShort                  string
}

func (s *e2e) compare(o *oracle) (report, error) {
	var r report
	for _, q := range o.queries {
		got, err := s.depth(q.tokens, q.lora)
		if err != nil {
			return r, err
		}
		want := o.expected(q)
		r.queries++
		switch {
		case got == want:
			r.exact++
		case got < want:
			r.short++
			if r.firstShort == "" {
				r.firstShort = fmt.Sprintf("a %d-block chain (lora %q, resident %v) answered %d, want %d", len(q.tokens)/blockSize, q.lora, q.resident, got, want)
			}
		default:
			r.long++
		}
	}
	return r, nil
}

// converged waits until no answer is short of the oracle (no false negatives) and at most
// allowedLong answers exceed it (the filter's false positives, which the sized filter keeps
// rare), and returns how long that took.
func (s *e2e) converged(o *oracle, what string, timeout time.Duration) (report, time.Duration) {
	s.t.Helper()
	start := time.Now()
	var last report
	var lastErr error
	testenv.WaitUntilEvery(s.t, 100*time.Millisecond, timeout, what, func() bool {
		last, lastErr = s.compare(o)
		return lastErr == nil && last.short == 0 && last.long <= allowedLong(last.queries)
	}, func() string {
		return fmt.Sprintf("%+v, last error %v", last, lastErr)
	})
	return last, time.Since(start)
}

func allowedLong(queries int) int { return 2 + queries/100 }

// counter reads a bridge counter, failing the test when the bridge does not answer.
func counter(t testing.TB, p *proc, name string) float64 {
	t.Helper()
	v, err := p.metric(name)
	if err != nil {
		t.Fatalf("%s: %s: %v", p.Name, name, err)
	}
	return v
}

// The whole path from an engine's ZeroMQ stream to query answers, on the real broker: three
// Python engine emulators — vLLM's current map shape with 32-byte hashes, two data-parallel
// ranks, a LoRA stream, CPU-tier and sliding-window events; SGLang's (and early vLLM's)
// five-field shape with signed integer hashes and a LoRA id mapped to its name by the bridge;
// the array_like shape from an engine that connects to a bridge that binds — each feeding a
// `processor bridge`, one relay and one indexer. Batches the engines drop from the live stream (the last
// one of a run included) must come from the replay sockets; a bridge killed with SIGKILL
// mid-stream must lose nothing; an engine restart (sequences from 0, no clear event) must
// clear what the engine held. After each phase, every answer by token ids equals the union of
// the emulators' exact models: never less (no false negatives), more only at the filter's
// false-positive rate.
func TestBridgeEndToEnd(t *testing.T) {
	s := newE2E(t)
	s.start()

	// Engine A: vLLM, two ranks (ports base, base+1; replay base+2, base+3). Engine B: SGLang.
	baseA := testenv.FreePortRun(t, 4)
	baseB := testenv.FreePortRun(t, 2)
	baseC := testenv.FreePortRun(t, 2)
	engA := startEmulator(t, s.logDir, "engine-a", 2, "--endpoint", fmt.Sprintf("tcp://*:%d", baseA),
		"--replay-endpoint", fmt.Sprintf("tcp://*:%d", baseA+2), "--wire", "map", "--hash-format", "bytes",
		"--hybrid", "--seed", "11", "--block-size", strconv.Itoa(blockSize), "--capacity", "400")
	engB := startEmulator(t, s.logDir, "engine-b", 1, "--endpoint", fmt.Sprintf("tcp://*:%d", baseB),
		"--replay-endpoint", fmt.Sprintf("tcp://*:%d", baseB+1), "--wire", "array5", "--hash-format", "signed",
		"--seed", "12", "--block-size", strconv.Itoa(blockSize), "--capacity", "300", "--lora-id", "7",
		"--replay-truncate", "1")
	bridgeA := s.bridge("bridge-a", 101, 2, baseA, baseA+2)
	bridgeB := s.bridge("bridge-b", 102, 1, baseB, baseB+1, "CKF_BRIDGE_LORA_NAMES=7=adapter-a")
	// Engine C: the array_like shape, and an engine whose endpoint names the bridge's host, so it
	// connects and the bridge binds (bridge.bind).
	bridgeC := s.bridge("bridge-c", 103, 1, baseC, baseC+1, "CKF_BRIDGE_BIND=true")
	bridgeA.Start()
	bridgeB.Start()
	bridgeC.Start()
	bridgeA.WaitReady(time.Minute)
	bridgeB.WaitReady(time.Minute)
	bridgeC.WaitReady(time.Minute)
	engC := startEmulator(t, s.logDir, "engine-c", 1, "--endpoint", fmt.Sprintf("tcp://127.0.0.1:%d", baseC),
		"--replay-endpoint", fmt.Sprintf("tcp://*:%d", baseC+1), "--wire", "array", "--hash-format", "bytes",
		"--hybrid", "--seed", "13", "--block-size", strconv.Itoa(blockSize), "--capacity", "200")
	engA.waitSubscribed(30 * time.Second)
	engB.waitSubscribed(30 * time.Second)
	engC.waitSubscribed(30 * time.Second)

	// Phase 1: gaps. Dropped sequences in the middle, a run of them, and the final batch.
	drops := []int{5, 40, 41, 42, 43, 120, 199}
	runA := engA.do(map[string]any{"cmd": "run", "batches": 200, "drop": drops})
	engB.do(map[string]any{"cmd": "run", "batches": 200, "drop": drops})
	engC.do(map[string]any{"cmd": "run", "batches": 200, "drop": drops})
	models := func() []engineemu.Model {
		return []engineemu.Model{readModel(t, engA, s.logDir), readModel(t, engB, s.logDir), readModel(t, engC, s.logDir)}
	}
	o := newOracle(models()...)
	r, fill := s.converged(o, "phase 1 (gaps) converged", 90*time.Second)
	var gapsFilled float64
	for _, b := range []*proc{bridgeA, bridgeB, bridgeC} {
		gapsFilled += counter(t, b, "ckf_bridge_replayed_batches")
	}
	t.Logf("phase 1: %d batches per rank on 4 ranks, %d dropped per rank (the last included); answers %+v within %v of the last batch; replayed batches %v; emulator rate %.0f events/s",
		200, len(drops), r, fill.Round(time.Millisecond), gapsFilled, runA["events_per_second"])
	if gapsFilled < float64(4*len(drops)) {
		t.Errorf("the bridges replayed %v batches for %d dropped ones", gapsFilled, 4*len(drops))
	}

	// Phase 2: kill -9 of bridge A while engine A publishes; it restarts and resumes from the
	// replay socket and what it wrote to Kafka.
	before := counter(t, bridgeA, "ckf_bridge_batches")
	running := make(chan error, 1)
	go func() {
		_, err := engA.exchange(map[string]any{"cmd": "run", "batches": 600, "rate": 300})
		running <- err
	}()
	testenv.WaitUntilEvery(t, 20*time.Millisecond, 30*time.Second, "bridge A takes batches of the second run", func() bool {
		v, err := bridgeA.metric("ckf_bridge_batches")
		return err == nil && v >= before+100
	})
	bridgeA.Kill9()
	bridgeA.Start()
	bridgeA.WaitReady(time.Minute)
	if err := <-running; err != nil {
		t.Fatal(err)
	}
	o = newOracle(models()...)
	r, took := s.converged(o, "phase 2 (kill -9 of a bridge mid-stream) converged", 90*time.Second)
	t.Logf("phase 2: bridge A killed mid-run and restarted; answers %+v within %v", r, took.Round(time.Millisecond))

	// Phase 3: engine A's rank 1 restarts (sequence 0, empty pool, no clear event) and both
	// engines publish on; what rank 1 held before must be gone.
	held := readModel(t, engA, s.logDir).Ranks[1].Resident
	engA.do(map[string]any{"cmd": "restart", "ranks": []int{1}})
	// The bridge must ride out its engine's restart: its SUB socket sees the connection end and
	// reconnects to the new incarnation.
	testenv.WaitUntilEvery(t, 20*time.Millisecond, 30*time.Second, "engine A's restarted rank has a subscriber", func() bool {
		if bridgeA.Exited() {
			t.Fatalf("bridge A exited when its engine restarted:\n%s", testenv.Tail(bridgeA.LogPath(bridgeA.Runs()), 8))
		}
		subs := engA.do(map[string]any{"cmd": "subscribers"})["subscribers"].([]any)
		return subs[1].(float64) >= 1
	})
	engA.do(map[string]any{"cmd": "run", "batches": 100})
	engB.do(map[string]any{"cmd": "run", "batches": 100})
	o = newOracle(models()...)
	r, took = s.converged(o, "phase 3 (engine restart) converged", 90*time.Second)
	t.Logf("phase 3: engine A rank 1 restarted; answers %+v within %v", r, took.Round(time.Millisecond))
	// What rank 1 held before its restart is gone (the bridge wrote the clear the engine does
	// not send), unless another source holds it now.
	gone := &oracle{resident: o.resident}
	for _, c := range held {
		gone.queries = append(gone.queries, query{tokens: c.Tokens, lora: c.LoRAName})
	}
	if r, err := s.compare(gone); err != nil {
		t.Fatal(err)
	} else if r.short != 0 || r.long > allowedLong(r.queries) {
		t.Errorf("the %d chains rank 1 held before its restart: answers %+v", len(held), r)
	}
	if v := counter(t, bridgeA, "ckf_bridge_engine_restarts"); v < 1 {
		t.Errorf("bridge A counted %v engine restarts, want at least 1", v)
	}
	for _, b := range []*proc{bridgeA, bridgeB, bridgeC} {
		if v := counter(t, b, "ckf_bridge_lost_batches"); v != 0 {
			t.Errorf("%s reports %v lost batches", b.Name, v)
		}
	}
}
