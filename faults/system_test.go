//go:build linux

package faults

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/app/config"
	appkafka "github.com/ckf-stream/ckf-stream/app/kafka"
	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/ckf/producer"
	"github.com/ckf-stream/ckf-stream/loadgen"
	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/ckf-stream/ckf-stream/streams/relay"
	"github.com/ckf-stream/ckf-stream/testenv"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// relayCheckpointEveryEvents is the suite relays' relay.checkpoint_every_events. The writers
// produce 150 KV events/s over two DCs, about 75 per relay, so each relay commits a state
// checkpoint (60 to 90 KiB here) a little more often than once a second: the kills of
// TestKillNine (every 0.2 to 1.5 s, at seeded random moments) fall before, during and after
// checkpoint transactions, between a checkpoint's produce and its commit, and in the tail
// replays after a restore, and the broker faults of TestBrokerRestartProcesses hit checkpoint
// writes. relay.checkpoint_interval keeps its
// default (30 s): it is longer than the heartbeat interval (1 s), so an idle relay still writes
// the heartbeats relaySettled counts.
const relayCheckpointEveryEvents = 64

// expectedBlocks sizes every filter of the suite (relays and indexers): 8,192 blocks give 4,096
// buckets, room for the workload's resident blocks (2 workers x 1,024 per DC) without capacity
// omissions, and snapshots of 32 KiB that install in milliseconds.
const expectedBlocks = 8192

// system is one test's deployment: relays (one per DC, DC i on lane lanes[i]) and indexer
// replicas as processes, under a topic prefix, an indexer domain and a query group of their own.
type system struct {
	t       *testing.T
	seeds   []string
	prefix  string
	domain  string
	dcs     []uint64
	lanes   []int // the lane of each DC
	topics  config.Topics
	kv      []string // KV-events topic of each DC
	logDir  string
	codec   *schemas.Codec
	relays  []*proc
	indexes []*proc
}

// newSystem prepares (does not start) relays for dcs DCs, DC i on lane i, and replicas indexer
// replicas.
func newSystem(t *testing.T, seeds []string, dcs, replicas int) *system {
	t.Helper()
	lanes := make([]int, dcs)
	for i := range lanes {
		lanes[i] = i
	}
	return newSystemOnLanes(t, seeds, lanes, replicas)
}

