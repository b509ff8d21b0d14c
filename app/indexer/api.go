package indexer

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/ckf-stream/ckf-stream/app/httpserver"
	"github.com/ckf-stream/ckf-stream/app/metrics"
	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/ckf/index"
	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/ckf-stream/ckf-stream/streams/lanes"
	"github.com/ckf-stream/ckf-stream/streams/query"
	"github.com/uber-go/tally/v4"
)

// MaxRequestBytes bounds the body of POST /v1/prefix-matches: 4 MiB holds a query of about
// 200,000 block hashes written as decimal JSON numbers, far beyond any prompt; a larger body is
// refused with 413 before it is read.
const MaxRequestBytes = 4 << 20

// Query paths, the values of the "path" tag of the query metrics.
const (
	PathKafka = "kafka"
	PathHTTP  = "http"
)

// APIParams are what NewAPI needs. Answerer and Lanes are required; the rest may be nil.
type APIParams struct {
	// Answerer answers the HTTP queries; it is the one the Kafka query service uses, so both
	// paths give the same reply for the same request and the same table state.
	Answerer *query.Answerer
	// Lanes returns the status of every configured lane (lanes.Indexer.Lanes).
	Lanes func() []lanes.LaneStatus
	// Eligible returns the lanes queries may use now (lanes.Indexer.EligibleLanes); nil means
	// the table's ready lanes.
	Eligible func() uint16
	// Metrics is the root scope; the HTTP path records under the tag path="http".
	Metrics tally.Scope
}

// API is the indexer's HTTP face: the lane status table (JSON and a page for people), the direct
// prefix-match endpoint, and the "lanes" readiness check. It holds no lane state of its own
// beyond the mask of lanes seen eligible since start (see Ready).
type API struct {
	ans      *query.Answerer
	g        *index.GlobalIndexer
	lanes    func() []lanes.LaneStatus
	eligible func() uint16
	m        queryMetrics
	ids      atomic.Uint64
	// everEligible has bit l set once lane l has been eligible at any time since start.
	everEligible atomic.Uint32
}

// NewAPI returns the API over p.Answerer's indexer.
func NewAPI(p APIParams) (*API, error) {
	if p.Answerer == nil || p.Lanes == nil {
		return nil, errors.New("indexer: the API needs an Answerer and a lane status source")
	}
	a := &API{ans: p.Answerer, g: p.Answerer.Indexer(), lanes: p.Lanes, eligible: p.Eligible,
		m: newQueryMetrics(p.Metrics, PathHTTP)}
	if a.eligible == nil {
		a.eligible = a.g.ReadyLanes
	}
	return a, nil
}

// Observe records which lanes are eligible now (see Ready). The indexer calls it a few times a
// second; Ready and the lane views call it too.
func (a *API) Observe() uint16 {
	e := a.eligible()
	a.everEligible.Or(uint32(e))
	return e
}

// ErrNotReady is what the "lanes" readiness check returns (wrapped, with the lanes named) while
// the indexer should not take traffic.
var ErrNotReady = errors.New("indexer: not ready")

// Ready is the "lanes" readiness check. The indexer is ready when every configured lane is
// either eligible (ready in the table and within the freshness policy) or explicitly degraded,
// and at least one lane is eligible.
//
// A lane is degraded when it was eligible at some time since this replica started and is not
// now: its relay stopped, it lags beyond the freshness policy, or it is recovering from a fault.
// The indexer reports such a lane (lane events, GET /v1/lanes, metrics) and leaves it out of
// answers, which then say so lane by lane; taking the whole replica out of service would make
// one DC's trouble every DC's, since all replicas read the same lanes and would fail alike.
//
// A lane that has never been eligible since start keeps the replica unready: a starting replica
// serves only once it has every DC's view, so a rolling restart never routes on a partial table.
// A DC that is down for good is taken out of indexer.lanes by configuration.
func (a *API) Ready(context.Context) error {
	elig := a.Observe()
	configured := a.g.Manifest().ConfiguredLanes()
	if missing := configured &^ uint16(a.everEligible.Load()); missing != 0 {
		return fmt.Errorf("%w: lanes %s have not been ready since start", ErrNotReady, laneList(missing))
	}
	if elig&configured == 0 {
		return fmt.Errorf("%w: no lane is eligible (lanes %s are degraded)", ErrNotReady, laneList(configured))
	}
	return nil
}

