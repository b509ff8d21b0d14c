package indexer_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/ckf-stream/ckf-stream/app/config"
	"github.com/ckf-stream/ckf-stream/app/indexer"
	"github.com/ckf-stream/ckf-stream/app/kafka"
	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/ckf/index"
	"github.com/ckf-stream/ckf-stream/streams/lanes"
	"github.com/ckf-stream/ckf-stream/streams/query"
	"github.com/ckf-stream/ckf-stream/testenv"
)

// TestIndexerDefaultsAreStreams: the indexer section's defaults, converted by LaneSettings, are
// lanes.DefaultIndexerConfig field by field (the topic names, which streams leaves to the
// deployment, aside), so the freshness bounds (indexer.freshness) have one value; and a policy
// with both bounds 0, which the configuration documents as "disabled", is streams' policy that
// checks neither bound.
func TestIndexerDefaultsAreStreams(t *testing.T) {
	def := config.Default()
	sc := def.Indexer.LaneSettings(def.Topics)
	want := lanes.DefaultIndexerConfig()
	want.Topics = sc.Topics
	for _, d := range testenv.FieldDiffs(sc, want, "configuration", "streams") {
		t.Error(d)
	}
	if got, want := def.Indexer.Freshness.Policy(), lanes.DefaultFreshnessPolicy(); got != want {
		t.Errorf("default freshness: configuration %+v, streams %+v", got, want)
	}
	if got := (config.Freshness{}).Policy(); got != (lanes.FreshnessPolicy{}) {
		t.Errorf("freshness with both bounds 0 (disabled) converts to %+v, want the zero policy (no bound checked)", got)
	}
}

// TestQueryDefaultsAreStreams: the query section's defaults (indexer.query_group,
// indexer.query_batch_size), converted by QueryConfig, are query.DefaultQueryConfig field by
// field (the topic names aside), and the batch size's upper bound is the service's.
func TestQueryDefaultsAreStreams(t *testing.T) {
	m, _, err := indexer.BuildManifest(testConfig(), 1)
	if err != nil {
		t.Fatal(err)
	}
	g, err := index.NewGlobalIndexer(m, ckf.DefaultSearchConfig())
	if err != nil {
		t.Fatal(err)
	}
	codec, err := kafka.NewCodec(config.DefaultTopics(""))
	if err != nil {
		t.Fatal(err)
	}
	build := func(c query.QueryConfig) (*query.QueryService, error) {
		return query.NewQueryService(query.QueryServiceParams{Config: c, Answerer: query.NewAnswerer(g, nil), Codec: codec})
	}
	def := config.Default()
	qc := def.Indexer.QuerySettings(def.Topics)
	want := query.DefaultQueryConfig()
	want.RequestTopic, want.ReplyTopic, want.DeadLetterTopic = qc.RequestTopic, qc.ReplyTopic, qc.DeadLetterTopic
	for _, d := range testenv.FieldDiffs(qc, want, "configuration", "streams") {
		t.Error(d)
	}
	if _, err := build(qc); err != nil {
		t.Fatalf("the default configuration's query service: %v", err)
	}
	for _, n := range []int{query.MaxQueryBatchRecords, query.MaxQueryBatchRecords + 1} {
		_, cfgErr := config.Load(config.Sources{Args: []string{fmt.Sprintf("--indexer.query_batch_size=%d", n)},
			LookupEnv: func(string) (string, bool) { return "", false }})
		c := query.DefaultQueryConfig()
		c.MaxBatchRecords = n
		_, svcErr := build(c)
		if (cfgErr == nil) != (svcErr == nil) {
			t.Errorf("query batch size %d: configuration says %v, query service says %v", n, cfgErr, svcErr)
		}
	}
	// indexer.reply_topic_prefixes reaches the service as its allow-list.
	set, err := config.Load(config.Sources{Args: []string{"--indexer.reply_topic_prefixes=router-a.,router-b."},
		LookupEnv: func(string) (string, bool) { return "", false }})
	if err != nil {
		t.Fatal(err)
	}
	qc = set.Indexer.QuerySettings(set.Topics)
	if !slices.Equal(qc.ReplyTopicPrefixes, []string{"router-a.", "router-b."}) {
		t.Errorf("reply topic prefixes %q", qc.ReplyTopicPrefixes)
	}
	if svc, err := build(qc); err != nil || !slices.Equal(svc.Config().ReplyTopicPrefixes, qc.ReplyTopicPrefixes) {
		t.Errorf("query service with reply topic prefixes: %v", err)
	}
}
