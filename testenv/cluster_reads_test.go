package testenv_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/testenv"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// movingLeaders is an in-process cluster (kfake, one broker) with a topic of two partitions
// holding 3 and 2 records, and an admin client whose own retries are franz-go's defaults (20
// per request) without their backoff, so that a test exhausts them in milliseconds.
type movingLeaders struct {
	c     *kfake.Cluster
	adm   *kadm.Client
	topic string
}

// admin returns an admin client of its own (whose metadata cache is empty), with the backoff
// of the first one and a metadata cache of 10 ms rather than 5 s (kadm's Metadata answers from
// it: a lagging broker's answer would otherwise be served again for seconds).
func (m *movingLeaders) admin(t *testing.T) *kadm.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(m.c.ListenAddrs()...), kgo.RetryBackoffFn(func(int) time.Duration { return time.Millisecond }),
		kgo.MetadataMinAge(10*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return kadm.NewClient(cl)
}

func newMovingLeaders(t *testing.T) *movingLeaders {
	t.Helper()
	const topic = "lanes"
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, topic))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.RetryBackoffFn(func(int) time.Duration { return time.Millisecond }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	for i, p := range []int32{0, 0, 0, 1, 1} {
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Partition: p, Value: []byte(strconv.Itoa(i))}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	return &movingLeaders{c: c, adm: kadm.NewClient(cl), topic: topic}
}

