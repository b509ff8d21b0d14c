package indexer_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/queryapi"
)

// edgeWriter is a reusable http.ResponseWriter that keeps nothing but the status, so that the
// handler benchmark measures the handler rather than a recorder.
type edgeWriter struct {
	h    http.Header
	code int
}

func (w *edgeWriter) Header() http.Header         { return w.h }
func (w *edgeWriter) WriteHeader(code int)        { w.code = code }
func (w *edgeWriter) Write(b []byte) (int, error) { return len(b), nil }

// BenchmarkQueryEdge compares the JSON and the binary form of POST /v1/prefix-matches for the
// same 64-block query (20 blocks cached in both DCs, then 44 unknown ones), alternating one JSON
// and one binary request per iteration so that both see the same machine load:
//
//   - handler: the route's handler alone (body decode, answer, reply encode), no network;
//   - loopback: a real listener and one keep-alive client on the same host, request by request,
//     the client reading each reply whole (the client's cost is in the figure, as a caller's is);
//     "floor-p50-µs" is the same exchange with a handler that only reads the body and writes a
//     reply of the same size, the part of every figure that is the transport's;
//   - loopback-lean: the same listener and routes, with a leanClient in place of net/http's client:
//     a caller whose HTTP client costs next to nothing (a router not written with net/http), so
//     that what is left is the edge (net/http's server and the route) and the loopback hop.
//
// Reported per form: "json-p50-µs" / "binary-p50-µs" (median request time) and "json-q/s" /
// "binary-q/s" (requests per second of time spent in that form), and "binary/json-q/s", the
// ratio of the two rates.
func BenchmarkQueryEdge(b *testing.B) {
	tb := newTable(b)
	q := append(slices.Clone(tb.chains[0][0][:20]), randomChain(rand.New(rand.NewPCG(3, 3)), 44)...)
	jsonBody, _ := json.Marshal(map[string]any{"local_block_hashes": q})
	binBody := queryapi.AppendBinaryRequest(nil, q)

	b.Run("handler", func(b *testing.B) {
		h := tb.api.QueryHandler()
		w := &edgeWriter{h: http.Header{}}
		jr := bytes.NewReader(jsonBody)
		br := bytes.NewReader(binBody)
		jreq := httptest.NewRequest(http.MethodPost, "/v1/prefix-matches", jr)
		jreq.Header.Set("Content-Type", "application/json")
		breq := httptest.NewRequest(http.MethodPost, "/v1/prefix-matches", br)
		breq.Header.Set("Content-Type", queryapi.BinaryContentType)
		breq.Header.Set(queryapi.CorrelationIDHeader, "bench")
		one := func(req *http.Request, r *bytes.Reader, body []byte) time.Duration {
			r.Reset(body)
			req.Body = io.NopCloser(r)
			clear(w.h)
			start := time.Now()
			h.ServeHTTP(w, req)
			d := time.Since(start)
			if w.code != http.StatusOK {
				b.Fatalf("status %d", w.code)
			}
			return d
		}
		edgeRun(b, func() time.Duration { return one(jreq, jr, jsonBody) }, func() time.Duration { return one(breq, br, binBody) })
	})

	// One listener serves both loopback benchmarks: the API's routes and the floor, a handler
	// that reads the binary body and writes a reply of the binary reply's size without
	// searching, so that what the transport (net/http's server, the client, loopback TCP, the
	// scheduler) costs can be told from what the route costs.
	mux := http.NewServeMux()
	mux.Handle("/", tb.mux)
	reply := make([]byte, queryapi.BinaryReplyHeaderBytes+8)
	mux.HandleFunc("POST /floor", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", queryapi.BinaryContentType)
		_, _ = w.Write(reply)
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()

	b.Run("loopback", func(b *testing.B) {
		cl := srv.Client()
		url := srv.URL + "/v1/prefix-matches"
		var sink bytes.Buffer
		var floor []time.Duration
		one := func(ct string, body []byte) time.Duration {
			target := url
			if ct == "" {
				target, ct = srv.URL+"/floor", queryapi.BinaryContentType
			}
			req, _ := http.NewRequest(http.MethodPost, target, bytes.NewReader(body))
			req.Header.Set("Content-Type", ct)
			start := time.Now()
			resp, err := cl.Do(req)
			if err != nil {
				b.Fatal(err)
			}
			sink.Reset()
			_, _ = sink.ReadFrom(resp.Body)
			resp.Body.Close()
			d := time.Since(start)
			if resp.StatusCode != http.StatusOK {
				b.Fatalf("status %d: %s", resp.StatusCode, sink.Bytes())
			}
			return d
		}
		edgeRun(b, func() time.Duration { return one("application/json", jsonBody) }, func() time.Duration {
			floor = append(floor, one("", binBody))
			return one(queryapi.BinaryContentType, binBody)
		})
		slices.Sort(floor)
		b.ReportMetric(float64(floor[len(floor)/2].Nanoseconds())/1e3, "floor-p50-µs")
	})

	b.Run("loopback-lean", func(b *testing.B) {
		lc, err := dialLean(srv.Listener.Addr().String())
		if err != nil {
			b.Fatal(err)
		}
		defer lc.conn.Close()
		jreq := leanRequest("/v1/prefix-matches", "application/json", jsonBody)
		breq := leanRequest("/v1/prefix-matches", queryapi.BinaryContentType, binBody)
		freq := leanRequest("/floor", queryapi.BinaryContentType, binBody)
		var floor []time.Duration
		one := func(req []byte) time.Duration {
			start := time.Now()
			status, body, err := lc.do(req)
			d := time.Since(start)
			if err != nil {
				b.Fatal(err)
			}
			if status != http.StatusOK {
				b.Fatalf("status %d: %s", status, body)
			}
			return d
		}
		edgeRun(b, func() time.Duration { return one(jreq) }, func() time.Duration {
			floor = append(floor, one(freq))
			return one(breq)
		})
		slices.Sort(floor)
		b.ReportMetric(float64(floor[len(floor)/2].Nanoseconds())/1e3, "floor-p50-µs")
	})
}

// leanClient is an HTTP/1.1 client reduced to what a caller of the binary form needs: one
// keep-alive connection, each request written from prepared bytes, each reply read by its
// Content-Length into a reused buffer. It handles no redirects, no chunked replies and no
// connection loss: a reply it cannot read fails the benchmark.
type leanClient struct {
	conn net.Conn
	r    *bufio.Reader
	body []byte
}

func dialLean(addr string) (*leanClient, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	return &leanClient{conn: c, r: bufio.NewReaderSize(c, 16<<10)}, nil
}

// leanRequest is a POST of body to path with its headers, ready to write.
func leanRequest(path, contentType string, body []byte) []byte {
	head := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: edge\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n", path, contentType, len(body))
	return append([]byte(head), body...)
}

// do writes req and reads one reply: its status and its body (valid until the next call).
func (c *leanClient) do(req []byte) (int, []byte, error) {
	if _, err := c.conn.Write(req); err != nil {
		return 0, nil, err
	}
	status, length := 0, -1
	for first := true; ; first = false {
		line, err := c.r.ReadSlice('\n')
		if err != nil {
			return 0, nil, err
		}
		text := strings.TrimRight(string(line), "\r\n")
		if first {
			if len(text) < 12 || !strings.HasPrefix(text, "HTTP/1.1 ") {
				return 0, nil, fmt.Errorf("status line %q", text)
			}
			if status, err = strconv.Atoi(text[9:12]); err != nil {
				return 0, nil, fmt.Errorf("status line %q", text)
			}
			continue
		}
		if text == "" {
			break
		}
		if k, v, ok := strings.Cut(text, ":"); ok && strings.EqualFold(k, "Content-Length") {
			if length, err = strconv.Atoi(strings.TrimSpace(v)); err != nil {
				return 0, nil, fmt.Errorf("header %q", text)
			}
		}
	}
	if length < 0 {
		return 0, nil, fmt.Errorf("reply without Content-Length")
	}
	if cap(c.body) < length {
		c.body = make([]byte, length)
	}
	c.body = c.body[:length]
	if _, err := io.ReadFull(c.r, c.body); err != nil {
		return 0, nil, err
	}
	return status, c.body, nil
}

// edgeRun times jsonQuery and binQuery alternately, b.N times each, after a short warm-up, and
// reports the figures BenchmarkQueryEdge documents.
func edgeRun(b *testing.B, jsonQuery, binQuery func() time.Duration) {
	for range 200 {
		jsonQuery()
		binQuery()
	}
	js := make([]time.Duration, 0, b.N)
	bs := make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if i%2 == 0 {
			js = append(js, jsonQuery())
			bs = append(bs, binQuery())
		} else {
			bs = append(bs, binQuery())
			js = append(js, jsonQuery())
		}
	}
	b.StopTimer()
	rate := func(ds []time.Duration) float64 {
		var sum time.Duration
		for _, d := range ds {
			sum += d
		}
		return float64(len(ds)) / sum.Seconds()
	}
	jq, bq := rate(js), rate(bs)
	slices.Sort(js)
	slices.Sort(bs)
	b.ReportMetric(float64(js[len(js)/2].Nanoseconds())/1e3, "json-p50-µs")
	b.ReportMetric(float64(bs[len(bs)/2].Nanoseconds())/1e3, "binary-p50-µs")
	b.ReportMetric(jq, "json-q/s")
	b.ReportMetric(bq, "binary-q/s")
	b.ReportMetric(bq/jq, "binary/json-q/s")
}

