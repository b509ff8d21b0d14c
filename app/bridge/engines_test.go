package bridge_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ckf-stream/ckf-stream/app/bridge"
	"github.com/ckf-stream/ckf-stream/app/config"
)

func enginesFile(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "engines.yaml")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// Each engine of bridge.engines_file takes the bridge.* settings for the fields it leaves out.
func TestBridgeConfigsFromEnginesFile(t *testing.T) {
	f := enginesFile(t, `
engines:
  - worker_id: 101
    endpoint: tcp://vllm-0:5557
    replay_endpoint: tcp://vllm-0:5558
    ranks: 2
  - worker_id: 102
    endpoint: tcp://sglang-0:5557
    topic: kv@sglang
    block_size: 64
    lora_names: ["7=adapter-b"]
`)
	cfg := load(t, "--bridge.engines_file="+f, "--bridge.lora_names=7=adapter-a", "--bridge.replay_endpoint=tcp://shared:5558",
		"--bridge.lost_history=keep")
	got, err := bridge.BridgeConfigs(cfg.Bridge, config.DefaultTopics(""))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("%d engines", len(got))
	}
	a, b := got[0], got[1]
	if a.WorkerID != 101 || a.Endpoint != "tcp://vllm-0:5557" || a.ReplayEndpoint != "tcp://vllm-0:5558" || a.Ranks != 2 ||
		a.BlockSize != config.DefaultBridgeBlockSize || a.LoraNames[7] != "adapter-a" || a.LostHistory != "keep" {
		t.Errorf("engine 0: %+v", a)
	}
	if b.WorkerID != 102 || b.ReplayEndpoint != "tcp://shared:5558" || b.Topic != "kv@sglang" || b.BlockSize != 64 ||
		b.Ranks != 1 || b.LoraNames[7] != "adapter-b" {
		t.Errorf("engine 1: %+v", b)
	}
}

func TestEnginesFileErrors(t *testing.T) {
	for _, c := range []struct{ body, want string }{
		{"engines: []", "lists no engine"},
		{"engines:\n  - endpoint: tcp://e:5557", "worker_id and endpoint are required"},
		{"engines:\n  - worker_id: 1", "worker_id and endpoint are required"},
		{"engines:\n  - worker_id: 1\n    endpoint: tcp://e:5557\n    endpiont: x", "field endpiont not found"},
		{"engines:\n  - worker_id: 1\n    endpoint: tcp://e:5557\n    lora_names: [nope]", "engine 0 (worker 1): bridge.lora_names"},
	} {
		f := enginesFile(t, c.body)
		_, err := bridge.BridgeConfigs(load(t, "--bridge.engines_file="+f).Bridge, config.DefaultTopics(""))
		var fe *config.FieldError
		if !errors.As(err, &fe) || fe.Field != "bridge.engines_file" || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), f) {
			t.Errorf("%q: %v, want a bridge.engines_file error naming the file and %q", c.body, err, c.want)
		}
	}
	if _, err := bridge.BridgeConfigs(load(t, "--bridge.engines_file=/nonexistent/engines.yaml").Bridge, config.DefaultTopics("")); !errors.Is(err, config.ErrInvalid) {
		t.Errorf("a missing file: %v", err)
	}
}
