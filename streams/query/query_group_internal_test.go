package query

import (
	"context"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/ckf/index"
	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestQueryGroupFailsOverWithinTheBrokerMinimum: the query service's consumer group member
// declares a 6 s session timeout (the broker's default group.min.session.timeout.ms) with 1 s
// heartbeats and balances cooperatively, so the partitions of a replica that died move within
// about 6 s plus a rebalance (docs/RELIABILITY.md has the measured figure). The service once took
// franz-go's defaults: a 45 s session, and requests waiting about 48 s.
func TestQueryGroupFailsOverWithinTheBrokerMinimum(t *testing.T) {
	codec, err := schemas.NewCodec(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	domain, err := ckf.ParseIndexerDomainID("c5000000000000000000000000000000:5c000000000000000000000000000000", ckf.IdentityExplicit)
	if err != nil {
		t.Fatal(err)
	}
	pool := ckf.PoolID{Domain: domain, Dc: 0x10}
	m, _, err := index.NewManifest(1, domain, ckf.NewFormatIdentity(ckf.DefaultSeed, 1024), index.ManifestLanes{0: &pool})
	if err != nil {
		t.Fatal(err)
	}
	g, err := index.NewGlobalIndexer(m, ckf.DefaultSearchConfig())
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewQueryService(QueryServiceParams{Config: DefaultQueryConfig(), Answerer: NewAnswerer(g, nil), Codec: codec})
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(s.clientOpts()...) // never connects: the options are local
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if got := cl.OptValue(kgo.SessionTimeout).(time.Duration); got != 6*time.Second {
		t.Errorf("session timeout %v, want 6s", got)
	}
	if got := cl.OptValue(kgo.HeartbeatInterval).(time.Duration); got != time.Second {
		t.Errorf("heartbeat interval %v, want 1s", got)
	}
	bs := cl.OptValues(kgo.Balancers)
	if len(bs) != 1 {
		t.Fatalf("balancers %v", bs)
	}
	if b, ok := bs[0].([]kgo.GroupBalancer); !ok || len(b) != 1 || b[0].ProtocolName() != "cooperative-sticky" {
		t.Errorf("balancers %v, want cooperative-sticky alone", bs[0])
	}
}
