package workers

import (
	"fmt"
	"time"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/streams"
)

// Defaults of DefaultConfig, and of the process configuration's workers section (app/config),
// which takes them from here.
const (
	// DefaultCheckpointInterval is Config.CheckpointInterval: a restart replays at most about
	// this much of the KV topic after the newest checkpoint.
	DefaultCheckpointInterval = 60 * time.Second
	// DefaultCheckpointChunkBytes is Config.CheckpointChunkBytes: under the default
	// max.message.bytes (1,048,588) with room for the framing.
	DefaultCheckpointChunkBytes = 900_000
	// DefaultLagCommitInterval is Config.LagCommitInterval.
	DefaultLagCommitInterval = 5 * time.Second
	// DefaultCheckpointsTopic is the checkpoint topic's default name (before a topic prefix).
	DefaultCheckpointsTopic = "ckf-worker-checkpoints"
	// DefaultMaxPollRecords is Config.MaxPollRecords.
	DefaultMaxPollRecords = 10_000
)

// Topics names the topics a Replica reads and writes.
type Topics struct {
	// KVEvents is the DC's KV-events topic, the relay's input: every partition is read.
	// Required.
	KVEvents string
	// Checkpoints is the compacted topic of the read model's checkpoints (keyed by DC). ""
	// disables checkpoints: a start then replays the KV topic from its log start.
	Checkpoints string
	// DeadLetter receives the KV records the index rejects and unusable checkpoint records. ""
	// only counts and logs them.
	DeadLetter string
}

// Config configures one replica of a DC's worker-level read model. Start from DefaultConfig.
type Config struct {
	// DC is the DC whose KV events the topic carries; it keys the checkpoints and names the
	// answers.
	DC     ckf.DcID
	Topics Topics
	// CheckpointInterval is the least time between two checkpoints, written only once the replica
	// is ready and something was applied since the last one. 0 never writes (the replica still
	// restores from the checkpoints others write). Default 60 s. Must not be negative.
	CheckpointInterval time.Duration
	// CheckpointChunkBytes is the largest payload of one checkpoint record. Default 900,000; at
	// least 1,024.
	CheckpointChunkBytes int
	// TransactionalID is the checkpoint producer's transactional id. "" derives
	// "ckf-workers-<checkpoints topic>-<DC>": one per DC, so that the replicas of a DC write
	// their checkpoints one at a time (a replica that starts a checkpoint fences the transaction
	// another one has open, which aborts it: committed checkpoints never interleave).
	TransactionalID string
	// LagGroup is the consumer group the replica commits its KV positions into, for lag tools
	// only (nothing restores from it). "" derives "ckf-workers-<KV topic>-<DC>", shared by
	// the DC's replicas.
	LagGroup string
	// LagCommitInterval is the least time between two commits to LagGroup. 0 disables them.
	// Default 5 s.
	LagCommitInterval time.Duration
	// MaxPollRecords bounds one poll of the KV topic. Default 10,000; at least 1.
	MaxPollRecords int
}

// DefaultConfig returns the defaults; the caller sets DC and Topics.
func DefaultConfig() Config {
	return Config{
		CheckpointInterval:   DefaultCheckpointInterval,
		CheckpointChunkBytes: DefaultCheckpointChunkBytes,
		LagCommitInterval:    DefaultLagCommitInterval,
		MaxPollRecords:       DefaultMaxPollRecords,
	}
}

// SettingProblem is one broken rule of a setting: Field is Config's name for it.
type SettingProblem struct {
	Field  string
	Reason string
}

// CheckSettings applies the rules of the settings a deployment chooses, every rule in field
// order (the process configuration reports each under its own path):
//
//	CheckpointInterval    >= 0 (0: this replica writes no checkpoint)
//	CheckpointChunkBytes  >= 1024
//	LagCommitInterval     >= 0 (0: no lag commits)
//	MaxPollRecords        >= 1
func (c Config) CheckSettings() []SettingProblem {
	var out []SettingProblem
	if c.CheckpointInterval < 0 {
		out = append(out, SettingProblem{"CheckpointInterval", fmt.Sprintf("%v is negative", c.CheckpointInterval)})
	}
	if c.CheckpointChunkBytes < 1024 {
		out = append(out, SettingProblem{"CheckpointChunkBytes", fmt.Sprintf("%d is below 1024", c.CheckpointChunkBytes)})
	}
	if c.LagCommitInterval < 0 {
		out = append(out, SettingProblem{"LagCommitInterval", fmt.Sprintf("%v is negative", c.LagCommitInterval)})
	}
	if c.MaxPollRecords < 1 {
		out = append(out, SettingProblem{"MaxPollRecords", fmt.Sprintf("%d is below 1", c.MaxPollRecords)})
	}
	return out
}

// validate is New's check: the settings' rules, then the topics.
func (c Config) validate() error {
	chk := streams.ConfigCheck{Config: "workers"}
	for _, sp := range c.CheckSettings() {
		chk.Fail(sp.Field, "%s", sp.Reason)
	}
	chk.Named("Topics.KVEvents", c.Topics.KVEvents)
	if c.Topics.Checkpoints != "" && c.Topics.Checkpoints == c.Topics.KVEvents {
		chk.Fail("Topics.Checkpoints", "must differ from Topics.KVEvents (%q)", c.Topics.KVEvents)
	}
	return chk.Result()
}

// derive fills the derived names.
func (c Config) derive() Config {
	if c.TransactionalID == "" {
		c.TransactionalID = "ckf-workers-" + c.Topics.Checkpoints + "-" + c.DC.String()
	}
	if c.LagGroup == "" {
		c.LagGroup = "ckf-workers-" + c.Topics.KVEvents + "-" + c.DC.String()
	}
	return c
}

// Validate applies New's rules to c: every setting's (CheckSettings), then the topics. Errors are
// *streams.ConfigError naming the field.
func (c Config) Validate() error { return c.validate() }
