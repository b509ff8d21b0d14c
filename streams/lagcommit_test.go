package streams_test

import (
	"context"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/streams"
	"github.com/ckf-stream/ckf-stream/streams/internal/streamtest"
	"github.com/ckf-stream/ckf-stream/testenv"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestLagCommitterCommitsMovedPositions (in process, kfake: a group commit without members and
// the listing of stable offsets need no broker): a commit runs only when the positions moved and
// the interval passed (or it is forced), lands in the group as the given positions, and the lag
// is counted against the stable end, from the log start for a partition without a position.
func TestLagCommitterCommitsMovedPositions(t *testing.T) {
	k := streamtest.NewFakeKafka(t)
	topic := k.NewTopic(t, 3)
	cl := k.Client(t, kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	for p, n := range []int{5, 3, 2} {
		for range n {
			if err := cl.ProduceSync(context.Background(), &kgo.Record{Partition: int32(p), Value: []byte("x")}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	group := testenv.UniqueName(t, "lag")
	c := streams.LagCommitter{Group: group, Topic: topic, Interval: time.Minute, Timeout: 10 * time.Second}
	t0 := time.Unix(1_000_000, 0)

	if c.Pending(nil) || (&streams.LagCommitter{Topic: topic}).Pending(map[int32]int64{0: 1}) {
		t.Fatal("pending with no positions, or with no group")
	}
	pos := map[int32]int64{0: 4, 1: 3}
	if ok, err := c.Commit(cl, t0, pos, false); !ok || err != nil {
		t.Fatalf("first commit: %v %v", ok, err)
	}
	committed := func() map[int32]int64 {
		t.Helper()
		got, err := k.Admin(t).FetchOffsets(context.Background(), group)
		if err != nil {
			t.Fatal(err)
		}
		out := map[int32]int64{}
		got.Each(func(o kadm.OffsetResponse) { out[o.Partition] = o.At })
		return out
	}
	if got := committed(); len(got) != 2 || got[0] != 4 || got[1] != 3 {
		t.Fatalf("group offsets %v, want %v", got, pos)
	}
	if c.Pending(map[int32]int64{0: 4, 1: 3}) {
		t.Fatal("positions just committed are pending")
	}
	moved := map[int32]int64{0: 5, 1: 3}
	if ok, err := c.Commit(cl, t0.Add(time.Second), moved, false); ok || err != nil {
		t.Fatalf("a commit inside the interval ran: %v %v", ok, err)
	}
	if want := t0.Add(time.Minute); !c.NextAt().Equal(want) {
		t.Fatalf("next commit at %v, want %v", c.NextAt(), want)
	}
	if ok, err := c.Commit(cl, t0.Add(time.Second), moved, true); !ok || err != nil {
		t.Fatalf("a forced commit inside the interval: %v %v", ok, err)
	}
	if got := committed(); got[0] != 5 {
		t.Fatalf("group offsets %v after the forced commit, want partition 0 at 5", got)
	}
	// Partition 0 is caught up (5 of 5), 1 too (3 of 3), 2 has no position: 2 from its start.
	lag, err := c.LagFromStable(cl, moved)
	if err != nil || lag != 2 {
		t.Fatalf("lag %d (%v), want 2", lag, err)
	}
	if lag, err := c.LagFromStable(cl, map[int32]int64{0: 1, 1: 3, 2: 2}); err != nil || lag != 4 {
		t.Fatalf("lag %d (%v), want 4", lag, err)
	}
}
