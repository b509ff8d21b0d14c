package relay_test

import (
	"testing"

	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/ckf-stream/ckf-stream/streams/internal/streamtest"
	"github.com/ckf-stream/ckf-stream/testenv"
)

// TestDrainedRelayLaneLeavesAnswersThenReturns: a relay that stops gracefully writes a drain
// marker; the indexer acknowledges it and takes the lane out of answers at once (DRAINED: ready
// bit cleared, not eligible) instead of serving it until the freshness policy's time bound. A
// restarted relay (a new incarnation) brings the lane back with its exact state. The indexer
// itself is restarted in the middle of the run and loses nothing.
func TestDrainedRelayLaneLeavesAnswersThenReturns(t *testing.T) {
	t.Parallel()
	e := newRelayEnv(t, 4096, 1)
	const lane = 9
	g := newKvGen(9)
	evs1 := g.take(150)
	e.produce(evs1...)
	events := e.WatchEvents()
	cfg := e.IndexerConfig() // freshness bounds of an hour: only the drain can take the lane out
	txn := testenv.UniqueName(t, "relay")
	first := e.StartIndexer(e.Manifest(71, lane), cfg)
	rr := e.startRelay(e.relayConfig(lane, txn), true)
	waitRelayLane(t, first, rr, lane)

	// The indexer restarts mid-run: a new replica restores from the snapshot index and the log.
	first.Stop()
	evs2 := g.take(100)
	e.produce(evs2...)
	ri := e.StartIndexer(e.Manifest(72, lane), cfg)
	waitApplied(t, rr, 250)
	waitRelayLane(t, ri, rr, lane)
	if ri.Indexer.EligibleLanes() != 1<<lane {
		t.Fatalf("eligible lanes %016b, want lane %d", ri.Indexer.EligibleLanes(), lane)
	}

	if err := rr.stop(); err != nil {
		t.Fatalf("relay stop: %v", err)
	}
	events.WaitFor(t, lane, streamtest.Converge, "DRAIN_ACKNOWLEDGED", streamtest.KindIs(schemas.EventDrainAcknowledged))
	events.WaitFor(t, lane, streamtest.Converge, "DRAINED", streamtest.KindIs(schemas.EventDrained))
	// The lane publishes its status after the record's effects: once it reports the drain, the
	// ready bit is already clear.
	testenv.WaitUntil(t, streamtest.Converge, "lane status reports the drain", func() bool { return streamtest.LaneStatus(ri, lane).Drains == 1 })
	if st := streamtest.LaneStatus(ri, lane); st.Phase.String() != "drained" || ri.Indexer.EligibleLanes() != 0 || ri.Indexer.GlobalIndexer().ReadyLanes() != 0 {
		t.Fatalf("after the drain: phase %v, eligible %016b, ready %016b; want drained and out of answers",
			st.Phase, ri.Indexer.EligibleLanes(), ri.Indexer.GlobalIndexer().ReadyLanes())
	}
	if n := events.Count(lane, streamtest.KindIs(schemas.EventExcludedForLag)); n != 0 {
		t.Fatalf("%d EXCLUDED_FOR_LAG events: the drain, not the freshness policy, takes the lane out", n)
	}

	evs3 := g.take(100)
	e.produce(evs3...) // written while no relay runs: the next incarnation replays them
	restarted := e.startRelay(e.relayConfig(lane, txn), true)
	// The start-up replay ends exactly at the end offsets listed at the start: every retained
	// event is replayed before the start-up snapshot.
	if s := restarted.r.Stats(); s.ReplayedEvents != uint64(len(evs1)+len(evs2)+len(evs3)) || s.Events != 0 {
		t.Fatalf("restarted relay: %d replayed and %d live events; want all %d replayed",
			s.ReplayedEvents, s.Events, len(evs1)+len(evs2)+len(evs3))
	}
	waitRelayLane(t, ri, restarted, lane)
	if ri.Indexer.EligibleLanes() != 1<<lane {
		t.Fatalf("eligible lanes %016b after the relay restart, want lane %d", ri.Indexer.EligibleLanes(), lane)
	}
	compareOwnership(t, restarted, newReference(t, e, evs1, evs2, evs3), g)
}
