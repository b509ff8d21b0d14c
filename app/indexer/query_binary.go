package indexer

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"mime"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/ckf-stream/ckf-stream/streams/query"
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
	// maxBinaryReplyBytes is the longest binary reply: every lane answering.
	maxBinaryReplyBytes = BinaryReplyHeaderBytes + 4*16
)

// BinaryReply is a decoded binary reply (DecodeBinaryReply): the JSON reply's fields without the
// lanes' DC ids and pools, which GET /v1/lanes gives once for all queries.
type BinaryReply struct {
	QueryBlocks     uint32
	ReadyLanes      uint16
	IncompleteLanes uint16
	// Depths holds one depth per bit of ReadyLanes, in lane order.
	Depths []uint32
}

// Depth returns lane l's depth and whether lane l answered.
func (r *BinaryReply) Depth(l uint8) (uint32, bool) {
	if l >= 16 || r.ReadyLanes&(1<<l) == 0 {
		return 0, false
	}
	return r.Depths[bits.OnesCount16(r.ReadyLanes&(1<<l-1))], true
}

// ErrBinaryReply is the kind of every error of DecodeBinaryReply.
var ErrBinaryReply = errors.New("indexer: malformed binary prefix-match reply")

// AppendBinaryReply appends the binary encoding of an OK reply to dst: version, number of depths,
// ready and incomplete lane masks, a reserved zero u16, query_blocks, then one u32 depth per
// lane of Lanes (ascending lane order, one per bit of ReadyLanes), all little-endian.
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

// DecodeBinaryReply decodes a binary reply body. It checks everything the layout fixes: the
// version, the length against the count of depths, the count against the ready mask, the
// incomplete mask within the ready one, the reserved field zero. Errors wrap ErrBinaryReply.
func DecodeBinaryReply(b []byte) (BinaryReply, error) {
	if len(b) < BinaryReplyHeaderBytes {
		return BinaryReply{}, fmt.Errorf("%w: %d bytes, the header alone is %d", ErrBinaryReply, len(b), BinaryReplyHeaderBytes)
	}
	if b[0] != BinaryReplyVersion {
		return BinaryReply{}, fmt.Errorf("%w: version %d, want %d", ErrBinaryReply, b[0], BinaryReplyVersion)
	}
	n := int(b[1])
	r := BinaryReply{
		ReadyLanes:      binary.LittleEndian.Uint16(b[2:]),
		IncompleteLanes: binary.LittleEndian.Uint16(b[4:]),
		QueryBlocks:     binary.LittleEndian.Uint32(b[8:]),
	}
	switch {
	case binary.LittleEndian.Uint16(b[6:]) != 0:
		return BinaryReply{}, fmt.Errorf("%w: reserved field %d, want 0", ErrBinaryReply, binary.LittleEndian.Uint16(b[6:]))
	case n != bits.OnesCount16(r.ReadyLanes):
		return BinaryReply{}, fmt.Errorf("%w: %d depths for ready lanes %#04x", ErrBinaryReply, n, r.ReadyLanes)
	case len(b) != BinaryReplyHeaderBytes+4*n:
		return BinaryReply{}, fmt.Errorf("%w: %d bytes for %d depths, want %d", ErrBinaryReply, len(b), n, BinaryReplyHeaderBytes+4*n)
	case r.IncompleteLanes&^r.ReadyLanes != 0:
		return BinaryReply{}, fmt.Errorf("%w: incomplete lanes %#04x outside ready lanes %#04x", ErrBinaryReply, r.IncompleteLanes, r.ReadyLanes)
	}
	r.Depths = make([]uint32, n)
	for i := range r.Depths {
		r.Depths[i] = binary.LittleEndian.Uint32(b[BinaryReplyHeaderBytes+4*i:])
	}
	return r, nil
}

// AppendBinaryRequest appends the binary request body of the given local block hashes to dst.
func AppendBinaryRequest(dst []byte, hashes []uint64) []byte {
	for _, h := range hashes {
		dst = binary.LittleEndian.AppendUint64(dst, h)
	}
	return dst
}

// errBinaryLength: a binary body that is not a whole number of 8-byte hashes (answered 400).
var errBinaryLength = errors.New("binary body length")

// decodeBinaryRequest is the binary body's rule: a whole number of 8-byte hashes, any number of
// them (none is an empty query) up to the body limit, which the reader has applied. The result
// aliases body.
func decodeBinaryRequest(body []byte) (schemas.PackedU64, error) {
	if len(body)%schemas.WordSize != 0 {
		return nil, fmt.Errorf("%w: %w: %d bytes is not a whole number of %d-byte little-endian block hashes",
			errBadRequest, errBinaryLength, len(body), schemas.WordSize)
	}
	return schemas.PackedU64(body), nil
}

