package bridge

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ckf-stream/ckf-stream/bridge/kvevents"
	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/go-zeromq/zmq4"
	"go.uber.org/zap"
)

// fakeSub is a SUB socket fed by a channel; closing it ends Recv.
type fakeSub struct {
	zmq4.Socket
	msgs   chan zmq4.Msg
	closed chan struct{}
	once   sync.Once
}

func newFakeSub() *fakeSub { return &fakeSub{msgs: make(chan zmq4.Msg), closed: make(chan struct{})} }

func (f *fakeSub) Recv() (zmq4.Msg, error) {
	select {
	case m := <-f.msgs:
		return m, nil
	case <-f.closed:
		return zmq4.Msg{}, errors.New("closed")
	}
}

func (f *fakeSub) Close() error { f.once.Do(func() { close(f.closed) }); return nil }

// syncSink is a recordingSink safe to read from the test goroutine.
type syncSink struct {
	mu sync.Mutex
	recordingSink
}

func (s *syncSink) Write(rank uint32, seq int64, d uint64, g []byte, evs []schemas.KvEvent) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.recordingSink.Write(rank, seq, d, g, evs)
}

func (s *syncSink) WriteLost(rank uint32, from, to int64, g []byte, ev schemas.KvEvent) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.recordingSink.WriteLost(rank, from, to, g, ev)
}

// TestRunSourceIdleRecheck: a rank that stays silent for bridge.idle_recheck asks the replay
// socket for what it missed, and finds the dropped final batch, without waiting on the wall
// clock (synctest's fake time).
func TestRunSourceIdleRecheck(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e, sink := &fakeEngine{}, &syncSink{}
		le := &lockedEngine{e: e}
		src := &source{conv: NewConverter(1, 4, nil), sink: sink, log: zap.NewNop(), retries: 1, replay: le}
		b := &Bridge{cfg: Config{BufferBatches: 4, IdleRecheck: 5 * time.Second}, m: newMetrics(nil), log: zap.NewNop()}
		ctx, cancel := context.WithCancel(t.Context())
		sub := newFakeSub()
		done := make(chan error, 1)
		go func() {
			done <- b.runSource(ctx, src, "tcp://engine:5557", sub, func() (zmq4.Socket, error) { return newFakeSub(), nil }, &sync.Mutex{})
		}()
		le.mu.Lock()
		seq, payload := e.publish(t, 10)
		le.mu.Unlock()
		start := time.Now()
		sub.msgs <- zmq4.NewMsgFrom([]byte{}, kvevents.SeqFrame(seq), payload)
		le.mu.Lock()
		e.publish(t, 11) // dropped on the PUB socket; the engine goes quiet
		le.mu.Unlock()
		synctest.Wait()
		sink.mu.Lock()
		got := sink.hashes()
		sink.mu.Unlock()
		if !equalU64(got, 10) {
			t.Fatalf("before the idle re-check: %v", got)
		}
		time.Sleep(5 * time.Second) // fake time: the idle period passes
		synctest.Wait()
		sink.mu.Lock()
		got = sink.hashes()
		sink.mu.Unlock()
		if !equalU64(got, 10, 11) || time.Since(start) != 5*time.Second {
			t.Fatalf("after the idle re-check: %v at %v", got, time.Since(start))
		}
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatal(err)
		}
	})
}

// lockedEngine serialises a fakeEngine for use from the source's goroutine.
type lockedEngine struct {
	mu sync.Mutex
	e  *fakeEngine
}

func (l *lockedEngine) Replay(ctx context.Context, from int64) ([]Replayed, bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.e.Replay(ctx, from)
}
