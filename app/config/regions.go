package config

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/streams"
	"gopkg.in/yaml.v3"
)

// Regions (design §8): each region runs its own Kafka cluster and MirrorMaker 2 copies every
// region's lane topic and snapshot index to the others. An indexer names the lanes published in
// another region (indexer.remote_lanes, lane=alias of that region) and how MirrorMaker names the
// copies (indexer.mirror_policy); it reads every other lane from topics.lanes. The naming and
// alias rules are the library's (streams.MirroredTopic, streams.CheckRegionAlias,
// streams.CheckMirrorPolicy); this file reports them under the settings' paths.

// LaneRegions maps a physical lane (0..63) to the MirrorMaker alias of the region whose relay
// publishes it. In a file it is a mapping whose keys may be numbers or strings: {8: eu, "9": eu};
// in a variable or flag comma-separated lane=alias pairs: 8=eu,9=eu.
type LaneRegions map[int]string

// Lanes returns the lanes in ascending order.
func (m LaneRegions) Lanes() []int { return slices.Sorted(maps.Keys(m)) }

// String renders the map as the lane=alias pairs a variable sets.
func (m LaneRegions) String() string {
	var b strings.Builder
	for i, lane := range m.Lanes() {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%d=%s", lane, m[lane])
	}
	return b.String()
}

// parseSetting parses comma-separated lane=alias pairs (a variable's or a flag's value).
func (m *LaneRegions) parseSetting(s string) error {
	out := LaneRegions{}
	for _, pair := range strings.Split(s, ",") {
		if pair = strings.TrimSpace(pair); pair == "" {
			continue
		}
		k, v, ok := strings.Cut(pair, "=")
		if !ok {
			return fmt.Errorf("%q is not lane=alias", pair)
		}
		if err := out.add(strings.TrimSpace(k), strings.TrimSpace(v)); err != nil {
			return err
		}
	}
	*m = out
	return nil
}

func (m LaneRegions) add(k, alias string) error {
	lane, err := strconv.ParseInt(k, 0, 64)
	if err != nil {
		return fmt.Errorf("lane %q is not an integer", k)
	}
	if _, dup := m[int(lane)]; dup {
		return fmt.Errorf("lane %d is given twice", lane)
	}
	m[int(lane)] = alias
	return nil
}

// UnmarshalYAML decodes a mapping of lane to region alias.
func (m *LaneRegions) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.MappingNode {
		if n.Tag == "!!null" {
			*m = nil
			return nil
		}
		return fmt.Errorf("line %d: remote_lanes must be a mapping of lane to region alias", n.Line)
	}
	out := LaneRegions{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode || v.Kind != yaml.ScalarNode {
			return fmt.Errorf("line %d: remote_lanes must map a lane number to a region alias", k.Line)
		}
		if err := out.add(k.Value, v.Value); err != nil {
			return fmt.Errorf("line %d: %w", k.Line, err)
		}
	}
	*m = out
	return nil
}

// MarshalYAML encodes the map with lanes in ascending order.
func (m LaneRegions) MarshalYAML() (any, error) {
	n := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
	for _, lane := range m.Lanes() {
		n.Content = append(n.Content,
			&yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: strconv.Itoa(lane)},
			&yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: m[lane]},
		)
	}
	return n, nil
}

// DefaultMirrorPolicy is indexer.mirror_policy's default: MirrorMaker's own default.
const DefaultMirrorPolicy = streams.MirrorPolicyDefault

// validateRegions applies the rules of indexer.remote_lanes and indexer.mirror_policy: the
// policy is the library's; each remote lane is a lane of indexer.lanes, its alias a region alias,
// and the names of its copies within Kafka's limit.
func (ix Indexer) validateRegions(t Topics, p *problems) {
	if err := streams.CheckMirrorPolicy(ix.MirrorPolicy); err != nil {
		p.add("indexer.mirror_policy", "%v", err)
		return
	}
	for _, lane := range ix.RemoteLanes.Lanes() {
		alias := ix.RemoteLanes[lane]
		if lane < 0 || lane >= ckf.MaxLanes {
			p.add("indexer.remote_lanes", "lane %d is not in [0,%d]", lane, ckf.MaxLanes-1)
			continue
		}
		if _, ok := ix.Lanes[lane]; !ok {
			p.add("indexer.remote_lanes", "lane %d is not in indexer.lanes (%s): a remote lane is one of the lanes the indexer serves", lane, ix.Lanes)
			continue
		}
		if err := streams.CheckRegionAlias(alias); err != nil {
			p.add("indexer.remote_lanes", "lane %d: %v", lane, err)
			continue
		}
		src := ix.laneSource(t, alias)
		for _, name := range []string{src.Topic, src.SnapshotIndex} {
			if err := streams.CheckMirroredTopic(name); err != nil {
				p.add("indexer.remote_lanes", "lane %d: %v", lane, err)
			}
		}
	}
}

func (ix Indexer) laneSource(t Topics, alias string) streams.LaneSource {
	return streams.MirroredLaneSource(ix.MirrorPolicy, alias, t.Lanes, t.SnapshotIndex)
}

// LaneSources returns where the indexer reads each remote lane (indexer.remote_lanes): the
// copies MirrorMaker makes of the lane's region's topics.lanes and topics.snapshot_index, named
// by indexer.mirror_policy (every region shares the topic names). Lanes not listed are read from
// topics.lanes. Call it on a valid configuration.
func (ix Indexer) LaneSources(t Topics) map[uint8]streams.LaneSource {
	if len(ix.RemoteLanes) == 0 {
		return nil
	}
	out := make(map[uint8]streams.LaneSource, len(ix.RemoteLanes))
	for lane, alias := range ix.RemoteLanes {
		out[uint8(lane)] = ix.laneSource(t, alias)
	}
	return out
}

// validateRegions applies relay.remote_regions' rules: each a region alias, listed once, whose
// control topic's copy has a name within Kafka's limit.
func (r Relay) validateRegions(t Topics, p *problems) {
	seen := map[string]bool{}
	for _, alias := range r.RemoteRegions {
		if err := streams.CheckRegionAlias(alias); err != nil {
			p.add("relay.remote_regions", "%v", err)
			continue
		}
		if seen[alias] {
			p.add("relay.remote_regions", "region %q is listed twice", alias)
			continue
		}
		seen[alias] = true
		if err := streams.CheckMirroredTopic(streams.MirroredTopic(streams.MirrorPolicyDefault, alias, t.Control)); err != nil {
			p.add("relay.remote_regions", "%v", err)
		}
	}
}

// MirroredControl returns the control topics of relay.remote_regions as MirrorMaker names their
// copies in this region (its default policy: requests flow back only under it, design §8).
func (r Relay) MirroredControl(t Topics) []string {
	var out []string
	for _, alias := range r.RemoteRegions {
		out = append(out, streams.MirroredTopic(streams.MirrorPolicyDefault, alias, t.Control))
	}
	return out
}
