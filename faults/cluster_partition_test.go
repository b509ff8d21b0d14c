//go:build linux

package faults

import (
	"context"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/testenv"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// laneWriteFailedLog is the start of the message a relay logs when a lane write (a transaction
// of deltas, heartbeats or a snapshot) fails and it recovers under a new incarnation
// (streams/relay/relay_recover.go, writeFailed).
const laneWriteFailedLog = "lane write failed"

// relayReports counts each relay's failed lane writes so far (its log lines) and its recoveries.
func (r *clusterRun) relayReports() (failed, recoveries []int) {
	r.t.Helper()
	for _, rl := range r.s.relays {
		failed = append(failed, rl.LogCount(laneWriteFailedLog))
		m, _ := rl.Metrics()
		recoveries = append(recoveries, int(sumMetrics(m, "ckf_relay_recoveries_total")))
	}
	return failed, recoveries
}

// relayReport is what one relay shows about its failed lane writes: its log lines, its
// ckf_relay_write_failures_total by cause, and its /readyz (status and body).
type relayReport struct {
	logged   int
	failures map[string]float64 // cause -> count
	ready    int                // /readyz status (0: no answer)
	body     string
}

func (rp relayReport) String() string {
	return fmt.Sprintf("logged %d, write failures %v, /readyz %d %q", rp.logged, rp.failures, rp.ready, rp.body)
}

// total is the sum of the failures over the causes.
func (rp relayReport) total() float64 {
	var n float64
	for _, v := range rp.failures {
		n += v
	}
	return n
}

// relayReportsNow reads each relay's report (relayReport).
func (r *clusterRun) relayReportsNow() []relayReport {
	out := make([]relayReport, len(r.s.relays))
	c := &http.Client{Timeout: 2 * time.Second}
	for i, rl := range r.s.relays {
		rp := relayReport{logged: rl.LogCount(laneWriteFailedLog), failures: map[string]float64{}}
		if m, err := rl.Metrics(); err == nil {
			for series, v := range m {
				if !strings.HasPrefix(series, "ckf_relay_write_failures_total{") {
					continue
				}
				for _, cause := range []string{"timeout", "fence", "error"} {
					if strings.Contains(series, `cause="`+cause+`"`) {
						rp.failures[cause] += v
					}
				}
			}
		}
		if resp, err := c.Get("http://" + rl.HTTP + "/readyz"); err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			rp.ready, rp.body = resp.StatusCode, strings.TrimSpace(string(b))
		}
		out[i] = rp
	}
	return out
}

// probeTopic creates a topic of one partition on the three nodes with min.insync.replicas 2 whose
// preferred (and first) leader is node leader, and waits until that node leads it with a full
// ISR: a partition the test writes to itself, whose leader is the one a fault isolates, so that
// it gets writes whatever the relays do.
func (r *clusterRun) probeTopic(leader int32) string {
	r.t.Helper()
	name := r.s.prefix + "probe"
	replicas := []int32{leader}
	for _, n := range r.c.Nodes() {
		if n.ID != leader {
			replicas = append(replicas, n.ID)
		}
	}
	req := kmsg.NewPtrCreateTopicsRequest()
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = name, -1, -1
	ra := kmsg.NewCreateTopicsRequestTopicReplicaAssignment()
	ra.Partition, ra.Replicas = 0, replicas
	rt.ReplicaAssignment = append(rt.ReplicaAssignment, ra)
	c := kmsg.NewCreateTopicsRequestTopicConfig()
	c.Name, c.Value = "min.insync.replicas", kmsg.StringPtr("2")
	rt.Configs = append(rt.Configs, c)
	req.Topics = append(req.Topics, rt)
	req.TimeoutMillis = 30000
	ctx, cancel := context.WithTimeout(r.t.Context(), 2*time.Minute)
	defer cancel()
	resp, err := req.RequestWith(ctx, r.s.client())
	if err == nil && len(resp.Topics) == 1 {
		err = kerr.ErrorForCode(resp.Topics[0].ErrorCode)
	}
	if err != nil {
		r.t.Fatalf("create %s on nodes %v: %v", name, replicas, err)
	}
	var st testenv.PartitionState
	testenv.WaitUntilEvery(r.t, scrapePoll, 2*time.Minute, name+" led by node "+strconv.Itoa(int(leader))+" with a full ISR", func() bool {
		st, err = testenv.Partition(ctx, r.adm, name, 0)
		return err == nil && st.Leader == leader && len(st.ISR) == 3
	}, func() string { return fmt.Sprintf("%+v (%v)", st, err) })
	return name
}

