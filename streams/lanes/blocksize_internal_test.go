package lanes

import (
	"errors"
	"strings"
	"testing"

	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/ckf-stream/ckf-stream/streams"
	"github.com/ckf-stream/ckf-stream/streams/query"
)

// TestLaneBlockSizeAndTheRefusal (consumer §6.5): each lane keeps the block size of its latest
// record (lanes 0-3 16 tokens, lane 5 32, lane 6 none: a relay of an earlier revision), /v1/lanes'
// source shows it, and the answerer refuses a token query whose block size another selected lane
// knows, naming both sizes, the lanes and their DCs; lanes without a size are not judged, nor are
// queries of local block hashes. A later record without a size makes the lane unknown again.
func TestLaneBlockSizeAndTheRefusal(t *testing.T) { // not parallel: it counts allocations
	nums := []uint8{0, 1, 2, 3, 5, 6}
	rigs := newLaneRigs(t, 4096, 4096, testConfig(), nums...)
	heartbeat := func(r *laneRig, p *rigProducer, size uint32) {
		r.append(r.encode(schemas.LaneRecord{Identity: streams.WireIdentity(p.ID), Kind: schemas.LaneHeartbeat,
			Heartbeat: schemas.Heartbeat{}, BlockSize: size}))
		r.drain()
	}
	ps := map[uint8]*rigProducer{}
	for _, r := range rigs {
		p := r.producer(1)
		p.snapshot()
		p.storeChain(3, nil, 0)
		r.mustConverge(p)
		ps[r.lane] = p
		switch {
		case r.lane < 4:
			heartbeat(r, p, 16)
		case r.lane == 5:
			heartbeat(r, p, 32)
		}
	}
	ix := rigs[0].ix
	for _, r := range rigs {
		want := map[uint8]uint32{0: 16, 1: 16, 2: 16, 3: 16, 5: 32}[r.lane]
		if got := ix.LaneBlockSize(r.lane); got != want {
			t.Fatalf("lane %d: block size %d, want %d", r.lane, got, want)
		}
	}
	for _, s := range ix.Lanes() {
		if want := ix.LaneBlockSize(s.Lane); s.BlockSize != want {
			t.Fatalf("lane %d status: block size %d, want %d", s.Lane, s.BlockSize, want)
		}
	}
	ans := query.NewAnswerer(ix.g, nil, query.CheckBlockSize(ix.CheckBlockSize))
	tokens := schemas.AppendU32s(nil, make([]uint32, 64))
	ask := func(size uint32, mask uint16) schemas.QueryReply {
		req := schemas.QueryRequest{CorrelationID: "q", Input: schemas.InputTokenIDs, Tokens: tokens, BlockSize: size}
		if mask != 0 {
			req.LaneMask = schemas.Some(mask)
		}
		return ans.Answer(&req, nil)
	}
	r := ask(32, 0b1111) // lanes 0-3 publish 16
	if r.Status != schemas.QueryInvalidRequest ||
		!strings.Contains(r.ErrorMessage, "block_size 32, but the engines of lanes 0-3 (dcs 0000000000000064, 0000000000000065, 0000000000000066, 0000000000000067) publish blocks of 16 tokens") {
		t.Fatalf("block size 32 on lanes 0-3: %v %q", r.Status, r.ErrorMessage)
	}
	if r := ask(16, 0b1111); r.Status != schemas.QueryOK {
		t.Fatalf("block size 16 on lanes 0-3: %v %q", r.Status, r.ErrorMessage)
	}
	if n := testing.AllocsPerRun(100, func() { _ = ix.CheckBlockSize(0b1111, 16) }); n != 0 {
		t.Fatalf("a query the rule lets through: %v allocations, want 0", n)
	}
	// Every lane: 16 is wrong for lane 5, 32 for lanes 0-3; lane 6 (unknown) judges neither.
	if r := ask(16, 0); r.Status != schemas.QueryInvalidRequest ||
		!strings.Contains(r.ErrorMessage, "block_size 16, but the engines of lane 5 (dc 0000000000000069) publish blocks of 32 tokens") {
		t.Fatalf("block size 16 on every lane: %v %q", r.Status, r.ErrorMessage)
	}
	if r := ask(8, 0b10_0001); r.Status != schemas.QueryInvalidRequest ||
		!strings.Contains(r.ErrorMessage, "block_size 8, but the engines of lane 0 (dc 0000000000000064) publish blocks of 16 tokens; of lane 5 (dc 0000000000000069) publish blocks of 32 tokens") {
		t.Fatalf("block size 8 on lanes 0 and 5: %v %q", r.Status, r.ErrorMessage)
	}
	if r := ask(8, 1<<6); r.Status != schemas.QueryOK {
		t.Fatalf("a lane without a block size: %v %q", r.Status, r.ErrorMessage)
	}
	hashes := schemas.QueryRequest{CorrelationID: "h", Input: schemas.InputLocalBlockHashes, Hashes: schemas.AppendU64s(nil, []uint64{1, 2})}
	if r := ans.Answer(&hashes, nil); r.Status != schemas.QueryOK {
		t.Fatalf("local block hashes: %v %q", r.Status, r.ErrorMessage)
	}
	if err := ix.CheckBlockSize(1, 32); !errors.Is(err, ErrBlockSizeMismatch) {
		t.Fatalf("CheckBlockSize: %v, want ErrBlockSizeMismatch", err)
	}
	// Lane 5's relay goes back to an earlier revision (or its engines disagree): no size.
	heartbeat(rigs[4], ps[5], 0)
	if got := ix.LaneBlockSize(5); got != 0 {
		t.Fatalf("lane 5 after a record without a size: %d, want 0", got)
	}
	if r := ask(16, 0); r.Status != schemas.QueryOK {
		t.Fatalf("block size 16 once lane 5 knows none: %v %q", r.Status, r.ErrorMessage)
	}
}