// laneList renders a lane mask as "0,3,7".
func laneList(mask uint16) string {
	var b strings.Builder
	for m := mask; m != 0; m &= m - 1 {
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(bits.TrailingZeros16(m)))
	}
	return b.String()
}

// Lane states of LaneView.State.
const (
	// StateServing: the lane is eligible; answers include it.
	StateServing = "serving"
	// StateDegraded: the lane was eligible since start and is not now (see API.Ready).
	StateDegraded = "degraded"
	// StateStarting: the lane has not been eligible since start.
	StateStarting = "starting"
)

// LaneView is one row of the lane table: lanes.LaneStatus plus the DC, the serving state and
// the lag in seconds.
type LaneView struct {
	Lane uint8  `json:"lane"`
	DcID string `json:"dc_id"`
	Pool string `json:"pool"`
	// State is serving, degraded or starting (see the State* constants).
	State             string            `json:"state"`
	Phase             string            `json:"phase"`
	Ready             bool              `json:"ready"`
	Excluded          bool              `json:"excluded"`
	Identity          string            `json:"identity"`
	LeaseEpoch        uint64            `json:"lease_epoch"`
	InstalledSequence uint64            `json:"installed_sequence"`
	AppliedOffset     int64             `json:"applied_offset"`
	HighWatermark     int64             `json:"high_watermark"`
	LagRecords        int64             `json:"lag_records"`
	LagSeconds        float64           `json:"lag_seconds"`
	SnapshotOffset    int64             `json:"snapshot_offset"`
	Deltas            uint64            `json:"deltas"`
	Images            uint64            `json:"images"`
	Snapshots         uint64            `json:"snapshots"`
	Heartbeats        uint64            `json:"heartbeats"`
	Rejected          uint64            `json:"rejected"`
	Recoveries        uint64            `json:"recoveries"`
	SnapshotRequests  uint64            `json:"snapshot_requests"`
	Faults            map[string]uint64 `json:"faults,omitempty"`
	LastFault         string            `json:"last_fault,omitempty"`
	LastFaultTime     *time.Time        `json:"last_fault_time,omitempty"`
	// Capacity is the DC filter's capacity state as the lane's records last carried it; absent
	// until one did (a relay that does not report it).
	Capacity *CapacityView `json:"capacity,omitempty"`
	// Sources is the health of the DC's sources as the lane's records last carried it; absent
	// until one did.
	Sources *SourcesView `json:"sources,omitempty"`
}

// SourcesView is the health of a lane's DC sources (lanes.LaneSources): sources whose engine
// history a bridge lost and cleared. Answers on a lane with degraded_sources above 0 are marked
// incomplete.
type SourcesView struct {
	DegradedSources   uint64 `json:"degraded_sources"`
	LostHistoryClears uint64 `json:"lost_history_clears"`
}

// CapacityView is a lane's capacity state (lanes.LaneCapacity): how full the DC's filter is and
// how many of the DC's cached blocks it misses. Answers on a lane with omitted_blocks above 0 are
// marked incomplete.
type CapacityView struct {
	FilterOccupancyRatio   float64 `json:"filter_occupancy_ratio"`
	ResidentBlocks         uint64  `json:"resident_blocks"`
	OmittedBlocks          uint64  `json:"omitted_blocks"`
	CapacityOmissions      uint64  `json:"capacity_omissions"`
	OmissionsSinceSnapshot uint64  `json:"capacity_omissions_since_snapshot"`
}

// LanesView is the body of GET /v1/lanes.
type LanesView struct {
	Time             time.Time `json:"time"`
	ConsumerInstance string    `json:"consumer_instance"`
	Domain           string    `json:"domain"`
	BucketCount      uint64    `json:"bucket_count"`
	// ConfiguredLanes, ReadyLanes and EligibleLanes are lane masks (bit l = lane l).
	ConfiguredLanes uint16 `json:"configured_lanes"`
	ReadyLanes      uint16 `json:"ready_lanes"`
	EligibleLanes   uint16 `json:"eligible_lanes"`
	// Ready is the "lanes" readiness check's verdict; NotReady says why not.
	Ready    bool       `json:"ready"`
	NotReady string     `json:"not_ready,omitempty"`
	Lanes    []LaneView `json:"lanes"`
}

