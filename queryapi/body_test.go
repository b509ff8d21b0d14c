package queryapi_test

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/ckf-stream/ckf-stream/queryapi"
)

// TestOversizedBodyIsAnswered413: a client that writes a whole body over the limit before it
// reads (as a client written outside the project does) reads the 413, whether the body declares
// its length or comes chunked; it once had its write fail ("broken pipe") because the server
// closed the connection while the body was still arriving. A body within the limit is read whole.
func TestOversizedBodyIsAnswered413(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := queryapi.ReadBody(w, r, nil)
		if err != nil {
			status, err := queryapi.Refusal(err)
			http.Error(w, err.Error(), status)
			return
		}
		fmt.Fprintf(w, "%d bytes", len(body))
	}))
	defer srv.Close()
	big := bytes.Repeat([]byte{'7'}, queryapi.MaxRequestBytes+1<<20)
	for _, c := range []struct {
		name    string
		headers string
		body    []byte
		want    int
	}{
		{"declared length", fmt.Sprintf("Content-Length: %d\r\n", len(big)), big, http.StatusRequestEntityTooLarge},
		{"chunked", "Transfer-Encoding: chunked\r\n", chunked(big), http.StatusRequestEntityTooLarge},
		{"within the limit", "Content-Length: 5\r\n", []byte("12345"), http.StatusOK},
	} {
		t.Run(c.name, func(t *testing.T) {
			conn, err := net.Dial("tcp", srv.Listener.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			req := append([]byte("POST /v1/prefix-matches HTTP/1.1\r\nHost: x\r\nContent-Type: application/octet-stream\r\n"+c.headers+"\r\n"), c.body...)
			if _, err := conn.Write(req); err != nil {
				t.Fatalf("writing the whole request: %v", err)
			}
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				t.Fatalf("reading the answer: %v", err)
			}
			resp.Body.Close()
			if resp.StatusCode != c.want {
				t.Fatalf("status %d, want %d", resp.StatusCode, c.want)
			}
		})
	}
}

// chunked encodes b as one HTTP/1.1 chunk and the last chunk.
func chunked(b []byte) []byte {
	return append(append([]byte(fmt.Sprintf("%x\r\n", len(b))), b...), "\r\n0\r\n\r\n"...)
}
