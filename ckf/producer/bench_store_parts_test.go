package producer

import (
	"errors"
	"fmt"
	"testing"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/ckf/internal/u64map"
)

// BenchmarkProducerStoreParts splits the cost of a one-block store at 90 % load (the peer
// report's producer-store/2^k@90 rows: root blocks, external ids 0, 1, 2, …, random token
// hashes, cadence 1, a window of 1,024 stores followed by the untimed removal of the 1,024
// oldest blocks) into the layers it is built from, each measured alone on the same key stream:
//
//   - parts=walk: the filter insertion of the block's canonical hash with the spec's bounded
//     kick walk (producer §6.2), nothing else: the part that every implementation of the spec
//     performs identically, kick for kick;
//   - parts=walk+tables: the walk plus the exact state's two table accesses as storeOne makes
//     them (lineage: an absent external id looked up, then inserted; ownership: the canonical
//     looked up, then inserted), prefetched the same way;
//   - parts=store: DcState.ApplyEvent, the whole event (validation, reservations, the drain's
//     publication images and their order, the outcome).
//
// The differences between rows are what each layer adds. They report; nothing asserts a time.
func BenchmarkProducerStoreParts(b *testing.B) {
	const window = 1024
	for _, lg := range []uint{16, 20} {
		buckets := uint64(1) << lg
		cfg := cfgN(buckets*16/5, 1) // the peer fixture's sizing: exactly `buckets` buckets
		base := 4*buckets*9/10 - window
		// keys yields the i-th block's token hash; every row draws the same stream.
		keys := func(i uint64) uint64 { return ckf.Mix8(i, 0x5045455253543930) }
		canon := func(i uint64) ckf.CanonicalHash { return ckf.CanonicalRoot(ckf.LocalBlockHash(keys(i))) }

		b.Run(fmt.Sprintf("buckets=2^%d/parts=walk", lg), func(b *testing.B) {
			s := mustState(b, cfg, buckets)
			f := s.filter
			next, oldest := uint64(0), uint64(0)
			for ; next < base; next++ {
				_, _ = f.Insert(uint64(canon(next)), cfg.MaxKicks)
			}
			for b.Loop() {
				if _, err := f.Insert(uint64(canon(next)), cfg.MaxKicks); err != nil {
					b.Fatal(err)
				}
				if next++; next-oldest == base+window {
					b.StopTimer()
					for ; oldest < next-base; oldest++ {
						if _, err := f.Remove(uint64(canon(oldest))); err != nil {
							b.Fatal(err)
						}
					}
					b.StartTimer()
				}
			}
		})

		b.Run(fmt.Sprintf("buckets=2^%d/parts=walk+tables", lg), func(b *testing.B) {
			s := mustState(b, cfg, buckets)
			f := s.filter
			lin := u64map.New[ckf.ExternalBlockHash, ckf.CanonicalHash](1)
			owners := u64map.New[ckf.CanonicalHash, ownerEntry](1)
			store := func(i uint64) {
				ext, c := ckf.ExternalBlockHash(i), canon(i)
				lin.Prefetch(ext)
				owners.Prefetch(c)
				f.prefetch(uint64(c))
				if _, mapped := lin.Get(ext); mapped {
					b.Fatal("external id mapped twice")
				}
				e := owners.Find(c)
				lin.Put(ext, c)
				if e == nil {
					e, _ = owners.Upsert(c)
				}
				e.setOwners(e.owners() + 1)
				if _, err := f.Insert(uint64(c), cfg.MaxKicks); err == nil {
					e.resident = true
				}
			}
			next, oldest := uint64(0), uint64(0)
			for ; next < base; next++ {
				store(next)
			}
			for b.Loop() {
				store(next)
				if next++; next-oldest == base+window {
					b.StopTimer()
					for ; oldest < next-base; oldest++ {
						c := canon(oldest)
						lin.Delete(ckf.ExternalBlockHash(oldest))
						if e, _ := owners.Get(c); e.resident {
							_, _ = f.Remove(uint64(c))
						}
						owners.Delete(c)
					}
					b.StartTimer()
				}
			}
		})

		b.Run(fmt.Sprintf("buckets=2^%d/parts=store", lg), func(b *testing.B) {
			s := mustState(b, cfg, buckets)
			src := pSrc(1, 0)
			ev := storeEv(src, pBlk(0, 0))
			rm := removeEv(src, 0)
			store := func(i uint64) {
				ev.Event.Stored.Blocks[0] = pBlk(i, keys(i))
				if out := s.ApplyEvent(ev); out.FirstError != nil && !errors.Is(out.FirstError, ckf.ErrCapacityExhausted) {
					b.Fatal(out.FirstError)
				}
			}
			next, oldest := uint64(0), uint64(0)
			for ; next < base; next++ {
				store(next)
			}
			b.ReportAllocs()
			for b.Loop() {
				store(next)
				if next++; next-oldest == base+window {
					b.StopTimer()
					for ; oldest < next-base; oldest++ {
						rm.Event.Removed[0] = ckf.ExternalBlockHash(oldest)
						if out := s.ApplyEvent(rm); out.FirstError != nil {
							b.Fatal(out.FirstError)
						}
					}
					b.StartTimer()
				}
			}
			b.ReportMetric(float64(s.ResidentCount())*100/float64(4*buckets), "load-pct")
		})
	}
}

// mustState is a DcState of cfg that must have exactly buckets buckets.
func mustState(b *testing.B, cfg ckf.CkfConfig, buckets uint64) *DcState {
	b.Helper()
	s, err := NewDcState(cfg)
	if err != nil {
		b.Fatal(err)
	}
	if s.BucketCount() != buckets {
		b.Fatalf("state has %d buckets, want %d", s.BucketCount(), buckets)
	}
	return s
}