// View returns the lane table now.
func (a *API) View() LanesView {
	m := a.g.Manifest()
	elig := a.Observe()
	ever := uint16(a.everEligible.Load())
	v := LanesView{
		Time:             time.Now().UTC(),
		ConsumerInstance: fmt.Sprintf("%016x", uint64(m.ConsumerInstance())),
		Domain:           m.IndexerDomain().String(),
		BucketCount:      a.g.BucketCount(),
		ConfiguredLanes:  m.ConfiguredLanes(),
		ReadyLanes:       a.g.ReadyLanes(),
		EligibleLanes:    elig,
		Lanes:            []LaneView{},
	}
	if err := a.Ready(context.Background()); err != nil {
		v.NotReady = err.Error()
	} else {
		v.Ready = true
	}
	for _, s := range a.lanes() {
		pool, _ := m.PoolOf(s.Lane)
		lv := LaneView{
			Lane: s.Lane, DcID: pool.Dc.String(), Pool: s.Pool, Phase: s.Phase.String(),
			Ready: s.Ready, Excluded: s.Excluded, Identity: s.Identity, LeaseEpoch: s.LeaseEpoch,
			InstalledSequence: s.InstalledSequence, AppliedOffset: s.AppliedOffset,
			HighWatermark: s.HighWatermark, LagRecords: s.LagRecords, LagSeconds: s.LagTime.Seconds(),
			SnapshotOffset: s.SnapshotOffset, Deltas: s.Deltas, Images: s.Images, Snapshots: s.Snapshots,
			Heartbeats: s.Heartbeats, Rejected: s.Rejected, Recoveries: s.Recoveries,
			SnapshotRequests: s.SnapshotRequests, Faults: s.Faults, LastFault: s.LastFault,
		}
		if len(lv.Faults) == 0 {
			lv.Faults = nil
		}
		if h := s.Sources; h.Reported {
			lv.Sources = &SourcesView{DegradedSources: h.DegradedSources, LostHistoryClears: h.LostHistoryClears}
		}
		if c := s.Capacity; c.Reported {
			lv.Capacity = &CapacityView{FilterOccupancyRatio: c.FilterOccupancy, ResidentBlocks: c.ResidentBlocks,
				OmittedBlocks: c.OmittedBlocks, CapacityOmissions: c.CapacityOmissions, OmissionsSinceSnapshot: c.OmissionsSinceSnapshot}
		}
		if !s.LastFaultTime.IsZero() {
			t := s.LastFaultTime.UTC()
			lv.LastFaultTime = &t
		}
		bit := uint16(1) << s.Lane
		switch {
		case elig&bit != 0:
			lv.State = StateServing
		case ever&bit != 0:
			lv.State = StateDegraded
		default:
			lv.State = StateStarting
		}
		v.Lanes = append(v.Lanes, lv)
	}
	return v
}

// Routes returns the API's HTTP routes: GET /v1/lanes, GET /lanes and GET / (the page),
// POST /v1/prefix-matches.
func (a *API) Routes() []httpserver.Route {
	page := a.PageHandler()
	return []httpserver.Route{
		{Pattern: "GET /v1/lanes", Handler: a.LanesHandler()},
		{Pattern: "GET /lanes", Handler: page},
		{Pattern: "GET /{$}", Handler: page},
		{Pattern: "POST /v1/prefix-matches", Handler: a.QueryHandler()},
	}
}

// LanesHandler serves GET /v1/lanes: the lane table as JSON (LanesView).
func (a *API) LanesHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		writeJSON(w, http.StatusOK, a.View())
	})
}

