package testenv

import (
	"context"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// PartitionRecords reads partition p of topic on c from its start up to its end at the call and
// returns the committed records (read_committed), transaction markers left out.
func (c *Cluster) PartitionRecords(t testing.TB, topic string, p int32) []*kgo.Record {
	t.Helper()
	ends, err := c.Admin(t).ListEndOffsets(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	end, _ := ends.Lookup(topic, p)
	cl := c.Client(t, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {p: kgo.NewOffset().AtStart()}}),
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
