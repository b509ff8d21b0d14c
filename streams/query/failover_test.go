package query_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/ckf-stream/ckf-stream/streams/query"
	"github.com/ckf-stream/ckf-stream/testenv"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The replica processes of TestHedgedCallsOutrunADeadReplica: the test binary run again with
// failoverReplicaEnv set, so that one can be killed with SIGKILL as a crashed indexer would be.
const failoverReplicaEnv = "CKF_QUERY_FAILOVER_REPLICA"

// failoverSession is the replicas' session timeout: long, so that "the group still lists the dead
// member" is a wide window that only a reply which waited for the group could miss.
const failoverSession = 20 * time.Second

// echoExchange answers every request OK with its block count: the service and the client are
// under test here, not the answer.
type echoExchange struct {
	codec *schemas.Codec
	req   schemas.QueryRequest
}

func (x *echoExchange) Decode(v []byte) (query.Request, error) {
	req, err := x.codec.DecodeQueryRequest(v)
	x.req = req
	return query.Request{CorrelationID: req.CorrelationID, ReplyTopic: req.ReplyTopic, ReplyPartition: req.ReplyPartition, RequestTime: req.RequestTime}, err
}

func (x *echoExchange) Route(v []byte) (schemas.QueryRoute, bool) { return x.codec.QueryRoute(v) }

func (x *echoExchange) Answer(dst []byte) ([]byte, query.Answered, error) {
	out, err := x.codec.AppendQueryReply(dst, schemas.QueryReply{CorrelationID: x.req.CorrelationID, Status: schemas.QueryOK,
		QueryBlocks: uint32(x.req.Hashes.Len()), ReplyTime: time.Now()})
	return out, query.Answered{Status: schemas.QueryOK}, err
}

func (x *echoExchange) AppendInvalid(dst []byte, id, why string) ([]byte, error) {
	return x.codec.AppendQueryReply(dst, schemas.QueryReply{CorrelationID: id, Status: schemas.QueryInvalidRequest, ErrorMessage: why, ReplyTime: time.Now()})
}

// TestQueryFailoverReplica is a replica process of TestHedgedCallsOutrunADeadReplica (skipped in
// an ordinary run): a query service on the topics and group its environment names, until killed.
func TestQueryFailoverReplica(t *testing.T) {
	spec := os.Getenv(failoverReplicaEnv)
	if spec == "" {
		t.Skip("a replica process of TestHedgedCallsOutrunADeadReplica")
	}
	f := strings.Split(spec, ",") // brokers|...,requests,replies,dead letters,group,client id
	codec := qCodec(t)
	cfg := query.DefaultQueryConfig()
	cfg.RequestTopic, cfg.ReplyTopic, cfg.DeadLetterTopic, cfg.Group = f[1], f[2], f[3], f[4]
	cfg.SessionTimeout = failoverSession
	svc, err := query.NewService(query.ServiceParams{Config: cfg, Exchange: &echoExchange{codec: codec}, Codec: codec,
		ClientOpts: []kgo.Opt{kgo.SeedBrokers(strings.Split(f[0], "|")...), kgo.ClientID(f[5])}})
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// failoverReplicas starts two replica processes (the test binary running test, with env naming
// the topics and group) and waits until the group is stable with both holding partitions. It
// returns the replicas by client id and the member id and partitions of each.
func failoverReplicas(t *testing.T, test, env string, spec func(clientID string) string, group string) (procs map[string]*exec.Cmd, members map[string]string, parts map[string][]int32) {
	t.Helper()
	procs, members, parts = map[string]*exec.Cmd{}, map[string]string{}, map[string][]int32{}
	for _, name := range []string{"replica-a", "replica-b"} {
		cmd := exec.Command(os.Args[0], "-test.run", "^"+test+"$", "-test.count=1")
		cmd.Env = append(os.Environ(), env+"="+spec(name))
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		out, err := os.Create(t.TempDir() + "/" + name + ".log")
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Signal(syscall.SIGKILL); _ = cmd.Wait(); out.Close() })
		procs[name] = cmd
	}
	testenv.WaitUntil(t, 2*time.Minute, "both replicas in a stable group, each holding partitions", func() bool {
		g, ok := describeGroup(t, group)
		if !ok || g.State != "Stable" || len(g.Members) != 2 {
			return false
		}
		for _, m := range g.Members {
			ca, ok := m.Assigned.AsConsumer()
			if !ok || len(ca.Topics) == 0 || len(ca.Topics[0].Partitions) == 0 {
				return false
			}
			members[m.ClientID], parts[m.ClientID] = m.MemberID, ca.Topics[0].Partitions
		}
		return len(members) == 2
	})
	return procs, members, parts
}

