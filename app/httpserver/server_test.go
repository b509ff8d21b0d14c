package httpserver_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/app/config"
	"github.com/ckf-stream/ckf-stream/app/httpserver"
	"github.com/ckf-stream/ckf-stream/testenv"
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
// once CheckTimeout passes, and /readyz still answers. The bound is read from the check's
// context, not from a stopwatch: its deadline is at least CheckTimeout after the request was
// sent and at most CheckTimeout after the check was called.
func TestReadinessCheckTimeout(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for CheckTimeout")
	}
	type bound struct {
		deadline, called time.Time
		ok               bool
	}
	bounds := make(chan bound, 1)
	s, err := httpserver.New(httpserver.Params{
		Config: config.HTTP{Listen: "127.0.0.1:0"},
		Checks: []httpserver.ReadinessCheck{{Name: "slow", Check: func(ctx context.Context) error {
			dl, ok := ctx.Deadline()
			bounds <- bound{deadline: dl, called: time.Now(), ok: ok}
			if !ok {
				return errors.New("the check's context has no deadline")
			}
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
	sent := time.Now()
	code, body := get(t, "http://"+s.Addr().String()+"/readyz")
	if code != 503 || !strings.Contains(body, "fail slow: context deadline exceeded") {
		t.Errorf("/readyz = %d %q", code, body)
	}
	b := <-bounds
	if !b.ok || b.deadline.Before(sent.Add(httpserver.CheckTimeout)) || b.deadline.After(b.called.Add(httpserver.CheckTimeout)) {
		t.Errorf("check context deadline %v (set: %v), want CheckTimeout (%v) after the check started; request sent at %v, check called at %v",
			b.deadline, b.ok, httpserver.CheckTimeout, sent, b.called)
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

// gatedServer is a started server whose GET /slow handler closes started when it runs, then
// blocks until release is closed; returned is set once the handler has returned.
type gatedServer struct {
	s        *httpserver.Server
	started  chan struct{}
	release  chan struct{}
	returned atomic.Bool
}

func startGatedServer(t *testing.T) *gatedServer {
	t.Helper()
	g := &gatedServer{started: make(chan struct{}), release: make(chan struct{})}
	s, err := httpserver.New(httpserver.Params{
		Config: config.HTTP{Listen: "127.0.0.1:0"},
		Routes: []httpserver.Route{{Pattern: "GET /slow", Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			defer g.returned.Store(true)
			close(g.started)
			<-g.release
			_, _ = io.WriteString(w, "done")
		})}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	g.s = s
	return g
}

// slowRequest sends GET /slow in a goroutine and delivers its body (or error) on the channel.
func (g *gatedServer) slowRequest() <-chan error {
	out := make(chan error, 1)
	go func() {
		resp, err := http.Get("http://" + g.s.Addr().String() + "/slow")
		if err == nil {
			var body []byte
			body, err = io.ReadAll(resp.Body)
			resp.Body.Close()
			if err == nil && string(body) != "done" {
				err = fmt.Errorf("body %q", body)
			}
		}
		out <- err
	}()
	return out
}

// waitRefusing waits until the server refuses new connections: Stop closes the listener first,
// so from then on Stop is under way.
func (g *gatedServer) waitRefusing(t *testing.T) {
	t.Helper()
	addr := g.s.Addr().String()
	testenv.WaitUntil(t, 30*time.Second, "Stop closes the listener of "+addr, func() bool {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
		}
		return err != nil
	})
}

// TestGracefulStopWaitsForRequests: Stop lets a request in flight finish, and returns only after
// its handler did.
func TestGracefulStopWaitsForRequests(t *testing.T) {
	g := startGatedServer(t)
	got := g.slowRequest()
	<-g.started
	type stopResult struct {
		err             error
		handlerReturned bool
	}
	stopped := make(chan stopResult, 1)
	go func() {
		err := g.s.Stop(context.Background())
		stopped <- stopResult{err, g.returned.Load()}
	}()
	g.waitRefusing(t)
	close(g.release)
	if err := <-got; err != nil {
		t.Errorf("the in-flight request: %v", err)
	}
	if r := <-stopped; r.err != nil || !r.handlerReturned {
		t.Errorf("Stop = %v, handler returned before it: %v; want nil after the handler", r.err, r.handlerReturned)
	}
}

// TestStopWaitsUntilItsContextEnds: with a request in flight, Stop is still waiting when its
// context is cancelled, and then reports the cancellation (a Stop that did not wait for the
// request would have returned nil). No sleep is needed to show the wait: the handler cannot
// finish before the test releases it, which it does only after Stop returned.
func TestStopWaitsUntilItsContextEnds(t *testing.T) {
	g := startGatedServer(t)
	got := g.slowRequest()
	<-g.started
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- g.s.Stop(ctx) }()
	g.waitRefusing(t)
	cancel()
	if err := <-stopped; !errors.Is(err, context.Canceled) {
		t.Errorf("Stop = %v, want the cancellation of its context", err)
	}
	close(g.release) // Stop has returned: a request it left open could now complete
	if err := <-got; err == nil {
		t.Error("the request left in flight when Stop gave up was answered; Stop must close it")
	}
}
