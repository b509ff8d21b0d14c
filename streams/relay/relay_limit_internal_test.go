package relay

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/ckf/producer"
	"github.com/ckf-stream/ckf-stream/streams"
	"github.com/ckf-stream/ckf-stream/streams/internal/streamtest"
	"github.com/ckf-stream/ckf-stream/testenv"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
)

// TestRelayPublishSplitsToTheRecordLimit: with a limit that fits exactly n images, a
// publication of n is one delta, n+1 two, 2n two, 2n+1 three; the pieces are consecutive
// deltas of the publisher (each based on the previous sequence) and carry the publication in its
// order. Splits are counted once per publication.
func TestRelayPublishSplitsToTheRecordLimit(t *testing.T) {
	const n = 30
	rl := splitTestLoop(t, ckf.NewCkfConfig(4096), n)
	images := make([]ckf.BucketImage, 2*n+1)
	for i := range images {
		images[i] = ckf.BucketImage{Bucket: uint64(3 * i), Value: uint64(i + 1)}
	}
	splits := uint64(0)
	for _, tc := range []struct{ images, pieces int }{{n, 1}, {n + 1, 2}, {2 * n, 2}, {2*n + 1, 3}, {1, 1}} {
		from, base := len(rl.txn.deltas), rl.pub.LastSequence()
		rl.publish(slices.Clone(images[:tc.images]))
		checkChain(t, rl, from, base, images[:tc.images], tc.pieces)
		if tc.pieces > 1 {
			splits++
		}
		if got := rl.r.c.splits.load(); got != splits {
			t.Fatalf("after %d images: %d split publications counted; want %d", tc.images, got, splits)
		}
	}
	if rl.broken || rl.r.c.deltas.load() != uint64(len(rl.txn.deltas)) {
		t.Fatalf("broken %v, %d deltas counted for %d taken", rl.broken, rl.r.c.deltas.load(), len(rl.txn.deltas))
	}
}

// TestRelayBarrierTailIsSplit: an open publication window larger than one record (a cadence of
// many events per publication) is published in pieces before a barrier snapshot, so the
// barrier's own tail, which the publisher would send as one delta, is empty.
func TestRelayBarrierTailIsSplit(t *testing.T) {
	cfg := ckf.NewCkfConfig(4096)
	cfg.PublishEveryNEvents = 1000
	const n = 30
	rl := splitTestLoop(t, cfg, n)
	blocks := make([]producer.StoredBlock, 400)
	for i := range blocks {
		blocks[i] = producer.StoredBlock{BlockHash: ckf.ExternalBlockHash(i + 1), TokensHash: ckf.LocalBlockHash(0x9E3779B97F4A7C15 * uint64(i+1))}
	}
	out := rl.state.ApplyEvent(producer.RouterEvent{WorkerID: 1, Event: producer.KvCacheEvent{Kind: producer.KvEventStored, Stored: producer.StoreData{Blocks: blocks}}})
	if out.FirstError != nil || len(out.Publication) != 0 || !rl.state.HasPendingPublication() {
		t.Fatalf("the store did not leave an open window: %+v", out)
	}
	want := rl.state.CopyWords()
	rl.publishOpenWindow()
	pieces := len(rl.txn.deltas)
	if pieces < 2 || rl.r.c.splits.load() != 1 {
		t.Fatalf("the open window went out as %d deltas, %d splits; want several pieces of one split", pieces, rl.r.c.splits.load())
	}
	last := rl.pub.LastSequence()
	tail, snap, err := rl.pub.SnapshotAfterBarrierDelta(rl.state, ckf.LaneLease{Lane: 4, Epoch: 2})
	if err != nil {
		t.Fatal(err)
	}
	if tail.Images != nil || snap.Sequence != last || !slices.Equal(snap.Buckets, want) {
		t.Fatalf("the barrier published a tail (%d images; snapshot sequence %d, last %d) or changed the words",
			len(tail.Images), snap.Sequence, last)
	}
	// The pieces replayed on the words before the window give the snapshot's words.
	before := make([]uint64, len(want))
	seen := map[uint64]bool{}
	for _, d := range rl.txn.deltas {
		for _, im := range d.Images {
			if seen[im.Bucket] {
				t.Fatalf("bucket %d published twice", im.Bucket)
			}
			seen[im.Bucket] = true
			before[im.Bucket] = im.Value
		}
	}
	if !slices.Equal(before, want) {
		t.Fatal("the pieces applied to the empty filter do not give the barrier's words")
	}
}