// BenchmarkQueryHandlerForm is the route's handler alone for one form at a time (json, binary),
// on BenchmarkQueryEdge's 64-block query, with a reused writer and request: nothing but the
// handler runs in the loop, so an instruction count of the whole run (valgrind --tool=callgrind at
// two iteration counts, the difference divided by theirs) is the handler's per request.
func BenchmarkQueryHandlerForm(b *testing.B) {
	tb := newTable(b)
	q := append(slices.Clone(tb.chains[0][0][:20]), randomChain(rand.New(rand.NewPCG(3, 3)), 44)...)
	jsonBody, _ := json.Marshal(map[string]any{"local_block_hashes": q})
	for _, form := range []struct {
		name, contentType string
		body              []byte
	}{
		{"json", "application/json", jsonBody},
		{"binary", queryapi.BinaryContentType, queryapi.AppendBinaryRequest(nil, q)},
	} {
		b.Run(form.name, func(b *testing.B) {
			h := tb.api.QueryHandler()
			w := &edgeWriter{h: http.Header{}}
			r := bytes.NewReader(form.body)
			body := io.NopCloser(r)
			req := httptest.NewRequest(http.MethodPost, "/v1/prefix-matches", r)
			req.Header.Set("Content-Type", form.contentType)
			req.Header.Set(queryapi.CorrelationIDHeader, "bench")
			b.ReportAllocs()
			for b.Loop() {
				r.Reset(form.body)
				req.Body = body
				clear(w.h)
				h.ServeHTTP(w, req)
				if w.code != http.StatusOK {
					b.Fatalf("status %d", w.code)
				}
			}
		})
	}
}
