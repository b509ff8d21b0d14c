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
    replay_endpoint: tcp://vllm-0:5657
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
	if a.WorkerID != 101 || a.Endpoint != "tcp://vllm-0:5557" || a.ReplayEndpoint != "tcp://vllm-0:5657" || a.Ranks != 2 ||
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
		// The bridge library's own rules, named the same way.
		{"engines:\n  - {worker_id: 1, endpoint: \"tcp://e:5557\", replay_endpoint: \"tcp://e:5558\", ranks: 2}",
			"engine 0 (worker 1): replay_endpoint: rank 0's replay endpoint tcp://e:5558 is rank 1's PUB endpoint"},
		{"engines:\n  - {worker_id: 1, endpoint: \"tcp://e:5557\"}\n  - {worker_id: 2, endpoint: \"tcp://e:5557\"}",
			"endpoint: engines 0 and 1 both use tcp://e:5557"},
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

// The one engine of bridge.endpoint is held to the bridge library's rules before anything
// starts, with the setting named: data-parallel ranks whose PUB and replay ports meet.
func TestBridgeConfigsRefusesOverlappingRankPorts(t *testing.T) {
	cfg := load(t, "--bridge.endpoint=tcp://e:5557", "--bridge.replay_endpoint=tcp://e:5558", "--bridge.ranks=2")
	_, err := bridge.BridgeConfigs(cfg.Bridge, config.DefaultTopics(""))
	var fe *config.FieldError
	if !errors.As(err, &fe) || fe.Field != "bridge.replay_endpoint" || !strings.HasPrefix(fe.Reason, "rank 0's replay endpoint tcp://e:5558 is rank 1's PUB endpoint") {
		t.Fatalf("PUB 5557, replay 5558, 2 ranks: %v", err)
	}
	cfg = load(t, "--bridge.endpoint=tcp://e:5557", "--bridge.replay_endpoint=tcp://e:5657", "--bridge.ranks=2")
	if _, err := bridge.BridgeConfigs(cfg.Bridge, config.DefaultTopics("")); err != nil {
		t.Fatalf("PUB 5557, replay 5657, 2 ranks: %v", err)
	}
}

// TestDocumentedEnginesFilesAreAccepted: the engines files the README and bridge/README.md show
// are accepted as they stand (the README's once gave a two-rank engine PUB 5557 and replay 5558,
// which the bridge must refuse).
func TestDocumentedEnginesFilesAreAccepted(t *testing.T) {
	for _, doc := range []struct{ file, start, end string }{
		{"../../README.md", "cat > engines.yaml <<'YAML'\n", "YAML\n"},
		{"../../bridge/README.md", "## Many engines per process", "```\n\n"},
	} {
		raw, err := os.ReadFile(doc.file)
		if err != nil {
			t.Fatal(err)
		}
		text := string(raw)
		i := strings.Index(text, doc.start)
		if i < 0 {
			t.Fatalf("%s: no %q", doc.file, doc.start)
		}
		text = text[i+len(doc.start):]
		if j := strings.Index(text, "```yaml\n"); doc.file != "../../README.md" && j >= 0 {
			text = text[j+len("```yaml\n"):]
		}
		body, _, ok := strings.Cut(text, doc.end)
		if !ok || !strings.Contains(body, "engines:") {
			t.Fatalf("%s: no engines file after %q", doc.file, doc.start)
		}
		f := enginesFile(t, body)
		if _, err := bridge.BridgeConfigs(load(t, "--bridge.engines_file="+f).Bridge, config.DefaultTopics("")); err != nil {
			t.Errorf("%s's engines file refused: %v\n%s", doc.file, err, body)
		}
	}
}
