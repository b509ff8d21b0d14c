package bridge

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
)

// Waiting for an engine that does not answer. zmq4 (v0.17.0) retries a dial forever inside Dial
// when it is told to reconnect, and says nothing while it does: a bridge pointed at a wrong
// host or port, or started before its engine, used to wait in silence with /readyz saying only
// "starting". So before each dial the bridge makes sure something accepts connections at the
// endpoint, retrying every reachRetry, and says what it is waiting for: a log line at the first
// failure and once every reachReminder after it, the "bridge" readiness check naming the
// endpoint, the rank and the dial error, and the metrics ckf_bridge_engine_unreachable_ranks and
// ckf_bridge_engine_dial_failures_total.
const (
	reachRetry    = 250 * time.Millisecond
	reachReminder = time.Minute
	reachTimeout  = 2 * time.Second
)

// probeEngine opens and closes one connection to endpoint's listener: nil when something
// accepts connections there. A PUB socket of libzmq drops a connection that closes before its
// handshake without a trace. inproc endpoints have no listener to probe and always pass.
func probeEngine(ctx context.Context, endpoint string) error {
	var network, addr string
	switch {
	case strings.HasPrefix(endpoint, "tcp://"):
		network, addr = "tcp", strings.TrimPrefix(endpoint, "tcp://")
	case strings.HasPrefix(endpoint, "ipc://"):
		network, addr = "unix", strings.TrimPrefix(endpoint, "ipc://")
	default:
		return nil
	}
	d := net.Dialer{Timeout: reachTimeout}
	c, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return err
	}
	return c.Close()
}

// unreachable is a rank whose engine did not answer the last probe.
type unreachable struct {
	rank     int
	endpoint string
	since    time.Time
	err      error
}

// reachState is what a Bridge knows of its ranks' engines: the ranks waiting for an engine that
// does not answer, for the readiness check and the gauge. Safe for concurrent use.
type reachState struct {
	mu      sync.Mutex
	waiting map[int]unreachable
}

// set records that rank is waiting since since (the first failed probe), with the last error;
// it returns the number of ranks waiting.
func (s *reachState) set(u unreachable) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.waiting == nil {
		s.waiting = map[int]unreachable{}
	}
	s.waiting[u.rank] = u
	return len(s.waiting)
}

// clear records that rank's engine answers; it returns the number of ranks still waiting.
func (s *reachState) clear(rank int) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.waiting, rank)
	return len(s.waiting)
}

// first returns the waiting rank of the lowest number, if any.
func (s *reachState) first() (unreachable, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out unreachable
	found := false
	for _, u := range s.waiting {
		if !found || u.rank < out.rank {
			out, found = u, true
		}
	}
	return out, found
}

// NoEngineError is the readiness error of a bridge waiting for an engine that does not answer.
type NoEngineError struct {
	Rank     int
	Endpoint string
	// For is how long the rank has waited.
	For time.Duration
	Err error
}

func (e *NoEngineError) Error() string {
	return fmt.Sprintf("bridge: no engine answers at %s (rank %d) yet; retrying for %s (check bridge.endpoint and that the engine publishes KV events there): %v",
		e.Endpoint, e.Rank, e.For.Round(time.Second), e.Err)
}

func (e *NoEngineError) Unwrap() error { return e.Err }

// reachEngine returns once something accepts connections at rank's endpoint ep, or with ctx's
// error. While nothing does, it retries every reachRetry and reports the wait (see reachRetry).
func (b *Bridge) reachEngine(ctx context.Context, rank int, ep string) error {
	var since, logged time.Time
	defer func() {
		if !since.IsZero() {
			b.m.unreachableRanks.Update(float64(b.reach.clear(rank)))
		}
	}()
	for {
		err := probeEngine(ctx, ep)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		now := time.Now()
		if err == nil {
			if !since.IsZero() {
				b.log.Info("engine answers; opening its socket", zap.Int("rank", rank), zap.String("endpoint", ep),
					zap.Duration("waited", now.Sub(since).Round(time.Millisecond)))
			}
			return nil
		}
		b.m.dialFailures.Inc(1)
		if since.IsZero() {
			since = now
		}
		b.m.unreachableRanks.Update(float64(b.reach.set(unreachable{rank: rank, endpoint: ep, since: since, err: err})))
		if logged.IsZero() || now.Sub(logged) >= reachReminder {
			logged = now
			b.log.Warn("no engine answers at the endpoint yet; retrying (check bridge.endpoint and that the engine runs with its KV events published there)",
				zap.Int("rank", rank), zap.String("endpoint", ep), zap.Duration("waited", now.Sub(since).Round(time.Second)), zap.Error(err))
		} else {
			b.log.Debug("engine probe failed", zap.Int("rank", rank), zap.String("endpoint", ep), zap.Error(err))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(reachRetry): // retry back-off, not a wait for an outcome
		}
	}
}
