package kafka

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"time"

	"github.com/ckf-stream/ckf-stream/app/config"
	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TopicSpec is one topic of the product's layout.
type TopicSpec struct {
	Name       string
	Partitions int32
	Configs    map[string]*string
}

// Topic retention of the layout (streams/relay/relay.md, "Retention"). Every topic the processes
// create has a finite bound; the relays no longer need the KV events of all time, only those
// since their last checkpoint.
const (
	// KVEventsRetention bounds the KV-events topic by time: a relay restarts from its newest
	// checkpoint (every 30 s by default) and replays the events since, so the topic must keep
	// at least the checkpoint interval plus the longest time a relay may stay down; 7 days
	// leaves a week to repair one.
	KVEventsRetention = 7 * 24 * time.Hour
	// LanesRetention keeps a lane's latest snapshot: busy lanes write one every minute or 1,000
	// deltas, idle ones every hour (relay.snapshot_idle_interval).
	LanesRetention = 24 * time.Hour
	// CheckpointRetentionBytes bounds each relay's checkpoint partition by size, not time, so a
	// relay that stays down keeps its checkpoints: 1 GiB in segments of 128 MiB keeps the newest
	// checkpoints (30 MB at 1M resident blocks) whatever their age. Keep it above three
	// checkpoints of the largest DC.
	CheckpointRetentionBytes = 1 << 30
	checkpointSegmentBytes   = 128 << 20
	// ShortRetention is for records read within seconds (queries, replies, control requests).
	ShortRetention = time.Hour
	// EventRetention is for records operators read later (lane events, dead letters).
	EventRetention = 7 * 24 * time.Hour
)

func retention(d time.Duration) map[string]*string {
	return map[string]*string{"cleanup.policy": kadm.StringPtr("delete"), "retention.ms": kadm.StringPtr(strconv.FormatInt(d.Milliseconds(), 10))}
}

// TopicLayout returns every topic the product uses with its partition count and configs, for a
// deployment of at most 16 lanes (TopicLayoutLanes with ckf.LaneCount).
func TopicLayout(t config.Topics) []TopicSpec {
	return TopicLayoutLanes(t, ckf.LaneCount)
}

// TopicLayoutLanes is TopicLayout for a deployment whose lane topic needs lanes partitions
// (config.Indexer.LanePartitions; consumer §16): the lane topic and the relays' checkpoint topic,
// where partition p is lane p, get max(lanes, 16) partitions; every other topic is as
// TopicLayout has it.
func TopicLayoutLanes(t config.Topics, lanes int) []TopicSpec {
	perLane := int32(max(lanes, ckf.LaneCount))
	return []TopicSpec{
		{Name: t.KVEvents, Partitions: ckf.LaneCount, Configs: retention(KVEventsRetention)},
		{Name: t.Lanes, Partitions: perLane, Configs: retention(LanesRetention)},
		{Name: t.Queries, Partitions: 4, Configs: retention(ShortRetention)},
		{Name: t.QueryReplies, Partitions: 4, Configs: retention(ShortRetention)},
		// Every DC's worker stage reads every partition in its own group (streams/workers).
		{Name: t.WorkerQueries, Partitions: 4, Configs: retention(ShortRetention)},
		{Name: t.WorkerQueryReplies, Partitions: 4, Configs: retention(ShortRetention)},
		{Name: t.LaneEvents, Partitions: ckf.LaneCount, Configs: retention(EventRetention)},
		{Name: t.Control, Partitions: 1, Configs: retention(ShortRetention)},
		{Name: t.DeadLetter, Partitions: 1, Configs: retention(EventRetention)},
		// One live record per lane; compaction keeps the latest.
		{Name: t.SnapshotIndex, Partitions: 1, Configs: map[string]*string{"cleanup.policy": kadm.StringPtr("compact")}},
		// Partition p is lane p's relay.
		{Name: t.RelayCheckpoints, Partitions: perLane, Configs: map[string]*string{
			"cleanup.policy": kadm.StringPtr("delete"), "retention.ms": kadm.StringPtr("-1"),
			"retention.bytes": kadm.StringPtr(strconv.Itoa(CheckpointRetentionBytes)),
			"segment.bytes":   kadm.StringPtr(strconv.Itoa(checkpointSegmentBytes)),
		}},
	}
}

