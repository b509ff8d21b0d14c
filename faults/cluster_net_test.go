//go:build linux

package faults

import (
	"context"
	"encoding/binary"
	"fmt"
	mrand "math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/ckf-stream/ckf-stream/testenv"
	"github.com/twmb/franz-go/pkg/kgo"
)

// kafkaQueries sends prefix-match requests over Kafka, as a router does, at a fixed rate, and
// records every reply: how many each request got and when the first came. The test's clients use
// the direct listeners, so what it measures is the indexers' side (their route, their group).
type kafkaQueries struct {
	t   *testing.T
	r   *clusterRun
	out *kgo.Client

	mu      sync.Mutex
	sentAt  []time.Time // by request number
	first   []time.Time // first reply, zero while unanswered
	replies []int       // replies received
	status  map[string]int
	halt    chan struct{} // closed by end: stop sending
	cancel  context.CancelFunc
	done    sync.WaitGroup
}

// startKafkaQueries starts sending rate requests per second, each asking for one of the run's
// queries with its reply on partition 0 of the reply topic, which it reads from the end offset
// listed before the first request.
func (r *clusterRun) startKafkaQueries(rate int) *kafkaQueries {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ends, err := r.adm.ListEndOffsets(ctx, r.s.topics.QueryReplies)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		r.t.Fatal(err)
	}
	end, _ := ends.Lookup(r.s.topics.QueryReplies, 0)
	in := r.s.client(kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{r.s.topics.QueryReplies: {0: kgo.NewOffset().At(end.Offset)}}))
	kq := &kafkaQueries{t: r.t, r: r, out: r.s.client(kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProducerLinger(0)),
		status: map[string]int{}, halt: make(chan struct{})}
	rctx, rcancel := context.WithCancel(context.Background())
	kq.cancel = rcancel
	kq.done.Add(2)
	go func() { // replies
		defer kq.done.Done()
		for {
			fs := in.PollFetches(rctx)
			if rctx.Err() != nil {
				return
			}
			now := time.Now()
			fs.EachRecord(func(rec *kgo.Record) {
				rep, err := r.s.codec.DecodeQueryReply(rec.Value)
				if err != nil {
					r.t.Errorf("undecodable reply at %d: %v", rec.Offset, err)
					return
				}
				n, err := strconv.Atoi(rep.CorrelationID)
				kq.mu.Lock()
				defer kq.mu.Unlock()
				if err != nil || n < 0 || n >= len(kq.sentAt) {
					return // not one of ours
				}
				kq.replies[n]++
				if kq.first[n].IsZero() {
					kq.first[n] = now
				}
				kq.status[rep.Status.String()]++
			})
		}
	}()
	go func() { // requests
		defer kq.done.Done()
		tick := time.NewTicker(time.Second / time.Duration(rate))
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-kq.halt:
				return
			case <-tick.C:
			}
			q := r.qs[i%len(r.qs)]
			hashes := make([]byte, 0, 8*len(q))
			for _, h := range q {
				hashes = binary.LittleEndian.AppendUint64(hashes, h)
			}
			b, err := r.s.codec.EncodeQueryRequest(schemas.QueryRequest{CorrelationID: strconv.Itoa(i), Input: schemas.InputLocalBlockHashes,
				Hashes: schemas.PackedU64(hashes), ReplyPartition: schemas.Some(int32(0)), RequestTime: time.Now()})
			if err != nil {
				r.t.Errorf("encode request: %v", err)
				return
			}
			kq.mu.Lock()
			kq.sentAt = append(kq.sentAt, time.Now())
			kq.first = append(kq.first, time.Time{})
			kq.replies = append(kq.replies, 0)
			kq.mu.Unlock()
			kq.out.Produce(context.Background(), &kgo.Record{Topic: r.s.topics.Queries, Key: []byte(strconv.Itoa(i)), Value: b}, func(_ *kgo.Record, err error) {
				if err != nil {
					r.t.Errorf("request %d not delivered: %v", i, err)
				}
			})
		}
	}()
	return kq
}

// queryWindow summarises the requests sent in [from, to).
type queryWindow struct {
	sent, answered, unanswered, duplicated int
	p50, p99, max                          time.Duration
}

func (w queryWindow) String() string {
	return fmt.Sprintf("%d requests: %d answered, %d unanswered, %d answered more than once; reply delay p50 %v, p99 %v, max %v",
		w.sent, w.answered, w.unanswered, w.duplicated, w.p50.Round(time.Millisecond), w.p99.Round(time.Millisecond), w.max.Round(time.Millisecond))
}

