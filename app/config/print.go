package config

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"

	"gopkg.in/yaml.v3"
)

// Marshal renders c as "yaml" or "json", in field order, with durations as Go durations (30s),
// DC ids in hex, and secrets redacted. The YAML form is a valid configuration file; the JSON
// form too, except that redacted secrets must be filled in again.
func (c Config) Marshal(format string) ([]byte, error) {
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(c); err != nil {
		return nil, fmt.Errorf("config: encode: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("config: encode: %w", err)
	}
	switch format {
	case "yaml", "yml", "":
		return buf.Bytes(), nil
	case "json":
		var doc yaml.Node
		if err := yaml.Unmarshal(buf.Bytes(), &doc); err != nil {
			return nil, fmt.Errorf("config: re-read encoded config: %w", err)
		}
		var out bytes.Buffer
		if err := writeJSON(&out, &doc); err != nil {
			return nil, err
		}
		var indented bytes.Buffer
		if err := json.Indent(&indented, out.Bytes(), "", "  "); err != nil {
			return nil, fmt.Errorf("config: indent json: %w", err)
		}
		indented.WriteByte('\n')
		return indented.Bytes(), nil
	default:
		return nil, &FieldError{Field: "format", Reason: fmt.Sprintf("%q is not one of yaml, json", format)}
	}
}

// writeJSON writes a YAML node tree as JSON, keeping the mapping order that encoding/json's
// maps would lose.
func writeJSON(b *bytes.Buffer, n *yaml.Node) error {
	switch n.Kind {
	case yaml.DocumentNode:
		if len(n.Content) == 0 {
			b.WriteString("null")
			return nil
		}
		return writeJSON(b, n.Content[0])
	case yaml.MappingNode:
		b.WriteByte('{')
		for i := 0; i+1 < len(n.Content); i += 2 {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(strconv.Quote(n.Content[i].Value))
			b.WriteByte(':')
			if err := writeJSON(b, n.Content[i+1]); err != nil {
				return err
			}
		}
		b.WriteByte('}')
	case yaml.SequenceNode:
		b.WriteByte('[')
		for i, c := range n.Content {
			if i > 0 {
				b.WriteByte(',')
			}
			if err := writeJSON(b, c); err != nil {
				return err
			}
		}
		b.WriteByte(']')
	case yaml.ScalarNode:
		switch n.ShortTag() {
		case "!!int":
			if _, err := strconv.ParseInt(n.Value, 10, 64); err == nil {
				b.WriteString(n.Value)
			} else if _, err := strconv.ParseUint(n.Value, 10, 64); err == nil {
				b.WriteString(n.Value)
			} else {
				b.WriteString(strconv.Quote(n.Value)) // 0x hex: JSON has no hex numbers
			}
		case "!!bool", "!!float":
			b.WriteString(n.Value)
		case "!!null":
			b.WriteString("null")
		default:
			raw, err := json.Marshal(n.Value)
			if err != nil {
				return fmt.Errorf("config: json: %w", err)
			}
			b.Write(raw)
		}
	default:
		return fmt.Errorf("config: json: unexpected YAML node kind %v", n.Kind)
	}
	return nil
}