// PrefixMatchRequest is the body of POST /v1/prefix-matches. Exactly one input is given: either
// LocalBlockHashes (one local block hash per full block, as engines report them in KvStored's
// tokens_hash), or TokenIDs with BlockSize (the indexer cuts them into blocks, drops a trailing
// partial block, and hashes each block with the salt of LoraName and CacheNamespace, as
// ckf.TokenBlockHashes does, and with the block's BlockExtraKeys entry when it has one, as
// ckf.TokenBlockHashExtra does).
type PrefixMatchRequest struct {
	// CorrelationID is echoed in the reply; the server makes one up when it is empty.
	CorrelationID string `json:"correlation_id,omitempty"`
	// LocalBlockHashes and TokenIDs: an empty list is an empty query (depth 0 everywhere);
	// null or absent is no input.
	LocalBlockHashes []uint64 `json:"local_block_hashes"`
	TokenIDs         []uint32 `json:"token_ids"`
	BlockSize        uint32   `json:"block_size,omitempty"`
	LoraName         string   `json:"lora_name,omitempty"`
	CacheNamespace   string   `json:"cache_namespace,omitempty"`
	// BlockExtraKeys (with TokenIDs only) gives block i's extra keys in entry i: the values the
	// engine mixes into that block's hash besides its tokens, in the engine's order —
	// multimodal items as [identifier, offset] pairs, the request's cache_salt in the first
	// block's entry — without the LoRA name (LoraName salts it). null or [] is a block
	// without; blocks past the list's end have none. At most one entry per block, a trailing
	// partial block counted. Values: JSON null, booleans, integers, floats, strings, arrays
	// (tuples) and {"bytes": "<hex>"} (ckf.ExtraValue's JSON form).
	BlockExtraKeys []ckf.ExtraKeys `json:"block_extra_keys,omitempty"`
	// LaneMask restricts the answer to these lanes (bit l = lane l, 0..65535); absent means
	// every lane.
	LaneMask *uint64 `json:"lane_mask,omitempty"`
}

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
// INVALID_REQUEST (400, 413: Error says what is wrong).
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

// errBadRequest marks the HTTP-level rejections (bad JSON, bad combination of fields).
var errBadRequest = errors.New("bad request")

// QueryHandler serves POST /v1/prefix-matches. The body (PrefixMatchRequest) becomes a
// schemas.QueryRequest and is answered by the same query.Answerer as the Kafka query service,
// so both paths share one code path and one set of request rules.
func (a *API) QueryHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		a.m.requests.Inc(1)
		if isBinaryRequest(r) {
			a.serveBinary(w, r, start)
			return
		}
		req, extra, err := a.decode(w, r)
		if err != nil {
			a.refuse(w, start, err)
			return
		}
		answerStart := time.Now()
		reply := a.ans.AnswerPooledExtra(&req, extra)
		a.m.answerLatency.RecordDuration(time.Since(answerStart))
		a.m.replies[reply.Status].Inc(1)
		a.writeReply(w, &reply)
		a.m.latency.RecordDuration(time.Since(start))
	})
}

// refuse answers a request that broke an HTTP-level rule (err from decode or its binary
// counterpart): 415, 413 or 400 with an INVALID_REQUEST JSON body saying why.
func (a *API) refuse(w http.ResponseWriter, start time.Time, err error) {
	a.m.invalid.Inc(1)
	a.m.replies[schemas.QueryInvalidRequest].Inc(1)
	status := http.StatusBadRequest
	var tooBig *http.MaxBytesError
	switch {
	case errors.Is(err, errUnsupportedMediaType):
		status = http.StatusUnsupportedMediaType
		w.Header().Set("Accept", "application/json, "+BinaryContentType)
	case errors.As(err, &tooBig):
		status = http.StatusRequestEntityTooLarge
		err = fmt.Errorf("%w: body exceeds %d bytes", errBadRequest, tooBig.Limit)
	}
	writeJSON(w, status, PrefixMatchResponse{Status: schemas.QueryInvalidRequest.String(), Error: err.Error(), Matches: []DCMatch{}})
	a.m.latency.RecordDuration(time.Since(start))
}

// writeReply writes reply as the JSON body (PrefixMatchResponse) with its status: 200 OK,
// 503 UNAVAILABLE (with Retry-After), 400 INVALID_REQUEST.
func (a *API) writeReply(w http.ResponseWriter, reply *schemas.QueryReply) {
	resp := PrefixMatchResponse{
		CorrelationID: reply.CorrelationID, Status: reply.Status.String(), Error: reply.ErrorMessage,
		QueryBlocks: reply.QueryBlocks, ReadyLanes: reply.ReadyLanes, IncompleteLanes: reply.IncompleteLanes,
		Matches: make([]DCMatch, len(reply.Lanes)),
	}
	for i, l := range reply.Lanes {
		resp.Matches[i] = DCMatch{Lane: l.Lane, DcID: ckf.DcID(l.DcID).String(), Pool: l.Pool, Depth: l.Depth,
			Incomplete: reply.IncompleteLanes&(1<<l.Lane) != 0}
	}
	status := http.StatusOK
	switch reply.Status {
	case schemas.QueryUnavailable:
		status = http.StatusServiceUnavailable
		w.Header().Set("Retry-After", "1")
	case schemas.QueryInvalidRequest:
		a.m.invalid.Inc(1)
		status = http.StatusBadRequest
	}
	b, ok := appendResponse(make([]byte, 0, 128+96*len(resp.Matches)), &resp)
	if !ok {
		writeJSON(w, status, resp)
		return
	}
	writeJSONBytes(w, status, b)
}

