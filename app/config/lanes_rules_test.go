package config_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/app/config"
)

// TestLaneRulesAreTheLibrarys: the indexer section's lane settings (indexer.freshness,
// indexer.lag_commit_interval) are refused exactly when the lanes library refuses the
// configuration the section converts to (config.Indexer.LaneSettings,
// lanes.IndexerConfig.CheckSettings), under the setting's path, once, with the library's words.
func TestLaneRulesAreTheLibrarys(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		set  func(*config.Indexer)
		path string // the refused setting; "" when accepted
	}{
		{"the defaults", func(*config.Indexer) {}, ""},
		{"no record bound", func(ix *config.Indexer) { ix.Freshness.MaxRecordLag = 0 }, ""},
		{"a record bound of 1", func(ix *config.Indexer) { ix.Freshness.MaxRecordLag = 1 }, ""},
		{"a negative record bound", func(ix *config.Indexer) { ix.Freshness.MaxRecordLag = -1 }, "indexer.freshness.max_record_lag"},
		{"no time bound", func(ix *config.Indexer) { ix.Freshness.MaxTimeLag = 0 }, ""},
		{"a time bound of 1ms", func(ix *config.Indexer) { ix.Freshness.MaxTimeLag = time.Millisecond }, ""},
		{"a negative time bound", func(ix *config.Indexer) { ix.Freshness.MaxTimeLag = -time.Second }, "indexer.freshness.max_time_lag"},
		{"commits every 1ms", func(ix *config.Indexer) { ix.LagCommitInterval = time.Millisecond }, ""},
		{"commits every 0", func(ix *config.Indexer) { ix.LagCommitInterval = 0 }, "indexer.lag_commit_interval"},
		{"commits every -1s", func(ix *config.Indexer) { ix.LagCommitInterval = -time.Second }, "indexer.lag_commit_interval"},
	} {
		c := config.Default()
		tc.set(&c.Indexer)
		var app []*config.FieldError
		for _, err := range unjoin(c.Validate()) {
			if fe := (*config.FieldError)(nil); errors.As(err, &fe) &&
				(strings.HasPrefix(fe.Field, "indexer.freshness.") || fe.Field == "indexer.lag_commit_interval") {
				app = append(app, fe)
			}
		}
		lib := c.Indexer.LaneSettings(c.Topics).CheckSettings()
		if tc.path != "" && len(lib) != 1 {
			t.Errorf("%s: the library refuses %v; want %s refused once", tc.name, lib, tc.path)
		}
		settingsAgree(t, tc.name, tc.path, app, lib, config.LaneSettingPath)
	}
}