// newSystemOnLanes is newSystem with a DC on each of the given lanes (0..63, DC i on lanes[i]):
// the lane map, the relays' lanes and the lane topic's partitions (one per lane up to the highest,
// at least 16, as the processes size it) follow them.
func newSystemOnLanes(t *testing.T, seeds []string, laneOf []int, replicas int) *system {
	t.Helper()
	dcs := len(laneOf)
	var d [32]byte
	if _, err := rand.Read(d[:]); err != nil {
		t.Fatal(err)
	}
	s := &system{t: t, seeds: seeds, prefix: testenv.UniqueName(t, "ckff") + "-",
		domain: hex.EncodeToString(d[:16]) + ":" + hex.EncodeToString(d[16:]), lanes: slices.Clone(laneOf)}
	s.topics = config.DefaultTopics(s.prefix)
	s.logDir = filepath.Join(t.TempDir(), "logs")
	if err := os.MkdirAll(s.logDir, 0o755); err != nil {
		t.Fatal(err)
	}
	codec, err := schemas.NewCodec(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	s.codec = codec
	var lanes []string
	for i := 0; i < dcs; i++ {
		dc := 0xdc01 + uint64(i)
		s.dcs = append(s.dcs, dc)
		s.kv = append(s.kv, loadgen.KVTopic(s.topics.KVEvents, dc))
		lanes = append(lanes, fmt.Sprintf("%d=%#x", laneOf[i], dc))
	}
	common := []string{
		"KAFKA_BROKERS=" + strings.Join(seeds, ","),
		"CKF_TOPIC_PREFIX=" + s.prefix,
		"CKF_INDEXER_DOMAIN=" + s.domain,
		"CKF_INDEXER_LANES=" + strings.Join(lanes, ","),
		"CKF_INDEXER_EXPECTED_BLOCKS_PER_DC=" + strconv.Itoa(expectedBlocks),
		"CKF_RELAY_EXPECTED_BLOCKS=" + strconv.Itoa(expectedBlocks),
		"CKF_METRICS_REPORT_INTERVAL=100ms",
		"CKF_SHUTDOWN_TIMEOUT=10s",
		"CKF_LOG_LEVEL=info",
	}
	for i, dc := range s.dcs {
		env := append(slices.Clone(common),
			fmt.Sprintf("CKF_RELAY_DC_ID=%#x", dc), "CKF_RELAY_LANE="+strconv.Itoa(s.lanes[i]),
			"CKF_TOPICS_KV_EVENTS="+s.kv[i],
			"CKF_RELAY_SNAPSHOT_EVERY_DELTAS=400", "CKF_RELAY_SNAPSHOT_INTERVAL=5s",
			"CKF_RELAY_CHECKPOINT_EVERY_EVENTS="+strconv.Itoa(relayCheckpointEveryEvents))
		s.relays = append(s.relays, newProc(t, s.logDir, fmt.Sprintf("relay-%d", i), env, "relay"))
	}
	group := s.prefix + "queries"
	for i := 0; i < replicas; i++ {
		env := append(slices.Clone(common),
			"CKF_INDEXER_CONSUMER_INSTANCE_ID="+strconv.Itoa(1001+i), "CKF_INDEXER_QUERY_GROUP="+group)
		s.indexes = append(s.indexes, newProc(t, s.logDir, fmt.Sprintf("indexer-%d", i), env, "indexer"))
	}
	t.Logf("topic prefix %s, domain %s, logs in %s", s.prefix, s.domain, s.logDir)
	return s
}

// ensureTopics creates the product's topic layout (as the processes would, relay checkpoints
// included) plus each DC's KV-events topic, so that no process races another to create them.
func (s *system) ensureTopics() {
	s.t.Helper()
	adm := kadm.NewClient(s.client())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	specs := appkafka.TopicLayoutLanes(s.topics, s.laneCount())
	i := slices.IndexFunc(specs, func(sp appkafka.TopicSpec) bool { return sp.Name == s.topics.KVEvents })
	if i < 0 {
		s.t.Fatalf("the topic layout has no KV-events topic %s", s.topics.KVEvents)
	}
	for _, kv := range s.kv {
		spec := specs[i] // the layout's KV-events topic: its partitions and retention
		spec.Name = kv
		specs = append(specs, spec)
	}
	// Replicated as the processes replicate the topics they create (kafka.topic_replication_factor
	// and kafka.topic_min_insync_replicas at their defaults): the broker's defaults on one broker,
	// 3 replicas and min.insync.replicas 2 on the three-node cluster.
	factor, minInsync, err := appkafka.ReplicationFor(ctx, adm, appkafka.Replication{})
	if err != nil {
		s.t.Fatal(err)
	}
	for _, sp := range specs {
		resp, err := adm.CreateTopic(ctx, sp.Partitions, factor, appkafka.WithMinInsync(sp.Configs, minInsync), sp.Name)
		if err == nil {
			err = resp.Err
		}
		if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
			s.t.Fatalf("create %s: %v", sp.Name, err)
		}
	}
}

// laneCount is the lane count of the deployment's table: its highest lane + 1.
func (s *system) laneCount() int { return slices.Max(s.lanes) + 1 }

// dcOn returns the index of the DC on lane, failing the test when no DC is on it (a lane the
// deployment does not configure was listed or answered).
func (s *system) dcOn(lane uint8) int {
	s.t.Helper()
	i := slices.Index(s.lanes, int(lane))
	if i < 0 {
		s.t.Fatalf("lane %d: no DC of the deployment is on it (lanes %v)", lane, s.lanes)
	}
	return i
}

// laneMask64 selects every lane of the deployment.
func (s *system) laneMask64() uint64 {
	var m uint64
	for _, l := range s.lanes {
		m |= 1 << l
	}
	return m
}

// client is a franz-go client on the system's cluster, closed at the end of the test.
func (s *system) client(opts ...kgo.Opt) *kgo.Client {
	s.t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(s.seeds...)}, opts...)...)
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(cl.Close)
	return cl
}

// startAll starts the relays, waits for them, then the replicas, and waits for every lane.
func (s *system) startAll() {
	s.t.Helper()
	s.ensureTopics()
	for _, r := range s.relays {
		r.Start()
	}
	for _, r := range s.relays {
		r.WaitReady(time.Minute)
	}
	for _, ix := range s.indexes {
		ix.Start()
	}
	for _, ix := range s.indexes {
		ix.WaitReady(time.Minute)
	}
}

