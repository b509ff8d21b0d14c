package workers

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/ckf-stream/ckf-stream/streams/query"
	"github.com/ckf-stream/ckf-stream/testenv"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The replica processes of TestWorkerHedgedCallsOutrunADeadReplica: the test binary run again
// with workerFailoverEnv set, so that one can be killed with SIGKILL.
const workerFailoverEnv = "CKF_WORKER_QUERY_FAILOVER_REPLICA"

// workerFailoverDC is the DC of the replicas; workerFailoverSession the test's session timeout,
// long so that "the group still lists the dead member" is a wide window: the test's twelve Asks
// after the kill must all be answered inside it, which at 20 s a machine at load 28 once missed.
// The window's length does not weaken the test: without resends the first Ask on the dead
// member's partitions waits for the session to expire, however long it is.
const (
	workerFailoverDC      = ckf.DcID(0xd1)
	workerFailoverSession = time.Minute
)

// TestWorkerQueryFailoverReplica is a replica process of TestWorkerHedgedCallsOutrunADeadReplica
// (skipped in an ordinary run): DC workerFailoverDC's query service on the topics its environment
// names, answering with a stub, until killed.
func TestWorkerQueryFailoverReplica(t *testing.T) {
	spec := os.Getenv(workerFailoverEnv)
	if spec == "" {
		t.Skip("a replica process of TestWorkerHedgedCallsOutrunADeadReplica")
	}
	f := strings.Split(spec, ",") // brokers|...,requests,replies,dead letters,group,client id,session
	codec, err := schemas.NewCodec(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultQueryConfig(workerFailoverDC, codec)
	cfg.RequestTopic, cfg.ReplyTopic, cfg.DeadLetterTopic, cfg.Group = f[1], f[2], f[3], f[4]
	if cfg.SessionTimeout, err = time.ParseDuration(f[6]); err != nil {
		t.Fatal(err)
	}
	answer := func(q *schemas.WorkerQueryRequest) schemas.WorkerQueryReply {
		return schemas.WorkerQueryReply{CorrelationID: q.CorrelationID, Status: schemas.QueryOK, DcID: uint64(workerFailoverDC),
			QueryBlocks: uint32(q.Hashes.Len()), AgeMillis: schemas.Some[int64](0), ReplyTime: time.Now()}
	}
	svc, err := NewQueryService(QueryServiceParams{DC: workerFailoverDC, Config: cfg, Answer: answer, Codec: codec,
		ClientOpts: []kgo.Opt{kgo.SeedBrokers(strings.Split(f[0], "|")...), kgo.ClientID(f[5])}})
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// startWorkerReplicas starts replica-a and replica-b (TestWorkerQueryFailoverReplica processes)
// on the topics and group given, with session timeout session; they are killed when tb ends.
func startWorkerReplicas(tb testing.TB, brokers []string, requests, replies, dlq, group string, session time.Duration) map[string]*exec.Cmd {
	tb.Helper()
	procs := map[string]*exec.Cmd{}
	for _, name := range []string{"replica-a", "replica-b"} {
		cmd := exec.Command(os.Args[0], "-test.run", "^TestWorkerQueryFailoverReplica$", "-test.count=1", "-test.bench=^$")
		cmd.Env = append(os.Environ(), workerFailoverEnv+"="+strings.Join([]string{strings.Join(brokers, "|"), requests, replies, dlq, group, name, session.String()}, ","))
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		out, err := os.Create(tb.TempDir() + "/" + name + ".log")
		if err != nil {
			tb.Fatal(err)
		}
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { _ = cmd.Process.Signal(syscall.SIGKILL); _ = cmd.Wait(); out.Close() })
		procs[name] = cmd
	}
	return procs
}

// TestWorkerHedgedCallsOutrunADeadReplica (real broker): two replicas of one DC's worker query
// service, as processes, share a 4-partition request topic; one is killed with SIGKILL. Every
// Ask made after the kill, the first ones on the dead member's partitions, must be answered while
// the DC's group still lists the dead member: by the survivor, through a resend to a partition it
// serves. Without resends an Ask on the dead member's partitions waited for the group to drop the
// member and rebalance, and this test failed at the first one.
func TestWorkerHedgedCallsOutrunADeadReplica(t *testing.T) {
	brokers := testenv.Brokers(t)
	const partitions = 4
	requests, replies, dlq := testenv.NewTopic(t, partitions), testenv.NewTopic(t, partitions), testenv.NewTopic(t, 1)
	group := testenv.UniqueName(t, "wqfail")
	procs := startWorkerReplicas(t, brokers, requests, replies, dlq, group, workerFailoverSession)
	adm := testenv.Admin(t)
	members, parts := map[string]string{}, map[string][]int32{}
	describe := func() (state string, ids map[string]string) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		gs, err := adm.DescribeGroups(ctx, group)
		g, ok := gs[group]
		if err != nil || !ok || g.Err != nil {
			return "not described", nil
		}
		ids = map[string]string{}
		for _, m := range g.Members {
			ids[m.MemberID] = m.ClientID
			if ca, ok := m.Assigned.AsConsumer(); ok && len(ca.Topics) > 0 && len(ca.Topics[0].Partitions) > 0 {
				members[m.ClientID], parts[m.ClientID] = m.MemberID, ca.Topics[0].Partitions
			}
		}
		return g.State, ids
	}
	testenv.WaitUntil(t, 2*time.Minute, "both replicas in a stable group, each holding partitions", func() bool {
		clear(members)
		state, ids := describe()
		return state == "Stable" && len(ids) == 2 && len(members) == 2
	})
	deadMember, deadParts, liveParts := members["replica-a"], parts["replica-a"], parts["replica-b"]

	codec, err := schemas.NewCodec(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultQueryClientConfig(codec)
	cfg.RequestTopic, cfg.ReplyTopic = requests, replies
	cfg.CallTimeout = 2 * time.Minute // long: the test asserts on the group's membership, not on time
	c, err := NewQueryClient(context.Background(), QueryClientParams{Config: cfg, Codec: codec, ClientOpts: []kgo.Opt{kgo.SeedBrokers(brokers...)}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	next := 0
	ask := func(p int32) {
		t.Helper()
		var id string
		for id == "" || query.KeyPartition([]byte(id), partitions) != p {
			next++
			id = "call-" + strconv.Itoa(next)
		}
		out, err := c.Ask(context.Background(), schemas.WorkerQueryRequest{CorrelationID: id, Input: schemas.InputLocalBlockHashes,
			Hashes: schemas.AppendU64s(nil, []uint64{1, 2, 3}), DcIDs: []uint64{uint64(workerFailoverDC)}}, 0)
		if err != nil || len(out) != 1 || out[0].Status != schemas.QueryOK || out[0].DcID != uint64(workerFailoverDC) {
			t.Fatalf("Ask on partition %d: %+v, %v", p, out, err)
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
	order := slices.Concat(deadParts, liveParts) // the dead member's partitions first
	for round := range 3 {
		for _, p := range order {
			ask(p)
			state, ids := describe()
			if _, listed := ids[deadMember]; !listed {
				t.Fatalf("round %d: the Ask on partition %d (dead member's partitions %v) was answered only after the group dropped the dead member (state %s, members %v); client %+v",
					round, p, deadParts, state, ids, c.Stats())
			}
		}
	}
	st := c.Stats()
	if st.Hedges == 0 {
		t.Fatalf("no Ask was resent, so the dead member's partitions %v were not exercised: %+v", deadParts, st)
	}
	t.Logf("after kill -9 of one of 2 replicas: %d Asks answered while the group listed the dead member; client %+v", 3*len(order), st)
}

// TestMissingDCs: a resend names only the DCs still missing, and a request that names none is
// resent as it was.
func TestMissingDCs(t *testing.T) {
	answered := []schemas.WorkerQueryReply{{DcID: 0xa}, {DcID: 0xc}}
	if got := missingDCs([]uint64{0xa, 0xb, 0xc, 0xd}, answered); !slices.Equal(got, []uint64{0xb, 0xd}) {
		t.Fatalf("missing of a, b, c, d with a and c answered: %x", got)
	}
	if got := missingDCs(nil, answered); got != nil {
		t.Fatalf("a request naming no DCs: %x, want nil (every DC)", got)
	}
	if got := missingDCs([]uint64{0xa}, nil); !slices.Equal(got, []uint64{0xa}) {
		t.Fatalf("nothing answered: %x", got)
	}
}

// BenchmarkWorkerQueryFailover (real broker) is the scenario on the worker query path, to
// report, not to assert: two replica processes of one DC (stub answers, the default 6 s session)
// on a 4-partition request topic, a router's QueryClient asking 50 times a second from 32 slots
// (an ask due while all are busy is skipped), call timeout 5 s, kill -9 of one replica 15 s in,
// 40 s of load (CKF_FAILOVER_SECONDS), without resends and with them. It logs the answered asks
// of every second and reports answered, timed out and skipped asks, the p99 and max wait, and
// the resends and late duplicates. Run it with -benchtime=1x: one run is one scenario.
func BenchmarkWorkerQueryFailover(b *testing.B) {
	brokers := testenv.Brokers(b)
	seconds := 40
	if v, err := strconv.Atoi(os.Getenv("CKF_FAILOVER_SECONDS")); err == nil && v > 16 {
		seconds = v
	}
	for _, hedges := range []int{0, query.DefaultMaxHedges} {
		b.Run(fmt.Sprintf("max_hedges=%d", hedges), func(b *testing.B) {
			const partitions = 4
			requests, replies, dlq := testenv.NewTopic(b, partitions), testenv.NewTopic(b, partitions), testenv.NewTopic(b, 1)
			group := testenv.UniqueName(b, "wqbench")
			procs := startWorkerReplicas(b, brokers, requests, replies, dlq, group, query.DefaultQuerySessionTimeout)
			adm := testenv.Admin(b)
			testenv.WaitUntil(b, 2*time.Minute, "both replicas in a stable group, each holding partitions", func() bool {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				gs, err := adm.DescribeGroups(ctx, group)
				g, ok := gs[group]
				if err != nil || !ok || g.Err != nil || g.State != "Stable" || len(g.Members) != 2 {
					return false
				}
				for _, m := range g.Members {
					if ca, ok := m.Assigned.AsConsumer(); !ok || len(ca.Topics) == 0 || len(ca.Topics[0].Partitions) == 0 {
						return false
					}
				}
				return true
			})
			codec, err := schemas.NewCodec(context.Background())
			if err != nil {
				b.Fatal(err)
			}
			cfg := DefaultQueryClientConfig(codec)
			cfg.RequestTopic, cfg.ReplyTopic, cfg.MaxHedges = requests, replies, hedges
			c, err := NewQueryClient(context.Background(), QueryClientParams{Config: cfg, Codec: codec, ClientOpts: []kgo.Opt{kgo.SeedBrokers(brokers...)}})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(c.Close)
			var mu sync.Mutex
			var waits []time.Duration
			var answered, timeouts, skipped atomic.Int64
			perSecond := make([]atomic.Int64, seconds+10)
			start := time.Now()
			slots := make(chan struct{}, 32)
			var wg sync.WaitGroup
			for range 32 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range slots {
						t0 := time.Now()
						out, err := c.Ask(context.Background(), schemas.WorkerQueryRequest{Input: schemas.InputLocalBlockHashes,
							Hashes: schemas.AppendU64s(nil, []uint64{1, 2, 3}), DcIDs: []uint64{uint64(workerFailoverDC)}}, 0)
						if err != nil || len(out) != 1 {
							timeouts.Add(1)
							continue
						}
						d := time.Since(t0)
						answered.Add(1)
						perSecond[min(int(time.Since(start)/time.Second), len(perSecond)-1)].Add(1)
						mu.Lock()
						waits = append(waits, d)
						mu.Unlock()
					}
				}()
			}
			b.ResetTimer()
			killed, due := false, 0
			for time.Since(start) < time.Duration(seconds)*time.Second {
				if !killed && time.Since(start) >= 15*time.Second {
					if err := procs["replica-a"].Process.Signal(syscall.SIGKILL); err != nil {
						b.Fatal(err)
					}
					killed = true
				}
				for ; float64(due) < 50*time.Since(start).Seconds(); due++ {
					select {
					case slots <- struct{}{}:
					default:
						skipped.Add(1)
					}
				}
				time.Sleep(2 * time.Millisecond) // the pace of the load, not a wait for an outcome
			}
			close(slots)
			wg.Wait()
			b.StopTimer()
			slices.Sort(waits)
			if len(waits) == 0 {
				b.Fatal("no ask answered")
			}
			var series []string
			for i := 12; i < min(30, seconds); i++ {
				series = append(series, fmt.Sprintf("%d-%ds:%d", i, i+1, perSecond[i].Load()))
			}
			st := c.Stats()
			b.Logf("asked %d: answered %d, timed out %d, skipped %d; wait p50 %v, p99 %v, max %v; resent %d (withheld %d), redirected %d, late duplicates %d; answered per second %s",
				due, answered.Load(), timeouts.Load(), skipped.Load(), waits[len(waits)/2].Round(time.Microsecond), waits[len(waits)*99/100].Round(time.Microsecond),
				waits[len(waits)-1].Round(time.Microsecond), st.Hedges, st.HedgesWithheld, st.Redirected, st.Duplicates, strings.Join(series, " "))
			b.ReportMetric(float64(answered.Load()), "answered")
			b.ReportMetric(float64(timeouts.Load()), "timeouts")
			b.ReportMetric(float64(skipped.Load()), "skipped")
			b.ReportMetric(float64(waits[len(waits)*99/100].Microseconds())/1000, "p99-ms")
			b.ReportMetric(float64(waits[len(waits)-1].Microseconds())/1000, "max-ms")
			b.ReportMetric(float64(st.Hedges), "resends")
			b.ReportMetric(0, "ns/op")
		})
	}
}
