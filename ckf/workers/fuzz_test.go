package workers

import (
	"slices"
	"testing"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/ckf/producer"
)

// FuzzApply decodes arbitrary bytes into events over a small universe (any residency and tier
// encoding, undefined kinds, parents, start positions, arbitrary external ids) and checks that
// Apply never panics, an event it refuses changes nothing, and the index keeps the model's
// memberships and answers (workers §6), and so does an index restored from its rows at the end
// (workers §2.2).
func FuzzApply(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15})
	f.Add([]byte{0x10, 0, 0, 3, 1, 1, 2, 2, 3, 3, 0x21, 1, 0, 1, 0x42, 0, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		ix, m := New(), newModel()
		next := func() byte {
			if len(data) == 0 {
				return 0
			}
			b := data[0]
			data = data[1:]
			return b
		}
		chain := []ckf.LocalBlockHash{5, 6, 7, 8}
		canon := canonicals(chain)
		var r Result
		var got []ckf.CanonicalHash
		for len(data) > 0 {
			h := next()
			ev := producer.RouterEvent{
				WorkerID:    ckf.WorkerID(h & 3),
				StorageTier: producer.StorageTier((h >> 2) % 5),
				Residency:   producer.ResidencyDomain((h >> 5) % 4),
			}
			ev.Event.DpRank = ckf.DpRank(next() & 1)
			ev.Event.Kind = producer.KvEventKind(next() % 5)
			ext := func(b byte) ckf.ExternalBlockHash {
				if b&0x80 != 0 {
					return ckf.ExternalBlockHash(b & 7)
				}
				return ckf.ExternalBlockHash(canon[int(b)%len(canon)])
			}
			n := int(next() % 5)
			switch ev.Event.Kind {
			case producer.KvEventStored:
				p := next()
				lo := int(p) % len(chain)
				if p&0x40 != 0 && lo > 0 {
					ev.Event.Stored.HasParent, ev.Event.Stored.ParentHash = true, ext(byte(lo-1)|(p&0x80))
				}
				if p&0x20 != 0 {
					ev.Event.Stored.HasStartPosition, ev.Event.Stored.StartPosition = true, uint32(p&1)
				}
				for i := lo; i < min(lo+n, len(chain)); i++ {
					ev.Event.Stored.Blocks = append(ev.Event.Stored.Blocks, producer.StoredBlock{
						BlockHash: ext(byte(i) | (next() & 0x80)), TokensHash: chain[i]})
				}
			case producer.KvEventRemoved:
				for range n {
					ev.Event.Removed = append(ev.Event.Removed, ext(next()))
				}
			}
			// A refused event changes nothing the index holds; its tables may keep capacity that
			// the event's lineage pass grew before the remap that refused it was found (a
			// rollback deletes what it inserted, it does not shrink the table back), so the
			// comparison leaves Stats.Bytes out.
			contents := func() Stats { st := ix.Stats(); st.Bytes = 0; return st }
			before := contents()
			err := ix.Apply(ev)
			if err != nil && contents() != before {
				t.Fatalf("refused event %+v changed the index: %+v -> %+v", ev, before, contents())
			}
			if ok := m.apply(ev); ok == (err != nil) && ev.Residency != producer.ResidencyCacheOwner && ev.Residency.Known() {
				t.Fatalf("index error %v, model accepted %v for %+v", err, ok, ev)
			}
			checkInvariants(t, ix, m)
			for k := 1; k <= len(canon); k++ {
				ix.Match(canon[:k], Options{}, &r)
				want := m.match(canon[:k])
				if !slices.Equal(r.Matches, want) {
					t.Fatalf("query [:%d]: index %+v, model %+v", k, r.Matches, want)
				}
				ix.MatchLocal(chain[:k], Options{}, &r, &got)
				if !slices.Equal(got, canon[:k]) || !slices.Equal(r.Matches, want) {
					t.Fatalf("MatchLocal [:%d]: chain %v, want %v; index %+v, model %+v", k, got, canon[:k], r.Matches, want)
				}
				ix.MatchLocal(chain[:k], Options{}, &r, nil) // the walk by local hash (slabWalk.scanLocal)
				if !slices.Equal(r.Matches, want) {
					t.Fatalf("MatchLocal [:%d] without a chain: index %+v, model %+v", k, r.Matches, want)
				}
			}
		}
		// The index restored from its rows (workers §2.2) holds and answers the same.
		rx := restoreRows(t, ix)
		checkInvariants(t, rx, m)
		for k := 1; k <= len(canon); k++ {
			if rx.Match(canon[:k], Options{}, &r); !slices.Equal(r.Matches, m.match(canon[:k])) {
				t.Fatalf("query [:%d]: restored index %+v, model %+v", k, r.Matches, m.match(canon[:k]))
			}
		}
	})
}
