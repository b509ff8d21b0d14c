package app

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Cluster is the Kafka cluster a process talks to: the configured one, or an embedded
// in-process broker when none is configured.
type Cluster struct {
	Brokers  []string
	Embedded bool
	fake     *kfake.Cluster
}

// OpenCluster returns the configured cluster, or starts the embedded broker when cfg names none.
func OpenCluster(cfg Config) (*Cluster, error) {
	if len(cfg.Brokers) > 0 {
		return &Cluster{Brokers: cfg.Brokers}, nil
	}
	fake, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		return nil, fmt.Errorf("embedded broker: %w", err)
	}
	return &Cluster{Brokers: fake.ListenAddrs(), Embedded: true, fake: fake}, nil
}

// Close stops the embedded broker, if any.
func (c *Cluster) Close() {
	if c.fake != nil {
		c.fake.Close()
	}
}

// Describe says which cluster this is, for start-up logs.
func (c *Cluster) Describe() string {
	if c.Embedded {
		return "embedded in-process broker (franz-go kfake; nothing persists) at " + strings.Join(c.Brokers, ",")
	}
	return "Kafka cluster at " + strings.Join(c.Brokers, ",")
}

// TopicSpec is one topic of the product's layout.
type TopicSpec struct {
	Name       string
	Partitions int32
	Configs    map[string]*string
}

// TopicLayout returns every topic the product uses with its partition count and configs.
func TopicLayout(t Topics) []TopicSpec {
	return []TopicSpec{
		{Name: t.KVEvents, Partitions: LaneCount},
		{Name: t.Lanes, Partitions: LaneCount},
		{Name: t.Queries, Partitions: 4},
		{Name: t.QueryReplies, Partitions: 4},
		{Name: t.LaneEvents, Partitions: LaneCount},
		{Name: t.Control, Partitions: 1},
		{Name: t.DeadLetter, Partitions: 1},
	}
}

// EnsureTopics creates every topic of the layout that does not exist yet. Existing topics are
// left as they are; an existing lane topic with fewer than LaneCount partitions is an error,
// since partition p must be physical lane p.
func EnsureTopics(ctx context.Context, cl *kgo.Client, t Topics) error {
	adm := kadm.NewClient(cl)
	for _, spec := range TopicLayout(t) {
		resp, err := adm.CreateTopic(ctx, spec.Partitions, -1, spec.Configs, spec.Name)
		if err == nil {
			err = resp.Err
		}
		if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
			return fmt.Errorf("create topic %s: %w", spec.Name, err)
		}
	}
	// Creation is asynchronous on a real cluster: wait until every partition has a leader.
	var details kadm.TopicDetails
	for {
		var err error
		details, err = adm.ListTopics(ctx)
		if err == nil && allLed(details, TopicLayout(t)) {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("topics not ready: %w (last error: %v)", ctx.Err(), err)
		case <-time.After(100 * time.Millisecond):
		}
	}
	if d := details[t.Lanes]; len(d.Partitions) < LaneCount {
		return fmt.Errorf("topic %s has %d partitions; the lane topic needs %d (one per physical lane)",
			t.Lanes, len(d.Partitions), LaneCount)
	}
	return nil
}

func allLed(details kadm.TopicDetails, layout []TopicSpec) bool {
	for _, spec := range layout {
		d, ok := details[spec.Name]
		if !ok || d.Err != nil || len(d.Partitions) == 0 {
			return false
		}
		for _, p := range d.Partitions {
			if p.Err != nil || p.Leader < 0 {
				return false
			}
		}
	}
	return true
}
