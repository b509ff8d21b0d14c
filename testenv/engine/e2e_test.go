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
	"github.com/twmb/franz-go/pkg/kgo"
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
	// admin builds the client the test creates the topic layout with; nil: the shared broker's.
	admin func() (*kgo.Client, error)
}

func newE2E(t testing.TB) *e2e {
	t.Helper()
	return newE2EOn(t, testenv.Brokers(t), nil, nil)
}

// newE2EOn is newE2E on the cluster at seeds, with kafka settings (CKF_KAFKA_* variables: TLS,
// SASL) added to every process's environment, and admin building the test's own client; with a
// nil admin the cluster is the shared broker, whose topics are deleted when the test ends.
func newE2EOn(t testing.TB, seeds, kafkaEnv []string, admin func() (*kgo.Client, error)) *e2e {
	t.Helper()
	var d [32]byte
	if _, err := rand.Read(d[:]); err != nil {
		t.Fatal(err)
	}
	s := &e2e{t: t, seeds: seeds, admin: admin}
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
	s.common = append(s.common, kafkaEnv...)
	s.relay = newProc(t, s.logDir, "relay", append(slices.Clone(s.common),
		fmt.Sprintf("CKF_RELAY_DC_ID=%#x", dcID), "CKF_RELAY_LANE=0",
		"CKF_RELAY_SNAPSHOT_EVERY_DELTAS=400", "CKF_RELAY_SNAPSHOT_INTERVAL=5s"), "relay")
	s.indexer = newProc(t, s.logDir, "indexer", append(slices.Clone(s.common),
		"CKF_INDEXER_CONSUMER_INSTANCE_ID=1001", "CKF_INDEXER_QUERY_GROUP="+prefix+"queries"), "indexer")
	t.Logf("topic prefix %s, logs in %s", prefix, s.logDir)
	if admin != nil {
		return s // the test's own cluster goes with its topics
	}
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
	s.createTopics()
	s.relay.Start()
	s.relay.WaitReady(time.Minute)
	s.indexer.Start()
	s.indexer.WaitReady(time.Minute)
}