// ---- the KV event writer and the model ----

// writer is a seeded synthetic-engine writer (loadgen's workload) that remembers what the broker
// acknowledged: every acknowledged event is applied, in acknowledgement order, to a model
// ckf.DcState of its DC. Records of one worker share a partition, so their acknowledgements come
// in production order and the model sees every source's events in the relay's order.
type writer struct {
	t      testing.TB
	s      *system
	w      *loadgen.Workload
	cl     *kgo.Client
	rate   float64
	models []*producer.DcState

	mu      sync.Mutex // guards models
	sent    atomic.Int64
	acked   atomic.Int64
	failed  atomic.Int64
	lastErr atomic.Value

	paused atomic.Bool
	// tick is held while the run loop handles one tick (checks paused and sends what is due),
	// so that pause can wait for a tick in progress to end.
	tick    sync.Mutex
	cancel  context.CancelFunc
	stopped chan struct{}
}

// newWriter returns a writer at rate events/s; opts are added to its client's (a longer
// delivery timeout, say).
func (s *system) newWriter(seed uint64, rate float64, opts ...kgo.Opt) *writer {
	s.t.Helper()
	w, err := loadgen.NewWorkload(loadgen.Config{Seed: seed, DCs: s.dcs, WorkersPerDC: 2, WorkerCapacity: 1024,
		ConversationsPerDC: 24, SystemPrompts: 4, TokenQueries: 1e-9})
	if err != nil {
		s.t.Fatal(err)
	}
	wr := &writer{t: s.t, s: s, w: w, rate: rate,
		cl: s.client(append([]kgo.Opt{kgo.RequiredAcks(kgo.AllISRAcks()), kgo.RecordDeliveryTimeout(2 * time.Minute)}, opts...)...)}
	for range s.dcs {
		m, err := producer.NewDcState(ckf.NewCkfConfig(expectedBlocks))
		if err != nil {
			s.t.Fatal(err)
		}
		wr.models = append(wr.models, m)
	}
	return wr
}

// run produces events at the writer's rate until stop.
func (w *writer) run() {
	ctx, cancel := context.WithCancel(context.Background())
	w.cancel, w.stopped = cancel, make(chan struct{})
	go func() {
		defer close(w.stopped)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		start, sent := time.Now(), 0.0
		for ctx.Err() == nil {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			w.tick.Lock()
			due := w.rate * time.Since(start).Seconds()
			if w.paused.Load() {
				sent = due
			}
			for ; sent+1 <= due; sent++ {
				w.send(ctx)
			}
			w.tick.Unlock()
		}
	}()
	w.t.Cleanup(w.stop)
}

func (w *writer) send(ctx context.Context) {
	ev := w.w.NextEvent()
	b, err := w.s.codec.EncodeKvEvent(ev.KV)
	if err != nil {
		w.t.Errorf("encode: %v", err)
		return
	}
	rec := &kgo.Record{Topic: w.s.kv[ev.DCIndex], Key: strconv.AppendUint(nil, ev.KV.WorkerID, 10), Value: b}
	w.sent.Add(1)
	kv, dc := ev.KV, ev.DCIndex
	w.cl.Produce(context.WithoutCancel(ctx), rec, func(_ *kgo.Record, err error) {
		if err != nil {
			w.failed.Add(1)
			w.lastErr.Store(err.Error())
			return
		}
		w.mu.Lock()
		w.models[dc].ApplyEvent(relay.RouterEventOf(&kv))
		w.mu.Unlock()
		w.acked.Add(1)
	})
}

// pause stops producing and waits until everything produced is acknowledged (or failed).
// paused is set under the tick lock: a tick in progress has ended by then and every later tick
// sees it, so the flush covers every event the writer sends before resume.
func (w *writer) pause() {
	w.t.Helper()
	w.tick.Lock()
	w.paused.Store(true)
	w.tick.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := w.cl.Flush(ctx); err != nil {
		w.t.Fatalf("flushing the writer: %v", err)
	}
}

func (w *writer) resume() { w.paused.Store(false) }

// waitAcked waits until the broker has acknowledged n events of the writer in all: the load the
// test wants to have run, counted in events rather than in seconds.
func (w *writer) waitAcked(n int64, timeout time.Duration) {
	w.t.Helper()
	testenv.WaitUntil(w.t, timeout, fmt.Sprintf("%d KV events acknowledged", n), func() bool { return w.acked.Load() >= n },
		func() string {
			return fmt.Sprintf("%d acknowledged, %d sent, %d failed (%v)", w.acked.Load(), w.sent.Load(), w.failed.Load(), w.lastErr.Load())
		})
}

