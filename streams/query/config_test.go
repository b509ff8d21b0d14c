package query_test

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/ckf-stream/ckf-stream/streams/internal/streamtest"
	"github.com/ckf-stream/ckf-stream/streams/query"
	"github.com/ckf-stream/ckf-stream/testenv"
	"github.com/twmb/franz-go/pkg/kgo"
)

func TestQueryConfigValidate(t *testing.T) {
	x := newQIndex(t, 0)
	codec := streamtest.ConfigCodec(t)
	build := func(c query.QueryConfig) (*query.QueryService, error) {
		return query.NewQueryService(query.QueryServiceParams{Config: c, Answerer: query.NewAnswerer(x.g, nil), Codec: codec})
	}
	for _, tc := range []streamtest.IllegalCase[query.QueryConfig]{
		{Field: "ReplyTopicPrefixes[1]", Set: func(c *query.QueryConfig) { c.ReplyTopicPrefixes = []string{"replies-", ""} }},
		{Field: "Group", Set: func(c *query.QueryConfig) { c.Group = "" }},
		{Field: "MaxBatchRecords", Set: func(c *query.QueryConfig) { c.MaxBatchRecords = 0 }},
		{Field: "MaxBatchRecords", Set: func(c *query.QueryConfig) { c.MaxBatchRecords = query.MaxQueryBatchRecords + 1 }},
		{Field: "ReplyLinger", Set: func(c *query.QueryConfig) { c.ReplyLinger = -1 }},
		{Field: "ReplyTimeout", Set: func(c *query.QueryConfig) { c.ReplyTimeout = 0 }},
		{Field: "ReplyTimeout", Set: func(c *query.QueryConfig) { c.ReplyTimeout = -time.Second }},
		{Field: "CommitTimeout", Set: func(c *query.QueryConfig) { c.CommitTimeout = 0 }},
		{Field: "CommitTimeout", Set: func(c *query.QueryConfig) { c.CommitTimeout = -time.Second }},
		{Field: "Component", Set: func(c *query.QueryConfig) { c.Component = "" }},
	} {
		c := query.DefaultQueryConfig()
		tc.Set(&c)
		_, err := build(c)
		streamtest.WantConfigError(t, err, "query service", tc.Field)
	}
	for _, tc := range []streamtest.LegalCase[query.QueryConfig]{
		{Name: "the defaults", Set: func(*query.QueryConfig) {}},
		{Name: "no linger", Set: func(c *query.QueryConfig) { c.ReplyLinger = 0 }},
		{Name: "batches of one", Set: func(c *query.QueryConfig) { c.MaxBatchRecords = 1 }},
		{Name: "the largest batches", Set: func(c *query.QueryConfig) { c.MaxBatchRecords = query.MaxQueryBatchRecords }},
		{Name: "named topics", Set: func(c *query.QueryConfig) {
			c.RequestTopic, c.ReplyTopic, c.DeadLetterTopic, c.ReplyTopicPrefixes = "q", "r", "d", []string{"r-"}
		}},
	} {
		c := query.DefaultQueryConfig()
		tc.Set(&c)
		svc, err := build(c)
		if err != nil {
			t.Fatalf("%s: %v", tc.Name, err)
		}
		want := c // empty topic names are derived from the codec
		for _, d := range []struct {
			name *string
			rt   schemas.RecordType
		}{{&want.RequestTopic, schemas.TypeQueryRequest}, {&want.ReplyTopic, schemas.TypeQueryReply}, {&want.DeadLetterTopic, schemas.TypeDeadLetter}} {
			if *d.name == "" {
				*d.name = codec.Topic(d.rt)
			}
		}
		if got := svc.Config(); !reflect.DeepEqual(got, want) {
			t.Errorf("%s: the service runs with\n%+v\nnot the configuration given\n%+v", tc.Name, got, want)
		}
	}
}

func TestQueryClientConfigValidate(t *testing.T) {
	codec := streamtest.ConfigCodec(t)
	for _, tc := range []streamtest.IllegalCase[query.QueryClientConfig]{
		{Field: "ReplyPartition", Set: func(c *query.QueryClientConfig) { c.ReplyPartition = schemas.Some[int32](-1) }},
		{Field: "CallTimeout", Set: func(c *query.QueryClientConfig) { c.CallTimeout = 0 }},
		{Field: "CallTimeout", Set: func(c *query.QueryClientConfig) { c.CallTimeout = -time.Second }},
		{Field: "RequestLinger", Set: func(c *query.QueryClientConfig) { c.RequestLinger = -1 }},
		{Field: "StartTimeout", Set: func(c *query.QueryClientConfig) { c.StartTimeout = 0 }},
		{Field: "StartTimeout", Set: func(c *query.QueryClientConfig) { c.StartTimeout = -time.Second }},
	} {
		c := query.DefaultQueryClientConfig()
		tc.Set(&c)
		// Validation comes before any connection: no broker is needed to be refused.
		_, err := query.NewQueryClient(context.Background(), query.QueryClientParams{Config: c, Codec: codec})
		streamtest.WantConfigError(t, err, "query client", tc.Field)
	}
	// The legal zero, RequestLinger 0 (the default: requests sent at once), on an in-process
	// cluster.
	tp := newQTopics(t, streamtest.NewFakeKafka(t), 1)
	c := qNewClient(t, codec, tp, query.DefaultQueryClientConfig())
	want := query.DefaultQueryClientConfig()
	want.RequestTopic, want.ReplyTopic = tp.requests, tp.replies
	if got := c.Config(); !reflect.DeepEqual(got, want) || got.RequestLinger != 0 {
		t.Errorf("the client runs with %+v, not the configuration given %+v", got, want)
	}
}

// TestQueryServiceReplyLinger: the service's client lingers exactly ReplyLinger, and 0 means no
// linger (it once meant "the default, 1 ms").
func TestQueryServiceReplyLinger(t *testing.T) {
	g, codec := newQIndex(t, 0).g, qCodec(t)
	// The client joins its group as soon as it is built: an in-process cluster answers at once.
	k := streamtest.NewFakeKafka(t)
	for _, linger := range []time.Duration{0, time.Millisecond, 7 * time.Millisecond} {
		cfg := query.DefaultQueryConfig()
		cfg.ReplyLinger = linger
		// A group and a request topic of this test alone: the client joins the group at once.
		cfg.RequestTopic, cfg.Group = testenv.UniqueName(t, "queries"), testenv.UniqueName(t, "g")
		s, err := query.NewQueryService(query.QueryServiceParams{Config: cfg, Answerer: query.NewAnswerer(g, nil), Codec: codec,
			ClientOpts: []kgo.Opt{kgo.SeedBrokers(k.Seeds()...)}})
		if err != nil {
			t.Fatal(err)
		}
		cl, err := kgo.NewClient(query.ServiceClientOpts(s)...)
		if err != nil {
			t.Fatal(err)
		}
		got := cl.OptValue(kgo.ProducerLinger)
		cl.Close()
		if got != linger {
			t.Errorf("ReplyLinger %v: the client lingers %v", linger, got)
		}
	}
}
