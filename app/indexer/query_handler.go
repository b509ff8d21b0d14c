package indexer

import (
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ckf-stream/ckf-stream/app/metrics"
	"github.com/ckf-stream/ckf-stream/queryapi"
	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/ckf-stream/ckf-stream/streams/query"
	"github.com/uber-go/tally/v4"
)

// The handler of POST /v1/prefix-matches, top to bottom: tell the form by Content-Type, read the
// body, decode it into a schemas.QueryRequest (package queryapi holds the contract: the body
// types, the rules, the codecs), answer it with the same query.Answerer as the Kafka query
// service, and write the answer in the request's form. Refusals are INVALID_REQUEST JSON bodies
// in both forms.

// QueryHandler serves POST /v1/prefix-matches. The body (queryapi.PrefixMatchRequest, or the
// binary form) becomes a schemas.QueryRequest and is answered by the same query.Answerer as the
// Kafka query service, so both paths share one code path and one set of request rules.
func (a *API) QueryHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		a.m.requests.Inc(1)
		if queryapi.IsBinaryContentType(r.Header["Content-Type"]) {
			a.serveBinary(w, r, start)
			return
		}
		a.serveJSON(w, r, start)
	})
}

// serveJSON answers a JSON request: the Content-Type rule before the body is read, then
// queryapi.DecodeRequest, the answer and its JSON body.
func (a *API) serveJSON(w http.ResponseWriter, r *http.Request, start time.Time) {
	if err := queryapi.CheckJSONContentType(r.Header.Get("Content-Type")); err != nil {
		a.refuse(w, start, err)
		return
	}
	body, err := queryapi.ReadBody(w, r, nil) // sized by Content-Length when there is one
	if err != nil {
		a.refuse(w, start, err)
		return
	}
	req, extra, err := queryapi.DecodeRequest(body)
	if err != nil {
		a.refuse(w, start, err)
		return
	}
	if req.CorrelationID == "" {
		req.CorrelationID = a.newCorrelationID()
	}
	answerStart := time.Now()
	reply := a.ans.AnswerPooledExtra(&req, extra)
	a.m.answerLatency.RecordDuration(time.Since(answerStart))
	a.m.replies[reply.Status].Inc(1)
	a.writeReply(w, &reply)
	a.m.latency.RecordDuration(time.Since(start))
}

// serveBinary answers a binary request (queryapi.IsBinaryContentType) from pooled memory: the
// body becomes the request's packed hashes as it is (queryapi.DecodeBinaryRequest), and an OK
// answer is written as queryapi.AppendBinaryReply's bytes, or AppendBinaryStatesReply's when
// the request asks for reply=2. Errors and non-OK answers are the
// JSON path's JSON bodies and statuses.
func (a *API) serveBinary(w http.ResponseWriter, r *http.Request, start time.Time) {
	bs := binaryScratches.Get().(*binaryScratch)
	defer binaryScratches.Put(bs)
	body, err := queryapi.ReadBody(w, r, bs.body[:0])
	bs.body = body[:0]
	var req schemas.QueryRequest
	if err == nil {
		req, err = queryapi.DecodeBinaryRequest(body, r.Header[queryapi.CorrelationIDHeader], r.URL.RawQuery)
	}
	if err != nil {
		a.refuse(w, start, err)
		return
	}
	if len(r.Header[queryapi.CorrelationIDHeader]) == 0 {
		req.CorrelationID = a.newCorrelationID()
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
	var out []byte
	if queryapi.BinaryReplyVersionOf(r.URL.RawQuery) == queryapi.BinaryReplyStatesVersion {
		out = queryapi.AppendBinaryStatesReply(bs.out[:0], &reply)
	} else {
		out = queryapi.AppendBinaryReply(bs.out[:0], &reply)
	}
	h := w.Header()
	h["Content-Type"] = binaryContentTypeValue
	h["Content-Length"] = binaryLengthValues[len(out)]
	if id := r.Header[queryapi.CorrelationIDHeader]; len(id) == 1 {
		h[queryapi.CorrelationIDHeader] = id
	}
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(out)
	a.m.latency.RecordDuration(time.Since(start))
}

// newCorrelationID makes up the correlation id of a request that has none: "http-" and a
// number unique to this API.
func (a *API) newCorrelationID() string {
	return "http-" + strconv.FormatUint(a.ids.Add(1), 10)
}

// refuse answers a request that broke a rule before it could be answered (the Content-Type
// rule, the size limit, reading the body, queryapi's decoding): 415, 413 or 400 with an
// INVALID_REQUEST JSON body saying why.
func (a *API) refuse(w http.ResponseWriter, start time.Time, err error) {
	a.m.invalid.Inc(1)
	a.m.replies[schemas.QueryInvalidRequest].Inc(1)
	status, err := queryapi.Refusal(err)
	if status == http.StatusUnsupportedMediaType {
		w.Header().Set("Accept", queryapi.AcceptValue)
	}
	a.writeResponse(w, status, &queryapi.PrefixMatchResponse{Status: schemas.QueryInvalidRequest.String(), Error: err.Error(),
		Matches: []queryapi.DCMatch{}, Lanes: []queryapi.LaneAnswer{}})
	a.m.latency.RecordDuration(time.Since(start))
}

// writeReply writes reply as the JSON body (queryapi.ResponseOf) with its status
// (queryapi.StatusCode): 200 OK, 503 UNAVAILABLE (with Retry-After), 400 INVALID_REQUEST.
func (a *API) writeReply(w http.ResponseWriter, reply *schemas.QueryReply) {
	switch reply.Status {
	case schemas.QueryUnavailable:
		w.Header().Set("Retry-After", "1")
	case schemas.QueryInvalidRequest:
		a.m.invalid.Inc(1)
	}
	resp := queryapi.ResponseOf(reply, a.pools)
	a.writeResponse(w, queryapi.StatusCode(reply.Status), &resp)
}

// writeResponse writes resp (queryapi.AppendResponse) and a newline as the reply.
func (a *API) writeResponse(w http.ResponseWriter, status int, resp *queryapi.PrefixMatchResponse) {
	b, err := queryapi.AppendResponse(make([]byte, 0, 160+96*len(resp.Matches)+112*len(resp.Lanes)), resp)
	if err != nil {
		http.Error(w, "indexer: encoding the response: "+err.Error(), http.StatusInternalServerError)
		return
	}
	writeJSONBytes(w, status, b)
}

// binaryScratch is one binary request's working memory, pooled: the body, the reply and the
// Answerer's scratch. With it, a binary query allocates nothing once the pool is warm, except
// the correlation id the server makes up when the request has none.
type binaryScratch struct {
	body []byte
	out  [max(queryapi.MaxBinaryReplyBytes, queryapi.MaxBinaryStatesReplyBytes)]byte
	sc   query.QueryScratch
}

var binaryScratches = sync.Pool{New: func() any { return new(binaryScratch) }}

// Header values of a binary reply, shared: net/http only reads them.
var (
	binaryContentTypeValue = []string{queryapi.BinaryContentType}
	binaryLengthValues     = func() (v [max(queryapi.MaxBinaryReplyBytes, queryapi.MaxBinaryStatesReplyBytes) + 1][]string) {
		for i := range v {
			v[i] = []string{strconv.Itoa(i)}
		}
		return v
	}()
)

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
