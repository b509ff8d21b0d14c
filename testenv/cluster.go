package testenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// ClusterNodes is the size of the cluster StartLocalCluster starts by default: three combined
// broker+controller nodes, the smallest KRaft quorum that survives losing one node.
const ClusterNodes = 3

// LocalClusterConfig describes a multi-node cluster that StartLocalCluster launches with
// testenv/kafka/cluster-up.sh. Zero values pick free loopback ports, a run directory under
// $TMPDIR and the script's small heaps.
type LocalClusterConfig struct {
	// RunDir holds every node's data, config, log and pid (node-N/). It is wiped at start.
	// Default: $TMPDIR/ckf-cluster, the directory `make cluster-up` uses; tests pass a
	// directory of their own.
	RunDir string
	// Nodes is the number of nodes. Default ClusterNodes.
	Nodes int
	// ClientAdvertised, AltAdvertised and QueryAdvertised are the host:port each node
	// advertises on its CLIENT, ALT and QUERY listeners (one entry per node), for clients that
	// reach the brokers through a fault proxy. Empty: the listener's own address. Set them
	// before the proxies are needed: the nodes only advertise them; nothing checks that they
	// answer.
	ClientAdvertised, AltAdvertised, QueryAdvertised []string
	// ReplicationAdvertised is the host:port each node advertises on its REPLICATION listener,
	// the one the nodes reach each other by (follower fetches, transaction markers): a fault
	// proxy there cuts a node off from its peers. Empty: the listener's own address.
	ReplicationAdvertised []string
	// ClientPorts, AltPorts, QueryPorts, BrokerPorts, ReplicationPorts and ControllerPorts are
	// the nodes' listener ports, one per node; nil picks free ones. They stay fixed for the
	// cluster's life, so a node restarts on the same addresses. BrokerPorts are the direct
	// listeners (DirectSeeds).
	ClientPorts, AltPorts, QueryPorts, BrokerPorts, ReplicationPorts, ControllerPorts []int
	// ReplicaLag is the brokers' replica.lag.time.max.ms: how long a follower may stop fetching
	// before it leaves the ISR. Default 10 s (Kafka's own default is 30 s).
	ReplicaLag time.Duration
	// StartTimeout bounds the wait for readiness of a start or restart. Default 120 s.
	StartTimeout time.Duration
	// StopTimeout bounds a controlled shutdown before the JVM is killed. Default 30 s.
	StopTimeout time.Duration
}

// LocalCluster is a running multi-node Kafka cluster on loopback.
type LocalCluster struct {
	cfg   LocalClusterConfig
	nodes []*ClusterNode
	// Startup is the time from the start of cluster-up.sh to every node serving.
	Startup time.Duration
}

// ClusterNode is one node (broker and controller) of a LocalCluster. Its node id is its index
// plus one.
type ClusterNode struct {
	c   *LocalCluster
	ID  int32
	pid int
}

func (c LocalClusterConfig) runDir() string {
	if c.RunDir != "" {
		return c.RunDir
	}
	return filepath.Join(os.TempDir(), "ckf-cluster")
}

func joinPorts(ps []int) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = strconv.Itoa(p)
	}
	return strings.Join(s, ",")
}

