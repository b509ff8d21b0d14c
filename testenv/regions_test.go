package testenv_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/testenv"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The region tests run real processes: two single-node clusters and MirrorMaker 2 in dedicated
// mode (testenv.StartRegionsT), each test its own. They run under make test-regions; design §8
// says what they establish for the indexer's recovery of a mirrored lane.

// seqRecord is record seq of a lane-like stream on partition p: the value carries the sequence,
// which the checks read back on the mirror.
func seqRecord(topic string, p int32, seq int) *kgo.Record {
	return &kgo.Record{Topic: topic, Partition: p, Key: []byte("pool-" + strconv.Itoa(int(p))),
		Value: []byte("seq-" + strconv.Itoa(seq)), Headers: []kgo.RecordHeader{{Key: "h", Value: []byte(strconv.Itoa(seq))}}}
}

func seqOf(t testing.TB, r *kgo.Record) int {
	t.Helper()
	n, err := strconv.Atoi(strings.TrimPrefix(string(r.Value), "seq-"))
	if err != nil {
		t.Fatalf("record %s/%d@%d: value %q is not seq-N", r.Topic, r.Partition, r.Offset, r.Value)
	}
	return n
}

// laneTopicsToMirror starts the regions for t and creates in region a a lanes-like topic of the
// given partitions and a compacted snapshot-index-like topic, named so that MirrorMaker mirrors
// them.
func laneTopicsToMirror(t *testing.T, lanePartitions int32) (rg *testenv.Regions, a, b *testenv.Cluster, lanes, index string) {
	t.Helper()
	testenv.RegionsSet(t)
	rg = testenv.StartRegionsT(t, testenv.RegionsConfig{})
	a, b = rg.A.Cluster(), rg.B.Cluster()
	lanes = a.NewTopic(t, lanePartitions, testenv.TopicName(testenv.UniqueName(t, "ckf-lanes")))
	index = a.NewTopic(t, 1, testenv.TopicName(testenv.UniqueName(t, "ckf-snapshot-index")), testenv.TopicConfig("cleanup.policy", "compact"))
	return rg, a, b, lanes, index
}

func manualProducer(t testing.TB, c *testenv.Cluster, opts ...kgo.Opt) *kgo.Client {
	return c.Client(t, append([]kgo.Opt{kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0)}, opts...)...)
}

// tail follows every partition of a topic of region b from its start (read_uncommitted: what
// MirrorMaker wrote is all there is) and keeps what it read, with the time each record arrived.
type tail struct {
	mu      sync.Mutex
	recs    map[int32][]*kgo.Record
	arrived map[string]time.Time // value -> first arrival
	cancel  context.CancelFunc
	done    chan struct{}
}

func followRemote(t testing.TB, c *testenv.Cluster, topic string) *tail {
	t.Helper()
	// The remote topic exists once MirrorMaker noticed the source topic (refresh: 1 s).
	adm := c.Admin(t)
	testenv.WaitUntilEvery(t, 100*time.Millisecond, 2*time.Minute, "MirrorMaker creates "+topic, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		td, err := adm.ListTopics(ctx, topic)
		return err == nil && td.Has(topic)
	})
	cl := c.Client(t, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(50*time.Millisecond))
	ctx, cancel := context.WithCancel(context.Background())
	tl := &tail{recs: map[int32][]*kgo.Record{}, arrived: map[string]time.Time{}, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(tl.done)
		for ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			now := time.Now()
			tl.mu.Lock()
			fs.EachRecord(func(r *kgo.Record) {
				tl.recs[r.Partition] = append(tl.recs[r.Partition], r)
				if _, ok := tl.arrived[string(r.Value)]; !ok {
					tl.arrived[string(r.Value)] = now
				}
			})
			tl.mu.Unlock()
		}
	}()
	t.Cleanup(func() { cancel(); <-tl.done })
	return tl
}

// partition returns a copy of what arrived on p.
func (tl *tail) partition(p int32) []*kgo.Record {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	return slices.Clone(tl.recs[p])
}

