package relay

import (
	"bytes"
	"encoding/binary"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/zeebo/xxh3"
)

func testManifest() checkpointManifest {
	return checkpointManifest{
		ID: 1_700_000_000_000_000_123, Pool: "pool-a", Lane: 7, Incarnation: 99, Sequence: 1234, Chunks: 3,
		FirstChunkOffset: 40, PayloadLen: 2500, PayloadHash: 0xDEADBEEF, WriteTime: time.Unix(0, 1_700_000_000_123_456_789),
		Events: 5000, InputTopic: "kv-events", Offsets: []partitionOffset{{0, 10}, {1, 0}, {5, 1 << 40}},
		LostClears: 3, Degraded: []sourceKey{{worker: 7, rank: 0}, {worker: 7, rank: 1}, {worker: 1 << 63, rank: 4}},
	}
}

// TestCheckpointManifestVersion1: a manifest of format version 1 (before the source health)
// still reads, with no degraded source and no lost-history clear.
func TestCheckpointManifestVersion1(t *testing.T) {
	m := testManifest()
	m.LostClears, m.Degraded = 0, nil
	b := appendCheckpointManifest(nil, &m)
	v1 := bytes.Clone(b[:len(b)-8-12]) // without the trailer, the clears and the count
	v1[len(checkpointMagic)] = checkpointVersion1
	v1 = binary.BigEndian.AppendUint64(v1, xxh3.Hash(v1))
	got, err := decodeCheckpointManifest(v1)
	if err != nil {
		t.Fatal(err)
	}
	got.WriteTime = m.WriteTime
	if !reflect.DeepEqual(got, m) {
		t.Fatalf("version 1 decoded\n%+v\nwant\n%+v", got, m)
	}
}

// TestCheckpointManifestRoundTrip: a manifest decodes to what was encoded; every truncation and
// every single flipped byte is an error, never a panic or a different manifest.
func TestCheckpointManifestRoundTrip(t *testing.T) {
	m := testManifest()
	b := appendCheckpointManifest(nil, &m)
	if k, err := checkpointKind(b); err != nil || k != checkpointKindManif {
		t.Fatalf("kind %d, %v", k, err)
	}
	got, err := decodeCheckpointManifest(b)
	if err != nil {
		t.Fatal(err)
	}
	if got.WriteTime.UnixNano() != m.WriteTime.UnixNano() {
		t.Fatalf("write time %v, want %v", got.WriteTime, m.WriteTime)
	}
	got.WriteTime = m.WriteTime
	if !reflect.DeepEqual(got, m) {
		t.Fatalf("decoded\n%+v\nwant\n%+v", got, m)
	}
	for n := range len(b) {
		if _, err := decodeCheckpointManifest(b[:n]); err == nil {
			t.Fatalf("a manifest cut to %d of %d bytes decoded", n, len(b))
		}
	}
	for i := checkpointHeaderSize; i < len(b); i++ {
		c := bytes.Clone(b)
		c[i] ^= 0x40
		if _, err := decodeCheckpointManifest(c); err == nil {
			t.Fatalf("a manifest with byte %d flipped decoded", i)
		}
	}
}

