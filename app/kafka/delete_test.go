package kafka_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/app/config"
	"github.com/ckf-stream/ckf-stream/app/kafka"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestDeleteRunTopicsReadsEachTopicsAnswer: the broker answers a DeleteTopics request topic by
// topic, and DeleteRunTopics reads each answer (it ignored them, so a deletion the broker refused
// or did not finish left the run's topics behind and reported success). A kfake broker answers
// for the run's topics as each case says; every topic of the layout is absent on it, which
// counts as deleted.
func TestDeleteRunTopicsReadsEachTopicsAnswer(t *testing.T) {
	const extra = "run.kv-events.dc-dc01"
	for _, c := range []struct {
		name    string
		answers []error // for the extra topic, one per request; the last repeats
		want    error   // nil: DeleteRunTopics succeeds
		asked   int     // requests that name the extra topic
	}{
		{"deleted", []error{nil}, nil, 1},
		{"already missing", []error{kerr.UnknownTopicOrPartition}, nil, 1},
		{"timed out once, then deleted", []error{kerr.RequestTimedOut, nil}, nil, 2},
		{"timed out every time", []error{kerr.RequestTimedOut}, kerr.RequestTimedOut, 3},
		{"refused", []error{kerr.TopicAuthorizationFailed}, kerr.TopicAuthorizationFailed, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			fake, err := kfake.NewCluster(kfake.NumBrokers(1))
			if err != nil {
				t.Fatal(err)
			}
			defer fake.Close()
			var mu sync.Mutex
			asked := 0
			fake.ControlKey(int16(kmsg.DeleteTopics), func(req kmsg.Request) (kmsg.Response, error, bool) {
				fake.KeepControl()
				r := req.(*kmsg.DeleteTopicsRequest)
				resp := r.ResponseKind().(*kmsg.DeleteTopicsResponse)
				mu.Lock()
				defer mu.Unlock()
				names := r.TopicNames // before v6; from v6 on, the names are in Topics
				for _, rt := range r.Topics {
					if rt.Topic != nil && !slices.Contains(names, *rt.Topic) {
						names = append(names, *rt.Topic)
					}
				}
				for _, name := range names {
					st := kmsg.NewDeleteTopicsResponseTopic()
					st.Topic = kmsg.StringPtr(name)
					st.ErrorCode = kerr.UnknownTopicOrPartition.Code
					if name == extra {
						ans := c.answers[min(asked, len(c.answers)-1)]
						asked++
						st.ErrorCode = 0
						var ke *kerr.Error
						if errors.As(ans, &ke) {
							st.ErrorCode = ke.Code
						}
					}
					resp.Topics = append(resp.Topics, st)
				}
				return resp, nil, true
			})
			cfg := config.Kafka{Brokers: fake.ListenAddrs(), ClientID: "delete-test"}
			conn, err := kafka.New(kafka.Params{Config: cfg, Topics: config.DefaultTopics("run.")})
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			err = conn.DeleteRunTopics(ctx, "test-admin", extra)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case c.want == nil && err != nil:
				t.Errorf("DeleteRunTopics: %v", err)
			case c.want != nil && !errors.Is(err, c.want):
				t.Errorf("DeleteRunTopics: %v, want %v", err, c.want)
			case c.want != nil && !strings.Contains(err.Error(), extra):
				t.Errorf("DeleteRunTopics: %v does not name the topic %s", err, extra)
			}
			if asked != c.asked {
				t.Errorf("the deletion of %s was asked for %d times, want %d", extra, asked, c.asked)
			}
		})
	}
}
