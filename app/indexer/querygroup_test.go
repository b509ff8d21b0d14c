package indexer_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/app/kafka"
	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/ckf-stream/ckf-stream/streams/query"
	"github.com/ckf-stream/ckf-stream/testenv"
	"github.com/twmb/franz-go/pkg/kgo"
)

// groupMembers returns the number of members of the consumer group (0 for an empty or unknown
// group) and its state.
func groupMembers(t *testing.T, group string) (int, string) {
	n, _, state := groupAssignment(t, group)
	return n, state
}

// groupAssignment returns the number of members of the consumer group, how many of them are
// assigned partitions, and the group's state.
func groupAssignment(t *testing.T, group string) (members, assigned int, state string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	described, err := testenv.Admin(t).DescribeGroups(ctx, group)
	if err != nil {
		return -1, 0, err.Error()
	}
	g, ok := described[group]
	if !ok || g.Err != nil {
		return 0, 0, fmt.Sprint(g.Err)
	}
	for _, m := range g.Members {
		if ca, ok := m.Assigned.AsConsumer(); ok && len(ca.Topics) > 0 && len(ca.Topics[0].Partitions) > 0 {
			assigned++
		}
	}
	return len(g.Members), assigned, g.State
}

// queryClient returns a Kafka query client for r's topics.
func queryClient(t *testing.T, r *running) *query.QueryClient {
	t.Helper()
	codec, err := kafka.NewCodec(r.cfg.Topics)
	if err != nil {
		t.Fatal(err)
	}
	opts, err := kafka.ClientOpts(r.cfg.Kafka, nil)
	if err != nil {
		t.Fatal(err)
	}
	qcfg := query.DefaultQueryClientConfig()
	qcfg.CallTimeout = 30 * time.Second
	qcfg.RequestTopic, qcfg.ReplyTopic = r.cfg.Topics.Queries, r.cfg.Topics.QueryReplies
	qc, err := query.NewQueryClient(context.Background(), query.QueryClientParams{
		Config: qcfg, Codec: codec, ClientOpts: append(opts, kgo.SeedBrokers(testenv.Brokers(t)...)),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(qc.Close)
	return qc
}

// TestQueryGroupOnlyWhenReady runs two replicas in one query group: A reads lane 0, which a
// producer publishes, and is ready; B reads only lane 1, whose DC never publishes, so its /readyz
// says not ready for as long as it runs. B must stay out of the query group, so every Kafka query
// is answered OK by A. An indexer that joined the group at start gave B half of the query
// partitions, and their queries were answered UNAVAILABLE.
func TestQueryGroupOnlyWhenReady(t *testing.T) {
	prefix := testenv.UniqueName(t, "ixq") + "."
	group := prefix + "group"
	a := startIndexerWith(t, prefix, "--indexer.lanes=0=0x10", "--indexer.freshness.max_time_lag=0")
	codec, err := kafka.NewCodec(a.cfg.Topics)
	if err != nil {
		t.Fatal(err)
	}
	p0 := newLaneProducer(t, a.cfg.Topics, codec, 0, 0x10)
	chain := []uint64{11, 12, 13}
	p0.store(chain)
	testenv.WaitUntil(t, time.Minute, "replica A ready and in the query group", func() bool {
		n, _ := groupMembers(t, group)
		return a.ix.API().Ready(context.Background()) == nil && n == 1
	})

	b := startIndexerWith(t, prefix, "--indexer.lanes=1=0x11", "--indexer.freshness.max_time_lag=0")
	if code, body := b.get(t, "/readyz"); code == 200 {
		t.Fatalf("replica B is ready: %s", body)
	}
	// B either says it holds off (its membership gauge is 0) or, as an indexer that joins at
	// once, shows up as the second member of the settled group, with partitions of its own (the
	// cooperative balancer moves them in a second round).
	testenv.WaitUntil(t, time.Minute, "replica B out of the group (gauge 0) or holding partitions", func() bool {
		_, m := b.get(t, "/metrics")
		_, assigned, state := groupAssignment(t, group)
		return metric(m, "ckf_indexer_query_group_member") == 0 || (assigned == 2 && state == "Stable")
	})
	qc := queryClient(t, a)
	const queries = 40 // over the query topic's partitions by correlation id: all of them, surely
	var unavailable, wrong int
	for range queries {
		reply, err := qc.Query(context.Background(), schemas.QueryRequest{Input: schemas.InputLocalBlockHashes, Hashes: schemas.AppendU64s(nil, chain)})
		switch {
		case err != nil:
			t.Fatal(err)
		case reply.Status == schemas.QueryUnavailable:
			unavailable++
		case reply.Status != schemas.QueryOK || len(reply.Lanes) != 1 || reply.Lanes[0].Depth != 3:
			wrong++
		}
	}
	if unavailable > 0 || wrong > 0 {
		t.Errorf("%d of %d queries answered UNAVAILABLE and %d otherwise wrong, while the not-ready replica B ran", unavailable, queries, wrong)
	}
	if n, state := groupMembers(t, group); n != 1 || b.ix.QueryGroupMember() {
		t.Errorf("query group: %d members (%s), B a member: %v; want A alone", n, state, b.ix.QueryGroupMember())
	}
}

// TestQueryGroupLeftWhileNotReady: a replica whose only lane falls silent (the producer stops;
// indexer.freshness.max_time_lag 1s excludes the lane) stops being ready, and leaves the query
// group once indexer.query_leave_after (500ms) has passed; when the lane moves again it is ready
// and joins again.
func TestQueryGroupLeftWhileNotReady(t *testing.T) {
	prefix := testenv.UniqueName(t, "ixl") + "."
	group := prefix + "group"
	r := startIndexerWith(t, prefix, "--indexer.lanes=0=0x10", "--indexer.freshness.max_time_lag=1s",
		"--indexer.query_leave_after=500ms")
	codec, err := kafka.NewCodec(r.cfg.Topics)
	if err != nil {
		t.Fatal(err)
	}
	p := newLaneProducer(t, r.cfg.Topics, codec, 0, 0x10)
	// keep publishes every 100 ms until the returned function is called, which waits for it.
	next := uint64(100)
	keep := func() (stop func()) {
		done, stopped := make(chan struct{}), make(chan struct{})
		go func() {
			defer close(stopped)
			tk := time.NewTicker(100 * time.Millisecond)
			defer tk.Stop()
			for {
				p.store([]uint64{next})
				next++
				select {
				case <-done:
					return
				case <-tk.C:
				}
			}
		}()
		var once sync.Once
		return func() { once.Do(func() { close(done); <-stopped }) }
	}
	member := func(want bool) func() bool {
		return func() bool {
			n, _ := groupMembers(t, group)
			_, m := r.get(t, "/metrics")
			gauge := metric(m, "ckf_indexer_query_group_member")
			if want {
				return r.ix.QueryGroupMember() && n == 1 && gauge == 1
			}
			return !r.ix.QueryGroupMember() && n == 0 && gauge == 0
		}
	}
	detail := func() string {
		n, state := groupMembers(t, group)
		_, body := r.get(t, "/readyz")
		return fmt.Sprintf("group %d members (%s); /readyz %s", n, state, strings.TrimSpace(body))
	}
	stop := keep()
	testenv.WaitUntil(t, time.Minute, "ready and in the query group", member(true), detail)
	stop()
	testenv.WaitUntil(t, time.Minute, "out of the query group after the lane fell silent", member(false), detail)
	if r.ix.API().Ready(context.Background()) == nil {
		t.Errorf("left the group while ready")
	}
	stop = keep()
	defer stop()
	testenv.WaitUntil(t, time.Minute, "back in the query group once the lane moves", member(true), detail)
}
