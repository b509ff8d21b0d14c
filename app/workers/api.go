package workers

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	ckfworkers "github.com/ckf-stream/ckf-stream/ckf/workers"
	"github.com/ckf-stream/ckf-stream/queryapi"
	"github.com/ckf-stream/ckf-stream/schemas"
	streamworkers "github.com/ckf-stream/ckf-stream/streams/workers"
	"github.com/ckf-stream/ckf-stream/workerapi"
	"github.com/uber-go/tally/v4"
)

// The handler of POST /v1/worker-matches, top to bottom: tell the form by Content-Type, read the
// body (at most queryapi.MaxRequestBytes), decode it (workerapi: the prompt by queryapi's rules),
// answer it from the replica when it is ready and its DC is selected, and write the answer in
// the request's form. Refusals are INVALID_REQUEST JSON bodies saying why, in both forms, with
// the prefix-match route's statuses (400, 413, 415); a replica that is not ready answers
// UNAVAILABLE (503, Retry-After: 1).

// API serves the worker stage's routes.
type API struct {
	r   *streamworkers.Replica
	ids atomic.Uint64
	m   apiMetrics
	now func() time.Time
}

type apiMetrics struct {
	requests tally.Counter
	replies  map[string]tally.Counter
	latency  tally.Histogram
}

// NewAPI returns the handlers of r; scope may be nil.
func NewAPI(r *streamworkers.Replica, scope tally.Scope) *API {
	if scope == nil {
		scope = tally.NoopScope
	}
	s := scope.SubScope("workers").SubScope("http")
	a := &API{r: r, now: time.Now, m: apiMetrics{requests: s.Counter("requests_total"), replies: map[string]tally.Counter{},
		latency: s.Histogram("request_duration_seconds", tally.MustMakeExponentialDurationBuckets(10*time.Microsecond, 2, 16))}}
	for _, st := range []string{workerapi.StatusOK, workerapi.StatusUnavailable, workerapi.StatusInvalidRequest} {
		a.m.replies[st] = s.Tagged(map[string]string{"status": st}).Counter("replies_total")
	}
	return a
}

type scratch struct {
	res  ckfworkers.Result
	body []byte
}

var scratches = sync.Pool{New: func() any { return new(scratch) }}

// MatchHandler serves POST /v1/worker-matches.
func (a *API) MatchHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		a.m.requests.Inc(1)
		sc := scratches.Get().(*scratch)
		defer scratches.Put(sc)
		binary := queryapi.IsBinaryContentType(r.Header["Content-Type"])
		var req workerapi.Request
		var err error
		if !binary {
			err = queryapi.CheckJSONContentType(r.Header.Get("Content-Type"))
		}
		if err == nil {
			sc.body, err = queryapi.ReadBody(w, r, sc.body[:0])
		}
		if err == nil && binary {
			req, err = workerapi.DecodeBinaryRequest(sc.body, r.Header[queryapi.CorrelationIDHeader], r.URL.RawQuery)
		} else if err == nil {
			req, err = workerapi.DecodeRequest(sc.body)
		}
		if err != nil {
			a.refuse(w, start, err)
			return
		}
		if req.Query.CorrelationID == "" {
			req.Query.CorrelationID = "http-" + strconv.FormatUint(a.ids.Add(1), 10)
		}
		resp := a.Answer(&req, sc)
		if binary && resp.Status == workerapi.StatusOK {
			out, err := workerapi.AppendBinaryReply(nil, &resp)
			if err == nil {
				h := w.Header()
				h.Set("Content-Type", queryapi.BinaryContentType)
				h.Set("Content-Length", strconv.Itoa(len(out)))
				if id := r.Header[queryapi.CorrelationIDHeader]; len(id) == 1 {
					h[queryapi.CorrelationIDHeader] = id
				}
				w.WriteHeader(http.StatusOK)
				_, _ = w.Write(out)
				a.m.replies[resp.Status].Inc(1)
				a.m.latency.RecordDuration(time.Since(start))
				return
			}
		}
		a.write(w, start, &resp)
	})
}

