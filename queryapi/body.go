package queryapi

import (
	"io"
	"net/http"
)

// MaxDrainBytes bounds how much of a body over MaxRequestBytes ReadBody reads and discards
// before the refusal (413) is written, so that a client that writes its whole body before it
// reads the answer reads the 413 rather than a reset connection. Past it, the connection is
// closed as net/http closes it.
const MaxDrainBytes = 64 << 20

// ReadBody appends r's body to buf and returns it: at most MaxRequestBytes, the JSON and binary
// forms' limit, read straight into buf (sized from Content-Length when one is declared). A body
// over the limit, declared or found while reading, is an *http.MaxBytesError (Refusal: 413)
// after the rest of it, up to MaxDrainBytes, was read and discarded: net/http closes the
// connection after the answer to such a request, and a client still writing its body would
// otherwise have its write fail (a broken pipe) before it could read the 413. A client that
// sent "Expect: 100-continue" is not read from: it waits for the answer before it sends.
func ReadBody(w http.ResponseWriter, r *http.Request, buf []byte) ([]byte, error) {
	if r.ContentLength > MaxRequestBytes {
		drainRefused(r, 0)
		return buf, &http.MaxBytesError{Limit: MaxRequestBytes}
	}
	if r.ContentLength > 0 && int64(cap(buf)) < r.ContentLength+1 {
		buf = make([]byte, 0, r.ContentLength+1) // +1: the read that sees EOF needs room
	}
	body := http.MaxBytesReader(w, r.Body, MaxRequestBytes)
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := body.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		switch {
		case err == io.EOF:
			return buf, nil
		case err != nil:
			if _, tooBig := err.(*http.MaxBytesError); tooBig {
				drainRefused(r, int64(len(buf)))
			}
			return buf, err
		}
	}
}

// drainRefused reads and discards what is left of a refused body, read bytes of it already read,
// up to MaxDrainBytes in all.
func drainRefused(r *http.Request, read int64) {
	if r.Header.Get("Expect") == "100-continue" || r.ContentLength > MaxDrainBytes || read >= MaxDrainBytes {
		return
	}
	_, _ = io.CopyN(io.Discard, r.Body, MaxDrainBytes-read)
}
