package kafka_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/app/config"
	"github.com/ckf-stream/ckf-stream/app/kafka"
	"github.com/ckf-stream/ckf-stream/testenv"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

func checkLayout(t *testing.T, cl *kgo.Client, topics config.Topics) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := kafka.EnsureTopics(ctx, cl, topics); err != nil {
		t.Fatalf("EnsureTopics: %v", err)
	}
	// A second call on an existing layout is a no-op, not an error.
	if err := kafka.EnsureTopics(ctx, cl, topics); err != nil {
		t.Fatalf("EnsureTopics again: %v", err)
	}
	details, err := kadm.NewClient(cl).ListTopics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, spec := range kafka.TopicLayout(topics) {
		if got := len(details[spec.Name].Partitions); got != int(spec.Partitions) {
			t.Errorf("%s: %d partitions, want %d", spec.Name, got, spec.Partitions)
		}
	}
	// Every topic is bounded: by compaction, by time or by size, as the layout sets it.
	for _, spec := range kafka.TopicLayout(topics) {
		rcs, err := kadm.NewClient(cl).DescribeTopicConfigs(ctx, spec.Name)
		if err != nil {
			t.Fatal(err)
		}
		rc, err := rcs.On(spec.Name, nil)
		if err == nil {
			err = rc.Err
		}
		if err != nil {
			t.Fatalf("%s: %v", spec.Name, err)
		}
		got := map[string]string{}
		for _, c := range rc.Configs {
			got[c.Key] = c.MaybeValue()
		}
		bounded := got["cleanup.policy"] == "compact" || got["retention.ms"] != "-1" || got["retention.bytes"] != "-1"
		if !bounded {
			t.Errorf("%s: unbounded (cleanup.policy %s, retention.ms %s, retention.bytes %s)", spec.Name,
				got["cleanup.policy"], got["retention.ms"], got["retention.bytes"])
		}
		for k, v := range spec.Configs {
			if got[k] != *v {
				t.Errorf("%s: %s = %q, the layout sets %q", spec.Name, k, got[k], *v)
			}
		}
	}
}

