package schemas

import (
	"time"
	"unicode/utf8"

	"github.com/ckf-stream/ckf-stream/ckf"
)

// Hand-written Avro codecs for the embedded QueryRequest and QueryReply
// schemas: the query path over Kafka decodes one request and encodes one
// reply per query, and goavro's native maps cost about ten allocations and a
// microsecond or more each way. Like the lane codec they must match goavro
// byte for byte (TestRoundTrip* compare both encoders) and on every input
// (FuzzDecodeQueryRequest and FuzzDecodeQueryReply compare both decoders).

// laneMatchMinSize is the smallest encoding of one LaneMatch: four fields of
// at least one byte.
const laneMatchMinSize = 4

// laneStateMinSize is the smallest encoding of one LaneState: lane, state and the age's union
// index.
const laneStateMinSize = 3

func appendOptString(dst []byte, s string) []byte {
	if s == "" {
		return append(dst, 0)
	}
	return appendString(append(dst, 2), s)
}

func appendQueryRequestBody(dst []byte, q *QueryRequest) []byte {
	dst = appendString(dst, q.CorrelationID)
	switch q.Input {
	case InputLocalBlockHashes:
		dst = appendBytes(append(dst, 0), q.Hashes)
	case InputTokenIDs:
		dst = appendBytes(append(dst, 2), q.Tokens)
		dst = appendLong(dst, int64(q.BlockSize))
		dst = appendOptString(dst, q.LoraName)
		dst = appendOptString(dst, q.CacheNamespace)
	}
	switch {
	case q.LaneMask64.Valid: // lane_mask is lane_mask64's low 16 bits
		dst = appendLong(append(dst, 2), int64(uint16(q.LaneMask64.Value)))
	case q.LaneMask.Valid:
		dst = appendLong(append(dst, 2), int64(q.LaneMask.Value))
	default:
		dst = append(dst, 0)
	}
	dst = appendOptString(dst, q.ReplyTopic)
	if q.ReplyPartition.Valid {
		dst = appendLong(append(dst, 2), int64(q.ReplyPartition.Value))
	} else {
		dst = append(dst, 0)
	}
	if q.RequestTime.IsZero() {
		dst = append(dst, 0)
	} else {
		dst = appendLong(append(dst, 2), q.RequestTime.UnixMicro())
	}
	if q.MaxAgeMillis.Valid {
		dst = appendLong(append(dst, 2), q.MaxAgeMillis.Value)
	} else {
		dst = append(dst, 0)
	}
	if len(q.BlockExtraKeys) == 0 {
		dst = append(dst, 0) // block_extra_keys: null
	} else {
		dst = appendBlockExtraKeys(dst, q.BlockExtraKeys)
	}
	if q.LaneMask64.Valid {
		return appendLong(append(dst, 2), int64(q.LaneMask64.Value))
	}
	return append(dst, 0) // lane_mask64: null
}

func (r *reader) optString() string {
	if r.optIndex() {
		return r.str()
	}
	return ""
}

func decodeQueryRequestBody(body []byte) (QueryRequest, error) {
	r := reader{b: body}
	var nf nat
	q := r.queryRequest(&nf)
	if err := r.end(&nf); err != nil {
		return QueryRequest{}, err
	}
	return q, nil
}

