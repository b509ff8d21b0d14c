// Package app wires ckf-stream's processes: configuration, the Kafka connection, and (in later
// stages) logging, metrics, HTTP and lifecycle. It holds no algorithm and no Kafka protocol logic.
package app

import (
	"fmt"
	"os"
	"strings"
)

// LaneCount is the number of physical lanes: one partition of the lane topic per DC pool.
const LaneCount = 16

// Topics names every topic the product uses. Each name is Prefix + the default below unless
// overridden.
type Topics struct {
	KVEvents     string // KV events from inference engines, keyed by worker
	Lanes        string // CKF snapshots and deltas; partition p = physical lane p
	Queries      string // prefix-match query requests
	QueryReplies string // query replies, keyed by the request's correlation key
	LaneEvents   string // lane state changes and progress, keyed by lane
	Control      string // snapshot requests from indexers to relays
	DeadLetter   string // records rejected with their reason
}

// DefaultTopics returns the default topic names with prefix prepended.
func DefaultTopics(prefix string) Topics {
	return Topics{
		KVEvents:     prefix + "kv-events",
		Lanes:        prefix + "ckf-lanes",
		Queries:      prefix + "ckf-queries",
		QueryReplies: prefix + "ckf-query-replies",
		LaneEvents:   prefix + "ckf-lane-events",
		Control:      prefix + "ckf-control",
		DeadLetter:   prefix + "ckf-dead-letter",
	}
}

// Config is the process configuration. Load fills it from the environment.
type Config struct {
	// Brokers are the Kafka seed brokers (KAFKA_BROKERS, comma-separated). Empty means: start
	// the embedded in-process broker (franz-go's kfake), for demos on a machine with nothing else.
	Brokers []string
	// TopicPrefix is prepended to every default topic name (CKF_TOPIC_PREFIX).
	TopicPrefix string
	Topics      Topics
}

// Load reads the configuration from the environment and validates it.
func Load() (Config, error) {
	cfg := Config{TopicPrefix: os.Getenv("CKF_TOPIC_PREFIX")}
	for _, b := range strings.Split(os.Getenv("KAFKA_BROKERS"), ",") {
		if b = strings.TrimSpace(b); b != "" {
			cfg.Brokers = append(cfg.Brokers, b)
		}
	}
	cfg.Topics = DefaultTopics(cfg.TopicPrefix)
	return cfg, cfg.Validate()
}

// Validate reports the first invalid field by name.
func (c Config) Validate() error {
	for _, b := range c.Brokers {
		if !strings.Contains(b, ":") {
			return fmt.Errorf("config: KAFKA_BROKERS: %q is not host:port", b)
		}
	}
	if strings.ContainsAny(c.TopicPrefix, " /\\") {
		return fmt.Errorf("config: CKF_TOPIC_PREFIX: %q contains characters Kafka topic names cannot hold", c.TopicPrefix)
	}
	return nil
}