// Errors of the HTTP-level request rules, wrapped in the error text a caller sees.
var (
	// errUnsupportedMediaType: the request's Content-Type is neither JSON nor binary (answered
	// 415).
	errUnsupportedMediaType = errors.New("unsupported media type")
	// errNullElement: a JSON null inside local_block_hashes or token_ids (answered 400). A null
	// element has no value to search for; encoding/json would read it as 0, which is a valid
	// hash, so it is refused rather than answered for a different prompt.
	errNullElement = errors.New("null element")
)

// checkContentType applies the Content-Type rule of a JSON POST /v1/prefix-matches (a binary one,
// BinaryContentType, is served before it): the header is absent or names application/json, with
// at most a charset parameter of utf-8 (JSON is UTF-8).
// Anything else, a form type included (curl -d sends one by default), is refused with 415 before
// the body is read, so a body in another format is never guessed at.
func checkContentType(r *http.Request) error {
	ct := r.Header.Get("Content-Type")
	if ct == "" {
		return nil
	}
	mt, params, err := mime.ParseMediaType(ct)
	if err != nil {
		return fmt.Errorf("%w: Content-Type %q is not a media type: %v", errUnsupportedMediaType, ct, err)
	}
	if mt != "application/json" {
		return fmt.Errorf("%w: Content-Type %q; send application/json, or %s (a body of little-endian u64 block hashes)", errUnsupportedMediaType, mt, BinaryContentType)
	}
	for k, v := range params {
		if k != "charset" || !strings.EqualFold(v, "utf-8") {
			return fmt.Errorf("%w: Content-Type parameter %s=%q; application/json takes at most charset=utf-8", errUnsupportedMediaType, k, v)
		}
	}
	return nil
}

// prefixMatchWire is PrefixMatchRequest as decoded from a body: the lists' elements refuse JSON
// null (encoding/json leaves a null element at 0 otherwise).
type prefixMatchWire struct {
	CorrelationID    string          `json:"correlation_id"`
	LocalBlockHashes []wireHash      `json:"local_block_hashes"`
	TokenIDs         []wireToken     `json:"token_ids"`
	BlockSize        uint32          `json:"block_size"`
	LoraName         string          `json:"lora_name"`
	CacheNamespace   string          `json:"cache_namespace"`
	BlockExtraKeys   []ckf.ExtraKeys `json:"block_extra_keys"`
	LaneMask         *uint64         `json:"lane_mask"`
}

// prefixMatchFields are the JSON keys of prefixMatchWire, for the duplicate-key rule.
var prefixMatchFields = [...]string{"correlation_id", "local_block_hashes", "token_ids", "block_size", "lora_name", "cache_namespace", "block_extra_keys", "lane_mask"}

// wireHash is one element of local_block_hashes: an unsigned 64-bit JSON number, never null.
type wireHash uint64

// UnmarshalJSON implements json.Unmarshaler.
func (h *wireHash) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return fmt.Errorf("%w: local_block_hashes holds a null; every element must be an unsigned 64-bit number", errNullElement)
	}
	var v uint64
	if err := json.Unmarshal(b, &v); err != nil {
		return fmt.Errorf("field local_block_hashes: %s is not a valid uint64", b)
	}
	*h = wireHash(v)
	return nil
}

// wireToken is one element of token_ids: an unsigned 32-bit JSON number, never null.
type wireToken uint32

// UnmarshalJSON implements json.Unmarshaler.
func (tk *wireToken) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return fmt.Errorf("%w: token_ids holds a null; every element must be an unsigned 32-bit number", errNullElement)
	}
	var v uint32
	if err := json.Unmarshal(b, &v); err != nil {
		return fmt.Errorf("field token_ids: %s is not a valid uint32", b)
	}
	*tk = wireToken(v)
	return nil
}

