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

// illegalCase sets one field of a configuration of type C to an illegal value.
type illegalCase[C any] struct {
	field string // the field the error must name
	set   func(*C)
}

// legalCase sets fields of a configuration of type C to legal values, zeros mostly.
type legalCase[C any] struct {
	name string
	set  func(*C)
}

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
	for _, tc := range []illegalCase[lanes.IndexerConfig]{
		{"Topics.Lanes", func(c *lanes.IndexerConfig) { c.Topics.Lanes = "" }},
		{"Topics.Control", func(c *lanes.IndexerConfig) { c.Topics.Control = "" }},
		{"Topics.LaneEvents", func(c *lanes.IndexerConfig) { c.Topics.LaneEvents = "" }},
		{"Topics.DeadLetter", func(c *lanes.IndexerConfig) { c.Topics.DeadLetter = "" }},
		{"Freshness.MaxRecordLag", func(c *lanes.IndexerConfig) { c.Freshness.MaxRecordLag = -1 }},
		{"Freshness.MaxTimeLag", func(c *lanes.IndexerConfig) { c.Freshness.MaxTimeLag = -time.Nanosecond }},
		{"ProgressInterval", func(c *lanes.IndexerConfig) { c.ProgressInterval = -1 }},
		{"Feed.PauseBytes", func(c *lanes.IndexerConfig) { c.Feed.PauseBytes = 0 }},
		{"Feed.ResumeBytes", func(c *lanes.IndexerConfig) { c.Feed.ResumeBytes = -1 }},
		{"Feed.ResumeBytes", func(c *lanes.IndexerConfig) { c.Feed.ResumeBytes = c.Feed.PauseBytes }},
		{"RestoreTimeout", func(c *lanes.IndexerConfig) { c.RestoreTimeout = 0 }},
		{"RestoreTimeout", func(c *lanes.IndexerConfig) { c.RestoreTimeout = -time.Second }},
		{"RetrySnapshotRequestGap", func(c *lanes.IndexerConfig) { c.RetrySnapshotRequestGap = -1 }},
	} {
		c := base()
		tc.set(&c)
		_, err := build(c)
		streamtest.WantConfigError(t, err, "indexer", tc.field)
	}
	for _, tc := range []legalCase[lanes.IndexerConfig]{
		{"the defaults", func(*lanes.IndexerConfig) {}},
		{"no snapshot index: the lanes are scanned", func(c *lanes.IndexerConfig) { c.Topics.SnapshotIndex = "" }},
		{"no bound checked", func(c *lanes.IndexerConfig) { c.Freshness = lanes.FreshnessPolicy{} }},
		{"no record bound", func(c *lanes.IndexerConfig) { c.Freshness.MaxRecordLag = 0 }},
		{"no progress events", func(c *lanes.IndexerConfig) { c.ProgressInterval = 0 }},
		{"resume only when empty", func(c *lanes.IndexerConfig) { c.Feed.ResumeBytes = 0 }},
		{"no gap between retried snapshot requests", func(c *lanes.IndexerConfig) { c.RetrySnapshotRequestGap = 0 }},
	} {
		c := base()
		tc.set(&c)
		ix, err := build(c)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got := ix.Config(); !reflect.DeepEqual(got, c) {
			t.Errorf("%s: the indexer runs with\n%+v\nnot the configuration given\n%+v", tc.name, got, c)
		}
	}
}

func TestFeedConfigValidate(t *testing.T) {
	build := func(c lanes.FeedConfig) (*lanes.LaneFeed, error) {
		return lanes.NewLaneFeed(nil, "lanes", []int32{0}, c) // the client is not used before Run
	}
	for _, tc := range []illegalCase[lanes.FeedConfig]{
		{"PauseBytes", func(c *lanes.FeedConfig) { c.PauseBytes = 0 }},
		{"PauseBytes", func(c *lanes.FeedConfig) { c.PauseBytes = -1 }},
		{"ResumeBytes", func(c *lanes.FeedConfig) { c.ResumeBytes = -1 }},
		{"ResumeBytes", func(c *lanes.FeedConfig) { c.ResumeBytes = c.PauseBytes }},
		{"ResumeBytes", func(c *lanes.FeedConfig) { c.ResumeBytes = c.PauseBytes + 1 }},
	} {
		c := lanes.DefaultFeedConfig()
		tc.set(&c)
		_, err := build(c)
		streamtest.WantConfigError(t, err, "lane feed", tc.field)
	}
	for _, tc := range []legalCase[lanes.FeedConfig]{
		{"the defaults", func(*lanes.FeedConfig) {}},
		{"resume only when empty", func(c *lanes.FeedConfig) { c.ResumeBytes = 0 }},
		{"pause at one byte", func(c *lanes.FeedConfig) { c.PauseBytes, c.ResumeBytes = 1, 0 }},
	} {
		c := lanes.DefaultFeedConfig()
		tc.set(&c)
		f, err := build(c)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got := f.Config(); got.PauseBytes != c.PauseBytes || got.ResumeBytes != c.ResumeBytes {
			t.Errorf("%s: the feed runs with %+v, not the configuration given %+v", tc.name, got, c)
		}
	}
}