// TestClusterReplicationPartition cuts lane 0's leader off from its followers: every byte on the
// fault proxy in front of the node's REPLICATION listener (inter.broker.listener.name) is
// dropped both ways, with the connections kept, so the followers' fetches from it and the
// transaction markers sent to it get no answer, while the node still hears the KRaft quorum
// (CONTROLLER listeners, not proxied) and its clients still reach it. A probe partition the test
// owns, led by the same node (3 replicas, min.insync.replicas 2), gets one record with acks=all
// after the cut: its followers cannot fetch it, leave the ISR after replica.lag.time.max.ms, and
// the record must not be acknowledged while the cut lasts (an ISR of one is below the minimum);
// it is the proof that the node is cut off and that acks=all holds. The cut lasts a seeded 35
// to 45 s (longer than the relays' 30 s write timeout); which relays logged a failed lane write
// meanwhile is recorded, not asserted (see TestClusterTwoNodesLost). Then the toxics go, the
// followers catch up, the probe record must be acknowledged, and the deployment must recover
// without a process exiting and pass the oracle (nothing acknowledged lost, lane sequences
// exact).
func TestClusterReplicationPartition(t *testing.T) {
	testenv.FullClusterSet(t)
	seed := uint64(envInt(t, "FAULTS_SEED", 1))
	r := startProxiedClusterRun(t, seed)
	rng := mrand.New(mrand.NewPCG(seed, 0x69736f))
	holdLoad(rng)
	before := r.waitPartition("lane 0 has a leader and a full ISR", func(s testenv.PartitionState) bool { return s.Leader > 0 && len(s.ISR) == 3 })
	leader := r.c.Node(before.Leader)
	probe := r.probeTopic(leader.ID)
	prober := r.s.client(kgo.RequiredAcks(kgo.AllISRAcks()), kgo.RecordDeliveryTimeout(5*time.Minute), kgo.DefaultProduceTopic(probe))
	cut := testenv.FaultProxies{r.pc.Replication[leader.ID-1]}
	toxics := []testenv.Toxic{testenv.Blackhole("upstream"), testenv.Blackhole("downstream")}
	hold := 35*time.Second + time.Duration(rng.Int64N(int64(10*time.Second)))
	baseFailed, baseRecoveries := r.relayReports()
	qp := r.probeQueries()
	start := time.Now()
	for _, tx := range toxics {
		if err := cut.Add(tx); err != nil {
			t.Fatal(err)
		}
	}
	var ackedAt atomic.Int64 // nanoseconds after start; 0 while unacknowledged
	probeErr := make(chan error, 1)
	prober.Produce(context.Background(), kgo.StringRecord("while cut off"), func(_ *kgo.Record, err error) {
		if err == nil {
			ackedAt.Store(int64(time.Since(start)))
		}
		probeErr <- err
	})
	var st testenv.PartitionState
	testenv.WaitUntilEvery(t, scrapePoll, 2*time.Minute, probe+"'s ISR down to its leader alone", func() bool {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		var err error
		st, err = testenv.Partition(ctx, r.adm, probe, 0)
		if err != nil {
			t.Fatal(err)
		}
		return len(st.ISR) == 1 && st.ISR[0] == leader.ID
	}, func() string { return fmt.Sprintf("%+v", st) })
	shrunk := time.Since(start)
	time.Sleep(time.Until(start.Add(hold))) // the cut's length, seeded: the schedule, not a wait for an outcome
	during := r.lanePartition()
	if at := ackedAt.Load(); at != 0 {
		t.Errorf("the probe record was acknowledged %v after the cut, with its partition's ISR below min.insync.replicas", time.Duration(at))
	}
	failedDuring, _ := r.relayReports()
	for _, tx := range toxics {
		if err := cut.Remove(tx.Name); err != nil {
			t.Fatal(err)
		}
	}
	healed := time.Now()
	lasted := healed.Sub(start)
	select {
	case err := <-probeErr:
		if err != nil {
			t.Fatalf("the probe record failed: %v", err)
		}
	case <-time.After(4 * time.Minute): // a bound on the wait, not an outcome
		t.Fatal("the probe record not acknowledged 4 minutes after the heal")
	}
	probeAcked := time.Since(healed)
	r.waitPartition("lane 0's ISR whole again", func(s testenv.PartitionState) bool { return len(s.ISR) == 3 })
	isrBack := time.Since(healed)
	took := r.recovered("after the replication partition healed", healed)
	probeQueries := qp.end()
	failed, recoveries := r.relayReports()
	r.finish("replication partition of lane 0's leader",
		fmt.Sprintf("node %d's REPLICATION listener blackholed both ways for %v (seed %d)", leader.ID, lasted.Round(time.Millisecond), seed),
		fmt.Sprintf("probe partition's ISR [%d] %v after the cut, its record unacknowledged until the heal and acknowledged %v after it; lane 0 at the end of the cut: leader %d, ISR %v (before: %v); "+
			"failed lane writes logged by the relays %v before, %v at the heal, %v at the end; recoveries %v -> %v; lane 0's ISR whole %v after the heal, deployment recovered %v after the heal",
			leader.ID, shrunk.Round(time.Millisecond), probeAcked.Round(time.Millisecond), during.Leader, during.ISR, before.ISR,
			baseFailed, failedDuring, failed, baseRecoveries, recoveries, isrBack.Round(time.Millisecond), took.Round(time.Millisecond)), probeQueries)
}

