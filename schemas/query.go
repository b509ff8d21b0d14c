package schemas

import (
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/ckf-stream/ckf-stream/ckf"
)

// String methods of the enums below are generated from the constants' line
// comments, which are the Avro symbols (or, for union branches, record
// names); run make generate after changing a constant.
//go:generate go run golang.org/x/tools/cmd/stringer@v0.52.0 -type=QueryInputKind,QueryStatus,LaneAnswerState -linecomment -output=query_string.go

// AllLanes is the lane mask with every one of the ckf.LaneCount lanes set (lane masks are 16
// bits because ckf.LaneCount is 16; the constant expression stops compiling if it grows).
const AllLanes uint16 = 1<<ckf.LaneCount - 1

// MaxCorrelationIDBytes bounds QueryRequest.CorrelationID.
const MaxCorrelationIDBytes = 256

// MaxBlockSize bounds TokenIDs block sizes.
const MaxBlockSize = 1 << 16

// ValidBlockSize reports whether n is a legal block size of a token-id query
// (QueryRequest.BlockSize): 1 to MaxBlockSize tokens. It is the one home of
// the rule: the codec, the answerer (streams/query.Answerer) and the HTTP
// contract (queryapi.DecodeRequest) apply it, each naming the field as its
// caller knows it.
func ValidBlockSize(n uint32) bool { return n >= 1 && n <= MaxBlockSize }

// CheckBlockExtraKeys applies the rules of a query's per-block extra keys, of
// which there are entries (block i's in entry i): none at all is always
// legal; otherwise q must be a token-id query with a valid block size, and
// entries may not exceed the number of windows of BlockSize tokens in Tokens,
// a trailing partial window counted (one entry per block). The codec
// (QueryRequest.BlockExtraKeys and WorkerQueryRequest.BlockExtraKeys), the
// answerer (streams/query.Answerer.AnswerExtra) and the HTTP contract
// (queryapi.DecodeRequest, block_extra_keys) apply this one rule. The error
// is the rule's text alone, for the caller to wrap; it allocates only then.
func CheckBlockExtraKeys(q *QueryRequest, entries int) error {
	if entries == 0 {
		return nil
	}
	if q.Input != InputTokenIDs {
		return errors.New("block_extra_keys go with token_ids, not local_block_hashes")
	}
	if !ValidBlockSize(q.BlockSize) {
		return fmt.Errorf("block_extra_keys need a block_size in [1,%d], got %d", MaxBlockSize, q.BlockSize)
	}
	tokens := q.Tokens.Len()
	if windows := (tokens + int(q.BlockSize) - 1) / int(q.BlockSize); entries > windows {
		return fmt.Errorf("block_extra_keys has %d entries for %d token ids in blocks of %d (at most one per block: %d)",
			entries, tokens, q.BlockSize, windows)
	}
	return nil
}

// QueryInputKind says which branch of QueryRequest.input a request carries.
type QueryInputKind uint8

const (
	// InputLocalBlockHashes: QueryRequest.Hashes holds one local block hash
	// per block.
	InputLocalBlockHashes QueryInputKind = iota + 1 // LocalBlockHashes
	// InputTokenIDs: QueryRequest.Tokens and BlockSize (and the optional
	// salts) describe the prompt.
	InputTokenIDs // TokenIds
)

