package relay_test

import (
	"testing"

	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/ckf-stream/ckf-stream/streams/internal/streamtest"
	"github.com/ckf-stream/ckf-stream/streams/query"
	"github.com/ckf-stream/ckf-stream/testenv"
)

// TestRelayLane40OnTheBroker (consumer §16): a relay of lane 40 publishes on partition 40 of a
// 64-partition lane topic on the real broker (its transactions, the lane topic's limits it reads
// at start, the indexer's read-committed fetch of that partition are the broker's), beside a
// producer of lane 3, into one indexer of a 41-lane table. The indexer's lane 40 equals the
// relay's words at the relay's sequence, the relay's ownership equals a reference fed the same
// events, and the indexer answers every chain exactly like a reference built from the relay's
// and the producer's words: through the table (every lane count's search) and through the
// answerer with a 64-lane mask; a request read as 16 lanes is refused, not cut short.
func TestRelayLane40OnTheBroker(t *testing.T) {
	t.Parallel()
	e := newBrokerRelayEnv(t, 4096, 2)
	const lane, low = 40, 3
	events := e.WatchEvents()
	p := e.Producer(low, 1)
	p.Snapshot()
	for i := range 8 {
		p.StoreChain(4+i, nil, 0)
	}
	g := newKvGen(40)
	before := g.take(150)
	e.produce(before...)

	m := e.Manifest(37, low, lane)
	if n := m.LaneCount(); n != lane+1 {
		t.Fatalf("manifest of %d lanes, want %d", n, lane+1)
	}
	ri := e.StartIndexer(m, e.IndexerConfig())
	rr := e.startRelay(e.relayConfig(lane, testenv.UniqueName(t, "relay")), true)
	waitRelayLane(t, ri, rr, lane)
	events.WaitFor(t, lane, streamtest.Converge, "SNAPSHOT_INSTALLED", streamtest.KindIs(schemas.EventSnapshotInstalled))

	after := g.take(300)
	for i := 0; i < len(after); i += 50 {
		e.produce(after[i:min(i+50, len(after))]...)
	}
	waitApplied(t, rr, uint64(len(before)+len(after)))
	words := waitRelayLane(t, ri, rr, lane)
	streamtest.WaitLane(t, ri, p, streamtest.Converge)
	compareOwnership(t, rr, newReference(t, e, before, after), g)

	_, seq := rr.inspect(t)
	ref := streamtest.ReferenceIndexer(t, m, p)
	streamtest.InstallReference(t, ref, lane, rr.r.Identity(), seq, words)
	got := ri.Indexer.GlobalIndexer()
	relayed := &streamtest.Producer{Lane: lane, Chains: g.tokens}
	streamtest.CompareQueries(t, got, ref, relayed, p)

	ix := ri.Indexer
	if want := uint64(1<<low | 1<<lane); ix.EligibleLanes() != want {
		t.Fatalf("eligible lanes %#x, want %#x", ix.EligibleLanes(), want)
	}
	ans := query.NewAnswerer(got, ix.EligibleLanes, query.IncompleteLanes(ix.IncompleteLanes))
	hits := map[uint8]int{}
	for _, src := range []*streamtest.Producer{relayed, p} {
		for _, chain := range src.Chains {
			req := schemas.QueryRequest{CorrelationID: "q", Input: schemas.InputLocalBlockHashes,
				Hashes: schemas.AppendU64s(nil, chain), LaneMask64: schemas.Some(schemas.AllLanes64)}
			reply := ans.Answer(&req, nil)
			want, err := ref.FindPrefixMatches64(chain, nil)
			if err != nil {
				t.Fatal(err)
			}
			if reply.Status != schemas.QueryOK || reply.ReadyMask() != want.ReadyLanes || len(reply.Lanes) != 2 {
				t.Fatalf("lane %d's chain of %d blocks: reply %+v, want ready lanes %#x", src.Lane, len(chain), reply, want.ReadyLanes)
			}
			for _, lm := range reply.Lanes {
				if lm.Depth != want.Depths[lm.Lane] {
					t.Fatalf("lane %d's chain of %d blocks on lane %d: depth %d, reference %d", src.Lane, len(chain), lm.Lane, lm.Depth, want.Depths[lm.Lane])
				}
				if lm.Depth > 0 {
					hits[lm.Lane]++
				}
			}
		}
	}
	if hits[lane] == 0 || hits[low] == 0 {
		t.Fatalf("chains found on lanes %v: want some on both lane %d and lane %d, or the comparison compared only misses", hits, lane, low)
	}

	// A writer that reads replies as 16 lanes (no lane_mask64) asking for every lane.
	old := schemas.QueryRequest{CorrelationID: "q16", Input: schemas.InputLocalBlockHashes, Hashes: schemas.AppendU64s(nil, g.tokens[0])}
	if reply := ans.Answer(&old, nil); reply.Status != schemas.QueryInvalidRequest || reply.ReadyMask() != 0 || len(reply.Lanes) != 0 {
		t.Fatalf("request of 16 lanes on an indexer of lane %d: %+v, want INVALID_REQUEST and no lane", lane, reply)
	}
	t.Logf("lane %d: %d relay chains and %d lane-%d chains answered exactly; found on lanes %v; relay stats %+v",
		lane, len(relayed.Chains), len(p.Chains), low, hits, rr.r.Stats())
}
