package peer

// The Go rows of make bench-peer. Each benchmark pairs with the row of the
// same name in bench/peer-dynamo and measures the same operation on the same
// fixture; per-row pairing notes are on the functions and, collected, in
// docs/perf/peer-report.md. Run alone with
//
//	go test -run '^$' -bench Peer ./bench/peer/
//
// Units: "ns/op" is per operation as named below; "p50-ns"/"p99-ns" are
// quantiles of per-query wall times; "ns/block" is per chain block;
// "ns/event" is per stored event; "fixture-sum" is the fixture checksum that
// tools/peerreport compares with the Rust side's.

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/ckf/index"
	"github.com/ckf-stream/ckf-stream/ckf/producer"
)

var sink uint64

// BenchmarkPeerQuery128 is query128/shared and query128/divergent: one
// FindPrefixMatches of a 128-block chain per op, cycling through the shape's
// 512 chains (consecutive queries touch different rows). Each query is timed
// on its own for p50/p99; the Rust side times find_prefix_matches the same
// way. The crate's query allocates its sequence-hash and probe vectors per
// call; ours allocates nothing: that difference is part of what is compared.
func BenchmarkPeerQuery128(b *testing.B) {
	defer releaseFixtures()
	fx := getQueryFixture(b)
	for _, shape := range []struct {
		name   string
		chains [][]uint64
	}{{"shared", fx.shared}, {"divergent", fx.divergent}} {
		b.Run(shape.name, func(b *testing.B) {
			d := make([]time.Duration, 0, b.N)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				chain := shape.chains[i%len(shape.chains)]
				t0 := time.Now()
				res, err := fx.c.g.FindPrefixMatches(chain)
				dt := time.Since(t0)
				if err != nil {
					b.Fatal(err)
				}
				sink += uint64(res.ReadyLanes)
				d = append(d, dt)
			}
			b.StopTimer()
			slices.Sort(d)
			b.ReportMetric(float64(d[len(d)/2].Nanoseconds()), "p50-ns")
			b.ReportMetric(float64(d[len(d)*99/100].Nanoseconds()), "p99-ns")
			b.ReportMetric(float64(fx.sum), "fixture-sum")
			b.ReportMetric(fx.load*100, "load-pct")
		})
	}
}

// BenchmarkPeerSnapshotInstall is snapshot-install: per op, Assign with the
// next epoch and InstallSnapshot of the 2^20 fixture words into lane 0 of a
// one-lane manifest (the table is 16 lanes wide on both sides).
func BenchmarkPeerSnapshotInstall(b *testing.B) {
	words, sum := snapshotWords()
	c := newConsumer(b, snapshotBuckets, 1)
	in, err := c.g.ClaimLane(0)
	if err != nil {
		b.Fatal(err)
	}
	defer in.Close()
	epoch := uint64(0)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		epoch++
		if err := in.Assign(c.identity(0), lease(0, epoch)); err != nil {
			b.Fatal(err)
		}
		s := ckf.Snapshot{Identity: c.identity(0), Lease: lease(0, epoch), Buckets: words}
		if out := in.InstallSnapshot(&s); out.Kind != index.OutcomeSnapshotInstalled {
			b.Fatal(out)
		}
	}
	b.ReportMetric(float64(sum), "fixture-sum")
}

// BenchmarkPeerDeltaApply is delta-apply: per op, ApplyDelta of one
// 23-image delta to a ready lane of 2^20 buckets, cycling through the 4,096
// image sets. The Rust side builds each pass's deltas before its timer
// starts (a delta's sequence is fixed at construction there); here the same
// deltas are reused with their sequence fields advanced, two stores per op.
func BenchmarkPeerDeltaApply(b *testing.B) {
	ring, sum := deltaImageRing()
	c := newConsumer(b, deltaBuckets, 1)
	in := c.readyLane(b, 0, make([]uint64, deltaBuckets))
	defer in.Close()
	deltas := make([]ckf.Delta, len(ring))
	for i, imgs := range ring {
		deltas[i] = ckf.Delta{Identity: c.identity(0), Lease: lease(0, 1), Images: imgs}
	}
	seq, _ := in.InstalledSequence()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		d := &deltas[i%len(deltas)]
		d.BaseSequence, d.Sequence = seq, seq+1
		if out := in.ApplyDelta(d); out.Kind != index.OutcomeDeltaApplied {
			b.Fatal(out)
		}
		seq++
	}
	b.ReportMetric(float64(sum), "fixture-sum")
}

