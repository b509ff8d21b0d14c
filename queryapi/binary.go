package queryapi

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"mime"
	"net/url"
	"strconv"

	"github.com/ckf-stream/ckf-stream/schemas"
)

// The binary form of POST /v1/prefix-matches (app/indexer/http.md, "Binary form"): a request
// body of little-endian u64 local block hashes, answered with a fixed header and one u32 depth
// per answering lane. It exists for callers that ask many short queries: it spares the JSON
// encoding of the hashes and of the reply, the duplicate-key scan and the per-request
// allocations, so the route's cost is close to the search's own.
const (
	// BinaryContentType is the Content-Type of a binary request and of its OK reply.
	BinaryContentType = "application/octet-stream"
	// BinaryReplyVersion is the first byte of a binary reply; a change of the layout changes it.
	BinaryReplyVersion = 1
	// BinaryReplyHeaderBytes is the size of a binary reply before its depths.
	BinaryReplyHeaderBytes = 12
	// CorrelationIDHeader carries a binary request's correlation id (the JSON body's
	// correlation_id); an OK binary reply echoes it.
	CorrelationIDHeader = "X-Correlation-Id"
	// MaxBinaryReplyBytes is the longest binary reply: every lane answering.
	MaxBinaryReplyBytes = BinaryReplyHeaderBytes + 4*16
	// BinaryReplyWideVersion is the first byte of the binary reply of up to 64 lanes (consumer
	// §16), asked for with reply=3: BinaryReplyVersion's layout with 64-bit masks,
	//
	//	offset  size  field
	//	0       1     version (3)
	//	1       1     number of depths n
	//	2       2     reserved, 0
	//	4       4     query_blocks
	//	8       8     ready lanes
	//	16      8     incomplete lanes
	//	24      4*n   one u32 depth per ready lane, in lane order
	BinaryReplyWideVersion = 3
	// BinaryReplyWideHeaderBytes is the size of a wide binary reply before its depths.
	BinaryReplyWideHeaderBytes = 24
	// MaxBinaryReplyWideBytes is the longest wide binary reply: 64 lanes answering.
	MaxBinaryReplyWideBytes = BinaryReplyWideHeaderBytes + 4*64
)

// BinaryReply is a decoded binary reply (DecodeBinaryReply): the JSON reply's fields without the
// lanes' DC ids and pools, which GET /v1/lanes gives once for all queries.
type BinaryReply struct {
	QueryBlocks uint32
	// ReadyLanes and IncompleteLanes are lane masks: 16 bits in a BinaryReplyVersion reply, 64
	// in a BinaryReplyWideVersion one.
	ReadyLanes      uint64
	IncompleteLanes uint64
	// Depths holds one depth per bit of ReadyLanes, in lane order.
	Depths []uint32
}

// Depth returns lane l's depth and whether lane l answered.
func (r *BinaryReply) Depth(l uint8) (uint32, bool) {
	if l >= 64 || r.ReadyLanes&(1<<l) == 0 {
		return 0, false
	}
	return r.Depths[bits.OnesCount64(r.ReadyLanes&(1<<l-1))], true
}

// ErrBinaryReply is the kind of every error of DecodeBinaryReply.
var ErrBinaryReply = errors.New("queryapi: malformed binary prefix-match reply")

// AppendBinaryReply appends the binary encoding of an OK reply to dst: version, number of depths,
// ready and incomplete lane masks, a reserved zero u16, query_blocks, then one u32 depth per
// lane of Lanes (ascending lane order, one per bit of ReadyLanes), all little-endian. Its masks
// hold lanes 0..15: a reply with a lane beyond 15 is written by AppendBinaryReplyWide (the
// handler refuses reply=1 to a request that selects such a lane, CheckBinaryReplyLanes).
func AppendBinaryReply(dst []byte, r *schemas.QueryReply) []byte {
	dst = append(dst, BinaryReplyVersion, byte(len(r.Lanes)))
	dst = binary.LittleEndian.AppendUint16(dst, r.ReadyLanes)
	dst = binary.LittleEndian.AppendUint16(dst, r.IncompleteLanes)
	dst = binary.LittleEndian.AppendUint16(dst, 0)
	dst = binary.LittleEndian.AppendUint32(dst, r.QueryBlocks)
	for i := range r.Lanes {
		dst = binary.LittleEndian.AppendUint32(dst, r.Lanes[i].Depth)
	}
	return dst
}

// AppendBinaryReplyWide appends the wide binary encoding of an OK reply to dst
// (BinaryReplyWideVersion: 64-bit masks), the reply of up to 64 lanes.
func AppendBinaryReplyWide(dst []byte, r *schemas.QueryReply) []byte {
	dst = append(dst, BinaryReplyWideVersion, byte(len(r.Lanes)), 0, 0)
	dst = binary.LittleEndian.AppendUint32(dst, r.QueryBlocks)
	dst = binary.LittleEndian.AppendUint64(dst, r.ReadyMask())
	dst = binary.LittleEndian.AppendUint64(dst, r.IncompleteMask())
	for i := range r.Lanes {
		dst = binary.LittleEndian.AppendUint32(dst, r.Lanes[i].Depth)
	}
	return dst
}

