package workers

import (
	"reflect"
	"slices"
	"testing"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/ckf/producer"
	"pgregory.net/rapid"
)

// model is the naive index the tests compare with: per source, per tier, a map of external id
// to canonical hash (workers §2), and the answers computed from the definitions (workers §5).
type model struct {
	lin map[ckf.SourceKey]*[TierCount]map[ckf.ExternalBlockHash]ckf.CanonicalHash
}

func newModel() *model {
	return &model{lin: map[ckf.SourceKey]*[TierCount]map[ckf.ExternalBlockHash]ckf.CanonicalHash{}}
}

// canonOf is what the source maps ext to on any tier.
func (m *model) canonOf(src ckf.SourceKey, ext ckf.ExternalBlockHash) (ckf.CanonicalHash, bool) {
	tiers := m.lin[src]
	if tiers == nil {
		return 0, false
	}
	for _, l := range tiers {
		if c, ok := l[ext]; ok {
			return c, true
		}
	}
	return 0, false
}

func (m *model) apply(ev producer.RouterEvent) bool {
	if ev.Residency == producer.ResidencyCacheOwner || !ev.Residency.Known() || int(ev.StorageTier) >= TierCount {
		return false
	}
	src, t := ev.Source(), ev.StorageTier
	switch ev.Event.Kind {
	case producer.KvEventStored:
		d := ev.Event.Stored
		var prev ckf.CanonicalHash
		have := false
		if d.HasParent {
			c, ok := m.canonOf(src, d.ParentHash)
			if !ok {
				return false
			}
			prev, have = c, true
		} else if d.HasStartPosition && d.StartPosition != 0 {
			return false
		}
		type pair struct {
			e ckf.ExternalBlockHash
			c ckf.CanonicalHash
		}
		var ps []pair
		seen := map[ckf.ExternalBlockHash]ckf.CanonicalHash{}
		for _, b := range d.Blocks {
			c := ckf.CanonicalRoot(b.TokensHash)
			if have {
				c = ckf.CanonicalChild(prev, b.TokensHash)
			}
			prev, have = c, true
			if old, ok := m.canonOf(src, b.BlockHash); ok && old != c {
				return false
			}
			if old, ok := seen[b.BlockHash]; ok && old != c {
				return false
			}
			seen[b.BlockHash] = c
			ps = append(ps, pair{b.BlockHash, c})
		}
		if len(ps) == 0 {
			return true
		}
		if m.lin[src] == nil {
			m.lin[src] = &[TierCount]map[ckf.ExternalBlockHash]ckf.CanonicalHash{}
		}
		tiers := m.lin[src]
		if tiers[t] == nil {
			tiers[t] = map[ckf.ExternalBlockHash]ckf.CanonicalHash{}
		}
		for _, p := range ps {
			tiers[t][p.e] = p.c
		}
	case producer.KvEventRemoved:
		if tiers := m.lin[src]; tiers != nil {
			for _, id := range ev.Event.Removed {
				delete(tiers[t], id)
			}
			m.dropIfEmpty(src)
		}
	case producer.KvEventCleared:
		delete(m.lin, src)
	default:
		return false
	}
	return true
}

func (m *model) dropIfEmpty(src ckf.SourceKey) {
	for _, l := range m.lin[src] {
		if len(l) > 0 {
			return
		}
	}
	delete(m.lin, src)
}

func (m *model) removeWorker(w ckf.WorkerID) {
	for k := range m.lin {
		if k.Worker == w {
			delete(m.lin, k)
		}
	}
}

func (m *model) holds(src ckf.SourceKey, t int, c ckf.CanonicalHash) bool {
	for _, v := range m.lin[src][t] {
		if v == c {
			return true
		}
	}
	return false
}

// match is workers §5 by its definition: per source, the device run from position 0, then each
// lower tier's run from where the previous one ended.
func (m *model) match(q []ckf.CanonicalHash) []Match {
	var out []Match
	for src := range m.lin {
		var runs [TierCount]uint32
		pos := 0
		for t := range TierCount {
			start := pos
			for pos < len(q) && m.holds(src, t, q[pos]) {
				pos++
			}
			runs[t] = uint32(pos - start)
		}
		mt := Match{Source: src, Device: runs[0], HostPinned: runs[1], Disk: runs[2], External: runs[3]}
		if mt.Total() > 0 {
			out = append(out, mt)
		}
	}
	slices.SortFunc(out, compareMatches)
	return out
}

