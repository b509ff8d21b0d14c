package bridge

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/ckf-stream/ckf-stream/app/config"
	"github.com/ckf-stream/ckf-stream/bridge"
	"gopkg.in/yaml.v3"
)

// EngineEntry is one engine of bridge.engines_file. Zero fields take the bridge.* setting of
// the same name; worker_id and endpoint are required.
type EngineEntry struct {
	WorkerID       *uint64  `yaml:"worker_id"`
	Endpoint       string   `yaml:"endpoint"`
	ReplayEndpoint *string  `yaml:"replay_endpoint"`
	Ranks          int      `yaml:"ranks"`
	Topic          *string  `yaml:"topic"`
	Bind           *bool    `yaml:"bind"`
	BlockSize      int      `yaml:"block_size"`
	LoraNames      []string `yaml:"lora_names"`
}

// enginesFile is the file's document.
type enginesFile struct {
	Engines []EngineEntry `yaml:"engines"`
}

// LoadEngines reads bridge.engines_file and returns one engine section per entry, each the
// bridge.* settings with the entry's fields over them. An unknown key, a missing worker_id or
// endpoint, or an empty list is a *config.FieldError naming the file and the entry.
func LoadEngines(b config.Bridge) ([]config.Bridge, error) {
	bad := func(format string, a ...any) error {
		return &config.FieldError{Field: "bridge.engines_file", Reason: fmt.Sprintf("%s: ", b.EnginesFile) + fmt.Sprintf(format, a...)}
	}
	raw, err := os.ReadFile(b.EnginesFile)
	if err != nil {
		return nil, bad("%v", err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(true)
	var doc enginesFile
	if err := dec.Decode(&doc); err != nil && !errors.Is(err, io.EOF) {
		return nil, bad("%v", err)
	}
	if len(doc.Engines) == 0 {
		return nil, bad("lists no engine (want engines: [{worker_id: ..., endpoint: ...}, ...])")
	}
	out := make([]config.Bridge, 0, len(doc.Engines))
	for i, e := range doc.Engines {
		if e.WorkerID == nil || e.Endpoint == "" {
			return nil, bad("engine %d: worker_id and endpoint are required", i)
		}
		c := b
		c.EnginesFile = ""
		c.WorkerID, c.Endpoint = *e.WorkerID, e.Endpoint
		if e.ReplayEndpoint != nil {
			c.ReplayEndpoint = *e.ReplayEndpoint
		}
		if e.Ranks != 0 {
			c.Ranks = e.Ranks
		}
		if e.Topic != nil {
			c.Topic = *e.Topic
		}
		if e.Bind != nil {
			c.Bind = *e.Bind
		}
		if e.BlockSize != 0 {
			c.BlockSize = e.BlockSize
		}
		if e.LoraNames != nil {
			c.LoraNames = e.LoraNames
		}
		out = append(out, c)
	}
	return out, nil
}

// BridgeConfigs converts the configuration sections to the bridge configuration of every engine
// the process serves: bridge.engines_file's engines, or the one engine of bridge.endpoint. It
// checks them with the bridge library's rules (bridge.Config.Check, bridge.CheckFleet), so that
// a configuration the bridge would refuse is a *config.FieldError naming the setting before
// anything starts: bridge.<setting> for the one engine, bridge.engines_file with the file, the
// engine and its key for a list.
func BridgeConfigs(b config.Bridge, topics config.Topics) ([]bridge.Config, error) {
	if b.EnginesFile == "" {
		c, err := BridgeConfig(b, topics)
		if err != nil {
			return nil, err
		}
		if err := c.Check(); err != nil {
			_, key, reason := refusal(err)
			return nil, &config.FieldError{Field: strings.TrimSuffix("bridge."+key, "."), Reason: reason, Err: err}
		}
		return []bridge.Config{c}, nil
	}
	engines, err := LoadEngines(b)
	if err != nil {
		return nil, err
	}
	out := make([]bridge.Config, 0, len(engines))
	for i, e := range engines {
		c, err := BridgeConfig(e, topics)
		if err != nil {
			var fe *config.FieldError
			if errors.As(err, &fe) {
				return nil, &config.FieldError{Field: "bridge.engines_file", Reason: fmt.Sprintf("%s: engine %d (worker %d): %s: %s", b.EnginesFile, i, e.WorkerID, fe.Field, fe.Reason)}
			}
			return nil, err
		}
		out = append(out, c)
	}
	if err := bridge.CheckFleet(out); err != nil {
		engine, key, reason := refusal(err)
		if key != "" {
			key += ": "
		}
		return nil, &config.FieldError{Field: "bridge.engines_file", Reason: b.EnginesFile + ": " + engine + key + reason, Err: err}
	}
	return out, nil
}

// refusal splits the bridge library's refusal of a configuration into the engine of a list it
// names (empty for the one engine), the setting's key (bridge.Config's field names are the
// bridge.* keys; empty when no key of the section holds the value) and the reason.
func refusal(err error) (engine, key, reason string) {
	var ee *bridge.EngineError
	if errors.As(err, &ee) {
		engine = fmt.Sprintf("engine %d (worker %d): ", ee.Index, ee.WorkerID)
	}
	var ce *bridge.ConfigError
	if !errors.As(err, &ce) {
		return engine, "", err.Error()
	}
	if ce.Field == "" {
		return engine, "", ce.Reason
	}
	return engine, ce.Field, ce.Reason
}
