// Package workerapi is the HTTP contract of POST /v1/worker-matches, the worker stage's query:
// for a prompt, every source (worker id, dp rank) of one DC with its device depth and its
// lower-tier continuation (workers §5), and how far the answering replica has read.
//
// The prompt is given exactly as for POST /v1/prefix-matches: local block hashes, or token ids
// with block size, LoRA name, cache namespace and block extra keys, under the same rules and
// errors, because the body is decoded by queryapi.DecodeRequest (JSON) and
// queryapi.DecodeBinaryRequest (binary) once this route's own keys are taken out: top_k and dcs
// (a DC filter). lane_mask, the prefix-match route's lane filter, is refused here.
//
// The package holds no server: no fx, no logging, no routes. app/workers serves it;
// processor query --workers and any other client use it.
package workerapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/queryapi"
	"github.com/ckf-stream/ckf-stream/schemas"
)

// Path is the route.
const Path = "/v1/worker-matches"

// StatusPath is the replica's status route (GET).
const StatusPath = "/v1/workers"

// MaxTopK bounds top_k.
const MaxTopK = schemas.MaxWorkerTopK

// WorkerMatchRequest is the JSON body of POST /v1/worker-matches, for clients (encoding/json).
// The prompt's fields mean what they mean in queryapi.PrefixMatchRequest.
type WorkerMatchRequest struct {
	CorrelationID    string          `json:"correlation_id,omitempty"`
	LocalBlockHashes []uint64        `json:"local_block_hashes,omitempty"`
	TokenIDs         []uint32        `json:"token_ids,omitempty"`
	BlockSize        uint32          `json:"block_size,omitempty"`
	LoraName         string          `json:"lora_name,omitempty"`
	CacheNamespace   string          `json:"cache_namespace,omitempty"`
	BlockExtraKeys   []ckf.ExtraKeys `json:"block_extra_keys,omitempty"`
	// TopK, when positive, keeps the TopK best sources (device depth, then total, then source).
	TopK int `json:"top_k,omitempty"`
	// DCs, when present, lists the DCs (16 hex digits each, ckf.DcID's form) that should answer:
	// a replica of another DC answers OK with dc_selected false and no source. For callers that
	// send one query to several DCs' replicas.
	DCs []string `json:"dcs,omitempty"`
	// MaxAgeMillis, when present, is the oldest DC state the router accepts: a DC whose age is
	// larger (or unknown) answers UNAVAILABLE with state "stale" and no sources, as the
	// prefix-match route answers such a lane.
	MaxAgeMillis *uint64 `json:"max_age_ms,omitempty"`
}

// Request is a decoded request: the prompt as the prefix-match route reads it, and this route's
// options.
type Request struct {
	Query schemas.QueryRequest
	Extra []ckf.ExtraKeys
	TopK  int
	// DCs is the DC filter; nil: every DC answers.
	DCs []ckf.DcID
}

// Selects reports whether a replica of dc answers r.
func (r *Request) Selects(dc ckf.DcID) bool {
	if r.DCs == nil {
		return true
	}
	for _, d := range r.DCs {
		if d == dc {
			return true
		}
	}
	return false
}

// LocalHashes returns the prompt's local block hashes: the given ones, or the token ids cut into
// blocks of BlockSize (a trailing partial block dropped) and hashed with the salt of LoraName and
// CacheNamespace and each block's extra keys, as the prefix-match route and the bridge hash them
// (ckf.TokenBlockHashesExtra).
func (r *Request) LocalHashes() []ckf.LocalBlockHash {
	q := &r.Query
	if q.Input == schemas.InputTokenIDs {
		tokens := q.Tokens.AppendTo(nil)
		return ckf.TokenBlockHashesExtra(tokens, int(q.BlockSize), r.Extra, ckf.BlockSaltSeed(q.LoraName, q.CacheNamespace))
	}
	out := make([]ckf.LocalBlockHash, q.Hashes.Len())
	for i := range out {
		out[i] = ckf.LocalBlockHash(q.Hashes.At(i))
	}
	return out
}

// The keys this route adds to the prefix-match body, and the one it refuses.
const (
	keyTopK     = "top_k"
	keyDCs      = "dcs"
	keyLaneMask = "lane_mask"
	keyMaxAge   = "max_age_ms" // read by queryapi; named here for the binary request's parameters
)

// DecodeRequest reads a JSON body: top_k (a number 0..MaxTopK) and dcs (a list of DC ids, 16 hex
// digits or fewer, no null) are this route's, each at most once; lane_mask is refused; the rest
// of the object must be a prefix-match request and is decoded by queryapi.DecodeRequest, with
// its rules and errors. Errors wrap queryapi.ErrBadRequest.
func DecodeRequest(body []byte) (Request, error) {
	rest, opts, err := splitBody(body)
	if err != nil {
		return Request{}, err
	}
	q, extra, err := queryapi.DecodeRequest(rest)
	if err != nil {
		return Request{}, err
	}
	opts.Query, opts.Extra = q, extra
	return opts, nil
}

