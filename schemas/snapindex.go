package schemas

import (
	"time"

	"github.com/ckf-stream/ckf-stream/ckf"
)

// SnapshotIndexEntry says where the latest complete snapshot of one lane starts on the lane
// topic (Avro record SnapshotIndexEntry, compacted topic ckf-snapshot-index, key "lane-<n>").
type SnapshotIndexEntry struct {
	Lane        uint8
	Identity    ProducerIdentity
	Sequence    uint64
	FirstOffset int64
	LastOffset  int64
	ChunkCount  uint32
	// WriteTime travels with microsecond precision; decoders return UTC.
	WriteTime time.Time
}

func (e *SnapshotIndexEntry) validate() error {
	if e.Lane >= ckf.MaxLanes {
		return invalid("lane", "%d is not below %d", e.Lane, ckf.MaxLanes)
	}
	if err := e.Identity.validate("identity"); err != nil {
		return err
	}
	if e.FirstOffset < 0 {
		return invalid("first_offset", "%d is negative", e.FirstOffset)
	}
	if e.LastOffset < e.FirstOffset {
		return invalid("last_offset", "%d is below first_offset %d", e.LastOffset, e.FirstOffset)
	}
	if e.ChunkCount == 0 || e.ChunkCount > maxInt32 {
		return invalid("chunk_count", "%d is not in [1, 2^31-1]", e.ChunkCount)
	}
	return nil
}

func snapshotIndexNative(e *SnapshotIndexEntry) map[string]any {
	return map[string]any{
		"lane":         int32(e.Lane),
		"identity":     identityNative(&e.Identity),
		"sequence":     int64(e.Sequence),
		"first_offset": e.FirstOffset,
		"last_offset":  e.LastOffset,
		"chunk_count":  int32(e.ChunkCount),
		"write_time":   e.WriteTime.UnixMicro(),
	}
}

func (n *nat) snapshotIndex(v any) SnapshotIndexEntry {
	m := n.rec(v, "")
	return SnapshotIndexEntry{
		Lane:        uint8(n.rangeInt(m, "", "lane", 0, ckf.MaxLanes-1)),
		Identity:    n.identity(n.get(m, "", "identity", false), "identity"),
		Sequence:    uint64(n.long(m, "", "sequence")),
		FirstOffset: n.long(m, "", "first_offset"),
		LastOffset:  n.long(m, "", "last_offset"),
		ChunkCount:  uint32(n.rangeInt(m, "", "chunk_count", 0, maxInt32)),
		WriteTime:   n.time(m, "", "write_time"),
	}
}

// AppendSnapshotIndexEntry appends the framed encoding of e to dst; an invalid entry is
// reported as an *EncodeError of kind ErrInvalidField.
func (c *Codec) AppendSnapshotIndexEntry(dst []byte, e SnapshotIndexEntry) ([]byte, error) {
	return c.appendNative(dst, TypeSnapshotIndex, e.validate, func() map[string]any { return snapshotIndexNative(&e) })
}

// EncodeSnapshotIndexEntry returns the framed encoding of e.
func (c *Codec) EncodeSnapshotIndexEntry(e SnapshotIndexEntry) ([]byte, error) {
	return c.AppendSnapshotIndexEntry(nil, e)
}

// DecodeSnapshotIndexEntry decodes a framed snapshot-index entry.
func (c *Codec) DecodeSnapshotIndexEntry(b []byte) (SnapshotIndexEntry, error) {
	const t = TypeSnapshotIndex
	ent, body, err := c.body(t, b)
	if err != nil {
		return SnapshotIndexEntry{}, err
	}
	v, err := ent.native(t, body)
	if err != nil {
		return SnapshotIndexEntry{}, err
	}
	var n nat
	e := n.snapshotIndex(v)
	if err := finish(t, ent.id, &n, e.validate); err != nil {
		return SnapshotIndexEntry{}, err
	}
	return e, nil
}
