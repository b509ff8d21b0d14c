package streams_test

import (
	"context"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/ckf/index"
	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/ckf-stream/ckf-stream/streams"
)

// The validation tests of every configuration type: each illegal value of each field is a
// *streams.ConfigError naming the field (and nothing replaces it with a default), and each legal
// zero survives as zero in the component's configuration.

// wantConfigError fails unless err is a *streams.ConfigError of config naming field, matching
// streams.ErrInvalidConfig, with a message that starts with both.
func wantConfigError(t *testing.T, err error, config, field string) {
	t.Helper()
	var ce *streams.ConfigError
	if !errors.As(err, &ce) || !errors.Is(err, streams.ErrInvalidConfig) {
		t.Fatalf("got %v, want a *streams.ConfigError matching ErrInvalidConfig", err)
	}
	if ce.Config != config || ce.Field != field {
		t.Fatalf("%q names %s config field %s, want %s config field %s", err, ce.Config, ce.Field, config, field)
	}
	if prefix := "streams: " + config + " config: " + field + " "; !strings.HasPrefix(err.Error(), prefix) {
		t.Fatalf("%q does not start with %q", err, prefix)
	}
}

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

func configCodec(t *testing.T) *schemas.Codec {
	t.Helper()
	codec, err := schemas.NewCodec(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return codec
}

func TestIndexerConfigValidate(t *testing.T) {
	pool := testPool(100)
	m, _, err := index.NewManifest(1, testDomain, ckf.NewFormatIdentity(ckf.DefaultSeed, 1024), index.ManifestLanes{0: &pool})
	if err != nil {
		t.Fatal(err)
	}
	g, err := index.NewGlobalIndexer(m, ckf.DefaultSearchConfig())
	if err != nil {
		t.Fatal(err)
	}
	codec := configCodec(t)
	base := func() streams.IndexerConfig {
		c := streams.DefaultIndexerConfig()
		c.Topics = streams.IndexerTopics{Lanes: "lanes", SnapshotIndex: "index", Control: "control", LaneEvents: "events", DeadLetter: "dead"}
		return c
	}
	build := func(c streams.IndexerConfig) (*streams.Indexer, error) {
		return streams.NewIndexer(streams.IndexerParams{Config: c, Indexer: g, Codec: codec})
	}
	for _, tc := range []illegalCase[streams.IndexerConfig]{
		{"Topics.Lanes", func(c *streams.IndexerConfig) { c.Topics.Lanes = "" }},
		{"Topics.Control", func(c *streams.IndexerConfig) { c.Topics.Control = "" }},
		{"Topics.LaneEvents", func(c *streams.IndexerConfig) { c.Topics.LaneEvents = "" }},
		{"Topics.DeadLetter", func(c *streams.IndexerConfig) { c.Topics.DeadLetter = "" }},
		{"Freshness.MaxRecordLag", func(c *streams.IndexerConfig) { c.Freshness.MaxRecordLag = -1 }},
		{"Freshness.MaxTimeLag", func(c *streams.IndexerConfig) { c.Freshness.MaxTimeLag = -time.Nanosecond }},
		{"ProgressInterval", func(c *streams.IndexerConfig) { c.ProgressInterval = -1 }},
		{"Feed.PauseBytes", func(c *streams.IndexerConfig) { c.Feed.PauseBytes = 0 }},
		{"Feed.ResumeBytes", func(c *streams.IndexerConfig) { c.Feed.ResumeBytes = -1 }},
		{"Feed.ResumeBytes", func(c *streams.IndexerConfig) { c.Feed.ResumeBytes = c.Feed.PauseBytes }},
		{"RestoreTimeout", func(c *streams.IndexerConfig) { c.RestoreTimeout = 0 }},
		{"RestoreTimeout", func(c *streams.IndexerConfig) { c.RestoreTimeout = -time.Second }},
		{"RetrySnapshotRequestGap", func(c *streams.IndexerConfig) { c.RetrySnapshotRequestGap = -1 }},
	} {
		c := base()
		tc.set(&c)
		_, err := build(c)
		wantConfigError(t, err, "indexer", tc.field)
	}
	for _, tc := range []legalCase[streams.IndexerConfig]{
		{"the defaults", func(*streams.IndexerConfig) {}},
		{"no snapshot index: the lanes are scanned", func(c *streams.IndexerConfig) { c.Topics.SnapshotIndex = "" }},
		{"no bound checked", func(c *streams.IndexerConfig) { c.Freshness = streams.FreshnessPolicy{} }},
		{"no record bound", func(c *streams.IndexerConfig) { c.Freshness.MaxRecordLag = 0 }},
		{"no progress events", func(c *streams.IndexerConfig) { c.ProgressInterval = 0 }},
		{"resume only when empty", func(c *streams.IndexerConfig) { c.Feed.ResumeBytes = 0 }},
		{"no gap between retried snapshot requests", func(c *streams.IndexerConfig) { c.RetrySnapshotRequestGap = 0 }},
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
	build := func(c streams.FeedConfig) (*streams.LaneFeed, error) {
		return streams.NewLaneFeed(nil, "lanes", []int32{0}, c) // the client is not used before Run
	}
	for _, tc := range []illegalCase[streams.FeedConfig]{
		{"PauseBytes", func(c *streams.FeedConfig) { c.PauseBytes = 0 }},
		{"PauseBytes", func(c *streams.FeedConfig) { c.PauseBytes = -1 }},
		{"ResumeBytes", func(c *streams.FeedConfig) { c.ResumeBytes = -1 }},
		{"ResumeBytes", func(c *streams.FeedConfig) { c.ResumeBytes = c.PauseBytes }},
		{"ResumeBytes", func(c *streams.FeedConfig) { c.ResumeBytes = c.PauseBytes + 1 }},
	} {
		c := streams.DefaultFeedConfig()
		tc.set(&c)
		_, err := build(c)
		wantConfigError(t, err, "lane feed", tc.field)
	}
	for _, tc := range []legalCase[streams.FeedConfig]{
		{"the defaults", func(*streams.FeedConfig) {}},
		{"resume only when empty", func(c *streams.FeedConfig) { c.ResumeBytes = 0 }},
		{"pause at one byte", func(c *streams.FeedConfig) { c.PauseBytes, c.ResumeBytes = 1, 0 }},
	} {
		c := streams.DefaultFeedConfig()
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

func TestRelayConfigValidate(t *testing.T) {
	codec := configCodec(t)
	base := func() streams.RelayConfig {
		c := streams.DefaultRelayConfig()
		c.Topics = streams.RelayTopics{KVEvents: "kv", Lanes: "lanes", SnapshotIndex: "index", Control: "control", DeadLetter: "dead"}
		c.Pool, c.Lane, c.CKF.ExpectedBlocksPerDC = testPool(103), 3, 4096
		return c
	}
	build := func(c streams.RelayConfig) (*streams.Relay, error) {
		return streams.NewRelay(streams.RelayParams{Config: c, Codec: codec})
	}
	for _, tc := range []illegalCase[streams.RelayConfig]{
		{"Topics.KVEvents", func(c *streams.RelayConfig) { c.Topics.KVEvents = "" }},
		{"Topics.Lanes", func(c *streams.RelayConfig) { c.Topics.Lanes = "" }},
		{"Pool", func(c *streams.RelayConfig) { c.Pool = ckf.PoolID{} }},
		{"Lane", func(c *streams.RelayConfig) { c.Lane = ckf.LaneCount }},
		{"CKF", func(c *streams.RelayConfig) { c.CKF.ExpectedBlocksPerDC = 0 }},
		{"CKF", func(c *streams.RelayConfig) { c.CKF.MaxKicks = 0 }},
		{"CKF", func(c *streams.RelayConfig) { c.CKF.VerificationWindow = 0 }},
		{"CKF", func(c *streams.RelayConfig) { c.CKF.PublishEveryNEvents = 0 }},
		{"CKF", func(c *streams.RelayConfig) { c.CKF.ExpectedBlocksPerDC = 1 << 62 }},
		{"LayoutGeneration", func(c *streams.RelayConfig) { c.LayoutGeneration = 0 }},
		{"PublishMaxDelay", func(c *streams.RelayConfig) { c.PublishMaxDelay = -1 }},
		{"MaxDeltasPerTransaction", func(c *streams.RelayConfig) { c.MaxDeltasPerTransaction = 0 }},
		{"SnapshotInterval", func(c *streams.RelayConfig) { c.SnapshotInterval = -time.Second }},
		{"SnapshotInterval", func(c *streams.RelayConfig) {
			c.SnapshotInterval, c.SnapshotEveryDeltas, c.SnapshotDeltaRatio = 0, 0, 0
		}},
		{"SnapshotDeltaRatio", func(c *streams.RelayConfig) { c.SnapshotDeltaRatio = -1 }},
		{"SnapshotDeltaRatio", func(c *streams.RelayConfig) { c.SnapshotDeltaRatio = math.NaN() }},
		{"SnapshotIdleInterval", func(c *streams.RelayConfig) { c.SnapshotIdleInterval = -1 }},
		{"SnapshotIdleInterval", func(c *streams.RelayConfig) { c.SnapshotIdleInterval = c.SnapshotInterval - 1 }},
		{"SnapshotIdleInterval", func(c *streams.RelayConfig) { c.SnapshotIdleInterval = 0 }},
		{"SnapshotIdleInterval", func(c *streams.RelayConfig) { c.SnapshotInterval, c.SnapshotIdleInterval = 0, -1 }},
		{"SnapshotRequestMinInterval", func(c *streams.RelayConfig) { c.SnapshotRequestMinInterval = -1 }},
		{"HeartbeatInterval", func(c *streams.RelayConfig) { c.HeartbeatInterval = 0 }},
		{"HeartbeatInterval", func(c *streams.RelayConfig) { c.HeartbeatInterval = -time.Second }},
		{"ChunkWords", func(c *streams.RelayConfig) { c.ChunkWords = 0 }},
		{"WriteTimeout", func(c *streams.RelayConfig) { c.WriteTimeout = 0 }},
		{"StopTimeout", func(c *streams.RelayConfig) { c.StopTimeout = 0 }},
		{"MaxPollRecords", func(c *streams.RelayConfig) { c.MaxPollRecords = 0 }},
		{"CheckpointInterval", func(c *streams.RelayConfig) { c.CheckpointInterval = -1 }},
		{"CheckpointInterval", func(c *streams.RelayConfig) {
			c.Topics.Checkpoints, c.CheckpointInterval, c.CheckpointEveryEvents = "ckpt", 0, 0
		}},
		{"CheckpointChunkBytes", func(c *streams.RelayConfig) { c.CheckpointChunkBytes = 0 }},
		{"LagCommitInterval", func(c *streams.RelayConfig) { c.LagCommitInterval = -1 }},
	} {
		c := base()
		tc.set(&c)
		_, err := build(c)
		wantConfigError(t, err, "relay", tc.field)
	}
	for _, tc := range []legalCase[streams.RelayConfig]{
		{"the defaults", func(*streams.RelayConfig) {}},
		{"lane 0", func(c *streams.RelayConfig) { c.Lane = 0 }},
		{"seed 0", func(c *streams.RelayConfig) { c.CKF.Seed = 0 }},
		{"windows closed at once", func(c *streams.RelayConfig) { c.CKF.PublishEveryNEvents, c.PublishMaxDelay = 8, 0 }},
		{"no count trigger", func(c *streams.RelayConfig) { c.SnapshotEveryDeltas = 0 }},
		{"only the byte trigger", func(c *streams.RelayConfig) { c.SnapshotInterval, c.SnapshotEveryDeltas = 0, 0 }},
		{"no byte trigger", func(c *streams.RelayConfig) { c.SnapshotDeltaRatio = 0 }},
		{"no time trigger: the idle interval is not used", func(c *streams.RelayConfig) { c.SnapshotInterval = 0 }},
		{"no time trigger, no idle interval", func(c *streams.RelayConfig) { c.SnapshotInterval, c.SnapshotIdleInterval = 0, 0 }},
		{"idle lanes as often as busy ones", func(c *streams.RelayConfig) { c.SnapshotIdleInterval = c.SnapshotInterval }},
		{"requests served without coalescing", func(c *streams.RelayConfig) { c.SnapshotRequestMinInterval = 0 }},
		{"explicit transactional id", func(c *streams.RelayConfig) { c.TransactionalID = "relay-7" }},
		{"explicit first incarnation", func(c *streams.RelayConfig) { c.Incarnation = 42 }},
		{"checkpoints on the count trigger only", func(c *streams.RelayConfig) {
			c.Topics.Checkpoints, c.CheckpointInterval = "ckpt", 0
		}},
		{"checkpoints on the time trigger only", func(c *streams.RelayConfig) {
			c.Topics.Checkpoints, c.CheckpointEveryEvents = "ckpt", 0
		}},
		{"no checkpoint topic, no trigger", func(c *streams.RelayConfig) { c.CheckpointInterval, c.CheckpointEveryEvents = 0, 0 }},
		{"lag commits after every transaction", func(c *streams.RelayConfig) { c.LagCommitInterval = 0 }},
		{"explicit lag group", func(c *streams.RelayConfig) { c.LagGroup = "relay-lag" }},
		{"no optional topics", func(c *streams.RelayConfig) {
			c.Topics.SnapshotIndex, c.Topics.Control, c.Topics.DeadLetter = "", "", ""
		}},
	} {
		c := base()
		tc.set(&c)
		r, err := build(c)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		want := c
		if want.TransactionalID == "" {
			want.TransactionalID = "ckf-relay-" + c.Topics.Lanes + "-" + c.Pool.String()
		}
		if want.LagGroup == "" {
			want.LagGroup = "ckf-relay-" + c.Topics.KVEvents + "-" + c.Pool.String()
		}
		if got := r.Config(); !reflect.DeepEqual(got, want) {
			t.Errorf("%s: the relay runs with\n%+v\nnot the configuration given\n%+v", tc.name, got, want)
		}
	}
}

func TestLaneWriterConfigValidate(t *testing.T) {
	codec := configCodec(t)
	id := ckf.ProducerIdentity{Pool: testPool(100), Incarnation: 1, LayoutGeneration: 1, Format: ckf.NewFormatIdentity(ckf.DefaultSeed, 1024)}
	base := func() streams.LaneWriterConfig {
		c := streams.DefaultLaneWriterConfig()
		c.LaneTopic, c.IndexTopic, c.Lane = "lanes", "index", 5
		return c
	}
	build := func(c streams.LaneWriterConfig) (*streams.LaneWriter, error) {
		return streams.NewLaneWriter(nil, codec, id, c) // the client is not used before a write
	}
	for _, tc := range []illegalCase[streams.LaneWriterConfig]{
		{"LaneTopic", func(c *streams.LaneWriterConfig) { c.LaneTopic = "" }},
		{"Lane", func(c *streams.LaneWriterConfig) { c.Lane = ckf.LaneCount }},
		{"ChunkWords", func(c *streams.LaneWriterConfig) { c.ChunkWords = 0 }},
		{"ChunkWords", func(c *streams.LaneWriterConfig) { c.ChunkWords = -1 }},
		{"WriteTimeout", func(c *streams.LaneWriterConfig) { c.WriteTimeout = 0 }},
		{"WriteTimeout", func(c *streams.LaneWriterConfig) { c.WriteTimeout = -time.Second }},
		{"MaxRecordBytes", func(c *streams.LaneWriterConfig) { c.MaxRecordBytes = 0 }},
		{"MaxRecordBytes", func(c *streams.LaneWriterConfig) { c.MaxRecordBytes = streams.MinLaneRecordBytes - 1 }},
		{"MaxRecordBytes", func(c *streams.LaneWriterConfig) { c.MaxRecordBytes = streams.MaxLaneRecordBytes + 1 }},
	} {
		c := base()
		tc.set(&c)
		_, err := build(c)
		wantConfigError(t, err, "lane writer", tc.field)
	}
	for _, tc := range []legalCase[streams.LaneWriterConfig]{
		{"the defaults", func(*streams.LaneWriterConfig) {}},
		{"no snapshot index", func(c *streams.LaneWriterConfig) { c.IndexTopic = "" }},
		{"lane 0", func(c *streams.LaneWriterConfig) { c.Lane = 0 }},
		{"one word per chunk", func(c *streams.LaneWriterConfig) { c.ChunkWords = 1 }},
		{"the smallest records", func(c *streams.LaneWriterConfig) { c.MaxRecordBytes = streams.MinLaneRecordBytes }},
		{"the largest records", func(c *streams.LaneWriterConfig) { c.MaxRecordBytes = streams.MaxLaneRecordBytes }},
	} {
		c := base()
		tc.set(&c)
		if _, err := build(c); err != nil {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
}

func TestQueryConfigValidate(t *testing.T) {
	x := newQIndex(t, 0)
	codec := configCodec(t)
	build := func(c streams.QueryConfig) (*streams.QueryService, error) {
		return streams.NewQueryService(streams.QueryServiceParams{Config: c, Answerer: streams.NewAnswerer(x.g, nil), Codec: codec})
	}
	for _, tc := range []illegalCase[streams.QueryConfig]{
		{"ReplyTopicPrefixes[1]", func(c *streams.QueryConfig) { c.ReplyTopicPrefixes = []string{"replies-", ""} }},
		{"Group", func(c *streams.QueryConfig) { c.Group = "" }},
		{"MaxBatchRecords", func(c *streams.QueryConfig) { c.MaxBatchRecords = 0 }},
		{"MaxBatchRecords", func(c *streams.QueryConfig) { c.MaxBatchRecords = streams.MaxQueryBatchRecords + 1 }},
		{"ReplyLinger", func(c *streams.QueryConfig) { c.ReplyLinger = -1 }},
		{"ReplyTimeout", func(c *streams.QueryConfig) { c.ReplyTimeout = 0 }},
		{"ReplyTimeout", func(c *streams.QueryConfig) { c.ReplyTimeout = -time.Second }},
		{"CommitTimeout", func(c *streams.QueryConfig) { c.CommitTimeout = 0 }},
		{"CommitTimeout", func(c *streams.QueryConfig) { c.CommitTimeout = -time.Second }},
		{"Component", func(c *streams.QueryConfig) { c.Component = "" }},
	} {
		c := streams.DefaultQueryConfig()
		tc.set(&c)
		_, err := build(c)
		wantConfigError(t, err, "query service", tc.field)
	}
	for _, tc := range []legalCase[streams.QueryConfig]{
		{"the defaults", func(*streams.QueryConfig) {}},
		{"no linger", func(c *streams.QueryConfig) { c.ReplyLinger = 0 }},
		{"batches of one", func(c *streams.QueryConfig) { c.MaxBatchRecords = 1 }},
		{"the largest batches", func(c *streams.QueryConfig) { c.MaxBatchRecords = streams.MaxQueryBatchRecords }},
		{"named topics", func(c *streams.QueryConfig) {
			c.RequestTopic, c.ReplyTopic, c.DeadLetterTopic, c.ReplyTopicPrefixes = "q", "r", "d", []string{"r-"}
		}},
	} {
		c := streams.DefaultQueryConfig()
		tc.set(&c)
		svc, err := build(c)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		want := c // empty topic names are derived from the codec
		for _, d := range []struct {
			name *string
			rt   schemas.RecordType
		}{{&want.RequestTopic, schemas.TypeQueryRequest}, {&want.ReplyTopic, schemas.TypeQueryReply}, {&want.DeadLetterTopic, schemas.TypeDeadLetter}} {
			if *d.name == "" {
				*d.name = codec.Topic(d.rt)
			}
		}
		if got := svc.Config(); !reflect.DeepEqual(got, want) {
			t.Errorf("%s: the service runs with\n%+v\nnot the configuration given\n%+v", tc.name, got, want)
		}
	}
}

func TestQueryClientConfigValidate(t *testing.T) {
	codec := configCodec(t)
	for _, tc := range []illegalCase[streams.QueryClientConfig]{
		{"ReplyPartition", func(c *streams.QueryClientConfig) { c.ReplyPartition = schemas.Some[int32](-1) }},
		{"CallTimeout", func(c *streams.QueryClientConfig) { c.CallTimeout = 0 }},
		{"CallTimeout", func(c *streams.QueryClientConfig) { c.CallTimeout = -time.Second }},
		{"RequestLinger", func(c *streams.QueryClientConfig) { c.RequestLinger = -1 }},
		{"StartTimeout", func(c *streams.QueryClientConfig) { c.StartTimeout = 0 }},
		{"StartTimeout", func(c *streams.QueryClientConfig) { c.StartTimeout = -time.Second }},
	} {
		c := streams.DefaultQueryClientConfig()
		tc.set(&c)
		// Validation comes before any connection: no broker is needed to be refused.
		_, err := streams.NewQueryClient(context.Background(), streams.QueryClientParams{Config: c, Codec: codec})
		wantConfigError(t, err, "query client", tc.field)
	}
	// The legal zero, RequestLinger 0 (the default: requests sent at once), on the real broker.
	tp := newQTopics(t, 1)
	c := qNewClient(t, codec, tp, streams.DefaultQueryClientConfig())
	want := streams.DefaultQueryClientConfig()
	want.RequestTopic, want.ReplyTopic = tp.requests, tp.replies
	if got := c.Config(); !reflect.DeepEqual(got, want) || got.RequestLinger != 0 {
		t.Errorf("the client runs with %+v, not the configuration given %+v", got, want)
	}
}