// TestClusterTwoNodesLost sends SIGKILL to lane 0's leader and to a seeded second node at once:
// one node of three is left, the KRaft quorum is lost with the other two, no partition can have
// an ISR of two, and nothing written with acks=all (min.insync.replicas 2) can be acknowledged.
// The outage lasts a seeded 35 to 45 s (longer than the relays' 30 s write timeout). Nothing may
// be acknowledged meanwhile: none of the writer's events sent after the loss (checked once it has
// sent 300 more) and no relay transaction (ckf_relay_transactions_total does not move from 2 s
// after the loss, when any answer already on its way has arrived, until the restart). Every relay
// must report while it lasts: a failed lane write in its log, in ckf_relay_write_failures_total
// and on its /readyz (503 naming the write); the outage lasts until they all have, if its seeded
// length is shorter (each write ends at the relays' 30 s write timeout; docs/RELIABILITY.md).
// Then both nodes start again (together), and the deployment must recover
// without a process exiting: every held event acknowledged within the writer's delivery
// timeout, none lost, the lane sequences exact. The outage plus two node starts (up to a minute
// each on a loaded machine) can pass the suite's 2-minute delivery timeout, so the writer's is 4
// minutes here.
func TestClusterTwoNodesLost(t *testing.T) {
	testenv.FullClusterSet(t)
	seed := uint64(envInt(t, "FAULTS_SEED", 1))
	r := startClusterRun(t, seed, kgo.RecordDeliveryTimeout(4*time.Minute))
	rng := mrand.New(mrand.NewPCG(seed, 0x74776f))
	holdLoad(rng)
	before := r.waitPartition("lane 0 has a leader and a full ISR", func(s testenv.PartitionState) bool { return s.Leader > 0 && len(s.ISR) == 3 })
	var others []int32
	for _, n := range r.c.Nodes() {
		if n.ID != before.Leader {
			others = append(others, n.ID)
		}
	}
	victims := []*testenv.ClusterNode{r.c.Node(before.Leader), r.c.Node(others[rng.IntN(len(others))])}
	outage := 35*time.Second + time.Duration(rng.Int64N(int64(10*time.Second)))
	baseFailed, baseRecoveries := r.relayReports()
	qp := r.probeQueries()
	start := time.Now()
	for _, v := range victims {
		if err := v.Kill9(); err != nil {
			t.Fatal(err)
		}
	}
	sentAtLoss, ackedAtLoss := r.w.sent.Load(), r.w.acked.Load()
	testenv.WaitUntil(t, time.Minute, "the writer sends 300 events into the outage", func() bool { return r.w.sent.Load() >= sentAtLoss+300 })
	txnsAt := r.relayTransactions()
	// Every relay must report while no leader is left: each lane write ends at the relays' 30 s
	// write timeout, so within it (plus a recovery attempt) each relay has logged a failed lane
	// write, counted it in ckf_relay_write_failures_total and says so on /readyz (503 naming
	// the write). The outage lasts until then if its seeded length is shorter.
	baseReports := r.relayReportsNow()
	var reports []relayReport
	testenv.WaitUntilEvery(t, time.Second, 2*time.Minute, "every relay reports a failed lane write (log, metric, /readyz) with two of three nodes dead", func() bool {
		reports = r.relayReportsNow()
		for i, rp := range reports {
			if rp.logged <= baseFailed[i] || rp.total() <= baseReports[i].total() || rp.ready != http.StatusServiceUnavailable ||
				!strings.Contains(rp.body, "lane") {
				return false
			}
		}
		return true
	}, func() string { return fmt.Sprintf("before the loss %v; now %v", baseReports, reports) })
	reported := time.Since(start)
	time.Sleep(time.Until(start.Add(outage))) // the outage's length, seeded: the schedule, not a wait for an outcome
	r.checkAlive("while two nodes are down")
	for i, n := range r.relayTransactions() {
		if n >= 0 && txnsAt[i] >= 0 && n != txnsAt[i] {
			t.Errorf("%s committed %d transactions with two of three nodes dead (%d at the loss, %d now)", r.s.relays[i].Name, n-txnsAt[i], txnsAt[i], n)
		}
	}
	sentDuring, ackedDuring := r.w.sent.Load()-sentAtLoss, r.w.acked.Load()-ackedAtLoss
	if acked := r.w.acked.Load(); acked > sentAtLoss {
		t.Fatalf("%d events acknowledged with two of three nodes dead (%d sent before the loss, %d acknowledged then)", acked, sentAtLoss, ackedAtLoss)
	}
	failedDuring, _ := r.relayReports()
	restart := time.Now()
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, len(victims))
	for i, v := range victims {
		wg.Go(func() { errs[i] = v.Start(ctx) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("restart of node %d: %v", victims[i].ID, err)
		}
	}
	started := time.Since(restart)
	after := r.waitPartition("lane 0's ISR whole again", func(s testenv.PartitionState) bool { return s.Leader > 0 && len(s.ISR) == 3 })
	isrBack := time.Since(restart)
	took := r.recovered("after the two nodes returned", restart)
	probe := qp.end()
	failed, recoveries := r.relayReports()
	ids := []int32{victims[0].ID, victims[1].ID}
	slices.Sort(ids)
	r.finish("loss of two of three nodes", fmt.Sprintf("SIGKILL of nodes %v, lane 0's leader %d among them, for %v (seed %d)", ids, before.Leader, outage.Round(time.Millisecond), seed),
		fmt.Sprintf("%d events sent into the outage, %d in flight at the loss acknowledged, 0 of those sent after it and no relay transaction (%v) committed while it lasted; "+
			"every relay reported %v after the loss: %v; failed lane writes logged by the relays %v before, %v at the restart, %v at the end; recoveries %v -> %v; "+
			"both nodes started in %v, lane 0 led by %d with a whole ISR %v after the restart, deployment recovered %v after the restart",
			sentDuring, ackedDuring, txnsAt, reported.Round(time.Millisecond), reports, baseFailed, failedDuring, failed, baseRecoveries, recoveries,
			started.Round(time.Millisecond), after.Leader, isrBack.Round(time.Millisecond), took.Round(time.Millisecond)), probe)
}

// relayTransactions returns each relay's ckf_relay_transactions_total (-1 when its metrics could
// not be read).
func (r *clusterRun) relayTransactions() []int {
	r.t.Helper()
	out := make([]int, len(r.s.relays))
	for i, rl := range r.s.relays {
		m, err := rl.Metrics()
		out[i] = -1
		if err == nil {
			out[i] = int(sumMetrics(m, "ckf_relay_transactions_total"))
		}
	}
	return out
}