// Answer answers a decoded request from the replica, with the DC's state and age (workers §10 in
// docs/spec/workers.md): a replica that is not ready answers UNAVAILABLE, state unavailable; one
// older than the request's max_age_ms (or of no known age under a bound) UNAVAILABLE, state
// stale, as the prefix-match route answers a lane too old (both without sources); otherwise the
// sources, state exact, or incomplete while a source of the DC is degraded by lost engine
// history.
func (a *API) Answer(req *workerapi.Request, sc *scratch) workerapi.WorkerMatchResponse {
	if sc == nil {
		sc = new(scratch)
	}
	local := req.LocalHashes()
	now := a.now()
	age := a.r.Age()
	resp := workerapi.WorkerMatchResponse{CorrelationID: req.Query.CorrelationID, Status: workerapi.StatusOK,
		DcID: a.r.DC().String(), QueryBlocks: uint32(len(local)), Sources: []workerapi.SourceMatch{},
		Age: ageOf(age, now), ReplyTime: now.UTC()}
	if err := a.r.Ready(); err != nil {
		resp.Status, resp.Error, resp.State = workerapi.StatusUnavailable, err.Error(), workerapi.StateUnavailable
		return resp
	}
	resp.DcSelected = req.Selects(a.r.DC())
	if !resp.DcSelected {
		return resp
	}
	if req.Query.Input == schemas.InputTokenIDs {
		// Blocks of another size than every engine of the DC publishes match none of its blocks:
		// refused, naming both sizes, as the prefix-match route refuses them (consumer §6.5).
		if err := a.r.CheckBlockSize(req.Query.BlockSize); err != nil {
			resp.Status, resp.Error = workerapi.StatusInvalidRequest, fmt.Errorf("%w: %w", queryapi.ErrBadRequest, err).Error()
			return resp
		}
	}
	if bound, ok := req.Query.MaxAgeMillis.Get(); ok && (resp.Age.AgeMs < 0 || resp.Age.AgeMs > bound) {
		resp.Status, resp.State = workerapi.StatusUnavailable, workerapi.StateStale
		resp.Error = fmt.Sprintf("dc %s is older than max_age_ms %d (its age is %d ms)", resp.DcID, bound, resp.Age.AgeMs)
		if resp.Age.AgeMs < 0 {
			resp.Error = fmt.Sprintf("dc %s has no known age, so it cannot be shown to be within max_age_ms %d", resp.DcID, bound)
		}
		return resp
	}
	// The age was read before the search: the index searched is at least as new as it says. The
	// walk follows the prompt's local hashes through the replica's stored runs where it can
	// (workers §5.4), and hashes where it leaves them; the answer does not need the chain kept.
	a.r.MatchLocal(local, ckfworkers.Options{TopK: req.TopK}, &sc.res, nil)
	resp.Sources = workerapi.SourcesOf(sc.res.Matches)
	resp.State = workerapi.StateExact
	if a.r.DegradedSources() > 0 {
		resp.State = workerapi.StateIncomplete
	}
	return resp
}

// AnswerKafka answers a request of the worker query topic through Answer, the HTTP route's seam:
// the Kafka service (streams/workers.NewQueryService) calls it for the requests that select
// this replica's DC.
func (a *API) AnswerKafka(q *schemas.WorkerQueryRequest) schemas.WorkerQueryReply {
	req := workerapi.FromKafka(q)
	resp := a.Answer(&req, nil)
	out, err := resp.KafkaReply(a.now())
	if err != nil {
		// Answer names its DC in hex and uses the contract's statuses, so this is a defect.
		return schemas.WorkerQueryReply{CorrelationID: q.CorrelationID, Status: schemas.QueryUnavailable, ErrorMessage: err.Error(),
			DcID: uint64(a.r.DC()), ReplyTime: a.now()}
	}
	return out
}

