package producer

import (
	"fmt"
	"slices"
	"testing"

	"github.com/ckf-stream/ckf-stream/ckf"
	"pgregory.net/rapid"
)

// Property tests (pgregory.net/rapid) and the shared random-stream driver
// also used by the fuzz targets (producer_fuzz_test.go).
//
// Properties, checked after every step of a random event stream over
// several sources (stores with and without parents, aliases, remaps,
// removals, clears, non-primary and unknown-residency events, rank
// replacements, rank/worker removal, flushes, barrier snapshots,
// materialization toggles) on a deliberately small table so capacity
// omissions happen:
//
//  1. ownership invariants (checkInvariants);
//  2. barrier snapshot + every published batch reconstructs the producer's
//     words exactly; every batch is non-empty with unique in-range buckets
//     and keeps, at every prefix, each fingerprint present before and
//     after it (prefixSafe, the publication order);
//  3. every resident canonical is found by Contains (part of 1);
//  4. removing everything drains the table to zero words.

// prodChooser returns an int in [0, n).
type prodChooser func(n int) int

// streamDriver applies random operations and keeps a replica.
type streamDriver struct {
	s       *DcState
	replica []uint64
	synced  bool // replica is valid (false while materialization is off)
	sources []ckf.SourceKey
	steps   int
	// published records every batch handed to publish and every barrier
	// tail, nil included, in order (compared by the checkpoint property).
	published [][]ckf.BucketImage
}

func newStreamDriver(tb prodFataler, cfg ckf.CkfConfig) *streamDriver {
	s := mustDcState(tb, cfg)
	d := &streamDriver{s: s, sources: []ckf.SourceKey{pSrc(1, 0), pSrc(1, 1), pSrc(2, 0), pSrc(3, 7)}}
	d.resync()
	return d
}

// resync takes a barrier snapshot: the tail belongs to the old stream, so
// apply it first, then the replica must equal the words.
func (d *streamDriver) resync() error {
	tail, words, err := d.s.BarrierSnapshot()
	if err != nil {
		return err
	}
	d.published = append(d.published, tail)
	if d.synced {
		after, err := prefixSafe(d.s.Addressing(), d.replica, tail)
		if err != nil {
			return err
		}
		if d.replica = after; !slices.Equal(d.replica, words) {
			return fmt.Errorf("replica + tail != barrier words")
		}
	}
	d.replica, d.synced = words, d.s.PublicationMaterializationEnabled()
	return nil
}

func (d *streamDriver) publish(images []ckf.BucketImage) error {
	d.published = append(d.published, images)
	if err := prodCheckBatch(d.s.BucketCount(), images); err != nil {
		return err
	}
	if d.synced {
		after, err := prefixSafe(d.s.Addressing(), d.replica, images)
		if err != nil {
			return err
		}
		d.replica = after
	}
	return nil
}

func (d *streamDriver) extID(c prodChooser) uint64 {
	// Small id space so removals, aliases and remaps collide often.
	return uint64(c(24))
}

func (d *streamDriver) tok(c prodChooser) uint64 { return uint64(c(12)) * 0x9E3779B97F4A7C15 }

func (d *streamDriver) randomStore(c prodChooser, k ckf.SourceKey) StoreData {
	var sd StoreData
	if lin := d.s.lineage[k]; lin.Len() > 0 && c(2) == 0 {
		// pick a parent from the lineage (deterministically by rank)
		exts := slices.Sorted(lin.Keys())
		sd.HasParent, sd.ParentHash = true, exts[c(len(exts))]
	} else if c(8) == 0 {
		sd.HasParent, sd.ParentHash = true, ckf.ExternalBlockHash(d.extID(c)) // maybe unknown
	}
	if c(10) == 0 {
		sd.HasStartPosition, sd.StartPosition = true, uint32(c(3))
	}
	n := c(5)
	for i := 0; i < n; i++ {
		sd.Blocks = append(sd.Blocks, StoredBlock{BlockHash: ckf.ExternalBlockHash(d.extID(c)), TokensHash: ckf.LocalBlockHash(d.tok(c))})
	}
	return sd
}

func (d *streamDriver) event(c prodChooser, k ckf.SourceKey) RouterEvent {
	ev := RouterEvent{WorkerID: k.Worker, Event: KvCacheEvent{DpRank: k.Rank}}
	switch c(10) {
	case 0, 1, 2, 3, 4:
		ev.Event.Kind, ev.Event.Stored = KvEventStored, d.randomStore(c, k)
	case 5, 6, 7:
		ev.Event.Kind = KvEventRemoved
		for i := c(4); i >= 0; i-- {
			ev.Event.Removed = append(ev.Event.Removed, ckf.ExternalBlockHash(d.extID(c)))
		}
	case 8:
		ev.Event.Kind = KvEventCleared
	default:
		ev.Event.Kind = KvEventKind(c(5)) // includes undefined kinds
	}
	switch c(12) {
	case 0:
		ev.StorageTier = StorageTier(1 + c(4))
	case 1:
		ev.Residency = ResidencyDomain(c(5))
	}
	return ev
}

