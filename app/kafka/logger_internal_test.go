package kafka

import (
	"testing"

	"github.com/ckf-stream/ckf-stream/app/config"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// TestClientLoggerShutByClose: a client's logger writes until the connection's gate is shut
// (Connection.Close), and nothing after, so that a franz-go goroutine still winding down after
// its client's Close cannot write to a log the process (or a test) has stopped reading.
func TestClientLoggerShutByClose(t *testing.T) {
	core, logs := observer.New(zapcore.WarnLevel)
	gate := &logGate{}
	z := newZapLogger(zap.New(core), gate)
	z.Log(kgo.LogLevelWarn, "unable to open connection to broker", "addr", "b1:9092")
	gate.close()
	z.Log(kgo.LogLevelError, "unable to open connection to broker", "addr", "b2:9092")
	if got := logs.All(); len(got) != 1 || got[0].ContextMap()["addr"] != "b1:9092" {
		t.Fatalf("entries %+v: want only the one written before the gate was shut", got)
	}

	c, err := New(Params{Config: config.Kafka{Brokers: []string{"b1:9092"}}}) // New dials nothing
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	if !c.logs.shut {
		t.Fatalf("Close left the clients' loggers open")
	}
}
