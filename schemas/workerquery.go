package schemas

import (
	"encoding/binary"
	"time"
	"unicode/utf8"

	"github.com/ckf-stream/ckf-stream/ckf"
)

// The worker stage's request and reply (worker_query_request.avsc, worker_query_reply.avsc):
// the Kafka form of POST /v1/worker-matches (workerapi). They travel at a router's query rate,
// far below the lane and KV event rates, so they have no hand-written codec: goavro encodes and
// decodes them, as it does the lane events and dead letters (tens of microseconds a record).

// MaxWorkerTopK bounds WorkerQueryRequest.TopK (workerapi.MaxTopK takes its value from here).
const MaxWorkerTopK = 1 << 20

// MaxWorkerReplySources bounds the sources of one WorkerQueryReply: 32,768 sources of
// WorkerSourceBytes are 896 KiB, so a reply fits Kafka's default message size (1 MiB,
// max.message.bytes) with room for the rest of the record. The worker stage answers a request
// whose top_k is 0 or larger with the best MaxWorkerReplySources sources.
const MaxWorkerReplySources = 1 << 15

// WorkerSourceBytes is the packed size of one WorkerSource in WorkerQueryReply.sources:
// worker_id u64, dp_rank u32, and the device, host_pinned, disk and external depths as u32,
// little-endian.
const WorkerSourceBytes = 28

// WorkerQueryRequest is a worker-level match query (Avro record WorkerQueryRequest).
type WorkerQueryRequest struct {
	CorrelationID string
	Input         QueryInputKind
	// Hashes is set when Input is InputLocalBlockHashes.
	Hashes PackedU64
	// Tokens, BlockSize, LoraName and CacheNamespace are set when Input is InputTokenIDs. Empty
	// salts travel as null.
	Tokens         PackedU32
	BlockSize      uint32
	LoraName       string
	CacheNamespace string
	// DcIDs selects the DCs that answer: nil (null on the wire) selects every DC, an empty
	// non-nil slice none.
	DcIDs []uint64
	// TopK keeps the TopK best sources; 0 keeps every source with a depth above 0. At most
	// MaxWorkerTopK.
	TopK uint32
	// ReplyTopic is empty (null on the wire) for the worker stage's default.
	ReplyTopic string
	// ReplyPartition is absent to let the worker stage partition by correlation id.
	ReplyPartition Optional[int32]
	// RequestTime is the zero Time (null on the wire) when not set.
	RequestTime time.Time
	// BlockExtraKeys are the blocks' extra keys of a token query, as QueryRequest.BlockExtraKeys
	// carries them.
	BlockExtraKeys []ckf.ExtraKeys
	// MaxAgeMillis is the oldest DC state the router accepts, in milliseconds: a DC whose age
	// (WorkerQueryReply.AgeMillis) is larger, or unknown, is answered LaneStale without sources.
	// Absent (null on the wire) accepts any age; a present value must be non-negative.
	MaxAgeMillis Optional[int64]
}

// Prompt returns the request's prompt as a QueryRequest (correlation id, input with the blocks'
// extra keys, reply address and age bound; no lane mask), the form the prefix-match rules and
// the HTTP contract (workerapi.Request.Query) take.
func (q *WorkerQueryRequest) Prompt() QueryRequest {
	return QueryRequest{CorrelationID: q.CorrelationID, Input: q.Input, Hashes: q.Hashes, Tokens: q.Tokens,
		BlockSize: q.BlockSize, LoraName: q.LoraName, CacheNamespace: q.CacheNamespace,
		ReplyTopic: q.ReplyTopic, ReplyPartition: q.ReplyPartition, RequestTime: q.RequestTime, MaxAgeMillis: q.MaxAgeMillis,
		BlockExtraKeys: q.BlockExtraKeys}
}

func (q *WorkerQueryRequest) validate() error {
	p := q.Prompt()
	if err := p.validate(); err != nil {
		return err
	}
	if q.TopK > MaxWorkerTopK {
		return invalid("top_k", "%d is not in [0, %d]", q.TopK, MaxWorkerTopK)
	}
	return nil
}

