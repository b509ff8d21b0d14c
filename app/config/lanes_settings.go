package config

import (
	"strings"

	"github.com/ckf-stream/ckf-stream/streams/lanes"
)

// The indexer section's lane settings (the freshness policy, the lag commit interval, the
// remote lanes' sources) are the lanes library's (streams/lanes, IndexerConfig's CheckSettings):
// the section is converted to the library's configuration, checked there, and each problem is
// reported under the setting's path here, as the query settings are (query.go).

// laneSettingPaths maps the library's field names to this configuration's paths.
var laneSettingPaths = map[string]string{
	"Freshness.MaxRecordLag": "indexer.freshness.max_record_lag",
	"Freshness.MaxTimeLag":   "indexer.freshness.max_time_lag",
	"LagCommitInterval":      "indexer.lag_commit_interval",
	"Topics.Lanes":           "topics.lanes",
	"Topics.Control":         "topics.control",
	"Topics.LaneEvents":      "topics.lane_events",
	"Topics.DeadLetter":      "topics.dead_letter",
}

// LaneSettingPath returns the path of the lanes library's setting field (an IndexerConfig field
// name, "LaneSources[3].Topic" for a lane's source) in this configuration, "indexer.lanes." +
// field when the section does not expose it.
func LaneSettingPath(field string) string {
	if p, ok := laneSettingPaths[field]; ok {
		return p
	}
	if strings.HasPrefix(field, "LaneSources") {
		return "indexer.remote_lanes"
	}
	return "indexer.lanes." + field
}

// Policy converts the configured freshness policy to the lanes library's. Both read a zero bound
// as "not checked", so each bound maps as it is: indexer.freshness with both bounds 0 excludes no
// lane for lag.
func (f Freshness) Policy() lanes.FreshnessPolicy {
	return lanes.FreshnessPolicy{MaxRecordLag: f.MaxRecordLag, MaxTimeLag: f.MaxTimeLag}
}

// LaneSettings converts the indexer section and the topic names to the lanes' configuration:
// the library's defaults (lanes.DefaultIndexerConfig) with the topics, the freshness policy, the
// lag commit interval and the remote lanes' sources of the configuration. The lag group is left
// to the indexer to name (it needs the consumer instance id).
func (ix Indexer) LaneSettings(t Topics) lanes.IndexerConfig {
	cfg := lanes.DefaultIndexerConfig()
	cfg.Topics = lanes.IndexerTopics{
		Lanes: t.Lanes, Control: t.Control, LaneEvents: t.LaneEvents, DeadLetter: t.DeadLetter,
		// The relays index each lane's latest complete snapshot here, so a starting replica
		// seeks each lane straight to it instead of reading from the log start.
		SnapshotIndex: t.SnapshotIndex,
	}
	cfg.Freshness = ix.Freshness.Policy()
	cfg.LagCommitInterval = ix.LagCommitInterval
	// Lanes of other regions are read from MirrorMaker's copies of their region's lane topic and
	// snapshot index (indexer.remote_lanes, design §8).
	cfg.LaneSources = ix.LaneSources(t)
	return cfg
}

// validateLanes reports the lanes library's verdict on the section's lane settings.
func (ix Indexer) validateLanes(t Topics, p *problems) {
	for _, ce := range ix.LaneSettings(t).CheckSettings() {
		field := ce.Field
		if strings.HasPrefix(field, "LaneSources") {
			continue // validateRegions holds indexer.remote_lanes to the library's naming rules and more
		}
		if strings.HasPrefix(field, "Topics.") {
			continue // the topics section's own check names every topic
		}
		*p = append(*p, &FieldError{Field: LaneSettingPath(field), Reason: ce.Reason, Err: ce.Err})
	}
}
