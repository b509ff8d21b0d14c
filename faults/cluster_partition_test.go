//go:build linux

package faults

import (
	"context"
	"fmt"
	mrand "math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/testenv"
)

// laneWriteFailedLog is the start of the message a relay logs when a lane write (a transaction
// of deltas, heartbeats or a snapshot) fails and it recovers under a new incarnation
// (streams/relay_publish.go).
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

// waitRelayReports waits until each relay in which has logged a failed lane write since base:
// the producers' own report that their writes are not acknowledged.
func (r *clusterRun) waitRelayReports(what string, base []int, which ...int) {
	r.t.Helper()
	testenv.WaitUntilEvery(r.t, scrapePoll, 3*time.Minute, what, func() bool {
		r.checkAlive(what)
		for _, i := range which {
			if r.s.relays[i].LogCount(laneWriteFailedLog) <= base[i] {
				return false
			}
		}
		return true
	}, func() string {
		failed, _ := r.relayReports()
		return fmt.Sprintf("failed lane writes logged %v, %v before", failed, base)
	})
}

// laneEnd lists lane 0's end offset (its high watermark: the records every in-sync replica has).
func (r *clusterRun) laneEnd() int64 {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(r.t.Context(), 2*time.Minute)
	defer cancel()
	ends, err := testenv.ListEndOffsets(ctx, r.adm, r.s.topics.Lanes)
	if err != nil {
		r.t.Fatal(err)
	}
	o, _ := ends.Lookup(r.s.topics.Lanes, 0)
	return o.Offset
}

// TestClusterReplicationPartition cuts lane 0's leader off from its followers: every byte on the
// fault proxy in front of the node's REPLICATION listener (inter.broker.listener.name) is
// dropped both ways, with the connections kept, so the followers' fetches from it and the
// transaction markers sent to it get no answer, while the node still hears the KRaft quorum
// (CONTROLLER listeners, not proxied) and its clients still reach it. The followers leave lane
// 0's ISR after replica.lag.time.max.ms; the node stays the leader of an ISR of itself alone,
// below min.insync.replicas (2), so no write with acks=all is acknowledged on its partitions:
// lane 0's high watermark must not move from the shrink until the heal, and relay 0 must report
// its failed write (its log; the transaction is bounded by the relay's 30 s write timeout). The
// partition lasts until that report and a seeded 5 to 10 s more; then the toxics go, the
// followers catch up, and the deployment must recover without a process exiting and pass the
// oracle (nothing acknowledged lost, lane sequences exact).
func TestClusterReplicationPartition(t *testing.T) {
	testenv.FullClusterSet(t)
	seed := uint64(envInt(t, "FAULTS_SEED", 1))
	r := startProxiedClusterRun(t, seed)
	rng := mrand.New(mrand.NewPCG(seed, 0x69736f))
	holdLoad(rng)
	before := r.waitPartition("lane 0 has a leader and a full ISR", func(s testenv.PartitionState) bool { return s.Leader > 0 && len(s.ISR) == 3 })
	leader := r.c.Node(before.Leader)
	cut := testenv.FaultProxies{r.pc.Replication[leader.ID-1]}
	toxics := []testenv.Toxic{testenv.Blackhole("upstream"), testenv.Blackhole("downstream")}
	baseFailed, baseRecoveries := r.relayReports()
	qp := r.probeQueries()
	start := time.Now()
	for _, tx := range toxics {
		if err := cut.Add(tx); err != nil {
			t.Fatal(err)
		}
	}
	isolated := r.waitPartition("lane 0's ISR down to its leader alone", func(s testenv.PartitionState) bool {
		return len(s.ISR) == 1 && s.ISR[0] == leader.ID
	})
	shrunk := time.Since(start)
	endAtShrink := r.laneEnd()
	r.waitRelayReports("relay 0 reports a failed lane write", baseFailed, 0)
	reported := time.Since(start)
	hold := 5*time.Second + time.Duration(rng.Int64N(int64(5*time.Second)))
	time.Sleep(hold) // the fault's length past the report, seeded: the schedule, not a wait for an outcome
	endAtHeal := r.laneEnd()
	during := r.lanePartition()
	if endAtHeal != endAtShrink {
		t.Errorf("lane 0's high watermark moved from %d to %d while its ISR was its leader alone (below min.insync.replicas)", endAtShrink, endAtHeal)
	}
	for _, tx := range toxics {
		if err := cut.Remove(tx.Name); err != nil {
			t.Fatal(err)
		}
	}
	healed := time.Now()
	lasted := healed.Sub(start)
	r.waitPartition("lane 0's ISR whole again", func(s testenv.PartitionState) bool { return len(s.ISR) == 3 })
	isrBack := time.Since(healed)
	took := r.recovered("after the replication partition healed", healed)
	probe := qp.end()
	failed, recoveries := r.relayReports()
	r.finish("replication partition of lane 0's leader",
		fmt.Sprintf("node %d's REPLICATION listener blackholed both ways for %v (seed %d)", leader.ID, lasted.Round(time.Millisecond), seed),
		fmt.Sprintf("lane 0's ISR %v -> %v %v after the cut (leader %d -> %d at the end of the cut), its high watermark held at %d; relay 0 reported a failed lane write %v after the cut; "+
			"failed lane writes logged by the relays %v -> %v, recoveries %v -> %v; ISR whole %v after the heal, deployment recovered %v after the heal",
			before.ISR, isolated.ISR, shrunk.Round(time.Millisecond), before.Leader, during.Leader, endAtShrink, reported.Round(time.Millisecond),
			baseFailed, failed, baseRecoveries, recoveries, isrBack.Round(time.Millisecond), took.Round(time.Millisecond)), probe)
}