// eventGen draws events over a small universe so that they collide: 3 workers × 2 ranks, 4
// tiers, chains over 4 token hashes, external ids derived from the canonical (as engines do)
// or, now and then, arbitrary ones.
type eventGen struct {
	chains     [][]ckf.LocalBlockHash
	deviceOnly bool // every event on the device tier (Match's matchGroups path)
}

func (g *eventGen) draw(t *rapid.T, label string) producer.RouterEvent {
	w := ckf.WorkerID(rapid.IntRange(1, 3).Draw(t, label+"w"))
	r := ckf.DpRank(rapid.IntRange(0, 1).Draw(t, label+"r"))
	tier := producer.StorageTierDevice
	if !g.deviceOnly {
		tier = producer.StorageTier(rapid.IntRange(0, 3).Draw(t, label+"t"))
	}
	ev := producer.RouterEvent{WorkerID: w, StorageTier: tier}
	ev.Event.DpRank = r
	if rapid.IntRange(0, 30).Draw(t, label+"res") == 0 {
		ev.Residency = producer.ResidencyCacheOwner
	}
	chain := g.chains[rapid.IntRange(0, len(g.chains)-1).Draw(t, label+"c")]
	canon := ckf.SequenceHashes(localsU64(chain))
	ext := func(i int) ckf.ExternalBlockHash {
		if rapid.IntRange(0, 20).Draw(t, label+"odd") == 0 {
			return ckf.ExternalBlockHash(rapid.IntRange(1, 6).Draw(t, label+"x"))
		}
		return ckf.ExternalBlockHash(canon[i] | 1)
	}
	switch k := rapid.IntRange(0, 9).Draw(t, label+"k"); {
	case k < 6:
		lo := rapid.IntRange(0, len(chain)-1).Draw(t, label+"lo")
		hi := rapid.IntRange(lo, len(chain)).Draw(t, label+"hi")
		ev.Event.Kind = producer.KvEventStored
		if lo > 0 {
			ev.Event.Stored.HasParent, ev.Event.Stored.ParentHash = true, ext(lo-1)
		}
		for i := lo; i < hi; i++ {
			ev.Event.Stored.Blocks = append(ev.Event.Stored.Blocks, producer.StoredBlock{BlockHash: ext(i), TokensHash: chain[i]})
		}
	case k < 9:
		ev.Event.Kind = producer.KvEventRemoved
		n := rapid.IntRange(0, 3).Draw(t, label+"n")
		for range n {
			ev.Event.Removed = append(ev.Event.Removed, ext(rapid.IntRange(0, len(chain)-1).Draw(t, label+"i")))
		}
	default:
		ev.Event.Kind = producer.KvEventCleared
	}
	return ev
}

func localsU64(l []ckf.LocalBlockHash) []uint64 {
	out := make([]uint64, len(l))
	for i, x := range l {
		out[i] = uint64(x)
	}
	return out
}

func canonicals(l []ckf.LocalBlockHash) []ckf.CanonicalHash {
	s := ckf.SequenceHashes(localsU64(l))
	out := make([]ckf.CanonicalHash, len(s))
	for i, x := range s {
		out[i] = ckf.CanonicalHash(x)
	}
	return out
}

