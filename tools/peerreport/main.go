// Command peerreport writes docs/perf/peer-report.md from the raw outputs of
// make bench-peer: this module's Go peer benchmarks (bench/peer) and the Rust
// program on the published dynamo-kv-router crate (bench/peer-dynamo), run in
// alternating rounds.
//
//	go -C tools build -o ../bin/ ./peerreport   # tools/ is a module of its own
//	bin/peerreport -dir docs/perf/peer [-dir docs/perf/peer-amd-2vcpu ...] -o docs/perf/peer-report.md
//
// Each -dir is one machine's run (bench/peer-rounds.sh writes it): machine.txt
// ("key: value" lines: label, cpu, cores, date, toolchains, load averages),
// rust-<round>.jsonl and go-<round>.txt. For each machine and row the report
// shows the median of each side over the rounds, the Go/Rust ratio of the
// medians (below 1: Go is faster), the range of the per-round ratios and the
// row's target; with more than one machine it starts with a table of every
// row's ratio on each machine. A row missing on either side, or a fixture
// checksum that differs between the sides, is listed at the top of the report
// and makes the command exit with status 1 after writing it.
package main

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

func main() {
	var dirs []string
	flag.Func("dir", "directory of one machine's raw round outputs and machine.txt (repeat for each machine; default docs/perf/peer)", func(d string) error {
		dirs = append(dirs, d)
		return nil
	})
	out := flag.String("o", "docs/perf/peer-report.md", "report to write")
	flag.Parse()
	if len(dirs) == 0 {
		dirs = []string{"docs/perf/peer"}
	}
	if err := run(dirs, *out); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

var roundFile = regexp.MustCompile(`^(rust|go)-(\d+)\.(jsonl|txt)$`)

// machineRun is one machine's rounds: its directory, its machine.txt, the
// summary of its samples and the problems summarize found.
type machineRun struct {
	Dir      string
	Machine  []machineLine
	Sum      summary
	Problems error
	Files    []string
}

// Label names the machine in the report: machine.txt's label, else its cpu
// (with the family and model of its cpu-id line, since under a hypervisor one
// model name covers several generations) and core count, else the directory.
func (m machineRun) Label() string {
	get := func(key string) string {
		for _, l := range m.Machine {
			if l.Key == key {
				return l.Value
			}
		}
		return ""
	}
	if l := get("label"); l != "" {
		return l
	}
	cpu, cores := get("cpu"), get("cores")
	if id, _, _ := strings.Cut(get("cpu-id"), ","); cpu != "" && id != "" {
		cpu += " (" + id + ")"
	}
	if n, _, ok := strings.Cut(cores, " "); ok {
		cores = n
	}
	switch {
	case cpu != "" && cores != "":
		return cpu + ", " + cores + " cores"
	case cpu != "":
		return cpu
	}
	return filepath.Base(m.Dir)
}

func run(dirs []string, out string) error {
	var runs []machineRun
	var problems []error
	for _, dir := range dirs {
		m, err := readRounds(dir)
		if err != nil {
			return err
		}
		if m.Problems != nil {
			problems = append(problems, fmt.Errorf("%s: %w", dir, m.Problems))
		}
		runs = append(runs, m)
	}
	var buf bytes.Buffer
	writeReport(&buf, runs)
	if err := os.WriteFile(out, buf.Bytes(), 0o644); err != nil {
		return err
	}
	return errors.Join(problems...)
}

// readRounds reads one machine's directory.
func readRounds(dir string) (machineRun, error) {
	m := machineRun{Dir: dir}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return m, err
	}
	var samples []sample
	rounds := map[int]bool{}
	for _, e := range entries {
		sm := roundFile.FindStringSubmatch(e.Name())
		if sm == nil {
			continue
		}
		round, _ := strconv.Atoi(sm[2])
		rounds[round] = true
		f, err := os.Open(filepath.Join(dir, e.Name()))
		if err != nil {
			return m, err
		}
		var ss []sample
		if sm[1] == sideRust {
			ss, err = parseRust(f, round)
		} else {
			ss, err = parseGo(f, round)
		}
		f.Close()
		if err != nil {
			return m, fmt.Errorf("%s: %w", filepath.Join(dir, e.Name()), err)
		}
		samples = append(samples, ss...)
		m.Files = append(m.Files, filepath.Join(dir, e.Name()))
	}
	if len(samples) == 0 {
		return m, fmt.Errorf("%w: no round outputs in %s", errInput, dir)
	}
	if m.Machine, err = readMachine(filepath.Join(dir, "machine.txt")); err != nil {
		return m, err
	}
	m.Sum, m.Problems = summarize(samples, len(rounds))
	return m, nil
}

