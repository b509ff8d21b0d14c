package bridge

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ckf-stream/ckf-stream/bridge/kvevents"
	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/ckf-stream/ckf-stream/testenv"
	"github.com/go-zeromq/zmq4"
	"github.com/go-zeromq/zmq4/security/null"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
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

// handshakeGate is a publisher's TCP connection that holds its side of the ZMTP handshake after
// the greeting (64 bytes) until open is closed: an engine connecting while the bridge handles
// the end of its previous connection.
type handshakeGate struct {
	net.Conn
	sent int
	open chan struct{}
}

func (g *handshakeGate) Write(p []byte) (int, error) {
	if g.sent >= 64 {
		<-g.open
	}
	g.sent += len(p)
	return g.Conn.Write(p)
}

// TestRunSourceBoundSocketKeepsRestartedEngine: with bridge.bind the engine connects to the
// bridge. An engine that restarts closes its connection and connects again at once, so its new
// connection is often still in its handshake when the bridge sees the old one end. The bound
// socket stays open across that (zmq4 drops the closed connection) and subscribes the new one.
// Closing and reopening the socket there lost the engine: a connection whose handshake ended
// after zmq4's Close joined the closed socket (zmq4 v0.17.0), which never sent it the
// subscription nor closed it, and the engine, connected, never connected again.
func TestRunSourceBoundSocketKeepsRestartedEngine(t *testing.T) {
	ep := fmt.Sprintf("tcp://127.0.0.1:%d", testenv.FreePort(t))
	core, logs := observer.New(zap.WarnLevel)
	b := &Bridge{cfg: Config{BufferBatches: 4, Bind: true}, m: newMetrics(nil), log: zap.New(core)}
	src := &source{conv: NewConverter(1, 4, nil), sink: &syncSink{}, log: zap.NewNop()}
	ctx, cancel := context.WithCancel(t.Context())
	open := func() (zmq4.Socket, error) { return openSub(ctx, ep, "kv@", true) }
	sub, err := open()
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- b.runSource(ctx, src, ep, sub, open, &sync.Mutex{}) }()
	defer func() {
		cancel()
		<-done
	}()
	// connect opens a publisher's ZMTP connection to the bridge (gate holds its handshake) and
	// returns it once the handshake is done.
	connect := func(gate *handshakeGate) <-chan *zmq4.Conn {
		out := make(chan *zmq4.Conn, 1)
		c, err := net.Dial("tcp", strings.TrimPrefix(ep, "tcp://"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		gate.Conn = c
		go func() {
			zc, err := zmq4.Open(gate, null.Security(), zmq4.Pub, zmq4.SocketIdentity("engine"), false, nil)
			if err != nil {
				t.Error(err)
				close(out)
				return
			}
			out <- zc
		}()
		return out
	}
	// subscribed waits for the bridge's subscription on a publisher's connection.
	subscribed := func(c *zmq4.Conn, what string) {
		t.Helper()
		got := make(chan zmq4.Msg, 1)
		go func() { m, _ := c.RecvMsg(); got <- m }()
		var m zmq4.Msg
		testenv.WaitUntil(t, 30*time.Second, what, func() bool {
			select {
			case m = <-got:
				return true
			default:
				return false
			}
		}) // an event; the bound only guards against a connection never subscribed
		if m.Err() != nil || len(m.Frames) != 1 || string(m.Frames[0]) != "\x01kv@" {
			t.Fatalf("%s: %q, %v", what, m.Frames, m.Err())
		}
	}
	first := &handshakeGate{open: make(chan struct{})}
	close(first.open)
	c1 := <-connect(first)
	if c1 == nil {
		t.FailNow()
	}
	subscribed(c1, "the first incarnation is subscribed")
	// The restart: the new incarnation's handshake is under way when the old connection ends.
	second := &handshakeGate{open: make(chan struct{})}
	c2ch := connect(second)
	_ = c1.Close()
	testenv.WaitUntil(t, 30*time.Second, "the bridge saw the first connection end", func() bool { return logs.Len() > 0 })
	close(second.open)
	c2, ok := <-c2ch
	if !ok {
		t.FailNow()
	}
	subscribed(c2, "the restarted incarnation is subscribed")
}
