package workers

import (
	"encoding/binary"
	"errors"
	"reflect"
	"slices"
	"testing"

	"github.com/ckf-stream/ckf-stream/ckf"
	ckfworkers "github.com/ckf-stream/ckf-stream/ckf/workers"
	"github.com/zeebo/xxh3"
)

// restorePayload decodes b (written for dc) and restores it into a new index.
func restorePayload(t *testing.T, b []byte, dc ckf.DcID) *ckfworkers.Index {
	t.Helper()
	p, err := decodePayload(b, dc)
	if err != nil {
		t.Fatal(err)
	}
	ix := ckfworkers.New()
	if err := p.restoreInto(ix); err != nil {
		t.Fatalf("restore: %v", err)
	}
	return ix
}

// TestPayloadRestoresIndex: the index's rows written to a checkpoint payload, read back and
// restored into an empty index, give an index that holds exactly what the live one holds (the
// same rows, so the same payload bytes, and every membership per tier) and, fed the rest of the
// trace, answers every query as the index that never stopped: checkpoint plus tail equals the
// whole history. The payload is read from a snapshot taken through workers.Shared, as the
// replica's loop takes it.
func TestPayloadRestoresIndex(t *testing.T) {
	t.Parallel()
	var held [ckfworkers.TierCount]uint64 // over the seeds: the traces exercise every tier
	for seed := range uint64(20) {
		g := newTraceGen(seed)
		live := ckfworkers.New()
		for _, ev := range g.trace(400) {
			_ = live.Apply(ev) // the trace's refusals are part of it
		}
		for tier, n := range live.Stats().Memberships {
			held[tier] += n
		}
		payload, rows := appendPayload(nil, 0xdc, ckfworkers.NewShared(live).SnapshotLineage())
		if _, want := live.LineageSize(); rows != want {
			t.Fatalf("seed %d: %d rows written, the index has %d", seed, rows, want)
		}
		p, err := decodePayload(payload, 0xdc)
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		if s, r := live.LineageSize(); p.sources != s || p.rows != r {
			t.Fatalf("seed %d: payload of %d sources, %d rows; the index has %d, %d", seed, p.sources, p.rows, s, r)
		}
		restored := restorePayload(t, payload, 0xdc)
		if again, _ := appendPayload(nil, 0xdc, restored); string(again) != string(payload) {
			t.Fatalf("seed %d: the restored index writes another payload", seed)
		}
		if a, b := live.Stats().Memberships, restored.Stats().Memberships; a != b {
			t.Fatalf("seed %d: memberships per tier: live %v, restored %v", seed, a, b)
		}
		if a, b := live.Sources(), restored.Sources(); !reflect.DeepEqual(a, b) {
			t.Fatalf("seed %d: sources: live %v, restored %v", seed, a, b)
		}
		qs := g.queries()
		if a, b := answers(live.Match, qs), answers(restored.Match, qs); !reflect.DeepEqual(a, b) {
			t.Fatalf("seed %d: answers differ after restore", seed)
		}
		for _, ev := range g.trace(400) { // the tail: both go on
			if a, b := live.Apply(ev), restored.Apply(ev); (a == nil) != (b == nil) {
				t.Fatalf("seed %d: live %v, restored %v for %+v", seed, a, b, ev)
			}
		}
		if a, b := answers(live.Match, qs), answers(restored.Match, qs); !reflect.DeepEqual(a, b) {
			t.Fatalf("seed %d: answers differ after the tail", seed)
		}
		if a, b := live.Stats().Memberships, restored.Stats().Memberships; a != b {
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
	ix := ckfworkers.New()
	for _, ev := range g.trace(200) {
		_ = ix.Apply(ev)
	}
	p, _ := appendPayload(nil, 0xdc, ix)
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

// FuzzDecodePayload: no input panics; whatever decodes restores into an empty index without an
// error, and that index writes the same bytes back. Each input is tried as it is and with its
// last eight bytes replaced by the checksum of the rest, so that the checks past the checksum
// meet mutated structure, not only a wrong checksum.
func FuzzDecodePayload(f *testing.F) {
	g := newTraceGen(3)
	ix := ckfworkers.New()
	for _, ev := range g.trace(50) {
		_ = ix.Apply(ev)
	}
	seed, _ := appendPayload(nil, 1, ix)
	empty, _ := appendPayload(nil, 1, ckfworkers.New())
	f.Add(seed)
	f.Add(empty)
	f.Fuzz(func(t *testing.T, b []byte) {
		try := func(b []byte) {
			p, err := decodePayload(b, 1)
			if err != nil {
				return
			}
			ix := ckfworkers.New()
			if err := p.restoreInto(ix); err != nil {
				t.Fatalf("a payload that decoded does not restore: %v", err)
			}
			if got, rows := appendPayload(nil, 1, ix); string(got) != string(b) || rows != p.rows {
				t.Fatalf("the restored payload re-encodes differently (%d rows, decoded %d)", rows, p.rows)
			}
		}
		try(b)
		if len(b) >= 8 {
			body := b[:len(b)-8]
			try(binary.LittleEndian.AppendUint64(slices.Clip(body), xxh3.Hash(body)))
		}
	})
}

// TestPayloadFormatIsStable: the payload's bytes follow the version 1 format written out here by
// hand, field by field, so that replicas of two releases can read each other's checkpoints (they
// share the DC's checkpoint partition during a rolling upgrade).
func TestPayloadFormatIsStable(t *testing.T) {
	t.Parallel()
	ix := ckfworkers.New()
	a := ckf.SourceKey{Worker: 9, Rank: 1}
	b := ckf.SourceKey{Worker: 3, Rank: 0}
	if err := ix.RestoreLineage(a, []ckfworkers.LineageRow{{ID: 5, Canonical: 50, Tiers: 1}, {ID: 2, Canonical: 20, Tiers: 0b0110}}); err != nil {
		t.Fatal(err)
	}
	if err := ix.RestoreLineage(b, []ckfworkers.LineageRow{{ID: 1 << 63, Canonical: 7, Tiers: 0b1000}}); err != nil {
		t.Fatal(err)
	}
	le64 := func(dst []byte, v uint64) []byte { return binary.LittleEndian.AppendUint64(dst, v) }
	want := []byte("CKFWLIN1")
	want = le64(want, 0xdc)                          // dc
	want = le64(want, 2)                             // sources
	want = le64(want, 3)                             // worker 3
	want = binary.LittleEndian.AppendUint32(want, 0) // rank 0
	want = le64(want, 1)                             // rows
	want = append(le64(le64(want, 1<<63), 7), 0b1000)
	want = le64(want, 9)
	want = binary.LittleEndian.AppendUint32(want, 1)
	want = le64(want, 2)
	want = append(le64(le64(want, 2), 20), 0b0110) // ascending external id: 2 before 5
	want = append(le64(le64(want, 5), 50), 1)
	want = le64(want, xxh3.Hash(want))
	got, rows := appendPayload(nil, 0xdc, ix)
	if string(got) != string(want) || rows != 3 {
		t.Fatalf("payload (%d rows)\n got %x\nwant %x", rows, got, want)
	}
}