// QueryRequest is a prefix-match query (Avro record QueryRequest).
type QueryRequest struct {
	CorrelationID string
	Input         QueryInputKind
	// Hashes is set when Input is InputLocalBlockHashes.
	Hashes PackedU64
	// Tokens, BlockSize, LoraName and CacheNamespace are set when Input is
	// InputTokenIDs. Empty salts travel as null.
	Tokens         PackedU32
	BlockSize      uint32
	LoraName       string
	CacheNamespace string
	// LaneMask selects lanes, bit i = lane i (0..15); absent (the zero value) means
	// every lane. A request with LaneMask64 leaves it absent: on the wire lane_mask is then
	// LaneMask64's low 16 bits (and a body whose lane_mask is not is refused).
	LaneMask Optional[uint16]
	// ReplyTopic is empty (null on the wire) for the indexer's default.
	ReplyTopic string
	// ReplyPartition is absent (the zero value) to let the indexer choose;
	// a present value must be non-negative.
	ReplyPartition Optional[int32]
	// RequestTime is the zero Time (null on the wire) when not set.
	RequestTime time.Time
	// MaxAgeMillis is the oldest lane state the router accepts, in milliseconds: older lanes are
	// answered LaneStale, without a depth. Absent (null on the wire) accepts any age the
	// indexer's freshness policy keeps; a present value must be non-negative.
	MaxAgeMillis Optional[int64]
	// BlockExtraKeys (with token ids only) gives block i's extra keys in entry i, as
	// ckf.TokenBlockHashExtra hashes them: the values the engine mixed into that block's hash
	// besides its tokens, in the engine's order, the LoRA name left out (LoraName salts it);
	// a nil or empty entry is a block without. At most one entry per block, a trailing
	// partial block counted (CheckBlockExtraKeys). Empty (null on the wire) for none; on the
	// wire each entry travels as its canonical encoding (ckf.ExtraKeys.AppendCanonical).
	BlockExtraKeys []ckf.ExtraKeys
	// LaneMask64 selects lanes among up to 64 (consumer §16), bit i = lane i (all bits: every
	// lane); absent (null on the wire), LaneMask selects. Its presence says the writer reads
	// replies of up to 64 lanes (QueryReply.ReadyLanes64): an indexer that serves lanes beyond
	// 15 refuses a request without it whose selection reaches beyond lane 15 (see Lanes). The
	// wire's lane_mask carries its low 16 bits, for indexers of an earlier revision.
	LaneMask64 Optional[uint64]
}

// AllLanes64 is LaneMask64's "every lane".
const AllLanes64 = ^uint64(0)

// Lanes returns the lanes q selects as a 64-bit mask (AllLanes64 for every lane) and whether
// the writer reads replies of up to 64 lanes: LaneMask64 when present (wide), else LaneMask, else
// every lane (neither wide).
func (q *QueryRequest) Lanes() (mask uint64, wide bool) {
	if m, ok := q.LaneMask64.Get(); ok {
		return m, true
	}
	if m, ok := q.LaneMask.Get(); ok {
		return uint64(m), false
	}
	return AllLanes64, false
}

// laneMaskText renders an optional 16-bit lane mask for a message.
func laneMaskText(m Optional[uint16]) string {
	if v, ok := m.Get(); ok {
		return fmt.Sprintf("%#x", v)
	}
	return "null"
}

// QueryRoute is where the answer to a query request goes: the fields of a
// QueryRequest a reply is addressed with.
type QueryRoute struct {
	// CorrelationID is the request's id, cut to its longest prefix of at
	// most MaxCorrelationIDBytes that ends on a character boundary when the
	// id is longer (IDTruncated is then true), so a reply can still carry
	// it.
	CorrelationID string
	// IDTruncated says CorrelationID is a prefix of a longer id.
	IDTruncated bool
	// ReplyTopic is empty for the indexer's default reply topic.
	ReplyTopic string
	// ReplyPartition is absent to let the indexer choose.
	ReplyPartition Optional[int32]
}

// FitCorrelationID returns the correlation id a reply to a request with id
// may carry: id itself when it is valid (1..MaxCorrelationIDBytes bytes of
// UTF-8); its longest prefix of at most MaxCorrelationIDBytes bytes that
// ends on a character boundary, with truncated true, when id is valid UTF-8
// but too long; and ok false when id is empty or not UTF-8, which leaves a
// reply nothing to be correlated by.
func FitCorrelationID(id string) (fit string, truncated, ok bool) {
	if id == "" || !utf8.ValidString(id) {
		return "", false, false
	}
	if len(id) <= MaxCorrelationIDBytes {
		return id, false, true
	}
	n := MaxCorrelationIDBytes
	for n > 0 && !utf8.RuneStart(id[n]) {
		n--
	}
	return id[:n], true, true
}

