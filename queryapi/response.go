package queryapi

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/schemas"
)

// DCMatch is the prefix depth of one DC: its first Depth blocks appear cached there.
// Incomplete says the DC's filter omits blocks it holds (capacity omissions), so the prompt may be
// cached deeper there than Depth.
type DCMatch struct {
	Lane       uint8  `json:"lane"`
	DcID       string `json:"dc_id"`
	Pool       string `json:"pool"`
	Depth      uint32 `json:"depth"`
	Incomplete bool   `json:"incomplete,omitempty"`
}

// PrefixMatchResponse is the body of every answer of POST /v1/prefix-matches. Status is OK (200),
// UNAVAILABLE (503: no requested lane is eligible and ready; Error says which case) or
// INVALID_REQUEST (400, 413, 415: Error says what is wrong); StatusCode gives the HTTP status of
// each.
type PrefixMatchResponse struct {
	CorrelationID string `json:"correlation_id,omitempty"`
	Status        string `json:"status"`
	Error         string `json:"error,omitempty"`
	// QueryBlocks is the number of full blocks of the query.
	QueryBlocks uint32 `json:"query_blocks"`
	// ReadyLanes is the mask of the lanes the answer covers.
	ReadyLanes uint16 `json:"ready_lanes"`
	// IncompleteLanes is the mask of the covered lanes whose depth may be under-reported (their
	// DC's filter omits blocks for capacity); the same lanes' matches say "incomplete": true.
	IncompleteLanes uint16 `json:"incomplete_lanes"`
	// Matches holds one entry per covered lane (DC), in lane order, depth 0 included.
	Matches []DCMatch `json:"matches"`
}

// ResponseOf returns the JSON body of reply: its fields, the status by its Avro symbol (OK,
// UNAVAILABLE, INVALID_REQUEST), and one DCMatch per lane entry, the DC id as 16 hex digits
// (ckf.DcID's form) and Incomplete from reply.IncompleteLanes. Matches is empty, never null,
// when the reply has no lane entry.
func ResponseOf(reply *schemas.QueryReply) PrefixMatchResponse {
	resp := PrefixMatchResponse{
		CorrelationID: reply.CorrelationID, Status: reply.Status.String(), Error: reply.ErrorMessage,
		QueryBlocks: reply.QueryBlocks, ReadyLanes: reply.ReadyLanes, IncompleteLanes: reply.IncompleteLanes,
		Matches: make([]DCMatch, len(reply.Lanes)),
	}
	for i, l := range reply.Lanes {
		resp.Matches[i] = DCMatch{Lane: l.Lane, DcID: ckf.DcID(l.DcID).String(), Pool: l.Pool, Depth: l.Depth,
			Incomplete: reply.IncompleteLanes&(1<<l.Lane) != 0}
	}
	return resp
}

// Reply returns the schemas.QueryReply that r stands for, as the Kafka path would have given it
// (ResponseOf's inverse, but for the reply time, which the JSON form does not carry). An unknown
// status or a DC id that is not hexadecimal is an error.
func (r *PrefixMatchResponse) Reply() (schemas.QueryReply, error) {
	out := schemas.QueryReply{CorrelationID: r.CorrelationID, ErrorMessage: r.Error, ReadyLanes: r.ReadyLanes, QueryBlocks: r.QueryBlocks,
		IncompleteLanes: r.IncompleteLanes}
	switch r.Status {
	case schemas.QueryOK.String():
		out.Status = schemas.QueryOK
	case schemas.QueryUnavailable.String():
		out.Status = schemas.QueryUnavailable
	case schemas.QueryInvalidRequest.String():
		out.Status = schemas.QueryInvalidRequest
	default:
		return out, fmt.Errorf("queryapi: unknown answer status %q", r.Status)
	}
	for _, m := range r.Matches {
		dc, err := strconv.ParseUint(m.DcID, 16, 64)
		if err != nil {
			return out, fmt.Errorf("queryapi: answer has DC id %q: %w", m.DcID, err)
		}
		out.Lanes = append(out.Lanes, schemas.LaneMatch{Lane: m.Lane, DcID: dc, Pool: m.Pool, Depth: m.Depth})
	}
	return out, nil
}

// StatusCode is the HTTP status of an answer of the given status: 200 OK, 503 UNAVAILABLE (sent
// with Retry-After: 1), 400 INVALID_REQUEST (a body over MaxRequestBytes is 413 and an
// unsupported Content-Type 415, both INVALID_REQUEST too, decided before any answer).
func StatusCode(s schemas.QueryStatus) int {
	switch s {
	case schemas.QueryUnavailable:
		return http.StatusServiceUnavailable
	case schemas.QueryInvalidRequest:
		return http.StatusBadRequest
	}
	return http.StatusOK
}

// AppendResponse appends r's JSON encoding, exactly what json.Marshal(r) writes, to dst: without
// reflection when every string of r is plain (appendResponse), by encoding/json otherwise. The
// error is encoding/json's; a PrefixMatchResponse holds no value it cannot write.
func AppendResponse(dst []byte, r *PrefixMatchResponse) ([]byte, error) {
	if b, ok := appendResponse(dst, r); ok {
		return b, nil
	}
	b, err := json.Marshal(*r) // a copy: r itself stays off the heap on the plain path
	if err != nil {
		return dst, err
	}
	return append(dst, b...), nil
}
