package index

import (
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/ckf/producer"
)

// TestPublicationOrderNoTransientFalseNegatives drives kick-heavy deltas
// from a producer held at about 95 % load into a lane of an in-process
// indexer while goroutines query, concurrently with every ApplyDelta,
// blocks that are resident before and after it (a stable set the churn
// never removes). A cuckoo kick moves such a block's fingerprint to its
// other bucket; with the images in first-touch order a query between the
// source's store and the destination's store misses it. The producer's
// publication order makes every instant of the lane hold each stable
// fingerprint in one of its buckets; the test counts lane-level false
// negatives (depth 0 at the lane for a stable block) and wants none.
//
// The consumer's part: a probe loads bucket A's word and then bucket B's
// (consumer §5.5, weak read), so when a delta moves a fingerprint from B to
// A, a probe whose load of A precedes A's store and whose load of B follows
// B's store would miss it, whatever the order of the two stores. The query
// path therefore loads A again for the lanes that missed in both rows
// (transposedTable.probeSettled). Misses on such B-to-A moves are counted
// apart (read straddles) so that a failure says which half broke; both
// counts must be 0.
//
// To make a gap likely to be hit if it existed, each delta's queries go to
// the stable blocks whose fingerprint the delta relocates, and ApplyDelta
// starts only once every querier is working on that delta's list.
func TestPublicationOrderNoTransientFalseNegatives(t *testing.T) {
	const (
		buckets  = 1024
		rounds   = 100
		queriers = 2
	)
	f := newFixture(t, 1, buckets, ckf.DefaultVerificationWindow)
	cfg := adapterConfig(t, buckets)
	cfg.PublishEveryNEvents = 1 << 30 // one delta per round, cut by Flush
	st, err := producer.NewDcState(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if st.Format() != f.format {
		t.Fatalf("format %+v != %+v", st.Format(), f.format)
	}
	src := ckf.SourceKey{Worker: 1}
	rng := rand.New(rand.NewPCG(7, 11))
	slots := 4 * uint64(buckets)
	addr := st.Addressing()

	// The stable set: 80 % of the slots, never removed.
	var stable []uint64
	ext := uint64(0)
	store := func(tok uint64) {
		st.ApplyEvent(producer.RouterEvent{WorkerID: src.Worker, Event: producer.KvCacheEvent{
			Kind: producer.KvEventStored, Stored: producer.StoreData{Blocks: []producer.StoredBlock{
				{BlockHash: ckf.ExternalBlockHash(ext), TokensHash: ckf.LocalBlockHash(tok)}}}}})
		ext++
	}
	for st.ResidentCount() < slots*80/100 {
		tok := rng.Uint64()
		store(tok)
		if _, resident := st.Owners(ckf.CanonicalHash(tok)); resident {
			stable = append(stable, tok)
		}
	}
	churnFrom := ext // churn blocks have ext >= churnFrom; removed oldest first
	oldest := churnFrom
	for st.ResidentCount() < slots*95/100 {
		store(rng.Uint64())
	}
	st.Flush()
	in := f.readyLane(0, 1, 0, st.CopyWords())
	published := st.CopyWords()

	// Queriers: query every block of the current hot list, again and again.
	var (
		hot      atomic.Pointer[[]hotBlock]
		gen      atomic.Uint64
		acks     = make(chan struct{}, queriers)
		done     atomic.Bool
		misses   atomic.Uint64
		straddle atomic.Uint64
		queries  atomic.Uint64
		wg       sync.WaitGroup
		firstErr atomic.Pointer[error]
	)
	all := make([]hotBlock, len(stable))
	for i, tok := range stable {
		all[i] = hotBlock{tok: tok}
	}
	hot.Store(&all)
	for range queriers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var local [1]uint64
			var seen uint64
			for !done.Load() {
				// The list is stored before gen is advanced, so a new gen
				// comes with its list; the applier waits for every ack.
				g := gen.Load()
				list := *hot.Load()
				if g != seen {
					seen = g
					acks <- struct{}{}
				}
				for _, h := range list {
					local[0] = h.tok
					res, err := f.g.FindPrefixMatches(local[:])
					if err != nil {
						firstErr.CompareAndSwap(nil, &err)
						break // keep acknowledging so the applier never blocks
					}
					if m, _ := res.Match(0); m.Depth == 0 {
						if h.bToA {
							straddle.Add(1)
						} else {
							misses.Add(1)
						}
					}
				}
				queries.Add(uint64(len(list)))
			}
		}()
	}

	seq := uint64(0)
	var cycles, images int
	for range rounds {
		// A kick-heavy window: remove a few churn blocks, store as many new
		// ones at ~95 % load.
		for range 8 {
			if oldest < ext {
				st.ApplyEvent(producer.RouterEvent{WorkerID: src.Worker, Event: producer.KvCacheEvent{
					Kind: producer.KvEventRemoved, Removed: []ckf.ExternalBlockHash{ckf.ExternalBlockHash(oldest)}}})
				oldest++
			}
		}
		for st.ResidentCount() < slots*95/100 {
			store(rng.Uint64())
		}
		batch := st.Flush()
		if len(batch) == 0 {
			continue
		}
		images += len(batch)
		after := slices.Clone(published)
		for _, im := range batch {
			after[im.Bucket] = im.Value
		}
		// The stable blocks this delta relocates.
		var moved []hotBlock
		for _, tok := range stable {
			p := addr.Probe(tok)
			wasA := ckf.Bucket(published[p.BucketA]).Contains(p.Fingerprint)
			isA := ckf.Bucket(after[p.BucketA]).Contains(p.Fingerprint)
			wasB := ckf.Bucket(published[p.BucketB]).Contains(p.Fingerprint)
			isB := ckf.Bucket(after[p.BucketB]).Contains(p.Fingerprint)
			if wasA != isA || wasB != isB {
				moved = append(moved, hotBlock{tok: tok, bToA: !wasA && isA && wasB && !isB})
			}
		}
		if len(moved) == 0 {
			moved = all
		}
		hot.Store(&moved)
		gen.Add(1)
		for range queriers {
			<-acks
		}
		seq++
		if out := in.ApplyDelta(f.delta(0, 1, seq-1, seq, batch...)); out.Kind != OutcomeDeltaApplied {
			t.Fatalf("delta %d: %v", seq, out)
		}
		published = after
	}
	done.Store(true)
	wg.Wait()
	if p := firstErr.Load(); p != nil {
		t.Fatal(*p)
	}
	cycles = int(st.Telemetry().UnrotatedCycles)
	if !slices.Equal(f.g.LaneWords(0), st.CopyWords()) {
		t.Fatal("lane words differ from the producer's words")
	}
	for _, tok := range stable {
		if !st.Contains(ckf.CanonicalHash(tok)) {
			t.Fatalf("stable block %#x lost by the producer", tok)
		}
	}
	t.Logf("%d deltas, %d images, %d relocation cycles undone, %d queries, %d lane false negatives, %d B-to-A read straddles",
		seq, images, cycles, queries.Load(), misses.Load(), straddle.Load())
	if n, r := misses.Load(), straddle.Load(); n != 0 || r != 0 {
		t.Fatalf("%d lane-level false negatives for blocks resident before and after every delta (%d more on B-to-A moves, read straddles)", n, r)
	}
}

// hotBlock is a stable block a delta relocates; bToA marks a move from its
// bucket B to its bucket A, the direction a probe (A loaded before B) can
// straddle.
type hotBlock struct {
	tok  uint64
	bToA bool
}