func (w *writer) stop() {
	if w.cancel == nil {
		return
	}
	w.cancel()
	<-w.stopped
	w.cancel = nil
}

func (w *writer) resident(dc int) uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.models[dc].ResidentCount()
}

// query is one prompt as local block hashes.
type query []uint64

// queries draws n prompts from the workload's live conversations and fresh ones.
func (w *writer) queries(rng *mrand.Rand, n int) []query {
	out := make([]query, 0, n)
	salt := ckf.BlockSaltSeed("", "")
	for len(out) < n {
		q := w.w.NextQuery(rng).Request
		switch q.Input {
		case schemas.InputLocalBlockHashes:
			out = append(out, q.Hashes.AppendTo(nil))
		default:
			toks := q.Tokens.AppendTo(nil)
			var hs []uint64
			for _, h := range ckf.TokenBlockHashes(toks, int(q.BlockSize), salt) {
				hs = append(hs, uint64(h))
			}
			out = append(out, hs)
		}
	}
	return out
}

// modelDepth is the longest prefix of q whose every block is resident (exactly, by ownership) in
// the model of DC dc: the depth the indexer must reach at least.
func (w *writer) modelDepth(dc int, q query) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	var c ckf.CanonicalHash
	for i, h := range q {
		if i == 0 {
			c = ckf.CanonicalRoot(ckf.LocalBlockHash(h))
		} else {
			c = ckf.CanonicalChild(c, ckf.LocalBlockHash(h))
		}
		if _, resident := w.models[dc].Owners(c); !resident {
			return i
		}
	}
	return len(q)
}

// ---- the indexer's HTTP API ----

type laneView struct {
	Lane              uint8             `json:"lane"`
	State             string            `json:"state"`
	Ready             bool              `json:"ready"`
	Identity          string            `json:"identity"`
	InstalledSequence uint64            `json:"installed_sequence"`
	AppliedOffset     int64             `json:"applied_offset"`
	HighWatermark     int64             `json:"high_watermark"`
	Rejected          uint64            `json:"rejected"`
	Recoveries        uint64            `json:"recoveries"`
	Faults            map[string]uint64 `json:"faults"`
	LastFault         string            `json:"last_fault"`
}

type lanesPage struct {
	Ready bool       `json:"ready"`
	Lanes []laneView `json:"lanes"`
}

func (p *proc) lanes() (lanesPage, error) {
	var page lanesPage
	c := &http.Client{Timeout: 3 * time.Second}
	resp, err := c.Get("http://" + p.HTTP + "/v1/lanes")
	if err != nil {
		return page, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return page, fmt.Errorf("%s /v1/lanes: %s", p.Name, resp.Status)
	}
	err = json.NewDecoder(resp.Body).Decode(&page)
	return page, err
}

type match struct {
	Lane  uint8  `json:"lane"`
	Depth uint32 `json:"depth"`
}

type answer struct {
	Status  string  `json:"status"`
	Error   string  `json:"error"`
	Matches []match `json:"matches"`
}

