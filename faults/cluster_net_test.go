//go:build linux

package faults

import (
	"context"
	"encoding/binary"
	"fmt"
	mrand "math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
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
	firstOK []bool      // the first reply said OK
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
	ctx, cancel := context.WithTimeout(r.t.Context(), 2*time.Minute)
	defer cancel()
	ends, err := testenv.ListEndOffsets(ctx, r.adm, r.s.topics.QueryReplies)
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
					kq.firstOK[n] = rep.Status == schemas.QueryOK
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
				Hashes: schemas.PackedU64(hashes), ReplyPartition: schemas.Some(int32(0)), RequestTime: time.Now(),
				LaneMask64: schemas.Some(r.s.laneMask64())}) // every lane, those beyond 15 included (consumer §16)
			if err != nil {
				r.t.Errorf("encode request: %v", err)
				return
			}
			kq.mu.Lock()
			kq.sentAt = append(kq.sentAt, time.Now())
			kq.first = append(kq.first, time.Time{})
			kq.replies = append(kq.replies, 0)
			kq.firstOK = append(kq.firstOK, false)
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
	// late are the answered requests whose first reply came more than lateQuery after them;
	// notOK those whose first reply was not OK (UNAVAILABLE: no lane fresh enough).
	late, notOK   int
	p50, p99, max time.Duration
}

func (w queryWindow) String() string {
	return fmt.Sprintf("%d requests: %d answered (%d not OK), %d unanswered, %d answered more than once, %d late (> %v); reply delay p50 %v, p99 %v, max %v",
		w.sent, w.answered, w.notOK, w.unanswered, w.duplicated, w.late, lateQuery, w.p50.Round(time.Millisecond), w.p99.Round(time.Millisecond), w.max.Round(time.Millisecond))
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
		if !kq.firstOK[i] {
			w.notOK++
		}
		d := kq.first[i].Sub(at)
		if d > lateQuery {
			w.late++
		}
		delays = append(delays, d)
	}
	if len(delays) > 0 {
		slices.Sort(delays)
		w.p50, w.p99, w.max = delays[len(delays)/2], delays[len(delays)*99/100], delays[len(delays)-1]
	}
	return w
}

// answeredAfter waits until every request sent in [from, from+span) has its first reply, and
// returns the time from from to the last of those replies: how long after from the query path
// answered again on every partition the requests of that second landed on.
func (kq *kafkaQueries) answeredAfter(from time.Time, span, timeout time.Duration) time.Duration {
	kq.t.Helper()
	to := from.Add(span)
	var last time.Time
	testenv.WaitUntilEvery(kq.t, scrapePoll, timeout, fmt.Sprintf("a reply to every request sent in the %v from %s", span, from.Format("15:04:05.000")), func() bool {
		if time.Now().Before(to) {
			return false
		}
		kq.mu.Lock()
		defer kq.mu.Unlock()
		last = time.Time{}
		for i, at := range kq.sentAt {
			if at.Before(from) || !at.Before(to) {
				continue
			}
			if kq.first[i].IsZero() {
				return false
			}
			if kq.first[i].After(last) {
				last = kq.first[i]
			}
		}
		return !last.IsZero()
	}, func() string { return kq.window(from, to).String() })
	return last.Sub(from)
}