// checkInvariants compares every structural fact of Index with the model's.
func checkInvariants(t interface{ Fatalf(string, ...any) }, ix *Index, m *model) {
	if len(ix.ids) != len(m.lin) {
		t.Fatalf("sources: index %d, model %d", len(ix.ids), len(m.lin))
	}
	if len(ix.order) != len(ix.ids) {
		t.Fatalf("order lists %d sources, ids %d", len(ix.order), len(ix.ids))
	}
	for j, i := range ix.order {
		if ix.ids[ix.keys[i]] != i || (j > 0 && ix.keys[ix.order[j-1]].Compare(ix.keys[i]) >= 0) {
			t.Fatalf("order %v is not the live sources in key order", ix.order)
		}
	}
	var held [TierCount]uint64
	for src, tiers := range m.lin {
		for tier, l := range tiers {
			set := map[ckf.CanonicalHash]bool{}
			for _, c := range l {
				set[c] = true
				if !ix.Holds(src, producer.StorageTier(tier), c) {
					t.Fatalf("%v should hold %#x on tier %d", src, uint64(c), tier)
				}
			}
			held[tier] += uint64(len(set))
			if got := ix.srcs[ix.ids[src]].held[tier]; got != uint64(len(set)) {
				t.Fatalf("%v held[%d] = %d, model %d", src, tier, got, len(set))
			}
		}
	}
	st := ix.Stats()
	if st.Memberships != held {
		t.Fatalf("memberships %v, model %v", st.Memberships, held)
	}
	checkRows(t, ix, m)
	refs := map[uint32]uint32{}
	for tier := 1; tier < TierCount; tier++ {
		for _, v := range ix.tiers[tier].all() {
			if v == 0 {
				t.Fatalf("a zero holder value in tier %d", tier)
			}
			if !isSingle(v) {
				refs[v]++
			}
		}
	}
	if ix.tiers[producer.StorageTierDevice].Len() != 0 {
		t.Fatalf("the device tier's map has entries: its holder values are the slab's")
	}
	for _, b := range ix.slab.all() {
		if b.val != 0 && !isSingle(b.val) {
			refs[b.val]++
		}
	}
	if len(refs) != ix.sets.live() {
		t.Fatalf("%d sets referenced, %d live", len(refs), ix.sets.live())
	}
	for id, n := range refs {
		if ix.sets.sets[id].refs != n {
			t.Fatalf("set %d: refs %d, referenced %d times", id, ix.sets.sets[id].refs, n)
		}
	}
	checkSlab(t, ix)
}

// checkRows: every source's rows (Index.AppendLineage, workers §2.2) are the model's lineage,
// one row per external id with the tiers that hold it, in ascending id; LineageSize counts them.
func checkRows(t interface{ Fatalf(string, ...any) }, ix *Index, m *model) {
	total := 0
	var got []LineageRow
	for src, tiers := range m.lin {
		want := map[ckf.ExternalBlockHash]LineageRow{}
		for tier, l := range tiers {
			for ext, c := range l {
				r := want[ext]
				r.ID, r.Canonical, r.Tiers = ext, c, r.Tiers|1<<tier
				want[ext] = r
			}
		}
		got = ix.AppendLineage(append(got[:0], LineageRow{ID: 1}), src) // appends after what dst holds
		if got[0] != (LineageRow{ID: 1}) || len(got)-1 != len(want) {
			t.Fatalf("%v: rows %+v, model %+v", src, got, want)
		}
		for k, r := range got[1:] {
			if want[r.ID] != r || (k > 0 && got[k].ID >= r.ID) {
				t.Fatalf("%v: rows %+v, model %+v", src, got[1:], want)
			}
		}
		total += len(want)
	}
	if s, r := ix.LineageSize(); s != len(m.lin) || r != total {
		t.Fatalf("LineageSize %d sources, %d rows; model %d, %d", s, r, len(m.lin), total)
	}
}

// rowReader is what both an Index and a LineageSnapshot give: sources and their rows.
type rowReader interface {
	Sources() []ckf.SourceKey
	AppendLineage([]LineageRow, ckf.SourceKey) []LineageRow
	LineageSize() (int, int)
}

// restoreRows returns a new index restored from ix's rows (workers §2.2), as a replica restores
// a checkpoint.
func restoreRows(t interface{ Fatalf(string, ...any) }, ix rowReader) *Index {
	rx := New()
	var rows []LineageRow
	for _, src := range ix.Sources() {
		rows = ix.AppendLineage(rows[:0], src)
		if err := rx.RestoreLineage(src, rows); err != nil {
			t.Fatalf("restore: %v", err)
		}
	}
	return rx
}

// allRows returns every source's rows, in source order.
func allRows(ix rowReader) map[ckf.SourceKey][]LineageRow {
	out := map[ckf.SourceKey][]LineageRow{}
	for _, src := range ix.Sources() {
		out[src] = ix.AppendLineage(nil, src)
	}
	return out
}

