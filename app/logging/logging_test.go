package logging_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/ckf-stream/ckf-stream/app/config"
	"github.com/ckf-stream/ckf-stream/app/logging"
	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

func newLogger(t *testing.T, cfg config.Log) (*zap.Logger, *bytes.Buffer) {
	t.Helper()
	var buf bytes.Buffer
	res, err := logging.New(logging.Params{Config: cfg, Sink: zapcore.AddSync(&buf)})
	if err != nil {
		t.Fatal(err)
	}
	return res.Logger, &buf
}

func TestJSONAtLevel(t *testing.T) {
	l, buf := newLogger(t, config.Log{Level: "warn", Format: "json"})
	l.Info("hidden")
	l.Warn("shown", zap.Int("lane", 3))
	var line map[string]any
	if err := json.Unmarshal(bytes.TrimSpace(buf.Bytes()), &line); err != nil {
		t.Fatalf("not one JSON line: %q (%v)", buf.String(), err)
	}
	if line["msg"] != "shown" || line["level"] != "warn" || line["lane"] != float64(3) || line["ts"] == nil {
		t.Errorf("line = %v", line)
	}
}

func TestConsoleFormat(t *testing.T) {
	l, buf := newLogger(t, config.Log{Level: "debug", Format: "console"})
	l.Debug("details")
	if s := buf.String(); !strings.Contains(s, "DEBUG") || !strings.Contains(s, "details") || strings.HasPrefix(s, "{") {
		t.Errorf("console line = %q", s)
	}
}

func TestInvalidSettings(t *testing.T) {
	for _, cfg := range []config.Log{{Level: "loud", Format: "json"}, {Level: "info", Format: "xml"}} {
		if _, err := logging.New(logging.Params{Config: cfg}); err == nil {
			t.Errorf("New(%+v) succeeded", cfg)
		}
	}
}

// TestFxEventsQuietAtInfo: fx's own events are debug lines, absent from an info-level log.
func TestFxEventsQuietAtInfo(t *testing.T) {
	for _, level := range []string{"info", "debug"} {
		var buf bytes.Buffer
		app := fxtest.New(t,
			fx.Supply(config.Log{Level: level, Format: "json"}),
			fx.Supply(fx.Annotate(zapcore.AddSync(&buf), fx.As(new(zapcore.WriteSyncer)))),
			logging.Module,
			fx.WithLogger(logging.FxLogger),
			fx.Invoke(func(*zap.Logger) {}),
		)
		app.RequireStart().RequireStop()
		hasFx := strings.Contains(buf.String(), `"logger":"fx"`)
		if want := level == "debug"; hasFx != want {
			t.Errorf("level %s: fx events logged = %v, want %v:\n%s", level, hasFx, want, buf.String())
		}
	}
}
