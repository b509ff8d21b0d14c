package config

import (
	"slices"
	"strings"

	"github.com/ckf-stream/ckf-stream/streams/query"
)

// The indexer section's query settings are the query library's (streams/query, QueryConfig's
// CheckSettings): the section is converted to the library's configuration, checked there, and
// each problem is reported under the setting's path here. One setting, one rule, whether the
// query service is configured by this file or built by a library user.

// querySettingPaths maps the library's field names to the indexer section's paths. The
// heartbeat interval is derived from the session timeout (QuerySettings), so its rules are the
// session timeout's.
var querySettingPaths = map[string]string{
	"Group":              "indexer.query_group",
	"MaxBatchRecords":    "indexer.query_batch_size",
	"SessionTimeout":     "indexer.query_session_timeout",
	"HeartbeatInterval":  "indexer.query_session_timeout",
	"ReplyTopicPrefixes": "indexer.reply_topic_prefixes",
}

// QuerySettingPath returns the path of the query library's setting field (a QueryConfig field
// name, "ReplyTopicPrefixes[2]" for an entry) in this configuration, "indexer.query." + field
// when the section does not expose it.
func QuerySettingPath(field string) string {
	name, _, _ := strings.Cut(field, "[")
	if p, ok := querySettingPaths[name]; ok {
		return p
	}
	return "indexer.query." + field
}

// QuerySettings converts the indexer section and the topic names to the query service's
// configuration: the library's defaults (query.DefaultQueryConfig) with the topics, the group,
// the batch size, the session timeout (heartbeats every third of it, at most every second) and
// the reply topic prefixes of the configuration.
func (ix Indexer) QuerySettings(t Topics) query.QueryConfig {
	cfg := query.DefaultQueryConfig()
	cfg.RequestTopic, cfg.ReplyTopic, cfg.DeadLetterTopic = t.Queries, t.QueryReplies, t.DeadLetter
	cfg.Group, cfg.MaxBatchRecords = ix.QueryGroup, ix.QueryBatchSize
	cfg.SessionTimeout = ix.QuerySessionTimeout
	cfg.HeartbeatInterval = min(query.DefaultQueryHeartbeatInterval, ix.QuerySessionTimeout/3)
	cfg.ReplyTopicPrefixes = slices.Clone(ix.ReplyTopicPrefixes)
	return cfg
}

// validateQuery reports the query library's verdict on the section's query settings.
func (ix Indexer) validateQuery(t Topics, p *problems) {
	seen := map[string]bool{}
	for _, ce := range ix.QuerySettings(t).CheckSettings() {
		if strings.HasPrefix(ce.Field, "ReplyTopicPrefixes") {
			continue // validateReplyTopicPrefixes holds the prefixes to the library's rule and more
		}
		path := QuerySettingPath(ce.Field)
		if seen[path] {
			continue // the derived heartbeat's rule repeats the session timeout's
		}
		seen[path] = true
		*p = append(*p, &FieldError{Field: path, Reason: ce.Reason, Err: ce.Err})
	}
}