func deleteLayout(t *testing.T, cl *kgo.Client, topics config.Topics) {
	t.Cleanup(func() {
		var names []string
		for _, s := range kafka.TopicLayout(topics) {
			names = append(names, s.Name)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = kadm.NewClient(cl).DeleteTopics(ctx, names...)
	})
}

// TestEnsureTopicsRealBroker creates the product's topic layout on the real broker.
func TestEnsureTopicsRealBroker(t *testing.T) {
	topics := config.DefaultTopics(testenv.UniqueName(t, "app") + ".")
	cl := testenv.Client(t)
	deleteLayout(t, cl, topics)
	checkLayout(t, cl, topics)
}

// TestEmbeddedClusterWhenNoBrokers checks the embedded default: no brokers configured starts an
// in-process broker that serves the same layout.
func TestEmbeddedClusterWhenNoBrokers(t *testing.T) {
	c, err := kafka.OpenCluster(config.Default().Kafka)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if !c.Embedded || !strings.Contains(c.Describe(), "embedded") {
		t.Fatalf("cluster = %+v, want embedded", c)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.Brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	checkLayout(t, cl, config.DefaultTopics(""))
}

func TestConfiguredClusterIsNotEmbedded(t *testing.T) {
	c, err := kafka.OpenCluster(config.Kafka{Brokers: []string{"b1:9092", "b2:9092"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.Embedded || c.Describe() != "Kafka cluster at b1:9092,b2:9092" {
		t.Fatalf("cluster = %+v (%s)", c, c.Describe())
	}
}

// TestLaneTopicTooFewPartitions rejects an existing lane topic that cannot hold 16 lanes.
func TestLaneTopicTooFewPartitions(t *testing.T) {
	c, err := kafka.OpenCluster(config.Kafka{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.Brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	topics := config.DefaultTopics("")
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 4, -1, nil, topics.Lanes); err != nil {
		t.Fatal(err)
	}
	err = kafka.EnsureTopics(ctx, cl, topics)
	if err == nil || !strings.Contains(err.Error(), "needs 16") || !errors.Is(err, kafka.ErrLaneTopicPartitions) {
		t.Fatalf("EnsureTopics with a 4-partition lane topic: %v, want a partition-count error", err)
	}
}

// TestVerifyOnlyWhenCreationIsOff: with kafka.create_topics false, a missing layout fails start
// (once the context ends) and creates nothing; an existing one passes.
func TestVerifyOnlyWhenCreationIsOff(t *testing.T) {
	cfg := config.Default()
	cfg.Kafka.Brokers = testenv.Brokers(t)
	cfg.Kafka.CreateTopics = false
	cfg.Topics = config.DefaultTopics(testenv.UniqueName(t, "verify") + ".")
	conn, err := kafka.New(kafka.Params{Config: cfg.Kafka, Topics: cfg.Topics})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	err = conn.Start(ctx)
	if err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("Start without the layout: %v, want a missing-topic error", err)
	}
	if err := conn.Ready(context.Background()); !errors.Is(err, kafka.ErrTopicsNotReady) {
		t.Errorf("Ready after a failed start = %v", err)
	}

	cl := testenv.Client(t)
	deleteLayout(t, cl, cfg.Topics)
	checkLayout(t, cl, cfg.Topics)
	conn, err = kafka.New(kafka.Params{Config: cfg.Kafka, Topics: cfg.Topics})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel = context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := conn.Start(ctx); err != nil {
		t.Fatalf("Start with the layout in place: %v", err)
	}
	if err := conn.Ready(ctx); err != nil {
		t.Errorf("Ready: %v", err)
	}
}

// TestResolveReplication pins the replication the processes choose for the topics they create:
// the broker's defaults on one or two brokers, 3 replicas with min.insync.replicas 2 from three
// brokers on, and explicit settings as they are.
func TestResolveReplication(t *testing.T) {
	for _, tc := range []struct {
		r         kafka.Replication
		brokers   int
		factor    int16
		minInsync string
	}{
		{kafka.Replication{}, 1, -1, ""},
		{kafka.Replication{}, 2, -1, ""},
		{kafka.Replication{}, 3, 3, "2"},
		{kafka.Replication{}, 5, 3, "2"},
		{kafka.Replication{Factor: 2}, 5, 2, ""},
		{kafka.Replication{Factor: 5}, 5, 5, "2"},
		{kafka.Replication{MinInsync: 3}, 3, 3, "3"},
		{kafka.Replication{MinInsync: 1}, 1, -1, "1"},
		{kafka.Replication{Factor: 1, MinInsync: 1}, 3, 1, "1"},
	} {
		f, m := kafka.ResolveReplication(tc.r, tc.brokers)
		if f != tc.factor || m != tc.minInsync {
			t.Errorf("ResolveReplication(%+v, %d brokers) = %d, %q; want %d, %q", tc.r, tc.brokers, f, m, tc.factor, tc.minInsync)
		}
	}
	if got := kafka.ReplicationOf(config.Kafka{TopicReplicationFactor: 4, TopicMinInsyncReplicas: 3}); got != (kafka.Replication{Factor: 4, MinInsync: 3}) {
		t.Errorf("ReplicationOf = %+v", got)
	}
}

// TestLaneTopicFollowsTheLaneCount: a deployment beyond 16 lanes (consumer §16) creates its lane
// and checkpoint topics with a partition per lane, grows the 16-partition topics of an earlier
// deployment to it, and a lane topic left short fails the verification naming the count.
func TestLaneTopicFollowsTheLaneCount(t *testing.T) {
	c, err := kafka.OpenCluster(config.Kafka{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.Brokers...), kgo.MetadataMinAge(10*time.Millisecond)) // the layout is listed again right after it changes
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	partitions := func(topic string) int {
		t.Helper()
		d, err := kadm.NewClient(cl).ListTopics(ctx, topic)
		if err != nil {
			t.Fatal(err)
		}
		return len(d[topic].Partitions)
	}

	wide := config.DefaultTopics("wide.")
	if err := kafka.EnsureTopicsLanes(ctx, cl, wide, kafka.Replication{}, 64); err != nil {
		t.Fatalf("EnsureTopicsLanes(64): %v", err)
	}
	for _, spec := range kafka.TopicLayoutLanes(wide, 64) {
		if got := partitions(spec.Name); got != int(spec.Partitions) {
			t.Errorf("%s: %d partitions, want %d", spec.Name, got, spec.Partitions)
		}
	}
	if n := partitions(wide.Lanes); n != 64 || partitions(wide.RelayCheckpoints) != 64 {
		t.Errorf("lane topic %d, checkpoints %d partitions, want 64 each", n, partitions(wide.RelayCheckpoints))
	}

	grown := config.DefaultTopics("grown.")
	if err := kafka.EnsureTopics(ctx, cl, grown); err != nil {
		t.Fatal(err)
	}
	err = kafka.VerifyTopicsLanes(ctx, cl, grown, 20)
	if err == nil || !strings.Contains(err.Error(), "needs 20") || !errors.Is(err, kafka.ErrLaneTopicPartitions) {
		t.Fatalf("VerifyTopicsLanes(20) on 16 partitions: %v, want a partition-count error naming 20", err)
	}
	if err := kafka.EnsureTopicsLanes(ctx, cl, grown, kafka.Replication{}, 20); err != nil {
		t.Fatalf("EnsureTopicsLanes(20) over a 16-lane layout: %v", err)
	}
	if a, b := partitions(grown.Lanes), partitions(grown.RelayCheckpoints); a != 20 || b != 20 {
		t.Errorf("grown: lane topic %d, checkpoints %d partitions, want 20 each", a, b)
	}
	if n := partitions(grown.KVEvents); n != 16 {
		t.Errorf("grown: kv events %d partitions, want 16 (not per lane)", n)
	}
}
