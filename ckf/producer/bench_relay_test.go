package producer

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/ckf-stream/ckf-stream/ckf"
)

// relayWorkload generates the event stream of the relay's end-to-end benchmark
// (BenchmarkE2ERelay in streams): eight workers; 70 % of events store a chain of 4–16 blocks with
// sequential external ids (half of them continuing one of the worker's chains), 30 % remove
// the 1..len newest blocks of one held chain. About 8.4 block operations per event; resident
// blocks accumulate, so the exact state's maps grow to ~10^5–10^6 entries over 10^5 events.
type relayWorkload struct {
	rng  *rand.Rand
	held map[ckf.WorkerID][][]ckf.ExternalBlockHash
	next uint64
	ops  int64 // block operations generated so far
}

func newRelayWorkload(seed uint64) *relayWorkload {
	return &relayWorkload{rng: rand.New(rand.NewPCG(seed, 22)), held: map[ckf.WorkerID][][]ckf.ExternalBlockHash{}, next: 1}
}

func (w *relayWorkload) event() RouterEvent {
	wk := ckf.WorkerID(1 + w.rng.IntN(8))
	cs := w.held[wk]
	if w.rng.IntN(100) < 70 || len(cs) == 0 {
		k := 4 + w.rng.IntN(13)
		blocks := make([]StoredBlock, k)
		ids := make([]ckf.ExternalBlockHash, k)
		for i := range blocks {
			blocks[i] = StoredBlock{BlockHash: ckf.ExternalBlockHash(w.next), TokensHash: ckf.LocalBlockHash(w.rng.Uint64())}
			ids[i] = blocks[i].BlockHash
			w.next++
		}
		sd := StoreData{Blocks: blocks}
		if len(cs) > 0 && w.rng.IntN(2) == 0 {
			if parent := cs[w.rng.IntN(len(cs))]; len(parent) > 0 {
				sd.HasParent, sd.ParentHash = true, parent[len(parent)-1]
			}
		}
		w.held[wk] = append(cs, ids)
		w.ops += int64(k)
		return RouterEvent{WorkerID: wk, Event: KvCacheEvent{Kind: KvEventStored, Stored: sd}}
	}
	i := w.rng.IntN(len(cs))
	c := cs[i]
	k := 1 + w.rng.IntN(len(c))
	ids := make([]ckf.ExternalBlockHash, k)
	for j := range ids {
		ids[j] = c[len(c)-1-j]
	}
	cs[i] = c[:len(c)-k]
	if len(cs[i]) == 0 {
		w.held[wk] = slices.Delete(cs, i, i+1)
	}
	w.ops += int64(k)
	return RouterEvent{WorkerID: wk, Event: KvCacheEvent{Kind: KvEventRemoved, Removed: ids}}
}

// BenchmarkDcStateRelayWorkload is the relay's exact state alone on BenchmarkE2ERelay's workload
// (2^20 expected blocks, a delta every 64 events, the relay's default): 10^5 pre-generated events
// applied from an empty state, reported per block operation ("ns/blockop", "blockops/s").
// The events are generated before the timer starts, so only ApplyEvent (and its drains) is timed.
func BenchmarkDcStateRelayWorkload(b *testing.B) {
	const events = 100_000
	w := newRelayWorkload(21)
	evs := make([]RouterEvent, events)
	for i := range evs {
		evs[i] = w.event()
	}
	cfg := cfgN(1<<20, 64)
	b.ReportAllocs()
	b.ResetTimer()
	var elapsed float64
	for b.Loop() {
		b.StopTimer()
		s, err := NewDcState(cfg)
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		for i := range evs {
			if out := s.ApplyEvent(evs[i]); out.FirstError != nil {
				b.Fatalf("event %d: %v", i, out.FirstError)
			}
		}
	}
	elapsed = b.Elapsed().Seconds()
	ops := float64(w.ops) * float64(b.N)
	b.ReportMetric(elapsed*1e9/ops, "ns/blockop")
	b.ReportMetric(ops/elapsed, "blockops/s")
}
