package queryapi

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

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
	// ReadyLanes is the mask of the lanes the answer covers, up to 64 bits (consumer §16; a
	// reader whose JSON numbers are doubles reads lanes above 52 from Matches and Lanes).
	ReadyLanes uint64 `json:"ready_lanes"`
	// IncompleteLanes is the mask of the covered lanes whose depth may be under-reported (their
	// DC's filter omits blocks for capacity); the same lanes' matches say "incomplete": true.
	IncompleteLanes uint64 `json:"incomplete_lanes"`
	// Matches holds one entry per covered lane (DC), in lane order, depth 0 included.
	Matches []DCMatch `json:"matches"`
	// Lanes holds one entry per configured lane the request selected, in lane order, whatever
	// its state: searched or not, and why not. Matches is the searched lanes' part of it, kept
	// for earlier clients.
	Lanes []LaneAnswer `json:"lanes"`
	// ReplyTime is when the indexer answered; the lanes' ages are counted to it. Absent from
	// errors decided before any answer (413, 415).
	ReplyTime time.Time `json:"reply_time,omitzero"`
}

// LaneAnswer is one selected lane in an answer: its DC, its state, its age and, when it was
// searched, its depth.
type LaneAnswer struct {
	Lane uint8  `json:"lane"`
	DcID string `json:"dc_id"`
	Pool string `json:"pool"`
	// State is "exact" (searched; the depth is exact for the lane's age), "incomplete"
	// (searched; its DC's filter misses blocks it holds, so the depth may be short), "stale"
	// (ready, but older than the request's max_age_ms or the indexer's freshness policy allows;
	// no depth), "unavailable" (not serving: no snapshot yet, recovering, drained; no depth) or
	// "unknown" (a state of a later indexer; treat it as unavailable).
	State string `json:"state"`
	// AgeMillis is the reply time minus the time up to which the lane reflects its DC's KV
	// events, in milliseconds; absent while the lane has applied nothing.
	AgeMillis *int64 `json:"age_ms,omitempty"`
	// Depth is the number of leading blocks found cached in the DC, 0 when none; absent when the
	// lane was not searched (stale, unavailable): no usable estimate.
	Depth *uint32 `json:"depth,omitempty"`
}

// laneStateNames are LaneAnswer.State's words, indexed by schemas.LaneAnswerState.
var laneStateNames = [...]string{
	schemas.LaneStateUnknown: "unknown",
	schemas.LaneExact:        "exact",
	schemas.LaneIncomplete:   "incomplete",
	schemas.LaneStale:        "stale",
	schemas.LaneUnavailable:  "unavailable",
}

// LaneStateName returns LaneAnswer.State's word for s ("unknown" for a value beyond the table).
func LaneStateName(s schemas.LaneAnswerState) string {
	if int(s) < len(laneStateNames) {
		return laneStateNames[s]
	}
	return laneStateNames[schemas.LaneStateUnknown]
}

// laneStateOf is LaneStateName's inverse; a word it does not know is LaneStateUnknown.
func laneStateOf(name string) schemas.LaneAnswerState {
	for s, n := range laneStateNames {
		if n == name {
			return schemas.LaneAnswerState(s)
		}
	}
	return schemas.LaneStateUnknown
}

// ResponseOf returns the JSON body of reply: its fields, the status by its Avro symbol (OK,
// UNAVAILABLE, INVALID_REQUEST), one DCMatch per lane entry, the DC id as 16 hex digits
// (ckf.DcID's form) and Incomplete from the reply's incomplete mask, and one LaneAnswer per lane
// state, named by pools (the manifest's display form and DC id of each lane, which the
// searched lanes' entries also carry). Matches and Lanes are empty, never null, when the reply
// has no such entry. The LaneAnswers' AgeMillis and Depth point into reply: keep it unchanged
// while the response is in use.
func ResponseOf(reply *schemas.QueryReply, pools *[ckf.MaxLanes]LanePool) PrefixMatchResponse {
	var resp PrefixMatchResponse
	ResponseInto(&resp, reply, pools)
	return resp
}

