package config

import (
	"time"

	"github.com/ckf-stream/ckf-stream/streams/workers"
)

// Workers configures one replica of a DC's worker stage (processor workers): the worker-level
// read model of the DC whose KV events topics.kv_events carries (streams/workers/workers.md).
// Its rules are the library's (workers.Config.CheckSettings), reported under this section's
// paths: one setting, one rule.
type Workers struct {
	// DcID is the DC whose KV-events topic (topics.kv_events) the replica reads; it keys the
	// checkpoints and names the answers. Default 0.
	DcID uint64 `yaml:"dc_id"`
	// CheckpointTopic is the compacted topic of the worker stage's checkpoints, keyed by DC,
	// shared by every DC. Empty (the default) is topic_prefix + "ckf-worker-checkpoints".
	CheckpointTopic string `yaml:"checkpoint_topic"`
	// CheckpointInterval is the least time between two checkpoints of a replica (written once
	// ready and only when events were applied since the last one); a restart replays about this
	// much of the KV topic. 0 writes none (the replica still restores from the others'). Default
	// 60s (workers.DefaultCheckpointInterval).
	CheckpointInterval time.Duration `yaml:"checkpoint_interval"`
	// LagCommitInterval is how often the replica commits its KV positions into the lag group
	// ckf-workers-<KV topic>-<DC> (visibility only). 0 disables. Default 5s.
	LagCommitInterval time.Duration `yaml:"lag_commit_interval"`
	// ReplyTopicPrefixes lists the prefixes a worker query's reply_topic may start with (a router's
	// own reply topic); a request may always name topics.worker_query_replies. Anything else is
	// refused with an INVALID_REQUEST reply and a dead letter. A prefix that starts another topic
	// of the product is an error. Default none.
	ReplyTopicPrefixes []string `yaml:"reply_topic_prefixes"`
}

// workersSettingPaths maps the library's field names to this section's paths.
var workersSettingPaths = map[string]string{
	"CheckpointInterval": "workers.checkpoint_interval",
	"LagCommitInterval":  "workers.lag_commit_interval",
}

// WorkersSettingPath returns the path of the library's setting field in this configuration,
// "workers." + field when the section does not expose it.
func WorkersSettingPath(field string) string {
	if p, ok := workersSettingPaths[field]; ok {
		return p
	}
	return "workers." + field
}

// DefaultWorkersCheckpointTopic is Workers.CheckpointTopic's default name (before topic_prefix).
const DefaultWorkersCheckpointTopic = workers.DefaultCheckpointsTopic

// StreamsSettings returns the library's defaults with this section's settings; the topics are
// the caller's (app/workers adds them).
func (w Workers) StreamsSettings() workers.Config {
	c := workers.DefaultConfig()
	c.CheckpointInterval = w.CheckpointInterval
	c.LagCommitInterval = w.LagCommitInterval
	return c
}

func (w Workers) validate(t Topics, p *problems) {
	for _, sp := range w.StreamsSettings().CheckSettings() {
		p.add(WorkersSettingPath(sp.Field), "%s", sp.Reason)
	}
	checkReplyTopicPrefixes("workers.reply_topic_prefixes", w.ReplyTopicPrefixes, t, p,
		struct{ field, name string }{"topics.query_replies", t.QueryReplies}, struct{ field, name string }{"workers.checkpoint_topic", w.CheckpointTopic})
	switch {
	case w.CheckpointTopic == "" || !legalTopicChars(w.CheckpointTopic) || len(w.CheckpointTopic) > 249:
		p.add("workers.checkpoint_topic", "%q is not a valid topic name", w.CheckpointTopic)
	case w.CheckpointTopic == t.KVEvents || w.CheckpointTopic == t.RelayCheckpoints:
		p.add("workers.checkpoint_topic", "%q is also the name of another topic", w.CheckpointTopic)
	}
}

func defaultWorkers() Workers {
	return Workers{CheckpointInterval: workers.DefaultCheckpointInterval, LagCommitInterval: workers.DefaultLagCommitInterval}
}
