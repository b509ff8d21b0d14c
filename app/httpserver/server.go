// Package httpserver is the process's HTTP server: /healthz, /readyz, and the routes other modules
// contribute (/metrics from the metrics module; the indexer's query endpoint and lane pages).
//
// A module adds a route by providing a Route into the value group "routes", and a readiness
// condition by providing a ReadinessCheck into the value group "readiness", either as fields of
// an fx.Out result (app/indexer's Provide returns its API's routes and its "lanes" check so) or
// one at a time:
//
//	fx.Provide(
//		httpserver.AsRoute(func(a *indexer.API) httpserver.Route {
//			return httpserver.Route{Pattern: "GET /v1/lanes", Handler: a.LanesHandler()}
//		}),
//		httpserver.AsReadinessCheck(func(a *indexer.API) httpserver.ReadinessCheck {
//			return httpserver.ReadinessCheck{Name: "lanes", Check: a.Ready}
//		}),
//	)
package httpserver

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/ckf-stream/ckf-stream/app/config"
	"github.com/ckf-stream/ckf-stream/app/metrics"
	"go.uber.org/fx"
	"go.uber.org/zap"
)

// Route is one handler the server serves.
type Route struct {
	// Pattern is a net/http ServeMux pattern, normally with its method: "GET /v1/lanes",
	// "POST /v1/prefix-matches". Two routes with conflicting patterns fail New.
	Pattern string
	Handler http.Handler
}

// ReadinessCheck is one condition of /readyz.
type ReadinessCheck struct {
	// Name identifies the check in /readyz's body and in logs: "kafka", "lanes".
	Name string
	// Check returns nil when its part of the process is ready to serve, or an error saying why
	// not. It runs on every /readyz request, with a context that ends after CheckTimeout, so it
	// must be cheap, safe for concurrent use, and return when ctx ends.
	Check func(ctx context.Context) error
}

// CheckTimeout bounds one readiness check of one /readyz request.
const CheckTimeout = 2 * time.Second

// AsRoute annotates a constructor that returns a Route so that its result joins the server's
// routes (the value group "routes").
func AsRoute(constructor any) any {
	return fx.Annotate(constructor, fx.ResultTags(`group:"routes"`))
}

// AsReadinessCheck annotates a constructor that returns a ReadinessCheck so that its result
// joins /readyz's checks (the value group "readiness").
func AsReadinessCheck(constructor any) any {
	return fx.Annotate(constructor, fx.ResultTags(`group:"readiness"`))
}

// Params are New's inputs.
type Params struct {
	fx.In

	// Early, when present, is the listener opened at process start (EarlyModule): the server
	// takes it over at its own start instead of listening then.
	Early  *Early `optional:"true"`
	Config config.HTTP
	Logger *zap.Logger      `optional:"true"`
	Routes []Route          `group:"routes"`
	Checks []ReadinessCheck `group:"readiness"`
	// Metrics, when the application has them (app/metrics), are served at GET /metrics.
	Metrics *metrics.Metrics `optional:"true"`
	// Shutdowner, when set, stops the application if the server fails after it started
	// (the listener breaks); without it the failure is only logged.
	Shutdowner fx.Shutdowner `optional:"true"`
}

// Server is the HTTP server. Start listens and serves in the background; Stop shuts it down
// gracefully.
type Server struct {
	cfg        config.HTTP
	log        *zap.Logger
	mux        *http.ServeMux
	handler    http.Handler // mux behind the access control
	checks     []ReadinessCheck
	shutdowner fx.Shutdowner
	early      *Early
	access     access
	tls        *tls.Config
	patterns   []string

	srv  *http.Server
	addr net.Addr
	done chan struct{} // closed when Serve has returned
}

// New builds the server and its routes; it listens only at Start. Besides p.Routes it serves
// GET /healthz (200 while the process runs) and GET /readyz (200 when every check passes, else
// 503, with one line per check in the body). With http.tls it serves HTTPS; with
// http.auth.bearer_token_file or http.tls.client_ca_file every route but OpenPatterns answers
// 401 or 403 to a request without the credentials. The token and certificate files are read
// here: a missing or malformed one is a *config.FieldError naming the setting.
func New(p Params) (*Server, error) {
	s := &Server{
		cfg:        p.Config,
		log:        p.Logger,
		mux:        http.NewServeMux(),
		checks:     append([]ReadinessCheck(nil), p.Checks...),
		shutdowner: p.Shutdowner,
		early:      p.Early,
	}
	if s.log == nil {
		s.log = zap.NewNop()
	}
	s.log = s.log.Named("http")
	var err error
	if s.access, err = newAccess(p.Config); err != nil {
		return nil, err
	}
	if s.tls, err = serverTLS(p.Config.TLS); err != nil {
		return nil, err
	}
	if s.access.needToken && s.tls == nil {
		s.log.Warn("http.auth.bearer_token_file without http.tls: the token crosses the network in clear text unless a proxy in front terminates TLS")
	}
	sort.SliceStable(s.checks, func(i, j int) bool { return s.checks[i].Name < s.checks[j].Name })
	for _, c := range s.checks {
		if c.Name == "" || c.Check == nil {
			return nil, fmt.Errorf("httpserver: readiness check %q has no name or no function", c.Name)
		}
	}
	routes := append([]Route{
		{Pattern: "GET /healthz", Handler: http.HandlerFunc(s.healthz)},
		{Pattern: "GET /readyz", Handler: http.HandlerFunc(s.readyz)},
	}, p.Routes...)
	if p.Metrics != nil {
		routes = append(routes, Route{Pattern: "GET /metrics", Handler: p.Metrics.Handler()})
	}
	for _, r := range routes {
		if err := handle(s.mux, r); err != nil {
			return nil, err
		}
		s.patterns = append(s.patterns, r.Pattern)
	}
	s.handler = s.access.front(s.mux)
	s.srv = &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: 5 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          zap.NewStdLog(s.log),
	}
	return s, nil
}

