package query_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/streams/internal/streamtest"
	"github.com/ckf-stream/ckf-stream/streams/query"
	"github.com/ckf-stream/ckf-stream/testenv"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/uber-go/tally/v4"
)

// Faults injected into the in-process cluster (kfake.Fault): what the service does when the
// cluster refuses a commit or a dead letter, which a healthy broker never shows on demand.

// TestQueryServiceCommitFailureIsNotFatal: a commit the group coordinator refuses is counted and
// logged, the service goes on answering, and the next commit covers the refused batch's offsets
// too (commits are cumulative per partition), so the group ends at the end of the requests.
func TestQueryServiceCommitFailureIsNotFatal(t *testing.T) {
	t.Parallel() // its own in-process cluster
	k := streamtest.NewFakeKafka(t)
	x, p, codec, tp := newQServed(t, k, 11, 1)
	group := testenv.UniqueName(t, "g")
	refused := k.Fake.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.OffsetCommit}, Group: group, Err: kerr.OffsetMetadataTooLarge})
	scope := tally.NewTestScope("", nil)
	qStartService(t, k, query.NewAnswerer(x.g, nil), codec, qConfig(tp, group), scope)
	replies := qReplies(t, k, codec, tp.replies)
	prod := k.Client(t)

	ids, values := qRequests(t, codec, p, "first", 0, 10)
	qProduce(t, prod, tp.requests, ids, values)
	replies.waitIDs(t, ids, time.Minute)
	testenv.WaitUntil(t, time.Minute, "the refused commit is counted", func() bool {
		return refused.Hits() == 1 && qCounter(scope, "query.commit_failures_total", nil) == 1
	}, func() string {
		return fmt.Sprintf("fault hits %d, commit failures %d", refused.Hits(), qCounter(scope, "query.commit_failures_total", nil))
	})
	if got := qCommitted(t, k, group, tp.requests, 1); got[0] >= 0 {
		t.Fatalf("offset %d committed although the coordinator refused the commit", got[0])
	}
	ids, values = qRequests(t, codec, p, "second", 0, 5)
	qProduce(t, prod, tp.requests, ids, values)
	replies.waitIDs(t, ids, time.Minute)
	qWaitCommitted(t, k, group, tp.requests, 1)
	if n := qCounter(scope, "query.batch_failures_total", nil); n != 0 {
		t.Fatalf("%d batch failures: a refused commit must not fail a batch", n)
	}
}

// TestQueryServiceDeadLetterFailureFailsTheBatch: a request that cannot be decoded must be
// dead-lettered before its offset is committed; when the dead-letter topic refuses the record,
// the batch fails with a QueryBatchError naming that topic and nothing is committed, so a
// member that takes the partition over sees the request again.
func TestQueryServiceDeadLetterFailureFailsTheBatch(t *testing.T) {
	t.Parallel() // its own in-process cluster
	k := streamtest.NewFakeKafka(t)
	x := newQIndex(t, 0)
	x.activate(0)
	codec := qCodec(t)
	tp := newQTopics(t, k, 1)
	group := testenv.UniqueName(t, "g")
	cfg := qConfig(tp, group)
	cfg.ReplyTimeout = 3 * time.Second
	k.Fake.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: tp.deadLetters, Err: kerr.TopicAuthorizationFailed, Count: -1})
	svc := qNewService(t, k, query.NewAnswerer(x.g, nil), codec, cfg, nil)
	good := qEncode(t, codec, qHashRequest("good", []uint64{1, 2}))
	qProduce(t, k.Client(t), tp.requests, []string{"good", "garbage"}, [][]byte{good, []byte("not a framed record")})
	errc := make(chan error, 1)
	go func() { errc <- svc.Run(context.Background()) }()
	// Either event ends the wait: Run returning (the rule held) or an offset committed (it broke).
	adm := k.Admin(t)
	committed := func() int64 { // -1 while the group has no offsets (or does not exist yet)
		got, err := adm.FetchOffsets(context.Background(), group)
		if err != nil {
			return -1
		}
		if o, ok := got.Lookup(tp.requests, 0); ok && o.Err == nil {
			return o.At
		}
		return -1
	}
	var err error
	stopped := false
	testenv.WaitUntilEvery(t, 20*time.Millisecond, time.Minute, "the service stops or commits", func() bool {
		select {
		case err = <-errc:
			stopped = true
			return true
		default:
			return committed() >= 0
		}
	})
	if !stopped {
		t.Fatalf("offset %d committed although the dead letter was refused", committed())
	}
	var be *query.QueryBatchError
	if !errors.Is(err, query.ErrQueryBatchFailed) || !errors.As(err, &be) || be.Topic != tp.deadLetters || be.Failed == 0 || be.Requests != 2 {
		t.Fatalf("Run returned %v, want a QueryBatchError on %s", err, tp.deadLetters)
	}
	if got := qCommitted(t, k, group, tp.requests, 1); got[0] >= 0 {
		t.Fatalf("offset %d committed although the dead letter was refused", got[0])
	}
}

// TestQueryServiceRidesThroughAnOutageLongerThanItsReplyTimeout: while the brokers take no
// reply (every produce to the reply topic answered NOT_LEADER_FOR_PARTITION, retried by franz-go
// until ReplyTimeout), a batch cannot be acknowledged. The service must not stop (a replica
// survives a broker outage of any length, RELIABILITY P5): it commits nothing, leaves and joins
// its group again (ckf_query_rejoins_total), and once the brokers take replies again it answers
// every request and commits their offsets, with Run still running.
func TestQueryServiceRidesThroughAnOutageLongerThanItsReplyTimeout(t *testing.T) {
	t.Parallel() // its own in-process cluster
	k := streamtest.NewFakeKafka(t)
	x, p, codec, tp := newQServed(t, k, 5, 1)
	group := testenv.UniqueName(t, "g")
	cfg := qConfig(tp, group)
	cfg.ReplyTimeout = 2 * time.Second
	cfg.CommitTimeout = time.Second
	outage := k.Fake.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: tp.replies, Err: kerr.NotLeaderForPartition, Count: -1})
	scope := tally.NewTestScope("", nil)
	svc := qNewService(t, k, query.NewAnswerer(x.g, nil), codec, cfg, scope)
	ids, values := qRequests(t, codec, p, "outage", 0, 5)
	qProduce(t, k.Client(t), tp.requests, ids, values)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- svc.Run(ctx) }()

	// Either event ends the wait: Run returning (the outage stopped it) or a rejoin counted.
	var err error
	stopped := false
	testenv.WaitUntilEvery(t, 20*time.Millisecond, time.Minute, "the service rejoins or stops", func() bool {
		select {
		case err = <-errc:
			stopped = true
			return true
		default:
			return qCounter(scope, "query.rejoins_total", nil) > 0
		}
	})
	if stopped {
		t.Fatalf("the service stopped during the outage: %v", err)
	}
	if got := qCommitted(t, k, group, tp.requests, 1); got[0] >= 0 {
		t.Fatalf("offset %d committed although no reply was acknowledged", got[0])
	}
	outage.Remove()
	replies := qReplies(t, k, codec, tp.replies)
	replies.waitIDs(t, ids, time.Minute)
	qWaitCommitted(t, k, group, tp.requests, 1)
	select {
	case err := <-errc:
		t.Fatalf("Run returned %v after the outage", err)
	default:
	}
	cancel()
	if err := <-errc; err != nil {
		t.Fatalf("Run after a graceful stop: %v", err)
	}
	t.Logf("rejoins during the outage: %d", qCounter(scope, "query.rejoins_total", nil))
}
