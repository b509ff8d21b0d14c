package streamtest

import (
	"context"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// LaneRecords reads lane's partition of topic on the shared test broker from its start up to its
// end at the call and returns the committed records, transaction markers left out.
func LaneRecords(t *testing.T, topic string, lane int32) []*kgo.Record {
	t.Helper()
	return BrokerKafka(t).LaneRecords(t, topic, lane)
}

// LaneRecords is LaneRecords on k.
func (k *Kafka) LaneRecords(t testing.TB, topic string, lane int32) []*kgo.Record {
	t.Helper()
	ends, err := k.Admin(t).ListEndOffsets(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	end, _ := ends.Lookup(topic, lane)
	cl := k.Client(t, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {lane: kgo.NewOffset().AtStart()}}),
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
