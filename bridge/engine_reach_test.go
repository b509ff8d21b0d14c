package bridge

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/ckf-stream/ckf-stream/testenv"
	"github.com/go-zeromq/zmq4"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/uber-go/tally/v4"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// TestBridgeSaysWhenNoEngineAnswers: a bridge started before its engine (or pointed at a wrong
// port) says so: a warning naming the endpoint, a readiness error naming the endpoint, the rank
// and the dial error, and the unreachable-ranks gauge; once the engine binds its PUB socket the
// bridge opens its socket, says so and turns ready. Rank 1's engine answers from the start, and
// its rank does not wait for rank 0's. No broker: nothing is produced.
func TestBridgeSaysWhenNoEngineAnswers(t *testing.T) {
	ep := fmt.Sprintf("tcp://127.0.0.1:%d", testenv.FreePort(t))
	rank1, _ := RankEndpoint(ep, 1) // rank 0's port + 1
	pub1 := zmq4.NewPub(t.Context(), zmq4.WithLogger(discardLogger()))
	defer pub1.Close()
	if err := pub1.Listen(rank1); err != nil {
		t.Skipf("rank 1's port is taken: %v", err)
	}

	prod, err := kgo.NewClient(kgo.SeedBrokers("127.0.0.1:1")) // never dialled: no batch arrives
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	codec, err := schemas.NewCodec(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zapcore.InfoLevel)
	scope := tally.NewTestScope("", nil)
	cfg := DefaultConfig()
	cfg.Endpoint, cfg.Ranks, cfg.WorkerID, cfg.KVTopic, cfg.DeadLetterTopic = ep, 2, 7, "kv", "dlq"
	b, err := New(Params{Config: cfg,
		Codec: codec, Producer: prod, Metrics: scope, Log: zap.New(core)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("Run returned %v", err)
		}
	}()

	gauge := func() float64 {
		for _, g := range scope.Snapshot().Gauges() {
			if g.Name() == "bridge.engine_unreachable_ranks" {
				return g.Value()
			}
		}
		return -1
	}
	testenv.WaitUntil(t, 30*time.Second, "the warning for rank 0", func() bool {
		return logs.FilterMessageSnippet("no engine answers at the endpoint yet").FilterField(zap.String("endpoint", ep)).Len() == 1
	})
	var ne *NoEngineError
	if err := b.Ready(); !errors.As(err, &ne) || ne.Rank != 0 || ne.Endpoint != ep ||
		!strings.Contains(err.Error(), "no engine answers at "+ep+" (rank 0) yet; retrying") || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("Ready while no engine answers: %v", err)
	}
	if g := gauge(); g != 1 {
		t.Errorf("engine_unreachable_ranks %v, want 1 (rank 1's engine answers)", g)
	}

	pub0 := zmq4.NewPub(t.Context(), zmq4.WithLogger(discardLogger()))
	defer pub0.Close()
	if err := pub0.Listen(ep); err != nil {
		t.Fatal(err)
	}
	testenv.WaitUntil(t, 30*time.Second, "the bridge ready once the engine answers", func() bool { return b.Ready() == nil })
	if n := logs.FilterMessage("engine answers; opening its socket").Len(); n != 1 {
		t.Errorf("%d lines say the engine answers, want 1", n)
	}
	if g := gauge(); g != 0 {
		t.Errorf("engine_unreachable_ranks %v once the engine answers, want 0", g)
	}
	if c := scope.Snapshot().Counters()["bridge.engine_dial_failures_total+"]; c == nil || c.Value() < 1 {
		t.Errorf("engine_dial_failures_total %v, want at least 1", c)
	}
}