// ErrBinaryReplyLanes is the cause of CheckBinaryReplyLanes' refusal.
var ErrBinaryReplyLanes = errors.New("queryapi: the binary reply asked for cannot hold the lanes selected")

// CheckBinaryReplyLanes applies the rule of the reply a binary request asks for (version, from
// BinaryReplyVersionOf) to the lanes it selects (selected: the indexer's configured lanes within
// the request's lane mask): BinaryReplyVersion's masks hold lanes 0..15, so a selection beyond
// them is refused (wrapping ErrBadRequest and ErrBinaryReplyLanes) rather than answered cut
// short (consumer §16); the other replies hold 64 lanes. It allocates only for the refusal.
func CheckBinaryReplyLanes(version uint8, selected uint64) error {
	if version == BinaryReplyVersion && selected > uint64(schemas.AllLanes) {
		return fmt.Errorf("%w: %w: reply=1 carries lanes 0..15 (16-bit masks), and the request selects lanes up to %d: ask reply=3 (64-bit masks) or reply=2 (lane states), or give a lane_mask within lanes 0..15",
			ErrBadRequest, ErrBinaryReplyLanes, 63-bits.LeadingZeros64(selected))
	}
	return nil
}

// DecodeBinaryReply decodes a binary reply body of either layout (BinaryReplyVersion,
// BinaryReplyWideVersion). It checks everything the layout fixes: the version, the length
// against the count of depths, the count against the ready mask, the incomplete mask within the
// ready one, the reserved field zero. Errors wrap ErrBinaryReply.
func DecodeBinaryReply(b []byte) (BinaryReply, error) {
	if len(b) > 0 && b[0] == BinaryReplyWideVersion {
		return decodeBinaryReplyWide(b)
	}
	if len(b) < BinaryReplyHeaderBytes {
		return BinaryReply{}, fmt.Errorf("%w: %d bytes, the header alone is %d", ErrBinaryReply, len(b), BinaryReplyHeaderBytes)
	}
	if b[0] != BinaryReplyVersion {
		return BinaryReply{}, fmt.Errorf("%w: version %d, want %d", ErrBinaryReply, b[0], BinaryReplyVersion)
	}
	r := BinaryReply{
		ReadyLanes:      uint64(binary.LittleEndian.Uint16(b[2:])),
		IncompleteLanes: uint64(binary.LittleEndian.Uint16(b[4:])),
		QueryBlocks:     binary.LittleEndian.Uint32(b[8:]),
	}
	return binaryReplyDepths(b, BinaryReplyHeaderBytes, binary.LittleEndian.Uint16(b[6:]), r)
}

// binaryReplyDepths checks a reply body whose header (header bytes: the count of depths in its
// second byte, a reserved field, the masks already read into r) is read, and reads its depths:
// the reserved field 0, one depth per ready lane, nothing after them, the incomplete lanes among
// the ready ones.
func binaryReplyDepths(b []byte, header int, reserved uint16, r BinaryReply) (BinaryReply, error) {
	n := int(b[1])
	switch {
	case reserved != 0:
		return BinaryReply{}, fmt.Errorf("%w: reserved field %d, want 0", ErrBinaryReply, reserved)
	case n != bits.OnesCount64(r.ReadyLanes):
		return BinaryReply{}, fmt.Errorf("%w: %d depths for ready lanes %#04x", ErrBinaryReply, n, r.ReadyLanes)
	case len(b) != header+4*n:
		return BinaryReply{}, fmt.Errorf("%w: %d bytes for %d depths, want %d", ErrBinaryReply, len(b), n, header+4*n)
	case r.IncompleteLanes&^r.ReadyLanes != 0:
		return BinaryReply{}, fmt.Errorf("%w: incomplete lanes %#04x outside ready lanes %#04x", ErrBinaryReply, r.IncompleteLanes, r.ReadyLanes)
	}
	r.Depths = make([]uint32, n)
	for i := range r.Depths {
		r.Depths[i] = binary.LittleEndian.Uint32(b[header+4*i:])
	}
	return r, nil
}

// decodeBinaryReplyWide is DecodeBinaryReply of a BinaryReplyWideVersion body.
func decodeBinaryReplyWide(b []byte) (BinaryReply, error) {
	if len(b) < BinaryReplyWideHeaderBytes {
		return BinaryReply{}, fmt.Errorf("%w: %d bytes, the wide header alone is %d", ErrBinaryReply, len(b), BinaryReplyWideHeaderBytes)
	}
	r := BinaryReply{
		QueryBlocks:     binary.LittleEndian.Uint32(b[4:]),
		ReadyLanes:      binary.LittleEndian.Uint64(b[8:]),
		IncompleteLanes: binary.LittleEndian.Uint64(b[16:]),
	}
	return binaryReplyDepths(b, BinaryReplyWideHeaderBytes, binary.LittleEndian.Uint16(b[2:]), r)
}