// ResponseInto is ResponseOf writing into *resp, whose Matches and Lanes arrays it reuses: a
// server that keeps one response between requests maps a reply without allocating. A searched
// lane's DC id is taken from pools when they name the same DC.
func ResponseInto(resp *PrefixMatchResponse, reply *schemas.QueryReply, pools *[ckf.MaxLanes]LanePool) {
	*resp = PrefixMatchResponse{
		CorrelationID: reply.CorrelationID, Status: reply.Status.String(), Error: reply.ErrorMessage,
		QueryBlocks: reply.QueryBlocks, ReadyLanes: reply.ReadyMask(), IncompleteLanes: reply.IncompleteMask(),
		Matches: resize(resp.Matches, len(reply.Lanes)), Lanes: resize(resp.Lanes, len(reply.LaneStates)),
		ReplyTime: reply.ReplyTime.UTC(),
	}
	if reply.ReplyTime.IsZero() {
		resp.ReplyTime = time.Time{}
	}
	for i, l := range reply.Lanes {
		var dc string
		if pools != nil && l.Lane < ckf.MaxLanes && pools[l.Lane].dc == l.DcID && pools[l.Lane].DcID != "" {
			dc = pools[l.Lane].DcID
		} else {
			dc = ckf.DcID(l.DcID).String()
		}
		resp.Matches[i] = DCMatch{Lane: l.Lane, DcID: dc, Pool: l.Pool, Depth: l.Depth,
			Incomplete: resp.IncompleteLanes&(1<<l.Lane) != 0}
	}
	j := 0
	for i := range reply.LaneStates {
		s := &reply.LaneStates[i]
		la := LaneAnswer{Lane: s.Lane, State: LaneStateName(s.State)}
		if pools != nil && s.Lane < ckf.MaxLanes {
			la.DcID, la.Pool = pools[s.Lane].DcID, pools[s.Lane].Pool
		}
		if s.AgeMillis.Valid {
			la.AgeMillis = &s.AgeMillis.Value
		}
		for j < len(reply.Lanes) && reply.Lanes[j].Lane < s.Lane {
			j++
		}
		if j < len(reply.Lanes) && reply.Lanes[j].Lane == s.Lane && s.State.HasDepth() {
			la.Depth = &reply.Lanes[j].Depth
			la.DcID, la.Pool = resp.Matches[j].DcID, reply.Lanes[j].Pool
		}
		resp.Lanes[i] = la
	}
}

// resize returns s of length n, its array reused when it holds n: never nil, so that an empty
// list is written [], not null.
func resize[T any](s []T, n int) []T {
	if cap(s) < n || s == nil {
		return make([]T, n)
	}
	return s[:n]
}

// LanePool is how a lane's DC is named in answers: the DC id as 16 hex digits and the pool's
// display form.
type LanePool struct {
	DcID string
	Pool string
	dc   uint64 // the DC id DcID spells
}

// LanePools returns the LanePool of every lane of the lane map (the manifest): pools[l] for
// lane l, empty for a lane the map does not name.
func LanePools(poolOf func(l uint8) (ckf.PoolID, bool)) *[ckf.MaxLanes]LanePool {
	var out [ckf.MaxLanes]LanePool
	for l := uint8(0); l < ckf.MaxLanes; l++ {
		if p, ok := poolOf(l); ok {
			out[l] = LanePool{DcID: p.Dc.String(), Pool: p.String(), dc: uint64(p.Dc)}
		}
	}
	return &out
}

// Reply returns the schemas.QueryReply that r stands for, as the Kafka path would have given it
// (ResponseOf's inverse, but for the reply time, which the JSON form does not carry). An unknown
// status or a DC id that is not hexadecimal is an error.
func (r *PrefixMatchResponse) Reply() (schemas.QueryReply, error) {
	out := schemas.QueryReply{CorrelationID: r.CorrelationID, ErrorMessage: r.Error, QueryBlocks: r.QueryBlocks}
	out.SetMasks(r.ReadyLanes, r.IncompleteLanes)
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
	for _, l := range r.Lanes {
		s := schemas.LaneState{Lane: l.Lane, State: laneStateOf(l.State)}
		if l.AgeMillis != nil {
			s.AgeMillis = schemas.Some(*l.AgeMillis)
		}
		out.LaneStates = append(out.LaneStates, s)
	}
	out.ReplyTime = r.ReplyTime
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
