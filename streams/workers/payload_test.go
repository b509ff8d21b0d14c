package workers

import (
	"errors"
	"reflect"
	"testing"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/ckf/producer"
	ckfworkers "github.com/ckf-stream/ckf-stream/ckf/workers"
)

// TestLineageMirrorsIndex: the lineage the read model keeps beside the index, written to a
// checkpoint payload, read back and restored into an empty index, gives an index that holds
// exactly what the live one holds (every membership, per tier) and, fed the rest of the trace,
// answers every query as the index that never stopped: checkpoint plus tail equals the whole
// history.
func TestLineageMirrorsIndex(t *testing.T) {
	t.Parallel()
	var held [ckfworkers.TierCount]uint64 // over the seeds: the traces exercise every tier
	for seed := range uint64(20) {
		g := newTraceGen(seed)
		live, lin := ckfworkers.New(), newLineage()
		apply := func(ix *ckfworkers.Index, l *lineage, ev producer.RouterEvent) {
			if ix.Apply(ev) == nil && l != nil {
				l.apply(&ev)
			}
		}
		for _, ev := range g.trace(400) {
			apply(live, lin, ev)
		}
		for tier, n := range live.Stats().Memberships {
			held[tier] += n
		}
		payload := lin.appendPayload(nil, 0xdc)
		back, err := decodePayload(payload, 0xdc)
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		if !reflect.DeepEqual(back.srcs, lin.srcs) || back.rows != lin.rows {
			t.Fatalf("seed %d: payload round trip changed the lineage", seed)
		}
		restoredIx := ckfworkers.New()
		if err := back.restoreInto(restoredIx); err != nil {
			t.Fatalf("seed %d: restore: %v", seed, err)
		}
		if a, b := live.Stats().Memberships, restoredIx.Stats().Memberships; a != b {
			t.Fatalf("seed %d: memberships per tier: live %v, restored %v", seed, a, b)
		}
		if a, b := live.Sources(), restoredIx.Sources(); !reflect.DeepEqual(a, b) {
			t.Fatalf("seed %d: sources: live %v, restored %v", seed, a, b)
		}
		for src, m := range lin.srcs {
			for _, e := range m {
				for tier := range ckfworkers.TierCount {
					if e.tiers&(1<<tier) != 0 && !live.Holds(src, producer.StorageTier(tier), e.canon) {
						t.Fatalf("seed %d: the lineage says %v holds %#x on tier %d, the index does not", seed, src, uint64(e.canon), tier)
					}
				}
			}
		}
		qs := g.queries()
		if a, b := answers(live.Match, qs), answers(restoredIx.Match, qs); !reflect.DeepEqual(a, b) {
			t.Fatalf("seed %d: answers differ after restore", seed)
		}
		for _, ev := range g.trace(400) { // the tail: both go on
			apply(live, lin, ev)
			apply(restoredIx, nil, ev)
		}
		if a, b := answers(live.Match, qs), answers(restoredIx.Match, qs); !reflect.DeepEqual(a, b) {
			t.Fatalf("seed %d: answers differ after the tail", seed)
		}
		if a, b := live.Stats().Memberships, restoredIx.Stats().Memberships; a != b {
			t.Fatalf("seed %d: memberships after the tail: live %v, restored %v", seed, a, b)
		}
	}
	for tier, n := range held {
		if n == 0 {
			t.Errorf("no trace left a membership on tier %d at its checkpoint", tier)
		}
	}
}

// TestPayloadRefusesDamage: every single-byte change, a truncation and another DC's payload are
// refused with ErrPayload, never restored.
func TestPayloadRefusesDamage(t *testing.T) {
	t.Parallel()
	g := newTraceGen(1)
	ix, lin := ckfworkers.New(), newLineage()
	for _, ev := range g.trace(200) {
		if ix.Apply(ev) == nil {
			lin.apply(&ev)
		}
	}
	p := lin.appendPayload(nil, 0xdc)
	for i := range p {
		b := append([]byte(nil), p...)
		b[i] ^= 0x40
		if _, err := decodePayload(b, 0xdc); !errors.Is(err, ErrPayload) {
			t.Fatalf("byte %d changed: %v, want ErrPayload", i, err)
		}
	}
	if _, err := decodePayload(p[:len(p)-1], 0xdc); !errors.Is(err, ErrPayload) {
		t.Fatalf("truncated: %v", err)
	}
	if _, err := decodePayload(p, ckf.DcID(0xdd)); !errors.Is(err, ErrPayload) {
		t.Fatalf("another DC: %v", err)
	}
}

// FuzzDecodePayload: no input panics; whatever decodes re-encodes to the same bytes.
func FuzzDecodePayload(f *testing.F) {
	g := newTraceGen(3)
	ix, lin := ckfworkers.New(), newLineage()
	for _, ev := range g.trace(50) {
		if ix.Apply(ev) == nil {
			lin.apply(&ev)
		}
	}
	f.Add(lin.appendPayload(nil, 1))
	f.Add(newLineage().appendPayload(nil, 1))
	f.Fuzz(func(t *testing.T, b []byte) {
		l, err := decodePayload(b, 1)
		if err != nil {
			return
		}
		if got := l.appendPayload(nil, 1); string(got) != string(b) {
			t.Fatalf("decoded payload re-encodes differently")
		}
	})
}
