package query

import (
	"fmt"
	"slices"
	"time"

	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/ckf-stream/ckf-stream/streams"
)

// QueryConfig configures a QueryService. Start from DefaultQueryConfig: NewQueryService takes
// every field as it is (see the configuration style in streams/config.go); only the empty
// topic names are derived, from the codec.
type QueryConfig struct {
	// RequestTopic is the topic of query requests. "" (the default) derives the codec's
	// QueryRequest topic (ckf-queries unless the codec was configured otherwise).
	RequestTopic string
	// ReplyTopic receives every reply whose request names no reply topic. "" (the default)
	// derives the codec's QueryReply topic (ckf-query-replies).
	ReplyTopic string
	// ReplyTopicPrefixes lists the prefixes a request's reply_topic may start with; a request may
	// always name ReplyTopic itself. Anything else is refused (INVALID_REQUEST reply on
	// ReplyTopic, plus a dead letter), so a request cannot make the indexer write into an
	// arbitrary topic it can reach (the lane topic, say). Default: none. An empty prefix would
	// allow every topic and is an error.
	ReplyTopicPrefixes []string
	// DeadLetterTopic receives a copy of every request that could not be answered normally.
	// "" (the default) derives the codec's DeadLetter topic.
	DeadLetterTopic string
	// Group is the consumer group that replicas join to share the request partitions. Kafka
	// property: group.id. Default "ckf-indexer-queries" (DefaultQueryGroup); required.
	Group string
	// MaxBatchRecords bounds the requests taken by one poll, answered and committed as one batch,
	// in [1, 65536] (MaxQueryBatchRecords). Larger batches amortise the produce round trip and
	// the commit; smaller ones bound the work redone after a failure. Default 256
	// (DefaultQueryBatchRecords).
	MaxBatchRecords int
	// ReplyLinger is the producer linger of replies (Kafka property linger.ms). The service
	// flushes at the end of every batch, which releases lingering replies at once, so the linger
	// only decides how the replies of one batch coalesce into produce requests; it never delays
	// a reply beyond the end of its batch. Default 1 ms; >= 0; 0 sends every reply at once,
	// without lingering.
	ReplyLinger time.Duration
	// ReplyTimeout bounds the delivery of one reply or dead letter, franz-go's retries included
	// (Kafka property delivery.timeout.ms); an output still unacknowledged by then counts as
	// failed (see QueryService for what a failure does). Keep it below the group's rebalance
	// timeout (60 s), since a batch holds off rebalances while it waits. Default 30 s; > 0.
	ReplyTimeout time.Duration
	// CommitTimeout bounds one offset commit and the final leave of the group. Default 10 s; > 0.
	CommitTimeout time.Duration
	// SessionTimeout is how long the group waits for a member's heartbeat before it declares the
	// member dead and moves its partitions (Kafka property session.timeout.ms): the delay of the
	// requests on the partitions of a replica that died without leaving (a graceful stop leaves
	// at once). Default 6 s (DefaultQuerySessionTimeout), the smallest the broker accepts by
	// default (group.min.session.timeout.ms); franz-go's own default is 45 s. Shorter is refused
	// by such a broker; longer rides out longer pauses (a GC, a stalled host) without a rebalance.
	// At least 1 s (MinQuerySessionTimeout).
	SessionTimeout time.Duration
	// HeartbeatInterval is how often a member heartbeats (heartbeat.interval.ms), which is also
	// how soon it learns of a rebalance. Default 1 s; > 0 and below SessionTimeout.
	HeartbeatInterval time.Duration
	// Component names this service in dead letters. Default "indexer"; required.
	Component string
}

// Query service defaults and limits that the process configuration (app/config: indexer.query_group,
// indexer.query_batch_size, indexer.query_session_timeout) takes as its own, so that each has this
// one home.
const (
	// DefaultQueryGroup is QueryConfig.Group's default.
	DefaultQueryGroup = "ckf-indexer-queries"
	// DefaultQueryBatchRecords is QueryConfig.MaxBatchRecords's default.
	DefaultQueryBatchRecords = 256
	// MaxQueryBatchRecords is the largest QueryConfig.MaxBatchRecords accepted.
	MaxQueryBatchRecords = 1 << 16
	// DefaultQuerySessionTimeout is QueryConfig.SessionTimeout's default: the broker's default
	// group.min.session.timeout.ms.
	DefaultQuerySessionTimeout = 6 * time.Second
	// MinQuerySessionTimeout is the shortest QueryConfig.SessionTimeout accepted: a member
	// heartbeats several times per session, and no broker's group.min.session.timeout.ms
	// (6 s by default) is meant to go below it.
	MinQuerySessionTimeout = time.Second
	// DefaultQueryHeartbeatInterval is QueryConfig.HeartbeatInterval's default.
	DefaultQueryHeartbeatInterval = time.Second
)