// checkSlab checks the slab's invariants (slab): each canonical at most once; a block that is
// not its run's head the child of the block before it; the head map exactly the heads; every
// run's last block held; the counters; free ranges unused. And the places that name blocks: every
// lineage entry's position holds its canonical, every canonical of a lower tier's map is in the
// slab, and each block's device holders are exactly the sources whose lineage maps an id to it on
// the device tier.
func checkSlab(t interface{ Fatalf(string, ...any) }, ix *Index) {
	sl := &ix.slab
	at := map[ckf.CanonicalHash]uint32{}
	held, blocks, heads := 0, 0, 0
	runs := map[uint32]bool{}
	for pos, b := range sl.all() {
		if p, ok := at[b.canon]; ok {
			t.Fatalf("canonical %#x at positions %d and %d", uint64(b.canon), p, pos)
		}
		at[b.canon] = pos
		blocks++
		if b.val != 0 {
			held++
		}
		if int(b.id()) > len(sl.runs) {
			t.Fatalf("position %d: run %d of %d", pos, b.id(), len(sl.runs))
		}
		r := sl.runs[b.id()-1]
		if pos < r.start || pos >= r.start+r.n || r.n > 1<<r.class {
			t.Fatalf("position %d outside its run %+v", pos, r)
		}
		runs[b.id()] = true
		if pos == r.start {
			heads++
			if got := sl.head(b.canon); got != pos {
				t.Fatalf("head %#x at %d, the head map says %d", uint64(b.canon), pos, got)
			}
		} else if want := ckf.CanonicalChild(sl.at(pos-1).canon, b.local); b.canon != want {
			t.Fatalf("position %d: canonical %#x, not the child %#x of the block before", pos, uint64(b.canon), uint64(want))
		}
		if pos == r.start+r.n-1 && b.val == 0 && b.run&branchBit == 0 && !heldLower(&ix.tiers, b.canon) {
			t.Fatalf("position %d ends run %+v and nobody holds it", pos, r)
		}
		if (b.run&branchBit != 0) != (sl.branches[pos] != 0) {
			t.Fatalf("position %d: mark %v, %d branches", pos, b.run&branchBit != 0, sl.branches[pos])
		}
	}
	branches, orphans := map[uint32]uint32{}, 0
	for id := range sl.runs {
		r := sl.runs[id]
		if r.n == 0 {
			continue
		}
		h := sl.at(r.start)
		if r.orphan {
			orphans++
		}
		if r.parent != noPos {
			branches[r.parent]++
			pb := sl.at(r.parent)
			if pb.run == 0 || r.orphan || h.canon != ckf.CanonicalChild(pb.canon, h.local) {
				t.Fatalf("run %+v: head %#x is not a child of its parent %#x", r, uint64(h.canon), uint64(pb.canon))
			}
		}
	}
	if orphans != sl.orphans || len(branches) != len(sl.branches) {
		t.Fatalf("orphans %d, branches %v; counted %d, %v", sl.orphans, sl.branches, orphans, branches)
	}
	for pos, n := range branches {
		if sl.branches[pos] != n {
			t.Fatalf("branches %v; counted %v", sl.branches, branches)
		}
	}
	if heads != sl.heads.Len() || heads != len(runs) {
		t.Fatalf("%d heads, %d runs in use, the head map %d", heads, len(runs), sl.heads.Len())
	}
	if held != sl.held || blocks != sl.blocks {
		t.Fatalf("held %d, blocks %d; counted %d, %d", sl.held, sl.blocks, held, blocks)
	}
	for c, l := range sl.free {
		for _, start := range l {
			for p := start; p < start+1<<c; p++ {
				if sl.at(p).run != 0 {
					t.Fatalf("free range %d of class %d has position %d in use", start, c, p)
				}
			}
		}
	}
	for tier := 1; tier < TierCount; tier++ {
		for c := range ix.tiers[tier].all() {
			if _, ok := at[c]; !ok {
				t.Fatalf("tier %d holds %#x, which the slab does not have", tier, uint64(c))
			}
		}
	}
	devHolders := map[uint32]map[uint32]bool{} // position → sources mapping an id there on the device
	for i := range ix.srcs {
		lin := ix.srcs[i].lin
		if lin == nil {
			continue
		}
		for id, e := range lin.all() {
			pos := e.position()
			if pos >= sl.next || sl.at(pos).run == 0 {
				t.Fatalf("source %d maps %#x to position %d, not in use", i, uint64(id), pos)
			}
			for tier := 1; tier < TierCount; tier++ {
				if e.tiers&(1<<tier) != 0 && !ix.sets.has(ix.tiers[tier].get(uint64(sl.at(pos).canon)), uint32(i), ix.keys) {
					t.Fatalf("source %d maps %#x to %#x on tier %d, which the tier's map does not say", i, uint64(id), uint64(sl.at(pos).canon), tier)
				}
			}
			if e.tiers&(1<<producer.StorageTierDevice) != 0 {
				if devHolders[pos] == nil {
					devHolders[pos] = map[uint32]bool{}
				}
				devHolders[pos][uint32(i)] = true
			}
		}
	}
	for pos, b := range sl.all() {
		var buf [1]uint32
		mem := ix.sets.members(b.val, &buf)
		if len(mem) != len(devHolders[pos]) {
			t.Fatalf("position %d: holders %v, lineages %v", pos, mem, devHolders[pos])
		}
		for _, i := range mem {
			if !devHolders[pos][i] {
				t.Fatalf("position %d: holders %v, lineages %v", pos, mem, devHolders[pos])
			}
		}
	}
}

