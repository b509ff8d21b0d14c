package bridge

import (
	"encoding/binary"
	"testing"

	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/twmb/franz-go/pkg/kgo"
)

func provenance(seq int64, digest uint64, index, count uint32) []kgo.RecordHeader {
	return []kgo.RecordHeader{
		{Key: HeaderSeq, Value: binary.BigEndian.AppendUint64(nil, uint64(seq))},
		{Key: HeaderDigest, Value: binary.BigEndian.AppendUint64(nil, digest)},
		{Key: HeaderPart, Value: binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint32(nil, index), count)},
	}
}

func storedKV(hashes ...uint64) *schemas.KvEvent {
	ev := &schemas.KvEvent{Kind: schemas.KvStoredEvent}
	for _, h := range hashes {
		ev.Stored.Blocks = append(ev.Stored.Blocks, schemas.KvBlock{BlockHash: h})
	}
	return ev
}

// TestReadBackBatches: a batch counts (state and position) only once all its records were
// read; a batch cut short by a crash is left out, and its rewrite in full counts once.
func TestReadBackBatches(t *testing.T) {
	rb := newReadBack(NewConverter(1, 4, nil))
	rb.record(provenance(0, 100, 0, 2), storedKV(1))
	rb.record(provenance(0, 100, 1, 2), &schemas.KvEvent{Kind: schemas.KvRemovedEvent, Removed: schemas.KvRemoved{BlockHashes: []uint64{1}}})
	rb.record(provenance(3, 103, 0, 1), storedKV(2, 3))
	if r := rb.resumes[0]; r == nil || r.Seq != 3 || r.Digest != 103 || !equalU64(rb.conv.HeldHashes(0), 2, 3) {
		t.Fatalf("after whole batches: %+v %v", rb.resumes[0], rb.conv.HeldHashes(0))
	}
	// Batch 4 is cut after its first record: neither its block nor its position count.
	rb.record(provenance(4, 104, 0, 2), storedKV(4))
	if rb.resumes[0].Seq != 3 || rb.conv.Held(0, 4) != 0 {
		t.Fatalf("partial batch counted: %+v %v", rb.resumes[0], rb.conv.HeldHashes(0))
	}
	// The next bridge wrote batch 4 again in full.
	rb.record(provenance(4, 104, 0, 2), storedKV(4))
	rb.record(provenance(4, 104, 1, 2), storedKV(5))
	if rb.resumes[0].Seq != 4 || !equalU64(rb.conv.HeldHashes(0), 2, 3, 4, 5) {
		t.Fatalf("rewritten batch: %+v %v", rb.resumes[0], rb.conv.HeldHashes(0))
	}
	// The clear of an engine restart: the rank starts afresh.
	rb.record(provenance(-1, 0, 0, 1), &schemas.KvEvent{Kind: schemas.KvClearedEvent})
	if _, ok := rb.resumes[0]; ok || rb.conv.HeldBlocks(0) != 0 {
		t.Fatalf("after a restart clear: %+v %v", rb.resumes[0], rb.conv.HeldHashes(0))
	}
	// Records of other producers (no headers) change the state only.
	rb.record(nil, storedKV(9))
	if rb.conv.Held(0, 9) != 1 || len(rb.resumes) != 0 {
		t.Fatal("a record without headers")
	}
}
