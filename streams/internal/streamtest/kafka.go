package streamtest

import (
	"testing"

	"github.com/ckf-stream/ckf-stream/testenv"
	"github.com/twmb/franz-go/pkg/kfake"
)

// Kafka is where one test's topics, clients and services live: an in-process kfake cluster
// (NewFakeKafka), for the logic of a consumer group member, a producer or a reader, or the shared
// test broker (BrokerKafka), for what only a real broker shows (the last stable offset under
// read_committed, the broker's group timings, real latencies). Tests written against Kafka run
// on either by changing the constructor; topics, clients, admin and reads are testenv.Cluster's.
type Kafka struct {
	*testenv.Cluster
	// Fake is the kfake cluster, nil on the shared broker: tests inject faults through it.
	Fake *kfake.Cluster
}

// NewFakeKafka starts a one-broker kfake cluster for the test (testenv.StartFake, closed when it
// ends). Topic auto-creation is off, as on the test broker.
func NewFakeKafka(t testing.TB, opts ...kfake.Opt) *Kafka {
	t.Helper()
	c, f := testenv.StartFake(t, opts...)
	return &Kafka{Cluster: c, Fake: f}
}

// BrokerKafka is the shared test broker, failing the test when none is reachable.
func BrokerKafka(t testing.TB) *Kafka {
	t.Helper()
	return &Kafka{Cluster: testenv.Default(t)}
}