// TestIndexMatchesModel: random event sequences over a small universe (collisions, duplicates,
// unknown removals, remaps, cache-owner events, clears, worker removals) leave the index with
// the model's memberships, and every query (each chain's every prefix) gets the model's answer.
func TestIndexMatchesModel(t *testing.T) {
	t.Run("all-tiers", func(t *testing.T) { checkAgainstModel(t, false) })
	t.Run("device-only", func(t *testing.T) { checkAgainstModel(t, true) })
}

func checkAgainstModel(t *testing.T, deviceOnly bool) {
	rapid.Check(t, func(t *rapid.T) {
		g := &eventGen{deviceOnly: deviceOnly}
		base := []ckf.LocalBlockHash{11, 12, 13, 14, 15, 16}
		// A chain longer than a memo run (runBlocks), on base's first blocks: stores of it
		// write two runs, and its summaries meet base's.
		long := slices.Clone(base[:3])
		for i := range 34 {
			long = append(long, ckf.LocalBlockHash(50+i))
		}
		g.chains = [][]ckf.LocalBlockHash{base, {11, 12, 23, 24}, {31, 32, 33}, {11, 12, 13, 44, 45}, long}
		ix, m := New(), newModel()
		var r, slots Result
		// From step restoreAt on, rx is an index restored from ix's rows (workers §2.2) that
		// applies the same events: a checkpoint plus the tail must equal the whole history.
		var rx *Index
		var snap *LineageSnapshot // taken at restoreAt, and rx restored from it
		var snapRows map[ckf.SourceKey][]LineageRow
		steps := rapid.IntRange(1, 60).Draw(t, "steps")
		restoreAt := rapid.IntRange(0, steps).Draw(t, "restoreAt")
		for s := range steps {
			if s == restoreAt {
				snap, snapRows = ix.SnapshotLineage(), allRows(ix)
				if got := allRows(snap); !reflect.DeepEqual(got, snapRows) {
					t.Fatalf("step %d: snapshot rows %v, index rows %v", s, got, snapRows)
				}
				if a, b := snap.LineageSize(); a != len(snapRows) || b != sumRows(snapRows) {
					t.Fatalf("step %d: snapshot LineageSize %d, %d", s, a, b)
				}
				rx = restoreRows(t, snap)
				checkInvariants(t, rx, m)
			}
			if rapid.IntRange(0, 25).Draw(t, "rw") == 0 {
				w := ckf.WorkerID(rapid.IntRange(1, 4).Draw(t, "rww"))
				n := ix.RemoveWorker(w)
				m.removeWorker(w)
				if rx != nil && rx.RemoveWorker(w) != n {
					t.Fatalf("step %d: RemoveWorker(%d) dropped %d sources, the restored index another number", s, w, n)
				}
			} else {
				ev := g.draw(t, "")
				err := ix.Apply(ev)
				ok := m.apply(ev)
				if ok == (err != nil) && ev.Residency != producer.ResidencyCacheOwner {
					t.Fatalf("step %d: index error %v, model accepted %v (%+v)", s, err, ok, ev)
				}
				if rx != nil {
					if rerr := rx.Apply(ev); (rerr == nil) != (err == nil) {
						t.Fatalf("step %d: index error %v, restored index error %v (%+v)", s, err, rerr, ev)
					}
				}
			}
			checkInvariants(t, ix, m)
			if rx != nil {
				checkInvariants(t, rx, m)
			}
			for _, ch := range g.chains {
				q := canonicals(ch)
				for n := 1; n <= len(q); n++ {
					ix.Match(q[:n], Options{}, &r)
					want := m.match(q[:n])
					if !slices.Equal(r.Matches, want) {
						t.Fatalf("step %d, query %v[:%d]: index %+v, model %+v", s, ch, n, r.Matches, want)
					}
					if rx != nil {
						if rx.MatchLocal(ch[:n], Options{}, &r, nil); !slices.Equal(r.Matches, want) {
							t.Fatalf("step %d, query %v[:%d]: restored index %+v, model %+v", s, ch, n, r.Matches, want)
						}
					}
					checkGroupsEqualSlots(t, ix, ch[:n], q[:n], drawOptions(t), &r, &slots)
				}
			}
		}
		// The snapshot shares buckets the index copies before writing (workers §2.2): the events
		// after it left it as it was.
		if snap != nil && !reflect.DeepEqual(allRows(snap), snapRows) {
			t.Fatalf("the snapshot's rows changed with the index: %v, taken as %v", allRows(snap), snapRows)
		}
	})
}