const (
	fetchErrorBackoff      = 250 * time.Millisecond
	maxReplyTopicNameBytes = 249 // Kafka's topic name limit
)

// DefaultQueryConfig returns the query service's defaults: topics derived from the codec, no
// extra reply topic prefixes, group DefaultQueryGroup, batches of at most 256 requests
// (DefaultQueryBatchRecords), replies lingering 1 ms and delivered within 30 s, commits within
// 10 s, a 6 s session timeout with 1 s heartbeats, dead letters signed "indexer".
func DefaultQueryConfig() QueryConfig {
	return QueryConfig{
		Group:             DefaultQueryGroup,
		MaxBatchRecords:   DefaultQueryBatchRecords,
		ReplyLinger:       time.Millisecond,
		ReplyTimeout:      30 * time.Second,
		CommitTimeout:     10 * time.Second,
		SessionTimeout:    DefaultQuerySessionTimeout,
		HeartbeatInterval: DefaultQueryHeartbeatInterval,
		Component:         "indexer",
	}
}

// withDerived fills the empty topic names from the codec.
func (c QueryConfig) withDerived(codec *schemas.Codec) QueryConfig {
	if c.RequestTopic == "" {
		c.RequestTopic = codec.Topic(schemas.TypeQueryRequest)
	}
	if c.ReplyTopic == "" {
		c.ReplyTopic = codec.Topic(schemas.TypeQueryReply)
	}
	if c.DeadLetterTopic == "" {
		c.DeadLetterTopic = codec.Topic(schemas.TypeDeadLetter)
	}
	c.ReplyTopicPrefixes = slices.Clone(c.ReplyTopicPrefixes)
	return c
}

// validate checks every field in order and returns the first violation as a *ConfigError.
func (c QueryConfig) validate() error { return c.check().Result() }

// CheckSettings returns every rule of c that is broken, in field order, each a *ConfigError
// naming its field ("SessionTimeout"): the rules NewQueryService holds a configuration to, for a
// process configuration to report under its own setting names (app/config's indexer section).
// Topic names left empty are not judged (NewQueryService derives them).
func (c QueryConfig) CheckSettings() []*streams.ConfigError { return c.check().Problems() }

func (c QueryConfig) check() *streams.ConfigCheck {
	k := &streams.ConfigCheck{Config: "query service"}
	for i, p := range c.ReplyTopicPrefixes {
		if p == "" {
			k.Fail(fmt.Sprintf("ReplyTopicPrefixes[%d]", i), "is empty, which would allow every topic")
		}
	}
	k.Named("Group", c.Group)
	if c.MaxBatchRecords < 1 || c.MaxBatchRecords > MaxQueryBatchRecords {
		k.Fail("MaxBatchRecords", "must be in [1, %d], got %d", MaxQueryBatchRecords, c.MaxBatchRecords)
	}
	k.NonNegative("ReplyLinger", c.ReplyLinger)
	k.Positive("ReplyTimeout", c.ReplyTimeout)
	k.Positive("CommitTimeout", c.CommitTimeout)
	if c.SessionTimeout < MinQuerySessionTimeout {
		k.Fail("SessionTimeout", "must be at least %v, got %v", MinQuerySessionTimeout, c.SessionTimeout)
	}
	k.Positive("HeartbeatInterval", c.HeartbeatInterval)
	if c.HeartbeatInterval >= c.SessionTimeout && c.SessionTimeout > 0 {
		k.Fail("HeartbeatInterval", "must be below SessionTimeout (%v), got %v", c.SessionTimeout, c.HeartbeatInterval)
	}
	k.Named("Component", c.Component)
	return k
}