// createTopics creates the topic layout.
func (s *e2e) createTopics() {
	s.t.Helper()
	var cl *kgo.Client
	if s.admin == nil {
		cl = testenv.Default(s.t).Client(s.t)
	} else {
		var err error
		if cl, err = s.admin(); err != nil {
			s.t.Fatal(err)
		}
		defer cl.Close()
	}
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

// depth asks the indexer for the prefix depth of tokens under lora, with the blocks' extra keys
// (a salted sequence's salt is its first block's) when there are any.
func (s *e2e) depth(tokens []uint32, lora string, extra []ckf.ExtraKeys) (int, error) {
	req := map[string]any{"token_ids": tokens, "block_size": blockSize, "lora_name": lora}
	if len(extra) > 0 {
		req["block_extra_keys"] = extra
	}
	body, _ := json.Marshal(req)
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
	extra    []ckf.ExtraKeys // the blocks' extra keys: a salted chain's salt
	resident bool            // a resident chain (else a chain stored elsewhere or evicted)
	engine   string          // the engine whose model the chain comes from
}

// canonical is the chain a query by tokens under lora, with the blocks' extra keys, looks up at
// the engines' block size.
func canonical(tokens []uint32, lora string, extra []ckf.ExtraKeys) []ckf.CanonicalHash {
	return ckf.TokenSequenceHashesExtra(tokens, blockSize, extra, ckf.BlockSaltSeed(lora, ""))
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

// engineModel is one engine's model, named for the reports.
type engineModel struct {
	name  string
	model engineemu.Model
}

func newOracle(models ...engineModel) *oracle {
	o := &oracle{resident: map[ckf.CanonicalHash]bool{}}
	for _, em := range models {
		for _, r := range em.model.Ranks {
			for _, c := range r.Resident {
				for _, h := range canonical(c.Tokens, c.LoRAName, c.ExtraKeys) {
					o.resident[h] = true
				}
				o.queries = append(o.queries, query{tokens: c.Tokens, lora: c.LoRAName, extra: c.ExtraKeys, resident: true, engine: em.name})
				if c.LoRAName != "" || len(c.ExtraKeys) > 0 {
					// The same tokens without the adapter or the salt are other blocks.
					o.queries = append(o.queries, query{tokens: c.Tokens, engine: em.name})
				}
			}
			for i, c := range r.Absent {
				if i%3 == 0 { // a sample keeps the number of HTTP queries small
					o.queries = append(o.queries, query{tokens: c.Tokens, lora: c.LoRAName, extra: c.ExtraKeys, engine: em.name})
				}
			}
		}
	}
	return o
}

// expected is the depth the exact state guarantees: the leading blocks resident in the DC.
func (o *oracle) expected(q query) int {
	n := 0
	for _, h := range canonical(q.tokens, q.lora, q.extra) {
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
	// shortBy counts the short answers by the engine (release) whose chain they were for.
	shortBy map[string]int
}

func (s *e2e) compare(o *oracle) (report, error) {
	var r report
	for _, q := range o.queries {
		got, err := s.depth(q.tokens, q.lora, q.extra)
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
			if r.shortBy == nil {
				r.shortBy = map[string]int{}
			}
			r.shortBy[q.engine]++
			if r.firstShort == "" {
				r.firstShort = fmt.Sprintf("%s: a %d-block chain (lora %q, salted %v, resident %v) answered %d, want %d", q.engine, len(q.tokens)/blockSize, q.lora, len(q.extra) > 0, q.resident, got, want)
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

// engineCase is one engine of the end-to-end test: an engine release line (its payload shape,
// hashes, replay framing and CPU medium) and how the engine and its bridge are set up.
type engineCase struct {
	release engineemu.Release
	ranks   int
	// bind: the engine's endpoint names the bridge's host, so the engine connects and the
	// bridge binds (bridge.bind).
	bind     bool
	truncate bool // the engine's first replay answer stops after one batch
	emu      *emulator
	bridge   *proc
	pub      int
}

func (c *engineCase) model(t testing.TB, dir string) engineModel {
	return engineModel{name: c.release.Name, model: readModel(t, c.emu, dir)}
}

// The whole path from an engine's ZeroMQ stream to query answers, on the real broker, once per
// engine release line (engineemu.Releases: vLLM 0.9, 0.11, 0.15, 0.22, 0.24 and 0.26 and later,
// SGLang up to 0.5.17 and current SGLang), all at once in one deployment: a Python engine
// emulator speaking the release's wire (payload shape, hashes, replay framing with or without
// the topic frame, CPU medium) feeds a `processor bridge`, and one relay and one indexer serve
// them. One engine has two data-parallel ranks and one connects to a bridge that binds; every
// engine stores chains under a LoRA adapter (a numeric id the bridge maps, for the lines without
// lora_name), copies blocks to the CPU tier where its wire has a medium, and stores
// sliding-window group chains where it has group fields, and salts a share of its sequences with
// a request's cache salt where its wire can say one (vLLM's extra keys, SGLang's cache_salt key):
// those chains are asked for with the salt as their first block's extra key, and without it
// (other blocks). The scenario: batches kept off the live
// socket (the final one included) must come from the replay sockets; an AllBlocksCleared kept off
// the live socket must still clear; every bridge killed with SIGKILL while its engine publishes
// must lose nothing; an engine restart (sequences from 0, no clear event) must clear what the
// engine held. After each phase, every answer by token ids equals the union of the emulators'
// exact models: never short (no false negatives; a short answer names its release line), long
// only at the filter's false-positive rate; and no bridge reports a lost batch.
func TestBridgeEndToEnd(t *testing.T) {
	s := newE2E(t)
	s.start()

	var cases []*engineCase
	for _, r := range engineemu.Releases {
		c := &engineCase{release: r, ranks: 1}
		switch r.Name {
		case "vllm-0.26":
			c.ranks = 2
		case "vllm-0.22":
			c.bind = true
		case "vllm-0.9":
			c.truncate = true
		}
		cases = append(cases, c)
	}
	for i, c := range cases {
		c.pub = testenv.FreePortRun(t, 2*c.ranks)
		topic := "kv@" + c.release.Name
		c.bridge = s.bridge("bridge-"+c.release.Name, uint64(101+i), c.ranks, c.pub, c.pub+c.ranks,
			"CKF_BRIDGE_LORA_NAMES=7=adapter-a", "CKF_BRIDGE_TOPIC=kv@", fmt.Sprintf("CKF_BRIDGE_BIND=%v", c.bind))
		c.bridge.Start()
		endpoint := fmt.Sprintf("tcp://*:%d", c.pub)
		if c.bind {
			endpoint = fmt.Sprintf("tcp://127.0.0.1:%d", c.pub)
		}
		args := []string{"--release", c.release.Name, "--endpoint", endpoint,
			"--replay-endpoint", fmt.Sprintf("tcp://*:%d", c.pub+c.ranks), "--topic", topic, "--hybrid",
			"--seed", strconv.Itoa(11 + i), "--block-size", strconv.Itoa(blockSize), "--capacity", "250",
			"--lora-id", "7", "--lora-name", "adapter-a"}
		if c.truncate {
			args = append(args, "--replay-truncate", "1")
		}
		if r := c.release.Wire; r == engineemu.WireArray || r == engineemu.WireMapEvents {
			// Salted sequences: vLLM's cache_salt in the first block's extra keys, SGLang's in
			// the cache_salt key of every store (the bridge salts the first block with it).
			args = append(args, "--salt-fraction", "0.2")
		}
		if !c.bind {
			c.emu = startEmulator(t, s.logDir, "engine-"+c.release.Name, c.ranks, args...)
		} else {
			c.bridge.WaitReady(time.Minute) // the engine connects to the bridge's bound socket
			c.emu = startEmulator(t, s.logDir, "engine-"+c.release.Name, c.ranks, args...)
		}
	}
	for _, c := range cases {
		c.bridge.WaitReady(time.Minute)
		c.emu.waitSubscribed(30 * time.Second)
	}
	models := func() []engineModel {
		var ms []engineModel
		for _, c := range cases {
			ms = append(ms, c.model(t, s.logDir))
		}
		return ms
	}
	// each runs f for every engine at once and waits for all.
	each := func(f func(c *engineCase) error) {
		t.Helper()
		errs := make(chan error, len(cases))
		for _, c := range cases {
			go func() { errs <- f(c) }()
		}
		for range cases {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
	}
	run := func(cmd map[string]any) func(c *engineCase) error {
		return func(c *engineCase) error { _, err := c.emu.exchange(cmd); return err }
	}

	// Phase 1: gaps. Dropped sequences in the middle, a run of them, and the final batch.
	drops := []int{5, 40, 41, 42, 43, 120, 149}
	each(run(map[string]any{"cmd": "run", "batches": 150, "drop": drops}))
	o := newOracle(models()...)
	r, fill := s.converged(o, "phase 1 (gaps) converged", 120*time.Second)
	var gapsFilled float64
	for _, c := range cases {
		gapsFilled += counter(t, c.bridge, "ckf_bridge_replayed_batches")
	}
	t.Logf("phase 1: %d release lines, 150 batches per rank, %d dropped per rank (the last included); answers %+v within %v; replayed batches %v",
		len(cases), len(drops), r, fill.Round(time.Millisecond), gapsFilled)
	ranks := 0
	for _, c := range cases {
		ranks += c.ranks
	}
	if gapsFilled < float64(ranks*len(drops)) {
		t.Errorf("the bridges replayed %v batches for %d dropped ones", gapsFilled, ranks*len(drops))
	}

	// Phase 2: an AllBlocksCleared that reaches the bridges only through the replay socket, then
	// more batches on the live socket.
	held := map[string][]engineemu.Chain{}
	for _, m := range models() {
		held[m.name] = m.model.Ranks[0].Resident
	}
	each(run(map[string]any{"cmd": "clear", "ranks": []int{0}, "drop": true}))
	each(run(map[string]any{"cmd": "run", "batches": 40}))
	o = newOracle(models()...)
	r, took := s.converged(o, "phase 2 (a clear sent only on the replay socket) converged", 90*time.Second)
	t.Logf("phase 2: rank 0 of every engine cleared off the live socket; answers %+v within %v", r, took.Round(time.Millisecond))
	s.checkGone(o, held, "rank 0's chains before its clear")

	// Phase 3: kill -9 of every bridge while its engine publishes; each restarts and resumes
	// from the replay socket and what it wrote to Kafka.
	before := map[*engineCase]float64{}
	for _, c := range cases {
		before[c] = counter(t, c.bridge, "ckf_bridge_batches")
	}
	running := make(chan error, len(cases))
	for _, c := range cases {
		go func() {
			_, err := c.emu.exchange(map[string]any{"cmd": "run", "batches": 400, "rate": 250})
			running <- err
		}()
	}
	for _, c := range cases {
		testenv.WaitUntilEvery(t, 20*time.Millisecond, 60*time.Second, c.bridge.Name+" takes batches of the third run", func() bool {
			v, err := c.bridge.metric("ckf_bridge_batches")
			return err == nil && v >= before[c]+50
		})
		c.bridge.Kill9()
		c.bridge.Start()
	}
	for range cases {
		if err := <-running; err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range cases {
		c.bridge.WaitReady(time.Minute)
	}
	o = newOracle(models()...)
	r, took = s.converged(o, "phase 3 (kill -9 of every bridge mid-stream) converged", 120*time.Second)
	t.Logf("phase 3: every bridge killed mid-run and restarted; answers %+v within %v", r, took.Round(time.Millisecond))

	// Phase 4: every engine's last rank restarts (sequence 0, empty pool, no clear event) and
	// the engines publish on; what that rank held before must be gone.
	held = map[string][]engineemu.Chain{}
	for i, m := range models() {
		held[m.name] = m.model.Ranks[cases[i].ranks-1].Resident
	}
	for _, c := range cases {
		c.emu.do(map[string]any{"cmd": "restart", "ranks": []int{c.ranks - 1}})
	}
	// Each bridge must ride out its engine's restart: its SUB socket sees the connection end
	// and reconnects to the new incarnation, or (bind) stays bound and accepts it.
	for _, c := range cases {
		testenv.WaitUntilEvery(t, 20*time.Millisecond, 30*time.Second, c.release.Name+"'s restarted rank has a subscriber", func() bool {
			if c.bridge.Exited() {
				t.Fatalf("%s exited when its engine restarted:\n%s", c.bridge.Name, testenv.Tail(c.bridge.LogPath(c.bridge.Runs()), 8))
			}
			subs := c.emu.do(map[string]any{"cmd": "subscribers"})["subscribers"].([]any)
			return subs[c.ranks-1].(float64) >= 1
		})
	}
	each(run(map[string]any{"cmd": "run", "batches": 80}))
	o = newOracle(models()...)
	r, took = s.converged(o, "phase 4 (engine restart) converged", 90*time.Second)
	t.Logf("phase 4: every engine's last rank restarted; answers %+v within %v", r, took.Round(time.Millisecond))
	s.checkGone(o, held, "the restarted rank's chains before its restart")
	for _, c := range cases {
		if v := counter(t, c.bridge, "ckf_bridge_engine_restarts"); v < 1 {
			t.Errorf("%s counted %v engine restarts, want at least 1", c.bridge.Name, v)
		}
		if v := counter(t, c.bridge, "ckf_bridge_lost_batches"); v != 0 {
			t.Errorf("%s reports %v lost batches", c.bridge.Name, v)
		}
		if v := counter(t, c.bridge, "ckf_bridge_malformed_messages"); v != 0 {
			t.Errorf("%s refused %v messages for their framing", c.bridge.Name, v)
		}
	}
}

// checkGone checks that chains an engine held before a clear or a restart are answered no deeper
// than the blocks still resident in the DC: the bridge wrote the clear.
func (s *e2e) checkGone(o *oracle, held map[string][]engineemu.Chain, what string) {
	s.t.Helper()
	for name, chains := range held {
		gone := &oracle{resident: o.resident}
		for _, c := range chains {
			gone.queries = append(gone.queries, query{tokens: c.Tokens, lora: c.LoRAName, extra: c.ExtraKeys, engine: name})
		}
		if r, err := s.compare(gone); err != nil {
			s.t.Fatal(err)
		} else if r.short != 0 || r.long > allowedLong(r.queries) {
			s.t.Errorf("%s: %s (%d chains): answers %+v", name, what, len(chains), r)
		}
	}
}

// incompleteLanes asks the indexer one query and returns the lanes its answer marks incomplete.
func (s *e2e) incompleteLanes() (uint16, error) {
	body, _ := json.Marshal(map[string]any{"token_ids": make([]uint32, blockSize), "block_size": blockSize})
	c := &http.Client{Timeout: 3 * time.Second}
	resp, err := c.Post("http://"+s.indexer.HTTP+"/v1/prefix-matches", "application/json", bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var a struct {
		Incomplete uint16 `json:"incomplete_lanes"`
	}
	err = json.NewDecoder(resp.Body).Decode(&a)
	return a.Incomplete, err
}

// laneSources reads the indexer's /v1/lanes: each lane's degraded sources and lost-history clears
// (absent: not reported).
func (s *e2e) laneSources() (map[int][2]uint64, error) {
	c := &http.Client{Timeout: 3 * time.Second}
	resp, err := c.Get("http://" + s.indexer.HTTP + "/v1/lanes")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var v struct {
		Lanes []struct {
			Lane    int `json:"lane"`
			Sources *struct {
				Degraded uint64 `json:"degraded_sources"`
				Clears   uint64 `json:"lost_history_clears"`
			} `json:"sources"`
		} `json:"lanes"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		return nil, err
	}
	out := map[int][2]uint64{}
	for _, l := range v.Lanes {
		if l.Sources != nil {
			out[l.Lane] = [2]uint64{l.Sources.Degraded, l.Sources.Clears}
		}
	}
	return out, nil
}

// Engine history the replay socket can no longer give back is loud and never leaves answers
// long: the bridge counts the lost batches, clears the rank in their place
// (bridge.lost_history=clear) and reports it degraded; the relay carries the degraded source on
// its lane records, and the indexer shows it in /v1/lanes (and marks the lane's answers
// incomplete); answers are at most the engine's model (short, never long beyond the filter's
// false positives). When the engine restarts (a full clear) the source is whole again and the
// answers equal the model.
func TestBridgeLostHistoryIsLoud(t *testing.T) {
	s := newE2E(t)
	s.start()
	base := testenv.FreePortRun(t, 2)
	eng := startEmulator(t, s.logDir, "engine", 1, "--release", "vllm-0.26", "--endpoint", fmt.Sprintf("tcp://*:%d", base),
		"--replay-endpoint", fmt.Sprintf("tcp://*:%d", base+1), "--buffer-steps", "8", "--seed", "31",
		"--block-size", strconv.Itoa(blockSize), "--capacity", "300")
	br := s.bridge("bridge", 111, 1, base, base+1)
	br.Start()
	br.WaitReady(time.Minute)
	eng.waitSubscribed(30 * time.Second)
	eng.do(map[string]any{"cmd": "run", "batches": 40})
	// Twenty batches kept off the live socket, then more: the replay buffer (8 batches) no longer
	// holds the first of them when the bridge asks.
	drop := make([]int, 20)
	for i := range drop {
		drop[i] = 40 + i
	}
	eng.do(map[string]any{"cmd": "run", "batches": 40, "drop": drop})
	var src map[int][2]uint64
	var srcErr error
	testenv.WaitUntilEvery(t, 50*time.Millisecond, time.Minute, "the indexer shows the lane's source degraded", func() bool {
		src, srcErr = s.laneSources()
		return srcErr == nil && src[0][0] == 1 && src[0][1] >= 1
	}, func() string { return fmt.Sprintf("lane sources %v, %v", src, srcErr) })
	// The metrics are reported every CKF_METRICS_REPORT_INTERVAL: wait for them to show it.
	var lost, ranks, sources float64
	testenv.WaitUntilEvery(t, 50*time.Millisecond, 30*time.Second, "the metrics show the loss", func() bool {
		lost, ranks = counter(t, br, "ckf_bridge_lost_batches"), counter(t, br, "ckf_bridge_degraded_ranks")
		sources = counter(t, s.indexer, "ckf_indexer_lane_degraded_sources")
		return lost >= 1 && ranks == 1 && sources == 1
	}, func() string {
		return fmt.Sprintf("lost batches %v, degraded ranks %v, lane degraded sources %v", lost, ranks, sources)
	})
	if inc, err := s.incompleteLanes(); err != nil || inc != 1 {
		t.Errorf("answers mark incomplete lanes %#x (%v), want lane 0", inc, err)
	}
	o := newOracle(engineModel{name: "vllm-0.26", model: readModel(t, eng, s.logDir)})
	r, err := s.compare(o)
	if err != nil {
		t.Fatal(err)
	}
	if r.long > allowedLong(r.queries) {
		t.Errorf("after lost history the answers run long: %+v", r)
	}
	t.Logf("lost history: answers %+v against the engine's model (short allowed, long not)", r)

	// The engine restarts: the bridge's clear of the restart makes the source whole. The new
	// incarnation publishes fewer batches than its replay buffer holds, so however late the
	// bridge sees the restart, nothing of it can be lost again.
	eng.do(map[string]any{"cmd": "restart", "ranks": []int{0}})
	eng.waitSubscribed(30 * time.Second)
	eng.do(map[string]any{"cmd": "run", "batches": 6})
	testenv.WaitUntilEvery(t, 50*time.Millisecond, time.Minute, "the lane's source is whole again", func() bool {
		src, err := s.laneSources()
		return err == nil && src[0][0] == 0
	})
	if inc, err := s.incompleteLanes(); err != nil || inc != 0 {
		t.Errorf("answers mark incomplete lanes %#x (%v) once the source is whole", inc, err)
	}
	o = newOracle(engineModel{name: "vllm-0.26", model: readModel(t, eng, s.logDir)})
	r, took := s.converged(o, "answers equal the restarted engine's model", 90*time.Second)
	t.Logf("after the engine's restart: answers %+v within %v", r, took.Round(time.Millisecond))
}