// sumRows is the number of rows in rows.
func sumRows(rows map[ckf.SourceKey][]LineageRow) int {
	n := 0
	for _, r := range rows {
		n += len(r)
	}
	return n
}

// drawOptions draws query options over the model's universe of sources.
func drawOptions(t *rapid.T) Options {
	var opt Options
	opt.TopK = rapid.IntRange(0, 3).Draw(t, "topk")
	opt.Frequencies = rapid.Bool().Draw(t, "freq")
	for range rapid.IntRange(0, 2).Draw(t, "nsrc") {
		opt.Sources = append(opt.Sources, ckf.SourceKey{Worker: ckf.WorkerID(rapid.IntRange(1, 3).Draw(t, "fw")), Rank: ckf.DpRank(rapid.IntRange(0, 1).Draw(t, "fr"))})
	}
	return opt
}

// checkGroupsEqualSlots: Match (which answers a device-only index from the walk's groups,
// matchGroups) and matchSlots (one slot per source, then collect) give the same answer under
// the same options, whichever path Match took.
//
// MatchLocal on the prompt's local hashes (the walk by local hash, or the chain read from the
// slab) gives that answer too, and the canonical chain.
func checkGroupsEqualSlots(t *rapid.T, ix *Index, local []ckf.LocalBlockHash, q []ckf.CanonicalHash, opt Options, r, slots *Result) {
	slots.Matches, slots.Frequencies = slots.Matches[:0], slots.Frequencies[:0]
	ix.matchSlots(q, opt, slots)
	ix.Match(q, opt, r)
	if !slices.Equal(r.Matches, slots.Matches) || !slices.Equal(r.Frequencies, slots.Frequencies) {
		t.Fatalf("query %v %+v: Match %+v %v, matchSlots %+v %v", q, opt, r.Matches, r.Frequencies, slots.Matches, slots.Frequencies)
	}
	chain := []ckf.CanonicalHash{99} // stale content and a short capacity: MatchLocal replaces both
	ix.MatchLocal(local, opt, r, &chain)
	if !slices.Equal(chain, q) {
		t.Fatalf("MatchLocal(%v) chain %v, want %v", local, chain, q)
	}
	if !slices.Equal(r.Matches, slots.Matches) || !slices.Equal(r.Frequencies, slots.Frequencies) {
		t.Fatalf("query %v %+v: MatchLocal %+v %v, matchSlots %+v %v", q, opt, r.Matches, r.Frequencies, slots.Matches, slots.Frequencies)
	}
	ix.MatchLocal(local, opt, r, nil) // without the chain: the canonicals under spans are not read
	if !slices.Equal(r.Matches, slots.Matches) || !slices.Equal(r.Frequencies, slots.Frequencies) {
		t.Fatalf("query %v %+v: MatchLocal without a chain %+v %v, matchSlots %+v %v", q, opt, r.Matches, r.Frequencies, slots.Matches, slots.Frequencies)
	}
}
