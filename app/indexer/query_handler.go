package indexer

import (
	"net/http"
	"strconv"
	"sync"
	"time"

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
		a.m.Requests.Inc(1)
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
	queryapi.Widen(&req) // the JSON answer's masks hold 64 lanes (consumer §16)
	answerStart := time.Now()
	reply := a.ans.AnswerPooledExtra(&req, extra)
	a.m.AnswerLatency.RecordDuration(time.Since(answerStart))
	a.m.Replies[reply.Status].Inc(1)
	a.writeReply(w, &reply)
	a.m.Latency.RecordDuration(time.Since(start))
}

// serveBinary answers a binary request (queryapi.IsBinaryContentType) from pooled memory: the
// body becomes the request's packed hashes as it is (queryapi.DecodeBinaryRequest), and an OK
// answer is written as queryapi.AppendBinaryReply's bytes, AppendBinaryStatesReply's when the
// request asks for reply=2, or AppendBinaryReplyWide's for reply=3. reply=1's 16-bit masks
// refuse a selection beyond lane 15 (queryapi.CheckBinaryReplyLanes); the other replies hold 64
// lanes (consumer §16). Errors and non-OK answers are the JSON path's JSON bodies and statuses.
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
	version := queryapi.BinaryReplyVersionOf(r.URL.RawQuery)
	if version == queryapi.BinaryReplyVersion {
		mask, _ := req.Lanes()
		if err := queryapi.CheckBinaryReplyLanes(version, mask&a.configured); err != nil {
			a.refuse(w, start, err)
			return
		}
	} else {
		queryapi.Widen(&req)
	}
	answerStart := time.Now()
	reply := a.ans.Answer(&req, &bs.sc)
	a.m.AnswerLatency.RecordDuration(time.Since(answerStart))
	a.m.Replies[reply.Status].Inc(1)
	if reply.Status != schemas.QueryOK {
		a.writeReply(w, &reply)
		a.m.Latency.RecordDuration(time.Since(start))
		return
	}
	var out []byte
	switch version {
	case queryapi.BinaryReplyStatesVersion:
		out = queryapi.AppendBinaryStatesReply(bs.out[:0], &reply)
	case queryapi.BinaryReplyWideVersion:
		out = queryapi.AppendBinaryReplyWide(bs.out[:0], &reply)
	default:
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
	a.m.Latency.RecordDuration(time.Since(start))
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
	a.m.Invalid.Inc(1)
	a.m.Replies[schemas.QueryInvalidRequest].Inc(1)
	status, err := queryapi.Refusal(err)
	if status == http.StatusUnsupportedMediaType {
		w.Header().Set("Accept", queryapi.AcceptValue)
	}
	a.writeResponse(w, status, &queryapi.PrefixMatchResponse{Status: schemas.QueryInvalidRequest.String(), Error: err.Error(),
		Matches: []queryapi.DCMatch{}, Lanes: []queryapi.LaneAnswer{}})
	a.m.Latency.RecordDuration(time.Since(start))
}

// writeReply writes reply as the JSON body (queryapi.ResponseOf) with its status
// (queryapi.StatusCode): 200 OK, 503 UNAVAILABLE (with Retry-After), 400 INVALID_REQUEST.
func (a *API) writeReply(w http.ResponseWriter, reply *schemas.QueryReply) {
	switch reply.Status {
	case schemas.QueryUnavailable:
		w.Header().Set("Retry-After", "1")
	case schemas.QueryInvalidRequest:
		a.m.Invalid.Inc(1)
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
	out  [maxBinaryReplyBytes]byte
	sc   query.QueryScratch
}

var binaryScratches = sync.Pool{New: func() any { return new(binaryScratch) }}

// maxBinaryReplyBytes is the longest binary reply of any layout.
const maxBinaryReplyBytes = max(queryapi.MaxBinaryReplyBytes, queryapi.MaxBinaryStatesReplyBytes, queryapi.MaxBinaryReplyWideBytes)

// Header values of a binary reply, shared: net/http only reads them.
var (
	binaryContentTypeValue = []string{queryapi.BinaryContentType}
	binaryLengthValues     = func() (v [maxBinaryReplyBytes + 1][]string) {
		for i := range v {
			v[i] = []string{strconv.Itoa(i)}
		}
		return v
	}()
)

// newQueryMetrics returns the metrics of one query path: the set every path into the answerer
// reports (query.PathMetrics: the Kafka query service's names and buckets, scope "query"),
// tagged path=<path>. On the HTTP path Latency is the whole request (decode, answer, encode,
// write).
func newQueryMetrics(root tally.Scope, path string) query.PathMetrics {
	if root == nil {
		root = tally.NoopScope
	}
	return query.NewPathMetrics(root.Tagged(map[string]string{"path": path}).SubScope("query"))
}
