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
	for _, tc := range []illegalCase[relay.RelayConfig]{
		{"Topics.KVEvents", func(c *relay.RelayConfig) { c.Topics.KVEvents = "" }},
		{"Topics.Lanes", func(c *relay.RelayConfig) { c.Topics.Lanes = "" }},
		{"Pool", func(c *relay.RelayConfig) { c.Pool = ckf.PoolID{} }},
		{"Lane", func(c *relay.RelayConfig) { c.Lane = ckf.LaneCount }},
		{"CKF.ExpectedBlocksPerDC", func(c *relay.RelayConfig) { c.CKF.ExpectedBlocksPerDC = 0 }},
		{"CKF", func(c *relay.RelayConfig) { c.CKF.MaxKicks = 0 }},
		{"CKF", func(c *relay.RelayConfig) { c.CKF.VerificationWindow = 0 }},
		{"CKF.PublishEveryNEvents", func(c *relay.RelayConfig) { c.CKF.PublishEveryNEvents = 0 }},
		{"CKF.ExpectedBlocksPerDC", func(c *relay.RelayConfig) { c.CKF.ExpectedBlocksPerDC = 1 << 62 }},
		{"CKF.ExpectedBlocksPerDC", func(c *relay.RelayConfig) { c.CKF.ExpectedBlocksPerDC = 1 << 30 }}, // 2^29 buckets: over the wire's 2^24
		{"LayoutGeneration", func(c *relay.RelayConfig) { c.LayoutGeneration = 0 }},
		{"PublishMaxDelay", func(c *relay.RelayConfig) { c.PublishMaxDelay = -1 }},
		{"MaxDeltasPerTransaction", func(c *relay.RelayConfig) { c.MaxDeltasPerTransaction = 0 }},
		{"SnapshotInterval", func(c *relay.RelayConfig) { c.SnapshotInterval = -time.Second }},
		{"SnapshotInterval", func(c *relay.RelayConfig) {
			c.SnapshotInterval, c.SnapshotEveryDeltas, c.SnapshotDeltaRatio = 0, 0, 0
		}},
		{"SnapshotDeltaRatio", func(c *relay.RelayConfig) { c.SnapshotDeltaRatio = -1 }},
		{"SnapshotDeltaRatio", func(c *relay.RelayConfig) { c.SnapshotDeltaRatio = math.NaN() }},
		{"SnapshotIdleInterval", func(c *relay.RelayConfig) { c.SnapshotIdleInterval = -1 }},
		{"SnapshotIdleInterval", func(c *relay.RelayConfig) { c.SnapshotIdleInterval = c.SnapshotInterval - 1 }},
		{"SnapshotIdleInterval", func(c *relay.RelayConfig) { c.SnapshotInterval, c.SnapshotIdleInterval = 0, -1 }},
		{"SnapshotRequestMinInterval", func(c *relay.RelayConfig) { c.SnapshotRequestMinInterval = -1 }},
		{"HeartbeatInterval", func(c *relay.RelayConfig) { c.HeartbeatInterval = 0 }},
		{"HeartbeatInterval", func(c *relay.RelayConfig) { c.HeartbeatInterval = -time.Second }},
		{"ChunkWords", func(c *relay.RelayConfig) { c.ChunkWords = 0 }},
		{"WriteTimeout", func(c *relay.RelayConfig) { c.WriteTimeout = 0 }},
		{"StopTimeout", func(c *relay.RelayConfig) { c.StopTimeout = 0 }},
		{"MaxPollRecords", func(c *relay.RelayConfig) { c.MaxPollRecords = 0 }},
		{"CheckpointInterval", func(c *relay.RelayConfig) { c.CheckpointInterval = -1 }},
		{"CheckpointInterval", func(c *relay.RelayConfig) {
			c.Topics.Checkpoints, c.CheckpointInterval, c.CheckpointEveryEvents = "ckpt", 0, 0
		}},
		{"CheckpointChunkBytes", func(c *relay.RelayConfig) { c.CheckpointChunkBytes = 0 }},
		{"LagCommitInterval", func(c *relay.RelayConfig) { c.LagCommitInterval = -1 }},
	} {
		c := base()
		tc.set(&c)
		_, err := build(c)
		streamtest.WantConfigError(t, err, "relay", tc.field)
	}
	for _, tc := range []legalCase[relay.RelayConfig]{
		{"the defaults", func(*relay.RelayConfig) {}},
		{"lane 0", func(c *relay.RelayConfig) { c.Lane = 0 }},
		{"seed 0", func(c *relay.RelayConfig) { c.CKF.Seed = 0 }},
		{"windows closed at once", func(c *relay.RelayConfig) { c.CKF.PublishEveryNEvents, c.PublishMaxDelay = 8, 0 }},
		{"no count trigger", func(c *relay.RelayConfig) { c.SnapshotEveryDeltas = 0 }},
		{"only the byte trigger", func(c *relay.RelayConfig) { c.SnapshotInterval, c.SnapshotEveryDeltas = 0, 0 }},
		{"no byte trigger", func(c *relay.RelayConfig) { c.SnapshotDeltaRatio = 0 }},
		{"no time trigger: the idle interval is not used", func(c *relay.RelayConfig) { c.SnapshotInterval = 0 }},
		{"no time trigger, no idle interval", func(c *relay.RelayConfig) { c.SnapshotInterval, c.SnapshotIdleInterval = 0, 0 }},
		{"idle lanes as often as busy ones", func(c *relay.RelayConfig) { c.SnapshotIdleInterval = c.SnapshotInterval }},
		{"idle interval 0: the snapshot interval", func(c *relay.RelayConfig) { c.SnapshotIdleInterval = 0 }},
		{"the default filter", func(c *relay.RelayConfig) { c.CKF.ExpectedBlocksPerDC = relay.DefaultRelayExpectedBlocks }},
		{"requests served without coalescing", func(c *relay.RelayConfig) { c.SnapshotRequestMinInterval = 0 }},
		{"explicit transactional id", func(c *relay.RelayConfig) { c.TransactionalID = "relay-7" }},
		{"explicit first incarnation", func(c *relay.RelayConfig) { c.Incarnation = 42 }},
		{"checkpoints on the count trigger only", func(c *relay.RelayConfig) {
			c.Topics.Checkpoints, c.CheckpointInterval = "ckpt", 0
		}},
		{"checkpoints on the time trigger only", func(c *relay.RelayConfig) {
			c.Topics.Checkpoints, c.CheckpointEveryEvents = "ckpt", 0
		}},
		{"no checkpoint topic, no trigger", func(c *relay.RelayConfig) { c.CheckpointInterval, c.CheckpointEveryEvents = 0, 0 }},
		{"lag commits after every transaction", func(c *relay.RelayConfig) { c.LagCommitInterval = 0 }},
		{"explicit lag group", func(c *relay.RelayConfig) { c.LagGroup = "relay-lag" }},
		{"no optional topics", func(c *relay.RelayConfig) {
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
