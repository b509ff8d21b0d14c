package peer

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/ckf/producer"
	"github.com/ckf-stream/ckf-stream/ckf/workers"
)

// peerDynamo returns the Rust program of bench/peer-dynamo, building it when cargo is there
// ($PEER_RUST names a prebuilt one).
func peerDynamo(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("PEER_RUST"); p != "" {
		return p
	}
	bin, _ := filepath.Abs("../peer-dynamo/target/release/peer-dynamo")
	if _, err := exec.LookPath("cargo"); err != nil {
		if _, statErr := os.Stat(bin); statErr == nil {
			return bin
		}
		t.Skip("TestDifferentialAgainstCrate needs cargo (or $PEER_RUST) to build bench/peer-dynamo; cargo is not in PATH")
	}
	cmd := exec.Command("cargo", "build", "--release", "--locked", "--manifest-path", "../peer-dynamo/Cargo.toml")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("cargo build: %v\n%s", err, out)
	}
	return bin
}

// traceGen writes a trace both sides apply (the format is in bench/peer-dynamo/src/workers.rs)
// and applies it to a workers.Index. Every source's holdings stay closed under prefixes on the
// device tier and removals take a source's leaves on a tier (workers §3.4: the case where the
// crate's trees and this index agree); device stores name a parent only when the source holds
// it on the device tier (the crate's trees look parents up there), lower-tier stores a parent
// the source holds on some tier. External ids are the canonical hashes.
type traceGen struct {
	rng    *rand.Rand
	chains [][]ckf.LocalBlockHash // every prompt, local hashes
	canon  [][]ckf.CanonicalHash
	held   map[heldKey]bool // (source, tier, canonical)
	kids   map[ckf.CanonicalHash][]ckf.CanonicalHash
	ix     *workers.Index
	out    *bufio.Writer
	want   []string // our answer per query, in the Rust program's line format
	counts map[string]int
}

type heldKey struct {
	w    ckf.WorkerID
	r    ckf.DpRank
	tier int
	c    ckf.CanonicalHash
}

func newTraceGen(seed uint64, out *bufio.Writer) *traceGen {
	g := &traceGen{rng: rand.New(rand.NewPCG(seed, 7)), held: map[heldKey]bool{},
		kids: map[ckf.CanonicalHash][]ckf.CanonicalHash{}, ix: workers.New(), out: out, counts: map[string]int{}}
	// Prompt families: a system prompt shared by branches, under three salts (base model, two
	// LoRA adapters), with branches of different lengths.
	for _, lora := range []string{"", "adapter-a", "adapter-b"} {
		salt := ckf.BlockSaltSeed(lora, "")
		for fam := range 3 {
			sys := make([]uint32, 4*6)
			for i := range sys {
				sys[i] = uint32(fam*1000 + i)
			}
			for br := range 4 {
				toks := slices.Clone(sys)
				for i := range 4 * (2 + br) {
					toks = append(toks, uint32(100000+fam*1000+br*100+i))
				}
				local := ckf.TokenBlockHashes(toks, 4, salt)
				g.chains = append(g.chains, local)
				u := make([]uint64, len(local))
				for i, l := range local {
					u[i] = uint64(l)
				}
				seq := ckf.SequenceHashes(u)
				c := make([]ckf.CanonicalHash, len(seq))
				for i, x := range seq {
					c[i] = ckf.CanonicalHash(x)
					if i > 0 && !slices.Contains(g.kids[c[i-1]], c[i]) {
						g.kids[c[i-1]] = append(g.kids[c[i-1]], c[i])
					}
				}
				g.canon = append(g.canon, c)
			}
		}
	}
	return g
}

func (g *traceGen) holdsAnyTier(w ckf.WorkerID, r ckf.DpRank, c ckf.CanonicalHash) bool {
	for t := range 4 {
		if g.held[heldKey{w, r, t, c}] {
			return true
		}
	}
	return false
}

func (g *traceGen) apply(ev producer.RouterEvent) {
	if err := g.ix.Apply(ev); err != nil {
		panic(fmt.Sprintf("the generator made an event the index refuses: %v", err))
	}
}

