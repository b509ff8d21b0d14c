package producer

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"runtime/metrics"
	"slices"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/ckf"
)

// BenchmarkDcStateMembershipMemory is the relay's exact state at 1 M and 10 M resident
// (member, block) memberships: eight workers store root chains of 16 blocks with sequential
// external ids and random token hashes (so every membership has its own canonical, the case
// where ownership records are not shared), in store events of one chain each, publishing every
// 64 events (the relay's default), into a producer configured for that many blocks.
//
// Reported per membership: "B/membership", the live heap the state holds after a forced
// collection (runtime.MemStats.HeapInuse after minus before, so the filter words, the
// publication window and every table are counted), and "table-B/membership", the lineage and
// ownership tables alone by their slot accounting (DcStats.LineageBytes + OwnerBytes). During the
// store-heavy fill it also reports the garbage collector's stop-the-world pauses from the
// runtime's own histograms: "gc-p99-µs", the whole pause (/sched/pauses/total/gc:seconds), and
// "gc-stop-p99-µs", its first part, the wait for every running goroutine to stop
// (/sched/pauses/stopping/gc:seconds), each the upper bound of the bucket holding the 99th
// percentile, and "gc-pauses" (how many). No table of the state holds a pointer, so the heap's
// size adds nothing to a pause; on a loaded machine the wait to stop, which is the operating
// system scheduling the other thread, can be most of it (-test.cpu 1 has no other thread to
// stop and shows the pause itself).
//
// It runs once per size whatever -benchtime says (a 10 M build takes seconds and about a GiB);
// -short skips the 10 M size.
func BenchmarkDcStateMembershipMemory(b *testing.B) {
	for _, n := range []int{1_000_000, 10_000_000} {
		b.Run(fmt.Sprintf("memberships=%dM", n/1_000_000), func(b *testing.B) {
			if testing.Short() && n > 1_000_000 {
				b.Skip("-short")
			}
			var r membershipRun
			for b.Loop() {
				r = measureMemberships(b, n)
			}
			b.ReportMetric(r.heapPerMembership, "B/membership")
			b.ReportMetric(r.tablePerMembership, "table-B/membership")
			b.ReportMetric(r.gcP99.Seconds()*1e6, "gc-p99-µs")
			b.ReportMetric(r.gcStopP99.Seconds()*1e6, "gc-stop-p99-µs")
			b.ReportMetric(float64(r.gcPauses), "gc-pauses")
			b.ReportMetric(float64(r.fill.Nanoseconds())/float64(n), "ns/membership")
		})
	}
}

type membershipRun struct {
	heapPerMembership  float64
	tablePerMembership float64
	gcP99              time.Duration
	gcStopP99          time.Duration
	gcPauses           uint64
	fill               time.Duration
}

// gcPauseHistograms reads the runtime's histograms of whole GC pauses and of their stopping part.
func gcPauseHistograms() (total, stopping *metrics.Float64Histogram) {
	s := []metrics.Sample{{Name: "/sched/pauses/total/gc:seconds"}, {Name: "/sched/pauses/stopping/gc:seconds"}}
	metrics.Read(s)
	return s[0].Value.Float64Histogram(), s[1].Value.Float64Histogram()
}

// pauseQuantile returns the upper bound of the bucket holding quantile q of the pauses counted
// in after and not in before, and how many those are.
func pauseQuantile(before, after *metrics.Float64Histogram, q float64) (time.Duration, uint64) {
	counts := slices.Clone(after.Counts)
	var total uint64
	for i := range counts {
		counts[i] -= before.Counts[i]
		total += counts[i]
	}
	if total == 0 {
		return 0, 0
	}
	rank := uint64(q*float64(total) + 0.999999)
	var seen uint64
	for i, c := range counts {
		seen += c
		if seen >= rank {
			return time.Duration(after.Buckets[i+1] * 1e9), total
		}
	}
	return time.Duration(after.Buckets[len(after.Buckets)-1] * 1e9), total
}

func measureMemberships(b *testing.B, n int) membershipRun {
	b.Helper()
	const workers, chain = 8, 16
	rng := rand.New(rand.NewPCG(uint64(n), 27))
	var ms runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	heapBefore := ms.HeapInuse
	pausesBefore, stopsBefore := gcPauseHistograms()
	start := time.Now()

	s, err := NewDcState(cfgN(uint64(n), 64))
	if err != nil {
		b.Fatal(err)
	}
	blocks := make([]StoredBlock, chain)
	next := uint64(1)
	for done := 0; done < n; done += chain {
		for i := range blocks {
			blocks[i] = StoredBlock{BlockHash: ckf.ExternalBlockHash(next), TokensHash: ckf.LocalBlockHash(rng.Uint64())}
			next++
		}
		ev := RouterEvent{WorkerID: ckf.WorkerID(1 + (done/chain)%workers), Event: KvCacheEvent{Kind: KvEventStored, Stored: StoreData{Blocks: blocks}}}
		if out := s.ApplyEvent(ev); out.FirstError != nil {
			b.Fatalf("store %d: %v", done, out.FirstError)
		}
	}
	s.Flush()
	fill := time.Since(start)
	pausesAfter, stopsAfter := gcPauseHistograms()
	p99, pauses := pauseQuantile(pausesBefore, pausesAfter, 0.99)
	stopP99, _ := pauseQuantile(stopsBefore, stopsAfter, 0.99)

	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	st := s.Stats()
	if st.LineageEntries != uint64(n) || s.OmittedCount() != 0 {
		b.Fatalf("memberships %d, omitted %d; want %d, 0", st.LineageEntries, s.OmittedCount(), n)
	}
	runtime.KeepAlive(s)
	return membershipRun{
		heapPerMembership:  float64(ms.HeapInuse-heapBefore) / float64(n),
		tablePerMembership: float64(st.LineageBytes+st.OwnerBytes) / float64(n),
		gcP99:              p99,
		gcStopP99:          stopP99,
		gcPauses:           pauses,
		fill:               fill,
	}
}
