package config_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/app/config"
	"github.com/ckf-stream/ckf-stream/streams"
)

// TestWorkersRulesAreTheLibrarys: every workers setting the configuration accepts, the library
// (streams/workers, Config.Validate) accepts, and every one it refuses, the library refuses
// naming the same setting.
func TestWorkersRulesAreTheLibrarys(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		set  func(*config.Workers)
		path string
	}{
		{"the defaults", func(*config.Workers) {}, ""},
		{"no checkpoints", func(w *config.Workers) { w.CheckpointInterval = 0 }, ""},
		{"negative checkpoint interval", func(w *config.Workers) { w.CheckpointInterval = -time.Second }, "workers.checkpoint_interval"},
		{"no lag commits", func(w *config.Workers) { w.LagCommitInterval = 0 }, ""},
		{"negative lag commit interval", func(w *config.Workers) { w.LagCommitInterval = -1 }, "workers.lag_commit_interval"},
		{"DC 0", func(w *config.Workers) { w.DcID = 0 }, ""},
	} {
		c := config.Default()
		tc.set(&c.Workers)
		var app *config.FieldError
		for _, err := range unjoin(c.Validate()) {
			if fe := (*config.FieldError)(nil); errors.As(err, &fe) && strings.HasPrefix(fe.Field, "workers.") && app == nil {
				app = fe
			}
		}
		lc := c.Workers.StreamsSettings()
		lc.Topics.KVEvents, lc.Topics.Checkpoints = c.Topics.KVEvents, c.Workers.CheckpointTopic
		lib := lc.Validate()
		var ce *streams.ConfigError
		switch {
		case tc.path == "" && (app != nil || lib != nil):
			t.Errorf("%s: want accepted; configuration: %v; library: %v", tc.name, app, lib)
		case tc.path != "" && (app == nil || app.Field != tc.path):
			t.Errorf("%s: the configuration refuses %v; want %s refused", tc.name, app, tc.path)
		case tc.path != "" && (!errors.As(lib, &ce) || config.WorkersSettingPath(ce.Field) != tc.path):
			t.Errorf("%s: the configuration refuses %s, the library %v", tc.name, tc.path, lib)
		}
	}
	c := config.Default()
	c.Workers.CheckpointTopic = c.Topics.KVEvents
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "workers.checkpoint_topic") {
		t.Errorf("checkpoint topic = KV topic: %v", err)
	}
}
