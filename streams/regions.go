package streams

import (
	"fmt"
	"strings"
)

// Regions (design §8): each region runs its own Kafka cluster, and MirrorMaker 2 copies every
// region's lane topic and snapshot index to the others. A global indexer reads its region's own
// lanes from the local lane topic and every other region's lanes from the mirrored copies. The
// rules here name those copies; one rule per setting, used by the indexer library and by the
// process configuration alike (app/config, indexer.mirrored_lanes and indexer.mirror_policy).

// MirrorMaker 2 replication policies, as the indexer's configuration names them.
const (
	// MirrorPolicyDefault is MirrorMaker's DefaultReplicationPolicy: region a's topic t is
	// "a.t" in every other region.
	MirrorPolicyDefault = "default"
	// MirrorPolicyIdentity is MirrorMaker's IdentityReplicationPolicy: the copy keeps the
	// source's name. It suits flows one way, where the remote lanes land on partitions of the
	// local lane topic that no local relay writes.
	MirrorPolicyIdentity = "identity"
)

// CheckMirrorPolicy is the mirror policy's rule: MirrorPolicyDefault or MirrorPolicyIdentity.
func CheckMirrorPolicy(policy string) error {
	switch policy {
	case MirrorPolicyDefault, MirrorPolicyIdentity:
		return nil
	}
	return fmt.Errorf("%q is not %s or %s", policy, MirrorPolicyDefault, MirrorPolicyIdentity)
}

// CheckRegionAlias is a region alias's rule: MirrorMaker's cluster alias of the region the lane
// is published in, a non-empty run of topic characters (a-z A-Z 0-9 _ -) without the dot that
// separates the alias from the topic in a mirrored name.
func CheckRegionAlias(alias string) error {
	if alias == "" {
		return fmt.Errorf("a region alias must not be empty")
	}
	for _, ch := range alias {
		switch {
		case 'a' <= ch && ch <= 'z', 'A' <= ch && ch <= 'Z', '0' <= ch && ch <= '9', ch == '_', ch == '-':
		default:
			return fmt.Errorf("region alias %q holds %q: use a-z A-Z 0-9 _ - (MirrorMaker's alias, which a dot would split)", alias, ch)
		}
	}
	return nil
}

// MirroredTopic returns the name that topic of region alias has in another region under policy
// (a checked policy): "alias.topic" under MirrorPolicyDefault, topic itself under
// MirrorPolicyIdentity. An empty topic stays empty (a topic the deployment does not use).
func MirroredTopic(policy, alias, topic string) string {
	if topic == "" || policy == MirrorPolicyIdentity {
		return topic
	}
	return alias + "." + topic
}

// maxTopicName is Kafka's limit on a topic name's length.
const maxTopicName = 249

// CheckMirroredTopic is the rule of a mirrored topic's name: within Kafka's 249 characters.
func CheckMirroredTopic(name string) error {
	if len(name) > maxTopicName {
		return fmt.Errorf("the mirrored topic %q is %d characters long, above Kafka's %d", name, len(name), maxTopicName)
	}
	return nil
}

// LaneSource is where an indexer reads one lane in its own region's cluster.
type LaneSource struct {
	// Region is the alias of the region the lane's relay publishes in; "" for a lane of the
	// indexer's own region.
	Region string
	// Topic is the lane topic holding the lane, as partition Lane of it.
	Topic string
	// SnapshotIndex is the snapshot index holding the lane's entry; "" reads none (the lane
	// starts from the topic's log start and asks for a snapshot).
	SnapshotIndex string
	// Mirrored says the records are a mirror's copies: their offsets are not the source's, so
	// an index entry's offsets mean nothing here and the lane's snapshot is found by the
	// entry's write time and sequence (FindSnapshotByTime, consumer §9.8).
	Mirrored bool
}

// MirroredLaneSource returns the source of a lane published in region alias as MirrorMaker
// copies it under policy (a checked policy) from that region's lane topic and snapshot index,
// named as lanes and index: this region's own names, which every region shares.
func MirroredLaneSource(policy, alias, lanes, index string) LaneSource {
	return LaneSource{Region: alias, Topic: MirroredTopic(policy, alias, lanes),
		SnapshotIndex: MirroredTopic(policy, alias, index), Mirrored: true}
}

// String renders the source for logs and status pages: "topic" or "topic (mirrored from a)".
func (s LaneSource) String() string {
	var b strings.Builder
	b.WriteString(s.Topic)
	if s.Mirrored {
		b.WriteString(" (mirrored from ")
		b.WriteString(s.Region)
		b.WriteString(")")
	}
	return b.String()
}