// duplicateKey returns the first documented key that the top-level object of body names twice,
// matched as encoding/json matches keys to fields (case-insensitively), or "" when there is none
// or body is not a JSON object (the decoder then says what is wrong). encoding/json keeps the last
// of two equal keys; a caller that sends two inputs or two masks in one object has a bug that
// taking either would hide, so the request is refused instead. Unknown keys are left to the
// decoder, which refuses them anyway.
func duplicateKey(body []byte) string {
	dec := json.NewDecoder(bytes.NewReader(body))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return ""
	}
	var seen [len(prefixMatchFields)]bool
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return ""
		}
		key, _ := tok.(string)
		for i, f := range prefixMatchFields {
			if strings.EqualFold(key, f) {
				if seen[i] {
					return key
				}
				seen[i] = true
				break
			}
		}
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return ""
		}
	}
	return ""
}

// decodeRequestJSON reads a request body with encoding/json, under the rules of decode: the
// documented fields only, each at most once, one JSON value. Every request that
// parsePlainRequest declines is read here, and every JSON error a caller sees is made here.
func decodeRequestJSON(body []byte) (prefixMatchWire, error) {
	if key := duplicateKey(body); key != "" {
		return prefixMatchWire{}, fmt.Errorf("%w: duplicate key %q: give each field at most once", errBadRequest, key)
	}
	var in prefixMatchWire
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		var xe *ckf.ExtraKeysError
		if errors.As(err, &xe) {
			return prefixMatchWire{}, fmt.Errorf("%w: field block_extra_keys: %s is not an extra key: %s", errBadRequest, xe.Value, xe.Detail)
		}
		return prefixMatchWire{}, fmt.Errorf("%w: body is not a prefix-match request: %s", errBadRequest, jsonProblem(err))
	}
	if dec.More() {
		return prefixMatchWire{}, fmt.Errorf("%w: body holds more than one JSON value", errBadRequest)
	}
	return in, nil
}

// decode reads the body into a QueryRequest and the per-block extra keys, applying the
// HTTP-level rules: a JSON Content-Type or none (checkContentType), valid JSON of the
// documented fields only, each at most once, no null inside the lists, exactly one input, a
// block size with token ids, block_extra_keys only with token ids and at most one entry per
// block (a trailing partial block counted), each value of ckf.ExtraValue's JSON form, a 16-bit
// lane mask. The QueryRequest contract's own rules are then Answer's. A request of the plain
// shape is read by parsePlainRequest, any other (and every one in error) by decodeRequestJSON.
func (a *API) decode(w http.ResponseWriter, r *http.Request) (schemas.QueryRequest, []ckf.ExtraKeys, error) {
	if err := checkContentType(r); err != nil {
		return schemas.QueryRequest{}, nil, err
	}
	body, err := readBody(w, r, nil) // sized by Content-Length when there is one
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return schemas.QueryRequest{}, nil, err
		}
		return schemas.QueryRequest{}, nil, fmt.Errorf("%w: reading the body: %v", errBadRequest, err)
	}
	in, plain := parsePlainRequest(body)
	if !plain {
		if in, err = decodeRequestJSON(body); err != nil {
			return schemas.QueryRequest{}, nil, err
		}
	}
	hashes, tokens := in.LocalBlockHashes != nil, in.TokenIDs != nil
	req := schemas.QueryRequest{CorrelationID: in.CorrelationID}
	switch {
	case hashes && tokens:
		return req, nil, fmt.Errorf("%w: give local_block_hashes or token_ids, not both", errBadRequest)
	case hashes:
		if in.BlockSize != 0 || in.LoraName != "" || in.CacheNamespace != "" || in.BlockExtraKeys != nil {
			return req, nil, fmt.Errorf("%w: block_size, lora_name, cache_namespace and block_extra_keys go with token_ids, not local_block_hashes", errBadRequest)
		}
		req.Input = schemas.InputLocalBlockHashes
		packed := make([]byte, 0, len(in.LocalBlockHashes)*schemas.WordSize)
		for _, h := range in.LocalBlockHashes {
			packed = binary.LittleEndian.AppendUint64(packed, uint64(h))
		}
		req.Hashes = packed
	case tokens:
		if in.BlockSize < 1 || in.BlockSize > schemas.MaxBlockSize {
			return req, nil, fmt.Errorf("%w: block_size %d is not in [1,%d] (required with token_ids)", errBadRequest, in.BlockSize, schemas.MaxBlockSize)
		}
		req.Input = schemas.InputTokenIDs
		packed := make([]byte, 0, len(in.TokenIDs)*schemas.TokenSize)
		for _, tk := range in.TokenIDs {
			packed = binary.LittleEndian.AppendUint32(packed, uint32(tk))
		}
		req.Tokens = packed
		req.BlockSize, req.LoraName, req.CacheNamespace = in.BlockSize, in.LoraName, in.CacheNamespace
		if blocks := (len(in.TokenIDs) + int(in.BlockSize) - 1) / int(in.BlockSize); len(in.BlockExtraKeys) > blocks {
			return req, nil, fmt.Errorf("%w: block_extra_keys has %d entries for %d token ids in blocks of %d (at most one per block: %d)",
				errBadRequest, len(in.BlockExtraKeys), len(in.TokenIDs), in.BlockSize, blocks)
		}
	default:
		return req, nil, fmt.Errorf("%w: give local_block_hashes, or token_ids with block_size", errBadRequest)
	}
	if in.LaneMask != nil {
		if *in.LaneMask > uint64(schemas.AllLanes) {
			return req, nil, fmt.Errorf("%w: lane_mask %d is not a 16-bit lane mask (0..65535)", errBadRequest, *in.LaneMask)
		}
		req.LaneMask = schemas.Some(uint16(*in.LaneMask))
	}
	if req.CorrelationID == "" {
		req.CorrelationID = "http-" + strconv.FormatUint(a.ids.Add(1), 10)
	}
	return req, in.BlockExtraKeys, nil
}