func (c LocalClusterConfig) env() []string {
	env := append(os.Environ(),
		"KAFKA_CLUSTER_DIR="+c.runDir(),
		"KAFKA_CLUSTER_CLIENT_PORTS="+joinPorts(c.ClientPorts),
		"KAFKA_CLUSTER_ALT_PORTS="+joinPorts(c.AltPorts),
		"KAFKA_CLUSTER_QUERY_PORTS="+joinPorts(c.QueryPorts),
		"KAFKA_CLUSTER_BROKER_PORTS="+joinPorts(c.BrokerPorts),
		"KAFKA_CLUSTER_REPLICATION_PORTS="+joinPorts(c.ReplicationPorts),
		"KAFKA_CLUSTER_CONTROLLER_PORTS="+joinPorts(c.ControllerPorts),
		"KAFKA_CLUSTER_CLIENT_ADVERTISED="+strings.Join(c.ClientAdvertised, ","),
		"KAFKA_CLUSTER_ALT_ADVERTISED="+strings.Join(c.AltAdvertised, ","),
		"KAFKA_CLUSTER_QUERY_ADVERTISED="+strings.Join(c.QueryAdvertised, ","),
		"KAFKA_CLUSTER_REPLICATION_ADVERTISED="+strings.Join(c.ReplicationAdvertised, ","),
		// The nodes die with the test binary even when it dies without its cleanups.
		"KAFKA_CLUSTER_OWNER_PID="+strconv.Itoa(os.Getpid()),
	)
	if c.ReplicaLag > 0 {
		env = append(env, "KAFKA_CLUSTER_REPLICA_LAG_MS="+strconv.FormatInt(c.ReplicaLag.Milliseconds(), 10))
	}
	if c.StartTimeout > 0 {
		env = append(env, "KAFKA_START_TIMEOUT="+strconv.Itoa(int(c.StartTimeout.Seconds()+0.5)))
	}
	if c.StopTimeout > 0 {
		env = append(env, "KAFKA_STOP_TIMEOUT="+strconv.Itoa(int(c.StopTimeout.Seconds()+0.5)))
	}
	return env
}

// ErrClusterConfig is returned (wrapped) by StartLocalCluster for a configuration whose lists do
// not have one entry per node.
var ErrClusterConfig = errors.New("testenv: invalid cluster configuration")

// StartLocalCluster formats fresh data for every node, starts them, and returns once every
// node's client listener serves and the cluster's metadata lists every node. On failure the
// error carries the tail of the failing node's log and no node is left running.
func StartLocalCluster(ctx context.Context, cfg LocalClusterConfig) (*LocalCluster, error) {
	if cfg.Nodes == 0 {
		cfg.Nodes = ClusterNodes
	}
	lists := []struct {
		name  string
		ports *[]int
	}{{"client", &cfg.ClientPorts}, {"alt", &cfg.AltPorts}, {"query", &cfg.QueryPorts}, {"broker", &cfg.BrokerPorts},
		{"replication", &cfg.ReplicationPorts}, {"controller", &cfg.ControllerPorts}}
	missing := 0
	for _, l := range lists {
		if *l.ports == nil {
			missing += cfg.Nodes
		}
	}
	free, err := freeLoopbackPorts(missing)
	if err != nil {
		return nil, err
	}
	for _, l := range lists {
		if *l.ports == nil {
			*l.ports, free = free[:cfg.Nodes:cfg.Nodes], free[cfg.Nodes:]
		}
		if len(*l.ports) != cfg.Nodes {
			return nil, fmt.Errorf("%w: %d %s ports for %d nodes", ErrClusterConfig, len(*l.ports), l.name, cfg.Nodes)
		}
	}
	for _, l := range []struct {
		name  string
		addrs []string
	}{{"client advertised", cfg.ClientAdvertised}, {"alt advertised", cfg.AltAdvertised}, {"query advertised", cfg.QueryAdvertised},
		{"replication advertised", cfg.ReplicationAdvertised}} {
		if l.addrs != nil && len(l.addrs) != cfg.Nodes {
			return nil, fmt.Errorf("%w: %d %s addresses for %d nodes", ErrClusterConfig, len(l.addrs), l.name, cfg.Nodes)
		}
	}
	c := &LocalCluster{cfg: cfg}
	began := time.Now()
	if err := c.script(ctx, "cluster-up.sh"); err != nil {
		return nil, err
	}
	c.Startup = time.Since(began)
	for i := range cfg.Nodes {
		n := &ClusterNode{c: c, ID: int32(i + 1)}
		pid, err := readPid(n.dir())
		if err != nil {
			c.Close()
			return nil, err
		}
		n.pid = pid
		c.nodes = append(c.nodes, n)
	}
	if err := c.WaitBrokers(ctx, cfg.Nodes); err != nil {
		var logs strings.Builder
		for _, n := range c.nodes {
			fmt.Fprintf(&logs, "\nnode %d (alive %v), last lines:\n%s", n.ID, n.Alive(), n.LogTail(15))
		}
		c.Close()
		return nil, fmt.Errorf("%w%s", err, logs.String())
	}
	return c, nil
}