// machineLine is one "key: value" line of machine.txt, in file order.
type machineLine struct{ Key, Value string }

func readMachine(path string) ([]machineLine, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return parseMachine(f)
}

func parseMachine(r io.Reader) ([]machineLine, error) {
	var out []machineLine
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || strings.TrimSpace(k) == "" {
			continue
		}
		out = append(out, machineLine{Key: strings.TrimSpace(k), Value: strings.TrimSpace(v)})
	}
	return out, sc.Err()
}

func writeReport(w io.Writer, runs []machineRun) {
	fmt.Fprintln(w, "# Against the reference implementation: dynamo-kv-router 1.6.1")
	fmt.Fprintln(w)
	dirs := make([]string, len(runs))
	for i, m := range runs {
		dirs[i] = "`" + m.Dir + "/`"
	}
	fmt.Fprintf(w, "Written by `make bench-peer` (`tools/peerreport`) from the raw outputs in %s; do not edit by hand.\n", strings.Join(dirs, " and "))
	fmt.Fprintln(w, "The Go side is `bench/peer` (`BenchmarkPeer*`, this module's public APIs); the Rust side is")
	fmt.Fprintln(w, "`bench/peer-dynamo`, which calls the published crate's public API only (version pinned in its")
	fmt.Fprintln(w, "`Cargo.toml` and `Cargo.lock`). Ratios are Go time / Rust time of the medians over the rounds:")
	fmt.Fprintln(w, "below 1 this module is faster.")
	fmt.Fprintln(w)
	for _, m := range runs {
		if m.Problems != nil {
			fmt.Fprintf(w, "**The run on %s is not comparable as a whole:** %v\n\n", m.Label(), m.Problems)
		}
	}
	if len(runs) > 1 {
		fmt.Fprintln(w, "## Every machine")
		fmt.Fprintln(w)
		writeMachinesTable(w, runs)
		fmt.Fprintln(w)
	}
	for _, m := range runs {
		title := "## Machine and run"
		if len(runs) > 1 {
			title = "## Machine: " + m.Label()
		}
		fmt.Fprintln(w, title)
		fmt.Fprintln(w)
		for _, l := range m.Machine {
			fmt.Fprintf(w, "- %s: %s\n", l.Key, l.Value)
		}
		fmt.Fprintf(w, "- rounds: %d, alternating (Rust, then Go, in each round); each side measures every row for about one second per round\n", m.Sum.Rounds)
		fmt.Fprintln(w, "- load note: the load averages above bracket the run, and the per-round ratio range shows how much one round can move a row")
		fmt.Fprintln(w)
		fmt.Fprintln(w, "### Medians")
		fmt.Fprintln(w)
		writeTable(w, m.Sum)
		fmt.Fprintln(w)
		fmt.Fprintln(w, "### Fixtures")
		fmt.Fprintln(w)
		fmt.Fprintln(w, "Both sides build every fixture from the same SplitMix64 streams and report a checksum of it;")
		fmt.Fprintln(w, "a row is compared only when the checksums agree over both sides and all rounds.")
		fmt.Fprintln(w)
		writeFixtures(w, m.Sum)
		fmt.Fprintln(w)
	}
	fmt.Fprint(w, pairingNotes)
	fmt.Fprintln(w)
	fmt.Fprintln(w, "## Raw outputs")
	fmt.Fprintln(w)
	for _, m := range runs {
		files := slices.Clone(m.Files)
		slices.Sort(files)
		for _, f := range files {
			fmt.Fprintf(w, "- `%s`\n", f)
		}
	}
}

