package config_test

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/app/config"
	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/streams"
	"github.com/ckf-stream/ckf-stream/streams/relay"
)

// TestRelayRulesAreTheLibrarys: every relay setting the process configuration accepts, the
// relay library (streams/relay, RelayConfig.Validate) accepts, and every one it refuses, the
// library refuses naming the same setting: the section has no rule of its own (issue 26's
// publish_max_delay = 0 and snapshot_idle_interval = 0 once meant different things in each).
func TestRelayRulesAreTheLibrarys(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		set  func(*config.Relay)
		path string // the refused setting; "" when accepted
	}{
		{"the defaults", func(*config.Relay) {}, ""},
		{"lane 0", func(r *config.Relay) { r.Lane = 0 }, ""},
		{"lane 15", func(r *config.Relay) { r.Lane = ckf.LaneCount - 1 }, ""},
		{"lane 16 (consumer §16)", func(r *config.Relay) { r.Lane = ckf.LaneCount }, ""},
		{"lane 63", func(r *config.Relay) { r.Lane = ckf.MaxLanes - 1 }, ""},
		{"lane 64", func(r *config.Relay) { r.Lane = ckf.MaxLanes }, "relay.lane"},
		{"lane -1", func(r *config.Relay) { r.Lane = -1 }, "relay.lane"},
		{"one block", func(r *config.Relay) { r.ExpectedBlocks = 1 }, ""},
		{"no block", func(r *config.Relay) { r.ExpectedBlocks = 0 }, "relay.expected_blocks"},
		{"the wire's largest filter", func(r *config.Relay) { r.ExpectedBlocks = 5 << 22 }, ""},
		{"a filter over the wire's", func(r *config.Relay) { r.ExpectedBlocks = 1 << 30 }, "relay.expected_blocks"},
		{"a filter that overflows", func(r *config.Relay) { r.ExpectedBlocks = 1 << 62 }, "relay.expected_blocks"},
		{"seed 0", func(r *config.Relay) { r.Seed = 0 }, ""},
		{"publish every event", func(r *config.Relay) { r.PublishEveryEvents = 1 }, ""},
		{"publish every 0 events", func(r *config.Relay) { r.PublishEveryEvents = 0 }, "relay.publish_every_events"},
		{"publish_max_delay 0", func(r *config.Relay) { r.PublishMaxDelay = 0 }, ""},
		{"publish_max_delay -1ms", func(r *config.Relay) { r.PublishMaxDelay = -time.Millisecond }, "relay.publish_max_delay"},
		{"no count trigger", func(r *config.Relay) { r.SnapshotEveryDeltas = 0 }, ""},
		{"only the count trigger", func(r *config.Relay) { r.SnapshotInterval, r.SnapshotDeltaRatio, r.SnapshotEveryDeltas = 0, 0, 100 }, ""},
		{"only the byte trigger", func(r *config.Relay) { r.SnapshotInterval, r.SnapshotEveryDeltas = 0, 0 }, ""},
		{"no snapshot trigger", func(r *config.Relay) { r.SnapshotInterval, r.SnapshotEveryDeltas, r.SnapshotDeltaRatio = 0, 0, 0 }, "relay.snapshot_interval"},
		{"negative snapshot interval", func(r *config.Relay) { r.SnapshotInterval = -time.Second }, "relay.snapshot_interval"},
		{"negative delta ratio", func(r *config.Relay) { r.SnapshotDeltaRatio = -1 }, "relay.snapshot_delta_ratio"},
		{"NaN delta ratio", func(r *config.Relay) { r.SnapshotDeltaRatio = math.NaN() }, "relay.snapshot_delta_ratio"},
		{"snapshot_idle_interval 0", func(r *config.Relay) { r.SnapshotIdleInterval = 0 }, ""},
		{"idle as often as busy", func(r *config.Relay) { r.SnapshotIdleInterval = r.SnapshotInterval }, ""},
		{"idle shorter than busy", func(r *config.Relay) { r.SnapshotIdleInterval = r.SnapshotInterval - 1 }, "relay.snapshot_idle_interval"},
		{"negative idle interval", func(r *config.Relay) { r.SnapshotIdleInterval = -1 }, "relay.snapshot_idle_interval"},
		{"idle interval without a time trigger", func(r *config.Relay) { r.SnapshotInterval, r.SnapshotIdleInterval = 0, time.Second }, ""},
		{"heartbeat 0", func(r *config.Relay) { r.HeartbeatInterval = 0 }, "relay.heartbeat_interval"},
		{"heartbeat 1ms", func(r *config.Relay) { r.HeartbeatInterval = time.Millisecond }, ""},
		{"no checkpoint", func(r *config.Relay) { r.CheckpointInterval, r.CheckpointEveryEvents = 0, 0 }, ""},
		{"checkpoints by count only", func(r *config.Relay) { r.CheckpointInterval = 0 }, ""},
		{"negative checkpoint interval", func(r *config.Relay) { r.CheckpointInterval = -time.Second }, "relay.checkpoint_interval"},
		{"silent after 1s", func(r *config.Relay) { r.SilentSourceAfter = time.Second }, ""},
		{"silent_source_after 0", func(r *config.Relay) { r.SilentSourceAfter = 0 }, "relay.silent_source_after"},
		{"negative silent_source_after", func(r *config.Relay) { r.SilentSourceAfter = -time.Minute }, "relay.silent_source_after"},
		{"forgotten as soon as silent", func(r *config.Relay) { r.ForgetSourceAfter = r.SilentSourceAfter }, "relay.forget_source_after"},
		{"forgotten a little later", func(r *config.Relay) { r.ForgetSourceAfter = r.SilentSourceAfter + time.Second }, ""},
	} {
		c := config.Default()
		tc.set(&c.Relay)
		var app *config.FieldError
		for _, err := range unjoin(c.Validate()) {
			if fe := (*config.FieldError)(nil); errors.As(err, &fe) && strings.HasPrefix(fe.Field, "relay.") && app == nil {
				app = fe
			}
		}
		lib := libraryError(c)
		switch {
		case tc.path == "" && (app != nil || lib != nil):
			t.Errorf("%s: want accepted; configuration: %v; library: %v", tc.name, app, lib)
		case tc.path != "" && (app == nil || app.Field != tc.path):
			t.Errorf("%s: the configuration refuses %v; want %s refused", tc.name, app, tc.path)
		case tc.path != "" && lib == nil:
			t.Errorf("%s: the configuration refuses %s, the library accepts it", tc.name, tc.path)
		case tc.path != "" && lib.path != tc.path:
			t.Errorf("%s: the configuration refuses %s, the library %s (%v)", tc.name, tc.path, lib.path, lib.err)
		}
	}
}

