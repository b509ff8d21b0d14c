package app_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/app"
	"github.com/ckf-stream/ckf-stream/testenv"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

func checkLayout(t *testing.T, cl *kgo.Client, topics app.Topics) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := app.EnsureTopics(ctx, cl, topics); err != nil {
		t.Fatalf("EnsureTopics: %v", err)
	}
	// A second call on an existing layout is a no-op, not an error.
	if err := app.EnsureTopics(ctx, cl, topics); err != nil {
		t.Fatalf("EnsureTopics again: %v", err)
	}
	details, err := kadm.NewClient(cl).ListTopics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, spec := range app.TopicLayout(topics) {
		if got := len(details[spec.Name].Partitions); got != int(spec.Partitions) {
			t.Errorf("%s: %d partitions, want %d", spec.Name, got, spec.Partitions)
		}
	}
}

// TestEnsureTopicsRealBroker creates the product's topic layout on the real broker.
func TestEnsureTopicsRealBroker(t *testing.T) {
	prefix := testenv.UniqueName(t, "app") + "."
	topics := app.DefaultTopics(prefix)
	cl := testenv.Client(t)
	t.Cleanup(func() {
		var names []string
		for _, s := range app.TopicLayout(topics) {
			names = append(names, s.Name)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = kadm.NewClient(cl).DeleteTopics(ctx, names...)
	})
	checkLayout(t, cl, topics)
}

// TestEmbeddedClusterWhenNoBrokers checks the embedded default: no brokers configured starts an
// in-process broker that serves the same layout.
func TestEmbeddedClusterWhenNoBrokers(t *testing.T) {
	c, err := app.OpenCluster(app.Config{Topics: app.DefaultTopics("")})
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
	checkLayout(t, cl, app.DefaultTopics(""))
}

// TestLaneTopicTooFewPartitions rejects an existing lane topic that cannot hold 16 lanes.
func TestLaneTopicTooFewPartitions(t *testing.T) {
	c, err := app.OpenCluster(app.Config{})
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
	topics := app.DefaultTopics("")
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 4, -1, nil, topics.Lanes); err != nil {
		t.Fatal(err)
	}
	err = app.EnsureTopics(ctx, cl, topics)
	if err == nil || !strings.Contains(err.Error(), "needs 16") {
		t.Fatalf("EnsureTopics with a 4-partition lane topic: %v, want a partition-count error", err)
	}
}

func TestConfigValidateNamesField(t *testing.T) {
	for _, tc := range []struct {
		cfg  app.Config
		want string
	}{
		{app.Config{Brokers: []string{"localhost"}}, "KAFKA_BROKERS"},
		{app.Config{TopicPrefix: "a b"}, "CKF_TOPIC_PREFIX"},
	} {
		if err := tc.cfg.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate(%+v) = %v, want an error naming %s", tc.cfg, err, tc.want)
		}
	}
}