// splitBody takes this route's keys out of a JSON object and returns the object without them.
// A body that is not a JSON object is handed on as it is, for queryapi to say what is wrong.
func splitBody(body []byte) ([]byte, Request, error) {
	var out Request
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return body, out, nil
	}
	rest := []byte{'{'}
	seenTopK, seenDCs := false, false
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return body, out, nil
		}
		key, _ := tok.(string)
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return body, out, nil
		}
		switch {
		case strings.EqualFold(key, keyLaneMask):
			return nil, out, fmt.Errorf("%w: lane_mask is the prefix-match route's lane filter; this route answers for its own DC (filter with dcs)", queryapi.ErrBadRequest)
		case strings.EqualFold(key, keyTopK):
			if seenTopK {
				return nil, out, fmt.Errorf("%w: top_k given twice", queryapi.ErrBadRequest)
			}
			seenTopK = true
			k, err := strconv.ParseUint(string(raw), 10, 32)
			if err != nil || k > MaxTopK {
				return nil, out, fmt.Errorf("%w: top_k %s is not a number in [0,%d]", queryapi.ErrBadRequest, raw, MaxTopK)
			}
			out.TopK = int(k)
		case strings.EqualFold(key, keyDCs):
			if seenDCs {
				return nil, out, fmt.Errorf("%w: dcs given twice", queryapi.ErrBadRequest)
			}
			seenDCs = true
			if string(raw) == "null" {
				continue
			}
			var ids []*string
			if err := json.Unmarshal(raw, &ids); err != nil {
				return nil, out, fmt.Errorf("%w: dcs is not a list of DC ids (16 hex digits each): %s", queryapi.ErrBadRequest, raw)
			}
			out.DCs = make([]ckf.DcID, 0, len(ids))
			for _, s := range ids {
				dc, err := parseDC(s)
				if err != nil {
					return nil, out, err
				}
				out.DCs = append(out.DCs, dc)
			}
		default:
			if len(rest) > 1 {
				rest = append(rest, ',')
			}
			k, _ := json.Marshal(key)
			rest = append(append(append(rest, k...), ':'), raw...)
		}
	}
	if _, err := dec.Token(); err != nil {
		return body, Request{}, nil
	}
	if _, err := dec.Token(); err != io.EOF {
		return body, Request{}, nil // trailing data: queryapi refuses it
	}
	return append(rest, '}'), out, nil
}

func parseDC(s *string) (ckf.DcID, error) {
	if s == nil {
		return 0, fmt.Errorf("%w: dcs holds a null; every element must be a DC id", queryapi.ErrBadRequest)
	}
	v, err := strconv.ParseUint(*s, 16, 64)
	if err != nil || *s == "" || len(*s) > 16 {
		return 0, fmt.Errorf("%w: DC id %q is not 1 to 16 hex digits", queryapi.ErrBadRequest, *s)
	}
	return ckf.DcID(v), nil
}

// DecodeBinaryRequest reads a binary request (queryapi.IsBinaryContentType): the body and the
// correlation id as queryapi.DecodeBinaryRequest reads them; the URL's query may give top_k
// (decimal), dcs (comma-separated DC ids) and max_age_ms (decimal milliseconds, read by
// queryapi's rule), each at most once, and nothing else. Errors wrap queryapi.ErrBadRequest.
func DecodeBinaryRequest(body []byte, correlationIDs []string, rawQuery string) (Request, error) {
	var out Request
	var prompt url.Values // the parameters queryapi reads
	q, _ := url.ParseQuery(rawQuery)
	for k, v := range q {
		if len(v) > 1 {
			return out, fmt.Errorf("%w: %s given %d times: give it at most once", queryapi.ErrBadRequest, k, len(v))
		}
		switch k {
		case keyTopK:
			n, err := strconv.ParseUint(v[0], 10, 32)
			if err != nil || n > MaxTopK {
				return out, fmt.Errorf("%w: top_k %q is not a number in [0,%d]", queryapi.ErrBadRequest, v[0], MaxTopK)
			}
			out.TopK = int(n)
		case keyDCs:
			out.DCs = []ckf.DcID{}
			for _, s := range strings.Split(v[0], ",") {
				dc, err := parseDC(&s)
				if err != nil {
					return out, err
				}
				out.DCs = append(out.DCs, dc)
			}
		case keyMaxAge:
			prompt = url.Values{k: v}
		default:
			return out, fmt.Errorf("%w: query parameter %q: a binary request takes only top_k, dcs and max_age_ms", queryapi.ErrBadRequest, k)
		}
	}
	req, err := queryapi.DecodeBinaryRequest(body, correlationIDs, prompt.Encode())
	if err != nil {
		return out, err
	}
	out.Query = req
	return out, nil
}
