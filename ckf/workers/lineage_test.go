package workers

import (
	"maps"
	"math"
	"testing"

	"pgregory.net/rapid"

	"github.com/ckf-stream/ckf-stream/ckf"
)

// TestLineageTableMatchesMap: random stores (gainTier, remaps included), tier removals (takeTier,
// and find with deleteAt) and deletions (ids from a small range, 0 included, so that they
// collide, runs form and the table grows and shrinks) leave a
// lineageTable with a Go map's contents (by find, lookup and all, present and absent ids), and
// every id in one of its two buckets (checkLineageBuckets).
func TestLineageTableMatchesMap(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var l lineageTable
		want := map[uint64]lineageEntry{}
		keyRange := rapid.SampledFrom([]uint64{4, 64, 2000}).Draw(t, "range")
		steps := rapid.IntRange(1, 3000).Draw(t, "steps")
		for step := range steps {
			k := rapid.Uint64Range(0, keyRange).Draw(t, "k") * 0x5851F42D4C957F2D // spread, 0 stays 0
			id := ckf.ExternalBlockHash(k)
			switch rapid.IntRange(0, 4).Draw(t, "op") {
			case 0, 1: // a store: a new id gets a canonical and a tier, a present one another tier
				bit := uint8(1) << rapid.IntRange(0, TierCount-1).Draw(t, "tier")
				canon := ckf.CanonicalHash(k ^ 0xABCD)
				if rapid.IntRange(0, 7).Draw(t, "remap") == 0 {
					canon++ // another canonical: a remap when the id is there
				}
				w, ok := want[k]
				pos := uint32(canon) // the canonical's slab position: another canonical, another one
				p := []prepared{{ext: id, canon: canon, pos: pos}}
				remap := l.gainTier(p, bit)
				switch {
				case ok && w.position() != pos:
					if remap != 0 {
						t.Fatalf("step %d: gainTier(%#x) remapped the id without saying so", step, k)
					}
					continue
				case remap >= 0:
					t.Fatalf("step %d: gainTier(%#x) reports a remap at %d", step, k, remap)
				case !ok:
					if p[0].did != didCreate {
						t.Fatalf("step %d: gainTier(%#x) of a new id did %d", step, k, p[0].did)
					}
					w = newLineageEntry(pos)
				case w.tiers&bit != 0:
					if p[0].did != didNothing {
						t.Fatalf("step %d: gainTier(%#x) of a held tier did %d", step, k, p[0].did)
					}
				default:
					if p[0].did != didAddTier {
						t.Fatalf("step %d: gainTier(%#x) of another tier did %d", step, k, p[0].did)
					}
				}
				w.tiers |= bit
				want[k] = w
			case 2: // take one tier off, deleting the id when none is left (the removal path)
				at := l.find(id)
				w, ok := want[k]
				if (at >= 0) != ok {
					t.Fatalf("step %d: find(%#x) = %d, map has it: %v", step, k, at, ok)
				}
				if at < 0 {
					continue
				}
				e := l.at(at)
				low := e.tiers & -e.tiers
				if e.tiers == low {
					l.deleteAt(at)
					delete(want, k)
				} else {
					l.buckets[at>>2].tiers[at&3] &^= low
					w.tiers &^= low
					want[k] = w
				}
			case 3: // a removal's pass over the id, once or twice, on one tier
				bit := uint8(1) << rapid.IntRange(0, TierCount-1).Draw(t, "tier")
				ids := []ckf.ExternalBlockHash{id}
				if rapid.Bool().Draw(t, "twice") {
					ids = append(ids, id)
				}
				p, unknown := l.takeTier(ids, bit, nil, nil)
				w, ok := want[k]
				if !ok || w.tiers&bit == 0 {
					if len(p) != 0 || unknown != len(ids) {
						t.Fatalf("step %d: takeTier(%#x) of an unheld tier: %v, %d unknown", step, k, p, unknown)
					}
					continue
				}
				if len(p) != 1 || p[0].ext != id || p[0].pos != w.position() || unknown != len(ids)-1 {
					t.Fatalf("step %d: takeTier(%#x) = %v, %d unknown; want its position %d", step, k, p, unknown, w.position())
				}
				if w.tiers &^= bit; w.tiers == 0 {
					delete(want, k)
				} else {
					want[k] = w
				}
			default:
				l.delete(id)
				delete(want, k)
			}
		}
		if l.Len() != len(want) {
			t.Fatalf("Len %d, map %d", l.Len(), len(want))
		}
		for k, w := range want {
			if e, ok := l.lookup(ckf.ExternalBlockHash(k)); !ok || e != w {
				t.Fatalf("lookup(%#x) = %+v, %v; want %+v", k, e, ok, w)
			}
		}
		for x := range keyRange + 1 { // absent ids too
			k := x * 0x5851F42D4C957F2D
			if _, ok := want[k]; !ok && l.find(ckf.ExternalBlockHash(k)) >= 0 {
				t.Fatalf("%#x is absent, find says %d", k, l.find(ckf.ExternalBlockHash(k)))
			}
		}
		n := 0
		for id, e := range l.all() {
			n++
			if want[uint64(id)] != e {
				t.Fatalf("all yields %#x=%+v, map has %+v", uint64(id), e, want[uint64(id)])
			}
		}
		if n != len(want) {
			t.Fatalf("all yields %d entries, map has %d", n, len(want))
		}
		checkLineageBuckets(t, &l)
		var none *lineageTable
		if _, ok := none.lookup(1); none.find(1) != -1 || ok || none.Bytes() != 0 {
			t.Fatalf("a nil table is not empty")
		}
	})
}

