package relay

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/zeebo/xxh3"
)

// The relay's checkpoint records (relay.md, "State checkpoint"). A checkpoint is the relay's
// private state store, not a contract with other processes (like a Kafka Streams changelog,
// which no one else reads): its records are a small binary framing around the producer's own
// checkpoint encoding (producer.DcState.AppendCheckpoint), so that no schema registry is on the
// restart path and a 30 MB state is not copied through an Avro encoder. One checkpoint is
//
//	chunk 0 .. chunk n-1, manifest      (one Kafka transaction, with the lane records it covers)
//
// on the relay's partition of the checkpoint topic (partition = lane), every record keyed by
// the pool. Every value starts with the 4-byte magic "CKFR", a 1-byte format version (2; 1 is
// still read) and a 1-byte kind, then, big-endian:
//
//	chunk:    id u64 | index u32 | count u32 | bytes
//	manifest: id u64 | pool str | lane u8 | incarnation u64 | sequence u64 | chunks u32 |
//	          first chunk offset i64 | payload length u64 | payload xxh3 u64 |
//	          write time unix ns i64 | events u64 | input topic str |
//	          partitions u32 | (partition i32, next offset i64)* |
//	          [version 2: lost-history clears u64 | degraded sources u32 | (worker u64, rank u32)*] |
//	          xxh3 of everything before u64
//
// Version 2 keeps the sources degraded by lost engine history and the count of lost-history
// clears read: a restarted relay forgot them (the clears that degraded them precede the
// checkpoint, so the replay of its tail does not see them again), and its lane records said the
// DC healthy while its filter missed those sources' blocks. A version-1 manifest reads as none.
//
// (str = u16 length + bytes). The payload is the chunks' bytes concatenated in index order; the
// manifest's hash covers it, and the manifest's own trailer covers the manifest, so a damaged
// record of either kind is detected before anything is restored from it. The id is unique per
// pool and increasing (the write time in Unix nanoseconds, at least the previous id + 1): chunks
// of another checkpoint (an aborted one's are never read: the reader is read_committed) are told
// apart by it.

const (
	checkpointMagic      = "CKFR"
	checkpointVersion    = 2
	checkpointVersion1   = 1 // read: no degraded sources
	checkpointKindChunk  = 1
	checkpointKindManif  = 2
	checkpointHeaderSize = len(checkpointMagic) + 2
	checkpointChunkFixed = checkpointHeaderSize + 8 + 4 + 4
)

// ErrCheckpointRecord is the cause of every CheckpointRecordError.
var ErrCheckpointRecord = errors.New("streams: malformed relay checkpoint record")

// CheckpointRecordError says why a checkpoint record (or a checkpoint assembled from them)
// cannot be used. It matches ErrCheckpointRecord.
type CheckpointRecordError struct {
	Offset int64 // the record's offset on the checkpoint partition, -1 if not known
	Reason string
}

func (e *CheckpointRecordError) Error() string {
	return fmt.Sprintf("streams: relay checkpoint record at offset %d: %s", e.Offset, e.Reason)
}

// Unwrap returns ErrCheckpointRecord.
func (e *CheckpointRecordError) Unwrap() error { return ErrCheckpointRecord }

// partitionOffset is an input partition and the offset of the first record the checkpointed
// state has not applied (the next one to read).
type partitionOffset struct {
	Partition int32
	Next      int64
}

// checkpointManifest describes one committed checkpoint.
type checkpointManifest struct {
	ID               uint64
	Pool             string
	Lane             uint8
	Incarnation      uint64 // the incarnation that wrote it
	Sequence         uint64 // its lane sequence when the checkpoint's transaction committed
	Chunks           uint32
	FirstChunkOffset int64
	PayloadLen       uint64
	PayloadHash      uint64
	WriteTime        time.Time
	Events           uint64 // KV records applied to the state since the relay first started (all incarnations)
	InputTopic       string
	Offsets          []partitionOffset // sorted by partition, unique
	// LostClears and Degraded are the relay's source health (version 2): the lost-history clears
	// read since the relay first started, and the sources they left degraded, sorted.
	LostClears uint64
	Degraded   []sourceKey

	offset int64 // where the manifest was read (not encoded)
}

func appendHeader(b []byte, kind byte) []byte {
	b = append(b, checkpointMagic...)
	return append(b, checkpointVersion, kind)
}

func appendStr(b []byte, s string) []byte {
	b = binary.BigEndian.AppendUint16(b, uint16(len(s)))
	return append(b, s...)
}

// appendCheckpointChunk encodes one chunk record's value.
func appendCheckpointChunk(b []byte, id uint64, index, count uint32, payload []byte) []byte {
	b = appendHeader(b, checkpointKindChunk)
	b = binary.BigEndian.AppendUint64(b, id)
	b = binary.BigEndian.AppendUint32(b, index)
	b = binary.BigEndian.AppendUint32(b, count)
	return append(b, payload...)
}