// describeGroup returns the group as the coordinator describes it now.
func describeGroup(t *testing.T, group string) (kadm.DescribedGroup, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	gs, err := testenv.Admin(t).DescribeGroups(ctx, group)
	if err != nil {
		return kadm.DescribedGroup{}, false
	}
	g, ok := gs[group]
	return g, ok && g.Err == nil
}

// listsMember reports whether the group still lists member.
func listsMember(t *testing.T, group, member string) (bool, string) {
	g, ok := describeGroup(t, group)
	if !ok {
		return false, "group not described"
	}
	var ids []string
	for _, m := range g.Members {
		ids = append(ids, m.ClientID)
		if m.MemberID == member {
			return true, ""
		}
	}
	return false, fmt.Sprintf("state %s, members %v", g.State, ids)
}

// idsOn returns correlation ids whose key partition (of n) is p, one per call.
func idsOn(prefix string, n int32) func(p int32) string {
	next := 0
	return func(p int32) string {
		for {
			next++
			id := prefix + strconv.Itoa(next)
			if query.KeyPartition([]byte(id), n) == p {
				return id
			}
		}
	}
}

// TestHedgedCallsOutrunADeadReplica (real broker): two replicas of the query service, as
// processes, share a 4-partition request topic; one is killed with SIGKILL. Every call made after
// the kill, the first ones on the dead member's partitions, must be answered while the group
// still lists the dead member: by the survivor, through a resend to a partition it serves. Before
// hedged resends a call on the dead member's partitions waited for the group to drop the member
// (the session timeout) and rebalance, and this test failed at the first such call.
func TestHedgedCallsOutrunADeadReplica(t *testing.T) {
	brokers := testenv.Brokers(t)
	const partitions = 4
	requests, replies, dlq := testenv.NewTopic(t, partitions), testenv.NewTopic(t, partitions), testenv.NewTopic(t, 1)
	group := testenv.UniqueName(t, "qfail")
	procs, members, parts := failoverReplicas(t, "TestQueryFailoverReplica", failoverReplicaEnv, func(id string) string {
		return strings.Join([]string{strings.Join(brokers, "|"), requests, replies, dlq, group, id}, ",")
	}, group)

	codec := qCodec(t)
	cfg := query.DefaultQueryClientConfig()
	cfg.RequestTopic, cfg.ReplyTopic = requests, replies
	cfg.CallTimeout = 2 * time.Minute // long: the test asserts on the group's membership, not on time
	c, err := query.NewQueryClient(context.Background(), query.QueryClientParams{Config: cfg, Codec: codec,
		ClientOpts: []kgo.Opt{kgo.SeedBrokers(brokers...)}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	id := idsOn("call-", partitions)
	ask := func(p int32) {
		t.Helper()
		reply, err := c.Query(context.Background(), schemas.QueryRequest{CorrelationID: id(p), Input: schemas.InputLocalBlockHashes,
			Hashes: schemas.AppendU64s(nil, []uint64{1, 2, 3})})
		if err != nil || reply.Status != schemas.QueryOK || reply.QueryBlocks != 3 {
			t.Fatalf("call on partition %d: %+v, %v", p, reply, err)
		}
	}
	for p := range int32(partitions) { // every partition answers before the kill
		ask(p)
	}

	dead := procs["replica-a"]
	if err := dead.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = dead.Wait()
	deadParts, liveParts := parts["replica-a"], parts["replica-b"]
	// The dead member's partitions first, then the survivor's, three rounds.
	order := slices.Concat(deadParts, liveParts)
	for round := range 3 {
		for _, p := range order {
			ask(p)
			if listed, now := listsMember(t, group, members["replica-a"]); !listed {
				t.Fatalf("round %d: the call on partition %d (dead member's partitions %v) was answered only after the group dropped the dead member (%s); client %+v",
					round, p, deadParts, now, c.Stats())
			}
		}
	}
	st := c.Stats()
	if st.Hedges == 0 {
		t.Fatalf("no call was resent, so the dead member's partitions %v were not exercised: %+v", deadParts, st)
	}
	t.Logf("after kill -9 of one of 2 replicas: %d calls answered while the group listed the dead member; client %+v", 3*len(order), st)
}