// step performs one random operation and checks every invariant.
func (d *streamDriver) step(c prodChooser) error {
	d.steps++
	k := d.sources[c(len(d.sources))]
	switch op := c(40); {
	case op < 32:
		out := d.s.ApplyEvent(d.event(c, k))
		if out.Publication != nil && !out.PublicationBoundary {
			return fmt.Errorf("publication without boundary")
		}
		if err := d.publish(out.Publication); err != nil {
			return err
		}
	case op < 34:
		r := NewRankReplacement()
		for i := c(4); i > 0; i-- {
			_ = r.PushEvent(d.event(c, k)) // failed pushes are atomic
		}
		repl := map[ckf.SourceKey]*RankReplacement{k: r}
		if c(3) == 0 {
			k2 := d.sources[c(len(d.sources))]
			if k2 != k {
				repl[k2] = NewRankReplacement()
			}
		}
		if c(6) == 0 {
			failSite := reserveSite(1 + c(4))
			d.s.failReserve = func(x reserveSite) bool { return x == failSite }
		}
		before := d.s.CopyWords()
		batch, err := d.s.ReplaceRanks(repl)
		d.s.failReserve = nil
		if err != nil {
			if !slices.Equal(before, d.s.CopyWords()) {
				return fmt.Errorf("failed replacement changed words")
			}
		} else if err := d.publish(batch); err != nil {
			return err
		}
	case op < 35:
		batch, err := d.s.RemoveRank(k)
		if err != nil {
			return err
		}
		if err := d.publish(batch); err != nil {
			return err
		}
	case op < 36:
		batch, err := d.s.RemoveWorker(k.Worker)
		if err != nil {
			return err
		}
		if err := d.publish(batch); err != nil {
			return err
		}
	case op < 37:
		if err := d.publish(d.s.Flush()); err != nil {
			return err
		}
	case op < 38:
		if err := d.resync(); err != nil {
			return err
		}
	case op < 39:
		if c(5) == 0 {
			d.s.failReserve = func(x reserveSite) bool { return true }
			if _, _, err := d.s.BarrierSnapshot(); err == nil {
				return fmt.Errorf("snapshot reservation failure not reported")
			}
			d.s.failReserve = nil
		}
	default:
		on := c(3) != 0
		if on && !d.s.PublicationMaterializationEnabled() {
			d.s.SetPublicationMaterializationEnabled(true)
			d.synced = false
			if err := d.resync(); err != nil { // a new subscriber starts from a snapshot
				return err
			}
		} else if !on {
			d.s.SetPublicationMaterializationEnabled(false)
			d.synced = false
		}
	}
	if err := checkInvariants(d.s); err != nil {
		return err
	}
	if d.synced && !d.s.HasPendingPublication() && !slices.Equal(d.replica, d.s.filter.words) {
		return fmt.Errorf("replica diverged with nothing pending (step %d)", d.steps)
	}
	return nil
}

// finish checks reconstruction after a flush, then removes everything and
// checks the table drains to zero.
func (d *streamDriver) finish() error {
	if err := d.publish(d.s.Flush()); err != nil {
		return err
	}
	if d.synced && !slices.Equal(d.replica, d.s.filter.words) {
		return fmt.Errorf("snapshot + batches != producer words")
	}
	for _, k := range d.s.sortedSources() {
		batch, err := d.s.RemoveRank(k)
		if err != nil {
			return err
		}
		if err := d.publish(batch); err != nil {
			return err
		}
	}
	for b, w := range d.s.filter.words {
		if w != 0 {
			return fmt.Errorf("bucket %d = %#x after removing everything", b, w)
		}
	}
	if d.s.owners.Len() != 0 || len(d.s.lineage) != 0 || d.s.residentCount != 0 {
		return fmt.Errorf("state not empty after removing everything")
	}
	if d.synced && !slices.Equal(d.replica, d.s.filter.words) {
		return fmt.Errorf("replica not zero after remove-all")
	}
	return checkInvariants(d.s)
}

func rapidChooser(t *rapid.T) prodChooser {
	return func(n int) int {
		if n <= 1 {
			return 0
		}
		return rapid.IntRange(0, n-1).Draw(t, "c")
	}
}

func TestPropertyRandomStreamsKeepInvariantsAndReconstruct(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		expected := uint64(rapid.SampledFrom([]int{1, 8, 24, 64}).Draw(t, "expected"))
		cfg := cfgN(expected, uint64(rapid.IntRange(1, 4).Draw(t, "every")))
		cfg.MaxKicks = uint64(rapid.SampledFrom([]int{1, 4, 500}).Draw(t, "kicks"))
		d := newStreamDriver(t, cfg)
		c := rapidChooser(t)
		steps := rapid.IntRange(1, 300).Draw(t, "steps")
		for i := 0; i < steps; i++ {
			if err := d.step(c); err != nil {
				t.Fatalf("step %d: %v", i, err)
			}
		}
		if err := d.finish(); err != nil {
			t.Fatal(err)
		}
	})
}

func TestPropertyNoFalseNegatives(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := mustDcState(t, cfgN(uint64(rapid.IntRange(16, 512).Draw(t, "n")), 1))
		k := pSrc(1, 0)
		hs := rapid.SliceOfNDistinct(rapid.Uint64(), 1, 600, func(x uint64) uint64 { return x }).Draw(t, "hashes")
		for i, h := range hs {
			s.ApplyEvent(storeEv(k, pBlk(uint64(i), h)))
		}
		for _, h := range hs {
			if _, r := s.Owners(ckf.CanonicalHash(h)); r && !s.Contains(ckf.CanonicalHash(h)) {
				t.Fatalf("resident %#x not found", h)
			}
		}
		if err := checkInvariants(s); err != nil {
			t.Fatal(err)
		}
		for i := range hs {
			s.ApplyEvent(removeEv(k, uint64(i)))
		}
		for _, w := range s.filter.words {
			if w != 0 {
				t.Fatal("remove-all left a non-zero word")
			}
		}
	})
}