// queryRequest reads a QueryRequest body of the embedded schema. Wire
// failures stay in r; a value outside its field's range is reported through
// nf and left zero, or absent for the optional ones, so that QueryRoute never
// mistakes a negative reply partition for partition 0.
func (r *reader) queryRequest(nf *nat) QueryRequest {
	var q QueryRequest
	q.CorrelationID = r.str()
	switch r.index(2, "union") {
	case 0:
		q.Input = InputLocalBlockHashes
		q.Hashes = r.bytes()
	case 1:
		q.Input = InputTokenIDs
		q.Tokens = r.bytes()
		q.BlockSize = uint32(narrow(int64(r.int()), 0, maxInt32, "input.block_size", nf))
		q.LoraName = r.optString()
		q.CacheNamespace = r.optString()
	}
	if r.optIndex() {
		if m := int64(r.int()); narrow(m, 0, int64(AllLanes), "lane_mask", nf) == m {
			q.LaneMask = Some(uint16(m))
		}
	}
	q.ReplyTopic = r.optString()
	if r.optIndex() {
		if p := int64(r.int()); narrow(p, 0, maxInt32, "reply_partition", nf) == p {
			q.ReplyPartition = Some(int32(p))
		}
	}
	if r.optIndex() {
		q.RequestTime = time.UnixMicro(r.long()).UTC()
	}
	// max_age_ms: a body that ends before it was written with the previous revision of the v1
	// schema (same built-in id) and reads as null.
	if !r.failed() && r.remaining() > 0 && r.optIndex() {
		if a := r.long(); narrow(a, 0, maxInt64, "max_age_ms", nf) == a {
			q.MaxAgeMillis = Some(a)
		}
	}
	// block_extra_keys: likewise null from a body of an earlier revision.
	if !r.failed() && r.remaining() > 0 && r.optIndex() {
		q.BlockExtraKeys = r.blockExtraKeys(nf)
	}
	// lane_mask64: likewise; lane_mask must then be its low 16 bits, and it is the selection.
	if !r.failed() && r.remaining() > 0 && r.optIndex() {
		m := uint64(r.long())
		if q.LaneMask != Some(uint16(m)) && nf.kind == nil {
			nf.fail(ErrInvalidField, "lane_mask", "%s is not the low 16 bits of lane_mask64 %#x", laneMaskText(q.LaneMask), m)
		}
		q.LaneMask, q.LaneMask64 = Optional[uint16]{}, Some(m)
	}
	return q
}

// blockExtraKeys reads the array of block_extra_keys (after its union index): each item one
// block's canonical encoding. An item that is not one is reported through nf.
func (r *reader) blockExtraKeys(nf *nat) []ckf.ExtraKeys {
	var items [][]byte
	for {
		n := r.blockCount(1) // an item is at least its length byte
		if n == 0 {
			break
		}
		if items == nil {
			items = make([][]byte, 0, n)
		}
		for ; n > 0 && !r.failed(); n-- {
			items = append(items, r.bytes())
		}
	}
	if r.failed() {
		return nil
	}
	keys, err := parseBlockExtraKeys(items)
	if err != nil {
		nf.fail(ErrInvalidField, "block_extra_keys", "%v", err)
		return nil
	}
	return keys
}

// maxTopicNameBytes is Kafka's limit on the length of a topic name.
const maxTopicNameBytes = 249

// queryRoute reads the routing fields of a QueryRequest body of the embedded
// schema; see Codec.QueryRoute.
func queryRoute(body []byte) (QueryRoute, bool) {
	r := reader{b: body}
	var nf nat // range violations are the caller's error, not a reason to drop the route
	q := r.queryRequest(&nf)
	_ = r.end(&nf)
	if r.failed() {
		return QueryRoute{}, false
	}
	id, truncated, ok := FitCorrelationID(q.CorrelationID)
	if !ok {
		return QueryRoute{}, false
	}
	rt := QueryRoute{CorrelationID: id, IDTruncated: truncated, ReplyPartition: q.ReplyPartition}
	if len(q.ReplyTopic) <= maxTopicNameBytes && utf8.ValidString(q.ReplyTopic) {
		rt.ReplyTopic = q.ReplyTopic
	}
	return rt, true
}

func appendQueryReplyBody(dst []byte, q *QueryReply) []byte {
	dst = appendString(dst, q.CorrelationID)
	dst = appendLong(dst, int64(q.Status))
	dst = appendOptString(dst, q.ErrorMessage)
	dst = appendLong(dst, int64(q.ReadyLanes))
	dst = appendLong(dst, int64(q.QueryBlocks))
	if n := len(q.Lanes); n > 0 {
		dst = appendLong(dst, int64(n))
		for i := range q.Lanes {
			m := &q.Lanes[i]
			dst = appendLong(dst, int64(m.Lane))
			dst = appendU64(dst, m.DcID)
			dst = appendString(dst, m.Pool)
			dst = appendLong(dst, int64(m.Depth))
		}
	}
	dst = append(dst, 0) // end of the lanes array
	dst = appendLong(dst, q.ReplyTime.UnixMicro())
	dst = appendLong(dst, int64(q.IncompleteLanes))
	if n := len(q.LaneStates); n > 0 {
		dst = appendLong(dst, int64(n))
		for i := range q.LaneStates {
			st := &q.LaneStates[i]
			dst = appendLong(dst, int64(st.Lane))
			dst = appendLong(dst, int64(st.State))
			if st.AgeMillis.Valid {
				dst = appendLong(append(dst, 2), st.AgeMillis.Value)
			} else {
				dst = append(dst, 0)
			}
		}
	}
	dst = append(dst, 0) // end of the lane_states array
	dst = appendOptMask64(dst, q.ReadyLanes64)
	return appendOptMask64(dst, q.IncompleteLanes64)
}

