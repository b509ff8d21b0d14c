package relay

import (
	"testing"
	"time"
)

// TestIdleSnapshotIntervalZeroIsTheInterval: SnapshotIdleInterval 0 makes an idle lane's time
// trigger wait SnapshotInterval, as relay.snapshot_idle_interval=0 documents; any other value
// is taken as it is.
func TestIdleSnapshotIntervalZeroIsTheInterval(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ interval, idle, want time.Duration }{
		{time.Minute, 0, time.Minute},
		{time.Minute, time.Hour, time.Hour},
		{time.Minute, time.Minute, time.Minute},
		{0, 0, 0},
	} {
		c := RelayConfig{SnapshotInterval: tc.interval, SnapshotIdleInterval: tc.idle}
		if got := c.idleSnapshotInterval(); got != tc.want {
			t.Errorf("interval %v, idle %v: the idle lane waits %v; want %v", tc.interval, tc.idle, got, tc.want)
		}
	}
}