// distinct is the number of distinct sequences that arrived on p.
func (tl *tail) distinct(t testing.TB, p int32) int {
	seen := map[int]bool{}
	for _, r := range tl.partition(p) {
		seen[seqOf(t, r)] = true
	}
	return len(seen)
}

func (tl *tail) arrival(value string) (time.Time, bool) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	at, ok := tl.arrived[value]
	return at, ok
}

// mirrorAccount checks what arrived on a partition of the mirror against sequences 0..n-1
// written in order at the source: every sequence is there (nothing lost), the mirror never
// jumps ahead of what it has delivered (no gap, no reordering), and a step back is a replay of a
// contiguous run of what was delivered already (at-least-once after a restart). It returns the
// number of duplicates.
func mirrorAccount(t testing.TB, recs []*kgo.Record, n int) (dups int) {
	t.Helper()
	next := 0 // the lowest sequence not yet delivered
	prev := -1
	for _, r := range recs {
		s := seqOf(t, r)
		switch {
		case s == next:
			next++
		case s > next:
			t.Fatalf("offset %d: sequence %d arrived before %d (a gap or a reordering)", r.Offset, s, next)
		case prev >= 0 && s != prev+1 && s > prev:
			t.Fatalf("offset %d: a replay skipped from %d to %d", r.Offset, prev, s)
		default:
			dups++
		}
		prev = s
	}
	if next != n {
		t.Fatalf("%d of %d sequences arrived", next, n)
	}
	return dups
}

