package streamtest

import (
	"context"
	"fmt"
	"testing"

	"github.com/ckf-stream/ckf-stream/testenv"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Kafka is where one test's topics, clients and services live: an in-process kfake cluster
// (NewFakeKafka), for the logic of a consumer group member, a producer or a reader, or the shared
// test broker (BrokerKafka), for what only a real broker shows (the last stable offset under
// read_committed, the broker's group timings, real latencies). Tests written against Kafka run
// on either by changing the constructor.
type Kafka struct {
	seeds []string
	// Fake is the kfake cluster, nil on the shared broker: tests inject faults through it.
	Fake *kfake.Cluster
}

// NewFakeKafka starts a one-broker kfake cluster for the test (closed when it ends). Topic
// auto-creation is off, as on the test broker.
func NewFakeKafka(t testing.TB, opts ...kfake.Opt) *Kafka {
	t.Helper()
	c, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(1)}, opts...)...)
	if err != nil {
		t.Fatalf("kfake cluster: %v", err)
	}
	t.Cleanup(c.Close)
	return &Kafka{seeds: c.ListenAddrs(), Fake: c}
}

// BrokerKafka is the shared test broker, failing the test when none is reachable.
func BrokerKafka(t testing.TB) *Kafka {
	t.Helper()
	return &Kafka{seeds: testenv.Brokers(t)}
}

// Seeds returns the seed brokers.
func (k *Kafka) Seeds() []string { return k.seeds }

// Client returns a client seeded with k, closed when the test ends.
func (k *Kafka) Client(t testing.TB, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(k.seeds...)}, opts...)...)
	if err != nil {
		t.Fatalf("kafka client: %v", err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// Admin returns an admin client on k, closed when the test ends.
func (k *Kafka) Admin(t testing.TB) *kadm.Client {
	t.Helper()
	return kadm.NewClient(k.Client(t))
}

// NewTopic creates a uniquely named topic with the given partition count; see CreateTopic.
func (k *Kafka) NewTopic(t testing.TB, partitions int32) string {
	t.Helper()
	return k.CreateTopic(t, testenv.UniqueName(t, "t"), partitions)
}

// CreateTopic creates the topic name (replication factor 1), deletes it when the test ends,
// and waits until every partition has a leader, so a produce right after it does not race the
// topic's creation.
func (k *Kafka) CreateTopic(t testing.TB, name string, partitions int32) string {
	t.Helper()
	return k.CreateTopicWith(t, name, partitions, nil)
}

// CreateTopicWith is CreateTopic with topic-level configs (for example "cleanup.policy").
func (k *Kafka) CreateTopicWith(t testing.TB, name string, partitions int32, configs map[string]*string) string {
	t.Helper()
	adm := k.Admin(t)
	ctx, cancel := context.WithTimeout(context.Background(), Converge)
	defer cancel()
	resp, err := adm.CreateTopic(ctx, partitions, 1, configs, name)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		t.Fatalf("create topic %s (%d partitions): %v", name, partitions, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), Converge)
		defer cancel()
		_, _ = adm.DeleteTopics(ctx, name)
	})
	var last error
	testenv.WaitUntil(t, Converge, "topic "+name+" has a leader on every partition", func() bool {
		md, err := adm.Metadata(ctx, name)
		if last = err; err != nil {
			return false
		}
		td, ok := md.Topics[name]
		if !ok || td.Err != nil || len(td.Partitions) != int(partitions) {
			return false
		}
		for _, p := range td.Partitions {
			if p.Leader < 0 || p.Err != nil {
				return false
			}
		}
		return true
	}, func() string { return fmt.Sprintf("last metadata error %v", last) })
	return name
}