// ErrLaneTopicPartitions is returned (wrapped) when the lane topic exists with fewer partitions
// than the deployment has lanes (at least ckf.LaneCount): partition p must be physical lane p, so
// such a topic cannot serve.
var ErrLaneTopicPartitions = errors.New("lane topic has too few partitions")

// Replication is how the topics a process creates are replicated: kafka.topic_replication_factor
// and kafka.topic_min_insync_replicas, where 0 leaves the choice to ResolveReplication.
type Replication struct {
	Factor    int
	MinInsync int
}

// ReplicationOf returns the replication settings of a Kafka configuration.
func ReplicationOf(k config.Kafka) Replication {
	return Replication{Factor: k.TopicReplicationFactor, MinInsync: k.TopicMinInsyncReplicas}
}

// ResolveReplication turns r into the replication factor to request (-1: the broker's
// default.replication.factor) and the min.insync.replicas to set ("" : the broker's), given the
// number of brokers the cluster lists. A factor of 0 becomes config.ReplicatedTopicReplicas on a
// cluster of at least that many brokers and the broker's default otherwise; a min.insync of 0
// becomes config.ReplicatedTopicMinInsync when the factor is at least
// config.ReplicatedTopicReplicas, and the broker's default otherwise.
func ResolveReplication(r Replication, brokers int) (factor int16, minInsync string) {
	factor = -1
	switch {
	case r.Factor > 0:
		factor = int16(r.Factor)
	case brokers >= config.ReplicatedTopicReplicas:
		factor = config.ReplicatedTopicReplicas
	}
	switch {
	case r.MinInsync > 0:
		minInsync = strconv.Itoa(r.MinInsync)
	case factor >= config.ReplicatedTopicReplicas:
		minInsync = strconv.Itoa(config.ReplicatedTopicMinInsync)
	}
	return factor, minInsync
}

// ReplicationFor resolves r (ResolveReplication) against the number of brokers the cluster that
// adm reaches lists; it asks for the metadata only when r leaves a choice to the cluster.
func ReplicationFor(ctx context.Context, adm *kadm.Client, r Replication) (factor int16, minInsync string, err error) {
	brokers := 0
	if r.Factor == 0 || r.MinInsync == 0 {
		md, err := adm.BrokerMetadata(ctx)
		if err != nil {
			return 0, "", fmt.Errorf("broker metadata (to choose the topics' replication): %w", err)
		}
		brokers = len(md.Brokers)
	}
	factor, minInsync = ResolveReplication(r, brokers)
	return factor, minInsync, nil
}

// WithMinInsync returns configs with min.insync.replicas set to minInsync, as a copy; configs
// itself when minInsync is "" (the broker's default).
func WithMinInsync(configs map[string]*string, minInsync string) map[string]*string {
	if minInsync == "" {
		return configs
	}
	out := maps.Clone(configs)
	if out == nil {
		out = map[string]*string{}
	}
	out["min.insync.replicas"] = kadm.StringPtr(minInsync)
	return out
}

// EnsureTopics creates every topic of the layout that does not exist yet, replicated as
// ResolveReplication decides for a zero Replication; see EnsureTopicsReplicated.
func EnsureTopics(ctx context.Context, cl *kgo.Client, t config.Topics) error {
	return EnsureTopicsReplicated(ctx, cl, t, Replication{})
}

// EnsureTopicsReplicated creates every topic of the layout that does not exist yet, with the
// replication factor and min.insync.replicas that ResolveReplication gives for r and the number
// of brokers the cluster's metadata lists. Existing topics are left as they are (their
// replication included); an existing lane topic with fewer than ckf.LaneCount partitions is an
// error, since partition p must be physical lane p.
func EnsureTopicsReplicated(ctx context.Context, cl *kgo.Client, t config.Topics, r Replication) error {
	return EnsureTopicsLanes(ctx, cl, t, r, ckf.LaneCount)
}