// TestRegionsMirrorLanes: records produced to a lane-like topic in region a appear in region b's
// mirrored topic (a.<topic>), in order per partition, with their keys, headers and timestamps;
// only committed records cross (MirrorMaker reads read_committed), so the mirrored offsets differ
// from the source's: a committed transaction's marker and an aborted transaction's records take
// source offsets that the mirror never writes. Seeking the mirror by a source record's timestamp
// lands at or before that record's copy, which is what a remote indexer's recovery relies on
// (design §8). The mirrored snapshot index keeps its compaction.
func TestRegionsMirrorLanes(t *testing.T) {
	rg, a, b, lanes, index := laneTopicsToMirror(t, 4)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// Partition 0: 10 committed records, 5 aborted, 10 committed, each batch its own transaction.
	// Partitions 1-3: 20 plain records each.
	txn := manualProducer(t, a, kgo.TransactionalID(testenv.UniqueName(t, "txn")))
	seq := 0
	for i, commit := range []bool{true, false, true} {
		if err := txn.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		for range 10 - 5*(i%2) {
			s := seq
			if !commit {
				s = 1000 + seq // aborted: never to be seen in b
			} else {
				seq++
			}
			if err := txn.ProduceSync(ctx, seqRecord(lanes, 0, s)).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
		if err := txn.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
			t.Fatal(err)
		}
	}
	plain := manualProducer(t, a)
	for p := int32(1); p < 4; p++ {
		for s := range 20 {
			if err := plain.ProduceSync(ctx, seqRecord(lanes, p, s)).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := plain.ProduceSync(ctx, &kgo.Record{Topic: index, Key: []byte("lane-0"), Value: []byte("entry")}).FirstErr(); err != nil {
		t.Fatal(err)
	}

	remote := rg.RemoteTopic(lanes)
	if remote != "a."+lanes {
		t.Fatalf("remote topic %q, want a.%s", remote, lanes)
	}
	tl := followRemote(t, b, remote)
	want := map[int32]int{0: 20, 1: 20, 2: 20, 3: 20}
	for p, n := range want {
		testenv.WaitUntil(t, 2*time.Minute, fmt.Sprintf("partition %d mirrored", p), func() bool { return len(tl.partition(p)) >= n },
			func() string { return fmt.Sprintf("%d records", len(tl.partition(p))) })
	}
	srcAll := map[int32][]*kgo.Record{}
	for p, n := range want {
		src := a.PartitionRecords(t, lanes, p)
		srcAll[p] = src
		got := tl.partition(p)
		if len(src) != n {
			t.Fatalf("source partition %d: %d committed records, want %d", p, len(src), n)
		}
		if dups := mirrorAccount(t, got, n); dups != 0 {
			t.Fatalf("partition %d: %d duplicates without a restart", p, dups)
		}
		for i, r := range got {
			s := src[i]
			if string(r.Key) != string(s.Key) || string(r.Value) != string(s.Value) || !r.Timestamp.Equal(s.Timestamp) ||
				len(r.Headers) == 0 || string(r.Headers[0].Value) != string(s.Headers[0].Value) {
				t.Fatalf("partition %d record %d: mirror %q/%q at %v, source %q/%q at %v", p, i, r.Key, r.Value, r.Timestamp, s.Key, s.Value, s.Timestamp)
			}
			if r.Offset != int64(i) {
				t.Fatalf("partition %d: the mirror's record %d is at offset %d", p, i, r.Offset)
			}
		}
	}
	// The offsets differ on partition 0: at the source the 20 committed records are at 0-9 and
	// 17-26 (the first commit's marker at 10, the aborted 5 at 11-15, the abort's marker at 16),
	// in the mirror at 0-19.
	src0 := srcAll[0]
	var moved []string
	for i, r := range tl.partition(0) {
		if src0[i].Offset != r.Offset {
			moved = append(moved, fmt.Sprintf("%s %d->%d", r.Value, src0[i].Offset, r.Offset))
		}
	}
	if len(moved) != 10 || src0[19].Offset != 26 {
		t.Fatalf("offsets source->mirror differ for %d records (want the 10 after the aborted transaction; last source offset %d): %v",
			len(moved), src0[19].Offset, moved)
	}
	t.Logf("partition 0, source offset -> mirror offset: %s", strings.Join(moved, ", "))

	// Seek by time on the mirror: the first offset whose timestamp is at or after a source
	// record's is at or before that record's copy.
	badm := b.Admin(t)
	for _, i := range []int{0, 10, 19} {
		ts := src0[i].Timestamp.UnixMilli()
		lo, err := badm.ListOffsetsAfterMilli(ctx, ts, remote)
		if err != nil {
			t.Fatal(err)
		}
		at, _ := lo.Lookup(remote, 0)
		if at.Err != nil || at.Offset > int64(i) {
			t.Fatalf("ListOffsets(%d ms) on the mirror gave %+v; the record's copy is at %d", ts, at, i)
		}
	}
	// Nothing aborted crossed, not even as an uncommitted record.
	for _, r := range tl.partition(0) {
		if seqOf(t, r) >= 1000 {
			t.Fatalf("aborted record %q mirrored at offset %d", r.Value, r.Offset)
		}
	}

	// The snapshot index is mirrored, compacted like its source.
	rindex := rg.RemoteTopic(index)
	testenv.WaitUntilEvery(t, 100*time.Millisecond, 2*time.Minute, "the snapshot index mirrored", func() bool {
		ends, err := badm.ListEndOffsets(ctx, rindex)
		if err != nil {
			return false
		}
		o, ok := ends.Lookup(rindex, 0)
		return ok && o.Err == nil && o.Offset == 1
	})
	rc, err := badm.DescribeTopicConfigs(ctx, rindex)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := rc.On(rindex, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cfg.Configs {
		if c.Key == "cleanup.policy" && (c.Value == nil || *c.Value != "compact") {
			t.Fatalf("%s cleanup.policy %v, want compact", rindex, c.MaybeValue())
		}
	}
}

// TestRegionsWANCutAndHeal: a WAN cut stops mirroring (the records produced in region a during
// the cut do not reach b, checked once MirrorMaker's own client has timed out a request to a, so
// it did try), and the heal resumes it with nothing lost and nothing reordered within a partition.
func TestRegionsWANCutAndHeal(t *testing.T) {
	testenv.RegionsSet(t)
	rg := testenv.StartRegionsT(t, testenv.RegionsConfig{})
	a, b := rg.A.Cluster(), rg.B.Cluster()
	lanes := a.NewTopic(t, 2, testenv.TopicName(testenv.UniqueName(t, "ckf-lanes")))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	prod := manualProducer(t, a)
	produce := func(from, to int) {
		t.Helper()
		for s := from; s < to; s++ {
			for p := int32(0); p < 2; p++ {
				if err := prod.ProduceSync(ctx, seqRecord(lanes, p, s)).FirstErr(); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	produce(0, 100)
	tl := followRemote(t, b, rg.RemoteTopic(lanes))
	for p := int32(0); p < 2; p++ {
		testenv.WaitUntil(t, 2*time.Minute, "the first 100 mirrored", func() bool { return tl.distinct(t, p) == 100 })
	}

	logBase := len(rg.B.Mirror.LogLines())
	if err := rg.CutWAN(); err != nil {
		t.Fatal(err)
	}
	cut := time.Now()
	produce(100, 200)
	// MirrorMaker's clients notice the silence only by their request timeout (30 s): once one of
	// its requests to region a timed out, its fetches of the records above were lost in the cut.
	testenv.WaitUntilEvery(t, 200*time.Millisecond, 3*time.Minute, "a MirrorMaker request to region a timed out", func() bool {
		ls := rg.B.Mirror.LogLines()
		return len(ls) > logBase && slices.ContainsFunc(ls[logBase:], func(l string) bool { return strings.Contains(l, "due to request timeout") })
	})
	for p := int32(0); p < 2; p++ {
		if n := tl.distinct(t, p); n != 100 {
			t.Fatalf("partition %d: %d sequences in b during the cut, want the 100 from before it", p, n)
		}
	}
	if err := rg.HealWAN(); err != nil {
		t.Fatal(err)
	}
	healed := time.Now()
	for p := int32(0); p < 2; p++ {
		testenv.WaitUntil(t, 3*time.Minute, "the records of the cut mirrored after the heal", func() bool { return tl.distinct(t, p) == 200 },
			func() string { return fmt.Sprintf("%d sequences", tl.distinct(t, p)) })
	}
	t.Logf("cut for %v; everything in b %v after the heal", healed.Sub(cut).Round(time.Millisecond), time.Since(healed).Round(time.Millisecond))
	for p := int32(0); p < 2; p++ {
		if dups := mirrorAccount(t, tl.partition(p), 200); dups > 0 {
			t.Logf("partition %d: %d duplicates across the cut", p, dups)
		}
	}
}

// TestRegionsMirrorMakerKill9: MirrorMaker killed (kill -9) mid-stream and started again loses
// nothing and reorders nothing within a partition; it mirrors again what it had mirrored since
// its last flush of source positions (at-least-once), counted here: the duplicates the lane
// protocol's sequences must recognise (design §8).
func TestRegionsMirrorMakerKill9(t *testing.T) {
	testenv.RegionsSet(t)
	rg := testenv.StartRegionsT(t, testenv.RegionsConfig{})
	a, b := rg.A.Cluster(), rg.B.Cluster()
	lanes := a.NewTopic(t, 2, testenv.TopicName(testenv.UniqueName(t, "ckf-lanes")))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const total = 1500
	prod := manualProducer(t, a)
	produced := make(chan error, 1)
	go func() {
		var err error
		for s := 0; s < total && err == nil; s++ {
			for p := int32(0); p < 2 && err == nil; p++ {
				err = prod.ProduceSync(ctx, seqRecord(lanes, p, s)).FirstErr()
			}
		}
		produced <- err
	}()
	tl := followRemote(t, b, rg.RemoteTopic(lanes))
	testenv.WaitUntil(t, 2*time.Minute, "a first part mirrored", func() bool { return tl.distinct(t, 0) >= 200 })
	before := tl.distinct(t, 0)
	if err := rg.B.Mirror.Kill9(); err != nil {
		t.Fatal(err)
	}
	if err := rg.B.Mirror.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-produced; err != nil {
		t.Fatal(err)
	}
	for p := int32(0); p < 2; p++ {
		testenv.WaitUntil(t, 3*time.Minute, "everything mirrored after the restart", func() bool { return tl.distinct(t, p) == total },
			func() string { return fmt.Sprintf("partition %d: %d sequences", p, tl.distinct(t, p)) })
	}
	for p := int32(0); p < 2; p++ {
		dups := mirrorAccount(t, tl.partition(p), total)
		t.Logf("partition %d: killed with %d sequences of %d mirrored (partition 0); %d records in b, %d duplicates", p, before, total,
			len(tl.partition(p)), dups)
	}
}

// TestRegionsMirrorLatency measures produce-in-a to visible-in-b over a few hundred records with
// the WAN adding nothing and then 20 ms each way. The records are produced at a steady rate (one
// every 20 ms: the load, not a wait for an outcome), so they meet MirrorMaker's fetch loop at any
// point of its round trip. The figures go to docs/RELIABILITY.md; nothing here is a threshold.
func TestRegionsMirrorLatency(t *testing.T) {
	testenv.RegionsSet(t)
	rg := testenv.StartRegionsT(t, testenv.RegionsConfig{})
	a, b := rg.A.Cluster(), rg.B.Cluster()
	lanes := a.NewTopic(t, 1, testenv.TopicName(testenv.UniqueName(t, "ckf-lanes")))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	prod := manualProducer(t, a)
	if err := prod.ProduceSync(ctx, seqRecord(lanes, 0, 0)).FirstErr(); err != nil {
		t.Fatal(err)
	}
	tl := followRemote(t, b, rg.RemoteTopic(lanes))
	seq := 1
	testenv.WaitUntil(t, 2*time.Minute, "the first record mirrored", func() bool { return tl.distinct(t, 0) == 1 })
	const n, warm = 300, 20 // the first 20 of each phase warm the path up and are not counted
	for _, delay := range []time.Duration{0, 20 * time.Millisecond} {
		if delay > 0 {
			if err := rg.A.WAN.Add(testenv.Latency("upstream", delay, 0)); err != nil {
				t.Fatal(err)
			}
			if err := rg.A.WAN.Add(testenv.Latency("downstream", delay, 0)); err != nil {
				t.Fatal(err)
			}
		}
		type sentRec struct {
			value string
			at    time.Time
		}
		var sent []sentRec
		tick := time.NewTicker(20 * time.Millisecond)
		for range n + warm {
			<-tick.C
			r := seqRecord(lanes, 0, seq)
			seq++
			at := time.Now()
			if err := prod.ProduceSync(ctx, r).FirstErr(); err != nil {
				t.Fatal(err)
			}
			sent = append(sent, sentRec{string(r.Value), at})
		}
		tick.Stop()
		last := sent[len(sent)-1].value
		testenv.WaitUntil(t, time.Minute, "the phase's records mirrored", func() bool { _, ok := tl.arrival(last); return ok })
		var lat []time.Duration
		for _, s := range sent[warm:] {
			at, ok := tl.arrival(s.value)
			if !ok {
				t.Fatalf("%s never arrived in b", s.value)
			}
			lat = append(lat, at.Sub(s.at))
		}
		slices.Sort(lat)
		t.Logf("WAN one-way delay %v: produce in a to visible in b over %d records, one every 20 ms: p50 %v, p90 %v, p99 %v, max %v",
			delay, n, lat[n/2].Round(100*time.Microsecond), lat[n*90/100].Round(100*time.Microsecond), lat[n*99/100].Round(100*time.Microsecond),
			lat[n-1].Round(100*time.Microsecond))
	}
}

// TestRegionsIdentityPolicy: under the identity policy (a->b only) region a's topic keeps its
// name in region b, partition for partition and in order; nothing is mirrored back to a.
func TestRegionsIdentityPolicy(t *testing.T) {
	testenv.RegionsSet(t)
	rg := testenv.StartRegionsT(t, testenv.RegionsConfig{Policy: testenv.MirrorIdentityPolicy})
	a, b := rg.A.Cluster(), rg.B.Cluster()
	lanes := a.NewTopic(t, 2, testenv.TopicName(testenv.UniqueName(t, "ckf-lanes")))
	if rg.RemoteTopic(lanes) != lanes {
		t.Fatalf("remote topic %q under the identity policy, want %q", rg.RemoteTopic(lanes), lanes)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	prod := manualProducer(t, a)
	for s := range 50 {
		for p := int32(0); p < 2; p++ {
			if err := prod.ProduceSync(ctx, seqRecord(lanes, p, s)).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	tl := followRemote(t, b, lanes)
	for p := int32(0); p < 2; p++ {
		testenv.WaitUntil(t, 2*time.Minute, "mirrored under the same name", func() bool { return tl.distinct(t, p) == 50 })
		if dups := mirrorAccount(t, tl.partition(p), 50); dups != 0 {
			t.Fatalf("partition %d: %d duplicates without a restart", p, dups)
		}
	}
	// b->a is off: a has no topic named after b.
	tds, err := a.Admin(t).ListTopics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range tds.Names() {
		if strings.HasPrefix(name, "b.") {
			t.Fatalf("region a has %s: mirrored back", name)
		}
	}
}

// TestRegionsSnapshotFoundByTimeOnTheMirror runs design §8's recovery seek on a real mirror with
// lane-like records: region a's "relay" writes deltas, an aborted transaction (so the offsets
// shift), then a snapshot of three chunks and its index entry in one transaction (the entry's
// write time taken once the chunks are acknowledged, as the relay's lane writer does), then more
// deltas. In region b the test reads the mirrored index entry, lists the mirrored lane's offset
// for the write time less a margin, reads forward for chunk 0 of the entry's sequence, and
// doubles the margin when it meets a later chunk first. It must find chunk 0 at the mirror's
// offset, which is not the entry's source offset.
func TestRegionsSnapshotFoundByTimeOnTheMirror(t *testing.T) {
	rg, a, b, lanes, index := laneTopicsToMirror(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	relay := manualProducer(t, a, kgo.TransactionalID(testenv.UniqueName(t, "relay")))
	txn := func(commit bool, recs func() []*kgo.Record) []*kgo.Record {
		t.Helper()
		if err := relay.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		out := recs()
		if err := relay.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
			t.Fatal(err)
		}
		return out
	}
	produce := func(v string) *kgo.Record {
		t.Helper()
		r := &kgo.Record{Topic: lanes, Partition: 0, Value: []byte(v)}
		if err := relay.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
		return r
	}
	deltas := func(from, to int) func() []*kgo.Record {
		return func() []*kgo.Record {
			for s := from; s < to; s++ {
				produce("delta-" + strconv.Itoa(s))
			}
			return nil
		}
	}
	txn(true, deltas(1, 40))
	txn(false, deltas(40, 50)) // aborted: never mirrored, but it takes source offsets
	const seq = 39
	var entry string
	snap := txn(true, func() []*kgo.Record {
		var chunks []*kgo.Record
		for i := range 3 {
			chunks = append(chunks, produce(fmt.Sprintf("chunk-%d-%d", seq, i)))
		}
		// The entry: sequence, chunk count, the source offset of chunk 0, the write time.
		entry = fmt.Sprintf("%d %d %d %d", seq, len(chunks), chunks[0].Offset, time.Now().UnixMilli())
		if err := relay.ProduceSync(ctx, &kgo.Record{Topic: index, Key: []byte("lane-0"), Value: []byte(entry)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
		return chunks
	})
	txn(true, deltas(40, 60))

	// Region b: the mirrored index entry.
	rindex, rlanes := rg.RemoteTopic(index), rg.RemoteTopic(lanes)
	idx := followRemote(t, b, rindex)
	testenv.WaitUntil(t, 2*time.Minute, "the index entry mirrored", func() bool { return len(idx.partition(0)) == 1 })
	var eSeq, eCount, eFirst, eWrite int64
	if _, err := fmt.Sscanf(string(idx.partition(0)[0].Value), "%d %d %d %d", &eSeq, &eCount, &eFirst, &eWrite); err != nil {
		t.Fatal(err)
	}
	lane := followRemote(t, b, rlanes)
	testenv.WaitUntil(t, 2*time.Minute, "the lane mirrored", func() bool {
		recs := lane.partition(0)
		return len(recs) > 0 && string(recs[len(recs)-1].Value) == "delta-59"
	})
	badm := b.Admin(t)
	read := func(from int64) []*kgo.Record {
		cl := b.Client(t, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{rlanes: {0: kgo.NewOffset().At(from)}}))
		defer cl.Close()
		var out []*kgo.Record
		for len(out) == 0 || string(out[len(out)-1].Value) != "delta-59" {
			fs := cl.PollFetches(ctx)
			if err := fs.Err0(); err != nil {
				t.Fatal(err)
			}
			out = append(out, fs.Records()...)
		}
		return out
	}
	chunk0 := fmt.Sprintf("chunk-%d-0", eSeq)
	var found *kgo.Record
	margin, seeks := time.Millisecond, 0
	for found == nil {
		seeks++
		lo, err := badm.ListOffsetsAfterMilli(ctx, eWrite-margin.Milliseconds(), rlanes)
		if err != nil {
			t.Fatal(err)
		}
		at, _ := lo.Lookup(rlanes, 0)
		if at.Err != nil {
			t.Fatal(at.Err)
		}
		for _, r := range read(at.Offset) {
			v := string(r.Value)
			if v == chunk0 {
				found = r
				break
			}
			if strings.HasPrefix(v, fmt.Sprintf("chunk-%d-", eSeq)) {
				break // a later chunk first: the seek landed inside the snapshot
			}
		}
		if found == nil {
			if seeks > 20 {
				t.Fatalf("chunk 0 of snapshot %d not found after %d seeks (margin %v)", eSeq, seeks, margin)
			}
			margin *= 2
		}
	}
	t.Logf("index entry %q: chunk 0 at source offset %d, found on the mirror at offset %d after %d seek(s), margin %v",
		entry, snap[0].Offset, found.Offset, seeks, margin)
	if eFirst != snap[0].Offset || found.Offset == eFirst {
		t.Fatalf("chunk 0: entry's source offset %d (produced at %d), mirror offset %d: the offsets should differ", eFirst, snap[0].Offset, found.Offset)
	}
	if !found.Timestamp.Equal(snap[0].Timestamp) {
		t.Fatalf("chunk 0's timestamp on the mirror %v, at the source %v", found.Timestamp, snap[0].Timestamp)
	}
}

// TestWANProxyCountsBytes: a fault proxy's byte counters (how the region tests weigh what
// MirrorMaker sends across the WAN) count every byte of a connection that stays open, each
// stream on its own: 1,000 bytes sent through the proxy to an echo server and read back are
// 1,000 up and 1,000 down once they are back.
func TestWANProxyCountsBytes(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0") // bound at once: no port to hand out
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(c, c); _ = c.Close() }()
		}
	}()
	p := testenv.StartFaultProxy(t, "count", testenv.FreeAddr(t), ln.Addr().String())
	if err := p.CountBytes(); err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	msg := make([]byte, 1000)
	for i := range msg {
		msg[i] = byte(i)
	}
	for range 2 {
		before := p.Bytes()
		if _, err := c.Write(msg); err != nil {
			t.Fatal(err)
		}
		back := make([]byte, len(msg))
		if _, err := io.ReadFull(c, back); err != nil {
			t.Fatal(err)
		}
		// A byte is counted as it enters the proxy, before it is passed on: the echo back
		// means both counters have counted it.
		if got := p.Bytes().Sub(before); got != (testenv.ProxyBytes{Up: 1000, Down: 1000}) || got.Total() != 2000 {
			t.Fatalf("counted %+v for 1,000 bytes each way", got)
		}
	}
	if p.Bytes() != (testenv.ProxyBytes{Up: 2000, Down: 2000}) {
		t.Fatalf("counted %+v in all, want 2,000 each way", p.Bytes())
	}
}
