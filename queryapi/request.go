package queryapi

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"mime"
	"net/http"
	"reflect"
	"strings"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/schemas"
)

// MaxRequestBytes bounds the body of POST /v1/prefix-matches, JSON or binary: 4 MiB holds a
// query of about 200,000 block hashes written as decimal JSON numbers, far beyond any prompt; a
// larger body is refused with 413.
const MaxRequestBytes = 4 << 20

// PrefixMatchRequest is the body of POST /v1/prefix-matches. Exactly one input is given: either
// LocalBlockHashes (one local block hash per full block, as engines report them in KvStored's
// tokens_hash), or TokenIDs with BlockSize (the indexer cuts them into blocks, drops a trailing
// partial block, and hashes each block with the salt of LoraName and CacheNamespace, as
// ckf.TokenBlockHashes does, and with the block's BlockExtraKeys entry when it has one, as
// ckf.TokenBlockHashExtra does). Clients write it with encoding/json (RequestOf builds one from
// a schemas.QueryRequest); the server reads bodies with DecodeRequest.
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
	// LaneMask restricts the answer to these lanes (bit l = lane l, up to lane 63: consumer
	// §16); absent means every lane. A mask beyond lane 15 is the request's 64-bit lane mask
	// (schemas.QueryRequest.LaneMask64).
	LaneMask *uint64 `json:"lane_mask,omitempty"`
	// MaxAgeMillis is the oldest lane state the caller accepts, in milliseconds: older lanes
	// are answered "stale", without a depth. Absent accepts any age the indexer's freshness
	// policy keeps.
	MaxAgeMillis *uint64 `json:"max_age_ms,omitempty"`
}

// RequestOf returns the JSON body that asks what q asks: its correlation id, its input (local
// block hashes, or token ids with the block size, salts and blocks' extra keys), its lane mask
// and its age bound. The Kafka-only
// fields (reply topic and partition, request time) have no JSON counterpart and are left out.
func RequestOf(q *schemas.QueryRequest) PrefixMatchRequest {
	out := PrefixMatchRequest{CorrelationID: q.CorrelationID}
	switch q.Input {
	case schemas.InputLocalBlockHashes:
		out.LocalBlockHashes = q.Hashes.AppendTo(make([]uint64, 0, q.Hashes.Len()))
	case schemas.InputTokenIDs:
		out.TokenIDs = q.Tokens.AppendTo(make([]uint32, 0, q.Tokens.Len()))
		out.BlockSize, out.LoraName, out.CacheNamespace = q.BlockSize, q.LoraName, q.CacheNamespace
		out.BlockExtraKeys = q.BlockExtraKeys
	}
	if m, ok := q.LaneMask64.Get(); ok && m != schemas.AllLanes64 {
		out.LaneMask = &m
	} else if m, ok := q.LaneMask.Get(); ok && !q.LaneMask64.Valid {
		v := uint64(m)
		out.LaneMask = &v
	}
	if a, ok := q.MaxAgeMillis.Get(); ok && a >= 0 {
		v := uint64(a)
		out.MaxAgeMillis = &v
	}
	return out
}

// Request returns the schemas.QueryRequest that r asks (RequestOf's inverse) under the rules of
// the JSON shape, the very rules DecodeRequest applies to a body: a client that builds its
// request from its own inputs (processor query's flags) gets the server's verdict without a
// round trip, from the one copy of the rules. The lists are packed (a nil list stays absent, an
// empty one is an empty query); errors wrap ErrBadRequest and name the JSON field.
func (r *PrefixMatchRequest) Request() (schemas.QueryRequest, error) {
	in := decoded{CorrelationID: r.CorrelationID, BlockSize: r.BlockSize, LoraName: r.LoraName,
		CacheNamespace: r.CacheNamespace, BlockExtraKeys: r.BlockExtraKeys, LaneMask: r.LaneMask, MaxAgeMillis: r.MaxAgeMillis}
	if r.LocalBlockHashes != nil {
		in.LocalBlockHashes = schemas.AppendU64s(make([]byte, 0, len(r.LocalBlockHashes)*schemas.WordSize), r.LocalBlockHashes)
	}
	if r.TokenIDs != nil {
		in.TokenIDs = schemas.AppendU32s(make([]byte, 0, len(r.TokenIDs)*schemas.TokenSize), r.TokenIDs)
	}
	return in.query()
}