// TestClusterTwoNodesLost sends SIGKILL to lane 0's leader and to a seeded second node at once:
// one node of three is left, the KRaft quorum is lost with the other two, no partition can have
// an ISR of two, and nothing written with acks=all (min.insync.replicas 2) can be acknowledged.
// The writer's events must wait rather than be acknowledged (none sent after the loss is, while
// it lasts: checked once the writer has sent 300 more and every relay has reported a failed lane
// write, the producers' own report); then both nodes start again (together), and the deployment
// must recover without a process exiting: every held event acknowledged within the writer's
// delivery timeout, none lost, the lane sequences exact.
func TestClusterTwoNodesLost(t *testing.T) {
	testenv.FullClusterSet(t)
	seed := uint64(envInt(t, "FAULTS_SEED", 1))
	r := startClusterRun(t, seed)
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
	r.waitRelayReports("every relay reports a failed lane write", baseFailed, 0, 1)
	reported := time.Since(start)
	sentDuring, ackedDuring := r.w.sent.Load()-sentAtLoss, r.w.acked.Load()-ackedAtLoss
	if acked := r.w.acked.Load(); acked > sentAtLoss {
		t.Fatalf("%d events acknowledged with two of three nodes dead (%d sent before the loss, %d acknowledged then)", acked, sentAtLoss, ackedAtLoss)
	}
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
	r.finish("loss of two of three nodes", fmt.Sprintf("SIGKILL of nodes %v, lane 0's leader %d among them (seed %d)", ids, before.Leader, seed),
		fmt.Sprintf("out for %v; every relay reported a failed lane write %v after the loss (failed lane writes logged %v -> %v, recoveries %v -> %v); "+
			"%d events sent into the outage, %d in flight at the loss acknowledged, 0 of those sent after it acknowledged while it lasted; "+
			"both nodes started in %v, lane 0 led by %d with a whole ISR %v after the restart, deployment recovered %v after the restart",
			restart.Sub(start).Round(time.Millisecond), reported.Round(time.Millisecond), baseFailed, failed, baseRecoveries, recoveries,
			sentDuring, ackedDuring, started.Round(time.Millisecond), after.Leader, isrBack.Round(time.Millisecond), took.Round(time.Millisecond)), probe)
}