// libraryVerdict is the library's refusal of a relay section, with the setting's path.
type libraryVerdict struct {
	path string
	err  error
}

// libraryError returns the relay library's verdict on c's relay section as app/relay hands it
// over (topics and pool set), nil when it accepts it.
func libraryError(c config.Config) *libraryVerdict {
	if err := relay.CheckLane(c.Relay.Lane); err != nil {
		return &libraryVerdict{config.RelaySettingPath("Lane"), err}
	}
	rc := c.Relay.StreamsSettings()
	rc.Topics = relay.RelayTopics{KVEvents: c.Topics.KVEvents, Lanes: c.Topics.Lanes}
	if c.Relay.CheckpointInterval > 0 || c.Relay.CheckpointEveryEvents > 0 {
		rc.Topics.Checkpoints = c.Topics.RelayCheckpoints
	}
	rc.Pool, rc.Lane = ckf.PoolID{Dc: 7}, uint8(c.Relay.Lane)
	err := rc.Validate()
	if err == nil {
		return nil
	}
	var ce *streams.ConfigError
	if !errors.As(err, &ce) {
		return &libraryVerdict{"(not a ConfigError)", err}
	}
	return &libraryVerdict{config.RelaySettingPath(ce.Field), err}
}

// unjoin returns the errors errors.Join joined in err (err itself otherwise).
func unjoin(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}