// appendCheckpointManifest encodes m (its strings must be shorter than 64 KiB; the relay's pool
// and topic names are).
func appendCheckpointManifest(b []byte, m *checkpointManifest) []byte {
	start := len(b)
	b = appendHeader(b, checkpointKindManif)
	b = binary.BigEndian.AppendUint64(b, m.ID)
	b = appendStr(b, m.Pool)
	b = append(b, m.Lane)
	b = binary.BigEndian.AppendUint64(b, m.Incarnation)
	b = binary.BigEndian.AppendUint64(b, m.Sequence)
	b = binary.BigEndian.AppendUint32(b, m.Chunks)
	b = binary.BigEndian.AppendUint64(b, uint64(m.FirstChunkOffset))
	b = binary.BigEndian.AppendUint64(b, m.PayloadLen)
	b = binary.BigEndian.AppendUint64(b, m.PayloadHash)
	b = binary.BigEndian.AppendUint64(b, uint64(m.WriteTime.UnixNano()))
	b = binary.BigEndian.AppendUint64(b, m.Events)
	b = appendStr(b, m.InputTopic)
	b = binary.BigEndian.AppendUint32(b, uint32(len(m.Offsets)))
	for _, o := range m.Offsets {
		b = binary.BigEndian.AppendUint32(b, uint32(o.Partition))
		b = binary.BigEndian.AppendUint64(b, uint64(o.Next))
	}
	b = binary.BigEndian.AppendUint64(b, m.LostClears)
	b = binary.BigEndian.AppendUint32(b, uint32(len(m.Degraded)))
	for _, d := range m.Degraded {
		b = binary.BigEndian.AppendUint64(b, d.worker)
		b = binary.BigEndian.AppendUint32(b, d.rank)
	}
	return binary.BigEndian.AppendUint64(b, xxh3.Hash(b[start:]))
}

// checkpointKind returns the kind of a checkpoint record value, or an error when it does not
// start with the magic and version this build reads.
func checkpointKind(v []byte) (byte, error) {
	if len(v) < checkpointHeaderSize || string(v[:len(checkpointMagic)]) != checkpointMagic {
		return 0, errors.New("not a relay checkpoint record (bad magic)")
	}
	if v := v[len(checkpointMagic)]; v != checkpointVersion && v != checkpointVersion1 {
		return 0, fmt.Errorf("unsupported checkpoint format version %d", v)
	}
	switch k := v[len(checkpointMagic)+1]; k {
	case checkpointKindChunk, checkpointKindManif:
		return k, nil
	default:
		return 0, fmt.Errorf("unknown checkpoint record kind %d", k)
	}
}

// checkpointChunk is a decoded chunk record; Bytes aliases the record's value.
type checkpointChunk struct {
	ID           uint64
	Index, Count uint32
	Bytes        []byte
}

// decodeCheckpointChunk decodes a chunk record's value (its kind already checked).
func decodeCheckpointChunk(v []byte) (checkpointChunk, error) {
	if len(v) < checkpointChunkFixed {
		return checkpointChunk{}, errors.New("truncated chunk header")
	}
	p := v[checkpointHeaderSize:]
	c := checkpointChunk{ID: binary.BigEndian.Uint64(p), Index: binary.BigEndian.Uint32(p[8:]),
		Count: binary.BigEndian.Uint32(p[12:]), Bytes: v[checkpointChunkFixed:]}
	if c.Count == 0 || c.Index >= c.Count {
		return checkpointChunk{}, fmt.Errorf("chunk index %d of %d", c.Index, c.Count)
	}
	return c, nil
}

// manifestReader decodes big-endian fields, remembering the first shortfall.
type manifestReader struct {
	b   []byte
	bad bool
}

func (r *manifestReader) take(n int) []byte {
	if r.bad || len(r.b) < n {
		r.bad = true
		return make([]byte, n)
	}
	p := r.b[:n]
	r.b = r.b[n:]
	return p
}
func (r *manifestReader) u8() byte    { return r.take(1)[0] }
func (r *manifestReader) u16() uint16 { return binary.BigEndian.Uint16(r.take(2)) }
func (r *manifestReader) u32() uint32 { return binary.BigEndian.Uint32(r.take(4)) }
func (r *manifestReader) u64() uint64 { return binary.BigEndian.Uint64(r.take(8)) }
func (r *manifestReader) str() string { return string(r.take(int(r.u16()))) }