// handle registers r, turning ServeMux's panic on an invalid or conflicting pattern into an
// error that names the route.
func handle(mux *http.ServeMux, r Route) (err error) {
	if r.Handler == nil {
		return fmt.Errorf("httpserver: route %q has no handler", r.Pattern)
	}
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("httpserver: route %q: %v", r.Pattern, p)
		}
	}()
	mux.Handle(r.Pattern, r.Handler)
	return nil
}

// Handler is the server's handler with every route, for tests that serve it themselves.
func (s *Server) Handler() http.Handler { return s.handler }

// Patterns are the patterns of every route the server serves, in registration order.
func (s *Server) Patterns() []string { return slices.Clone(s.patterns) }

// IsOpen reports whether the route of pattern answers without credentials (OpenPatterns).
func IsOpen(pattern string) bool { return slices.Contains(openPatterns, pattern) }

// Scheme is "https" when the server serves TLS, else "http".
func (s *Server) Scheme() string {
	if s.tls != nil {
		return "https"
	}
	return "http"
}

// Addr is the address the server listens on once started (with the real port when
// config.HTTP.Listen asked for port 0), or nil before Start.
func (s *Server) Addr() net.Addr { return s.addr }

// Start listens on the configured address and serves in a new goroutine. A listen error (the
// port is taken) is returned, which fails the application's start.
//
// With an Early listener, Start hands the routes to it instead: the address stays the one
// process start opened, and /healthz has answered since then.
func (s *Server) Start(context.Context) error {
	if s.early != nil {
		s.addr, s.done = s.early.Addr(), s.early.done
		s.early.handoff(s.handler)
		s.log.Info("serving every route", zap.Stringer("addr", s.addr))
		return nil
	}
	ln, err := net.Listen("tcp", s.cfg.Listen)
	if err != nil {
		return fmt.Errorf("httpserver: http.listen %s: %w", s.cfg.Listen, err)
	}
	s.addr = ln.Addr()
	if s.tls != nil {
		ln = tls.NewListener(ln, s.tls)
	}
	s.done = make(chan struct{})
	s.log.Info("serving "+strings.ToUpper(s.Scheme()), zap.Stringer("addr", s.addr), zap.Bool("credentials_required", s.access.protected()))
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("HTTP server failed", zap.Error(err))
			if s.shutdowner != nil {
				_ = s.shutdowner.Shutdown(fx.ExitCode(1))
			}
		}
	}()
	return nil
}

// Stop stops accepting connections, waits for requests in flight until ctx ends, then closes
// what is left, and returns once the serving goroutine has exited.
func (s *Server) Stop(ctx context.Context) error {
	if s.done == nil {
		return nil
	}
	if s.early != nil {
		return s.early.Stop(ctx)
	}
	err := s.srv.Shutdown(ctx)
	if err != nil {
		err = errors.Join(fmt.Errorf("httpserver: graceful shutdown: %w", err), s.srv.Close())
	}
	<-s.done
	return err
}

func (s *Server) healthz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = w.Write([]byte("ok\n"))
}

// readyz runs every check concurrently, each bounded by CheckTimeout, and reports them in name
// order: 200 "ready" when all pass, 503 "not ready" otherwise. When the server requires
// credentials, a request without them gets the first line only: the checks' reasons name
// brokers, topics and lanes.
func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	errs := make([]error, len(s.checks))
	var wg sync.WaitGroup
	for i, c := range s.checks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(r.Context(), CheckTimeout)
			defer cancel()
			errs[i] = c.Check(ctx)
		}()
	}
	wg.Wait()
	var b strings.Builder
	status := http.StatusOK
	for i, c := range s.checks {
		if errs[i] != nil {
			status = http.StatusServiceUnavailable
			fmt.Fprintf(&b, "fail %s: %v\n", c.Name, errs[i])
		} else {
			fmt.Fprintf(&b, "ok %s\n", c.Name)
		}
	}
	head := "ready\n"
	if status != http.StatusOK {
		head = "not ready\n"
	}
	if s.access.protected() && s.access.check(r) != 0 {
		b.Reset()
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(head + b.String()))
}

// Result is what Provide returns to the fx graph.
type Result struct {
	fx.Out

	Server *Server
}

// Provide is Module's constructor: New, wrapped in a Result.
func Provide(p Params) (Result, error) {
	s, err := New(p)
	return Result{Server: s}, err
}

// Module provides the *Server and runs it with the application. Its start and stop hooks are
// appended when it is built, after the constructors of every route and readiness check it serves
// have run and appended theirs: so it starts after them and stops before them, and the HTTP
// intake is the first thing to close on shutdown. (app.New also places it last.)
var Module = fx.Module("http",
	fx.Provide(Provide),
	fx.Invoke(func(lc fx.Lifecycle, s *Server) {
		lc.Append(fx.Hook{OnStart: s.Start, OnStop: s.Stop})
	}),
)
