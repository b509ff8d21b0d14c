// Package app wires ckf-stream's processes from fx modules. Each room of app/ is one module:
//
//   - config: the Config, loaded before fx starts (file < environment < flags) and validated;
//   - logging: the zap logger, and fx's own events routed into it at debug level;
//   - metrics: one tally root scope and one Prometheus registry shared with franz-go's kprom;
//   - kafka: the cluster (embedded when none is configured), the client options every component
//     builds its clients from, and the topic layout ensured at start;
//   - httpserver: /healthz, /readyz (checks from the "readiness" group), /metrics and the routes
//     of the "routes" group; its listener opens first at start (/healthz answers from process
//     start, /readyz says "starting") and serves every route once start-up is done.
//
// New assembles them around a process's own components (indexer, relay, demo), and Run runs the
// result until a signal or a fatal error. app holds no algorithm and no Kafka protocol logic.
package app

import (
	"context"
	"errors"
	"fmt"

	"github.com/ckf-stream/ckf-stream/app/config"
	"github.com/ckf-stream/ckf-stream/app/httpserver"
	"github.com/ckf-stream/ckf-stream/app/kafka"
	"github.com/ckf-stream/ckf-stream/app/logging"
	"github.com/ckf-stream/ckf-stream/app/metrics"
	"go.uber.org/dig"
	"go.uber.org/fx"
)

// Core are the modules every process runs besides the configuration and the HTTP server, and
// the Kafka connection's readiness as /readyz's "kafka" check.
var Core = fx.Options(
	logging.Module,
	metrics.Module,
	kafka.Module,
	fx.Provide(httpserver.AsReadinessCheck(kafkaReadiness)),
)

// kafkaReadiness is the "kafka" readiness check: the connection's (kafka.Connection.Ready).
func kafkaReadiness(c *kafka.Connection) httpserver.ReadinessCheck {
	return httpserver.ReadinessCheck{Name: "kafka", Check: c.Ready}
}

// New builds the application of cfg: the configuration, the HTTP listener, Core, then components,
// then the HTTP server. Start-up runs in that order and shutdown in reverse, so that /healthz
// answers from the first moment (and /readyz says the process is starting), the routes are served
// only once everything started (the HTTP intake opens last) and closes first, components stop before the Kafka connection closes, and the metrics scope
// closes after everything that records. cfg.StartupTimeout and cfg.ShutdownTimeout bound start
// and stop; size the latter for drain + flush + commit.
func New(cfg config.Config, components ...fx.Option) *fx.App {
	return fx.New(
		config.Module(cfg),
		fx.WithLogger(logging.FxLogger),
		fx.StartTimeout(cfg.StartupTimeout),
		fx.StopTimeout(cfg.ShutdownTimeout),
		// The HTTP listener first, so that /healthz answers from process start (liveness
		// probes) while the rest starts; httpserver.Module's Server takes it over at the end.
		httpserver.EarlyModule,
		Core,
		// A module, so that the components' invokes run before the HTTP server's even when
		// they are bare fx.Invoke options (fx runs a module's child modules' invokes first).
		fx.Module("process", components...),
		httpserver.Module,
	)
}

// Phase names where Run failed.
type Phase string

// The phases of an application's life.
const (
	PhaseBuild Phase = "build" // fx.New: a missing dependency or a failed constructor
	PhaseStart Phase = "start" // an OnStart hook failed, or start-up exceeded its timeout
	PhaseStop  Phase = "stop"  // an OnStop hook failed, or shutdown exceeded its timeout
)

// RunError is a failure of Run in one phase.
type RunError struct {
	Phase Phase
	Err   error
}

// Error renders "<phase>: <cause>".
func (e *RunError) Error() string { return string(e.Phase) + ": " + e.Err.Error() }

// Unwrap returns the cause.
func (e *RunError) Unwrap() error { return e.Err }

// Exit codes of Run besides a component's own (fx.ExitCode).
const (
	// ExitFailure: a phase failed.
	ExitFailure = 1
	// ExitConfig: a phase failed on a configuration error (config.ErrInvalid), which a
	// component found only while it was built or started; the same status a command gives a
	// configuration refused before it builds anything.
	ExitConfig = 2
)

// Run starts a, waits for SIGINT, SIGTERM or a component's fx.Shutdowner call, and stops a. It
// returns the exit code the process should end with: the code given to Shutdown (0 for a
// signal), or ExitFailure (ExitConfig for a configuration error) with a *RunError when a phase
// failed. A failed start has already been rolled back by fx (the hooks that started are
// stopped).
//
// A build error is the component's own error: fx and dig wrap a constructor's error in the
// chain of functions and arguments being built, with their files and lines, which names the
// code rather than the problem, so Run keeps only the root cause (dig.RootCause).
//
// Components report fatal errors with shutdowner.Shutdown(fx.ExitCode(n)), never log.Fatal or
// os.Exit, so that the rest of the process still drains, flushes and commits.
func Run(a *fx.App) (int, error) {
	if err := a.Err(); err != nil {
		return failed(PhaseBuild, dig.RootCause(err))
	}
	startCtx, cancel := context.WithTimeout(context.Background(), a.StartTimeout())
	defer cancel()
	if err := a.Start(startCtx); err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("%w (startup_timeout %v)", err, a.StartTimeout())
		}
		return failed(PhaseStart, dig.RootCause(err))
	}
	sig := <-a.Wait()
	stopCtx, cancel := context.WithTimeout(context.Background(), a.StopTimeout())
	defer cancel()
	if err := a.Stop(stopCtx); err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("%w (shutdown_timeout %v)", err, a.StopTimeout())
		}
		return failed(PhaseStop, err)
	}
	return sig.ExitCode, nil
}

// failed is Run's result for a phase that failed with err.
func failed(phase Phase, err error) (int, error) {
	if errors.Is(err, config.ErrInvalid) {
		return ExitConfig, &RunError{Phase: phase, Err: err}
	}
	return ExitFailure, &RunError{Phase: phase, Err: err}
}
