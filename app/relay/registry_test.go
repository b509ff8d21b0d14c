package relay_test

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/app"
	"github.com/ckf-stream/ckf-stream/app/config"
	"github.com/ckf-stream/ckf-stream/app/kafka"
	"github.com/ckf-stream/ckf-stream/app/relay"
	"github.com/ckf-stream/ckf-stream/ckf/producer"
	"github.com/ckf-stream/ckf-stream/schemas"
	streamrelay "github.com/ckf-stream/ckf-stream/streams/relay"
	"github.com/ckf-stream/ckf-stream/testenv"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/fx"
)

// registryID is the id of the latest version of subject, read from the registry's Confluent API.
func registryID(t *testing.T, subject string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, testenv.Registry(t)+"/subjects/"+url.PathEscape(subject)+"/versions/latest", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var v struct {
		ID int `json:"id"`
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET latest version of %s: %s", subject, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		t.Fatal(err)
	}
	return v.ID
}

// TestRelayWritesRegistryIDs runs processor relay's module with schema_registry set to the real
// Apicurio Registry, on the real broker: the relay registers the contract's schemas under its
// topic_prefix, and every lane record it writes (the start-up snapshot, the delta of a KV event
// that an engine wrote with registry ids) carries the registry's id of "<lanes topic>-value" in
// its 5-byte header.
func TestRelayWritesRegistryIDs(t *testing.T) {
	prefix := testenv.UniqueName(t, "relaysr") + "."
	cfg := load(t, "--kafka.brokers="+strings.Join(testenv.Brokers(t), ","), "--topic_prefix="+prefix,
		"--schema_registry.urls="+testenv.Registry(t), "--indexer.domain="+domain, "--indexer.lanes=6=0x2a",
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
	var rl *relay.Relay
	a := app.New(cfg, relay.Module, fx.Populate(&rl))
	if err := a.Err(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = a.Stop(context.Background()) }()
	select {
	case <-rl.Streams().Started():
	case <-ctx.Done():
		t.Fatal("relay did not start")
	}

	laneID := registryID(t, cfg.Topics.Lanes+"-value")
	if laneID == schemas.BuiltinID(schemas.TypeLaneRecord) {
		t.Fatalf("the registry's lane record id is the built-in one")
	}
	engine, err := kafka.OpenCodec(ctx, cfg.Topics, config.SchemaRegistry{URLs: cfg.SchemaRegistry.URLs, Timeout: 10 * time.Second, LookupOnly: true})
	if err != nil {
		t.Fatalf("the relay did not register its schemas: %v", err)
	}
	ev := streamrelay.KvEventOf(producer.RouterEvent{WorkerID: 4, Event: producer.KvCacheEvent{Kind: producer.KvEventStored,
		Stored: producer.StoreData{Blocks: []producer.StoredBlock{{BlockHash: 1, TokensHash: 11}}}}})
	b, err := engine.EncodeKvEvent(ev)
	if err != nil {
		t.Fatal(err)
	}
	if err := admin.ProduceSync(ctx, &kgo.Record{Topic: cfg.Topics.KVEvents, Key: []byte("4"), Value: b}).FirstErr(); err != nil {
		t.Fatal(err)
	}

	cl := testenv.Client(t, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{cfg.Topics.Lanes: {6: kgo.NewOffset().AtStart()}}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	var kinds []schemas.LaneRecordKind
	sawDelta := false
	for !sawDelta {
		fs := cl.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			t.Fatalf("reading the lane (records so far: %v): %v", kinds, err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if len(r.Value) < schemas.HeaderSize || r.Value[0] != 0 {
				t.Fatalf("lane record at offset %d is not Confluent-framed", r.Offset)
			}
			if id := int(binary.BigEndian.Uint32(r.Value[1:schemas.HeaderSize])); id != laneID {
				t.Fatalf("lane record at offset %d has schema id %d, the registry's is %d", r.Offset, id, laneID)
			}
			lr, err := engine.DecodeLaneRecord(r.Value)
			if err != nil {
				t.Fatal(err)
			}
			kinds = append(kinds, lr.Kind)
			sawDelta = sawDelta || lr.Kind == schemas.LaneDelta
		})
	}
	if kinds[0] != schemas.LaneSnapshotChunk {
		t.Fatalf("lane records %v: want the start-up snapshot first", kinds)
	}
	t.Logf("lane records %v, all with registry id %d", kinds, laneID)
}