// TestLineageStoreRollsBack: a store's pass (gainTier) over random blocks, ids repeated within
// the store and remapped now and then, into a table already holding some of them (ids from a
// small range; in a dense table, most buckets full, so that insertions go through insertFull),
// either
// leaves the table as a map applying the blocks in order would, each block's did saying what
// was done, or, when a block remaps an id, reports one and, rolled back, leaves the table as it
// was.
func TestLineageStoreRollsBack(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var l lineageTable
		posOf := func(k uint64) uint32 { return uint32(k ^ 0x5EED) } // the slab position of k's block
		keyOf := func(x uint64) uint64 { return x * 0x5851F42D4C957F2D }
		keyRange := rapid.SampledFrom([]uint64{8, 32, 128}).Draw(t, "range")
		before := map[uint64]lineageEntry{}
		hold := func(k uint64) {
			bit := uint8(1) << rapid.IntRange(0, TierCount-1).Draw(t, "held tier")
			l.gainTier([]prepared{{ext: ckf.ExternalBlockHash(k), pos: posOf(k)}}, bit)
			e := before[k]
			if e.tiers == 0 {
				e = newLineageEntry(posOf(k))
			}
			e.tiers |= bit
			before[k] = e
		}
		for range rapid.IntRange(0, int(keyRange)).Draw(t, "held") {
			hold(keyOf(rapid.Uint64Range(0, keyRange).Draw(t, "held id")))
		}
		if rapid.Bool().Draw(t, "dense") && len(l.buckets) > 0 {
			// Past the growth point, filled on to nine tenths, so that most buckets are full: the
			// store's new ids then mostly go through insertFull.
			for x := uint64(0); l.live*10 < 9*lineageWays*len(l.buckets) && x < 8*keyRange; x++ {
				l.growAt = lineageWays * len(l.buckets) // resize sets it back
				hold(keyOf(x))
			}
			l.growAt = math.MaxInt // the store's pass does not grow first
		}
		bit := uint8(1) << rapid.IntRange(0, TierCount-1).Draw(t, "tier")
		p := make([]prepared, rapid.IntRange(1, 48).Draw(t, "blocks"))
		storeRange := rapid.SampledFrom([]uint64{4, keyRange, 4 * keyRange}).Draw(t, "store range")
		want := maps.Clone(before)
		wantDid := make([]uint8, len(p))
		remap := false
		for k := range p {
			x := keyOf(rapid.Uint64Range(0, storeRange).Draw(t, "id"))
			c := posOf(x)
			if rapid.IntRange(0, 15).Draw(t, "remap") == 0 {
				c++ // another block: a remap when the id is there
			}
			p[k] = prepared{ext: ckf.ExternalBlockHash(x), pos: c}
			e, ok := want[x]
			switch {
			case ok && e.position() != c:
				remap = true
			case !ok:
				e = newLineageEntry(c)
				e.tiers, wantDid[k] = bit, didCreate
			case e.tiers&bit == 0:
				e.tiers |= bit
				wantDid[k] = didAddTier
			}
			want[x] = e
		}
		got := l.gainTier(p, bit)
		if (got >= 0) != remap {
			t.Fatalf("gainTier = %d, a remap in the store: %v", got, remap)
		}
		if remap {
			l.rollback(p, bit)
			want = before
		} else {
			for k := range p {
				if p[k].did != wantDid[k] {
					t.Fatalf("block %d (%#x): did %d, want %d", k, uint64(p[k].ext), p[k].did, wantDid[k])
				}
			}
		}
		if l.Len() != len(want) {
			t.Fatalf("Len %d, want %d", l.Len(), len(want))
		}
		for id, e := range l.all() {
			if want[uint64(id)] != e {
				t.Fatalf("%#x = %+v, want %+v", uint64(id), e, want[uint64(id)])
			}
		}
		checkLineageBuckets(t, &l)
	})
}