// Errors of the request rules. Every error DecodeRequest and DecodeBinaryRequest return wraps
// ErrBadRequest (answered 400); CheckJSONContentType's wrap ErrUnsupportedMediaType (answered
// 415).
var (
	// ErrBadRequest: the body breaks a rule of the JSON shape or of the binary form.
	ErrBadRequest = errors.New("bad request")
	// ErrUnsupportedMediaType: the request's Content-Type is neither JSON nor binary.
	ErrUnsupportedMediaType = errors.New("unsupported media type")
	// errNullElement: a JSON null inside local_block_hashes or token_ids. A null element has no
	// value to search for; encoding/json would read it as 0, which is a valid hash, so it is
	// refused rather than answered for a different prompt.
	errNullElement = errors.New("null element")
)

// CheckJSONContentType applies the Content-Type rule of a JSON POST /v1/prefix-matches to ct,
// the request's Content-Type header ("" when absent): absent, or application/json with at most
// a charset parameter of utf-8 (JSON is UTF-8). Anything else, a form type included (curl -d
// sends one by default), is refused before the body is read, so a body in another format is
// never guessed at. A binary request (IsBinaryContentType) is told apart before this rule.
func CheckJSONContentType(ct string) error {
	if ct == "" {
		return nil
	}
	mt, params, err := mime.ParseMediaType(ct)
	if err != nil {
		return fmt.Errorf("%w: Content-Type %q is not a media type: %v", ErrUnsupportedMediaType, ct, err)
	}
	if mt != "application/json" {
		return fmt.Errorf("%w: Content-Type %q; send application/json, or %s (a body of little-endian u64 block hashes)", ErrUnsupportedMediaType, mt, BinaryContentType)
	}
	for k, v := range params {
		if k != "charset" || !strings.EqualFold(v, "utf-8") {
			return fmt.Errorf("%w: Content-Type parameter %s=%q; application/json takes at most charset=utf-8", ErrUnsupportedMediaType, k, v)
		}
	}
	return nil
}

// DecodeRequest reads a JSON body of POST /v1/prefix-matches into the query the answerer takes
// (streams/query.Answerer.AnswerExtra) and the blocks' extra keys, under the rules of the JSON
// shape: valid JSON of the documented fields only, each at most once, no null inside the lists,
// exactly one input, block_size, lora_name, cache_namespace and block_extra_keys only with
// token_ids, a block size of schemas.ValidBlockSize, block_extra_keys by
// schemas.CheckBlockExtraKeys with each value of ckf.ExtraValue's JSON form, a 16-bit lane mask.
// Errors wrap ErrBadRequest and say which rule. The lists are read straight into the packed
// little-endian form of the QueryRequest (Hashes or Tokens), an empty list as an empty,
// non-nil one. The correlation id is left empty when the body has none: the server makes one
// up. The blocks' extra keys are returned and also set in the request's BlockExtraKeys. A body
// of the plain shape is read in one pass (parsePlainRequest), any other, and every
// one in error, by encoding/json (decodeRequestJSON).
func DecodeRequest(body []byte) (schemas.QueryRequest, []ckf.ExtraKeys, error) {
	req, extra, _, err := DecodeRequestBuf(body, nil)
	return req, extra, err
}

// DecodeRequestBuf is DecodeRequest for a server that keeps a buffer between requests: a plain
// body's list is packed into buf's array from buf[:0] (grown as needed), and the buffer is
// returned for the next request. The request's Hashes or Tokens then alias it: keep it unchanged
// until the request is answered.
func DecodeRequestBuf(body, buf []byte) (schemas.QueryRequest, []ckf.ExtraKeys, []byte, error) {
	in, plain := parsePlainRequestBuf(body, buf)
	if plain {
		switch {
		case in.LocalBlockHashes != nil:
			buf = in.LocalBlockHashes
		case in.TokenIDs != nil:
			buf = in.TokenIDs
		}
	}
	if !plain {
		var err error
		if in, err = decodeRequestJSON(body); err != nil {
			return schemas.QueryRequest{}, nil, buf, err
		}
	}
	req, err := in.query()
	if err != nil {
		return schemas.QueryRequest{}, nil, buf, err
	}
	return req, in.BlockExtraKeys, buf, nil
}

// decoded is a JSON body as read, before the rules of the shape: the lists already packed
// (nil when absent or null, empty and non-nil when empty).
type decoded struct {
	CorrelationID    string
	LocalBlockHashes schemas.PackedU64
	TokenIDs         schemas.PackedU32
	BlockSize        uint32
	LoraName         string
	CacheNamespace   string
	BlockExtraKeys   []ckf.ExtraKeys
	LaneMask         *uint64
	MaxAgeMillis     *uint64
}

