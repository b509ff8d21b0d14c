package queryapi

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/ckf-stream/ckf-stream/schemas"
)

// TestBinaryReplyRoundTrip: AppendBinaryReply and DecodeBinaryReply agree on every ready mask, and
// the decoder refuses every malformed reply: short, long, wrong version, count against mask,
// incomplete lanes outside the ready ones, a reserved field set.
func TestBinaryReplyRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 4))
	for range 200 {
		ready := uint16(rng.Uint32())
		r := schemas.QueryReply{Status: schemas.QueryOK, ReadyLanes: ready, IncompleteLanes: ready & uint16(rng.Uint32()), QueryBlocks: rng.Uint32()}
		for l := range uint8(16) {
			if ready&(1<<l) != 0 {
				r.Lanes = append(r.Lanes, schemas.LaneMatch{Lane: l, Depth: rng.Uint32()})
			}
		}
		b := AppendBinaryReply(nil, &r)
		got, err := DecodeBinaryReply(b)
		if err != nil {
			t.Fatal(err)
		}
		if got.QueryBlocks != r.QueryBlocks || got.ReadyLanes != uint64(ready) || got.IncompleteLanes != uint64(r.IncompleteLanes) || len(got.Depths) != len(r.Lanes) {
			t.Fatalf("round trip %+v -> %+v", r, got)
		}
		for _, m := range r.Lanes {
			if d, ok := got.Depth(m.Lane); !ok || d != m.Depth {
				t.Fatalf("lane %d: %d,%v want %d", m.Lane, d, ok, m.Depth)
			}
		}
	}
	good := AppendBinaryReply(nil, &schemas.QueryReply{ReadyLanes: 0b101, IncompleteLanes: 0b100, QueryBlocks: 9,
		Lanes: []schemas.LaneMatch{{Lane: 0, Depth: 3}, {Lane: 2, Depth: 9}}})
	bad := map[string][]byte{
		"short":              good[:BinaryReplyHeaderBytes-1],
		"a depth cut":        good[:len(good)-1],
		"a byte too many":    append(slices.Clone(good), 0),
		"version":            append([]byte{2}, good[1:]...),
		"count against mask": append([]byte{1, 3}, good[2:]...),
		"incomplete outside": binary.LittleEndian.AppendUint16(slices.Clone(good[:4]), 0b010),
		"reserved":           binary.LittleEndian.AppendUint16(slices.Clone(good[:6]), 1),
	}
	bad["incomplete outside"] = append(bad["incomplete outside"], good[6:]...)
	bad["reserved"] = append(bad["reserved"], good[8:]...)
	for name, b := range bad {
		if _, err := DecodeBinaryReply(b); !errors.Is(err, ErrBinaryReply) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// FuzzDecodeBinaryReply: the reply decoder never panics, and whatever it accepts encodes back to
// the same bytes.
func FuzzDecodeBinaryReply(f *testing.F) {
	f.Add(AppendBinaryReply(nil, &schemas.QueryReply{ReadyLanes: 1, QueryBlocks: 2, Lanes: []schemas.LaneMatch{{Depth: 2}}}))
	f.Add([]byte{1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Add(AppendBinaryReplyWide(nil, &schemas.QueryReply{ReadyLanes: 1, ReadyLanes64: 1 | 1<<40, QueryBlocks: 2,
		Lanes: []schemas.LaneMatch{{Depth: 2}, {Lane: 40, Depth: 1}}}))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := DecodeBinaryReply(b)
		if err != nil {
			return
		}
		q := schemas.QueryReply{QueryBlocks: r.QueryBlocks}
		q.SetMasks(r.ReadyLanes, r.IncompleteLanes)
		for i, m := 0, r.ReadyLanes; m != 0; i, m = i+1, m&(m-1) {
			q.Lanes = append(q.Lanes, schemas.LaneMatch{Depth: r.Depths[i]})
		}
		again := AppendBinaryReply(nil, &q)
		if b[0] == BinaryReplyWideVersion {
			again = AppendBinaryReplyWide(nil, &q)
		}
		if !bytes.Equal(again, b) {
			t.Fatalf("decoded %x as %+v, which encodes as %x", b, r, again)
		}
	})
}