func (kq *kafkaQueries) window(from, to time.Time) queryWindow {
	kq.mu.Lock()
	defer kq.mu.Unlock()
	var w queryWindow
	var delays []time.Duration
	for i, at := range kq.sentAt {
		if at.Before(from) || !at.Before(to) {
			continue
		}
		w.sent++
		switch {
		case kq.replies[i] == 0:
			w.unanswered++
			continue
		case kq.replies[i] > 1:
			w.duplicated++
		}
		w.answered++
		delays = append(delays, kq.first[i].Sub(at))
	}
	if len(delays) > 0 {
		slices.Sort(delays)
		w.p50, w.p99, w.max = delays[len(delays)/2], delays[len(delays)*99/100], delays[len(delays)-1]
	}
	return w
}

// end stops sending and waits until every request sent has a reply (the indexers answer every
// request they take; a request no replica ever answers fails the wait: lost), then stops
// reading. A duplicate reply that comes later than the last first reply is not counted.
func (kq *kafkaQueries) end(timeout time.Duration) {
	kq.t.Helper()
	close(kq.halt)
	kq.mu.Lock()
	n := len(kq.sentAt)
	kq.mu.Unlock()
	if err := kq.out.Flush(context.Background()); err != nil {
		kq.t.Fatal(err)
	}
	testenv.WaitUntilEvery(kq.t, scrapePoll, timeout, fmt.Sprintf("a reply to each of the %d requests sent over Kafka", n), func() bool {
		kq.mu.Lock()
		defer kq.mu.Unlock()
		return !slices.Contains(kq.replies, 0)
	}, func() string { return kq.window(time.Time{}, time.Now().Add(time.Hour)).String() })
	kq.cancel()
	kq.done.Wait()
}

// TestClusterQueryRebalance kills an indexer replica (kill -9) while routers' requests flow over
// Kafka at 50/s, then restarts it. The query group must move the dead member's partitions to the
// survivor: requests on them wait for the group's session timeout, requests the dead member had
// answered without committing are answered again (duplicates), and none may be lost. The
// figures (replies lost, duplicated, delayed, before, during and after) are what routers must
// plan for (docs/RELIABILITY.md).
func TestClusterQueryRebalance(t *testing.T) {
	testenv.FullClusterSet(t)
	seed := uint64(envInt(t, "FAULTS_SEED", 1))
	r := startClusterRun(t, seed)
	rng := mrand.New(mrand.NewPCG(seed, 0x716772))
	kq := r.startKafkaQueries(50)
	began := time.Now()
	holdLoad(rng)
	holdLoad(rng)
	victim := r.s.indexes[1+rng.IntN(len(r.s.indexes)-1)]
	killed := time.Now()
	victim.Kill9()
	// The survivor takes the dead member's partitions over after the session timeout: the
	// proof is a reply to a request sent after the kill, on every partition of the request
	// topic, which the per-request wait below covers once enough requests are sent.
	testenv.WaitUntilEvery(t, scrapePoll, 2*time.Minute, "every request sent up to 2 s after the kill answered", func() bool {
		w := kq.window(time.Time{}, killed.Add(2*time.Second))
		return time.Since(killed) > 2*time.Second && w.unanswered == 0
	})
	rebalanced := time.Since(killed)
	restart := time.Now()
	victim.Start()
	victim.WaitReady(2 * time.Minute)
	ready := time.Since(restart)
	r.pids[victim.Name] = victim.Pid()
	holdLoad(rng)
	holdLoad(rng)
	kq.end(2 * time.Minute)
	before, during, after := kq.window(began, killed), kq.window(killed, restart), kq.window(restart, time.Now().Add(time.Hour))
	t.Logf("SUMMARY cluster query rebalance: injected SIGKILL of %s (seed %d); every request sent in the 2 s after the kill answered %v after it; replica restarted and ready after %v; "+
		"before the kill: %v; from the kill to the restart: %v; from the restart on: %v; reply statuses %v",
		victim.Name, seed, rebalanced.Round(time.Millisecond), ready.Round(time.Millisecond), before, during, after, kq.status)
	if lost := before.unanswered + during.unanswered + after.unanswered; lost != 0 {
		t.Errorf("%d requests over Kafka never answered", lost)
	}
	r.finish("query rebalance", "SIGKILL of "+victim.Name, fmt.Sprintf("queries over Kafka: %v / %v / %v", before, during, after), "")
}

