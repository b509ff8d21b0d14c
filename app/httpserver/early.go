package httpserver

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ckf-stream/ckf-stream/app/config"
	"go.uber.org/fx"
	"go.uber.org/zap"
)

// Early is the HTTP listener a process opens first thing at start, before it connects to Kafka,
// so that a liveness probe finds /healthz from process start: until the Server takes it over
// (Server.Start, at the end of start-up), it answers /healthz 200 "ok starting", /readyz 503
// with the reason, and every other path 503. A process that never finishes starting (a broker
// that does not answer) is then alive and not ready, which is what it is.
type Early struct {
	cfg        config.HTTP
	log        *zap.Logger
	shutdowner fx.Shutdowner
	access     access
	tls        *tls.Config
	srv        *http.Server
	routes     atomic.Pointer[http.Handler]
	addr       net.Addr
	done       chan struct{} // closed when Serve has returned
	stopOnce   sync.Once
	stopErr    error
}

// EarlyParams are NewEarly's inputs.
type EarlyParams struct {
	fx.In

	Config     config.HTTP
	Logger     *zap.Logger   `optional:"true"`
	Shutdowner fx.Shutdowner `optional:"true"`
}

// NewEarly builds the listener, with the server's TLS and access control (the same files the
// Server reads); nothing listens until Start.
func NewEarly(p EarlyParams) (*Early, error) {
	e := &Early{cfg: p.Config, log: p.Logger, shutdowner: p.Shutdowner}
	if e.log == nil {
		e.log = zap.NewNop()
	}
	var err error
	if e.access, err = newAccess(p.Config); err != nil {
		return nil, err
	}
	if e.tls, err = serverTLS(p.Config.TLS); err != nil {
		return nil, err
	}
	e.log = e.log.Named("http")
	e.srv = &http.Server{
		Handler:           e,
		ReadHeaderTimeout: 5 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          zap.NewStdLog(e.log),
	}
	return e, nil
}

// Addr is the listen address once started (the real port when http.listen asked for port 0).
func (e *Early) Addr() net.Addr { return e.addr }

// Start listens on http.listen and serves the start-up answers in a new goroutine.
func (e *Early) Start(context.Context) error {
	ln, err := net.Listen("tcp", e.cfg.Listen)
	if err != nil {
		return fmt.Errorf("httpserver: http.listen %s: %w", e.cfg.Listen, err)
	}
	e.addr = ln.Addr()
	if e.tls != nil {
		ln = tls.NewListener(ln, e.tls)
	}
	e.done = make(chan struct{})
	e.log.Info("serving /healthz while starting", zap.Stringer("addr", e.addr))
	go func() {
		defer close(e.done)
		if err := e.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			e.log.Error("HTTP server failed", zap.Error(err))
			if e.shutdowner != nil {
				_ = e.shutdowner.Shutdown(fx.ExitCode(1))
			}
		}
	}()
	return nil
}

// handoff makes h (the Server's routes) answer every request from now on.
func (e *Early) handoff(h http.Handler) { e.routes.Store(&h) }

// ServeHTTP answers with the Server's routes once handed off, and the start-up answers before.
func (e *Early) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if h := e.routes.Load(); h != nil {
		(*h).ServeHTTP(w, r)
		return
	}
	probe := r.Method == http.MethodGet || r.Method == http.MethodHead
	if !(probe && (r.URL.Path == "/healthz" || r.URL.Path == "/readyz")) && e.access.protected() {
		if status := e.access.check(r); status != 0 {
			e.access.deny(w, r, status)
			return
		}
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	switch r.URL.Path {
	case "/healthz":
		_, _ = w.Write([]byte("ok starting\n"))
	case "/readyz":
		w.WriteHeader(http.StatusServiceUnavailable)
		if e.access.protected() && e.access.check(r) != 0 {
			_, _ = w.Write([]byte("not ready\n"))
			return
		}
		_, _ = w.Write([]byte("not ready\nfail start: the process is starting (connecting to Kafka, checking topics); its log says what it waits for\n"))
	default:
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte("starting\n"))
	}
}

// Stop shuts the server down gracefully within ctx (the Server's Stop, or the rollback of a
// failed start); later calls return the first one's result.
func (e *Early) Stop(ctx context.Context) error {
	if e.done == nil {
		return nil
	}
	e.stopOnce.Do(func() {
		if err := e.srv.Shutdown(ctx); err != nil {
			e.stopErr = errors.Join(fmt.Errorf("httpserver: graceful shutdown: %w", err), e.srv.Close())
		}
		<-e.done
	})
	return e.stopErr
}

// EarlyModule opens the HTTP listener when the application starts, before the modules listed
// after it (app.New lists it before the Kafka connection); Module's Server takes it over.
var EarlyModule = fx.Module("http-early",
	fx.Provide(NewEarly),
	fx.Invoke(func(lc fx.Lifecycle, e *Early) {
		lc.Append(fx.Hook{OnStart: e.Start, OnStop: e.Stop})
	}),
)