// query applies the rules of the JSON shape to in and returns the QueryRequest it asks.
func (in *decoded) query() (schemas.QueryRequest, error) {
	hashes, tokens := in.LocalBlockHashes != nil, in.TokenIDs != nil
	req := schemas.QueryRequest{CorrelationID: in.CorrelationID}
	switch {
	case hashes && tokens:
		return req, fmt.Errorf("%w: give local_block_hashes or token_ids, not both", ErrBadRequest)
	case hashes:
		if in.BlockSize != 0 || in.LoraName != "" || in.CacheNamespace != "" || in.BlockExtraKeys != nil {
			return req, fmt.Errorf("%w: block_size, lora_name, cache_namespace and block_extra_keys go with token_ids, not local_block_hashes", ErrBadRequest)
		}
		req.Input, req.Hashes = schemas.InputLocalBlockHashes, in.LocalBlockHashes
	case tokens:
		if !schemas.ValidBlockSize(in.BlockSize) {
			return req, fmt.Errorf("%w: block_size %d is not in [1,%d] (required with token_ids)", ErrBadRequest, in.BlockSize, schemas.MaxBlockSize)
		}
		req.Input, req.Tokens = schemas.InputTokenIDs, in.TokenIDs
		req.BlockSize, req.LoraName, req.CacheNamespace = in.BlockSize, in.LoraName, in.CacheNamespace
		if err := schemas.CheckBlockExtraKeys(&req, len(in.BlockExtraKeys)); err != nil {
			return req, fmt.Errorf("%w: %w", ErrBadRequest, err)
		}
		if len(in.BlockExtraKeys) > 0 {
			req.BlockExtraKeys = in.BlockExtraKeys // the request is whole: the Kafka form carries them too
		}
	default:
		return req, fmt.Errorf("%w: give local_block_hashes, or token_ids with block_size", ErrBadRequest)
	}
	if in.LaneMask != nil {
		setLaneMask(&req, *in.LaneMask)
	}
	if in.MaxAgeMillis != nil {
		if *in.MaxAgeMillis > math.MaxInt64 {
			return req, fmt.Errorf("%w: max_age_ms %d is larger than %d", ErrBadRequest, *in.MaxAgeMillis, int64(math.MaxInt64))
		}
		req.MaxAgeMillis = schemas.Some(int64(*in.MaxAgeMillis))
	}
	return req, nil
}

// prefixMatchWire is PrefixMatchRequest as encoding/json decodes a body: the lists' elements
// refuse JSON null (encoding/json leaves a null element at 0 otherwise).
type prefixMatchWire struct {
	CorrelationID    string          `json:"correlation_id"`
	LocalBlockHashes []wireHash      `json:"local_block_hashes"`
	TokenIDs         []wireToken     `json:"token_ids"`
	BlockSize        uint32          `json:"block_size"`
	LoraName         string          `json:"lora_name"`
	CacheNamespace   string          `json:"cache_namespace"`
	BlockExtraKeys   []ckf.ExtraKeys `json:"block_extra_keys"`
	LaneMask         *uint64         `json:"lane_mask"`
	MaxAgeMillis     *uint64         `json:"max_age_ms"`
}

// prefixMatchFields are the JSON keys of a request, for the duplicate-key rule and the plain
// reader (the field* constants index it).
var prefixMatchFields = [...]string{"correlation_id", "local_block_hashes", "token_ids", "block_size", "lora_name", "cache_namespace", "block_extra_keys", "lane_mask", "max_age_ms"}

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

// decodeRequestJSON reads a body with encoding/json, under the rules of DecodeRequest that
// concern the JSON itself: the documented fields only, each at most once, one JSON value, no
// null inside a list. Every body that parsePlainRequest declines is read here, and every JSON
// error a caller sees is made here. encoding/json fills the lists element by element; they are
// then packed, as parsePlainRequest packs them while it reads.
func decodeRequestJSON(body []byte) (decoded, error) {
	if key := duplicateKey(body); key != "" {
		return decoded{}, fmt.Errorf("%w: duplicate key %q: give each field at most once", ErrBadRequest, key)
	}
	var in prefixMatchWire
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		var xe *ckf.ExtraKeysError
		if errors.As(err, &xe) {
			return decoded{}, fmt.Errorf("%w: field block_extra_keys: %s is not an extra key: %s", ErrBadRequest, xe.Value, xe.Detail)
		}
		return decoded{}, fmt.Errorf("%w: body is not a prefix-match request: %s", ErrBadRequest, jsonProblem(err))
	}
	if dec.More() {
		return decoded{}, fmt.Errorf("%w: body holds more than one JSON value", ErrBadRequest)
	}
	out := decoded{CorrelationID: in.CorrelationID, BlockSize: in.BlockSize, LoraName: in.LoraName,
		CacheNamespace: in.CacheNamespace, BlockExtraKeys: in.BlockExtraKeys, LaneMask: in.LaneMask, MaxAgeMillis: in.MaxAgeMillis}
	if in.LocalBlockHashes != nil {
		out.LocalBlockHashes = make(schemas.PackedU64, 0, len(in.LocalBlockHashes)*schemas.WordSize)
		for _, h := range in.LocalBlockHashes {
			out.LocalBlockHashes = binary.LittleEndian.AppendUint64(out.LocalBlockHashes, uint64(h))
		}
	}
	if in.TokenIDs != nil {
		out.TokenIDs = make(schemas.PackedU32, 0, len(in.TokenIDs)*schemas.TokenSize)
		for _, tk := range in.TokenIDs {
			out.TokenIDs = binary.LittleEndian.AppendUint32(out.TokenIDs, uint32(tk))
		}
	}
	return out, nil
}