// appendOptMask64 appends a 64-bit lane mask field that is null when 0.
func appendOptMask64(dst []byte, m uint64) []byte {
	if m == 0 {
		return append(dst, 0)
	}
	return appendLong(append(dst, 2), int64(m))
}

func decodeQueryReplyBody(body []byte) (QueryReply, error) {
	r := reader{b: body}
	var nf nat
	var q QueryReply
	q.CorrelationID = r.str()
	q.Status = QueryStatus(r.index(len(queryStatusSymbols), "enum"))
	if r.optIndex() {
		q.ErrorMessage = r.str()
	}
	q.ReadyLanes = uint16(narrow(int64(r.int()), 0, int64(AllLanes), "ready_lanes", &nf))
	q.QueryBlocks = uint32(narrow(int64(r.int()), 0, maxInt32, "query_blocks", &nf))
	for {
		n := r.blockCount(laneMatchMinSize)
		if n == 0 {
			break
		}
		if q.Lanes == nil {
			q.Lanes = make([]LaneMatch, 0, n)
		}
		for ; n > 0 && !r.failed(); n-- {
			q.Lanes = append(q.Lanes, LaneMatch{
				Lane:  uint8(narrow(int64(r.int()), 0, ckf.MaxLanes-1, "lanes.lane", &nf)),
				DcID:  r.u64(),
				Pool:  r.str(),
				Depth: uint32(narrow(int64(r.int()), 0, maxInt32, "lanes.depth", &nf)),
			})
		}
	}
	q.ReplyTime = time.UnixMicro(r.long()).UTC()
	// incomplete_lanes: a body that ends before it was written with the previous revision of the
	// v1 schema (same built-in id) and reads as the default, 0.
	if !r.failed() && r.remaining() > 0 {
		q.IncompleteLanes = uint16(narrow(int64(r.int()), 0, int64(AllLanes), "incomplete_lanes", &nf))
	}
	// lane_states: likewise absent (empty) from a body of an earlier revision; once begun, the
	// array runs to its terminating empty block.
	for started := !r.failed() && r.remaining() > 0; started; {
		n := r.blockCount(laneStateMinSize)
		if n == 0 {
			break
		}
		if q.LaneStates == nil {
			q.LaneStates = make([]LaneState, 0, n)
		}
		for ; n > 0 && !r.failed(); n-- {
			st := LaneState{Lane: uint8(narrow(int64(r.int()), 0, ckf.MaxLanes-1, "lane_states.lane", &nf))}
			st.State = LaneAnswerState(r.index(len(laneAnswerStateSymbols), "enum"))
			if r.optIndex() {
				if a := r.long(); narrow(a, 0, maxInt64, "lane_states.age_ms", &nf) == a {
					st.AgeMillis = Some(a)
				}
			}
			q.LaneStates = append(q.LaneStates, st)
		}
	}
	// ready_lanes64 and incomplete_lanes64: null from a body of an earlier revision.
	if !r.failed() && r.remaining() > 0 && r.optIndex() {
		q.ReadyLanes64 = uint64(r.long())
	}
	if !r.failed() && r.remaining() > 0 && r.optIndex() {
		q.IncompleteLanes64 = uint64(r.long())
	}
	if err := r.end(&nf); err != nil {
		return QueryReply{}, err
	}
	return q, nil
}

// end finishes a hand-written decode: trailing bytes are malformed, wire
// errors take precedence over field-range errors (as on the goavro path,
// where the whole body is checked before any field is converted).
func (r *reader) end(nf *nat) error {
	if !r.failed() && r.remaining() != 0 {
		r.fail(ErrMalformed, itoa(r.remaining())+" trailing bytes")
	}
	if r.failed() {
		return wireError(r)
	}
	if nf.kind != nil {
		return &DecodeError{Kind: nf.kind, Field: nf.field, Detail: nf.detail}
	}
	return nil
}