// decodeCheckpointManifest decodes and checks a manifest record's value (its kind already
// checked): the trailer hash, every length against the bytes present, offsets sorted and unique
// and not negative.
func decodeCheckpointManifest(v []byte) (checkpointManifest, error) {
	if len(v) < checkpointHeaderSize+8 {
		return checkpointManifest{}, errors.New("truncated manifest")
	}
	body, sum := v[:len(v)-8], binary.BigEndian.Uint64(v[len(v)-8:])
	if xxh3.Hash(body) != sum {
		return checkpointManifest{}, errors.New("manifest checksum mismatch")
	}
	r := &manifestReader{b: body[checkpointHeaderSize:]}
	m := checkpointManifest{ID: r.u64(), Pool: r.str(), Lane: r.u8(), Incarnation: r.u64(), Sequence: r.u64(),
		Chunks: r.u32(), FirstChunkOffset: int64(r.u64()), PayloadLen: r.u64(), PayloadHash: r.u64()}
	m.WriteTime = time.Unix(0, int64(r.u64()))
	m.Events = r.u64()
	m.InputTopic = r.str()
	n := r.u32()
	if uint64(n)*12 > uint64(len(r.b)) {
		return checkpointManifest{}, errors.New("truncated manifest offsets")
	}
	m.Offsets = make([]partitionOffset, n)
	for i := range m.Offsets {
		m.Offsets[i] = partitionOffset{Partition: int32(r.u32()), Next: int64(r.u64())}
	}
	if v[len(checkpointMagic)] >= checkpointVersion {
		m.LostClears = r.u64()
		n := r.u32()
		if uint64(n)*12 > uint64(len(r.b)) {
			return checkpointManifest{}, errors.New("truncated manifest degraded sources")
		}
		for range n {
			m.Degraded = append(m.Degraded, sourceKey{worker: r.u64(), rank: r.u32()})
		}
	}
	switch {
	case r.bad:
		return checkpointManifest{}, errors.New("truncated manifest")
	case len(r.b) != 0:
		return checkpointManifest{}, fmt.Errorf("%d bytes after the manifest", len(r.b))
	case m.Chunks == 0 || m.FirstChunkOffset < 0:
		return checkpointManifest{}, fmt.Errorf("manifest names %d chunks from offset %d", m.Chunks, m.FirstChunkOffset)
	}
	for i, o := range m.Offsets {
		if o.Partition < 0 || o.Next < 0 || (i > 0 && o.Partition <= m.Offsets[i-1].Partition) {
			return checkpointManifest{}, fmt.Errorf("manifest input offset %d: partition %d next %d (partitions must be sorted, unique, offsets >= 0)", i, o.Partition, o.Next)
		}
	}
	return m, nil
}

// checkpointAssembly collects one checkpoint's chunks, in order, and checks them against the
// manifest.
type checkpointAssembly struct {
	m       *checkpointManifest
	payload []byte
	next    uint32
}

func newCheckpointAssembly(m *checkpointManifest) *checkpointAssembly {
	return &checkpointAssembly{m: m, payload: make([]byte, 0, min(m.PayloadLen, 1<<30))}
}

// add takes the chunk at offset; chunks of other checkpoints are skipped. A chunk of this
// checkpoint out of order, or a count that disagrees with the manifest, is an error.
func (a *checkpointAssembly) add(offset int64, c checkpointChunk) error {
	if c.ID != a.m.ID {
		return nil
	}
	if c.Count != a.m.Chunks || c.Index != a.next {
		return &CheckpointRecordError{Offset: offset, Reason: fmt.Sprintf("chunk %d/%d where chunk %d/%d was expected", c.Index, c.Count, a.next, a.m.Chunks)}
	}
	if uint64(len(a.payload))+uint64(len(c.Bytes)) > a.m.PayloadLen {
		return &CheckpointRecordError{Offset: offset, Reason: "chunks exceed the manifest's payload length"}
	}
	a.payload = append(a.payload, c.Bytes...)
	a.next++
	return nil
}

// finish checks that every chunk arrived and that the payload is the one the manifest hashed.
func (a *checkpointAssembly) finish() ([]byte, error) {
	switch {
	case a.next != a.m.Chunks:
		return nil, &CheckpointRecordError{Offset: a.m.offset, Reason: fmt.Sprintf("%d of %d chunks found", a.next, a.m.Chunks)}
	case uint64(len(a.payload)) != a.m.PayloadLen:
		return nil, &CheckpointRecordError{Offset: a.m.offset, Reason: fmt.Sprintf("payload is %d bytes, the manifest says %d", len(a.payload), a.m.PayloadLen)}
	case hashPayload(a.payload) != a.m.PayloadHash:
		return nil, &CheckpointRecordError{Offset: a.m.offset, Reason: "payload checksum mismatch"}
	}
	return a.payload, nil
}

// hashPayload is the checkpoint payload's checksum (xxh3, 64 bits).
func hashPayload(b []byte) uint64 { return xxh3.Hash(b) }

// splitCheckpoint cuts payload into chunk values of at most chunkBytes payload bytes each.
func splitCheckpoint(id uint64, payload []byte, chunkBytes int) [][]byte {
	n := max(1, (len(payload)+chunkBytes-1)/chunkBytes)
	out := make([][]byte, 0, n)
	for i := 0; i < n; i++ {
		lo, hi := i*chunkBytes, min((i+1)*chunkBytes, len(payload))
		out = append(out, appendCheckpointChunk(make([]byte, 0, checkpointChunkFixed+hi-lo), id, uint32(i), uint32(n), payload[lo:hi]))
	}
	return out
}

// sortedOffsets returns next as partition-sorted offsets (partitions never read are left out).
func sortedOffsets(next map[int32]int64) []partitionOffset {
	out := make([]partitionOffset, 0, len(next))
	for p, o := range next {
		out = append(out, partitionOffset{Partition: p, Next: o})
	}
	slices.SortFunc(out, func(a, b partitionOffset) int { return int(a.Partition) - int(b.Partition) })
	return out
}
