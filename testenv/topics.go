package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Cluster is a Kafka cluster tests talk to: the shared test broker (Default) or a private one
// started by StartBroker (Broker.Cluster), for tests that restart or kill their broker.
type Cluster struct{ seeds []string }

// Default returns the shared test broker, failing the test when none is reachable.
func Default(t testing.TB) *Cluster { return &Cluster{seeds: Brokers(t)} }

// Cluster returns the private broker as a Cluster.
func (b *Broker) Cluster() *Cluster { return &Cluster{seeds: []string{b.addr}} }

// Seeds returns the cluster's seed brokers.
func (c *Cluster) Seeds() []string { return c.seeds }

// Client returns a franz-go client seeded with the test broker, closed when the test ends.
func Client(t testing.TB, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	return Default(t).Client(t, opts...)
}

// Admin returns an admin client on the test broker, closed when the test ends.
func Admin(t testing.TB) *kadm.Client { t.Helper(); return Default(t).Admin(t) }

// NewTopic creates a uniquely named topic on the test broker; see (*Cluster).NewTopic.
func NewTopic(t testing.TB, partitions int32, opts ...TopicOption) string {
	t.Helper()
	return Default(t).NewTopic(t, partitions, opts...)
}

// Client returns a franz-go client seeded with c, closed when the test ends.
func (c *Cluster) Client(t testing.TB, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(c.seeds...)}, opts...)...)
	if err != nil {
		t.Fatalf("kafka client: %v", err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// Admin returns an admin client on c, closed when the test ends.
func (c *Cluster) Admin(t testing.TB) *kadm.Client {
	t.Helper()
	return kadm.NewClient(c.Client(t))
}

var unsafeTopicChars = regexp.MustCompile(`[^a-zA-Z0-9._-]+`)

// UniqueName returns prefix-<test name>-<random hex>, restricted to Kafka's legal topic and group
// characters and to 200 bytes, so parallel tests and packages never share a name.
func UniqueName(t testing.TB, prefix string) string {
	t.Helper()
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatalf("random name: %v", err)
	}
	base := unsafeTopicChars.ReplaceAllString(t.Name(), "_")
	if len(base) > 120 {
		base = base[:120]
	}
	return strings.Trim(prefix+"-"+base+"-"+hex.EncodeToString(b[:]), "-")
}

// TopicOption adjusts a topic that NewTopic creates.
type TopicOption func(*topicSpec)

type topicSpec struct {
	name     string
	configs  map[string]*string
	replicas int16
}

// TopicName names the topic instead of a unique name, for a test whose topic name must match a
// pattern (a reply topic prefix); the test keeps it unique.
func TopicName(name string) TopicOption { return func(s *topicSpec) { s.name = name } }

// TopicReplicas sets the topic's replication factor (default 1), for a multi-node cluster.
func TopicReplicas(n int16) TopicOption { return func(s *topicSpec) { s.replicas = n } }

// TopicConfig sets one topic-level config (for example "cleanup.policy" = "compact").
func TopicConfig(key, value string) TopicOption {
	return func(s *topicSpec) { s.configs[key] = kadm.StringPtr(value) }
}

// NewTopic creates a uniquely named topic (unless TopicName names it) with the given partition
// count (replication factor 1 unless TopicReplicas says otherwise) and deletes it when the test
// ends. It waits until every partition has a leader, so a produce
// right after it does not race topic creation.
func (c *Cluster) NewTopic(t testing.TB, partitions int32, opts ...TopicOption) string {
	t.Helper()
	spec := topicSpec{configs: map[string]*string{}, replicas: 1}
	for _, o := range opts {
		o(&spec)
	}
	name := spec.name
	if name == "" {
		name = UniqueName(t, "t")
	}
	adm := c.Admin(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := adm.CreateTopic(ctx, partitions, spec.replicas, spec.configs, name)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		t.Fatalf("create topic %s (%d partitions): %v", name, partitions, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := adm.DeleteTopics(ctx, name); err != nil {
			t.Logf("delete topic %s: %v", name, err)
		}
	})
	if err := waitLeaders(ctx, adm, name, int(partitions)); err != nil {
		t.Fatalf("topic %s: %v", name, err)
	}
	return name
}

func waitLeaders(ctx context.Context, adm *kadm.Client, topic string, partitions int) error {
	for {
		md, err := adm.Metadata(ctx, topic)
		if err == nil {
			if td, ok := md.Topics[topic]; ok && td.Err == nil && len(td.Partitions) == partitions {
				ready := true
				for _, p := range td.Partitions {
					if p.Err != nil || p.Leader < 0 {
						ready = false
					}
				}
				if ready {
					return nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("partitions without a leader after waiting: %w (last metadata error: %v)", ctx.Err(), err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
