package bridge

import (
	"errors"
	"strings"
	"testing"

	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/twmb/franz-go/pkg/kgo"
)

func TestNewFleetRefusesSharedWorkersAndEndpoints(t *testing.T) {
	prod, err := kgo.NewClient(kgo.SeedBrokers("127.0.0.1:1"))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	codec, err := schemas.NewCodec(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	engine := func(worker uint64, ep, replay string, ranks int) Config {
		c := DefaultConfig()
		c.WorkerID, c.Endpoint, c.ReplayEndpoint, c.Ranks, c.KVTopic, c.DeadLetterTopic = worker, ep, replay, ranks, "kv", "dl"
		return c
	}
	for _, c := range []struct {
		name    string
		engines []Config
		want    string
	}{
		{"none", nil, "no engine"},
		{"same worker", []Config{engine(1, "tcp://a:5557", "", 1), engine(1, "tcp://b:5557", "", 1)}, "same worker id 1"},
		{"same endpoint", []Config{engine(1, "tcp://a:5557", "", 1), engine(2, "tcp://a:5557", "", 1)}, "both use tcp://a:5557"},
		{"rank ports overlap another engine", []Config{engine(1, "tcp://a:5557", "", 2), engine(2, "tcp://a:5558", "", 1)}, "both use tcp://a:5558"},
		{"own ranks overlap its replay", []Config{engine(1, "tcp://a:5557", "tcp://a:5558", 2)}, "engine 0 (worker 1): bridge: invalid configuration: replay_endpoint: rank 0's replay endpoint tcp://a:5558 is rank 1's PUB endpoint"},
		{"different topics", []Config{engine(1, "tcp://a:5557", "", 1), func() Config { c := engine(2, "tcp://b:5557", "", 1); c.KVTopic = "other"; return c }()}, "write different topics"},
		{"an invalid engine", []Config{engine(1, "tcp://a:5557", "", -1)}, "engine 0 (worker 1)"},
	} {
		_, err := NewFleet(FleetParams{Configs: c.engines, Codec: codec, Producer: prod})
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want ErrConfig with %q", c.name, err, c.want)
		}
	}
	f, err := NewFleet(FleetParams{Configs: []Config{engine(1, "tcp://a:5557", "tcp://a:6557", 2), engine(2, "tcp://a:5559", "tcp://a:6559", 1)},
		Codec: codec, Producer: prod})
	if err != nil || len(f.Bridges()) != 2 {
		t.Fatalf("two engines side by side: %v", err)
	}
	if err := f.Ready(); err == nil || !strings.Contains(err.Error(), "worker 1") {
		t.Errorf("Ready before Run = %v, want the first engine named", err)
	}
}
