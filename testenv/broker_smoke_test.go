package testenv_test

import (
	"cmp"
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/testenv"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestSmokeProduceConsume16Partitions produces 10,000 keyed records across a 16-partition topic
// and consumes every partition back, checking exact payloads and per-partition order.
func TestSmokeProduceConsume16Partitions(t *testing.T) {
	const (
		partitions = 16
		records    = 10_000
	)
	topic := testenv.NewTopic(t, partitions)
	prod := testenv.Client(t, kgo.DefaultProduceTopic(topic), kgo.RequiredAcks(kgo.AllISRAcks()))

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// want[p] is the ordered list of payloads the broker acknowledged on partition p. Records of
	// one key go to one partition, and one producer keeps per-partition order, so the sequence
	// number carried in each value must come back strictly increasing within a partition.
	results := make(chan *kgo.Record, records)
	for i := 0; i < records; i++ {
		r := &kgo.Record{
			Key:   []byte(fmt.Sprintf("key-%03d", i%257)),
			Value: binary.BigEndian.AppendUint64([]byte(fmt.Sprintf("payload-%05d:", i)), uint64(i)),
		}
		prod.Produce(ctx, r, func(r *kgo.Record, err error) {
			if err != nil {
				t.Errorf("produce: %v", err)
			}
			results <- r
		})
	}
	if err := prod.Flush(ctx); err != nil {
		t.Fatalf("flush: %v", err)
	}
	close(results)
	want := make(map[int32][]*kgo.Record)
	for r := range results {
		want[r.Partition] = append(want[r.Partition], r)
	}
	if len(want) != partitions {
		t.Fatalf("records landed on %d partitions, want all %d", len(want), partitions)
	}
	for _, rs := range want {
		// Acknowledgements arrive per batch, not in offset order across batches: sort by offset.
		slices.SortFunc(rs, func(a, b *kgo.Record) int { return cmp.Compare(a.Offset, b.Offset) })
	}

	assign := map[string]map[int32]kgo.Offset{topic: {}}
	for p := int32(0); p < partitions; p++ {
		assign[topic][p] = kgo.NewOffset().AtStart()
	}
	cons := testenv.Client(t, kgo.ConsumePartitions(assign))
	got := make(map[int32][]*kgo.Record)
	total := 0
	for total < records {
		fetches := cons.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("consumed %d of %d records before timeout", total, records)
		}
		fetches.EachError(func(tp string, p int32, err error) { t.Fatalf("fetch %s/%d: %v", tp, p, err) })
		fetches.EachRecord(func(r *kgo.Record) {
			got[r.Partition] = append(got[r.Partition], r)
			total++
		})
	}
	if total != records {
		t.Fatalf("consumed %d records, want %d", total, records)
	}
	for p := int32(0); p < partitions; p++ {
		w, g := want[p], got[p]
		if len(w) != len(g) {
			t.Fatalf("partition %d: consumed %d records, produced %d", p, len(g), len(w))
		}
		var lastSeq uint64
		for i := range w {
			if string(g[i].Key) != string(w[i].Key) || string(g[i].Value) != string(w[i].Value) || g[i].Offset != w[i].Offset {
				t.Fatalf("partition %d index %d: got %q=%q@%d, want %q=%q@%d",
					p, i, g[i].Key, g[i].Value, g[i].Offset, w[i].Key, w[i].Value, w[i].Offset)
			}
			seq := binary.BigEndian.Uint64(g[i].Value[len(g[i].Value)-8:])
			if i > 0 && seq <= lastSeq {
				t.Fatalf("partition %d: produce order broken at offset %d (seq %d after %d)", p, g[i].Offset, seq, lastSeq)
			}
			lastSeq = seq
		}
	}
}