// TestCheckpointManifestRejectsBadOffsets: unsorted or duplicate partitions and negative
// offsets are refused even under a valid checksum.
func TestCheckpointManifestRejectsBadOffsets(t *testing.T) {
	for name, offs := range map[string][]partitionOffset{
		"unsorted":         {{2, 1}, {1, 1}},
		"duplicate":        {{1, 1}, {1, 2}},
		"negative offset":  {{0, -1}},
		"negative partion": {{-1, 0}},
	} {
		m := testManifest()
		m.Offsets = offs
		if _, err := decodeCheckpointManifest(appendCheckpointManifest(nil, &m)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	m := testManifest()
	m.Chunks = 0
	if _, err := decodeCheckpointManifest(appendCheckpointManifest(nil, &m)); err == nil {
		t.Error("a manifest of 0 chunks was accepted")
	}
}

// TestCheckpointKind: records that are not checkpoint records of this version are named as such.
func TestCheckpointKind(t *testing.T) {
	for name, v := range map[string][]byte{
		"empty":        nil,
		"short":        []byte("CKF"),
		"bad magic":    []byte("XKFR\x01\x01"),
		"next version": []byte("CKFR\x03\x01"),
		"unknown kind": []byte("CKFR\x01\x09"),
	} {
		if _, err := checkpointKind(v); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// TestCheckpointChunksAssemble: a payload split into chunks assembles back; a missing,
// repeated or foreign-count chunk, or a payload that does not hash to the manifest's, is an
// error matching ErrCheckpointRecord; another checkpoint's chunks are skipped.
func TestCheckpointChunksAssemble(t *testing.T) {
	payload := bytes.Repeat([]byte("0123456789abcdef"), 1000)
	const id = 77
	values := splitCheckpoint(id, payload, 4096)
	if len(values) != 4 {
		t.Fatalf("%d chunks of 16,000 bytes at 4,096 per chunk; want 4", len(values))
	}
	m := checkpointManifest{ID: id, Chunks: 4, PayloadLen: uint64(len(payload)), PayloadHash: hashPayload(payload), offset: 10}
	assemble := func(vs [][]byte) ([]byte, error) {
		a := newCheckpointAssembly(&m)
		for i, v := range vs {
			c, err := decodeCheckpointChunk(v)
			if err != nil {
				return nil, err
			}
			if err := a.add(int64(i), c); err != nil {
				return nil, err
			}
		}
		return a.finish()
	}
	got, err := assemble(values)
	if err != nil || !bytes.Equal(got, payload) {
		t.Fatalf("assembled %d bytes, %v", len(got), err)
	}
	foreign := splitCheckpoint(id+1, payload[:10], 4096)[0]
	if got, err := assemble([][]byte{values[0], foreign, values[1], values[2], values[3]}); err != nil || !bytes.Equal(got, payload) {
		t.Fatalf("with another checkpoint's chunk between: %d bytes, %v", len(got), err)
	}
	bad := map[string][][]byte{
		"missing chunk":  {values[0], values[1], values[3]},
		"repeated chunk": {values[0], values[0], values[1], values[2], values[3]},
		"last missing":   values[:3],
	}
	flipped := bytes.Clone(values[2])
	flipped[len(flipped)-1] ^= 1
	bad["flipped payload byte"] = [][]byte{values[0], values[1], flipped, values[3]}
	for name, vs := range bad {
		if _, err := assemble(vs); !errors.Is(err, ErrCheckpointRecord) {
			t.Errorf("%s: %v; want an ErrCheckpointRecord", name, err)
		}
	}
	if _, err := decodeCheckpointChunk(values[0][:checkpointChunkFixed-1]); err == nil {
		t.Error("a truncated chunk header decoded")
	}
}

// FuzzDecodeCheckpointManifest: any input decodes to a manifest that encodes back to the same
// bytes, or is refused; never a panic.
func FuzzDecodeCheckpointManifest(f *testing.F) {
	m := testManifest()
	f.Add(appendCheckpointManifest(nil, &m))
	m.Offsets = nil
	f.Add(appendCheckpointManifest(nil, &m))
	f.Add([]byte("CKFR\x01\x02"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if _, err := checkpointKind(b); err != nil {
			return
		}
		m, err := decodeCheckpointManifest(b)
		if err != nil {
			return
		}
		if again := appendCheckpointManifest(nil, &m); !bytes.Equal(again, b) {
			t.Fatalf("a decoded manifest encodes to other bytes")
		}
	})
}

// FuzzDecodeCheckpointChunk: any input decodes to a chunk whose bytes lie inside the input, or
// is refused.
func FuzzDecodeCheckpointChunk(f *testing.F) {
	f.Add(splitCheckpoint(1, []byte("payload"), 3)[1])
	f.Add([]byte("CKFR\x01\x01"))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := decodeCheckpointChunk(b)
		if err != nil {
			return
		}
		if c.Index >= c.Count || len(c.Bytes) != len(b)-checkpointChunkFixed {
			t.Fatalf("chunk %+v from %d bytes", c, len(b))
		}
	})
}
