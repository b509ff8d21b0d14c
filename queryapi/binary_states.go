package queryapi

import (
	"encoding/binary"
	"fmt"
	"math"
	"time"

	"github.com/ckf-stream/ckf-stream/schemas"
)

// The binary reply with lane states (BinaryReplyStatesVersion), asked for with the query
// parameter reply=2 (DecodeBinaryRequest): every lane the request selected, each with its state,
// age and, when searched, depth, laid out for up to 64 lanes. Little-endian throughout:
//
//	offset  size  field
//	0       1     version (2)
//	1       1     number of lane entries n
//	2       2     reserved, 0
//	4       4     query_blocks
//	8       8     reply time, microseconds since the Unix epoch
//	16      12*n  lane entries in ascending lane order:
//	              lane u8, state u8 (schemas.LaneAnswerState), reserved u16 (0),
//	              age in ms u32 (BinaryAbsent: none; larger ages read BinaryAbsent-1),
//	              depth u32 (BinaryAbsent: not searched)
const (
	// BinaryReplyStatesVersion is the first byte of a binary reply with lane states.
	BinaryReplyStatesVersion = 2
	// BinaryStatesHeaderBytes is the size of such a reply before its lane entries.
	BinaryStatesHeaderBytes = 16
	// BinaryStateEntryBytes is the size of one lane entry.
	BinaryStateEntryBytes = 12
	// BinaryAbsent marks an age or a depth that the lane does not have.
	BinaryAbsent = math.MaxUint32
	// MaxBinaryStatesReplyBytes is the longest reply with lane states: 64 lanes.
	MaxBinaryStatesReplyBytes = BinaryStatesHeaderBytes + BinaryStateEntryBytes*64
)

// BinaryLaneState is one lane entry of a binary reply with lane states.
type BinaryLaneState struct {
	Lane  uint8
	State schemas.LaneAnswerState
	// AgeMillis and Depth are BinaryAbsent when the lane has none.
	AgeMillis uint32
	Depth     uint32
}

// BinaryStatesReply is a decoded binary reply with lane states (DecodeBinaryStatesReply).
type BinaryStatesReply struct {
	QueryBlocks uint32
	ReplyTime   time.Time
	Lanes       []BinaryLaneState
}

// AppendBinaryStatesReply appends the binary reply with lane states of an OK reply r to dst:
// one entry per r.LaneStates, the depth from r.Lanes for the searched ones.
func AppendBinaryStatesReply(dst []byte, r *schemas.QueryReply) []byte {
	dst = append(dst, BinaryReplyStatesVersion, byte(len(r.LaneStates)), 0, 0)
	dst = binary.LittleEndian.AppendUint32(dst, r.QueryBlocks)
	dst = binary.LittleEndian.AppendUint64(dst, uint64(r.ReplyTime.UnixMicro()))
	j := 0
	for i := range r.LaneStates {
		s := &r.LaneStates[i]
		age, depth := uint32(BinaryAbsent), uint32(BinaryAbsent)
		if s.AgeMillis.Valid {
			age = uint32(min(uint64(max(s.AgeMillis.Value, 0)), BinaryAbsent-1))
		}
		for j < len(r.Lanes) && r.Lanes[j].Lane < s.Lane {
			j++
		}
		if j < len(r.Lanes) && r.Lanes[j].Lane == s.Lane && s.State.HasDepth() {
			depth = r.Lanes[j].Depth
		}
		dst = append(dst, s.Lane, byte(s.State), 0, 0)
		dst = binary.LittleEndian.AppendUint32(dst, age)
		dst = binary.LittleEndian.AppendUint32(dst, depth)
	}
	return dst
}

// DecodeBinaryStatesReply decodes a binary reply with lane states. It checks everything the
// layout fixes: the version, the length against the number of entries, the reserved fields
// zero, lanes strictly ascending below 64, a depth exactly for the searched states (exact,
// incomplete) and never above query_blocks. A state beyond this reader's reads as
// schemas.LaneStateUnknown, with or without a depth. Errors wrap ErrBinaryReply.
func DecodeBinaryStatesReply(b []byte) (BinaryStatesReply, error) {
	if len(b) < BinaryStatesHeaderBytes {
		return BinaryStatesReply{}, fmt.Errorf("%w: %d bytes, the header alone is %d", ErrBinaryReply, len(b), BinaryStatesHeaderBytes)
	}
	if b[0] != BinaryReplyStatesVersion {
		return BinaryStatesReply{}, fmt.Errorf("%w: version %d, want %d", ErrBinaryReply, b[0], BinaryReplyStatesVersion)
	}
	n := int(b[1])
	switch {
	case b[2] != 0 || b[3] != 0:
		return BinaryStatesReply{}, fmt.Errorf("%w: reserved header bytes %d %d, want 0", ErrBinaryReply, b[2], b[3])
	case len(b) != BinaryStatesHeaderBytes+BinaryStateEntryBytes*n:
		return BinaryStatesReply{}, fmt.Errorf("%w: %d bytes for %d lane entries, want %d", ErrBinaryReply, len(b), n, BinaryStatesHeaderBytes+BinaryStateEntryBytes*n)
	}
	r := BinaryStatesReply{
		QueryBlocks: binary.LittleEndian.Uint32(b[4:]),
		ReplyTime:   time.UnixMicro(int64(binary.LittleEndian.Uint64(b[8:]))).UTC(),
		Lanes:       make([]BinaryLaneState, n),
	}
	prev := -1
	for i := range r.Lanes {
		e := b[BinaryStatesHeaderBytes+BinaryStateEntryBytes*i:]
		s := BinaryLaneState{Lane: e[0], State: schemas.LaneAnswerState(e[1]),
			AgeMillis: binary.LittleEndian.Uint32(e[4:]), Depth: binary.LittleEndian.Uint32(e[8:])}
		if s.State > schemas.LaneUnavailable {
			s.State = schemas.LaneStateUnknown
		}
		switch {
		case s.Lane >= 64 || int(s.Lane) <= prev:
			return BinaryStatesReply{}, fmt.Errorf("%w: entry %d: lane %d is not ascending below 64", ErrBinaryReply, i, s.Lane)
		case e[2] != 0 || e[3] != 0:
			return BinaryStatesReply{}, fmt.Errorf("%w: entry %d: reserved bytes %d %d, want 0", ErrBinaryReply, i, e[2], e[3])
		case s.State != schemas.LaneStateUnknown && s.State.HasDepth() != (s.Depth != BinaryAbsent):
			return BinaryStatesReply{}, fmt.Errorf("%w: entry %d: lane %d is %v with depth %#x", ErrBinaryReply, i, s.Lane, s.State, s.Depth)
		case s.Depth != BinaryAbsent && s.Depth > r.QueryBlocks:
			return BinaryStatesReply{}, fmt.Errorf("%w: entry %d: depth %d above query_blocks %d", ErrBinaryReply, i, s.Depth, r.QueryBlocks)
		}
		prev = int(s.Lane)
		r.Lanes[i] = s
	}
	return r, nil
}