// ask asks replica p for q's prefix depths over HTTP.
func (p *proc) ask(q query) (answer, error) {
	var a answer
	body, _ := json.Marshal(map[string]any{"local_block_hashes": []uint64(q)})
	c := &http.Client{Timeout: 3 * time.Second}
	resp, err := c.Post("http://"+p.HTTP+"/v1/prefix-matches", "application/json", bytes.NewReader(body))
	if err != nil {
		return a, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(b, &a); err != nil {
		return a, fmt.Errorf("%s: %s: %w", p.Name, b, err)
	}
	if resp.StatusCode != http.StatusOK {
		return a, fmt.Errorf("%s: %s: %s", p.Name, resp.Status, b)
	}
	return a, nil
}

// ---- convergence and the oracle ----

// relaySettled waits until every relay has applied every record of its KV-events topic and
// committed everything that caused, checks that it then holds exactly the model's resident
// blocks, and returns the last sequence of each lane. Call it with the writer paused.
//
// Applied: ckf_relay_applied_records is the number of KV records in the relay's state, decoded
// or not, across restarts (a restored checkpoint carries the count of the records it holds, and
// the tail replayed after it adds its own), so its reaching the topic's record count (the sum of
// the end offsets listed after the pause; the writers are not transactional, so every offset is
// a record) means every record was applied. The per-process counters ckf_relay_events_total and
// ckf_relay_events_undecodable_total would not do: after a restore they count only the tail. The
// gauge must then equal the record count exactly: more would mean a record applied twice (a
// checkpoint's offsets and its state disagreeing). Committed: the publication window a record
// leaves open is flushed and committed PublishMaxDelay (default 5 ms) after its first event,
// while a heartbeat is written only after HeartbeatInterval (default 1 s) without any write.
// Two heartbeats counted after the records were applied are therefore a heartbeat interval
// apart, the second one after that flush, and the last sequence the relay then reports is
// final.
func (s *system) relaySettled(w *writer, timeout time.Duration) []uint64 {
	s.t.Helper()
	adm := kadm.NewClient(s.client())
	ctx, cancel := context.WithTimeout(s.t.Context(), 2*time.Minute)
	defer cancel()
	type relayState struct {
		records    float64 // records on the KV-events topic
		applied    bool
		heartbeats float64 // heartbeats counted when the records were first seen applied
		done       bool
		last       map[string]float64
		err        error
	}
	st := make([]relayState, len(s.relays))
	for i := range s.relays {
		ends, err := testenv.ListEndOffsets(ctx, adm, s.kv[i])
		if err != nil {
			s.t.Fatal(err)
		}
		ends.Each(func(o kadm.ListedOffset) { st[i].records += float64(o.Offset) })
	}
	testenv.WaitUntil(s.t, timeout, "every relay applies and commits its KV events", func() bool {
		all := true
		for i, r := range s.relays {
			rs := &st[i]
			if rs.done {
				continue
			}
			all = false
			m, err := r.Metrics()
			if rs.err = err; err != nil {
				continue
			}
			rs.last = m
			hb := sumMetrics(m, "ckf_relay_heartbeats_total")
			switch {
			case !rs.applied:
				if m["ckf_relay_started"] == 1 && m["ckf_relay_applied_records"] >= rs.records {
					rs.applied, rs.heartbeats = true, hb
				}
			case hb >= rs.heartbeats+2:
				rs.done = true
			}
		}
		return all
	}, func() string {
		var b strings.Builder
		for i, r := range s.relays {
			rs := st[i]
			fmt.Fprintf(&b, "\n%s: %v records, applied %v (applied records %v; this incarnation: events %v + undecodable %v, restored from a checkpoint %v), heartbeats %v since, done %v, err %v",
				r.Name, rs.records, rs.applied, rs.last["ckf_relay_applied_records"], sumMetrics(rs.last, "ckf_relay_events_total"),
				sumMetrics(rs.last, "ckf_relay_events_undecodable_total"), rs.last["ckf_relay_restored_from_checkpoint"],
				sumMetrics(rs.last, "ckf_relay_heartbeats_total")-rs.heartbeats, rs.done, rs.err)
		}
		return b.String()
	})
	seqs := make([]uint64, len(s.relays))
	for i, r := range s.relays {
		m := st[i].last
		if got := m["ckf_relay_applied_records"]; got != st[i].records {
			s.t.Fatalf("%s holds %v applied KV records, more than the %v records of its topic", r.Name, got, st[i].records)
		}
		if want := w.resident(i); uint64(m["ckf_relay_resident_blocks"]) != want {
			s.t.Fatalf("%s applied every KV record but holds %v resident blocks, the model %d", r.Name, m["ckf_relay_resident_blocks"], want)
		}
		seqs[i] = uint64(m["ckf_relay_last_sequence"])
	}
	return seqs
}

// checkpointCommittedLog is the message a relay logs after each committed state checkpoint
// (streams/relay/relay_checkpoint.go).
const checkpointCommittedLog = `"msg":"relay state checkpointed"`

// relayStarted waits until relay r's current incarnation reports that it has started (written
// its start-up snapshot: ckf_relay_started 1) and returns its metrics then. Whatever the start
// set before that, the checkpoint restore's ckf_relay_restored_from_checkpoint included, was
// reported to /metrics no later than ckf_relay_started (tally reports every updated gauge at
// each report interval); a gauge still absent then was never set (0).
func (s *system) relayStarted(r *proc, timeout time.Duration) map[string]float64 {
	s.t.Helper()
	var m map[string]float64
	var err error
	testenv.WaitUntilEvery(s.t, scrapePoll, timeout, r.Name+" reports its start", func() bool {
		m, err = r.Metrics()
		return err == nil && m["ckf_relay_started"] == 1
	}, func() string { return fmt.Sprintf("last scrape error %v", err) })
	return m
}

// replicasCaughtUp waits until every replica serves every lane at the relays' last sequences
// and returns the pages.
func (s *system) replicasCaughtUp(seqs []uint64, timeout time.Duration) []lanesPage {
	s.t.Helper()
	pages := make([]lanesPage, len(s.indexes))
	errs := make([]error, len(s.indexes))
	testenv.WaitUntil(s.t, timeout, fmt.Sprintf("every replica serves every lane at the sequences %v", seqs), func() bool {
		all := true
		for i, ix := range s.indexes {
			page, err := ix.lanes()
			pages[i], errs[i] = page, err
			ok := err == nil && len(page.Lanes) == len(seqs)
			if ok {
				for _, l := range page.Lanes {
					if l.State != "serving" || l.InstalledSequence != seqs[s.dcOn(l.Lane)] {
						ok = false
					}
				}
			}
			all = all && ok
		}
		return all
	}, func() string {
		var b strings.Builder
		for i, ix := range s.indexes {
			fmt.Fprintf(&b, "\n%s: %+v (%v)", ix.Name, pages[i].Lanes, errs[i])
		}
		return b.String()
	})
	return pages
}

// oracleReport counts what compareAnswers checked.
type oracleReport struct {
	queries, probes, nonZero int
	deepest                  int
	// mismatches are queries the replicas answered differently; lost are lane answers below
	// the model's resident prefix (an acknowledged event missing).
	mismatches, lost int
}

// compareAnswers asks every replica every query: the answers must be identical across replicas,
// and no lane may answer less than the model's resident prefix (no acknowledged event lost).
func (s *system) compareAnswers(w *writer, qs []query) oracleReport {
	s.t.Helper()
	var rep oracleReport
	for qi, q := range qs {
		var first answer
		for i, ix := range s.indexes {
			a, err := ix.ask(q)
			if err != nil {
				s.t.Fatalf("query %d: %v", qi, err)
			}
			if a.Status != "OK" || len(a.Matches) != len(s.dcs) {
				s.t.Fatalf("query %d on %s: %+v", qi, ix.Name, a)
			}
			if i == 0 {
				first = a
			} else if !slices.Equal(a.Matches, first.Matches) {
				rep.mismatches++
				s.t.Errorf("query %d: %s answers %v, %s answers %v", qi, ix.Name, a.Matches, s.indexes[0].Name, first.Matches)
			}
			for _, m := range a.Matches {
				want := w.modelDepth(s.dcOn(m.Lane), q)
				rep.probes++
				if int(m.Depth) < want {
					rep.lost++
					s.t.Errorf("query %d (%d blocks) on %s lane %d: depth %d < resident prefix %d: an acknowledged event is missing",
						qi, len(q), ix.Name, m.Lane, m.Depth, want)
				}
				if want > 0 {
					rep.nonZero++
				}
				rep.deepest = max(rep.deepest, want)
			}
		}
		rep.queries++
	}
	return rep
}

// deadLetters reads the whole dead-letter topic (with a client of its own, closed on return, so
// that it can be polled).
func (s *system) deadLetters() []schemas.DeadLetter {
	s.t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(s.seeds...), kgo.ConsumeTopics(s.topics.DeadLetter), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		s.t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(s.t.Context(), 2*time.Minute)
	defer cancel()
	ends, err := testenv.ListEndOffsets(ctx, adm, s.topics.DeadLetter)
	if err != nil {
		s.t.Fatal(err)
	}
	var want int64
	ends.Each(func(o kadm.ListedOffset) { want += o.Offset })
	var out []schemas.DeadLetter
	for int64(len(out)) < want {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			s.t.Fatalf("read %d of %d dead letters", len(out), want)
		}
		fs.EachRecord(func(r *kgo.Record) {
			d, err := s.codec.DecodeDeadLetter(r.Value)
			if err != nil {
				s.t.Errorf("undecodable dead letter at %d: %v", r.Offset, err)
				d = schemas.DeadLetter{Reason: "undecodable"}
			}
			out = append(out, d)
		})
	}
	return out
}
