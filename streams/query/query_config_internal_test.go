package query

import (
	"context"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/ckf/index"
	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/ckf-stream/ckf-stream/streams/internal/streamtest"
	"github.com/ckf-stream/ckf-stream/testenv"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestQueryServiceReplyLinger: the service's client lingers exactly ReplyLinger, and 0 means no
// linger (it once meant "the default, 1 ms").
func TestQueryServiceReplyLinger(t *testing.T) {
	g, codec, _ := oneLaneIndexer(t, 1024)
	// The client joins its group as soon as it is built: an in-process cluster answers at once.
	k := streamtest.NewFakeKafka(t)
	for _, linger := range []time.Duration{0, time.Millisecond, 7 * time.Millisecond} {
		cfg := DefaultQueryConfig()
		cfg.ReplyLinger = linger
		// A group and a request topic of this test alone: the client joins the group at once.
		cfg.RequestTopic, cfg.Group = testenv.UniqueName(t, "queries"), testenv.UniqueName(t, "g")
		s, err := NewQueryService(QueryServiceParams{Config: cfg, Answerer: NewAnswerer(g, nil), Codec: codec,
			ClientOpts: []kgo.Opt{kgo.SeedBrokers(k.Seeds()...)}})
		if err != nil {
			t.Fatal(err)
		}
		cl, err := kgo.NewClient(s.clientOpts()...)
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

func oneLaneIndexer(t testing.TB, bucketCount uint64) (*index.GlobalIndexer, *schemas.Codec, ckf.PoolID) {
	t.Helper()
	pool := ckf.PoolID{Dc: 1}
	m, _, err := index.NewManifest(7, pool.Domain, ckf.NewFormatIdentity(ckf.DefaultSeed, bucketCount), index.ManifestLanes{0: &pool})
	if err != nil {
		t.Fatal(err)
	}
	g, err := index.NewGlobalIndexer(m, ckf.DefaultSearchConfig())
	if err != nil {
		t.Fatal(err)
	}
	codec, err := schemas.NewCodec(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return g, codec, pool
}
