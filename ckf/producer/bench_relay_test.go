package producer

import (
	"fmt"
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

// relayWorkloadEvents generates n events of the workload (seed 21), with the generator that
// counted their block operations.
func relayWorkloadEvents(n int) (*relayWorkload, []RouterEvent) {
	w := newRelayWorkload(21)
	evs := make([]RouterEvent, n)
	for i := range evs {
		evs[i] = w.event()
	}
	return w, evs
}

// BenchmarkDcStateRelayWorkload is the relay's exact state alone on BenchmarkE2ERelay's workload
// (2^20 expected blocks, a delta every 64 events, the relay's default): 10^5 pre-generated events
// applied from an empty state, reported per block operation ("ns/blockop", "blockops/s").
// The events are generated before the timer starts, so only ApplyEvent (and its drains) is timed.
func BenchmarkDcStateRelayWorkload(b *testing.B) {
	w, evs := relayWorkloadEvents(100_000)
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

// txnSink is the relay's former DeltaSink: Publish handed it each delta, which it appended to
// the open transaction's list. BenchmarkRelayWorkloadPublished's "sink" path, kept to compare
// the one-way path against the one it replaced.
type txnSink struct{ deltas []ckf.Delta }

func (s *txnSink) Enqueue(d ckf.Delta) error { s.deltas = append(s.deltas, d); return nil }

// BenchmarkRelayWorkloadPublished is BenchmarkDcStateRelayWorkload with every publication
// turned into a delta as the relay does, into a transaction list emptied every 16 deltas:
// path=append has Publisher.AppendDelta append it (the relay's one-way path); path=sink hands the
// batch to Publisher.Publish, whose sink appends it (the path it replaced). Reported per block
// operation, as BenchmarkDcStateRelayWorkload; the publish step alone is BenchmarkPublishStep.
func BenchmarkRelayWorkloadPublished(b *testing.B) {
	w, evs := relayWorkloadEvents(100_000)
	cfg := cfgN(1<<20, 64)
	for _, path := range []string{"append", "sink"} {
		b.Run("path="+path, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				b.StopTimer()
				s, err := NewDcState(cfg)
				if err != nil {
					b.Fatal(err)
				}
				sink := &txnSink{}
				var txn []ckf.Delta
				var p *Publisher
				if path == "sink" {
					p = NewPublisher(prodIdentity(s.BucketCount()), 0, sink)
					_, err = p.SnapshotAfterBarrier(s, ckf.LaneLease{Lane: 1, Epoch: 1})
				} else {
					p = NewPublisher(prodIdentity(s.BucketCount()), 0, nil)
					_, _, err = p.SnapshotAfterBarrierDelta(s, ckf.LaneLease{Lane: 1, Epoch: 1})
				}
				if err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				for i := range evs {
					out := s.ApplyEvent(evs[i])
					if out.FirstError != nil {
						b.Fatalf("event %d: %v", i, out.FirstError)
					}
					if len(out.Publication) == 0 {
						continue
					}
					if path == "sink" {
						if _, err := p.Publish(out.Publication); err != nil {
							b.Fatal(err)
						}
						if len(sink.deltas) == 16 {
							clear(sink.deltas)
							sink.deltas = sink.deltas[:0]
						}
					} else {
						if txn, _, err = p.AppendDelta(txn, out.Publication); err != nil {
							b.Fatal(err)
						}
						if len(txn) == 16 {
							clear(txn)
							txn = txn[:0]
						}
					}
				}
			}
			elapsed := b.Elapsed().Seconds()
			ops := float64(w.ops) * float64(b.N)
			b.ReportMetric(elapsed*1e9/ops, "ns/blockop")
		})
	}
}

// BenchmarkPublishStep is the publish step alone, on the publications of the relay workload's
// first 20,000 events (a delta every 64 events, and every event), each delta going into a
// transaction list emptied every 16 deltas: path=append has Publisher.AppendDelta append it (the
// relay's one-way path), path=delta takes Publisher.Delta's delta and appends it, path=sink has
// Publisher.Publish hand it to a sink that appends it (the path the relay replaced). Reported
// per delta.
func BenchmarkPublishStep(b *testing.B) {
	for _, every := range []uint64{64, 1} {
		w := newRelayWorkload(21)
		s, err := NewDcState(cfgN(1<<20, every))
		if err != nil {
			b.Fatal(err)
		}
		var pubs [][]ckf.BucketImage
		for range 20_000 {
			if out := s.ApplyEvent(w.event()); len(out.Publication) > 0 {
				pubs = append(pubs, out.Publication)
			}
		}
		for _, path := range []string{"append", "delta", "sink"} {
			b.Run(fmt.Sprintf("every=%d/path=%s", every, path), func(b *testing.B) {
				sink := &txnSink{}
				p := NewPublisher(prodIdentity(s.BucketCount()), 0, sink)
				p.lease, p.hasLease = ckf.LaneLease{Lane: 1, Epoch: 1}, true
				txn := make([]ckf.Delta, 0, 16)
				sink.deltas = make([]ckf.Delta, 0, 16)
				b.ReportAllocs()
				for b.Loop() {
					if path == "sink" {
						for _, im := range pubs {
							if _, err := p.Publish(im); err != nil {
								b.Fatal(err)
							}
							if len(sink.deltas) == 16 {
								clear(sink.deltas)
								sink.deltas = sink.deltas[:0]
							}
						}
						continue
					}
					if path == "append" {
						for _, im := range pubs {
							var err error
							if txn, _, err = p.AppendDelta(txn, im); err != nil {
								b.Fatal(err)
							}
							if len(txn) == 16 {
								clear(txn)
								txn = txn[:0]
							}
						}
						continue
					}
					for _, im := range pubs {
						d, _, err := p.Delta(im)
						if err != nil {
							b.Fatal(err)
						}
						if txn = append(txn, d); len(txn) == 16 {
							clear(txn)
							txn = txn[:0]
						}
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(pubs)), "ns/delta")
			})
		}
	}
}
