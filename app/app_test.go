package app_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/app"
	"github.com/ckf-stream/ckf-stream/app/config"
	"github.com/ckf-stream/ckf-stream/app/httpserver"
	"github.com/ckf-stream/ckf-stream/app/kafka"
	"github.com/ckf-stream/ckf-stream/testenv"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	tally "github.com/uber-go/tally/v4"
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

func get(url string) (int, string, error) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}

// TestProcessOnRealBroker runs the core modules against the real broker with a component that
// produces a record and counts it, then checks /healthz, /readyz and /metrics (the tally counter
// and franz-go's kprom series of the component's client), and that on stop the HTTP server closes
// before the component stops.
func TestProcessOnRealBroker(t *testing.T) {
	prefix := testenv.UniqueName(t, "app") + "."
	cfg := load(t, "--kafka.brokers="+strings.Join(testenv.Brokers(t), ","), "--topic_prefix="+prefix, "--metrics.report_interval=50ms")
	admin := testenv.Client(t)
	t.Cleanup(func() {
		var names []string
		for _, s := range kafka.TopicLayout(cfg.Topics) {
			names = append(names, s.Name)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = kadm.NewClient(admin).DeleteTopics(ctx, names...)
	})

	var srv *httpserver.Server
	httpClosedFirst := make(chan error, 1)
	component := fx.Invoke(func(lc fx.Lifecycle, conn *kafka.Connection, scope tally.Scope) {
		produced := scope.SubScope("test").Counter("produced_total")
		var cl *kgo.Client
		lc.Append(fx.Hook{
			OnStart: func(ctx context.Context) error {
				var err error
				cl, err = conn.NewClient("test-producer", kgo.DefaultProduceTopic(conn.Topics.Control))
				if err != nil {
					return err
				}
				if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte("hello")}).FirstErr(); err != nil {
					return err
				}
				produced.Inc(1)
				return nil
			},
			OnStop: func(context.Context) error {
				_, _, err := get("http://" + srv.Addr().String() + "/healthz")
				httpClosedFirst <- err
				cl.Close()
				return nil
			},
		})
	})
	a := app.New(cfg, component, fx.Populate(&srv))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	base := "http://" + srv.Addr().String()
	if code, body, err := get(base + "/healthz"); err != nil || code != 200 {
		t.Errorf("/healthz = %d %q %v", code, body, err)
	}
	if code, body, err := get(base + "/readyz"); err != nil || code != 200 || body != "ready\nok kafka\n" {
		t.Errorf("/readyz = %d %q %v", code, body, err)
	}
	wants := []string{
		"ckf_test_produced_total 1",
		`ckf_kafka_produce_records_total{client="test-producer",`,
		`ckf_kafka_connects_total{client="admin",`,
	}
	var missing []string
	testenv.WaitUntil(t, 10*time.Second, "the component's and the Kafka clients' series on /metrics", func() bool {
		_, body, _ := get(base + "/metrics")
		missing = missing[:0]
		for _, w := range wants {
			if !strings.Contains(body, w) {
				missing = append(missing, w)
			}
		}
		return len(missing) == 0
	}, func() string { return fmt.Sprintf("/metrics lacks %q", missing) })
	if err := a.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-httpClosedFirst; err == nil {
		t.Errorf("the HTTP server still answered while the component stopped; it must close first")
	}
}

// TestRunExitCodeFromShutdowner: a component's Shutdown(ExitCode(n)) ends Run with n.
func TestRunExitCodeFromShutdowner(t *testing.T) {
	cfg := load(t)
	a := app.New(cfg, fx.Invoke(func(lc fx.Lifecycle, sd fx.Shutdowner) {
		lc.Append(fx.StartHook(func() error { return sd.Shutdown(fx.ExitCode(3)) }))
	}))
	code, err := app.Run(a)
	if code != 3 || err != nil {
		t.Fatalf("Run = %d, %v; want 3, nil", code, err)
	}
}

func TestRunFailures(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	code, err := app.Run(app.New(load(t, "--http.listen="+ln.Addr().String())))
	var re *app.RunError
	if code != 1 || !errors.As(err, &re) || re.Phase != app.PhaseStart || !strings.Contains(err.Error(), "http.listen") {
		t.Errorf("port taken: Run = %d, %v; want 1 and a start error naming http.listen", code, err)
	}

	// A constructor's error is the whole build error, without fx's and dig's wrapping (the
	// function being built, its file and line); a configuration error exits with status 2.
	type component struct{}
	refused := &config.FieldError{Field: "bridge.replay_endpoint", Reason: "overlaps the PUB ports"}
	code, err = app.Run(app.New(load(t), fx.Provide(func() (*component, error) { return nil, refused }), fx.Invoke(func(*component) {})))
	if code != app.ExitConfig || !errors.As(err, &re) || re.Phase != app.PhaseBuild || !errors.Is(err, refused) ||
		err.Error() != "build: config: bridge.replay_endpoint: overlaps the PUB ports" {
		t.Errorf("a constructor's configuration error: Run = %d, %v; want 2 and only the error", code, err)
	}
	plain := errors.New("bridge: no codec")
	code, err = app.Run(app.New(load(t), fx.Provide(func() (*component, error) { return nil, plain }), fx.Invoke(func(*component) {})))
	if code != app.ExitFailure || err == nil || err.Error() != "build: bridge: no codec" {
		t.Errorf("a constructor's error: Run = %d, %v; want 1 and only the error", code, err)
	}

	type missing struct{}
	code, err = app.Run(app.New(load(t), fx.Invoke(func(missing) {})))
	if code != 1 || !errors.As(err, &re) || re.Phase != app.PhaseBuild {
		t.Errorf("missing dependency: Run = %d, %v; want 1 and a build error", code, err)
	}

	code, err = app.Run(app.New(load(t, "--shutdown_timeout=50ms"), fx.Invoke(func(lc fx.Lifecycle, sd fx.Shutdowner) {
		lc.Append(fx.Hook{
			OnStart: func(context.Context) error { return sd.Shutdown() },
			OnStop:  func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() },
		})
	})))
	if code != 1 || !errors.As(err, &re) || re.Phase != app.PhaseStop || !strings.Contains(err.Error(), "shutdown_timeout 50ms") {
		t.Errorf("slow stop: Run = %d, %v; want 1 and a stop error naming shutdown_timeout", code, err)
	}
}