// StartLocalClusterT starts a cluster for the test t, under a run directory of its own, and
// kills it when the test ends (after the cleanups registered later, which stop the processes
// that use it). It fails the test when the cluster does not start.
func StartLocalClusterT(t testing.TB, cfg LocalClusterConfig) *LocalCluster {
	t.Helper()
	NeedKafkaJars(t)
	if cfg.RunDir == "" {
		cfg.RunDir = filepath.Join(t.TempDir(), "cluster")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c, err := StartLocalCluster(ctx, cfg)
	if err != nil {
		t.Fatalf("three-node cluster: %v", err)
	}
	t.Cleanup(c.Close)
	t.Logf("%d-node cluster started in %v (client %v, alt %v, query %v, direct %v)", len(c.nodes), c.Startup.Round(time.Millisecond),
		c.Seeds(), c.AltSeeds(), c.QuerySeeds(), c.DirectSeeds())
	return c
}

func (c *LocalCluster) script(ctx context.Context, name string, args ...string) error {
	cmd := exec.CommandContext(ctx, "bash", append([]string{filepath.Join(ScriptDir(), name)}, args...)...)
	cmd.Env = c.cfg.env()
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = nil, &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %s: %w\n%s", name, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return nil
}

func advertised(adv []string, ports []int) []string {
	if len(adv) > 0 {
		return slices.Clone(adv)
	}
	out := make([]string, len(ports))
	for i, p := range ports {
		out[i] = "127.0.0.1:" + strconv.Itoa(p)
	}
	return out
}

// Seeds are the nodes' CLIENT listeners as advertised (through the client proxies, when the
// configuration names them).
func (c *LocalCluster) Seeds() []string { return advertised(c.cfg.ClientAdvertised, c.cfg.ClientPorts) }

// AltSeeds are the nodes' ALT listeners as advertised.
func (c *LocalCluster) AltSeeds() []string { return advertised(c.cfg.AltAdvertised, c.cfg.AltPorts) }

// QuerySeeds are the nodes' QUERY listeners as advertised: the query path's route
// (kafka.query_brokers).
func (c *LocalCluster) QuerySeeds() []string {
	return advertised(c.cfg.QueryAdvertised, c.cfg.QueryPorts)
}

// DirectSeeds are the nodes' BROKER listeners, which no proxy ever sits in front of: for the test's
// own admin, writer and observer clients, which must see the cluster as it is while the
// processes' routes are degraded.
func (c *LocalCluster) DirectSeeds() []string { return advertised(nil, c.cfg.BrokerPorts) }

// Cluster returns the cluster, reached through DirectSeeds, as a Cluster (for NewTopic,
// Client and Admin).
func (c *LocalCluster) Cluster() *Cluster { return &Cluster{seeds: c.DirectSeeds()} }

// Nodes returns the nodes in id order.
func (c *LocalCluster) Nodes() []*ClusterNode { return slices.Clone(c.nodes) }

// Node returns the node with the given id (1-based), or nil.
func (c *LocalCluster) Node(id int32) *ClusterNode {
	if id < 1 || int(id) > len(c.nodes) {
		return nil
	}
	return c.nodes[id-1]
}

// Close resumes every stopped node and kills every node (SIGKILL), waiting for the JVMs to
// exit. For test cleanup: the data is thrown away, so a controlled shutdown would only cost time.
func (c *LocalCluster) Close() {
	for _, n := range c.nodes {
		_ = n.Kill9()
	}
}

// Stop shuts every node down with a controlled shutdown (cluster-down.sh) and returns once the
// JVMs have exited.
func (c *LocalCluster) Stop(ctx context.Context) error {
	for _, n := range c.nodes {
		_ = n.Resume()
	}
	return c.script(ctx, "cluster-down.sh")
}

// WaitBrokers waits until the cluster's metadata, as the direct listeners serve it, lists n
// live brokers.
func (c *LocalCluster) WaitBrokers(ctx context.Context, n int) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.DirectSeeds()...))
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	var last string
	for {
		// Fewer live nodes than n brokers wanted: the wait cannot succeed, so say why at once
		// rather than at the deadline.
		if alive := c.aliveNodes(); len(c.nodes) > 0 && len(alive) < n {
			return fmt.Errorf("%d live brokers wanted, but only nodes %v of %d are alive", n, alive, len(c.nodes))
		}
		mctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		md, err := adm.BrokerMetadata(mctx)
		cancel()
		if err == nil && len(md.Brokers) >= n {
			return nil
		}
		last = fmt.Sprintf("metadata %+v, error %v", md.Brokers, err)
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d live brokers not listed: %w (last: %s)", n, ctx.Err(), last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// aliveNodes returns the ids of the nodes whose JVM runs.
func (c *LocalCluster) aliveNodes() []int32 {
	var ids []int32
	for _, n := range c.nodes {
		if n.Alive() {
			ids = append(ids, n.ID)
		}
	}
	return ids
}

// PartitionState is one partition's leadership as the cluster's metadata reports it.
type PartitionState struct {
	Leader      int32
	LeaderEpoch int32
	Replicas    []int32
	ISR         []int32
	Err         error
}

// Partition returns the leader, replicas and ISR of topic's partition, read with adm (which
// should reach the cluster by its direct listeners). Metadata that lacks the topic or the
// partition, or carries a retriable topic error, is read again (RetryRead) until ctx ends; the
// partition's own error (LEADER_NOT_AVAILABLE while no replica leads) is the state's Err.
func Partition(ctx context.Context, adm *kadm.Client, topic string, partition int32) (PartitionState, error) {
	var st PartitionState
	err := RetryRead(ctx, fmt.Sprintf("metadata of %s partition %d", topic, partition), func(ctx context.Context) error {
		md, err := adm.Metadata(ctx, topic)
		if err != nil {
			return err
		}
		td, ok := md.Topics[topic]
		switch {
		case !ok:
			return fmt.Errorf("topic missing: %w", kerr.UnknownTopicOrPartition)
		case td.Err != nil:
			return td.Err
		}
		pd, ok := td.Partitions[partition]
		if !ok {
			return fmt.Errorf("partition missing: %w", kerr.UnknownTopicOrPartition)
		}
		st = PartitionState{Leader: pd.Leader, LeaderEpoch: pd.LeaderEpoch, Replicas: slices.Clone(pd.Replicas),
			ISR: slices.Clone(pd.ISR), Err: pd.Err}
		return nil
	})
	return st, err
}

func (n *ClusterNode) dir() string {
	return filepath.Join(n.c.cfg.runDir(), "node-"+strconv.Itoa(int(n.ID)))
}

// Pid is the node JVM's process id (of its latest start).
func (n *ClusterNode) Pid() int { return n.pid }

// Alive reports whether the node's JVM runs (a stopped one included).
func (n *ClusterNode) Alive() bool { return ProcessAlive(n.pid) }

// ClientAddr is the address of the node's CLIENT listener itself (where a proxy forwards to).
func (n *ClusterNode) ClientAddr() string {
	return "127.0.0.1:" + strconv.Itoa(n.c.cfg.ClientPorts[n.ID-1])
}

// AltAddr is the address of the node's ALT listener itself.
func (n *ClusterNode) AltAddr() string { return "127.0.0.1:" + strconv.Itoa(n.c.cfg.AltPorts[n.ID-1]) }

// QueryAddr is the address of the node's QUERY listener itself.
func (n *ClusterNode) QueryAddr() string {
	return "127.0.0.1:" + strconv.Itoa(n.c.cfg.QueryPorts[n.ID-1])
}

// ReplicationAddr is the address of the node's REPLICATION listener itself.
func (n *ClusterNode) ReplicationAddr() string {
	return "127.0.0.1:" + strconv.Itoa(n.c.cfg.ReplicationPorts[n.ID-1])
}

// Kill9 sends SIGKILL to the node (a crash: no controlled shutdown, nothing flushed) and waits
// for the JVM to exit. A killed node is started again with Start.
func (n *ClusterNode) Kill9() error {
	_ = syscall.Kill(n.pid, syscall.SIGCONT) // a stopped JVM dies on SIGKILL too, but resuming keeps ps honest
	if err := syscall.Kill(n.pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return err
	}
	for ProcessAlive(n.pid) {
		time.Sleep(20 * time.Millisecond) // the kernel's reaping, not an outcome
	}
	return nil
}

// Pause sends SIGSTOP: the node keeps its sockets but answers nothing, a slow broker rather than
// a dead one (its peers see it only by timeouts). Resume ends it.
func (n *ClusterNode) Pause() error { return syscall.Kill(n.pid, syscall.SIGSTOP) }

// Resume sends SIGCONT to a paused node.
func (n *ClusterNode) Resume() error { return syscall.Kill(n.pid, syscall.SIGCONT) }

// Stop shuts the node down with a controlled shutdown (SIGTERM: leadership moves to the other
// replicas before it exits) and returns once the JVM has exited.
func (n *ClusterNode) Stop(ctx context.Context) error {
	_ = n.Resume()
	if err := n.c.script(ctx, "cluster-down.sh", "--node", strconv.Itoa(int(n.ID))); err != nil {
		return err
	}
	if ProcessAlive(n.pid) {
		return fmt.Errorf("node %d (pid %d) still alive after cluster-down.sh", n.ID, n.pid)
	}
	return nil
}

// Start starts the node again on its data and ports after Kill9 or Stop, and returns once its
// client listener serves.
func (n *ClusterNode) Start(ctx context.Context) error {
	if err := n.c.script(ctx, "cluster-up.sh", "--node", strconv.Itoa(int(n.ID))); err != nil {
		return fmt.Errorf("%w\n%s", err, n.LogTail(30))
	}
	pid, err := readPid(n.dir())
	if err != nil {
		return err
	}
	n.pid = pid
	return nil
}

// LogTail returns the last lines of the node's log.
func (n *ClusterNode) LogTail(lines int) string {
	raw, err := os.ReadFile(filepath.Join(n.dir(), "kafka.out"))
	if err != nil {
		return "(no node log: " + err.Error() + ")"
	}
	ls := strings.Split(strings.TrimRight(string(raw), "\n"), "\n")
	if len(ls) > lines {
		ls = ls[len(ls)-lines:]
	}
	return strings.Join(ls, "\n")
}

// ClusterFullEnv names the variable that turns on the full set of multi-node cluster tests
// (`make test-cluster` sets it). Without it only the short cluster scenarios run, the ones
// `make test` affords; the others skip, naming the target that runs them.
const ClusterFullEnv = "CKF_CLUSTER_FULL"

// FullClusterSet skips t unless the full set of cluster tests was asked for (ClusterFullEnv=1).
func FullClusterSet(t testing.TB) {
	t.Helper()
	if os.Getenv(ClusterFullEnv) != "1" {
		t.Skipf("part of the full cluster set: make test-cluster (or %s=1)", ClusterFullEnv)
	}
}