// WorkerSource is one source's answer in a WorkerQueryReply: its device depth and the lower-tier
// runs that continue the chain (workers §5 in docs/spec/workers.md).
type WorkerSource struct {
	WorkerID   uint64
	DpRank     uint32
	Device     uint32
	HostPinned uint32
	Disk       uint32
	External   uint32
}

// WorkerQueryReply is one DC's answer to a WorkerQueryRequest (Avro record WorkerQueryReply).
type WorkerQueryReply struct {
	CorrelationID string
	Status        QueryStatus
	// ErrorMessage is empty (null on the wire) when Status is QueryOK.
	ErrorMessage string
	DcID         uint64
	QueryBlocks  uint32
	// Sources is best first (workers §5 in docs/spec/workers.md); empty unless Status is QueryOK.
	Sources []WorkerSource
	// AgeMillis is the DC's age in this answer: ReplyTime minus the time up to which the replica
	// reflects the DC's KV events (workers §10 in docs/spec/workers.md), in milliseconds, never
	// negative; absent while the replica knows no such time.
	AgeMillis  Optional[int64]
	LagRecords int64
	ReplyTime  time.Time
	// State is what the answer is worth (workers §10 in docs/spec/workers.md): LaneExact or
	// LaneIncomplete (may be short: a source lost engine history) when Sources holds the answer,
	// LaneStale (older than the request's MaxAgeMillis) and LaneUnavailable (not ready) without
	// sources, LaneStateUnknown for an INVALID_REQUEST reply and from replicas of an earlier
	// revision (the field's default).
	State LaneAnswerState
}

func (r *WorkerQueryReply) validate() error {
	if len(r.CorrelationID) > MaxCorrelationIDBytes || !utf8.ValidString(r.CorrelationID) {
		return invalid("correlation_id", "must be at most %d bytes of UTF-8, got %d bytes", MaxCorrelationIDBytes, len(r.CorrelationID))
	}
	if r.Status > QueryInvalidRequest {
		return invalid("status", "unknown status %d", r.Status)
	}
	if r.QueryBlocks > maxInt32 {
		return invalid("query_blocks", "%d does not fit an Avro int", r.QueryBlocks)
	}
	if r.Status != QueryOK && len(r.Sources) != 0 {
		return invalid("sources", "must be empty when status is %s", r.Status)
	}
	if r.State > LaneUnavailable {
		return invalid("state", "unknown state %d", r.State)
	}
	if r.Status == QueryOK && (r.State == LaneStale || r.State == LaneUnavailable) {
		return invalid("state", "%s has no sources, so status must not be OK", r.State)
	}
	for i, s := range r.Sources {
		if s.Device > r.QueryBlocks || uint64(s.Device)+uint64(s.HostPinned)+uint64(s.Disk)+uint64(s.External) > uint64(r.QueryBlocks) {
			return invalid("sources", "entry %d: depths %d+%d+%d+%d exceed query_blocks %d", i, s.Device, s.HostPinned, s.Disk, s.External, r.QueryBlocks)
		}
	}
	if r.AgeMillis.Valid && r.AgeMillis.Value < 0 {
		return invalid("age_ms", "%d is negative", r.AgeMillis.Value)
	}
	if r.LagRecords < 0 {
		return invalid("lag_records", "%d is negative", r.LagRecords)
	}
	return nil
}

func packWorkerSources(ss []WorkerSource) []byte {
	out := make([]byte, 0, len(ss)*WorkerSourceBytes)
	for _, s := range ss {
		out = binary.LittleEndian.AppendUint64(out, s.WorkerID)
		out = binary.LittleEndian.AppendUint32(out, s.DpRank)
		out = binary.LittleEndian.AppendUint32(out, s.Device)
		out = binary.LittleEndian.AppendUint32(out, s.HostPinned)
		out = binary.LittleEndian.AppendUint32(out, s.Disk)
		out = binary.LittleEndian.AppendUint32(out, s.External)
	}
	return out
}

func unpackWorkerSources(b []byte) []WorkerSource {
	if len(b) == 0 {
		return nil
	}
	out := make([]WorkerSource, len(b)/WorkerSourceBytes)
	for i := range out {
		p := b[i*WorkerSourceBytes:]
		out[i] = WorkerSource{WorkerID: binary.LittleEndian.Uint64(p), DpRank: binary.LittleEndian.Uint32(p[8:]),
			Device: binary.LittleEndian.Uint32(p[12:]), HostPinned: binary.LittleEndian.Uint32(p[16:]),
			Disk: binary.LittleEndian.Uint32(p[20:]), External: binary.LittleEndian.Uint32(p[24:])}
	}
	return out
}

