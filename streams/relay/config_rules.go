package relay

import (
	"fmt"
	"math"
	"time"

	"github.com/ckf-stream/ckf-stream/ckf"
)

// The rules of the relay settings a deployment chooses (the lane, the filter size and cadence,
// the snapshot, heartbeat and checkpoint timers), each in one place: NewRelay applies them to a
// RelayConfig, and the process configuration (app/config, section relay) applies the same
// functions to its own fields, naming them by their paths. One setting, one rule, one meaning.

// DefaultRelayExpectedBlocks is DefaultRelayConfig's filter size (CKF.ExpectedBlocksPerDC) and
// the process configuration's (relay.expected_blocks, indexer.expected_blocks_per_dc): 1,048,576
// blocks give 524,288 buckets, 4 MiB per lane on an indexer. ckf's own default
// (ckf.DefaultExpectedBlocksPerDC, 1) is a placeholder two buckets wide, no filter a relay can
// publish usefully.
const DefaultRelayExpectedBlocks uint64 = 1 << 20

// SettingNames turns a RelayConfig field name ("PublishMaxDelay", "CKF.ExpectedBlocksPerDC")
// into the name the caller's user sets it by; nil keeps RelayConfig's names.
type SettingNames func(field string) string

func (n SettingNames) of(field string) string {
	if n == nil {
		return field
	}
	return n(field)
}

// SettingProblem is one broken rule of a relay setting.
type SettingProblem struct {
	Field  string // the setting, as RelayConfig names it
	Reason string // why, naming other settings through the caller's SettingNames
	Err    error  // the underlying error (ckf's), if any
}

// CheckLane is RelayConfig.Lane's rule: a physical lane, in [0, ckf.MaxLanes) (consumer §16).
// It takes an int so that a configuration file's value is checked before it is narrowed to a
// lane.
func CheckLane(lane int) error {
	if lane < 0 || lane >= ckf.MaxLanes {
		return fmt.Errorf("%d is not in [0,%d]", lane, ckf.MaxLanes-1)
	}
	return nil
}

// CheckSettings applies the rules of the deployment's settings in c (every rule, in field
// order; CKF fields other than the filter size and cadence are ckf's, checked by NewRelay):
//
//	CKF.ExpectedBlocksPerDC  > 0, and its bucket count at most ckf.MaxWireBucketCount
//	CKF.PublishEveryNEvents  >= 1
//	PublishMaxDelay          >= 0 (0: a window closes once the poll that opened it is applied)
//	SnapshotInterval         >= 0 (0: no time trigger); with SnapshotEveryDeltas and
//	                         SnapshotDeltaRatio, at least one snapshot trigger on
//	SnapshotDeltaRatio       >= 0 and a number (0: no byte trigger)
//	SnapshotIdleInterval     >= 0; 0 means SnapshotInterval (idle lanes snapshot as often as
//	                         busy ones); otherwise at least SnapshotInterval
//	HeartbeatInterval        > 0
//	CheckpointInterval       >= 0 (0: no time trigger); with Topics.Checkpoints set, it or
//	                         CheckpointEveryEvents on
//	SilentSourceAfter        > 0
//	ForgetSourceAfter        > SilentSourceAfter
//
// Lane has its own rule (CheckLane). name names the settings in the reasons.
func (c RelayConfig) CheckSettings(name SettingNames) []SettingProblem {
	var out []SettingProblem
	fail := func(field string, err error, format string, args ...any) {
		out = append(out, SettingProblem{Field: field, Reason: fmt.Sprintf(format, args...), Err: err})
	}
	nonNegative := func(field string, d time.Duration) bool {
		if d < 0 {
			fail(field, nil, "%v is negative", d)
			return false
		}
		return true
	}
	if n := c.CKF.ExpectedBlocksPerDC; n == 0 {
		fail("CKF.ExpectedBlocksPerDC", nil, "must be positive")
	} else if b, err := ckf.BucketCountFor(n); err != nil || b > ckf.MaxWireBucketCount {
		fail("CKF.ExpectedBlocksPerDC", err, "%d needs more than %d buckets", n, ckf.MaxWireBucketCount)
	}
	if c.CKF.PublishEveryNEvents == 0 {
		fail("CKF.PublishEveryNEvents", nil, "must be positive")
	}
	nonNegative("PublishMaxDelay", c.PublishMaxDelay)
	if nonNegative("SnapshotInterval", c.SnapshotInterval) &&
		c.SnapshotInterval == 0 && c.SnapshotEveryDeltas == 0 && c.SnapshotDeltaRatio == 0 {
		fail("SnapshotInterval", nil, "is 0 and so are %s and %s: at least one snapshot trigger must be on (a recovering indexer needs a recent snapshot)",
			name.of("SnapshotEveryDeltas"), name.of("SnapshotDeltaRatio"))
	}
	if c.SnapshotDeltaRatio < 0 || math.IsNaN(c.SnapshotDeltaRatio) {
		fail("SnapshotDeltaRatio", nil, "%v is negative or not a number", c.SnapshotDeltaRatio)
	}
	if nonNegative("SnapshotIdleInterval", c.SnapshotIdleInterval) &&
		c.SnapshotIdleInterval > 0 && c.SnapshotIdleInterval < c.SnapshotInterval {
		fail("SnapshotIdleInterval", nil, "%v is shorter than %s (%v); 0 snapshots idle lanes as often as busy ones",
			c.SnapshotIdleInterval, name.of("SnapshotInterval"), c.SnapshotInterval)
	}
	if c.HeartbeatInterval <= 0 {
		fail("HeartbeatInterval", nil, "%v is not positive", c.HeartbeatInterval)
	}
	if nonNegative("CheckpointInterval", c.CheckpointInterval) &&
		c.Topics.Checkpoints != "" && c.CheckpointInterval == 0 && c.CheckpointEveryEvents == 0 {
		fail("CheckpointInterval", nil, "is 0 and so is %s, with a checkpoint topic set: at least one checkpoint trigger must be on",
			name.of("CheckpointEveryEvents"))
	}
	if c.SilentSourceAfter <= 0 {
		fail("SilentSourceAfter", nil, "%v is not positive", c.SilentSourceAfter)
	}
	if c.ForgetSourceAfter <= c.SilentSourceAfter {
		fail("ForgetSourceAfter", nil, "%v is not above %s (%v): a source must be silent before it is forgotten",
			c.ForgetSourceAfter, name.of("SilentSourceAfter"), c.SilentSourceAfter)
	}
	return out
}

// idleSnapshotInterval is the time trigger's period while the lane is idle:
// SnapshotIdleInterval, or SnapshotInterval when it is 0.
func (c RelayConfig) idleSnapshotInterval() time.Duration {
	if c.SnapshotIdleInterval == 0 {
		return c.SnapshotInterval
	}
	return c.SnapshotIdleInterval
}
