package bridge_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/app"
	"github.com/ckf-stream/ckf-stream/app/bridge"
	"github.com/ckf-stream/ckf-stream/app/config"
	"github.com/ckf-stream/ckf-stream/app/httpserver"
	"github.com/ckf-stream/ckf-stream/app/kafka"
	"github.com/ckf-stream/ckf-stream/bridge/kvevents"
	"github.com/ckf-stream/ckf-stream/testenv"
	"github.com/go-zeromq/zmq4"
	"github.com/twmb/franz-go/pkg/kadm"
	"go.uber.org/fx"
)

func load(t *testing.T, args ...string) config.Config {
	t.Helper()
	cfg, err := config.Load(config.Sources{
		Args:      append([]string{"--http.listen=127.0.0.1:0", "--log.level=warn"}, args...),
		LookupEnv: func(string) (string, bool) { return "", false },
	})
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func TestBridgeConfigErrors(t *testing.T) {
	_, err := bridge.BridgeConfig(load(t).Bridge, config.DefaultTopics(""))
	var fe *config.FieldError
	if !errors.As(err, &fe) || fe.Field != "bridge.endpoint" || !errors.Is(err, config.ErrInvalid) {
		t.Fatalf("no endpoint: %v", err)
	}
	_, err = config.Load(config.Sources{Args: []string{"--bridge.lora_names=3=a,x"}, LookupEnv: func(string) (string, bool) { return "", false }})
	if err == nil || !strings.Contains(err.Error(), "bridge.lora_names") {
		t.Fatalf("bad LoRA map: %v", err)
	}
	cfg, err := bridge.BridgeConfig(load(t, "--bridge.endpoint=tcp://e:5557", "--bridge.lora_names=3=a,0x10=b", "--bridge.ranks=2").Bridge, config.DefaultTopics("p."))
	if err != nil || cfg.LoraNames[3] != "a" || cfg.LoraNames[16] != "b" || cfg.Ranks != 2 || cfg.KVTopic != "p.kv-events" || !cfg.Resume {
		t.Fatalf("%+v %v", cfg, err)
	}
	for _, bad := range [][]string{{"--bridge.block_size=0"}, {"--bridge.ranks=2", "--bridge.endpoint=tcp://e"}, {"--bridge.endpoint=e:5557"},
		{"--bridge.replay_timeout=0s"}, {"--bridge.buffer_batches=0"}} {
		_, err := config.Load(config.Sources{Args: bad, LookupEnv: func(string) (string, bool) { return "", false }})
		if !errors.Is(err, config.ErrInvalid) || !strings.Contains(err.Error(), "bridge.") {
			t.Errorf("%v: %v", bad, err)
		}
	}
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestBridgeModuleOnRealBroker runs processor bridge's module on the real broker: /readyz turns
// ok once the bridge has dialled the engine's PUB socket, a batch is counted, and the series
// reach /metrics under Prometheus names.
func TestBridgeModuleOnRealBroker(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pub := zmq4.NewPub(ctx)
	defer pub.Close()
	if err := pub.Listen("tcp://127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	endpoint := "tcp://" + pub.Addr().String()
	prefix := testenv.UniqueName(t, "bridge") + "."
	cfg := load(t, "--kafka.brokers="+strings.Join(testenv.Brokers(t), ","), "--topic_prefix="+prefix,
		"--metrics.report_interval=50ms", "--bridge.endpoint="+endpoint, "--bridge.block_size=4",
		"--bridge.worker_id=9")
	t.Cleanup(func() {
		var names []string
		for _, s := range kafka.TopicLayout(cfg.Topics) {
			names = append(names, s.Name)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = kadm.NewClient(testenv.Client(t)).DeleteTopics(ctx, names...)
	})
	var srv *httpserver.Server
	a := app.New(cfg, bridge.Module, fx.Populate(&srv))
	if err := a.Err(); err != nil {
		t.Fatal(err)
	}
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = a.Stop(context.Background()) }()
	url := "http://" + srv.Addr().String()
	testenv.WaitUntil(t, time.Minute, "/readyz ok", func() bool {
		code, body := get(t, url+"/readyz")
		return code == http.StatusOK && strings.Contains(body, "ok bridge")
	})
	payload, err := os.ReadFile("../../bridge/kvevents/testdata/shapes/sglang_array.msgpack")
	if err != nil {
		t.Fatal(err)
	}
	wants := []string{"ckf_bridge_batches_total 1", `ckf_bridge_events_total{kind="stored"} 1`, `ckf_bridge_records_total{kind="removed"} 1`,
		"ckf_bridge_produce_latency_seconds_bucket", "ckf_bridge_sequence_lag_batches",
		// What the alert CkfBridgeLostEngineHistory and the lost-history docs name, served at 0.
		"ckf_bridge_lost_batches_total 0", "ckf_bridge_degraded_ranks 0", "ckf_bridge_lost_history_clears_total 0"}
	var missing []string
	// A PUB socket drops messages until the subscription reaches it, so the batch is sent again
	// (as the same sequence 0: a duplicate to the bridge) until the bridge has counted it.
	testenv.WaitUntilEvery(t, 50*time.Millisecond, time.Minute, "the bridge's series on /metrics", func() bool {
		if err := pub.Send(zmq4.NewMsgFrom([]byte{}, kvevents.SeqFrame(0), payload)); err != nil {
			t.Fatal(err)
		}
		_, body := get(t, url+"/metrics")
		missing = missing[:0]
		for _, w := range wants {
			if !strings.Contains(body, w) {
				missing = append(missing, w)
			}
		}
		return len(missing) == 0
	}, func() string {
		_, body := get(t, url+"/metrics")
		var lines []string
		for _, l := range strings.Split(body, "\n") {
			if strings.HasPrefix(l, "ckf_bridge") {
				lines = append(lines, l)
			}
		}
		return fmt.Sprintf("/metrics lacks %q; has %q", missing, lines)
	})
}
