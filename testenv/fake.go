package testenv

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"
)

// FakeCluster starts an in-process Kafka cluster (kfake, one broker unless opts say otherwise)
// closed when the test ends, as a Cluster: the same topics, clients and admin calls as the shared
// broker, for tests of logic that does not depend on what only a real broker shows (transaction
// markers and the last stable offset as a broker writes them, fencing of a zombie producer,
// retention). Each call is a cluster of its own, so tests on it may run in parallel.
func FakeCluster(t testing.TB, opts ...kfake.Opt) *Cluster {
	t.Helper()
	c, _ := StartFake(t, opts...)
	return c
}

// StartFake is FakeCluster that also returns the kfake handle, for tests that inject faults
// (kfake's Fault) or inspect the fake's state.
func StartFake(t testing.TB, opts ...kfake.Opt) (*Cluster, *kfake.Cluster) {
	t.Helper()
	f, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(1)}, opts...)...)
	if err != nil {
		t.Fatalf("kfake cluster: %v", err)
	}
	t.Cleanup(f.Close)
	return &Cluster{seeds: f.ListenAddrs()}, f
}