// AppendBinaryRequest appends the binary request body of the given local block hashes to dst.
func AppendBinaryRequest(dst []byte, hashes []uint64) []byte {
	for _, h := range hashes {
		dst = binary.LittleEndian.AppendUint64(dst, h)
	}
	return dst
}

// errBinaryLength: a binary body that is not a whole number of 8-byte hashes.
var errBinaryLength = errors.New("binary body length")

// IsBinaryContentType reports whether a request whose Content-Type header has the given values
// is binary: exactly one value, BinaryContentType without parameters. Any other value goes to
// the JSON rule (CheckJSONContentType), which refuses BinaryContentType with a parameter.
func IsBinaryContentType(values []string) bool {
	if len(values) != 1 {
		return false
	}
	if values[0] == BinaryContentType {
		return true
	}
	mt, params, err := mime.ParseMediaType(values[0])
	return err == nil && mt == BinaryContentType && len(params) == 0
}

// DecodeBinaryRequest reads a binary request into the query the answerer takes: body, a whole
// number of 8-byte little-endian hashes (none is the empty query), becomes the request's Hashes
// as it is (it aliases body: keep body unchanged while the request is in use); correlationIDs,
// the values of the request's CorrelationIDHeader, gives the correlation id (at most one; none
// leaves it empty, for the server to make one up); rawQuery, the URL's query, may give
// lane_mask (decimal, up to 64 bits: consumer §16), max_age_ms (decimal milliseconds) and reply
// (1, the default reply of depths, 2, the reply with lane states, or 3, the reply of depths
// with 64-bit masks: BinaryReplyVersionOf), each at most once, and nothing else. The size limit (MaxRequestBytes) is the reader's. Errors wrap
// ErrBadRequest.
func DecodeBinaryRequest(body []byte, correlationIDs []string, rawQuery string) (schemas.QueryRequest, error) {
	if len(body)%schemas.WordSize != 0 {
		return schemas.QueryRequest{}, fmt.Errorf("%w: %w: %d bytes is not a whole number of %d-byte little-endian block hashes",
			ErrBadRequest, errBinaryLength, len(body), schemas.WordSize)
	}
	req := schemas.QueryRequest{Input: schemas.InputLocalBlockHashes, Hashes: schemas.PackedU64(body)}
	switch len(correlationIDs) {
	case 0:
	case 1:
		req.CorrelationID = correlationIDs[0]
	default:
		return schemas.QueryRequest{}, fmt.Errorf("%w: %d %s headers: give at most one", ErrBadRequest, len(correlationIDs), CorrelationIDHeader)
	}
	if rawQuery == "" {
		return req, nil
	}
	q, _ := url.ParseQuery(rawQuery) // as net/http's URL.Query: a malformed pair is left out
	for k, v := range q {
		if k != "lane_mask" && k != "max_age_ms" && k != "reply" {
			return schemas.QueryRequest{}, fmt.Errorf("%w: query parameter %q: a binary request takes only lane_mask, max_age_ms and reply", ErrBadRequest, k)
		}
		if len(v) > 1 {
			return schemas.QueryRequest{}, fmt.Errorf("%w: %s given %d times: give it at most once", ErrBadRequest, k, len(v))
		}
	}
	if v := q["lane_mask"]; len(v) > 0 {
		m, err := strconv.ParseUint(v[0], 10, 64)
		if err != nil {
			return schemas.QueryRequest{}, fmt.Errorf("%w: lane_mask %q is not a lane mask (a decimal number of up to 64 bits)", ErrBadRequest, v[0])
		}
		setLaneMask(&req, m)
	}
	if v := q["max_age_ms"]; len(v) > 0 {
		a, err := strconv.ParseUint(v[0], 10, 63)
		if err != nil {
			return schemas.QueryRequest{}, fmt.Errorf("%w: max_age_ms %q is not a number of milliseconds", ErrBadRequest, v[0])
		}
		req.MaxAgeMillis = schemas.Some(int64(a))
	}
	if v := q["reply"]; len(v) > 0 && v[0] != "1" && v[0] != "2" && v[0] != "3" {
		return schemas.QueryRequest{}, fmt.Errorf("%w: reply %q: give 1 (depths), 2 (lane states) or 3 (depths, 64-bit masks)", ErrBadRequest, v[0])
	}
	return req, nil
}

// BinaryReplyVersionOf returns the binary reply layout a request's URL query asks for:
// BinaryReplyStatesVersion for reply=2, BinaryReplyWideVersion for reply=3, else
// BinaryReplyVersion. DecodeBinaryRequest has checked the parameter.
func BinaryReplyVersionOf(rawQuery string) uint8 {
	if rawQuery == "" {
		return BinaryReplyVersion
	}
	q, _ := url.ParseQuery(rawQuery)
	switch q.Get("reply") {
	case "2":
		return BinaryReplyStatesVersion
	case "3":
		return BinaryReplyWideVersion
	}
	return BinaryReplyVersion
}