// checkLineageBuckets fails unless every live id sits in one of its two buckets, which is
// where find looks, and each bucket's used mask names exactly its ways with tiers.
func checkLineageBuckets(t interface{ Fatalf(string, ...any) }, l *lineageTable) {
	n := uint64(len(l.buckets))
	for b := range l.buckets {
		for w := range lineageWays {
			s := l.buckets[b].slot(w)
			if s.tiers == 0 && s.key != 0 {
				t.Fatalf("bucket %d way %d: free, key %#x", b, w, s.key)
			}
			if used := l.buckets[b].used&(1<<w) != 0; used != (s.tiers != 0) {
				t.Fatalf("bucket %d way %d: used %v, tiers %#x", b, w, used, s.tiers)
			}
			if s.tiers == 0 {
				continue
			}
			if b1, b2 := buckets2(s.k(), l.seed, n); uint64(b) != b1 && uint64(b) != b2 {
				t.Fatalf("id %#x in bucket %d, its buckets are %d and %d", s.k(), b, b1, b2)
			}
		}
	}
}

// TestLineageFullWalkUndoes: an insertion into a table whose every slot is taken finds no free
// way by moving one entry (moveOne) nor by its random walk; the walk is undone, so the table
// holds exactly what it held, each id in one of its buckets, and insertFull (gainTier's insertion
// when both buckets are full) then grows the table and inserts.
func TestLineageFullWalkUndoes(t *testing.T) {
	var l lineageTable
	l.resize(2)
	for k := uint64(1); l.live < 2*lineageWays; k++ {
		if k > 1000 {
			t.Fatalf("%d of %d slots taken after 1000 ids", l.live, 2*lineageWays)
		}
		c := lineageSlot{lineageEntry: newLineageEntry(uint32(k))}
		c.tiers = 1
		c.key = k
		l.place(&c) // an id whose two buckets are one full bucket does not fit: skipped
	}
	before := l.buckets[0]
	before2 := l.buckets[1]
	extra := lineageSlot{lineageEntry: newLineageEntry(999)}
	extra.tiers = 1
	extra.key = 0xEE
	if s, moved := l.place(&extra); s >= 0 || moved {
		t.Fatalf("place into a full table returned a slot")
	}
	if l.buckets[0] != before || l.buckets[1] != before2 || l.live != 2*lineageWays {
		t.Fatalf("a failed walk changed the table")
	}
	checkLineageBuckets(t, &l)
	b1, b2 := buckets2(0xEE, l.seed, uint64(len(l.buckets)))
	i := l.insertFull(0xEE, b1, b2)
	l.buckets[i>>2].pos[i&3], l.buckets[i>>2].tiers[i&3] = 999, 1
	if _, ok := l.lookup(0xEE); len(l.buckets) <= 2 || l.Len() != 2*lineageWays+1 || !ok {
		t.Fatalf("insertFull did not grow and insert: %d buckets, %d ids", len(l.buckets), l.Len())
	}
	checkLineageBuckets(t, &l)
}
