package indexer

import (
	"encoding/json"
	"net/http"
	"strconv"
)

// Writing a JSON reply, the last step of both handlers (the lane table's and the query route's
// error and JSON answers): a leaf, so that neither handler's walk climbs back into the other's
// file.

// writeJSON writes v as encoding/json marshals it, and a newline, as the reply.
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, "indexer: encoding the response: "+err.Error(), http.StatusInternalServerError)
		return
	}
	writeJSONBytes(w, status, b)
}

// writeJSONBytes writes b, one JSON value, and a newline as the reply, and returns b with the
// newline (its array, for a caller that reuses it).
func writeJSONBytes(w http.ResponseWriter, status int, b []byte) []byte {
	b = append(b, '\n')
	h := w.Header()
	h["Content-Type"] = jsonContentTypeValue
	if len(b) < len(lengthValues) {
		h["Content-Length"] = lengthValues[len(b)]
	} else {
		h["Content-Length"] = []string{strconv.Itoa(len(b))}
	}
	w.WriteHeader(status)
	_, _ = w.Write(b)
	return b
}