func (q *QueryRequest) validate() error {
	if n := len(q.CorrelationID); n == 0 || n > MaxCorrelationIDBytes || !utf8.ValidString(q.CorrelationID) {
		return invalid("correlation_id", "must be 1..%d bytes of UTF-8, got %d bytes", MaxCorrelationIDBytes, n)
	}
	switch q.Input {
	case InputLocalBlockHashes:
		if len(q.Hashes)%WordSize != 0 {
			return invalid("input.hashes", "length %d is not a multiple of %d", len(q.Hashes), WordSize)
		}
	case InputTokenIDs:
		if len(q.Tokens)%TokenSize != 0 {
			return invalid("input.tokens", "length %d is not a multiple of %d", len(q.Tokens), TokenSize)
		}
		if !ValidBlockSize(q.BlockSize) {
			return invalid("input.block_size", "%d is not in [1, %d]", q.BlockSize, MaxBlockSize)
		}
	default:
		return invalid("input", "unknown input kind %d", q.Input)
	}
	if q.ReplyPartition.Valid && q.ReplyPartition.Value < 0 {
		return invalid("reply_partition", "%d is negative", q.ReplyPartition.Value)
	}
	if q.MaxAgeMillis.Valid && q.MaxAgeMillis.Value < 0 {
		return invalid("max_age_ms", "%d is negative", q.MaxAgeMillis.Value)
	}
	if q.LaneMask64.Valid && q.LaneMask.Valid && q.LaneMask.Value != uint16(q.LaneMask64.Value) {
		return invalid("lane_mask", "%#x is not the low 16 bits of lane_mask64 %#x", q.LaneMask.Value, q.LaneMask64.Value)
	}
	if len(q.BlockExtraKeys) == 0 {
		return nil
	}
	return checkBlockExtraKeys(q, q.BlockExtraKeys)
}

// QueryStatus is the outcome of a query (Avro enum QueryStatus).
type QueryStatus uint8

const (
	// QueryOK: QueryReply.Lanes holds the answer.
	QueryOK QueryStatus = iota // OK
	// QueryUnavailable: no requested lane was ready.
	QueryUnavailable // UNAVAILABLE
	// QueryInvalidRequest: the request was rejected; ErrorMessage says why.
	QueryInvalidRequest // INVALID_REQUEST
)

var queryStatusSymbols = enumSymbols[QueryStatus]()

// QueryReply answers one QueryRequest (Avro record QueryReply).
type QueryReply struct {
	CorrelationID string
	Status        QueryStatus
	// ErrorMessage is empty (null on the wire) when Status is QueryOK.
	ErrorMessage string
	ReadyLanes   uint16
	QueryBlocks  uint32
	// Lanes is in strictly ascending lane order.
	Lanes     []LaneMatch
	ReplyTime time.Time
	// IncompleteLanes has bit l set when lane l's depth may be under-reported: its DC holds
	// blocks the filter omitted for capacity. A subset of ReadyLanes.
	IncompleteLanes uint16
	// LaneStates holds one entry per configured lane the request selected, in strictly
	// ascending lane order, whatever its state; Lanes holds the depths of the LaneExact and
	// LaneIncomplete ones. Empty for an invalid request (and from writers of an earlier
	// revision).
	LaneStates []LaneState
	// ReadyLanes64 and IncompleteLanes64 are the whole masks of ReadyLanes and IncompleteLanes
	// when they reach beyond lane 15 (consumer §16), their low 16 bits equal to those; 0 (null
	// on the wire) when the 16-bit fields hold the whole masks. Read and set the masks with
	// ReadyMask, IncompleteMask and SetMasks.
	ReadyLanes64      uint64
	IncompleteLanes64 uint64
}

// ReadyMask returns the whole readiness mask of the reply: ReadyLanes64 when set, else
// ReadyLanes.
func (r *QueryReply) ReadyMask() uint64 {
	if r.ReadyLanes64 != 0 {
		return r.ReadyLanes64
	}
	return uint64(r.ReadyLanes)
}

// IncompleteMask returns the whole mask of the lanes whose depth may be short:
// IncompleteLanes64 when set, else IncompleteLanes.
func (r *QueryReply) IncompleteMask() uint64 {
	if r.IncompleteLanes64 != 0 {
		return r.IncompleteLanes64
	}
	return uint64(r.IncompleteLanes)
}

// SetMasks sets the reply's readiness and incomplete masks: the 16-bit fields to their low 16
// bits, and the 64-bit ones to the whole masks when a lane beyond 15 is set (0 otherwise).
func (r *QueryReply) SetMasks(ready, incomplete uint64) {
	r.ReadyLanes, r.IncompleteLanes = uint16(ready), uint16(incomplete)
	r.ReadyLanes64, r.IncompleteLanes64 = 0, 0
	if ready > uint64(AllLanes) {
		r.ReadyLanes64 = ready
	}
	if incomplete > uint64(AllLanes) {
		r.IncompleteLanes64 = incomplete
	}
}