// TestRelayLaneRecordLimit: the relay takes the lane topic's max.message.bytes, capped at 16
// MiB; a configuration it may not read (no DescribeConfigs permission) or cannot find falls back
// to 1,000,012 bytes; a limit below MinLaneRecordBytes is an error. (A fake cluster, for its
// ACLs: the real broker's configuration is not this test's to change.)
func TestRelayLaneRecordLimit(t *testing.T) {
	const pass = "pw"
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.EnableSASL(), kfake.EnableACLs(),
		kfake.Superuser("PLAIN", "admin", pass),
		kfake.User("PLAIN", "relay", pass, kfake.ACL{Resource: kmsg.ACLResourceTypeTopic, Name: "allowed-", Pattern: kmsg.ACLResourcePatternTypePrefixed,
			Operation: kmsg.ACLOperationDescribeConfigs, Allow: true}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	client := func(user string) *kgo.Client {
		cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.SASL(plain.Auth{User: user, Pass: pass}.AsMechanism()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cl.Close)
		return cl
	}
	admin, relay := kadm.NewClient(client("admin")), client("relay")
	ctx := context.Background()
	for topic, v := range map[string]string{"allowed-small": "65536", "allowed-huge": "104857600", "allowed-tiny": "300", "denied": "65536"} {
		if _, err := admin.CreateTopic(ctx, 1, 1, map[string]*string{"max.message.bytes": &v}, topic); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		topic   string
		want    int
		wantErr error
	}{
		{"allowed-small", 65536, nil},
		{"allowed-huge", streams.MaxRelayLaneRecordBytes, nil},
		{"allowed-missing", streams.FallbackLaneRecordBytes, nil},
		{"denied", streams.FallbackLaneRecordBytes, nil},
		{"allowed-tiny", 0, streams.ErrLaneRecordLimitTooSmall},
	} {
		rl := &relayLoop{r: &Relay{log: zaptest.NewLogger(t)}, outCl: relay, cfg: RelayConfig{Topics: RelayTopics{Lanes: tc.topic}, WriteTimeout: 10 * time.Second}}
		got, err := rl.laneRecordLimit()
		if got != tc.want || !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
			t.Errorf("topic %s: limit %d, error %v; want %d, %v", tc.topic, got, err, tc.want, tc.wantErr)
		}
	}
	if streams.FallbackLaneRecordBytes != 1_000_012 {
		t.Errorf("fallback %d; want the smaller of the broker's default 1,048,588 and franz-go's 1,000,012", streams.FallbackLaneRecordBytes)
	}
}

// TestReadTopicMaxMessageBytesFromTheBroker: on the real broker, a topic without an override
// reports the broker's message.max.bytes, and one with an override its own value, each with its
// source.
func TestReadTopicMaxMessageBytesFromTheBroker(t *testing.T) {
	// On the shared broker: how a real broker reports message.max.bytes and its config source.
	adm := testenv.Admin(t)
	ctx := context.Background()
	nodes, err := adm.ListBrokers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	brokers, err := adm.DescribeBrokerConfigs(ctx, nodes.NodeIDs()...)
	if err != nil {
		t.Fatal(err)
	}
	brokerValue := ""
	for _, rc := range brokers {
		for _, c := range rc.Configs {
			if c.Key == "message.max.bytes" {
				brokerValue = c.MaybeValue()
			}
		}
	}
	if brokerValue == "" {
		t.Fatal("the broker reports no message.max.bytes")
	}
	plain := testenv.NewTopic(t, 1)
	small := testenv.NewTopic(t, 1, testenv.TopicConfig("max.message.bytes", "65536"))
	v, source, err := streams.ReadTopicMaxMessageBytes(ctx, adm, plain)
	if err != nil || strconv.Itoa(v) != brokerValue || source == kmsg.ConfigSourceDynamicTopicConfig.String() {
		t.Errorf("topic without override: %d from %s (%v); want the broker's %s", v, source, err, brokerValue)
	}
	v, source, err = streams.ReadTopicMaxMessageBytes(ctx, adm, small)
	if err != nil || v != 65536 || source != kmsg.ConfigSourceDynamicTopicConfig.String() {
		t.Errorf("topic with override: %d from %s (%v); want 65536 from the topic", v, source, err)
	}
}

// splitTestLoop is a relay loop with a leased publisher and a client-less writer of limit
// bytes per record: enough for publish and publishOpenWindow, which only add deltas to the open
// transaction (nothing streams without a client).
func splitTestLoop(t *testing.T, cfg ckf.CkfConfig, imagesPerDelta int) *relayLoop {
	t.Helper()
	codec := streamtest.ConfigCodec(t)
	id, state := streamtest.LimitIdentity(t, cfg)
	pub := producer.NewPublisher(id, 0, nil)
	if _, _, err := pub.SnapshotAfterBarrierDelta(state, ckf.LaneLease{Lane: 4, Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	w := streamtest.ClientlessWriter(t, codec, id, streamtest.ExactLimitFor(t, codec, id, imagesPerDelta), streams.DefaultChunkWords)
	if w.MaxDeltaImages() != imagesPerDelta {
		t.Fatalf("writer carries %d images per delta; want %d", w.MaxDeltaImages(), imagesPerDelta)
	}
	m := newRelayMetrics(nil)
	return &relayLoop{r: &Relay{log: zap.NewNop(), metrics: m, c: newRelayLedger(m), hooks: noHooks{}}, state: state, pub: pub, w: w}
}

// checkChain checks that the transaction's deltas from index from on are consecutive sequences,
// each based on the previous one starting at base, and carry want in order.
func checkChain(t *testing.T, rl *relayLoop, from int, base uint64, want []ckf.BucketImage, pieces int) {
	t.Helper()
	ds := rl.txn.deltas[from:]
	if len(ds) != pieces {
		t.Fatalf("%d images: %d deltas; want %d", len(want), len(ds), pieces)
	}
	var joined []ckf.BucketImage
	for i, d := range ds {
		if d.BaseSequence != base+uint64(i) || d.Sequence != base+uint64(i)+1 {
			t.Fatalf("delta %d: base %d sequence %d; want %d, %d", i, d.BaseSequence, d.Sequence, base+uint64(i), base+uint64(i)+1)
		}
		if len(d.Images) > rl.w.MaxDeltaImages() {
			t.Fatalf("delta %d: %d images over the %d a record carries", i, len(d.Images), rl.w.MaxDeltaImages())
		}
		joined = append(joined, d.Images...)
	}
	if !slices.Equal(joined, want) {
		t.Fatalf("%d images: the deltas do not carry the publication in order", len(want))
	}
}