// isBinaryRequest reports whether r's Content-Type is BinaryContentType (without parameters).
func isBinaryRequest(r *http.Request) bool {
	ct := r.Header["Content-Type"]
	if len(ct) != 1 {
		return false
	}
	if ct[0] == BinaryContentType {
		return true
	}
	mt, params, err := mime.ParseMediaType(ct[0])
	return err == nil && mt == BinaryContentType && len(params) == 0
}

// binaryScratch is one binary request's working memory, pooled: the body, the reply and the
// Answerer's scratch. With it, a binary query allocates nothing once the pool is warm, except
// the correlation id the server makes up when the request has none.
type binaryScratch struct {
	body []byte
	out  [maxBinaryReplyBytes]byte
	sc   query.QueryScratch
}

var binaryScratches = sync.Pool{New: func() any { return new(binaryScratch) }}

// Header values of a binary reply, shared: net/http only reads them.
var (
	binaryContentTypeValue = []string{BinaryContentType}
	binaryLengthValues     = func() (v [maxBinaryReplyBytes + 1][]string) {
		for i := range v {
			v[i] = []string{strconv.Itoa(i)}
		}
		return v
	}()
)

// readBody reads r's body into buf, refusing more than MaxRequestBytes with the
// *http.MaxBytesError that the JSON path also turns into 413.
func readBody(w http.ResponseWriter, r *http.Request, buf []byte) ([]byte, error) {
	if r.ContentLength > MaxRequestBytes {
		return buf, &http.MaxBytesError{Limit: MaxRequestBytes}
	}
	if r.ContentLength > 0 && int64(cap(buf)) < r.ContentLength+1 {
		buf = make([]byte, 0, r.ContentLength+1) // +1: the read that sees EOF needs room
	}
	body := http.MaxBytesReader(w, r.Body, MaxRequestBytes)
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := body.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
	}
}

// serveBinary answers a binary request (isBinaryRequest). Errors and non-OK answers are the JSON
// path's JSON bodies and statuses.
func (a *API) serveBinary(w http.ResponseWriter, r *http.Request, start time.Time) {
	bs := binaryScratches.Get().(*binaryScratch)
	defer binaryScratches.Put(bs)
	body, err := readBody(w, r, bs.body[:0])
	bs.body = body[:0]
	var req schemas.QueryRequest
	if err == nil {
		req.Hashes, err = decodeBinaryRequest(body)
	}
	if err == nil {
		err = a.binaryRequestFields(r, &req)
	}
	if err != nil {
		var tooBig *http.MaxBytesError
		if !errors.As(err, &tooBig) && !errors.Is(err, errBadRequest) {
			err = fmt.Errorf("%w: reading the body: %v", errBadRequest, err)
		}
		a.refuse(w, start, err)
		return
	}
	answerStart := time.Now()
	reply := a.ans.Answer(&req, &bs.sc)
	a.m.answerLatency.RecordDuration(time.Since(answerStart))
	a.m.replies[reply.Status].Inc(1)
	if reply.Status != schemas.QueryOK {
		a.writeReply(w, &reply)
		a.m.latency.RecordDuration(time.Since(start))
		return
	}
	out := AppendBinaryReply(bs.out[:0], &reply)
	h := w.Header()
	h["Content-Type"] = binaryContentTypeValue
	h["Content-Length"] = binaryLengthValues[len(out)]
	if id := r.Header[CorrelationIDHeader]; len(id) == 1 {
		h[CorrelationIDHeader] = id
	}
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(out)
	a.m.latency.RecordDuration(time.Since(start))
}

// binaryRequestFields fills what a binary request carries outside its body: the correlation id
// (CorrelationIDHeader; made up when absent, as for a JSON body without one) and the lane mask
// (query parameter lane_mask, 0..65535; absent = every lane).
func (a *API) binaryRequestFields(r *http.Request, req *schemas.QueryRequest) error {
	req.Input = schemas.InputLocalBlockHashes
	switch ids := r.Header[CorrelationIDHeader]; len(ids) {
	case 0:
		req.CorrelationID = "http-" + strconv.FormatUint(a.ids.Add(1), 10)
	case 1:
		req.CorrelationID = ids[0]
	default:
		return fmt.Errorf("%w: %d %s headers: give at most one", errBadRequest, len(ids), CorrelationIDHeader)
	}
	if r.URL.RawQuery == "" {
		return nil
	}
	q := r.URL.Query()
	for k := range q {
		if k != "lane_mask" {
			return fmt.Errorf("%w: query parameter %q: a binary request takes only lane_mask", errBadRequest, k)
		}
	}
	if v := q["lane_mask"]; len(v) > 0 {
		if len(v) > 1 {
			return fmt.Errorf("%w: lane_mask given %d times: give it at most once", errBadRequest, len(v))
		}
		m, err := strconv.ParseUint(v[0], 10, 16)
		if err != nil {
			return fmt.Errorf("%w: lane_mask %q is not a 16-bit lane mask (0..65535)", errBadRequest, v[0])
		}
		req.LaneMask = schemas.Some(uint16(m))
	}
	return nil
}