// EnsureTopicsLanes is EnsureTopicsReplicated for the layout of TopicLayoutLanes(t, lanes): an
// existing lane topic or relay checkpoint topic with fewer partitions than that layout's is grown
// to it (partition p is lane p, so the existing lanes keep their partitions), and the lane topic
// must then have them.
func EnsureTopicsLanes(ctx context.Context, cl *kgo.Client, t config.Topics, r Replication, lanes int) error {
	adm := kadm.NewClient(cl)
	factor, minInsync, err := ReplicationFor(ctx, adm, r)
	if err != nil {
		return err
	}
	layout := TopicLayoutLanes(t, lanes)
	for _, spec := range layout {
		resp, err := adm.CreateTopic(ctx, spec.Partitions, factor, WithMinInsync(spec.Configs, minInsync), spec.Name)
		if err == nil {
			err = resp.Err
		}
		if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
			return fmt.Errorf("create topic %s: %w", spec.Name, err)
		}
	}
	if lanes > ckf.LaneCount {
		if err := growPerLaneTopics(ctx, adm, layout, t); err != nil {
			return err
		}
	}
	return VerifyTopicsLanes(ctx, cl, t, lanes)
}

// growPerLaneTopics grows the lane topic and the relays' checkpoint topic to their partitions of
// layout when they exist with fewer (a deployment that went beyond 16 lanes).
func growPerLaneTopics(ctx context.Context, adm *kadm.Client, layout []TopicSpec, t config.Topics) error {
	details, err := adm.ListTopics(ctx, t.Lanes, t.RelayCheckpoints)
	if err != nil {
		return fmt.Errorf("list topics %s, %s: %w", t.Lanes, t.RelayCheckpoints, err)
	}
	for _, spec := range layout {
		if spec.Name != t.Lanes && spec.Name != t.RelayCheckpoints {
			continue
		}
		d, ok := details[spec.Name]
		if !ok || d.Err != nil || len(d.Partitions) >= int(spec.Partitions) {
			continue // not listed yet: VerifyTopicsLanes waits for it and checks it
		}
		resp, err := adm.UpdatePartitions(ctx, int(spec.Partitions), spec.Name)
		if err == nil {
			err = resp.Error()
		}
		if err != nil {
			return fmt.Errorf("grow topic %s from %d to %d partitions (one per lane): %w", spec.Name, len(d.Partitions), spec.Partitions, err)
		}
	}
	return nil
}

// VerifyTopics waits until every topic of the layout exists with a leader for each partition,
// and checks that the lane topic has ckf.LaneCount partitions. It creates nothing. Topic
// creation is asynchronous on a real cluster, so a topic that was just created may take a moment
// to appear; VerifyTopics retries until ctx ends.
func VerifyTopics(ctx context.Context, cl *kgo.Client, t config.Topics) error {
	return VerifyTopicsLanes(ctx, cl, t, ckf.LaneCount)
}

// VerifyTopicsLanes is VerifyTopics for the layout of TopicLayoutLanes(t, lanes): the lane topic
// must have a partition per lane, and at least ckf.LaneCount.
func VerifyTopicsLanes(ctx context.Context, cl *kgo.Client, t config.Topics, lanes int) error {
	adm := kadm.NewClient(cl)
	layout := TopicLayoutLanes(t, lanes)
	need := max(lanes, ckf.LaneCount)
	var details kadm.TopicDetails
	for {
		var err error
		details, err = adm.ListTopics(ctx)
		if err == nil {
			err = missing(details, layout)
		}
		if err == nil {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("topics not ready: %w (last error: %w)", ctx.Err(), err)
		case <-time.After(100 * time.Millisecond):
		}
	}
	if d := details[t.Lanes]; len(d.Partitions) < need {
		return fmt.Errorf("topic %s has %d partitions; the lane topic needs %d (one per physical lane, indexer.lanes): %w",
			t.Lanes, len(d.Partitions), need, ErrLaneTopicPartitions)
	}
	return nil
}

// missing returns why the layout is not complete yet, or nil.
func missing(details kadm.TopicDetails, layout []TopicSpec) error {
	for _, spec := range layout {
		d, ok := details[spec.Name]
		switch {
		case !ok:
			return fmt.Errorf("topic %s does not exist", spec.Name)
		case d.Err != nil:
			return fmt.Errorf("topic %s: %w", spec.Name, d.Err)
		case len(d.Partitions) == 0:
			return fmt.Errorf("topic %s has no partitions yet", spec.Name)
		}
		for _, p := range d.Partitions {
			if p.Err != nil || p.Leader < 0 {
				return fmt.Errorf("topic %s partition %d has no leader yet", spec.Name, p.Partition)
			}
		}
	}
	return nil
}
