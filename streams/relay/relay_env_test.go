package relay_test

import (
	"context"
	"testing"

	"github.com/ckf-stream/ckf-stream/testenv"
	"github.com/twmb/franz-go/pkg/kgo"
)

// laneRecords is streamtest.LaneRecords on the test's cluster c: lane's partition of topic from
// its start up to its end at the call, transaction markers left out.
func laneRecords(t *testing.T, c *testenv.Cluster, topic string, lane int32) []*kgo.Record {
	t.Helper()
	ends, err := c.Admin(t).ListEndOffsets(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	end, _ := ends.Lookup(topic, lane)
	cl := c.Client(t, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {lane: kgo.NewOffset().AtStart()}}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords())
	var out []*kgo.Record
	for next := int64(0); next < end.Offset; {
		fs := cl.PollFetches(context.Background())
		if err := fs.Err0(); err != nil {
			t.Fatal(err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			next = r.Offset + 1
			if !r.Attrs.IsControl() {
				out = append(out, r)
			}
		})
	}
	return out
}
