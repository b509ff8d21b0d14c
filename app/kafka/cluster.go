package kafka

import (
	"fmt"
	"strings"

	"github.com/ckf-stream/ckf-stream/app/config"
	"github.com/twmb/franz-go/pkg/kfake"
)

// Cluster is the Kafka cluster a process talks to: the configured one, or an embedded
// in-process broker when none is configured.
type Cluster struct {
	// Brokers are the seed brokers: the configured ones, or the embedded broker's address.
	Brokers []string
	// Embedded is true for the in-process broker.
	Embedded bool
	fake     *kfake.Cluster
}

// OpenCluster returns the configured cluster, or starts the embedded broker (franz-go's kfake,
// one broker on a free loopback port; nothing persists) when cfg names no broker. Close it.
func OpenCluster(cfg config.Kafka) (*Cluster, error) {
	if len(cfg.Brokers) > 0 {
		return &Cluster{Brokers: append([]string(nil), cfg.Brokers...)}, nil
	}
	fake, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		return nil, fmt.Errorf("kafka: embedded broker: %w", err)
	}
	return &Cluster{Brokers: fake.ListenAddrs(), Embedded: true, fake: fake}, nil
}

// Close stops the embedded broker, if any; a configured cluster has nothing to close.
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
