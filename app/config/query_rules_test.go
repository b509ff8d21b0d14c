package config_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/app/config"
	"github.com/ckf-stream/ckf-stream/streams"
	"github.com/ckf-stream/ckf-stream/streams/query"
)

// TestQueryRulesAreTheLibrarys: the indexer section's query settings are refused exactly when the
// query library refuses the configuration the section converts to (config.Indexer.QuerySettings,
// query.QueryConfig.CheckSettings), under the setting's path, with one problem per setting.
func TestQueryRulesAreTheLibrarys(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		set  func(*config.Indexer)
		path string // the refused setting; "" when accepted
	}{
		{"the defaults", func(*config.Indexer) {}, ""},
		{"no group", func(ix *config.Indexer) { ix.QueryGroup = "" }, "indexer.query_group"},
		{"batches of 1", func(ix *config.Indexer) { ix.QueryBatchSize = 1 }, ""},
		{"the largest batch", func(ix *config.Indexer) { ix.QueryBatchSize = query.MaxQueryBatchRecords }, ""},
		{"batches of 0", func(ix *config.Indexer) { ix.QueryBatchSize = 0 }, "indexer.query_batch_size"},
		{"a batch over the limit", func(ix *config.Indexer) { ix.QueryBatchSize = query.MaxQueryBatchRecords + 1 }, "indexer.query_batch_size"},
		{"session 1s", func(ix *config.Indexer) { ix.QuerySessionTimeout = time.Second }, ""},
		{"session 45s", func(ix *config.Indexer) { ix.QuerySessionTimeout = 45 * time.Second }, ""},
		{"session 999ms", func(ix *config.Indexer) { ix.QuerySessionTimeout = time.Second - time.Millisecond }, "indexer.query_session_timeout"},
		{"session 0", func(ix *config.Indexer) { ix.QuerySessionTimeout = 0 }, "indexer.query_session_timeout"},
		{"session -1s", func(ix *config.Indexer) { ix.QuerySessionTimeout = -time.Second }, "indexer.query_session_timeout"},
	} {
		c := config.Default()
		tc.set(&c.Indexer)
		var app []*config.FieldError
		for _, err := range unjoin(c.Validate()) {
			if fe := (*config.FieldError)(nil); errors.As(err, &fe) && strings.HasPrefix(fe.Field, "indexer.query_") {
				app = append(app, fe)
			}
		}
		settingsAgree(t, tc.name, tc.path, app, c.Indexer.QuerySettings(c.Topics).CheckSettings(), config.QuerySettingPath)
	}
}

// settingsAgree checks one case of a section whose library reports every violation: the
// configuration's problems app (of the settings under test) and the library's lib must both
// accept (path ""), or both refuse the setting at path, the configuration once and in the
// library's words (pathOf maps a library field to its setting's path).
func settingsAgree(t *testing.T, name, path string, app []*config.FieldError, lib []*streams.ConfigError, pathOf func(string) string) {
	t.Helper()
	switch {
	case path == "" && (len(app) > 0 || len(lib) > 0):
		t.Errorf("%s: want accepted; configuration: %v; library: %v", name, app, lib)
	case path != "" && (len(app) != 1 || app[0].Field != path):
		t.Errorf("%s: the configuration refuses %v; want %s refused once", name, app, path)
	case path != "" && len(lib) == 0:
		t.Errorf("%s: the configuration refuses %s, the library accepts it", name, path)
	case path != "" && pathOf(lib[0].Field) != path:
		t.Errorf("%s: the configuration refuses %s, the library %s (%v)", name, path, lib[0].Field, lib[0])
	case path != "" && app[0].Reason != lib[0].Reason:
		t.Errorf("%s: the configuration says %q, the library %q", name, app[0].Reason, lib[0].Reason)
	}
}