// netFault is one network fault of TestClusterNetworkFaults: the toxics it adds to which routes,
// and how long it holds them before removing them (0: only until the deployment has proven it
// works under the fault).
type netFault struct {
	name   string
	routes []string // "relay" (the CLIENT proxies), "indexer" (the ALT proxies)
	toxics []testenv.Toxic
	hold   time.Duration
}

// TestClusterNetworkFaults puts the deployment behind fault proxies (relays on the nodes' CLIENT
// listeners, indexer replicas and their query service on the ALT listeners, each through a
// proxy per node) and injects, one after the other: 200 ms ± 50 ms latency on every route;
// a 128 KiB/s bandwidth limit on every route; a 30 s blackhole of the relays' route; connection
// resets on every route; a one-way partition of the indexers (their requests dropped for 30 s)
// while the relays keep writing. Under latency and bandwidth limits the deployment must keep
// working (events acknowledged, transactions and checkpoints committed, lanes applied) while the
// fault lasts; after the others it must recover once the fault ends. Requests flow over Kafka
// at 20/s all along; none may be lost. No process may exit.
func TestClusterNetworkFaults(t *testing.T) {
	testenv.FullClusterSet(t)
	seed := uint64(envInt(t, "FAULTS_SEED", 1))
	r := startProxiedClusterRun(t, seed)
	rng := mrand.New(mrand.NewPCG(seed, 0x6e6574))
	kq := r.startKafkaQueries(20)
	faults := []netFault{
		{name: "latency 200 ms ± 50 ms", routes: []string{"relay", "indexer"},
			toxics: []testenv.Toxic{testenv.Latency("upstream", 200*time.Millisecond, 50*time.Millisecond), testenv.Latency("downstream", 200*time.Millisecond, 50*time.Millisecond)}},
		{name: "bandwidth 128 KiB/s", routes: []string{"relay", "indexer"},
			toxics: []testenv.Toxic{testenv.Bandwidth("upstream", 128), testenv.Bandwidth("downstream", 128)}},
		{name: "relays blackholed", routes: []string{"relay"}, hold: 30 * time.Second,
			toxics: []testenv.Toxic{testenv.Blackhole("upstream"), testenv.Blackhole("downstream")}},
		{name: "connection resets", routes: []string{"relay", "indexer"}, hold: 5 * time.Second,
			toxics: []testenv.Toxic{testenv.Reset("upstream", 0)}},
		{name: "indexers partitioned one way", routes: []string{"indexer"}, hold: 30 * time.Second,
			toxics: []testenv.Toxic{testenv.Blackhole("upstream")}},
	}
	var lines []string
	for _, f := range faults {
		holdLoad(rng)
		var groups []testenv.FaultProxies
		for _, route := range f.routes {
			if route == "relay" {
				groups = append(groups, r.pc.Client)
			} else {
				groups = append(groups, r.pc.Alt)
			}
		}
		qp := r.probeQueries()
		start := time.Now()
		for _, g := range groups {
			for _, tx := range f.toxics {
				if err := g.Add(tx); err != nil {
					t.Fatal(err)
				}
			}
		}
		var line string
		if f.hold == 0 {
			took := r.recovered("under "+f.name, start)
			line = fmt.Sprintf("works under the fault: recovered %v after it began", took.Round(time.Millisecond))
		} else {
			time.Sleep(f.hold) // the fault's length: the schedule, not a wait for an outcome
		}
		removed := time.Now()
		for _, g := range groups {
			for _, tx := range f.toxics {
				if err := g.Remove(tx.Name); err != nil {
					t.Fatal(err)
				}
			}
		}
		if f.hold > 0 {
			took := r.recovered("after "+f.name, removed)
			line = fmt.Sprintf("held %v, recovered %v after it ended", f.hold, took.Round(time.Millisecond))
		}
		probe := qp.end()
		w := kq.window(start, time.Now())
		lines = append(lines, fmt.Sprintf("%s on %v: %s; queries over Kafka sent meanwhile (replies so far): %v; %s", f.name, f.routes, line, w, probe))
		r.checkAlive("after " + f.name)
	}
	kq.end(3 * time.Minute)
	for _, l := range lines {
		t.Logf("SUMMARY cluster network fault: %s", l)
	}
	all := kq.window(time.Time{}, time.Now().Add(time.Hour))
	r.finish("network faults", fmt.Sprintf("%d faults in sequence (seed %d)", len(faults), seed), "queries over Kafka in the whole run: "+all.String(), "")
}
