package relay_test

import (
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/ckf/producer"
	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/ckf-stream/ckf-stream/streams/relay"
	"github.com/ckf-stream/ckf-stream/testenv"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestRelayAsOfOnTheBroker: the as_of a relay stamps on its lane records, read back from the
// lane. On the shared broker because what it checks hangs on how a real broker answers fetches
// (last stable offsets, long polls that a produce ends, full fetch responses). KV events are
// produced in batches with known timestamps while a relay that takes few records per poll
// (MaxPollRecords 25) applies them, so it is behind for most of its deltas; then it idles.
//
//   - every record carries as_of, and as_of never goes back along the lane;
//   - the k-th delta after the start-up snapshot reflects at least the first k events (one
//     publication per event, each changing the filter at most once per delta): its as_of is at
//     or after the k-th event's timestamp;
//   - no record's as_of is later than the relay's clock when it produced the record (the
//     record's own Kafka timestamp, which the relay's client sets at produce);
//   - the heartbeats of the idle relay carry their own time: as_of between the heartbeat's
//     producer_time and its Kafka timestamp.
func TestRelayAsOfOnTheBroker(t *testing.T) {
	e := newBrokerRelayEnv(t, 1<<16, 1)
	const lane, batches, perBatch = 5, 8, 40
	cfg := e.relayConfig(lane, testenv.UniqueName(t, "relay"))
	cfg.CKF.PublishEveryNEvents = 1
	cfg.MaxPollRecords = 25
	cfg.HeartbeatInterval = 100 * time.Millisecond
	rr := e.startRelay(cfg, true)
	_, startSeq := rr.inspect(t)

	g := newKvGen(21)
	var stamps []time.Time // the k-th event's Kafka timestamp
	for b := 0; b < batches; b++ {
		rs := make([]*kgo.Record, perBatch)
		ts := time.Now().Truncate(time.Millisecond) // Kafka timestamps are milliseconds
		for i := range rs {
			src := g.source()
			ev := producer.RouterEvent{WorkerID: src.Worker, Event: producer.KvCacheEvent{DpRank: src.Rank, Kind: producer.KvEventStored,
				Stored: producer.StoreData{Blocks: g.blocks([]uint64{g.rng.Uint64()})}}}
			v, err := e.Codec.EncodeKvEvent(relay.KvEventOf(ev))
			if err != nil {
				t.Fatal(err)
			}
			rs[i] = &kgo.Record{Topic: e.kvTopic, Key: []byte(strconv.FormatUint(uint64(ev.WorkerID), 10)), Value: v, Timestamp: ts}
			stamps = append(stamps, ts)
		}
		e.produceRaw(rs...)
	}
	waitApplied(t, rr, uint64(len(stamps)))
	waitHeartbeats(t, rr, 3)

	recs := readLaneRecords(t, e, lane)
	var prev time.Time
	var deltas, behind, heartbeats int // heartbeats: those after the last delta
	for _, r := range recs {
		lr, err := e.Codec.DecodeLaneRecord(r.Value)
		if err != nil {
			t.Fatal(err)
		}
		where := fmt.Sprintf("%v at offset %d", lr.Kind, r.Offset)
		if lr.AsOf.IsZero() {
			t.Fatalf("%s: no as_of", where)
		}
		if lr.AsOf.Before(prev) {
			t.Fatalf("%s: as_of %v goes back from %v", where, lr.AsOf, prev)
		}
		prev = lr.AsOf
		if lr.AsOf.Truncate(time.Millisecond).After(r.Timestamp) {
			t.Fatalf("%s: as_of %v is later than the relay's clock at produce %v", where, lr.AsOf, r.Timestamp)
		}
		switch lr.Kind {
		case schemas.LaneDelta:
			k := int(lr.Delta.Sequence - startSeq) // the k-th delta reflects at least k events
			if k < 1 || k > len(stamps) {
				t.Fatalf("%s: sequence %d, start-up snapshot at %d, %d events", where, lr.Delta.Sequence, startSeq, len(stamps))
			}
			if lr.AsOf.Before(stamps[k-1]) {
				t.Fatalf("%s: delta %d has as_of %v, before its event %d's timestamp %v", where, k, lr.AsOf, k, stamps[k-1])
			}
			deltas++
			if slices.ContainsFunc(stamps, lr.AsOf.Equal) {
				behind++ // stamped with an applied event's timestamp: the partition was behind
			}
		case schemas.LaneHeartbeat:
			if deltas == len(stamps) { // after the last event's delta: the relay is idle
				heartbeats++
				if lr.AsOf.Before(lr.Heartbeat.ProducerTime) {
					t.Fatalf("%s: an idle relay's heartbeat has as_of %v, before its own producer_time %v", where, lr.AsOf, lr.Heartbeat.ProducerTime)
				}
			}
		}
	}
	if deltas != len(stamps) || heartbeats == 0 {
		t.Fatalf("%d deltas for %d events, %d heartbeats after them", deltas, len(stamps), heartbeats)
	}
	t.Logf("%d events, %d deltas (%d stamped with an applied event's timestamp: behind), %d idle heartbeats; last as_of %v",
		len(stamps), deltas, behind, heartbeats, prev)
}

// readLaneRecords reads lane's records (read_committed, markers skipped) up to the partition's
// end now.
func readLaneRecords(t *testing.T, e *relayEnv, lane int32) []*kgo.Record {
	t.Helper()
	return e.Cluster.PartitionRecords(t, e.Topics.Lanes, lane)
}
