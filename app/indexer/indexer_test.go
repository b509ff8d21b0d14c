package indexer_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/app"
	"github.com/ckf-stream/ckf-stream/app/config"
	"github.com/ckf-stream/ckf-stream/app/httpserver"
	"github.com/ckf-stream/ckf-stream/app/indexer"
	"github.com/ckf-stream/ckf-stream/app/kafka"
	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/ckf/producer"
	"github.com/ckf-stream/ckf-stream/queryapi"
	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/ckf-stream/ckf-stream/streams"
	"github.com/ckf-stream/ckf-stream/streams/query"
	"github.com/ckf-stream/ckf-stream/testenv"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/fx"
)

// The integration tests run the indexer module in a real fx application against the test broker,
// with lane producers written in the test (ckf.DcState + ckf.Publisher + streams.LaneWriter).

// laneProducer publishes one DC's lane: a snapshot, then one delta per stored chain.
type laneProducer struct {
	t     *testing.T
	lane  uint8
	state *producer.DcState
	pub   *producer.Publisher
	w     *streams.LaneWriter
	ext   uint64
}

func newLaneProducer(t *testing.T, topics config.Topics, codec *schemas.Codec, lane uint8, dc uint64) *laneProducer {
	t.Helper()
	state, err := producer.NewDcState(ckf.NewCkfConfig(testBlocks))
	if err != nil {
		t.Fatal(err)
	}
	domain, err := ckf.ParseIndexerDomainID(testDomain, ckf.IdentityExplicit)
	if err != nil {
		t.Fatal(err)
	}
	id := ckf.ProducerIdentity{Pool: ckf.PoolID{Domain: domain, Dc: ckf.DcID(dc)}, Incarnation: 1, LayoutGeneration: 1, Format: state.Format()}
	cl := testenv.Client(t, streams.LaneWriterClientOpts()...)
	wcfg := streams.DefaultLaneWriterConfig()
	wcfg.LaneTopic, wcfg.Lane = topics.Lanes, lane
	w, err := streams.NewLaneWriter(cl, codec, id, wcfg)
	if err != nil {
		t.Fatal(err)
	}
	p := &laneProducer{t: t, lane: lane, state: state, w: w, pub: producer.NewPublisher(id, 0, w), ext: 1}
	w.ReportCapacity(p.capacity) // as the relay does
	snap, err := p.pub.SnapshotAfterBarrier(state, ckf.LaneLease{Lane: lane, Epoch: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.WriteSnapshot(context.Background(), &snap); err != nil {
		t.Fatal(err)
	}
	return p
}

// capacity is the producer state's capacity state, which its lane records carry.
func (p *laneProducer) capacity() schemas.CapacityState {
	return schemas.CapacityState{ResidentBlocks: p.state.ResidentCount(), OmittedBlocks: p.state.OmittedCount(),
		CapacityOmissions: p.state.LifetimeCapacityOmissions()}
}

// store stores chain as one event and publishes its delta.
func (p *laneProducer) store(chain []uint64) {
	p.t.Helper()
	blocks := make([]producer.StoredBlock, len(chain))
	for i, h := range chain {
		blocks[i] = producer.StoredBlock{BlockHash: ckf.ExternalBlockHash(p.ext), TokensHash: ckf.LocalBlockHash(h)}
		p.ext++
	}
	out := p.state.ApplyEvent(producer.RouterEvent{WorkerID: 1, Event: producer.KvCacheEvent{Kind: producer.KvEventStored, Stored: producer.StoreData{Blocks: blocks}}})
	if out.FirstError != nil {
		p.t.Fatal(out.FirstError)
	}
	if _, err := p.pub.Publish(out.Publication); err != nil {
		p.t.Fatal(err)
	}
}

// running is the indexer application of one test.
type running struct {
	cfg  config.Config
	ix   *indexer.Indexer
	srv  *httpserver.Server
	base string
}

func startIndexer(t *testing.T) *running {
	t.Helper()
	return startIndexerWith(t, testenv.UniqueName(t, "ix")+".")
}

// startIndexerWith starts a replica on the topics of prefix, in the query group prefix+"group",
// with lanes 0=0x10,1=0x11 unless args (flags, applied last) say otherwise.
func startIndexerWith(t *testing.T, prefix string, args ...string) *running {
	t.Helper()
	env := map[string]string{"KAFKA_BROKERS": strings.Join(testenv.Brokers(t), ",")}
	cfg, err := config.Load(config.Sources{
		Args: append([]string{
			"--topic_prefix=" + prefix, "--indexer.domain=" + testDomain, "--indexer.lanes=0=0x10,1=0x11",
			"--indexer.expected_blocks_per_dc=" + strconv.Itoa(testBlocks), "--http.listen=127.0.0.1:0",
			"--metrics.report_interval=50ms", "--log.level=warn", "--indexer.query_group=" + prefix + "group",
		}, args...),
		LookupEnv: func(k string) (string, bool) { v, ok := env[k]; return v, ok },
	})
	if err != nil {
		t.Fatal(err)
	}
	r := &running{cfg: cfg}
	a := app.New(cfg, indexer.Module, fx.Populate(&r.ix, &r.srv))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := a.Stop(ctx); err != nil {
			t.Errorf("stop: %v", err)
		}
		var names []string
		for _, s := range kafka.TopicLayout(cfg.Topics) {
			names = append(names, s.Name)
		}
		_, _ = testenv.Admin(t).DeleteTopics(ctx, names...)
	})
	r.base = r.srv.Scheme() + "://" + r.srv.Addr().String()
	return r
}