// writeMachinesTable renders one line per row with its ratio on each machine
// and whether every machine meets the target.
func writeMachinesTable(w io.Writer, runs []machineRun) {
	fmt.Fprint(w, "| row | statistic | target |")
	for _, m := range runs {
		fmt.Fprintf(w, " %s |", m.Label())
	}
	fmt.Fprintln(w, " met on every machine |")
	fmt.Fprint(w, "|---|---|---:|")
	for range runs {
		fmt.Fprint(w, "---:|")
	}
	fmt.Fprintln(w, "---|")
	met, asked := 0, 0
	for i, spec := range rows {
		name := "`" + spec.Row + "`"
		if spec.Extra {
			name += " (extra)"
		}
		fmt.Fprintf(w, "| %s | %s | %s |", name, statName(spec.Unit), spec.targetText())
		all := true
		for _, m := range runs {
			r := m.Sum.Rows[i]
			fmt.Fprintf(w, " %s |", formatRatio(r.Ratio))
			all = all && r.Met
		}
		verdict := "no"
		if all {
			verdict = "yes"
		}
		fmt.Fprintf(w, " %s |\n", verdict)
		if !spec.Extra {
			asked++
			if all {
				met++
			}
		}
	}
	fmt.Fprintf(w, "\n%d of %d rows meet their target on every machine (rows marked extra are not counted).\n", met, asked)
}