// failListOffsets answers the next n ListOffsets requests with code on every partition they
// name (NOT_LEADER_FOR_PARTITION: what a broker answers while the leadership moves away from
// it) and counts every ListOffsets request in seen.
func (m *movingLeaders) failListOffsets(n int32, code int16, seen *atomic.Int32) {
	m.c.ControlKey(kmsg.ListOffsets.Int16(), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		m.c.KeepControl()
		if seen.Add(1) > n {
			return nil, nil, false
		}
		req := kreq.(*kmsg.ListOffsetsRequest)
		resp := req.ResponseKind().(*kmsg.ListOffsetsResponse)
		for _, rt := range req.Topics {
			st := kmsg.NewListOffsetsResponseTopic()
			st.Topic = rt.Topic
			for _, rp := range rt.Partitions {
				sp := kmsg.NewListOffsetsResponseTopicPartition()
				sp.Partition, sp.ErrorCode = rp.Partition, code
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
}

// failMetadata answers the next n metadata requests that name the topic with the topic error
// code (UNKNOWN_TOPIC_OR_PARTITION: what a broker whose metadata lags behind answers), listing
// the broker itself so that the client keeps it.
func (m *movingLeaders) failMetadata(t *testing.T, n int32, code int16, seen *atomic.Int32) {
	host, port, err := net.SplitHostPort(m.c.ListenAddrs()[0])
	if err != nil {
		t.Fatal(err)
	}
	p, _ := strconv.Atoi(port)
	m.c.ControlKey(kmsg.Metadata.Int16(), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		m.c.KeepControl()
		req := kreq.(*kmsg.MetadataRequest)
		names := false
		for _, rt := range req.Topics {
			names = names || rt.Topic != nil && *rt.Topic == m.topic
		}
		if !names || seen.Add(1) > n {
			return nil, nil, false
		}
		resp := req.ResponseKind().(*kmsg.MetadataResponse)
		b := kmsg.NewMetadataResponseBroker()
		b.NodeID, b.Host, b.Port = m.c.CurrentNode(), host, int32(p)
		resp.Brokers = append(resp.Brokers, b)
		resp.ControllerID = b.NodeID
		st := kmsg.NewMetadataResponseTopic()
		st.Topic, st.ErrorCode = kmsg.StringPtr(m.topic), code
		resp.Topics = append(resp.Topics, st)
		return resp, nil, true
	})
}

// TestReadsRetryWhileLeadershipMoves lists offsets and a partition's state while the broker
// answers NOT_LEADER_FOR_PARTITION (offsets) or UNKNOWN_TOPIC_OR_PARTITION (metadata) for more
// requests in a row than the client's own retries cover, as a cluster does while a returning
// node takes its leaderships back: the oracle's reads must outlast that and return the offsets
// and the state, rather than fail the scenario.
func TestReadsRetryWhileLeadershipMoves(t *testing.T) {
	m := newMovingLeaders(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	for _, list := range []struct {
		name string
		fn   func(context.Context, *kadm.Client, ...string) (kadm.ListedOffsets, error)
	}{{"end offsets", testenv.ListEndOffsets}, {"last stable offsets", testenv.ListCommittedOffsets}} {
		t.Run(list.name, func(t *testing.T) {
			var seen atomic.Int32
			const moving = 30 // more than franz-go's 20 retries of one request
			m.failListOffsets(moving, kerr.NotLeaderForPartition.Code, &seen)
			l, err := list.fn(ctx, m.adm, m.topic)
			if err != nil {
				t.Fatalf("%s while the leadership moves: %v", list.name, err)
			}
			if n := seen.Load(); n <= moving {
				t.Fatalf("%s: %d ListOffsets requests seen, want more than the %d answered NOT_LEADER_FOR_PARTITION", list.name, n, moving)
			}
			for p, want := range []int64{3, 2} {
				if o, ok := l.Lookup(m.topic, int32(p)); !ok || o.Offset != want {
					t.Errorf("%s: partition %d at %+v, want offset %d", list.name, p, o, want)
				}
			}
		})
	}
	t.Run("partition state", func(t *testing.T) {
		var seen atomic.Int32
		m.failMetadata(t, 3, kerr.UnknownTopicOrPartition.Code, &seen)
		st, err := testenv.Partition(ctx, m.admin(t), m.topic, 1)
		if err != nil {
			t.Fatalf("partition state while the topic's metadata lags: %v", err)
		}
		if st.Leader != 0 || seen.Load() <= 3 { // kfake's one broker is node 0
			t.Fatalf("partition state %+v after %d metadata requests, want the leader 0 after more than 3", st, seen.Load())
		}
	})
}

// TestReadsFailNamingThePartition checks that the retries do not hide a real failure: an error
// that no retry cures (UNKNOWN_SERVER_ERROR) fails the read at its first answer, and a
// NOT_LEADER_FOR_PARTITION that lasts fails it when the caller's context ends; both errors name
// the topic, the partition and the broker's error.
func TestReadsFailNamingThePartition(t *testing.T) {
	m := newMovingLeaders(t)
	var seen atomic.Int32
	m.failListOffsets(1, kerr.UnknownServerError.Code, &seen)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	_, err := testenv.ListEndOffsets(ctx, m.adm, m.topic)
	if !errors.Is(err, kerr.UnknownServerError) || !strings.Contains(err.Error(), m.topic+" partition 0") || seen.Load() != 1 {
		t.Fatalf("end offsets failing: %v after %d requests, want UNKNOWN_SERVER_ERROR naming %s partition 0 after 1", err, seen.Load(), m.topic)
	}
	var lasting atomic.Int32
	m.failListOffsets(1<<30, kerr.NotLeaderForPartition.Code, &lasting)
	short, cancelShort := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancelShort()
	_, err = testenv.ListCommittedOffsets(short, m.adm, m.topic)
	if !errors.Is(err, kerr.NotLeaderForPartition) || !strings.Contains(err.Error(), m.topic+" partition ") {
		t.Fatalf("last stable offsets with no leader to the end: %v, want NOT_LEADER_FOR_PARTITION naming the partition", err)
	}
	t.Logf("lasting error: %v", err)
}

// TestRetryReadReportsTheAnswerBeforeTheDeadline ends the caller's deadline during an attempt
// that follows a NOT_LEADER_FOR_PARTITION answer: the error must be that answer, not the
// deadline that cut the last attempt (make test once failed TestReadsFailNamingThePartition so).
func TestRetryReadReportsTheAnswerBeforeTheDeadline(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	calls := 0
	err := testenv.RetryRead(ctx, "offsets", func(actx context.Context) error {
		if calls++; calls == 1 {
			return fmt.Errorf("lanes partition 0: %w", kerr.NotLeaderForPartition)
		}
		<-actx.Done() // the caller's deadline ends this attempt
		return fmt.Errorf("request ListOffsets: %w", actx.Err())
	})
	if !errors.Is(err, kerr.NotLeaderForPartition) || !strings.Contains(err.Error(), "lanes partition 0") {
		t.Fatalf("RetryRead after %d calls: %v, want the NOT_LEADER_FOR_PARTITION answer naming the partition", calls, err)
	}
}