// get fetches path from the indexer's HTTP server.
func (r *running) get(t *testing.T, path string) (int, string) {
	t.Helper()
	resp, err := http.Get(r.base + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// metric returns the value of the series of name whose labels include every given label
// (name="value" pairs), or -1 when there is none.
func metric(body, name string, labels ...string) float64 {
	sc := bufio.NewScanner(strings.NewReader(body))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		ok := true
		for _, l := range labels {
			ok = ok && strings.Contains(line, l)
		}
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err == nil {
			return v
		}
	}
	return -1
}

// TestMetricsMoveWhileProducing scrapes /metrics while test producers publish on two lanes: the
// per-lane counters (deltas, images) and gauges (installed sequence, high watermark, lag) move,
// the indexer becomes ready, and both query paths answer as the table does.
func TestMetricsMoveWhileProducing(t *testing.T) {
	r := startIndexer(t)
	codec, err := kafka.NewCodec(r.cfg.Topics)
	if err != nil {
		t.Fatal(err)
	}
	p0 := newLaneProducer(t, r.cfg.Topics, codec, 0, 0x10)
	p1 := newLaneProducer(t, r.cfg.Topics, codec, 1, 0x11)
	// Lane 1's DC reports blocks its filter omitted (a filter this test's stores cannot fill):
	// answers mark the lane incomplete and its capacity gauges and row say so.
	p1.w.ReportCapacity(func() schemas.CapacityState {
		c := p1.capacity()
		c.OmittedBlocks, c.CapacityOmissions = 5, 9
		return c
	})
	shared := []uint64{11, 12, 13, 14, 15, 16}
	p0.store(append(slices.Clone(shared), 21, 22, 23))
	p1.store(append(slices.Clone(shared), 31))
	testenv.WaitUntil(t, time.Minute, "readiness", func() bool { return r.ix.API().Ready(context.Background()) == nil })
	if code, body := r.get(t, "/readyz"); code != http.StatusOK || !strings.Contains(body, "ok lanes") {
		t.Fatalf("/readyz: %d %s", code, body)
	}

	lane0 := `lane="0"`
	var before string
	testenv.WaitUntil(t, 30*time.Second, "lane 0 series on /metrics", func() bool {
		_, before = r.get(t, "/metrics")
		return metric(before, "ckf_indexer_lane_deltas_total", lane0) >= 1 && metric(before, "ckf_indexer_lane_last_stable_offset", lane0) > 0
	})
	for i := 0; i < 20; i++ {
		p0.store([]uint64{1000 + uint64(i), 2000 + uint64(i)})
	}
	seq := p0.pub.LastSequence()
	var after string
	testenv.WaitUntil(t, 30*time.Second, "lane 0 metrics to move", func() bool {
		_, after = r.get(t, "/metrics")
		return metric(after, "ckf_indexer_lane_installed_sequence", lane0) == float64(seq)
	})
	for _, name := range []string{"ckf_indexer_lane_deltas_total", "ckf_indexer_lane_images_total", "ckf_indexer_lane_last_stable_offset", "ckf_indexer_lane_applied_offset"} {
		if b, a := metric(before, name, lane0), metric(after, name, lane0); !(a > b && b >= 0) {
			t.Errorf("%s{lane=0}: %v before, %v after 20 deltas", name, b, a)
		}
	}
	for _, name := range []string{"ckf_indexer_lane_lag_records", "ckf_indexer_lane_lag_seconds", "ckf_indexer_lane_ready"} {
		if v := metric(after, name, lane0); v < 0 {
			t.Errorf("%s{lane=0} is missing", name)
		}
	}
	if v := metric(after, "ckf_indexer_lane_ready", lane0); v != 1 {
		t.Errorf("lane 0 ready gauge %v", v)
	}
	if v := metric(after, "ckf_indexer_eligible_lanes"); v != 2 {
		t.Errorf("eligible lanes gauge %v", v)
	}
	// Each Kafka client of the lanes has its own franz-go series, labelled by its role.
	if v := metric(after, "ckf_kafka_fetch_records_total", `client="lanes"`); v < 20 {
		t.Errorf(`ckf_kafka_fetch_records_total{client="lanes"} = %v, want >= 20 (the deltas just applied)`, v)
	}
	if v := metric(after, "ckf_kafka_connects_total", `client="indexer-outputs"`); v < 1 {
		t.Errorf(`ckf_kafka_connects_total{client="indexer-outputs"} = %v, want >= 1`, v)
	}

	// Both query paths give the table's answer.
	q := append(slices.Clone(shared), 21, 22, 99)
	direct, err := r.ix.GlobalIndexer().FindPrefixMatches(q)
	if err != nil {
		t.Fatal(err)
	}
	want := map[uint8]uint32{0: direct.Lanes[0].Depth, 1: direct.Lanes[1].Depth}
	if want[0] != 8 || want[1] < 6 {
		t.Fatalf("direct search: %+v", want)
	}
	opts, err := kafka.ClientOpts(r.cfg.Kafka, nil)
	if err != nil {
		t.Fatal(err)
	}
	qcfg := query.DefaultQueryClientConfig()
	qcfg.CallTimeout = 30 * time.Second
	qc, err := query.NewQueryClient(context.Background(), query.QueryClientParams{
		Config: qcfg, Codec: codec, ClientOpts: append(opts, kgo.SeedBrokers(testenv.Brokers(t)...)),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer qc.Close()
	reply, err := qc.Query(context.Background(), schemas.QueryRequest{Input: schemas.InputLocalBlockHashes, Hashes: schemas.AppendU64s(nil, q)})
	if err != nil {
		t.Fatal(err)
	}
	if reply.Status != schemas.QueryOK || len(reply.Lanes) != 2 || reply.Lanes[0].Depth != want[0] || reply.Lanes[1].Depth != want[1] {
		t.Fatalf("Kafka reply %+v; want depths %v", reply, want)
	}
	body, _ := json.Marshal(map[string]any{"local_block_hashes": q})
	resp, err := http.Post(r.base+"/v1/prefix-matches", "application/json", strings.NewReader(string(body)))
	if err != nil {
		t.Fatal(err)
	}
	var hr queryapi.PrefixMatchResponse
	if err := json.NewDecoder(resp.Body).Decode(&hr); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || len(hr.Matches) != 2 || hr.Matches[0].Depth != want[0] || hr.Matches[1].Depth != want[1] {
		t.Fatalf("HTTP answer %d %+v; want depths %v", resp.StatusCode, hr, want)
	}
	// Both paths mark lane 1, whose DC omits blocks, and only it.
	if reply.IncompleteLanes != 1<<1 || hr.IncompleteLanes != 1<<1 || hr.Matches[0].Incomplete || !hr.Matches[1].Incomplete {
		t.Errorf("incomplete lanes: Kafka %#x, HTTP %#x %+v; want lane 1", reply.IncompleteLanes, hr.IncompleteLanes, hr.Matches)
	}
	lane1 := `lane="1"`
	testenv.WaitUntil(t, 10*time.Second, "capacity gauges", func() bool {
		_, m := r.get(t, "/metrics")
		return metric(m, "ckf_indexer_lane_omitted_blocks", lane1) == 5 && metric(m, "ckf_indexer_lane_capacity_omissions", lane1) == 9 &&
			metric(m, "ckf_indexer_lane_omitted_blocks", lane0) == 0 &&
			metric(m, "ckf_indexer_lane_filter_occupancy_ratio", lane0) == float64(p0.state.ResidentCount())/float64(4*p0.state.BucketCount())
	}, func() string {
		_, m := r.get(t, "/metrics")
		return fmt.Sprintf("omitted %v/%v, omissions %v, occupancy %v (resident %d)", metric(m, "ckf_indexer_lane_omitted_blocks", lane0),
			metric(m, "ckf_indexer_lane_omitted_blocks", lane1), metric(m, "ckf_indexer_lane_capacity_omissions", lane1),
			metric(m, "ckf_indexer_lane_filter_occupancy_ratio", lane0), p0.state.ResidentCount())
	})
	testenv.WaitUntil(t, 10*time.Second, "query metrics of both paths", func() bool {
		_, m := r.get(t, "/metrics")
		return metric(m, "ckf_query_requests_total", `path="kafka"`) >= 1 && metric(m, "ckf_query_requests_total", `path="http"`) >= 1 &&
			metric(m, "ckf_query_replies_total", `path="http"`, `status="ok"`) >= 1 &&
			metric(m, "ckf_query_latency_seconds_count", `path="http"`) >= 1
	})

	// The lane table over the real server.
	code, lanes := r.get(t, "/v1/lanes")
	var v indexer.LanesView
	if err := json.Unmarshal([]byte(lanes), &v); code != http.StatusOK || err != nil || len(v.Lanes) != 2 || !v.Ready {
		t.Fatalf("/v1/lanes: %d %v %s", code, err, lanes)
	}
	for _, l := range v.Lanes {
		if l.State != indexer.StateServing || l.Phase != "active" || l.Snapshots != 1 {
			t.Errorf("lane %d: %+v", l.Lane, l)
		}
	}
	if v.Lanes[0].InstalledSequence != seq || v.Lanes[0].Deltas != 21 {
		t.Errorf("lane 0: %+v (producer sequence %d)", v.Lanes[0], seq)
	}
	if c := v.Lanes[0].Capacity; c == nil || c.ResidentBlocks != p0.state.ResidentCount() || c.OmittedBlocks != 0 {
		t.Errorf("lane 0 capacity %+v, want %d resident, none omitted", c, p0.state.ResidentCount())
	}
	if c := v.Lanes[1].Capacity; c == nil || c.OmittedBlocks != 5 || c.CapacityOmissions != 9 {
		t.Errorf("lane 1 capacity %+v, want 5 omitted, 9 omissions", c)
	}
}