// pairingNotes is the section on where the two sides cannot do identical
// work and how each row was made fair.
const pairingNotes = `## Where the pairing cannot be equal

Common to all rows: both sides time the same operation on the same fixture; fixture construction,
envelope construction that the crate's types force per call, and untimed clean-up are outside the
timed region on both sides unless a row says otherwise. Go runs each benchmark with the default
` + "`-benchtime=1s`" + ` (its ramp-up warms it); Rust warms each row for 0.1 s and then measures for 1 s.
Go's times include the garbage collector's share of the allocations it makes; Rust's include
` + "`malloc`/`free`" + `. A row's fixture lives only while its row runs on both sides: Rust drops it
at the end of the row's function, Go releases the fixtures a benchmark's rows share and collects
them before the next row (` + "`releaseFixtures`" + `), so no row runs beside the heap of the rows before it.

- ` + "`query128/shared`, `query128/divergent`" + ` — ` + "`GlobalIndexer.FindPrefixMatches`" + ` against
  ` + "`GlobalCkfIndexer::find_prefix_matches`" + `, 16 lanes × 2^20 buckets, one 128-block chain per call,
  cycling through 512 chains per shape. Every query is timed alone (` + "`time.Now`" + ` /
  ` + "`Instant::now`" + `, tens of ns on each side, under 1 % of a query). The crate keeps its addressing
  private, so the Rust program places the fixture's fingerprints with the formula of producer §3
  (through the ` + "`xxhash-rust`" + ` version the crate itself uses) and then checks, with the crate's own
  query, that every shared chain is found at depth 128 in all 16 lanes; the checksums show that both
  tables are equal word for word. Different work per call: the crate allocates two vectors per
  query (the sequence hashes and the probes); this module's query allocates nothing.
- ` + "`snapshot-install`" + ` — per op, assign the next epoch and install 2^20 words into lane 0 of a
  one-lane manifest (the table is 16 lanes wide on both sides). The crate's snapshot carries its
  lease and cannot be re-addressed, so the Rust side moves the words into a new snapshot for each
  epoch (` + "`into_parts`" + `, no copy, untimed); Go builds a small ` + "`ckf.Snapshot`" + ` that points at the
  same words inside the timed loop (nanoseconds against milliseconds).
- ` + "`seqhash-chain`" + ` — the sequence hashes of one 128-block chain into a reused buffer: the crate's
  public chain step ` + "`compute_next_seq_hash`" + ` in a loop against ` + "`ckf.AppendSequenceHashes`" + `. Equal
  work; the chain checksum shows equal hashes. ` + "`seqhash-vec`" + ` (extra) compares the two
  slice-returning functions, ` + "`compute_seq_hash_for_block`" + ` and ` + "`ckf.SequenceHashes`" + `, which both
  allocate their result.
- ` + "`addressing`" + ` — the crate's addressing (fingerprint and bucket pair) is private. Both sides
  measure the nearest public operation, ` + "`DcCkfState::contains`" + ` against ` + "`DcState.Contains`" + `:
  addressing of one canonical hash plus the test of both candidate buckets of an empty 2^12-bucket
  filter (32 KiB, cache-resident), keys 1, 2, 3, …. The row therefore carries two cheap bucket
  loads on top of the addressing on both sides. The crate computes the alternate-bucket delta
  with a second XXH3 call; this module reads a precomputed table — an implementation difference
  the row measures, not a pairing difference.
- ` + "`lookup/2^16/hit`, `lookup/2^16/miss`, `lookup/2^20/hit`, `lookup/2^20/miss`" + ` — the same
  ` + "`contains`" + ` / ` + "`Contains`" + ` on a state of 2^16 or 2^20 buckets filled to 90 % of its slots with one-block
  root stores, cycling through a ring of 65,536 canonical hashes that were stored (hit) or never
  stored (miss). The filters are 512 KiB and 8 MiB, so the two bucket loads are cache or memory
  accesses. The checksum folds the fill, both rings and how many ring entries each side finds,
  so equal checksums also mean equal answers (false positives included). The crate tests bucket B
  only when bucket A misses; this module loads and tests both without a branch (a hit is as likely
  in either bucket).
- ` + "`delta-apply`" + ` — per op, one 23-image delta (distinct random buckets) applied to a ready lane of
  2^20 buckets, cycling through 4,096 image sets. A crate delta's sequence numbers are fixed at
  construction, so the Rust side builds each pass of 4,096 deltas before its timer starts (one
  image-vector copy per delta, untimed); Go reuses its deltas and advances two sequence fields
  per op inside the timed loop. Both validate the images (range, no repeat) and store them one
  by one; Go's stores are ` + "`sync/atomic`" + ` stores, the crate's are Relaxed atomic stores.
- ` + "`producer-store/2^16@90`, `producer-store/2^20@90`" + ` — the exact producer (` + "`DcState.ApplyEvent`" + ` /
  ` + "`DcCkfState::apply_event`" + `) storing one-block root events (worker 1, rank 0, Device tier, Worker
  residency, default config: publication cadence 1, 500 kicks) at 89.6–90 % slot load: each timed
  window stores 1,024 new blocks, then the 1,024 oldest are removed untimed. The crate's
  ` + "`apply_event`" + ` takes the event by value, so each Rust event owns a one-block vector, built
  before the timer and freed inside the call (timed); Go reuses one event value with a one-element
  slice. Different work per call: at cadence 1 every store drains its publication; this module's
  drain orders the changed buckets so that a relocated fingerprint is never missing from both of
  its buckets and undoes relocation cycles (producer §7.6), which the crate does not do (it emits
  first-touch order). Near 90 % load a large share of stores relocate, so this extra work is
  part of the Go time.
- ` + "`producer-store/2^16/0-50`" + ` — the same events into a fresh 2^16-bucket state (built untimed) until
  half of the slots are full (131,072 stores, the same keys every pass); ns per event over whole
  passes. The same per-event differences as above apply.
- ` + "`workers-apply/1M`, `workers-apply/10M`" + ` — the worker stage (issue 39): the index holds 1 M (10 M)
  (block, worker) memberships of 16-block prompts over 64 workers (every fourth prompt held by 4
  workers; local hashes from one SplitMix64 stream, external ids the sequence hashes); each window
  stores the next 256 prompts (timed: store, per block) and removes the oldest 256, leaf first, one
  event per holder (timed: removal, per block). The Rust value is the better of ` + "`RadixTree`" + ` (its
  ` + "`apply_event`" + ` on the bench thread) and ` + "`ConcurrentRadixTreeCompressed`" + ` (events enqueued to its
  own worker loop, then one acknowledged no-op awaited: the loop applies them on one thread); each
  tree's own figures are in the raw output. Rust events own their vectors and are freed inside the
  call; Go reuses the block slices. RSS per membership: the whole process's resident set grown by
  the fill, after a collection that returns free memory to the OS (Go) or ` + "`malloc_trim(0)`" + ` (Rust),
  the better tree; its target is on the Go value alone.
- ` + "`workers-match128/{8,64,512}`" + ` — a 128-block prompt held in full by N workers, every worker's
  answer (no early exit), each query timed alone. Both sides take the prompt's local hashes: Go's
  ` + "`MatchLocal`" + ` follows the local hashes through the stored runs inside the timed call, hashing
  only where the prompt leaves a run (the raw output's
  ` + "`match-p50-ns`" + ` is ` + "`Match`" + ` alone, on precomputed hashes); the crate's trees walk local hashes.
  ` + "`RadixTree::find_matches`" + ` takes its sequence by value, cloned before the timer. The Rust value is
  the tree with the lower p50 (` + "`ConcurrentRadixTreeCompressed`" + ` on this fixture); both trees return a
  hash map of scores, Go a list ordered best first.
`