func ageOf(age streamworkers.Age, now time.Time) workerapi.ReplicaAge {
	return workerapi.ReplicaAge{AgeMs: age.AgeMs(now), LagRecords: age.LagRecords}
}

// refuse answers a request that broke a rule: 415, 413 or 400 with an INVALID_REQUEST body.
func (a *API) refuse(w http.ResponseWriter, start time.Time, err error) {
	status, err := queryapi.Refusal(err)
	if status == http.StatusUnsupportedMediaType {
		w.Header().Set("Accept", queryapi.AcceptValue)
	}
	resp := workerapi.WorkerMatchResponse{Status: workerapi.StatusInvalidRequest, Error: err.Error(), Sources: []workerapi.SourceMatch{}}
	a.writeStatus(w, status, start, &resp)
}

func (a *API) write(w http.ResponseWriter, start time.Time, resp *workerapi.WorkerMatchResponse) {
	if resp.Status == workerapi.StatusUnavailable {
		w.Header().Set("Retry-After", "1")
	}
	a.writeStatus(w, workerapi.StatusCode(resp.Status), start, resp)
}

func (a *API) writeStatus(w http.ResponseWriter, status int, start time.Time, resp *workerapi.WorkerMatchResponse) {
	b, _ := json.Marshal(resp)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
	a.m.replies[resp.Status].Inc(1)
	a.m.latency.RecordDuration(time.Since(start))
}

// StatusJSON is the body of GET /v1/workers.
type StatusJSON struct {
	DcID    string `json:"dc_id"`
	KVTopic string `json:"kv_topic"`
	Ready   bool   `json:"ready"`
	// CaughtUpNow: the replica has read its KV topic to the end and waits for records, so it
	// reflects the DC up to now (age 0).
	CaughtUpNow bool                 `json:"caught_up_now"`
	Age         workerapi.ReplicaAge `json:"age"`
	Applied     uint64               `json:"applied"`
	Sources     int                  `json:"sources"`
	Rows        int                  `json:"lineage_rows"`
	Restored    bool                 `json:"restored_from_checkpoint"`
	// DegradedSources counts the sources whose engine history was lost: while above 0, answers
	// say "incomplete".
	DegradedSources int    `json:"degraded_sources"`
	Rejected        uint64 `json:"events_rejected"`
	Undecodable     uint64 `json:"events_undecodable"`
	Checkpoints     uint64 `json:"checkpoints"`
	// CheckpointApplied is the KV records the newest checkpoint this replica wrote reflects.
	CheckpointApplied uint64 `json:"checkpoint_applied"`
	// BlockSize is the block size every source of the DC reports (0: none known, or sources
	// that disagree); BlockSizes the distinct sizes and BlockSizesBySource each size's sources.
	// A token query of a size no source reports is refused.
	BlockSize          uint32   `json:"block_size"`
	BlockSizes         []uint32 `json:"block_sizes"`
	BlockSizesBySource string   `json:"block_sizes_by_source,omitempty"`
}

// StatusHandler serves GET /v1/workers: the replica's status as JSON.
func (a *API) StatusHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		s := a.r.Status()
		b, _ := json.Marshal(StatusJSON{DcID: s.DC.String(), KVTopic: s.KVTopic, Ready: s.Ready, CaughtUpNow: s.CaughtUpNow, Age: ageOf(s.Age, a.now()),
			Applied: s.Applied, Sources: s.Sources, Rows: s.Rows, Restored: s.Restored, DegradedSources: s.DegradedSources, Rejected: s.Rejected,
			Undecodable: s.Undecodable, Checkpoints: s.Checkpoints, CheckpointApplied: s.CheckpointApplied,
			BlockSize: oneSize(s.BlockSizes), BlockSizes: append([]uint32{}, s.BlockSizes...), BlockSizesBySource: s.BlockSizesBySource})
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(append(b, '\n'))
	})
}

// oneSize is the one size of sizes, 0 when there is none or more than one.
func oneSize(sizes []uint32) uint32 {
	if len(sizes) == 1 {
		return sizes[0]
	}
	return 0
}
