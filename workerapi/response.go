package workerapi

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/ckf/workers"
	"github.com/ckf-stream/ckf-stream/queryapi"
	"github.com/ckf-stream/ckf-stream/schemas"
)

// Answer statuses and their HTTP statuses (StatusCode).
const (
	StatusOK             = "OK"              // 200
	StatusUnavailable    = "UNAVAILABLE"     // 503, Retry-After: 1: the replica is not ready, or older than max_age_ms
	StatusInvalidRequest = "INVALID_REQUEST" // 400, 413, 415
)

// What a DC's answer is worth (WorkerMatchResponse.State, workers §10 in docs/spec/workers.md):
// the words of a lane's state in a prefix-match answer (queryapi.LaneAnswer.State), for the DC.
var (
	// StateExact: Sources is the answer, exact for the DC's age.
	StateExact = queryapi.LaneStateName(schemas.LaneExact)
	// StateIncomplete: Sources is the answer, but a source of the DC lost engine history, so its
	// depths may be short.
	StateIncomplete = queryapi.LaneStateName(schemas.LaneIncomplete)
	// StateStale: the replica is ready but older than the request's max_age_ms; no sources
	// (status UNAVAILABLE).
	StateStale = queryapi.LaneStateName(schemas.LaneStale)
	// StateUnavailable: the replica is not ready (restoring, catching up); no sources.
	StateUnavailable = queryapi.LaneStateName(schemas.LaneUnavailable)
	// StateUnknown: a state of a later revision, or a Kafka reply of a replica of an earlier one
	// (its status alone says whether Sources holds an answer).
	StateUnknown = queryapi.LaneStateName(schemas.LaneStateUnknown)
)

// StatusCode is the HTTP status of an answer status.
func StatusCode(status string) int {
	switch status {
	case StatusUnavailable:
		return http.StatusServiceUnavailable
	case StatusInvalidRequest:
		return http.StatusBadRequest
	}
	return http.StatusOK
}

// SourceMatch is one source's answer (workers §5): Device leading blocks held on the device
// tier, then runs continuing the chain on the lower tiers, each starting where the previous
// one ended.
type SourceMatch struct {
	WorkerID   uint64 `json:"worker_id"`
	DpRank     uint32 `json:"dp_rank"`
	Device     uint32 `json:"device"`
	HostPinned uint32 `json:"host_pinned"`
	Disk       uint32 `json:"disk"`
	External   uint32 `json:"external"`
}

// ReplicaAge is how far the answering replica has read its DC's KV-events topic.
type ReplicaAge struct {
	// AgeMs is the DC's age in the answer: the reply time minus the time up to which the replica
	// reflects the DC's KV events (as_of, workers §10 in docs/spec/workers.md), in milliseconds,
	// never negative; -1 while the replica knows no such time. A replica caught up with a silent
	// topic reflects it up to the moment it answers, so an idle DC reads fresh.
	AgeMs int64 `json:"age_ms"`
	// LagRecords is the number of KV records between its positions and the topic's end (last
	// stable offsets) as last observed.
	LagRecords int64 `json:"lag_records"`
}

// WorkerMatchResponse is the body of every answer of POST /v1/worker-matches.
type WorkerMatchResponse struct {
	CorrelationID string `json:"correlation_id,omitempty"`
	Status        string `json:"status"`
	Error         string `json:"error,omitempty"`
	// DcID is the answering replica's DC, 16 hex digits ("" in a refusal).
	DcID string `json:"dc_id"`
	// DcSelected is false when the request's dcs leave this DC out (Sources is then empty).
	DcSelected bool `json:"dc_selected"`
	// State is what the answer is worth: StateExact or StateIncomplete with status OK,
	// StateStale (older than the request's max_age_ms) or StateUnavailable (not ready) with
	// status UNAVAILABLE and no sources. Absent when the DC is not selected and in refusals.
	State       string     `json:"state,omitempty"`
	QueryBlocks uint32     `json:"query_blocks"`
	Age         ReplicaAge `json:"age"`
	// ReplyTime is when the replica answered; Age is counted to it. Absent from refusals decided
	// before any answer (413, 415, a body that does not decode).
	ReplyTime time.Time `json:"reply_time,omitzero"`
	// Sources lists every source with a non-zero answer (or the top k), best first: device depth
	// descending, then total, then (worker, rank). Empty, never null.
	Sources []SourceMatch `json:"sources"`
}

// SourcesOf converts the index's matches.
func SourcesOf(ms []workers.Match) []SourceMatch {
	out := make([]SourceMatch, len(ms))
	for i, m := range ms {
		out[i] = SourceMatch{WorkerID: uint64(m.Source.Worker), DpRank: uint32(m.Source.Rank), Device: m.Device,
			HostPinned: m.HostPinned, Disk: m.Disk, External: m.External}
	}
	return out
}

// Matches converts back to the index's matches (a client comparing with an index of its own).
func Matches(ss []SourceMatch) []workers.Match {
	out := make([]workers.Match, len(ss))
	for i, s := range ss {
		out[i] = workers.Match{Source: ckf.SourceKey{Worker: ckf.WorkerID(s.WorkerID), Rank: ckf.DpRank(s.DpRank)},
			Device: s.Device, HostPinned: s.HostPinned, Disk: s.Disk, External: s.External}
	}
	return out
}

