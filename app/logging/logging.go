// Package logging builds the process logger (zap) from config.Log and routes fx's own events
// through it.
package logging

import (
	"fmt"
	"os"

	"github.com/ckf-stream/ckf-stream/app/config"
	"go.uber.org/fx"
	"go.uber.org/fx/fxevent"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// Params are New's inputs.
type Params struct {
	fx.In

	Config config.Log
	// Sink receives the log lines. Nil means standard error.
	Sink zapcore.WriteSyncer `optional:"true"`
}

// Result is New's output.
type Result struct {
	fx.Out

	// Logger is the process logger. Components name their own child (Logger.Named("relay")).
	Logger *zap.Logger
}

// New builds the logger: zap's production JSON encoder, or its development console encoder
// when p.Config.Format is console, at p.Config.Level, sampling off (a lane fault burst must not
// lose the line that explains it), with timestamps in ISO 8601.
func New(p Params) (Result, error) {
	level, err := zapcore.ParseLevel(p.Config.Level)
	if err != nil {
		return Result{}, fmt.Errorf("logging: log.level: %w", err)
	}
	var enc zapcore.Encoder
	switch p.Config.Format {
	case "json":
		ec := zap.NewProductionEncoderConfig()
		ec.EncodeTime = zapcore.ISO8601TimeEncoder
		enc = zapcore.NewJSONEncoder(ec)
	case "console":
		ec := zap.NewDevelopmentEncoderConfig()
		ec.EncodeTime = zapcore.ISO8601TimeEncoder
		enc = zapcore.NewConsoleEncoder(ec)
	default:
		return Result{}, fmt.Errorf("logging: log.format: %q is not one of json, console", p.Config.Format)
	}
	sink := p.Sink
	if sink == nil {
		sink = zapcore.Lock(os.Stderr)
	}
	core := zapcore.NewCore(enc, sink, zap.NewAtomicLevelAt(level))
	return Result{Logger: zap.New(core, zap.AddCaller(), zap.AddStacktrace(zapcore.ErrorLevel))}, nil
}

// FxLogger routes fx's events (provides, invokes, hooks, start, stop) through the logger at debug
// level, so they stay out of an info-level log; fx's errors keep error level, without stack traces.
func FxLogger(l *zap.Logger) fxevent.Logger {
	// No stack traces: fx's errors are start-up and stop failures that the process also reports
	// in one line; a trace of fx's own frames says nothing about them.
	fl := &fxevent.ZapLogger{Logger: l.Named("fx").WithOptions(zap.AddStacktrace(zapcore.FatalLevel))}
	fl.UseLogLevel(zapcore.DebugLevel)
	fl.UseErrorLevel(zapcore.ErrorLevel)
	return fl
}

// Module provides the process logger, flushed when the application stops. Install fx's own
// events into it with fx.WithLogger(FxLogger) at the application's top level (app.New does).
var Module = fx.Module("logging",
	fx.Provide(New),
	fx.Invoke(func(lc fx.Lifecycle, l *zap.Logger) {
		// Sync fails on a terminal or pipe (EINVAL, ENOTTY) for reasons that lose nothing;
		// the last lines are written either way.
		lc.Append(fx.StopHook(func() { _ = l.Sync() }))
	}),
)
