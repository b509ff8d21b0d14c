package lanes_test

import (
	"reflect"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/ckf/index"
	"github.com/ckf-stream/ckf-stream/streams/internal/streamtest"
	"github.com/ckf-stream/ckf-stream/streams/lanes"
)

func TestIndexerConfigValidate(t *testing.T) {
	pool := streamtest.Pool(100)
	m, _, err := index.NewManifest(1, streamtest.Domain, ckf.NewFormatIdentity(ckf.DefaultSeed, 1024), index.ManifestLanes{0: &pool})
	if err != nil {
		t.Fatal(err)
	}
	g, err := index.NewGlobalIndexer(m, ckf.DefaultSearchConfig())
	if err != nil {
		t.Fatal(err)
	}
	codec := streamtest.ConfigCodec(t)
	base := func() lanes.IndexerConfig {
		c := lanes.DefaultIndexerConfig()
		c.Topics = lanes.IndexerTopics{Lanes: "lanes", SnapshotIndex: "index", Control: "control", LaneEvents: "events", DeadLetter: "dead"}
		return c
	}
	build := func(c lanes.IndexerConfig) (*lanes.Indexer, error) {
		return lanes.NewIndexer(lanes.IndexerParams{Config: c, Indexer: g, Codec: codec})
	}
	for _, tc := range []streamtest.IllegalCase[lanes.IndexerConfig]{
		{Field: "Topics.Lanes", Set: func(c *lanes.IndexerConfig) { c.Topics.Lanes = "" }},
		{Field: "Topics.Control", Set: func(c *lanes.IndexerConfig) { c.Topics.Control = "" }},
		{Field: "Topics.LaneEvents", Set: func(c *lanes.IndexerConfig) { c.Topics.LaneEvents = "" }},
		{Field: "Topics.DeadLetter", Set: func(c *lanes.IndexerConfig) { c.Topics.DeadLetter = "" }},
		{Field: "Freshness.MaxRecordLag", Set: func(c *lanes.IndexerConfig) { c.Freshness.MaxRecordLag = -1 }},
		{Field: "Freshness.MaxTimeLag", Set: func(c *lanes.IndexerConfig) { c.Freshness.MaxTimeLag = -time.Nanosecond }},
		{Field: "ProgressInterval", Set: func(c *lanes.IndexerConfig) { c.ProgressInterval = -1 }},
		{Field: "Feed.PauseBytes", Set: func(c *lanes.IndexerConfig) { c.Feed.PauseBytes = 0 }},
		{Field: "Feed.ResumeBytes", Set: func(c *lanes.IndexerConfig) { c.Feed.ResumeBytes = -1 }},
		{Field: "Feed.ResumeBytes", Set: func(c *lanes.IndexerConfig) { c.Feed.ResumeBytes = c.Feed.PauseBytes }},
		{Field: "RestoreTimeout", Set: func(c *lanes.IndexerConfig) { c.RestoreTimeout = 0 }},
		{Field: "RestoreTimeout", Set: func(c *lanes.IndexerConfig) { c.RestoreTimeout = -time.Second }},
		{Field: "RetrySnapshotRequestGap", Set: func(c *lanes.IndexerConfig) { c.RetrySnapshotRequestGap = -1 }},
	} {
		c := base()
		tc.Set(&c)
		_, err := build(c)
		streamtest.WantConfigError(t, err, "indexer", tc.Field)
	}
	for _, tc := range []streamtest.LegalCase[lanes.IndexerConfig]{
		{Name: "the defaults", Set: func(*lanes.IndexerConfig) {}},
		{Name: "no snapshot index: the lanes are scanned", Set: func(c *lanes.IndexerConfig) { c.Topics.SnapshotIndex = "" }},
		{Name: "no bound checked", Set: func(c *lanes.IndexerConfig) { c.Freshness = lanes.FreshnessPolicy{} }},
		{Name: "no record bound", Set: func(c *lanes.IndexerConfig) { c.Freshness.MaxRecordLag = 0 }},
		{Name: "no progress events", Set: func(c *lanes.IndexerConfig) { c.ProgressInterval = 0 }},
		{Name: "resume only when empty", Set: func(c *lanes.IndexerConfig) { c.Feed.ResumeBytes = 0 }},
		{Name: "no gap between retried snapshot requests", Set: func(c *lanes.IndexerConfig) { c.RetrySnapshotRequestGap = 0 }},
	} {
		c := base()
		tc.Set(&c)
		ix, err := build(c)
		if err != nil {
			t.Fatalf("%s: %v", tc.Name, err)
		}
		if got := ix.Config(); !reflect.DeepEqual(got, c) {
			t.Errorf("%s: the indexer runs with\n%+v\nnot the configuration given\n%+v", tc.Name, got, c)
		}
	}
}

func TestFeedConfigValidate(t *testing.T) {
	build := func(c lanes.FeedConfig) (*lanes.LaneFeed, error) {
		return lanes.NewLaneFeed(nil, "lanes", []int32{0}, c) // the client is not used before Run
	}
	for _, tc := range []streamtest.IllegalCase[lanes.FeedConfig]{
		{Field: "PauseBytes", Set: func(c *lanes.FeedConfig) { c.PauseBytes = 0 }},
		{Field: "PauseBytes", Set: func(c *lanes.FeedConfig) { c.PauseBytes = -1 }},
		{Field: "ResumeBytes", Set: func(c *lanes.FeedConfig) { c.ResumeBytes = -1 }},
		{Field: "ResumeBytes", Set: func(c *lanes.FeedConfig) { c.ResumeBytes = c.PauseBytes }},
		{Field: "ResumeBytes", Set: func(c *lanes.FeedConfig) { c.ResumeBytes = c.PauseBytes + 1 }},
	} {
		c := lanes.DefaultFeedConfig()
		tc.Set(&c)
		_, err := build(c)
		streamtest.WantConfigError(t, err, "lane feed", tc.Field)
	}
	for _, tc := range []streamtest.LegalCase[lanes.FeedConfig]{
		{Name: "the defaults", Set: func(*lanes.FeedConfig) {}},
		{Name: "resume only when empty", Set: func(c *lanes.FeedConfig) { c.ResumeBytes = 0 }},
		{Name: "pause at one byte", Set: func(c *lanes.FeedConfig) { c.PauseBytes, c.ResumeBytes = 1, 0 }},
	} {
		c := lanes.DefaultFeedConfig()
		tc.Set(&c)
		f, err := build(c)
		if err != nil {
			t.Fatalf("%s: %v", tc.Name, err)
		}
		if got := f.Config(); got.PauseBytes != c.PauseBytes || got.ResumeBytes != c.ResumeBytes {
			t.Errorf("%s: the feed runs with %+v, not the configuration given %+v", tc.Name, got, c)
		}
	}
}