func (g *traceGen) step() {
	w, r := ckf.WorkerID(g.rng.IntN(6)+1), ckf.DpRank(g.rng.IntN(2))
	ci := g.rng.IntN(len(g.chains))
	chain, canon := g.chains[ci], g.canon[ci]
	switch k := g.rng.IntN(100); {
	case k < 45: // store
		tier := 0
		if g.rng.IntN(3) == 0 {
			tier = 1 + g.rng.IntN(3)
		}
		// Start at the root or right after a block the source holds (on the device tier for
		// a device store).
		lo := 0
		if g.rng.IntN(2) == 0 {
			for i := len(canon) - 1; i >= 0; i-- {
				if (tier == 0 && g.held[heldKey{w, r, 0, canon[i]}]) || (tier > 0 && g.holdsAnyTier(w, r, canon[i])) {
					lo = i + 1
					break
				}
			}
		}
		if lo >= len(canon) {
			lo = g.rng.IntN(len(canon)) // a duplicate store from a held parent or the root
			for lo > 0 && !((tier == 0 && g.held[heldKey{w, r, 0, canon[lo-1]}]) || (tier > 0 && g.holdsAnyTier(w, r, canon[lo-1]))) {
				lo--
			}
		}
		hi := min(len(canon), lo+1+g.rng.IntN(6))
		ev := producer.RouterEvent{WorkerID: w, StorageTier: producer.StorageTier(tier)}
		ev.Event.DpRank, ev.Event.Kind = r, producer.KvEventStored
		line := fmt.Sprintf("S %d %d %d ", w, r, tier)
		if lo > 0 {
			ev.Event.Stored.HasParent, ev.Event.Stored.ParentHash = true, ckf.ExternalBlockHash(canon[lo-1])
			line += fmt.Sprint(uint64(canon[lo-1]))
		} else {
			line += "-"
		}
		for i := lo; i < hi; i++ {
			ev.Event.Stored.Blocks = append(ev.Event.Stored.Blocks, producer.StoredBlock{BlockHash: ckf.ExternalBlockHash(canon[i]), TokensHash: chain[i]})
			line += fmt.Sprintf(" %d:%d", uint64(canon[i]), uint64(chain[i]))
			if g.held[heldKey{w, r, tier, canon[i]}] {
				g.counts["duplicate blocks"]++
			}
			g.held[heldKey{w, r, tier, canon[i]}] = true
		}
		g.counts["stores"]++
		g.apply(ev)
		fmt.Fprintln(g.out, line)
	case k < 80: // remove leaves (and now and then an id the source does not hold)
		tier := 0
		if g.rng.IntN(3) == 0 {
			tier = 1 + g.rng.IntN(3)
		}
		ev := producer.RouterEvent{WorkerID: w, StorageTier: producer.StorageTier(tier)}
		ev.Event.DpRank, ev.Event.Kind = r, producer.KvEventRemoved
		line := fmt.Sprintf("R %d %d %d", w, r, tier)
		for i := len(canon) - 1; i >= 0 && len(ev.Event.Removed) < 1+g.rng.IntN(4); i-- {
			c := canon[i]
			leaf := g.held[heldKey{w, r, tier, c}]
			for _, kid := range g.kids[c] {
				if g.held[heldKey{w, r, tier, kid}] {
					leaf = false
				}
			}
			unknown := !g.held[heldKey{w, r, tier, c}] && g.rng.IntN(8) == 0
			if leaf || unknown {
				ev.Event.Removed = append(ev.Event.Removed, ckf.ExternalBlockHash(c))
				line += fmt.Sprintf(" %d", uint64(c))
				delete(g.held, heldKey{w, r, tier, c})
				if unknown {
					g.counts["unknown removals"]++
				}
			}
		}
		g.counts["removals"]++
		g.apply(ev)
		fmt.Fprintln(g.out, line)
	case k < 84: // clear one rank
		for key := range g.held {
			if key.w == w && key.r == r {
				delete(g.held, key)
			}
		}
		ev := producer.RouterEvent{WorkerID: w}
		ev.Event.DpRank, ev.Event.Kind = r, producer.KvEventCleared
		g.counts["clears"]++
		g.apply(ev)
		fmt.Fprintf(g.out, "C %d %d\n", w, r)
	case k < 86: // remove a worker
		for key := range g.held {
			if key.w == w {
				delete(g.held, key)
			}
		}
		g.counts["worker removals"]++
		g.ix.RemoveWorker(w)
		fmt.Fprintf(g.out, "W %d\n", w)
	default: // query a prefix of a prompt, now and then with a foreign tail
		n := 1 + g.rng.IntN(len(chain))
		q := slices.Clone(chain[:n])
		if g.rng.IntN(4) == 0 {
			q = append(q, ckf.LocalBlockHash(g.rng.Uint64()))
		}
		var res workers.Result
		var buf []ckf.CanonicalHash
		g.ix.MatchLocal(q, workers.Options{}, &res, &buf)
		slices.SortFunc(res.Matches, func(a, b workers.Match) int { return a.Source.Compare(b.Source) })
		ans := fmt.Sprint(len(g.want))
		for _, m := range res.Matches {
			ans += fmt.Sprintf(" %d:%d=%d,%d,%d,%d", m.Source.Worker, m.Source.Rank, m.Device, m.HostPinned, m.Disk, m.External)
			if m.HostPinned+m.Disk+m.External > 0 {
				g.counts["answers with a lower-tier run"]++
			}
		}
		g.want = append(g.want, ans)
		line := "Q"
		for _, l := range q {
			line += fmt.Sprintf(" %d", uint64(l))
		}
		fmt.Fprintln(g.out, line)
	}
}

// TestDifferentialAgainstCrate (workers §9): one generated trace (stores, leaf removals,
// unknown removals, clears, worker removals, two dp ranks, duplicates, three LoRA salts, four
// tiers) into the crate's ConcurrentRadixTreeCompressed and RadixTree with its LowerTierIndexer
// per lower tier (bench/peer-dynamo differential) and into workers.Index; every query's
// answers must be equal.
func TestDifferentialAgainstCrate(t *testing.T) {
	bin := peerDynamo(t)
	path := filepath.Join(t.TempDir(), "trace.txt")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w := bufio.NewWriter(f)
	g := newTraceGen(0x5745524b, w)
	steps := 20000
	if testing.Short() {
		steps = 3000
	}
	for range steps {
		g.step()
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	out, err := exec.Command(bin, "differential", path).Output()
	if err != nil {
		t.Fatalf("peer-dynamo differential: %v", err)
	}
	got := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		side, rest, _ := strings.Cut(line, " ")
		got[side] = append(got[side], rest)
	}
	mismatches := map[string]int{}
	for _, side := range []string{"crtc", "radix"} {
		if len(got[side]) != len(g.want) {
			t.Fatalf("%s answered %d queries, want %d", side, len(got[side]), len(g.want))
		}
		for i, want := range g.want {
			if got[side][i] != want {
				if mismatches[side] < 5 {
					t.Errorf("%s query %s\n  crate: %s\n  ours:  %s", side, strings.Fields(want)[0], got[side][i], want)
				}
				mismatches[side]++
			}
		}
	}
	t.Logf("%d steps, %d queries, %v; mismatches: crtc %d, radix %d", steps, len(g.want), g.counts, mismatches["crtc"], mismatches["radix"])
}
