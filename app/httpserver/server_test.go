package httpserver_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/app/config"
	"github.com/ckf-stream/ckf-stream/app/httpserver"
	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"
)

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}

// TestServerInApp runs the module in an fx application with a route and a readiness check
// contributed through the value groups, and flips the check.
func TestServerInApp(t *testing.T) {
	var ready atomic.Bool
	var srv *httpserver.Server
	app := fxtest.New(t,
		fx.Supply(config.HTTP{Listen: "127.0.0.1:0"}),
		fx.Provide(
			httpserver.AsRoute(func() httpserver.Route {
				return httpserver.Route{Pattern: "GET /v1/lanes", Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
					_, _ = io.WriteString(w, `{"lanes":[]}`)
				})}
			}),
			httpserver.AsReadinessCheck(func() httpserver.ReadinessCheck {
				return httpserver.ReadinessCheck{Name: "lanes", Check: func(context.Context) error {
					if !ready.Load() {
						return errors.New("lane 3 is catching up")
					}
					return nil
				}}
			}),
			httpserver.AsReadinessCheck(func() httpserver.ReadinessCheck {
				return httpserver.ReadinessCheck{Name: "always", Check: func(context.Context) error { return nil }}
			}),
		),
		httpserver.Module,
		fx.Populate(&srv),
	)
	app.RequireStart()
	base := "http://" + srv.Addr().String()

	if code, body := get(t, base+"/healthz"); code != 200 || body != "ok\n" {
		t.Errorf("/healthz = %d %q", code, body)
	}
	if code, body := get(t, base+"/readyz"); code != 503 || body != "not ready\nok always\nfail lanes: lane 3 is catching up\n" {
		t.Errorf("/readyz before ready = %d %q", code, body)
	}
	ready.Store(true)
	if code, body := get(t, base+"/readyz"); code != 200 || body != "ready\nok always\nok lanes\n" {
		t.Errorf("/readyz when ready = %d %q", code, body)
	}
	if code, body := get(t, base+"/v1/lanes"); code != 200 || body != `{"lanes":[]}` {
		t.Errorf("/v1/lanes = %d %q", code, body)
	}
	resp, err := http.Post(base+"/v1/lanes", "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST /v1/lanes = %d, want 405", resp.StatusCode)
	}
	app.RequireStop()
	if _, err := http.Get(base + "/healthz"); err == nil {
		t.Errorf("server still answers after stop")
	}
}

// TestReadinessCheckTimeout: a check that blocks until its context ends is reported as failed
// after CheckTimeout, and /readyz still answers.
func TestReadinessCheckTimeout(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for CheckTimeout")
	}
	s, err := httpserver.New(httpserver.Params{
		Config: config.HTTP{Listen: "127.0.0.1:0"},
		Checks: []httpserver.ReadinessCheck{{Name: "slow", Check: func(ctx context.Context) error {
			<-ctx.Done()
			return ctx.Err()
		}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer s.Stop(context.Background())
	began := time.Now()
	code, body := get(t, "http://"+s.Addr().String()+"/readyz")
	if code != 503 || !strings.Contains(body, "fail slow: context deadline exceeded") {
		t.Errorf("/readyz = %d %q", code, body)
	}
	if d := time.Since(began); d > httpserver.CheckTimeout+time.Second {
		t.Errorf("/readyz took %v", d)
	}
}

func TestConflictingRoutesFailNew(t *testing.T) {
	h := http.NotFoundHandler()
	for _, routes := range [][]httpserver.Route{
		{{Pattern: "GET /healthz", Handler: h}},
		{{Pattern: "GET /x", Handler: h}, {Pattern: "GET /x", Handler: h}},
		{{Pattern: "GET /y", Handler: nil}},
		{{Pattern: "BAD PATTERN WITH SPACES", Handler: h}},
	} {
		if _, err := httpserver.New(httpserver.Params{Config: config.HTTP{Listen: "127.0.0.1:0"}, Routes: routes}); err == nil {
			t.Errorf("New with routes %v succeeded", routes)
		}
	}
	if _, err := httpserver.New(httpserver.Params{Checks: []httpserver.ReadinessCheck{{Name: "x"}}}); err == nil {
		t.Errorf("New with a check without a function succeeded")
	}
}

func TestListenErrorFailsStart(t *testing.T) {
	a, err := httpserver.New(httpserver.Params{Config: config.HTTP{Listen: "127.0.0.1:0"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer a.Stop(context.Background())
	b, err := httpserver.New(httpserver.Params{Config: config.HTTP{Listen: a.Addr().String()}})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(context.Background()); err == nil || !strings.Contains(err.Error(), "http.listen") {
		t.Errorf("second listener on %s: %v, want an error naming http.listen", a.Addr(), err)
	}
}

// TestGracefulStopWaitsForRequests: Stop lets a request in flight finish.
func TestGracefulStopWaitsForRequests(t *testing.T) {
	started := make(chan struct{})
	release := make(chan struct{})
	s, err := httpserver.New(httpserver.Params{
		Config: config.HTTP{Listen: "127.0.0.1:0"},
		Routes: []httpserver.Route{{Pattern: "GET /slow", Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			close(started)
			<-release
			_, _ = io.WriteString(w, "done")
		})}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 1)
	go func() {
		_, body := get(t, "http://"+s.Addr().String()+"/slow")
		got <- body
	}()
	<-started
	stopped := make(chan error, 1)
	go func() { stopped <- s.Stop(context.Background()) }()
	select {
	case err := <-stopped:
		t.Fatalf("Stop returned (%v) with a request in flight", err)
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	if body := <-got; body != "done" {
		t.Errorf("in-flight request got %q", body)
	}
	if err := <-stopped; err != nil {
		t.Errorf("Stop: %v", err)
	}
}