// BenchmarkPeerSeqhashChain is seqhash-chain: the sequence hashes of a
// 128-block chain into a reused slice (ckf.AppendSequenceHashes); the Rust
// side calls the crate's public chain step, compute_next_seq_hash, in the
// same loop. ns/block = ns/op / 128.
func BenchmarkPeerSeqhashChain(b *testing.B) {
	local := chainLocals()
	dst := make([]uint64, 0, len(local))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		dst = ckf.AppendSequenceHashes(dst[:0], local)
	}
	b.StopTimer()
	sum := newChecksum()
	for _, h := range dst {
		sum.add(h)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(local)), "ns/block")
	b.ReportMetric(float64(sum.fold48()), "fixture-sum")
}

// BenchmarkPeerSeqhashVec is seqhash-vec: each side's slice-returning chain
// function, which allocates its result (ckf.SequenceHashes;
// compute_seq_hash_for_block in the crate).
func BenchmarkPeerSeqhashVec(b *testing.B) {
	local := chainLocals()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		sink += ckf.SequenceHashes(local)[queryChainLen-1]
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(local)), "ns/block")
}

// BenchmarkPeerAddressing is addressing: the crate's addressing is private,
// so both sides measure the nearest public operation, the producer's
// Contains (fingerprint and bucket pair of one canonical hash, then the two
// bucket tests), on an empty 2^12-bucket state (32 KiB, cache-resident),
// with the canonical hashes 1, 2, 3, ….
func BenchmarkPeerAddressing(b *testing.B) {
	s := newState(b, addressingBuckets)
	var hits uint64
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if s.Contains(ckf.CanonicalHash(i + 1)) {
			hits++
		}
	}
	sink += hits
}

// BenchmarkPeerLookup is lookup/2^16/{hit,miss} and lookup/2^20/{hit,miss}:
// one DcState.Contains per op (addressing of the canonical hash, then the
// test of both candidate buckets) on a lookupFixture, cycling through its
// ring of 65,536 stored (hit) or never-stored (miss) canonical hashes. The
// tables are 512 KiB (2^16) and 8 MiB (2^20), so the bucket loads of
// consecutive lookups are independent cache or memory accesses; the ring
// itself is read in order.
func BenchmarkPeerLookup(b *testing.B) {
	for _, lg := range []uint{16, 20} {
		for _, kind := range []string{"hit", "miss"} {
			b.Run(fmt.Sprintf("2^%d/%s", lg, kind), func(b *testing.B) {
				fx := getLookupFixture(b, 1<<lg)
				ring := fx.hit
				if kind == "miss" {
					ring = fx.miss
				}
				var hits uint64
				b.ReportAllocs()
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					if fx.s.Contains(ring[i&(lookupRing-1)]) {
						hits++
					}
				}
				b.StopTimer()
				sink += hits
				b.ReportMetric(fx.loadPct, "load-pct")
				b.ReportMetric(float64(fx.omitted), "omitted")
				b.ReportMetric(float64(fx.sum), "fixture-sum")
			})
		}
		releaseFixtures() // this size's state, shared by hit and miss, before the next row
	}
}

// BenchmarkPeerProducerStore is the three producer-store rows (ns/event is
// per stored one-block event; events at cadence 1, so each store also
// drains its publication):
//
//   - 2^16@90, 2^20@90: a steadyProducer; one op is one store, the timer
//     stops while the window's oldest blocks are removed;
//   - 2^16/0-50: one op is one pass that fills a fresh 2^16-bucket state
//     (built untimed) from 0 to 50 % load with 131,072 stores.
func BenchmarkPeerProducerStore(b *testing.B) {
	for _, lg := range []uint{16, 20} {
		b.Run(fmt.Sprintf("2^%d@90", lg), func(b *testing.B) {
			p := getSteadyProducer(b, 1<<lg)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				full, err := p.storeNext()
				if err != nil {
					b.Fatal(err)
				}
				if full {
					b.StopTimer()
					if err := p.endWindow(); err != nil {
						b.Fatal(err)
					}
					b.StartTimer()
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/event")
			b.ReportMetric(p.loadPct(), "load-pct")
			b.ReportMetric(float64(p.omitted), "omitted")
			b.ReportMetric(float64(p.sum), "fixture-sum")
		})
		releaseFixtures() // this size's steady state, before the next row
	}
	b.Run("2^16/0-50", func(b *testing.B) {
		toks, sum := fillTokens()
		ev := storeEvent(make([]producer.StoredBlock, 1))
		var last *producer.DcState
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			s := newState(b, fillBuckets)
			b.StartTimer()
			if err := fillPass(s, &ev, toks); err != nil {
				b.Fatal(err)
			}
			last = s
		}
		b.StopTimer()
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(toks)), "ns/event")
		b.ReportMetric(float64(last.ResidentCount())*100/float64(4*fillBuckets), "load-pct")
		b.ReportMetric(float64(sum), "fixture-sum")
	})
}
