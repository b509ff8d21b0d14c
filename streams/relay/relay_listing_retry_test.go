package relay

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/streams"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestListEndOfLogRetriesRetriableErrors: a listing (the end of log, the relay's partitions) that the broker answers with a retriable
// error the client does not retry itself (a topic whose metadata has not reached this broker
// yet: UNKNOWN_TOPIC_OR_PARTITION in the metadata kadm asks first) is retried until it succeeds; a non-retriable one is returned at
// once, as is a retriable one once the context ends.
func TestListEndOfLogRetriesRetriableErrors(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const topic = "eol-retry"
	if err := c.CreateTopic(topic, 2, nil); err != nil {
		t.Fatal(err)
	}
	// The client caches a metadata answer for MetadataMinAge (5 s by default), which would make
	// every retry here wait that long.
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.MetadataMinAge(10*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx := context.Background()

	// A topic created a moment ago on a multi-broker cluster: the broker asked first does not
	// know it yet.
	h := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Metadata}, Topic: topic, Err: kerr.UnknownTopicOrPartition, Count: 3})
	e, err := streams.ListEndOfLog(ctx, adm, topic)
	if err != nil {
		t.Fatalf("listing after 3 UNKNOWN_TOPIC_OR_PARTITION answers: %v", err)
	}
	if len(e.Partitions()) != 2 {
		t.Fatalf("partitions %v, want 2", e.Partitions())
	}
	if hits := h.Hits(); hits != 3 {
		t.Fatalf("the fault answered %d requests, want all 3 (the listing must have been retried)", hits)
	}

	// The relay's listing of its KV partitions retries the same way. Its ListOffsets requests
	// go through the client's own retries, which are turned off here so that the fault reaches
	// the listing.
	once, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.MetadataMinAge(10*time.Millisecond), kgo.RequestRetries(0))
	if err != nil {
		t.Fatal(err)
	}
	defer once.Close()
	h = c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.ListOffsets}, Topic: topic, Err: kerr.NotLeaderForPartition, Count: 3})
	parts, err := listPartitions(ctx, kadm.NewClient(once), streams.ListingWait{}, topic)
	if err != nil || len(parts) != 2 {
		t.Fatalf("listPartitions after 3 NOT_LEADER_OR_FOLLOWER answers: %v, %v", parts, err)
	}
	if hits := h.Hits(); hits != 3 {
		t.Fatalf("listPartitions: the fault answered %d requests, want 3", hits)
	}

	h = c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.ListOffsets}, Topic: topic, Err: kerr.TopicAuthorizationFailed, Count: -1})
	_, err = streams.ListEndOfLog(ctx, adm, topic)
	var eol *streams.EndOfLogError
	if !errors.As(err, &eol) || !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Fatalf("listing with TOPIC_AUTHORIZATION_FAILED: %v; want an *EndOfLogError wrapping it", err)
	}
	if hits := h.Hits(); hits != 1 {
		t.Fatalf("a non-retriable error was retried: %d requests", hits)
	}
	h.Remove()

	// A topic that does not exist: retried (observed, not faulted) until the context ends.
	const missing = "eol-missing"
	h = c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Metadata}, Topic: missing, Observe: true, Count: -1})
	defer h.Remove()
	cctx, cancel := context.WithCancel(ctx)
	go func() {
		// End the retries once the listing has been retried.
		for h.Hits() < 2 {
			time.Sleep(time.Millisecond) // polling a counter, not a wait for an outcome
		}
		cancel()
	}()
	_, err = streams.ListEndOfLog(cctx, adm, missing)
	if !errors.As(err, &eol) || !errors.Is(err, kerr.UnknownTopicOrPartition) {
		t.Fatalf("listing that stays UNKNOWN_TOPIC_OR_PARTITION until the context ends: %v; want an *EndOfLogError wrapping it", err)
	}
}