// The binary reply of an OK answer to a binary request, little-endian:
//
//	version:u8(=1) flags:u8(bit 0: dc_selected, bit 1: state incomplete) reserved:u16(=0) sources:u32 dc:u64
//	query_blocks:u32 age_ms:i64 lag_records:i64
//	then per source: worker:u64 rank:u32 device:u32 host_pinned:u32 disk:u32 external:u32
//
// A refusal or an UNAVAILABLE answer (stale ones included) is the JSON body, as on the
// prefix-match route; a selected DC's OK answer is exact unless flag bit 1 says incomplete, and
// age_ms is the as_of age (-1: unknown).
const (
	BinaryReplyVersion     = 1
	BinaryReplyHeaderBytes = 36
	BinarySourceBytes      = 28
)

// ErrBinaryReply is the kind of every error of DecodeBinaryReply.
var ErrBinaryReply = errors.New("workerapi: malformed binary worker-match reply")

// AppendBinaryReply appends r's binary reply (r.Status must be OK) to dst.
func AppendBinaryReply(dst []byte, r *WorkerMatchResponse) ([]byte, error) {
	dc, err := strconv.ParseUint(r.DcID, 16, 64)
	if err != nil {
		return dst, fmt.Errorf("workerapi: DC id %q: %w", r.DcID, err)
	}
	var flags byte
	if r.DcSelected {
		flags = 1
	}
	if r.State == StateIncomplete {
		flags |= 2
	}
	dst = append(dst, BinaryReplyVersion, flags, 0, 0)
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(r.Sources)))
	dst = binary.LittleEndian.AppendUint64(dst, dc)
	dst = binary.LittleEndian.AppendUint32(dst, r.QueryBlocks)
	dst = binary.LittleEndian.AppendUint64(dst, uint64(r.Age.AgeMs))
	dst = binary.LittleEndian.AppendUint64(dst, uint64(r.Age.LagRecords))
	for _, s := range r.Sources {
		dst = binary.LittleEndian.AppendUint64(dst, s.WorkerID)
		dst = binary.LittleEndian.AppendUint32(dst, s.DpRank)
		dst = binary.LittleEndian.AppendUint32(dst, s.Device)
		dst = binary.LittleEndian.AppendUint32(dst, s.HostPinned)
		dst = binary.LittleEndian.AppendUint32(dst, s.Disk)
		dst = binary.LittleEndian.AppendUint32(dst, s.External)
	}
	return dst, nil
}

// DecodeBinaryReply decodes a binary reply into the JSON answer it stands for (status OK, no
// correlation id: the reply header carries it). It checks the version, the flags, the reserved
// field and the length against the count. Errors wrap ErrBinaryReply.
func DecodeBinaryReply(b []byte) (WorkerMatchResponse, error) {
	if len(b) < BinaryReplyHeaderBytes {
		return WorkerMatchResponse{}, fmt.Errorf("%w: %d bytes, the header alone is %d", ErrBinaryReply, len(b), BinaryReplyHeaderBytes)
	}
	n := binary.LittleEndian.Uint32(b[4:])
	switch {
	case b[0] != BinaryReplyVersion:
		return WorkerMatchResponse{}, fmt.Errorf("%w: version %d, want %d", ErrBinaryReply, b[0], BinaryReplyVersion)
	case b[1] > 3:
		return WorkerMatchResponse{}, fmt.Errorf("%w: flags %#x", ErrBinaryReply, b[1])
	case b[2] != 0 || b[3] != 0:
		return WorkerMatchResponse{}, fmt.Errorf("%w: reserved field not zero", ErrBinaryReply)
	case uint64(len(b)) != BinaryReplyHeaderBytes+uint64(n)*BinarySourceBytes:
		return WorkerMatchResponse{}, fmt.Errorf("%w: %d bytes for %d sources", ErrBinaryReply, len(b), n)
	}
	r := WorkerMatchResponse{Status: StatusOK, DcSelected: b[1]&1 == 1, DcID: ckf.DcID(binary.LittleEndian.Uint64(b[8:])).String(),
		QueryBlocks: binary.LittleEndian.Uint32(b[16:]),
		Age:         ReplicaAge{AgeMs: int64(binary.LittleEndian.Uint64(b[20:])), LagRecords: int64(binary.LittleEndian.Uint64(b[28:]))},
		Sources:     make([]SourceMatch, n)}
	switch {
	case b[1]&2 != 0:
		r.State = StateIncomplete
	case r.DcSelected:
		r.State = StateExact
	}
	p := b[BinaryReplyHeaderBytes:]
	for i := range r.Sources {
		r.Sources[i] = SourceMatch{WorkerID: binary.LittleEndian.Uint64(p), DpRank: binary.LittleEndian.Uint32(p[8:]),
			Device: binary.LittleEndian.Uint32(p[12:]), HostPinned: binary.LittleEndian.Uint32(p[16:]),
			Disk: binary.LittleEndian.Uint32(p[20:]), External: binary.LittleEndian.Uint32(p[24:])}
		p = p[BinarySourceBytes:]
	}
	return r, nil
}
