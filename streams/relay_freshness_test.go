package streams_test

import (
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/ckf-stream/ckf-stream/testenv"
)

// TestStoppedRelayLaneExcludedThenReadmitted: when a relay stops publishing (no deltas, no
// heartbeats), the indexer excludes its lane from answers after the freshness policy's time
// bound, without retiring it; a restarted relay (a new incarnation) brings the lane back with
// its exact state. The indexer itself is restarted in the middle of the run and loses nothing.
func TestStoppedRelayLaneExcludedThenReadmitted(t *testing.T) {
	e := newRelayEnv(t, 4096, 1)
	const lane = 9
	g := newKvGen(9)
	evs1 := g.take(150)
	e.produce(evs1...)
	events := e.watchEvents()
	cfg := e.indexerConfig()
	cfg.Freshness.MaxTimeLag = 1500 * time.Millisecond // relay heartbeats every 200 ms
	txn := testenv.UniqueName(t, "relay")
	first := e.startIndexer(e.manifest(71, lane), cfg)
	rr := e.startRelay(e.relayConfig(lane, txn), true)
	waitRelayLane(t, first, rr, lane)

	// The indexer restarts mid-run: a new replica restores from the snapshot index and the log.
	first.stop()
	evs2 := g.take(100)
	e.produce(evs2...)
	ri := e.startIndexer(e.manifest(72, lane), cfg)
	waitApplied(t, rr, 250)
	waitRelayLane(t, ri, rr, lane)
	if ri.ix.EligibleLanes() != 1<<lane {
		t.Fatalf("eligible lanes %016b, want lane %d", ri.ix.EligibleLanes(), lane)
	}

	if err := rr.stop(); err != nil {
		t.Fatalf("relay stop: %v", err)
	}
	events.waitFor(t, lane, converge, "EXCLUDED_FOR_LAG", kindIs(schemas.EventExcludedForLag))
	if ri.ix.EligibleLanes() != 0 || ri.ix.GlobalIndexer().ReadyLanes() != 1<<lane {
		t.Fatalf("after the relay stopped: eligible %016b ready %016b; want excluded but still ready",
			ri.ix.EligibleLanes(), ri.ix.GlobalIndexer().ReadyLanes())
	}

	evs3 := g.take(100)
	e.produce(evs3...) // written while no relay runs: the next incarnation replays them
	restarted := e.startRelay(e.relayConfig(lane, txn), true)
	// The new incarnation applies every retained event (replayed, or live after a replay that a
	// slow first fetch ended early) before its state can equal the reference's.
	waitApplied(t, restarted, uint64(len(evs1)+len(evs2)+len(evs3)))
	waitRelayLane(t, ri, restarted, lane)
	events.waitFor(t, lane, converge, "READMITTED", kindIs(schemas.EventReadmitted))
	if ri.ix.EligibleLanes() != 1<<lane {
		t.Fatalf("eligible lanes %016b after the relay restart, want lane %d", ri.ix.EligibleLanes(), lane)
	}
	compareOwnership(t, restarted, newReference(t, e, evs1, evs2, evs3), g)
}