func workerQueryRequestNative(q *WorkerQueryRequest) map[string]any {
	p := q.Prompt()
	m := queryRequestNative(&p)
	delete(m, "lane_mask")
	var dcs any
	if q.DcIDs != nil {
		b := make([]byte, 0, len(q.DcIDs)*WordSize)
		for _, d := range q.DcIDs {
			b = binary.LittleEndian.AppendUint64(b, d)
		}
		dcs = union("bytes", b)
	}
	m["dc_ids"] = dcs
	m["top_k"] = int32(q.TopK)
	return m
}

func workerQueryReplyNative(r *WorkerQueryReply) map[string]any {
	return map[string]any{
		"correlation_id": r.CorrelationID,
		"status":         queryStatusSymbols[r.Status],
		"error_message":  optString(r.ErrorMessage),
		"dc_id":          int64(r.DcID),
		"query_blocks":   int32(r.QueryBlocks),
		"sources":        packWorkerSources(r.Sources),
		"age_ms":         optLong(r.AgeMillis),
		"lag_records":    r.LagRecords,
		"reply_time":     r.ReplyTime.UnixMicro(),
		"state":          laneAnswerStateSymbols[r.State],
	}
}

func (n *nat) workerQueryRequest(v any) WorkerQueryRequest {
	m := n.rec(v, "")
	q := n.queryRequest(v) // the shared fields (block_extra_keys and max_age_ms too, null when absent); lane_mask is absent and reads as null
	out := WorkerQueryRequest{CorrelationID: q.CorrelationID, Input: q.Input, Hashes: q.Hashes, Tokens: q.Tokens,
		BlockSize: q.BlockSize, LoraName: q.LoraName, CacheNamespace: q.CacheNamespace, ReplyTopic: q.ReplyTopic,
		ReplyPartition: q.ReplyPartition, RequestTime: q.RequestTime, MaxAgeMillis: q.MaxAgeMillis, BlockExtraKeys: q.BlockExtraKeys}
	if b, dv := n.branch(m, "", "dc_ids", true); b != "" {
		raw, ok := dv.([]byte)
		switch {
		case !ok:
			n.fail(ErrMalformed, "dc_ids", "expected bytes, got %T", dv)
		case len(raw)%WordSize != 0:
			n.fail(ErrInvalidField, "dc_ids", "length %d is not a multiple of %d", len(raw), WordSize)
		default:
			out.DcIDs = PackedU64(raw).AppendTo(make([]uint64, 0, len(raw)/WordSize))
		}
	}
	if _, ok := m["top_k"]; ok {
		out.TopK = uint32(n.rangeInt(m, "", "top_k", 0, MaxWorkerTopK))
	}
	return out
}

func (n *nat) workerQueryReply(v any) WorkerQueryReply {
	m := n.rec(v, "")
	r := WorkerQueryReply{
		CorrelationID: n.str(m, "", "correlation_id"),
		Status:        QueryStatus(n.enum(m, "", "status", queryStatusSymbols)),
		ErrorMessage:  n.optString(m, "", "error_message").Value,
		DcID:          uint64(n.long(m, "", "dc_id")),
		QueryBlocks:   uint32(n.rangeInt(m, "", "query_blocks", 0, maxInt32)),
		AgeMillis:     n.optLong(m, "", "age_ms"),
		LagRecords:    n.long(m, "", "lag_records"),
		ReplyTime:     n.time(m, "", "reply_time"),
	}
	if _, ok := m["state"]; ok { // absent from writer schemas before the field: LaneStateUnknown
		r.State = LaneAnswerState(n.enum(m, "", "state", laneAnswerStateSymbols))
	}
	raw := n.bytes(m, "", "sources")
	if n.kind == nil && len(raw)%WorkerSourceBytes != 0 {
		n.fail(ErrInvalidField, "sources", "length %d is not a multiple of %d", len(raw), WorkerSourceBytes)
	}
	if n.kind == nil {
		r.Sources = unpackWorkerSources(raw)
	}
	return r
}
