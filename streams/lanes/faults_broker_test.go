package lanes_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/streams/internal/streamtest"
	"github.com/ckf-stream/ckf-stream/testenv"
)

// TestIndexerSurvivesBrokerRestart restarts the broker under a running indexer while producers
// keep publishing: the indexer reconnects, its lanes either stay correct or fault and recover,
// and afterwards its tables and answers equal the reference (a run without the restart).
// Broker: a private broker restarted under the running indexer and producers.
func TestIndexerSurvivesBrokerRestart(t *testing.T) {
	testenv.NeedKafkaJars(t)
	t.Parallel()
	testenv.Brokers(t) // the jars come with the shared broker; fail early with the usual message
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	b, err := testenv.StartBroker(ctx, testenv.BrokerConfig{RunDir: filepath.Join(t.TempDir(), "kafka")})
	if err != nil {
		t.Fatalf("private broker: %v", err)
	}
	t.Cleanup(func() { _ = b.Kill() })

	e := streamtest.NewEnvOn(t, b.Cluster(), 4096)
	e.WriteTimeout = 3 * time.Minute // the writes below wait for the restart, which took 30 s and more beside a CPU hog
	lanes := []uint8{1, 6}
	m := e.Manifest(61, lanes...)
	var ps []*streamtest.Producer
	for _, l := range lanes {
		p := e.Producer(l, 1)
		p.Snapshot()
		p.StoreChain(8, nil, 0)
		ps = append(ps, p)
	}
	ri := e.StartIndexer(m, e.IndexerConfig())
	for _, p := range ps {
		streamtest.WaitLane(t, ri, p, streamtest.Converge)
	}

	restarted := make(chan error, 1)
	go func() { restarted <- b.Restart(ctx) }()
	// Producers keep writing through the restart: their writes block until the broker is back.
	for i := 0; i < 6; i++ {
		for _, p := range ps {
			p.StoreChain(4, p.Chains[0], i%5)
		}
	}
	if err := <-restarted; err != nil {
		t.Fatalf("restart: %v", err)
	}
	t.Logf("broker restarted in %v", b.Startup.Round(time.Millisecond))
	for _, p := range ps {
		p.StoreChain(6, nil, 0)
	}
	for _, p := range ps {
		streamtest.WaitLane(t, ri, p, 2*streamtest.Converge)
	}
	streamtest.CompareQueries(t, ri.Indexer.GlobalIndexer(), streamtest.ReferenceIndexer(t, m, ps...), ps...)
}
