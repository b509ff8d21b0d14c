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

// serveJSON answers a JSON request from pooled memory (queryScratch): the Content-Type rule
// before the body is read, then queryapi.DecodeRequestBuf (the lists packed straight into the
// scratch's buffer, the form the answerer reads), the answer in the scratch, and its JSON body
// (queryapi.ResponseInto, AppendResponse) written from the scratch.
func (a *API) serveJSON(w http.ResponseWriter, r *http.Request, start time.Time) {
	if err := queryapi.CheckJSONContentType(r.Header.Get("Content-Type")); err != nil {
		a.refuse(w, start, err)
		return
	}
	qs := queryScratches.Get().(*queryScratch)
	defer qs.put()
	body, err := queryapi.ReadBody(w, r, qs.body[:0]) // sized by Content-Length when there is one
	qs.body = body
	if err != nil {
		a.refuse(w, start, err)
		return
	}
	req, extra, packed, err := queryapi.DecodeRequestBuf(body, qs.packed[:0])
	qs.packed = packed
	if err != nil {
		a.refuse(w, start, err)
		return
	}
	if req.CorrelationID == "" {
		req.CorrelationID = a.newCorrelationID()
	}
	queryapi.Widen(&req) // the JSON answer's masks hold 64 lanes (consumer §16)
	answerStart := time.Now()
	reply := a.ans.AnswerExtra(&req, extra, &qs.sc)
	a.m.AnswerLatency.RecordDuration(time.Since(answerStart))
	a.m.Replies[reply.Status].Inc(1)
	a.writeReply(w, &reply, qs)
	a.m.Latency.RecordDuration(time.Since(start))
}

// serveBinary answers a binary request (queryapi.IsBinaryContentType) from pooled memory: the
// body becomes the request's packed hashes as it is (queryapi.DecodeBinaryRequest), and an OK
// answer is written as queryapi.AppendBinaryReply's bytes, AppendBinaryStatesReply's when the
// request asks for reply=2, or AppendBinaryReplyWide's for reply=3. reply=1's 16-bit masks
// refuse a selection beyond lane 15 (queryapi.CheckBinaryReplyLanes); the other replies hold 64
// lanes (consumer §16). Errors and non-OK answers are the JSON path's JSON bodies and statuses.
func (a *API) serveBinary(w http.ResponseWriter, r *http.Request, start time.Time) {
	qs := queryScratches.Get().(*queryScratch)
	defer qs.put()
	body, err := queryapi.ReadBody(w, r, qs.body[:0])
	qs.body = body
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
	reply := a.ans.Answer(&req, &qs.sc)
	a.m.AnswerLatency.RecordDuration(time.Since(answerStart))
	a.m.Replies[reply.Status].Inc(1)
	if reply.Status != schemas.QueryOK {
		a.writeReply(w, &reply, qs)
		a.m.Latency.RecordDuration(time.Since(start))
		return
	}
	var out []byte
	switch version {
	case queryapi.BinaryReplyStatesVersion:
		out = queryapi.AppendBinaryStatesReply(qs.binary[:0], &reply)
	case queryapi.BinaryReplyWideVersion:
		out = queryapi.AppendBinaryReplyWide(qs.binary[:0], &reply)
	default:
		out = queryapi.AppendBinaryReply(qs.binary[:0], &reply)
	}
	h := w.Header()
	h["Content-Type"] = binaryContentTypeValue
	h["Content-Length"] = lengthValues[len(out)]
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
	writeResponse(w, status, &queryapi.PrefixMatchResponse{Status: schemas.QueryInvalidRequest.String(), Error: err.Error(),
		Matches: []queryapi.DCMatch{}, Lanes: []queryapi.LaneAnswer{}}, nil)
	a.m.Latency.RecordDuration(time.Since(start))
}

// writeReply writes reply as the JSON body (queryapi.ResponseInto, in qs) with its status
// (queryapi.StatusCode): 200 OK, 503 UNAVAILABLE (with Retry-After), 400 INVALID_REQUEST.
func (a *API) writeReply(w http.ResponseWriter, reply *schemas.QueryReply, qs *queryScratch) {
	switch reply.Status {
	case schemas.QueryUnavailable:
		w.Header().Set("Retry-After", "1")
	case schemas.QueryInvalidRequest:
		a.m.Invalid.Inc(1)
	}
	queryapi.ResponseInto(&qs.resp, reply, a.pools)
	qs.json = writeResponse(w, queryapi.StatusCode(reply.Status), &qs.resp, qs.json[:0])
}

// writeResponse writes resp (queryapi.AppendResponse, into buf) and a newline as the reply, and
// returns buf for the next reply.
func writeResponse(w http.ResponseWriter, status int, resp *queryapi.PrefixMatchResponse, buf []byte) []byte {
	b, err := queryapi.AppendResponse(buf, resp)
	if err != nil {
		http.Error(w, "indexer: encoding the response: "+err.Error(), http.StatusInternalServerError)
		return buf
	}
	return writeJSONBytes(w, status, b)
}

// queryScratch is one request's working memory, pooled, for both forms: the body, the packed
// lists of a JSON body, the Answerer's scratch, the JSON response and its bytes, the binary
// reply. With it, a query allocates nothing once the pool is warm, except the correlation id
// the server makes up when the request has none, and, in JSON, a lane's DC id the lane map does
// not name.
type queryScratch struct {
	body   []byte
	packed []byte
	sc     query.QueryScratch
	resp   queryapi.PrefixMatchResponse
	json   []byte
	binary [maxBinaryReplyBytes]byte
}

var queryScratches = sync.Pool{New: func() any { return new(queryScratch) }}

// maxKeptBytes bounds a buffer the pool keeps: the buffers of a rare huge query are let go.
const maxKeptBytes = 256 << 10

// put returns qs to the pool, without the buffers a huge query grew and without the request's
// and reply's references.
func (qs *queryScratch) put() {
	for _, b := range []*[]byte{&qs.body, &qs.packed, &qs.json} {
		if cap(*b) > maxKeptBytes {
			*b = nil
		}
	}
	qs.resp = queryapi.PrefixMatchResponse{Matches: qs.resp.Matches[:0], Lanes: qs.resp.Lanes[:0]}
	queryScratches.Put(qs)
}

// maxBinaryReplyBytes is the longest binary reply of any layout.
const maxBinaryReplyBytes = max(queryapi.MaxBinaryReplyBytes, queryapi.MaxBinaryStatesReplyBytes, queryapi.MaxBinaryReplyWideBytes)

// Header values of a reply, shared: net/http only reads them. lengthValues[n] is the
// Content-Length of n bytes for every binary reply and most JSON ones.
var (
	binaryContentTypeValue = []string{queryapi.BinaryContentType}
	jsonContentTypeValue   = []string{"application/json"}
	lengthValues           = func() (v [max(maxBinaryReplyBytes, 4<<10) + 1][]string) {
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
