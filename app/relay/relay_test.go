package relay_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/app"
	"github.com/ckf-stream/ckf-stream/app/config"
	"github.com/ckf-stream/ckf-stream/app/httpserver"
	"github.com/ckf-stream/ckf-stream/app/kafka"
	"github.com/ckf-stream/ckf-stream/app/relay"
	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/ckf/producer"
	"github.com/ckf-stream/ckf-stream/schemas"
	streamrelay "github.com/ckf-stream/ckf-stream/streams/relay"
	"github.com/ckf-stream/ckf-stream/testenv"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/fx"
)

const domain = "c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5:5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c"

func load(t *testing.T, args ...string) config.Config {
	t.Helper()
	cfg, err := config.Load(config.Sources{
		Args:      append([]string{"--http.listen=127.0.0.1:0", "--log.level=warn"}, args...),
		LookupEnv: func(string) (string, bool) { return "", false },
	})
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestRelayStreamsConfig: the relay's pool is (indexer.domain, relay.dc_id); a missing domain
// and a lane that the lane map gives to another DC are configuration errors naming the field.
func TestRelayStreamsConfig(t *testing.T) {
	cfg := load(t, "--relay.dc_id=0x2a", "--relay.lane=2", "--relay.expected_blocks=4096", "--relay.publish_every_events=3")
	if _, err := relay.StreamsConfig(cfg.Relay, cfg.Indexer, cfg.Topics); !errors.Is(err, config.ErrInvalid) || !strings.Contains(err.Error(), "indexer.domain") {
		t.Fatalf("without a domain: %v", err)
	}
	cfg = load(t, "--relay.dc_id=0x2a", "--relay.lane=2", "--indexer.domain="+domain, "--indexer.lanes=2=0x2b,3=0x2a")
	_, err := relay.StreamsConfig(cfg.Relay, cfg.Indexer, cfg.Topics)
	if !errors.Is(err, config.ErrInvalid) || !errors.Is(err, streamrelay.ErrLaneNotOwned) || !strings.Contains(err.Error(), "relay.lane") {
		t.Fatalf("lane of another DC: %v", err)
	}
	cfg = load(t, "--relay.dc_id=0x2a", "--relay.lane=2", "--relay.expected_blocks=4096", "--relay.publish_every_events=3",
		"--indexer.domain="+domain, "--indexer.lanes=2=0x2a,3=0x2b")
	sc, err := relay.StreamsConfig(cfg.Relay, cfg.Indexer, cfg.Topics)
	if err != nil {
		t.Fatal(err)
	}
	d, err := ckf.ParseIndexerDomainID(domain, ckf.IdentityExplicit)
	if err != nil {
		t.Fatal(err)
	}
	want := ckf.PoolID{Domain: d, Dc: 0x2a}
	if sc.Pool != want || sc.Lane != 2 || sc.LaneOwners[2] == nil || *sc.LaneOwners[2] != want || sc.LaneOwners[3] == nil ||
		sc.CKF.ExpectedBlocksPerDC != 4096 || sc.CKF.PublishEveryNEvents != 3 || sc.Topics.KVEvents != cfg.Topics.KVEvents ||
		sc.Topics.SnapshotIndex != cfg.Topics.SnapshotIndex {
		t.Fatalf("streams config %+v", sc)
	}
	if sc.SnapshotInterval != time.Minute || sc.SnapshotIdleInterval != time.Hour {
		t.Errorf("snapshot intervals %v / idle %v; want the defaults 1m / 1h", sc.SnapshotInterval, sc.SnapshotIdleInterval)
	}
	// relay.snapshot_idle_interval=0 reaches the library as 0, which the library takes as the
	// snapshot interval (idle lanes snapshot as often as busy ones): one meaning, the library's.
	cfg = load(t, "--relay.dc_id=0x2a", "--relay.lane=2", "--indexer.domain="+domain, "--indexer.lanes=2=0x2a",
		"--relay.snapshot_interval=90s", "--relay.snapshot_idle_interval=0s")
	if sc, err = relay.StreamsConfig(cfg.Relay, cfg.Indexer, cfg.Topics); err != nil || sc.SnapshotIdleInterval != 0 || sc.Validate() != nil {
		t.Errorf("snapshot_idle_interval=0: idle interval %v (%v, library: %v); want 0, accepted", sc.SnapshotIdleInterval, err, sc.Validate())
	}
}

// TestRelayModuleOnRealBroker runs processor relay's module against the real broker: /readyz
// turns ok once the start-up snapshot is written, a KV event is published as a delta, the
// metrics reach /metrics, and the graceful stop leaves a drain marker expecting the last
// sequence as the lane's last record.
func TestRelayModuleOnRealBroker(t *testing.T) {
	prefix := testenv.UniqueName(t, "relay") + "."
	cfg := load(t, "--kafka.brokers="+strings.Join(testenv.Brokers(t), ","), "--topic_prefix="+prefix,
		"--metrics.report_interval=50ms", "--indexer.domain="+domain, "--indexer.lanes=6=0x2a",
		"--relay.dc_id=0x2a", "--relay.lane=6", "--relay.expected_blocks=4096", "--relay.heartbeat_interval=100ms")
	admin := testenv.Client(t)
	t.Cleanup(func() {
		var names []string
		for _, s := range kafka.TopicLayout(cfg.Topics) {
			names = append(names, s.Name)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = kadm.NewClient(admin).DeleteTopics(ctx, names...)
	})
	var (
		rl  *relay.Relay
		srv *httpserver.Server
	)
	a := app.New(cfg, relay.Module, fx.Populate(&rl, &srv))
	if err := a.Err(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	stopped := false
	defer func() {
		if !stopped {
			_ = a.Stop(context.Background())
		}
	}()
	select {
	case <-rl.Streams().Started():
	case <-ctx.Done():
		t.Fatal("relay did not start")
	}
	url := "http://" + srv.Addr().String()
	if code, body := get(t, url+"/readyz"); code != http.StatusOK || !strings.Contains(body, "ok relay") {
		t.Fatalf("/readyz: %d %q", code, body)
	}

	codec, err := kafka.NewCodec(cfg.Topics)
	if err != nil {
		t.Fatal(err)
	}
	ev := streamrelay.KvEventOf(producer.RouterEvent{WorkerID: 4, Event: producer.KvCacheEvent{Kind: producer.KvEventStored,
		Stored: producer.StoreData{Blocks: []producer.StoredBlock{{BlockHash: 1, TokensHash: 11}, {BlockHash: 2, TokensHash: 22}}}}})
	b, err := codec.EncodeKvEvent(ev)
	if err != nil {
		t.Fatal(err)
	}
	if err := admin.ProduceSync(ctx, &kgo.Record{Topic: cfg.Topics.KVEvents, Key: []byte("4"), Value: b}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	// Deltas counts a delta when it is published into the open transaction; LastSequence moves
	// when that transaction commits. The drain marker names the committed sequence, so wait for it.
	testenv.WaitUntil(t, time.Minute, "a committed delta", func() bool {
		s := rl.Streams().Stats()
		return s.Deltas > 0 && s.LastSequence > 0
	}, func() string { return fmt.Sprintf("stats %+v", rl.Streams().Stats()) })
	// The relay's own series, and franz-go's for each of its clients (labelled by role).
	wants := []string{"ckf_relay_deltas_published_total", "ckf_relay_snapshot_duration_seconds_bucket",
		`ckf_kafka_produce_records_total{client="relay-lanes"`, `ckf_kafka_fetch_records_total{client="relay-input"`}
	var missing []string
	testenv.WaitUntil(t, time.Minute, "the relay's series on /metrics", func() bool {
		_, body := get(t, url+"/metrics")
		missing = missing[:0]
		for _, w := range wants {
			if !strings.Contains(body, w) {
				missing = append(missing, w)
			}
		}
		return len(missing) == 0
	}, func() string { return fmt.Sprintf("/metrics lacks %q", missing) })
	last := rl.Streams().Stats().LastSequence

	stopped = true
	if err := a.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	// The lane's last committed record is the drain marker.
	hwm, err := kadm.NewClient(admin).ListEndOffsets(ctx, cfg.Topics.Lanes)
	if err != nil {
		t.Fatal(err)
	}
	end, _ := hwm.Lookup(cfg.Topics.Lanes, 6)
	cl := testenv.Client(t, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{cfg.Topics.Lanes: {6: kgo.NewOffset().AtStart()}}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	var recs []schemas.LaneRecord
	for {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatal(ctx.Err())
		}
		done := false
		fs.EachRecord(func(r *kgo.Record) {
			lr, err := codec.DecodeLaneRecord(r.Value)
			if err != nil {
				t.Fatal(err)
			}
			recs = append(recs, lr)
			done = done || r.Offset+2 >= end.Offset // the last record sits before the commit marker
		})
		if done {
			break
		}
	}
	if recs[0].Kind != schemas.LaneSnapshotChunk || recs[len(recs)-1].Kind != schemas.LaneDrainMarker ||
		recs[len(recs)-1].Drain.ExpectedSequence != last {
		t.Fatalf("lane records: first %v, last %v (%+v); want a snapshot chunk first and a drain marker at %d last",
			recs[0].Kind, recs[len(recs)-1].Kind, recs[len(recs)-1].Drain, last)
	}
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}
