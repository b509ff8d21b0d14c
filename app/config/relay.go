package config

import (
	"github.com/ckf-stream/ckf-stream/streams/relay"
)

// The relay section's rules are the relay library's (streams/relay, CheckLane and
// RelayConfig.CheckSettings): the section is converted to the library's settings, checked there,
// and each problem is reported under the setting's path here. One setting, one rule, whether a
// relay is configured by this file or built by a library user.

// relaySettingPaths maps the library's field names to this section's paths.
var relaySettingPaths = map[string]string{
	"Lane":                    "relay.lane",
	"CKF.ExpectedBlocksPerDC": "relay.expected_blocks",
	"CKF.Seed":                "relay.seed",
	"CKF.PublishEveryNEvents": "relay.publish_every_events",
	"PublishMaxDelay":         "relay.publish_max_delay",
	"SnapshotEveryDeltas":     "relay.snapshot_every_deltas",
	"SnapshotDeltaRatio":      "relay.snapshot_delta_ratio",
	"SnapshotInterval":        "relay.snapshot_interval",
	"SnapshotIdleInterval":    "relay.snapshot_idle_interval",
	"HeartbeatInterval":       "relay.heartbeat_interval",
	"CheckpointInterval":      "relay.checkpoint_interval",
	"CheckpointEveryEvents":   "relay.checkpoint_every_events",
	"SilentSourceAfter":       "relay.silent_source_after",
	"ForgetSourceAfter":       "relay.forget_source_after",
}

// RelaySettingPath returns the path of the relay library's setting field (a RelayConfig field
// name) in this configuration, "relay." + field when the section does not expose it.
func RelaySettingPath(field string) string {
	if p, ok := relaySettingPaths[field]; ok {
		return p
	}
	return "relay." + field
}

// StreamsSettings returns the relay library's defaults (relay.DefaultRelayConfig) with this
// section's settings: the filter size, seed and cadence, the snapshot, heartbeat and checkpoint
// timers. The topics, the pool, the lane and the lane map are the caller's (app/relay adds
// them); the lane is left 0 because it is checked as an int first (relay.CheckLane).
func (r Relay) StreamsSettings() relay.RelayConfig {
	c := relay.DefaultRelayConfig()
	c.CKF.ExpectedBlocksPerDC = r.ExpectedBlocks
	c.CKF.Seed = r.Seed
	c.CKF.PublishEveryNEvents = r.PublishEveryEvents
	c.PublishMaxDelay = r.PublishMaxDelay
	c.SnapshotEveryDeltas = r.SnapshotEveryDeltas
	c.SnapshotDeltaRatio = r.SnapshotDeltaRatio
	c.SnapshotInterval = r.SnapshotInterval
	c.SnapshotIdleInterval = r.SnapshotIdleInterval
	c.HeartbeatInterval = r.HeartbeatInterval
	c.CheckpointInterval = r.CheckpointInterval
	c.CheckpointEveryEvents = r.CheckpointEveryEvents
	c.SilentSourceAfter = r.SilentSourceAfter
	c.ForgetSourceAfter = r.ForgetSourceAfter
	return c
}

func (r Relay) validate(p *problems) {
	if err := relay.CheckLane(r.Lane); err != nil {
		p.add(RelaySettingPath("Lane"), "%v", err)
	}
	for _, sp := range r.StreamsSettings().CheckSettings(RelaySettingPath) {
		*p = append(*p, &FieldError{Field: RelaySettingPath(sp.Field), Reason: sp.Reason, Err: sp.Err})
	}
}