// jsonProblem rewords encoding/json's errors for an API caller: which field had which wrong type,
// or where the syntax broke.
func jsonProblem(err error) string {
	var typeErr *json.UnmarshalTypeError
	var syntaxErr *json.SyntaxError
	switch {
	case errors.As(err, &typeErr) && typeErr.Field != "":
		return fmt.Sprintf("field %s: %s is not a valid %s", typeErr.Field, typeErr.Value, typeErr.Type)
	case errors.As(err, &syntaxErr):
		return fmt.Sprintf("invalid JSON at byte %d: %v", syntaxErr.Offset, err)
	case errors.Is(err, io.EOF):
		return "the body is empty"
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "the JSON value ends early"
	}
	return err.Error()
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, "indexer: encoding the response: "+err.Error(), http.StatusInternalServerError)
		return
	}
	writeJSONBytes(w, status, b)
}

// writeJSONBytes writes b, one JSON value, and a newline as the reply.
func writeJSONBytes(w http.ResponseWriter, status int, b []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)+1))
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// queryMetrics are the metrics of one query path, under the names the Kafka query service uses
// (scope "query": requests, invalid_requests, replies by status, latency_seconds,
// answer_latency_seconds), tagged path=<path>. The two paths thus share one set of series per
// name: ckf_query_replies_total{path="http",status="unavailable"} is the HTTP path's unavailable count.
type queryMetrics struct {
	requests, invalid      tally.Counter
	replies                [3]tally.Counter // by schemas.QueryStatus
	latency, answerLatency tally.Histogram
}

func newQueryMetrics(root tally.Scope, path string) queryMetrics {
	if root == nil {
		root = tally.NoopScope
	}
	s := root.Tagged(map[string]string{"path": path}).SubScope("query")
	buckets := tally.DurationBuckets{}
	for _, sec := range metrics.TimerBuckets() {
		buckets = append(buckets, time.Duration(sec*float64(time.Second)))
	}
	m := queryMetrics{
		requests: s.Counter("requests_total"),
		invalid:  s.Counter("invalid_requests_total"),
		// latency: the whole request on the HTTP path (decode, answer, encode, write).
		latency:       s.Histogram("latency_seconds", buckets),
		answerLatency: s.Histogram("answer_latency_seconds", buckets),
	}
	for st := schemas.QueryOK; st <= schemas.QueryInvalidRequest; st++ {
		m.replies[st] = s.Tagged(map[string]string{"status": strings.ToLower(st.String())}).Counter("replies_total")
	}
	return m
}