// LaneAnswerState is what one lane's answer is worth (Avro enum LaneAnswerState). A symbol a
// reader does not know reads as LaneStateUnknown, the schema's default.
type LaneAnswerState uint8

const (
	// LaneStateUnknown: a state of a later revision of the schema than this reader's; treat
	// the lane as LaneUnavailable.
	LaneStateUnknown LaneAnswerState = iota // UNKNOWN
	// LaneExact: the lane was searched; its depth is exact for the lane's age.
	LaneExact // EXACT
	// LaneIncomplete: the lane was searched, but its DC holds blocks its filter omits for
	// capacity, or sources whose engine history was lost: the depth may be short.
	LaneIncomplete // INCOMPLETE
	// LaneStale: the lane is ready but older than the request's MaxAgeMillis or the indexer's
	// freshness policy allows; it has no depth.
	LaneStale // STALE
	// LaneUnavailable: the lane is not serving (no snapshot installed, recovering, drained); it
	// has no depth.
	LaneUnavailable // UNAVAILABLE
)

var laneAnswerStateSymbols = enumSymbols[LaneAnswerState]()

// HasDepth reports whether a lane in state s was searched, so that the reply's Lanes holds its
// depth.
func (s LaneAnswerState) HasDepth() bool { return s == LaneExact || s == LaneIncomplete }

// LaneState is the state of one lane in one answer (Avro record LaneState).
type LaneState struct {
	Lane  uint8
	State LaneAnswerState
	// AgeMillis is the reply time minus the time up to which the lane reflects its DC's KV
	// events (LaneRecord.AsOf), in milliseconds, never negative; absent when the lane has no
	// state yet.
	AgeMillis Optional[int64]
}

// LaneMatch is the prefix depth found on one lane (Avro record LaneMatch).
type LaneMatch struct {
	Lane  uint8
	DcID  uint64
	Pool  string
	Depth uint32
}

func (r *QueryReply) validate() error {
	if len(r.CorrelationID) > MaxCorrelationIDBytes {
		return invalid("correlation_id", "%d bytes exceed %d", len(r.CorrelationID), MaxCorrelationIDBytes)
	}
	if r.Status > QueryInvalidRequest {
		return invalid("status", "unknown status %d", r.Status)
	}
	if r.QueryBlocks > maxInt32 {
		return invalid("query_blocks", "%d does not fit an Avro int", r.QueryBlocks)
	}
	if r.ReadyLanes64 != 0 && uint16(r.ReadyLanes64) != r.ReadyLanes {
		return invalid("ready_lanes", "%#x is not the low 16 bits of ready_lanes64 %#x", r.ReadyLanes, r.ReadyLanes64)
	}
	if r.IncompleteLanes64 != 0 && uint16(r.IncompleteLanes64) != r.IncompleteLanes {
		return invalid("incomplete_lanes", "%#x is not the low 16 bits of incomplete_lanes64 %#x", r.IncompleteLanes, r.IncompleteLanes64)
	}
	if r.IncompleteMask()&^r.ReadyMask() != 0 {
		return invalid("incomplete_lanes", "%#x is not a subset of ready_lanes %#x", r.IncompleteMask(), r.ReadyMask())
	}
	if r.Status != QueryOK && len(r.Lanes) != 0 {
		return invalid("lanes", "must be empty when status is %s", r.Status)
	}
	prev := -1
	for i, m := range r.Lanes {
		if m.Lane >= ckf.MaxLanes || int(m.Lane) <= prev {
			return invalid("lanes", "entry %d: lane %d is out of range or not ascending", i, m.Lane)
		}
		if m.Depth > r.QueryBlocks {
			return invalid("lanes", "entry %d: depth %d exceeds query_blocks %d", i, m.Depth, r.QueryBlocks)
		}
		prev = int(m.Lane)
	}
	prev = -1
	for i, s := range r.LaneStates {
		if s.Lane >= ckf.MaxLanes || int(s.Lane) <= prev {
			return invalid("lane_states", "entry %d: lane %d is out of range or not ascending", i, s.Lane)
		}
		if s.State > LaneUnavailable {
			return invalid("lane_states", "entry %d: unknown state %d", i, s.State)
		}
		if s.AgeMillis.Valid && s.AgeMillis.Value < 0 {
			return invalid("lane_states", "entry %d: age %d ms is negative", i, s.AgeMillis.Value)
		}
		prev = int(s.Lane)
	}
	return nil
}
