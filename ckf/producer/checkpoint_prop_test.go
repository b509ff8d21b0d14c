package producer

import (
	"errors"
	"slices"
	"testing"

	"github.com/ckf-stream/ckf-stream/ckf"
	"pgregory.net/rapid"
)

// choice is one draw of a prodChooser: the bound asked for and the value
// returned.
type choice struct{ n, v int }

// TestPropertyCheckpointRestoreContinuesIdentically runs a random stream
// (the streamDriver of producer_prop_test.go: stores, aliases, removals,
// clears, replacements, rank/worker removal, snapshots, materialization
// toggles, reservation failures), checkpoints at a random publication
// boundary, restores, and then drives the original and the restored state
// in lockstep with the same choices. After every step the two states are
// equal field by field (words, RNG, lineage, owners, counts, telemetry,
// window) and have published the same batches; finally both remove
// everything and agree again.
func TestPropertyCheckpointRestoreContinuesIdentically(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		expected := uint64(rapid.SampledFrom([]int{1, 8, 24, 64}).Draw(t, "expected"))
		cfg := cfgN(expected, uint64(rapid.IntRange(1, 4).Draw(t, "every")))
		cfg.MaxKicks = uint64(rapid.SampledFrom([]int{1, 4, 500}).Draw(t, "kicks"))
		c := rapidChooser(t)
		a := newStreamDriver(t, cfg)
		for i := rapid.IntRange(0, 200).Draw(t, "before"); i > 0; i-- {
			if err := a.step(c); err != nil {
				t.Fatalf("before the checkpoint: %v", err)
			}
		}
		// The relay checkpoints right after a drain: force one if buckets
		// are dirty (the checkpoint is refused until then).
		if len(a.s.win.dirty) != 0 {
			if _, err := a.s.AppendCheckpoint(nil); !errors.Is(err, ErrCheckpointWindowOpen) {
				t.Fatalf("checkpoint with dirty buckets: %v", err)
			}
			if err := a.publish(a.s.Flush()); err != nil {
				t.Fatal(err)
			}
		}
		restored := mustRestore(t, cfg, mustCheckpoint(t, a.s))
		if err := diffDcStates(a.s, restored); err != nil {
			t.Fatalf("right after restore: %v", err)
		}
		b := &streamDriver{s: restored, replica: slices.Clone(a.replica), synced: a.synced, sources: a.sources, steps: a.steps}
		mark := len(a.published)

		var tape []choice
		for i := rapid.IntRange(1, 200).Draw(t, "after"); i > 0; i-- {
			tape = tape[:0]
			record := func(n int) int {
				v := c(n)
				tape = append(tape, choice{n, v})
				return v
			}
			if err := a.step(record); err != nil {
				t.Fatalf("original, step %d: %v", a.steps, err)
			}
			pos, diverged := 0, false
			replay := func(n int) int {
				if pos >= len(tape) || tape[pos].n != n {
					diverged = true
					return 0
				}
				pos++
				return tape[pos-1].v
			}
			if err := b.step(replay); err != nil {
				t.Fatalf("restored, step %d: %v", b.steps, err)
			}
			if diverged || pos != len(tape) {
				t.Fatalf("step %d: the restored state asked for different choices", a.steps)
			}
			if err := diffDcStates(a.s, b.s); err != nil {
				t.Fatalf("step %d: %v", a.steps, err)
			}
			if !slices.EqualFunc(a.published[mark:], b.published, slices.Equal[[]ckf.BucketImage]) {
				t.Fatalf("step %d: publications differ", a.steps)
			}
		}
		if err := a.finish(); err != nil {
			t.Fatal(err)
		}
		if err := b.finish(); err != nil {
			t.Fatal(err)
		}
		if err := diffDcStates(a.s, b.s); err != nil {
			t.Fatalf("after removing everything: %v", err)
		}
		if !slices.EqualFunc(a.published[mark:], b.published, slices.Equal[[]ckf.BucketImage]) {
			t.Fatal("final publications differ")
		}
	})
}
