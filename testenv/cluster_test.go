package testenv_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/app/config"
	appkafka "github.com/ckf-stream/ckf-stream/app/kafka"
	"github.com/ckf-stream/ckf-stream/testenv"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestLocalCluster drives the helpers of the three-node cluster against real nodes: a topic of 3
// replicas gets a leader and a full ISR; kill -9 of the leader moves the leadership and drops
// the node from the ISR, and a restart brings it back; a paused (SIGSTOP) follower leaves the
// ISR after replica.lag.time.max.ms and returns after SIGCONT; a controlled stop moves the
// leadership away before the node exits. Writes with acks=all go through all along.
func TestLocalCluster(t *testing.T) {
	testenv.FullClusterSet(t)
	c := testenv.StartLocalClusterT(t, testenv.LocalClusterConfig{ReplicaLag: 5 * time.Second})
	topic := c.Cluster().NewTopic(t, 1, testenv.TopicReplicas(3), testenv.TopicConfig("min.insync.replicas", "2"))
	adm := c.Cluster().Admin(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	checkProcessTopics(ctx, t, c)
	state := func() testenv.PartitionState {
		st, err := testenv.Partition(ctx, adm, topic, 0)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	waitState := func(what string, cond func(testenv.PartitionState) bool) testenv.PartitionState {
		t.Helper()
		var st testenv.PartitionState
		testenv.WaitUntilEvery(t, 50*time.Millisecond, 2*time.Minute, what, func() bool { st = state(); return cond(st) },
			func() string { return fmt.Sprintf("%+v", st) })
		return st
	}
	full := waitState("a leader and 3 replicas in sync", func(s testenv.PartitionState) bool { return s.Leader > 0 && len(s.ISR) == 3 })
	if len(full.Replicas) != 3 {
		t.Fatalf("replicas %v, want 3", full.Replicas)
	}
	// Writes through the client listeners (as the processes write) must be acknowledged.
	cl := c.Cluster().Client(t, kgo.SeedBrokers(c.Seeds()...), kgo.RequiredAcks(kgo.AllISRAcks()), kgo.DefaultProduceTopic(topic))
	produce := func(what string) {
		t.Helper()
		if err := cl.ProduceSync(ctx, kgo.StringRecord(what)).FirstErr(); err != nil {
			t.Fatalf("produce %s: %v", what, err)
		}
	}
	produce("before")

	leader := c.Node(full.Leader)
	if err := leader.Kill9(); err != nil {
		t.Fatal(err)
	}
	moved := waitState("a new leader and an ISR without the killed node", func(s testenv.PartitionState) bool {
		return s.Leader > 0 && s.Leader != leader.ID && !slices.Contains(s.ISR, leader.ID)
	})
	produce("after kill -9")
	if err := leader.Start(ctx); err != nil {
		t.Fatal(err)
	}
	waitState("the restarted node back in the ISR", func(s testenv.PartitionState) bool { return len(s.ISR) == 3 })

	var follower *testenv.ClusterNode
	for _, id := range moved.Replicas {
		if id != moved.Leader {
			follower = c.Node(id)
			break
		}
	}
	if err := follower.Pause(); err != nil {
		t.Fatal(err)
	}
	waitState("the paused follower out of the ISR", func(s testenv.PartitionState) bool { return !slices.Contains(s.ISR, follower.ID) })
	produce("while a follower is paused")
	if err := follower.Resume(); err != nil {
		t.Fatal(err)
	}
	st := waitState("the resumed follower back in the ISR", func(s testenv.PartitionState) bool { return len(s.ISR) == 3 })

	stopped := c.Node(st.Leader)
	if err := stopped.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if stopped.Alive() {
		t.Fatalf("node %d alive after Stop", stopped.ID)
	}
	waitState("the leadership away from the stopped node", func(s testenv.PartitionState) bool { return s.Leader > 0 && s.Leader != stopped.ID })
	produce("after a controlled stop")
	if err := stopped.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitBrokers(ctx, 3); err != nil {
		t.Fatal(err)
	}
	// Every acknowledged record is there, read through the direct listeners.
	rd := c.Cluster().Client(t, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	var got []string
	for len(got) < 4 {
		fs := rd.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %v, want 4 records", got)
		}
		fs.EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
	}
	if want := []string{"before", "after kill -9", "while a follower is paused", "after a controlled stop"}; !slices.Equal(got, want) {
		t.Fatalf("records %q, want %q", got, want)
	}
}

// checkProcessTopics creates the product's topic layout on the cluster the way a process does at
// start (kafka.topic_replication_factor and kafka.topic_min_insync_replicas at their defaults)
// and checks that every topic got 3 replicas and min.insync.replicas 2, while the brokers'
// own defaults are 1 and 1.
func checkProcessTopics(ctx context.Context, t *testing.T, c *testenv.LocalCluster) {
	t.Helper()
	topics := config.DefaultTopics(testenv.UniqueName(t, "layout") + "-")
	cl := c.Cluster().Client(t)
	if err := appkafka.EnsureTopicsReplicated(ctx, cl, topics, appkafka.Replication{}); err != nil {
		t.Fatal(err)
	}
	adm := kadm.NewClient(cl)
	for _, spec := range appkafka.TopicLayout(topics) {
		st, err := testenv.Partition(ctx, adm, spec.Name, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(st.Replicas) != config.ReplicatedTopicReplicas {
			t.Errorf("%s: replicas %v, want %d", spec.Name, st.Replicas, config.ReplicatedTopicReplicas)
		}
		rcs, err := adm.DescribeTopicConfigs(ctx, spec.Name)
		if err != nil {
			t.Fatal(err)
		}
		rc, err := rcs.On(spec.Name, nil)
		if err != nil {
			t.Fatal(err)
		}
		got := ""
		for _, kv := range rc.Configs {
			if kv.Key == "min.insync.replicas" {
				got = kv.MaybeValue()
			}
		}
		if got != "2" {
			t.Errorf("%s: min.insync.replicas %q, want 2", spec.Name, got)
		}
	}
}

// TestLocalClusterPortTakenAtStart restarts a killed node while another process holds its client
// port. The node cannot bind the listener; the start must fail and say so, rather than take the
// foreign listener's answer for the node's readiness (the start-up check waits for the node's
// own "Kafka Server started" after this start). With fewer nodes alive than brokers wanted,
// WaitBrokers fails at once instead of at its deadline. Once the port is free again the node
// starts and the cluster lists three brokers.
func TestLocalClusterPortTakenAtStart(t *testing.T) {
	testenv.FullClusterSet(t)
	c := testenv.StartLocalClusterT(t, testenv.LocalClusterConfig{StartTimeout: 90 * time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	n := c.Node(3)
	if err := n.Kill9(); err != nil {
		t.Fatal(err)
	}
	// The killed node's sockets on the port linger until the kernel has closed them.
	var foreign net.Listener
	var lerr error
	testenv.WaitUntil(t, time.Minute, "node 3's client port free to hold", func() bool {
		foreign, lerr = net.Listen("tcp", n.ClientAddr())
		return lerr == nil
	}, func() string { return lerr.Error() })
	err := n.Start(ctx)
	if err == nil {
		t.Fatal("node 3 reported started while another process held its client port")
	}
	t.Logf("start with the port held: %.300s", err)
	if n.Alive() {
		t.Fatal("node 3 alive after its failed start")
	}
	if err := c.WaitBrokers(ctx, 3); err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitBrokers(3) with a node dead: %v, want an immediate error", err)
	}
	if err := foreign.Close(); err != nil {
		t.Fatal(err)
	}
	if err := n.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitBrokers(ctx, 3); err != nil {
		t.Fatal(err)
	}
}