// answeredBefore counts the requests sent in [from, to) whose first reply came before cutoff.
func (kq *kafkaQueries) answeredBefore(from, to, cutoff time.Time) int {
	kq.mu.Lock()
	defer kq.mu.Unlock()
	n := 0
	for i, at := range kq.sentAt {
		if !at.Before(from) && at.Before(to) && !kq.first[i].IsZero() && kq.first[i].Before(cutoff) {
			n++
		}
	}
	return n
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

// TestClusterQueryRollingRestart restarts each of three indexer replicas in turn (SIGTERM: the
// replica answers its batch in flight, commits and leaves the query group; then it starts again
// and waits to be ready, and the next one follows) while routers' requests flow over Kafka at
// 50/s. No request may go unanswered; the reply delays (p99) are what routers see during a
// rolling upgrade (docs/RELIABILITY.md).
func TestClusterQueryRollingRestart(t *testing.T) {
	testenv.FullClusterSet(t)
	seed := uint64(envInt(t, "FAULTS_SEED", 1))
	r := startClusterRunReplicas(t, seed, 3)
	rng := mrand.New(mrand.NewPCG(seed, 0x726f6c6c))
	kq := r.startKafkaQueries(50)
	began := time.Now()
	holdLoad(rng)
	holdLoad(rng)
	var steps []string
	for _, ix := range r.s.indexes {
		stopped := time.Now()
		if err := ix.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		<-ix.Done()
		ix.Start()
		ix.WaitReady(2 * time.Minute)
		r.pids[ix.Name] = ix.Pid()
		steps = append(steps, fmt.Sprintf("%s stopped and ready again after %v", ix.Name, time.Since(stopped).Round(time.Millisecond)))
		holdLoad(rng)
	}
	kq.end(2 * time.Minute)
	all := kq.window(began, time.Now().Add(time.Hour))
	t.Logf("SUMMARY cluster query rolling restart (seed %d): %s; queries over Kafka: %v; reply statuses %v",
		seed, strings.Join(steps, ", "), all, kq.status)
	if all.unanswered != 0 {
		t.Errorf("%d requests over Kafka never answered", all.unanswered)
	}
	r.finish("query rolling restart", "SIGTERM and restart of each of 3 replicas", "queries over Kafka: "+all.String(), "")
}

// netFault is one network fault of TestClusterNetworkFaults: the toxics it adds to the target's
// route and how long it holds them before removing them (0: only until the deployment has
// proven it works under the fault).
type netFault struct {
	name   string
	toxics []testenv.Toxic
	hold   time.Duration
	// silences: no request of the process crosses the route while the fault lasts (a
	// blackhole, a one-way partition).
	silences bool
}

// netFaults are the five faults, in the order each target gets them: 200 ms ± 50 ms latency both
// ways; 128 KiB/s both ways; a 30 s blackhole (bytes dropped both ways, connections kept);
// connection resets (RST on the first byte of each connection) for 5 s; a one-way partition
// (the process's requests dropped, the brokers' bytes still delivered) for 30 s.
var netFaults = []netFault{
	{name: "latency 200 ms ± 50 ms",
		toxics: []testenv.Toxic{testenv.Latency("upstream", 200*time.Millisecond, 50*time.Millisecond), testenv.Latency("downstream", 200*time.Millisecond, 50*time.Millisecond)}},
	{name: "bandwidth 128 KiB/s",
		toxics: []testenv.Toxic{testenv.Bandwidth("upstream", 128), testenv.Bandwidth("downstream", 128)}},
	{name: "blackhole 30 s", hold: 30 * time.Second, silences: true,
		toxics: []testenv.Toxic{testenv.Blackhole("upstream"), testenv.Blackhole("downstream")}},
	{name: "connection resets 5 s", hold: 5 * time.Second,
		toxics: []testenv.Toxic{testenv.Reset("upstream", 0)}},
	{name: "one-way partition 30 s", hold: 30 * time.Second, silences: true,
		toxics: []testenv.Toxic{testenv.Blackhole("upstream")}},
}

// netTarget is one process route of TestClusterNetworkFaults: the proxies the faults go on.
type netTarget struct {
	name    string
	route   string
	proxies func(*testenv.ProxiedCluster) testenv.FaultProxies
	// queryPath: the route carries the query service's requests and replies, so a fault that
	// silences it holds every reply back until it ends.
	queryPath bool
}

var netTargets = []netTarget{
	{name: "relay", route: "the relays' route (CLIENT listeners, kafka.brokers of the relays)",
		proxies: func(pc *testenv.ProxiedCluster) testenv.FaultProxies { return pc.Client }},
	{name: "indexer", route: "the indexers' lane route (ALT listeners, kafka.brokers of the replicas: lanes, control, admin)",
		proxies: func(pc *testenv.ProxiedCluster) testenv.FaultProxies { return pc.Alt }},
	{name: "query", route: "the query service's route (QUERY listeners, kafka.query_brokers of the replicas)",
		proxies: func(pc *testenv.ProxiedCluster) testenv.FaultProxies { return pc.Query }, queryPath: true},
}

// TestClusterNetworkFaults puts the deployment behind fault proxies, one route per process: the
// relays on the nodes' CLIENT listeners, the indexer replicas' lane consumption (and their other
// clients) on the ALT listeners, and the replicas' query service on the QUERY listeners
// (kafka.query_brokers), each through a proxy per node. Each target (a subtest with a cluster of
// its own) gets the five faults of netFaults in sequence while the other routes stay healthy.
// Under latency and the bandwidth limit the deployment must keep working while the fault lasts;
// after the others it must recover once the fault ends. After every fault the writer pauses and
// the oracle runs (relays settle on the model, replicas serve every lane at the relays'
// sequences and answer alike and not below the model, lane sequences exact), so every
// (fault, target) pair has its own loss figure. Requests flow over Kafka at 20/s all along (the
// test's clients on the direct listeners); none may be lost. No process may exit.
func TestClusterNetworkFaults(t *testing.T) {
	testenv.FullClusterSet(t)
	seed := uint64(envInt(t, "FAULTS_SEED", 1))
	for ti, target := range netTargets {
		t.Run(target.name, func(t *testing.T) {
			runNetworkFaults(t, seed, uint64(ti), target)
		})
	}
}

func runNetworkFaults(t *testing.T, seed, stream uint64, target netTarget) {
	r := startProxiedClusterRun(t, seed)
	rng := mrand.New(mrand.NewPCG(seed, 0x6e6574+stream))
	proxies := target.proxies(r.pc)
	kq := r.startKafkaQueries(20)
	type row struct {
		fault              netFault
		start, end, healed time.Time
		recovery           string
		probe              string
		oracle             oracleReport
		lanes              []laneCheck
	}
	var rows []row
	for _, f := range netFaults {
		holdLoad(rng)
		qp := r.probeQueries()
		rw := row{fault: f, start: time.Now()}
		for _, tx := range f.toxics {
			if err := proxies.Add(tx); err != nil {
				t.Fatal(err)
			}
		}
		if f.hold == 0 {
			took := r.recovered("under "+f.name, rw.start)
			qtook := kq.answeredAfter(rw.start, time.Second, 3*time.Minute)
			rw.recovery = fmt.Sprintf("works under the fault: deployment recovered %v after it began, queries over Kafka %v after it began",
				took.Round(time.Millisecond), qtook.Round(time.Millisecond))
		} else {
			time.Sleep(f.hold) // the fault's length: the schedule, not a wait for an outcome
		}
		rw.end = time.Now()
		for _, tx := range f.toxics {
			if err := proxies.Remove(tx.Name); err != nil {
				t.Fatal(err)
			}
		}
		if f.hold > 0 {
			took := r.recovered("after "+f.name, rw.end)
			qtook := kq.answeredAfter(rw.end, time.Second, 3*time.Minute)
			rw.recovery = fmt.Sprintf("held %v; deployment recovered %v after it ended, queries over Kafka %v after it ended",
				f.hold, took.Round(time.Millisecond), qtook.Round(time.Millisecond))
		}
		rw.healed = time.Now()
		rw.probe = qp.end()
		r.checkAlive("after " + f.name)
		rw.oracle, rw.lanes = r.settle("after "+f.name, rng)
		rows = append(rows, rw)
	}
	kq.end(3 * time.Minute)
	for _, rw := range rows {
		// The proof that the query service uses its own route (kafka.query_brokers): while the
		// route is silenced, no request sent after the fault began (a second's margin for
		// replies already on their way) gets its reply before the fault ends. Were the
		// service on another route, they would be answered during the fault.
		if target.queryPath && rw.fault.silences {
			if n := kq.answeredBefore(rw.start.Add(time.Second), rw.end, rw.end); n != 0 {
				t.Errorf("%s on %s: %d requests answered while the query route was silenced", rw.fault.name, target.name, n)
			}
		}
		// The requests sent from the injection until the deployment and the query path had
		// recovered, each counted once every request had its reply.
		w := kq.window(rw.start, rw.healed)
		t.Logf("SUMMARY cluster network fault %s on %s: %s; queries over Kafka from the injection to the recovery: %v; %s; "+
			"then %d queries, %d probes, replica mismatches %d, answers below the model (acknowledged events lost) %d; lane records %+v",
			rw.fault.name, target.name, rw.recovery, w, rw.probe, rw.oracle.queries, rw.oracle.probes, rw.oracle.mismatches, rw.oracle.lost, rw.lanes)
	}
	all := kq.window(time.Time{}, time.Now().Add(time.Hour))
	r.finish("network faults on "+target.name, fmt.Sprintf("%d faults in sequence on %s (seed %d)", len(netFaults), target.route, seed),
		"queries over Kafka in the whole run: "+all.String(), "")
}
