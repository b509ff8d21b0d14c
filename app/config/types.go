package config

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// Redacted is what a non-empty Secret prints instead of its value.
const Redacted = "[redacted]"

// Secret is a string that never prints: String, GoString, and the YAML, JSON and text encodings
// all give Redacted (or "" when empty), so a Config can be logged or printed whole. Reveal returns
// the value, for the one place that needs it.
type Secret string

// Reveal returns the secret's value.
func (s Secret) Reveal() string { return string(s) }

// String returns Redacted, or "" for an empty secret.
func (s Secret) String() string {
	if s == "" {
		return ""
	}
	return Redacted
}

// GoString keeps %#v from printing the value.
func (s Secret) GoString() string { return strconv.Quote(s.String()) }

// MarshalYAML encodes the redacted form.
func (s Secret) MarshalYAML() (any, error) { return s.String(), nil }

// MarshalJSON encodes the redacted form.
func (s Secret) MarshalJSON() ([]byte, error) { return []byte(strconv.Quote(s.String())), nil }

// MarshalText encodes the redacted form.
func (s Secret) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// LaneMap maps a physical lane (0..63, consumer §16) to the DC id that publishes on it. In a file it is a
// mapping whose keys may be numbers or strings (as JSON requires): {0: 0x1a, "1": 27}; in a
// variable or flag it is comma-separated lane=dc pairs: 0=0x1a,1=27. DC ids accept decimal and
// 0x-prefixed hex, and print as hex, as ckf renders a DcID.
type LaneMap map[int]uint64

// Lanes returns the configured lanes in ascending order.
func (m LaneMap) Lanes() []int {
	return slices.Sorted(maps.Keys(m))
}

// String renders the map as the lane=dc pairs that Set parses.
func (m LaneMap) String() string {
	var b strings.Builder
	for i, lane := range m.Lanes() {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%d=%#x", lane, m[lane])
	}
	return b.String()
}

// parseLaneMap parses comma-separated lane=dc pairs; an empty string is an empty map.
func parseLaneMap(s string) (LaneMap, error) {
	m := LaneMap{}
	for _, pair := range strings.Split(s, ",") {
		pair = strings.TrimSpace(pair)
		if pair == "" {
			continue
		}
		k, v, ok := strings.Cut(pair, "=")
		if !ok {
			return nil, fmt.Errorf("%q is not lane=dc", pair)
		}
		if err := m.add(strings.TrimSpace(k), strings.TrimSpace(v)); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m LaneMap) add(k, v string) error {
	lane, err := strconv.ParseInt(k, 0, 64)
	if err != nil {
		return fmt.Errorf("lane %q is not an integer", k)
	}
	dc, err := strconv.ParseUint(v, 0, 64)
	if err != nil {
		return fmt.Errorf("DC id %q of lane %s is not an unsigned 64-bit integer", v, k)
	}
	if _, dup := m[int(lane)]; dup {
		return fmt.Errorf("lane %d is given twice", lane)
	}
	m[int(lane)] = dc
	return nil
}

// UnmarshalYAML decodes a mapping of lane to DC id. Keys may be quoted, so that JSON files work.
func (m *LaneMap) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.MappingNode {
		if n.Tag == "!!null" {
			*m = nil
			return nil
		}
		return fmt.Errorf("line %d: lanes must be a mapping of lane to DC id", n.Line)
	}
	out := LaneMap{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode || v.Kind != yaml.ScalarNode {
			return fmt.Errorf("line %d: lanes must map a lane number to a DC id", k.Line)
		}
		if err := out.add(k.Value, v.Value); err != nil {
			return fmt.Errorf("line %d: %w", k.Line, err)
		}
	}
	*m = out
	return nil
}

// MarshalYAML encodes the map with lanes in ascending order and DC ids in hex.
func (m LaneMap) MarshalYAML() (any, error) {
	n := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
	for _, lane := range m.Lanes() {
		n.Content = append(n.Content,
			&yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: strconv.Itoa(lane)},
			&yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: fmt.Sprintf("%#x", m[lane])},
		)
	}
	return n, nil
}