// jsonTypeNames are the names an API caller knows for this package's own types that
// encoding/json would otherwise name, package and all, in a type error.
var jsonTypeNames = map[reflect.Type]string{
	reflect.TypeFor[[]wireHash]():  "[]uint64",
	reflect.TypeFor[[]wireToken](): "[]uint32",
}

// jsonProblem rewords encoding/json's errors for an API caller: which field had which wrong type,
// or where the syntax broke. It names no type of this package.
func jsonProblem(err error) string {
	var typeErr *json.UnmarshalTypeError
	var syntaxErr *json.SyntaxError
	switch {
	case errors.As(err, &typeErr) && typeErr.Type == reflect.TypeFor[prefixMatchWire]():
		return fmt.Sprintf("the body is a JSON %s, not an object", typeErr.Value)
	case errors.As(err, &typeErr) && typeErr.Field != "":
		typ := typeErr.Type.String()
		if name, ok := jsonTypeNames[typeErr.Type]; ok {
			typ = name
		}
		return fmt.Sprintf("field %s: %s is not a valid %s", typeErr.Field, typeErr.Value, typ)
	case errors.As(err, &syntaxErr):
		return fmt.Sprintf("invalid JSON at byte %d: %v", syntaxErr.Offset, err)
	case errors.Is(err, io.EOF):
		return "the body is empty"
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "the JSON value ends early"
	}
	return err.Error()
}

// AcceptValue is the Accept header of a 415 answer: the request types the query routes take.
const AcceptValue = "application/json, " + BinaryContentType

// Refusal maps the error of a request refused before it could be answered (the Content-Type
// rule, the size limit, reading the body, DecodeRequest or DecodeBinaryRequest) to its HTTP
// status and the error its INVALID_REQUEST body states: 415 for ErrUnsupportedMediaType (send
// AcceptValue as Accept), 413 for a body over the reader's limit (*http.MaxBytesError), 400 for
// the rest, an error that is not a rule's said to be from reading the body. Every route that
// takes a prompt (POST /v1/prefix-matches, POST /v1/worker-matches) refuses this way.
func Refusal(err error) (int, error) {
	var tooBig *http.MaxBytesError
	switch {
	case errors.Is(err, ErrUnsupportedMediaType):
		return http.StatusUnsupportedMediaType, err
	case errors.As(err, &tooBig):
		return http.StatusRequestEntityTooLarge, fmt.Errorf("%w: body exceeds %d bytes", ErrBadRequest, tooBig.Limit)
	case !errors.Is(err, ErrBadRequest):
		return http.StatusBadRequest, fmt.Errorf("%w: reading the body: %v", ErrBadRequest, err)
	}
	return http.StatusBadRequest, err
}

// setLaneMask sets a request's lane mask from the HTTP forms' lane_mask, which holds up to 64
// lanes (consumer §16): a mask within lanes 0..15 is LaneMask, as the Kafka form of a reader of
// 16 lanes carries it; a wider one is LaneMask64.
func setLaneMask(req *schemas.QueryRequest, m uint64) {
	if m <= uint64(schemas.AllLanes) {
		req.LaneMask = schemas.Some(uint16(m))
		return
	}
	req.LaneMask64 = schemas.Some(m)
}

// Widen marks req as asked by a reader of up to 64 lanes (consumer §16), as the HTTP forms
// whose answers carry 64-bit masks or one entry per lane are (JSON, and the binary replies
// other than BinaryReplyVersion): its selection, LaneMask or every lane, becomes LaneMask64, so
// that an indexer of more than 16 lanes answers it whole instead of refusing it.
func Widen(req *schemas.QueryRequest) {
	if req.LaneMask64.Valid {
		return
	}
	m := schemas.AllLanes64
	if v, ok := req.LaneMask.Get(); ok {
		m = uint64(v)
	}
	req.LaneMask, req.LaneMask64 = schemas.Optional[uint16]{}, schemas.Some(m)
}
