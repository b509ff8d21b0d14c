package relay_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/ckf/producer"
	"github.com/ckf-stream/ckf-stream/streams/internal/streamtest"
	"github.com/ckf-stream/ckf-stream/streams/relay"
	"github.com/ckf-stream/ckf-stream/testenv"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The relay's start-up replay ends exactly at the end offsets it listed at start: after the
// transaction markers, never on a timer, and without the records written after the listing.

// byWorker places a KV event on partition WorkerID mod 2, so each source keeps its order.
func byWorker(ev producer.RouterEvent) int32 { return int32(ev.WorkerID % 2) }

// kvRecords encodes evs as KV records, each on the partition part chooses (for a client with
// the manual partitioner).
func (e *relayEnv) kvRecords(evs []producer.RouterEvent, part func(producer.RouterEvent) int32) []*kgo.Record {
	e.T.Helper()
	rs := make([]*kgo.Record, 0, len(evs))
	for _, ev := range evs {
		b, err := e.Codec.EncodeKvEvent(relay.KvEventOf(ev))
		if err != nil {
			e.T.Fatal(err)
		}
		rs = append(rs, &kgo.Record{Topic: e.kvTopic, Partition: part(ev),
			Key: []byte(strconv.FormatUint(uint64(ev.WorkerID), 10)), Value: b})
	}
	return rs
}

// produceTxn writes rs in one transaction of cl, committed or aborted.
func produceTxn(t *testing.T, cl *kgo.Client, commit bool, rs []*kgo.Record) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), streamtest.Converge)
	defer cancel()
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := cl.ProduceSync(ctx, rs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if err := cl.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
		t.Fatal(err)
	}
}

// TestRelayReplayEndsAtTransactionMarkers: the KV topic is written with transactions. Partition
// 0's log ends with a commit marker, partition 1's with an aborted transaction (after committed
// events), partition 2 is empty. The replay applies exactly the committed events and ends at
// the markers, which no data record carries.
func TestRelayReplayEndsAtTransactionMarkers(t *testing.T) {
	// On the shared broker: the commit and abort markers and the last stable offset as a real broker writes them are what this test shows.
	t.Parallel()
	e := newBrokerRelayEnv(t, 4096, 3)
	const lane = 8
	g := newKvGen(9)
	committed := g.take(120)
	txn := e.Cluster.Client(t, kgo.TransactionalID(testenv.UniqueName(t, "kv-writer")), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	produceTxn(t, txn, true, e.kvRecords(committed, byWorker))
	aborted := newKvGen(10).take(30) // never applied: their chains are unknown to g's reference
	produceTxn(t, txn, false, e.kvRecords(aborted, func(producer.RouterEvent) int32 { return 1 }))
	streamtest.WaitTransactionsSettled(t, e.Cluster.Admin(t), e.kvTopic)

	rr := e.startRelay(e.relayConfig(lane, testenv.UniqueName(t, "relay")), true)
	if s := rr.r.Stats(); s.ReplayedEvents != uint64(len(committed)) || s.Events != 0 || s.Undecodable != 0 || s.Rejected != 0 {
		t.Fatalf("after start-up: %+v; want exactly the %d committed events replayed", s, len(committed))
	}
	compareOwnership(t, rr, newReference(t, e, committed), g)
}

// TestRelayReplayWaitsForHeldPartition: KV partition 1 becomes fetchable only after the relay's
// input client has read five fetch responses without it: partition 0's records, then long polls
// of 250 ms on the idle partitions. The replay does not end meanwhile (one ended by 500 ms
// without a KV record, as before this change, had ended by then with partition 1 unread),
// events written after the relay listed its end offsets are live events, not replayed ones, and
// the state equals the reference's.
func TestRelayReplayWaitsForHeldPartition(t *testing.T) {
	t.Parallel()
	e := newRelayEnv(t, 4096, 2)
	const lane = 10
	g := newKvGen(11)
	kv := e.Cluster.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	produce := func(evs []producer.RouterEvent) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), streamtest.Converge)
		defer cancel()
		if err := kv.ProduceSync(ctx, e.kvRecords(evs, byWorker)...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	before := g.take(150)
	produce(before)

	hold := streamtest.NewFetchHold(e.kvTopic, 5, 1)
	seeds := kgo.SeedBrokers(e.Cluster.Seeds()...)
	rr := e.startRelayWith(relay.RelayParams{
		Config: e.relayConfig(lane, testenv.UniqueName(t, "relay")),
		ClientOptsFor: func(role string) []kgo.Opt {
			if role == "relay-input" {
				return []kgo.Opt{seeds, kgo.WithHooks(hold), kgo.FetchMaxWait(250 * time.Millisecond)}
			}
			return []kgo.Opt{seeds}
		},
	}, false)
	select {
	case <-hold.Held():
	case err := <-rr.done:
		t.Fatalf("relay stopped: %v", err)
	case <-time.After(streamtest.Converge):
		t.Fatal("the relay's input client read no fetch while partition 1 was held")
	}
	select {
	case <-rr.r.Started():
		t.Fatalf("the replay ended while partition 1 was held: %+v", rr.r.Stats())
	default:
	}
	after := g.take(60) // the relay listed its end offsets before its input client fetched
	produce(after)
	hold.Release()
	select {
	case <-rr.r.Started():
	case err := <-rr.done:
		t.Fatalf("relay stopped: %v", err)
	case <-time.After(streamtest.Converge):
		t.Fatal("the relay did not start after partition 1 was released")
	}
	if s := rr.r.Stats(); s.ReplayedEvents != uint64(len(before)) {
		t.Fatalf("replayed %d events; want exactly the %d written before the start: %+v", s.ReplayedEvents, len(before), s)
	}
	waitApplied(t, rr, uint64(len(before)+len(after)))
	if s := rr.r.Stats(); s.ReplayedEvents != uint64(len(before)) || s.Events != uint64(len(after)) {
		t.Fatalf("%d replayed and %d live events; want %d and %d", s.ReplayedEvents, s.Events, len(before), len(after))
	}
	compareOwnership(t, rr, newReference(t, e, before, after), g)
}
