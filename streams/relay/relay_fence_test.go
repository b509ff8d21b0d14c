package relay_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/streams/internal/streamtest"
	"github.com/ckf-stream/ckf-stream/streams/relay"
	"github.com/ckf-stream/ckf-stream/testenv"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/uber-go/tally/v4"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"
)

// TestRelayStaleFencesAreNotATakeover: the broker answers the relay's commits PRODUCER_FENCED
// three times in a row (kfake answers an EndTxn with the error and changes nothing else: the
// stale answer of a commit retried across a failover) while no other instance of the pool
// exists. Each time the relay reads the pool's latest claim, finds its own, and recovers under a
// new incarnation that the indexer follows; it never stops. (Until the claim, the relay took the
// second fence within ten minutes for a newer instance's and stopped.)
func TestRelayStaleFencesAreNotATakeover(t *testing.T) {
	t.Parallel()
	c, fake := testenv.StartFake(t)
	e := relayEnvOn(t, c, 4096, 2)
	const lane = 3
	g := newKvGen(31)
	ri, cfg, rr := e.servedLane(t, lane, 71, g, 60)
	applied := uint64(60)
	for i := range 3 {
		before := rr.r.Stats()
		h := fake.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.EndTxn}, TxnID: cfg.TransactionalID, Err: kerr.ProducerFenced})
		testenv.WaitUntil(t, streamtest.Converge, fmt.Sprintf("the relay recovers from stale fence %d", i+1), func() bool {
			s := rr.r.Stats()
			return h.Hits() == 1 && s.Fences == before.Fences+1 && s.FenceRecoveries == before.FenceRecoveries+1 &&
				s.Incarnation > before.Incarnation && rr.r.Ready() == nil
		}, func() string {
			return fmt.Sprintf("fault hits %d, stats %+v, ready %v, run %v", h.Hits(), rr.r.Stats(), rr.r.Ready(), runErr(rr))
		})
		if err := runErr(rr); err != nil {
			t.Fatalf("the relay stopped on stale fence %d: %v", i+1, err)
		}
		e.produce(g.take(20)...)
		applied += 20
		waitApplied(t, rr, applied)
		waitRelayLane(t, ri, rr, lane) // the indexer follows the new incarnation, whose state is whole
	}
	if s := rr.r.Stats(); !strings.Contains(s.LastWriteFailure, "fenced") {
		t.Errorf("LastWriteFailure %q does not say the write was fenced", s.LastWriteFailure)
	}
}

// runErr is Run's error if Run returned, nil while it runs.
func runErr(rr *runningRelay) error {
	select {
	case err := <-rr.done:
		rr.err, rr.cancel = err, nil
		if err == nil {
			return fmt.Errorf("Run returned nil")
		}
		return err
	default:
		return rr.err
	}
}

// TestRelayNewerInstanceStopsTheOlderUnfenced: a second instance of the pool starts. It claims
// the pool before its transactional id is initialised, so the older one, fenced at its next
// write, reads that claim and stops (ErrRelayFenced) without initialising the id again: the
// newer instance is never fenced and never recovers. (Before the claim, the older one recovered
// from its first fence, fencing the newer once, and stopped only at its second.)
func TestRelayNewerInstanceStopsTheOlderUnfenced(t *testing.T) {
	t.Parallel()
	e := newRelayEnv(t, 4096, 2)
	const lane = 5
	g := newKvGen(32)
	ri, cfg, old := e.servedLane(t, lane, 72, g, 60)

	cur := e.startRelay(cfg, true)
	waitFencedStop(t, old, "the older instance")
	if err := old.r.Ready(); err == nil {
		t.Error("the stopped older instance reports ready")
	}
	e.produce(g.take(30)...)
	waitApplied(t, cur, 90)
	waitRelayLane(t, ri, cur, lane)
	if s := cur.r.Stats(); s.Fences != 0 || s.Recoveries != 0 || s.FenceRecoveries != 0 {
		t.Errorf("the newer instance was fenced or recovered: fences %d, recoveries %d, fence recoveries %d (last failure %q)",
			s.Fences, s.Recoveries, s.FenceRecoveries, s.LastWriteFailure)
	}
	if err := cur.r.Ready(); err != nil {
		t.Errorf("the newer instance is not ready: %v", err)
	}
}

// TestRelayReportsAWriteTheBrokerHolds: the broker takes the relay's produce requests and never
// answers them (a partition with no leader left to answer). Every lane write must end at the
// relay's WriteTimeout, and the relay must say so while the broker stays silent: a log line
// naming the timeout, Ready naming the write and its cause, ckf_relay_write_failures_total
// {cause="timeout"} and ckf_relay_fenced, and the same again at each recovery attempt (each
// meets the same silence), so that a relay in this state keeps reporting instead of going quiet.
func TestRelayReportsAWriteTheBrokerHolds(t *testing.T) {
	t.Parallel()
	c, fake := testenv.StartFake(t)
	e := relayEnvOn(t, c, 4096, 2)
	const lane = 6
	g := newKvGen(33)
	cfg := e.relayConfig(lane, testenv.UniqueName(t, "relay"))
	cfg.WriteTimeout = 500 * time.Millisecond
	scope := tally.NewTestScope("ckf", nil)
	core, logs := observer.New(zap.InfoLevel)
	log := zaptest.NewLogger(t).Named("relay")
	log = zap.New(zapcore.NewTee(log.Core(), core))
	p := relay.RelayParams{Config: cfg, ClientOpts: []kgo.Opt{kgo.SeedBrokers(e.Cluster.Seeds()...)}, Metrics: scope, Log: log}
	rr := e.startRelayWith(p, true)
	e.produce(g.take(20)...)
	waitApplied(t, rr, 20)

	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	// Only the relay's lane client is transactional: the KV events still flow.
	fake.ControlKey(kmsg.Produce.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		fake.KeepControl()
		if req.(*kmsg.ProduceRequest).TransactionID != nil {
			fake.SleepControl(func() { <-release })
		}
		return nil, nil, false
	})
	e.produce(g.take(5)...) // a delta for the held lane
	timeoutLines := func() int { return logs.FilterMessageSnippet("unanswered within the write timeout").Len() }
	testenv.WaitUntil(t, streamtest.Converge, "the relay reports (counts and logs) two writes unanswered within its write timeout", func() bool {
		return rr.r.Stats().WriteTimeouts >= 2 && timeoutLines() >= 2
	}, func() string {
		return fmt.Sprintf("stats %+v, ready %v, log lines %d", rr.r.Stats(), rr.r.Ready(), timeoutLines())
	})
	err := rr.r.Ready()
	if err == nil || !strings.Contains(err.Error(), "unanswered within the write timeout") {
		t.Errorf("Ready while the broker holds the writes: %v; want the write and its timeout named", err)
	}
	if err := runErr(rr); err != nil {
		t.Fatalf("the relay stopped while the broker held its writes: %v", err)
	}
	snap := scope.Snapshot()
	var timeouts int64
	for _, c := range snap.Counters() {
		if c.Name() == "ckf.relay.write_failures_total" && c.Tags()["cause"] == "timeout" {
			timeouts = c.Value()
		}
	}
	if timeouts < 2 {
		t.Errorf("ckf_relay_write_failures_total{cause=\"timeout\"} = %d; want >= 2", timeouts)
	}
	var fenced float64 = -1
	for _, gauge := range snap.Gauges() {
		if gauge.Name() == "ckf.relay.fenced" {
			fenced = gauge.Value()
		}
	}
	if fenced != 1 {
		t.Errorf("ckf_relay_fenced = %v while no write is answered; want 1", fenced)
	}
}
