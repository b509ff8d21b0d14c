package workers

import (
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
				p := []prepared{{ext: id, canon: canon}}
				remap := l.gainTier(p, bit)
				switch {
				case ok && w.canonical() != canon:
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
					w = newLineageEntry(canon)
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
					e.tiers &^= low
					w.tiers &^= low
					want[k] = w
				}
			case 3: // a removal's pass over the id, once or twice, on one tier
				bit := uint8(1) << rapid.IntRange(0, TierCount-1).Draw(t, "tier")
				ids := []ckf.ExternalBlockHash{id}
				if rapid.Bool().Draw(t, "twice") {
					ids = append(ids, id)
				}
				p, unknown := l.takeTier(ids, bit, nil)
				w, ok := want[k]
				if !ok || w.tiers&bit == 0 {
					if len(p) != 0 || unknown != len(ids) {
						t.Fatalf("step %d: takeTier(%#x) of an unheld tier: %v, %d unknown", step, k, p, unknown)
					}
					continue
				}
				if len(p) != 1 || p[0].ext != id || p[0].canon != w.canonical() || unknown != len(ids)-1 {
					t.Fatalf("step %d: takeTier(%#x) = %v, %d unknown; want its canonical %#x", step, k, p, unknown, uint64(w.canonical()))
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
			if e := l.lookup(ckf.ExternalBlockHash(k)); e == nil || *e != w {
				t.Fatalf("lookup(%#x) = %v, want %+v", k, e, w)
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
		if none.find(1) != -1 || none.lookup(1) != nil || none.Bytes() != 0 {
			t.Fatalf("a nil table is not empty")
		}
	})
}

// checkLineageBuckets fails unless every live id sits in one of its two buckets, which is
// where find looks, and each bucket's used mask names exactly its ways with tiers.
func checkLineageBuckets(t interface{ Fatalf(string, ...any) }, l *lineageTable) {
	n := uint64(len(l.buckets))
	for b := range l.buckets {
		for w := range l.buckets[b].slots {
			s := &l.buckets[b].slots[w]
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
		c := lineageSlot{lineageEntry: newLineageEntry(ckf.CanonicalHash(k))}
		c.tiers = 1
		c.key = [8]byte{byte(k), byte(k >> 8)}
		l.place(&c) // an id whose two buckets are one full bucket does not fit: skipped
	}
	before := l.buckets[0].slots
	before2 := l.buckets[1].slots
	extra := lineageSlot{lineageEntry: newLineageEntry(999)}
	extra.tiers = 1
	extra.key = [8]byte{0xEE}
	if s, moved := l.place(&extra); s != nil || moved {
		t.Fatalf("place into a full table returned a slot")
	}
	if l.buckets[0].slots != before || l.buckets[1].slots != before2 || l.live != 2*lineageWays {
		t.Fatalf("a failed walk changed the table")
	}
	checkLineageBuckets(t, &l)
	b1, b2 := buckets2(0xEE, l.seed, uint64(len(l.buckets)))
	e := l.insertFull(0xEE, b1, b2)
	*e = newLineageEntry(999)
	e.tiers = 1
	if len(l.buckets) <= 2 || l.Len() != 2*lineageWays+1 || l.lookup(0xEE) == nil {
		t.Fatalf("insertFull did not grow and insert: %d buckets, %d ids", len(l.buckets), l.Len())
	}
	checkLineageBuckets(t, &l)
}
