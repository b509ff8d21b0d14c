package relay_test

import (
	"math"
	"reflect"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/streams/internal/streamtest"
	"github.com/ckf-stream/ckf-stream/streams/relay"
)

func TestRelayConfigValidate(t *testing.T) {
	t.Parallel()
	codec := streamtest.ConfigCodec(t)
	base := func() relay.RelayConfig {
		c := relay.DefaultRelayConfig()
		c.Topics = relay.RelayTopics{KVEvents: "kv", Lanes: "lanes", SnapshotIndex: "index", Control: "control", DeadLetter: "dead"}
		c.Pool, c.Lane, c.CKF.ExpectedBlocksPerDC = streamtest.Pool(103), 3, 4096
		return c
	}
	build := func(c relay.RelayConfig) (*relay.Relay, error) {
		return relay.NewRelay(relay.RelayParams{Config: c, Codec: codec})
	}
	for _, tc := range []streamtest.IllegalCase[relay.RelayConfig]{
		{Field: "Topics.KVEvents", Set: func(c *relay.RelayConfig) { c.Topics.KVEvents = "" }},
		{Field: "Topics.Lanes", Set: func(c *relay.RelayConfig) { c.Topics.Lanes = "" }},
		{Field: "Pool", Set: func(c *relay.RelayConfig) { c.Pool = ckf.PoolID{} }},
		{Field: "Lane", Set: func(c *relay.RelayConfig) { c.Lane = ckf.MaxLanes }},
		{Field: "CKF.ExpectedBlocksPerDC", Set: func(c *relay.RelayConfig) { c.CKF.ExpectedBlocksPerDC = 0 }},
		{Field: "CKF", Set: func(c *relay.RelayConfig) { c.CKF.MaxKicks = 0 }},
		{Field: "CKF", Set: func(c *relay.RelayConfig) { c.CKF.VerificationWindow = 0 }},
		{Field: "CKF.PublishEveryNEvents", Set: func(c *relay.RelayConfig) { c.CKF.PublishEveryNEvents = 0 }},
		{Field: "CKF.ExpectedBlocksPerDC", Set: func(c *relay.RelayConfig) { c.CKF.ExpectedBlocksPerDC = 1 << 62 }},
		{Field: "CKF.ExpectedBlocksPerDC", Set: func(c *relay.RelayConfig) { c.CKF.ExpectedBlocksPerDC = 1 << 30 }}, // 2^29 buckets: over the wire's 2^24
		{Field: "LayoutGeneration", Set: func(c *relay.RelayConfig) { c.LayoutGeneration = 0 }},
		{Field: "PublishMaxDelay", Set: func(c *relay.RelayConfig) { c.PublishMaxDelay = -1 }},
		{Field: "MaxDeltasPerTransaction", Set: func(c *relay.RelayConfig) { c.MaxDeltasPerTransaction = 0 }},
		{Field: "SnapshotInterval", Set: func(c *relay.RelayConfig) { c.SnapshotInterval = -time.Second }},
		{Field: "SnapshotInterval", Set: func(c *relay.RelayConfig) {
			c.SnapshotInterval, c.SnapshotEveryDeltas, c.SnapshotDeltaRatio = 0, 0, 0
		}},
		{Field: "SnapshotDeltaRatio", Set: func(c *relay.RelayConfig) { c.SnapshotDeltaRatio = -1 }},
		{Field: "SnapshotDeltaRatio", Set: func(c *relay.RelayConfig) { c.SnapshotDeltaRatio = math.NaN() }},
		{Field: "SnapshotIdleInterval", Set: func(c *relay.RelayConfig) { c.SnapshotIdleInterval = -1 }},
		{Field: "SnapshotIdleInterval", Set: func(c *relay.RelayConfig) { c.SnapshotIdleInterval = c.SnapshotInterval - 1 }},
		{Field: "SnapshotIdleInterval", Set: func(c *relay.RelayConfig) { c.SnapshotInterval, c.SnapshotIdleInterval = 0, -1 }},
		{Field: "SnapshotRequestMinInterval", Set: func(c *relay.RelayConfig) { c.SnapshotRequestMinInterval = -1 }},
		{Field: "HeartbeatInterval", Set: func(c *relay.RelayConfig) { c.HeartbeatInterval = 0 }},
		{Field: "HeartbeatInterval", Set: func(c *relay.RelayConfig) { c.HeartbeatInterval = -time.Second }},
		{Field: "ChunkWords", Set: func(c *relay.RelayConfig) { c.ChunkWords = 0 }},
		{Field: "WriteTimeout", Set: func(c *relay.RelayConfig) { c.WriteTimeout = 0 }},
		{Field: "StopTimeout", Set: func(c *relay.RelayConfig) { c.StopTimeout = 0 }},
		{Field: "MaxPollRecords", Set: func(c *relay.RelayConfig) { c.MaxPollRecords = 0 }},
		{Field: "CheckpointInterval", Set: func(c *relay.RelayConfig) { c.CheckpointInterval = -1 }},
		{Field: "CheckpointInterval", Set: func(c *relay.RelayConfig) {
			c.Topics.Checkpoints, c.CheckpointInterval, c.CheckpointEveryEvents = "ckpt", 0, 0
		}},
		{Field: "CheckpointChunkBytes", Set: func(c *relay.RelayConfig) { c.CheckpointChunkBytes = 0 }},
		{Field: "LagCommitInterval", Set: func(c *relay.RelayConfig) { c.LagCommitInterval = -1 }},
		{Field: "SilentSourceAfter", Set: func(c *relay.RelayConfig) { c.SilentSourceAfter = 0 }},
		{Field: "ForgetSourceAfter", Set: func(c *relay.RelayConfig) { c.ForgetSourceAfter = c.SilentSourceAfter }},
	} {
		c := base()
		tc.Set(&c)
		_, err := build(c)
		streamtest.WantConfigError(t, err, "relay", tc.Field)
	}
	for _, tc := range []streamtest.LegalCase[relay.RelayConfig]{
		{Name: "the defaults", Set: func(*relay.RelayConfig) {}},
		{Name: "lane 0", Set: func(c *relay.RelayConfig) { c.Lane = 0 }},
		{Name: "seed 0", Set: func(c *relay.RelayConfig) { c.CKF.Seed = 0 }},
		{Name: "windows closed at once", Set: func(c *relay.RelayConfig) { c.CKF.PublishEveryNEvents, c.PublishMaxDelay = 8, 0 }},
		{Name: "no count trigger", Set: func(c *relay.RelayConfig) { c.SnapshotEveryDeltas = 0 }},
		{Name: "only the byte trigger", Set: func(c *relay.RelayConfig) { c.SnapshotInterval, c.SnapshotEveryDeltas = 0, 0 }},
		{Name: "no byte trigger", Set: func(c *relay.RelayConfig) { c.SnapshotDeltaRatio = 0 }},
		{Name: "no time trigger: the idle interval is not used", Set: func(c *relay.RelayConfig) { c.SnapshotInterval = 0 }},
		{Name: "no time trigger, no idle interval", Set: func(c *relay.RelayConfig) { c.SnapshotInterval, c.SnapshotIdleInterval = 0, 0 }},
		{Name: "idle lanes as often as busy ones", Set: func(c *relay.RelayConfig) { c.SnapshotIdleInterval = c.SnapshotInterval }},
		{Name: "idle interval 0: the snapshot interval", Set: func(c *relay.RelayConfig) { c.SnapshotIdleInterval = 0 }},
		{Name: "the default filter", Set: func(c *relay.RelayConfig) { c.CKF.ExpectedBlocksPerDC = relay.DefaultRelayExpectedBlocks }},
		{Name: "requests served without coalescing", Set: func(c *relay.RelayConfig) { c.SnapshotRequestMinInterval = 0 }},
		{Name: "explicit transactional id", Set: func(c *relay.RelayConfig) { c.TransactionalID = "relay-7" }},
		{Name: "explicit first incarnation", Set: func(c *relay.RelayConfig) { c.Incarnation = 42 }},
		{Name: "checkpoints on the count trigger only", Set: func(c *relay.RelayConfig) {
			c.Topics.Checkpoints, c.CheckpointInterval = "ckpt", 0
		}},
		{Name: "checkpoints on the time trigger only", Set: func(c *relay.RelayConfig) {
			c.Topics.Checkpoints, c.CheckpointEveryEvents = "ckpt", 0
		}},
		{Name: "no checkpoint topic, no trigger", Set: func(c *relay.RelayConfig) { c.CheckpointInterval, c.CheckpointEveryEvents = 0, 0 }},
		{Name: "lag commits after every transaction", Set: func(c *relay.RelayConfig) { c.LagCommitInterval = 0 }},
		{Name: "explicit lag group", Set: func(c *relay.RelayConfig) { c.LagGroup = "relay-lag" }},
		{Name: "no optional topics", Set: func(c *relay.RelayConfig) {
			c.Topics.SnapshotIndex, c.Topics.Control, c.Topics.DeadLetter = "", "", ""
		}},
	} {
		c := base()
		tc.Set(&c)
		r, err := build(c)
		if err != nil {
			t.Fatalf("%s: %v", tc.Name, err)
		}
		want := c
		if want.TransactionalID == "" {
			want.TransactionalID = "ckf-relay-" + c.Topics.Lanes + "-" + c.Pool.String()
		}
		if want.LagGroup == "" {
			want.LagGroup = "ckf-relay-" + c.Topics.KVEvents + "-" + c.Pool.String()
		}
		if got := r.Config(); !reflect.DeepEqual(got, want) {
			t.Errorf("%s: the relay runs with\n%+v\nnot the configuration given\n%+v", tc.Name, got, want)
		}
	}
}

// TestDefaultRelayConfigIsAWorkingFilter: DefaultRelayConfig's filter is the product's size
// (DefaultRelayExpectedBlocks, 2^19 buckets), not ckf's two-bucket placeholder.
func TestDefaultRelayConfigIsAWorkingFilter(t *testing.T) {
	t.Parallel()
	c := relay.DefaultRelayConfig()
	n, err := c.CKF.BucketCount()
	if err != nil || c.CKF.ExpectedBlocksPerDC != relay.DefaultRelayExpectedBlocks || n != 1<<19 {
		t.Fatalf("default filter: %d blocks, %d buckets (%v); want %d blocks in 2^19 buckets", c.CKF.ExpectedBlocksPerDC, n, err, relay.DefaultRelayExpectedBlocks)
	}
}
