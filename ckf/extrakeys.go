package ckf

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"unicode/utf8"

	"github.com/zeebo/xxh3"
)

// Extra keys (producer §2.2, "Extra keys"): the values an engine mixes into a block's own hash
// besides its tokens — vLLM's BlockStored.extra_keys entry of the block: multimodal item
// identifiers with their offsets, the request's cache_salt on the first block, prompt-embeds
// digests. Two blocks with the same tokens but different extra keys (the same image
// placeholder tokens, different images) are different cache entries, so the local block hash
// covers them: TokenBlockHashExtra.

// ExtraKind is the type of one extra-key value: the msgpack (and Python) value types an engine
// can put in extra_keys.
type ExtraKind uint8

// Extra-key value kinds. The numeric values are the type tags of the canonical encoding
// (AppendCanonical): changing one changes every salted hash.
const (
	ExtraNone   ExtraKind = 0 // None / nil
	ExtraBool   ExtraKind = 1 // bool
	ExtraInt    ExtraKind = 2 // integer in [-2^63, 2^63)
	ExtraUint   ExtraKind = 3 // integer in [2^63, 2^64)
	ExtraFloat  ExtraKind = 4 // IEEE-754 binary64
	ExtraString ExtraKind = 5 // text string (its bytes, as sent)
	ExtraBytes  ExtraKind = 6 // byte string
	ExtraTuple  ExtraKind = 7 // tuple or list of values
)

func (k ExtraKind) String() string {
	switch k {
	case ExtraNone:
		return "none"
	case ExtraBool:
		return "bool"
	case ExtraInt:
		return "int"
	case ExtraUint:
		return "uint"
	case ExtraFloat:
		return "float"
	case ExtraString:
		return "string"
	case ExtraBytes:
		return "bytes"
	case ExtraTuple:
		return "tuple"
	}
	return "ExtraKind(" + strconv.Itoa(int(k)) + ")"
}

// MaxExtraDepth bounds the nesting of extra-key tuples: the block's entry is depth 1, a tuple
// inside it (vLLM's (identifier, offset) pair) depth 2. Decoders refuse deeper values.
const MaxExtraDepth = 8

// ExtraValue is one extra-key value. Kind says which field holds it: Bits for ExtraBool (0 or
// 1), ExtraInt (the int64's two's-complement bits), ExtraUint and ExtraFloat
// (math.Float64bits); Str for ExtraString and ExtraBytes; Items for ExtraTuple. The zero value
// is None. Build values with the Extra* constructors, which keep Kind and fields consistent.
type ExtraValue struct {
	Kind  ExtraKind
	Bits  uint64
	Str   string
	Items []ExtraValue
}

// ExtraKeys are the extra keys of one block, in the engine's order (order matters: vLLM puts
// the LoRA name, then the multimodal items by position, then the cache salt, then prompt-embeds
// digests). Nil or empty: the block has none.
type ExtraKeys []ExtraValue

// ExtraNil returns None.
func ExtraNil() ExtraValue { return ExtraValue{} }

// ExtraBoolValue returns b.
func ExtraBoolValue(b bool) ExtraValue {
	if b {
		return ExtraValue{Kind: ExtraBool, Bits: 1}
	}
	return ExtraValue{Kind: ExtraBool}
}

// ExtraIntValue returns the integer v.
func ExtraIntValue(v int64) ExtraValue { return ExtraValue{Kind: ExtraInt, Bits: uint64(v)} }

// ExtraUintValue returns the integer v: ExtraInt when v < 2^63, ExtraUint otherwise, so an
// integer has one representation whichever way it was read.
func ExtraUintValue(v uint64) ExtraValue {
	if v <= math.MaxInt64 {
		return ExtraValue{Kind: ExtraInt, Bits: v}
	}
	return ExtraValue{Kind: ExtraUint, Bits: v}
}

// ExtraFloatValue returns the float f (its bits as given: -0 and 0 differ).
func ExtraFloatValue(f float64) ExtraValue {
	return ExtraValue{Kind: ExtraFloat, Bits: math.Float64bits(f)}
}

// ExtraStringValue returns the text string s.
func ExtraStringValue(s string) ExtraValue { return ExtraValue{Kind: ExtraString, Str: s} }

// ExtraBytesValue returns the byte string b (copied).
func ExtraBytesValue(b []byte) ExtraValue { return ExtraValue{Kind: ExtraBytes, Str: string(b)} }

// ExtraTupleValue returns the tuple of items (not copied).
func ExtraTupleValue(items ...ExtraValue) ExtraValue {
	return ExtraValue{Kind: ExtraTuple, Items: items}
}

// Equal reports whether v and w are the same value (same kind, same content).
func (v ExtraValue) Equal(w ExtraValue) bool {
	if v.Kind != w.Kind || v.Bits != w.Bits || v.Str != w.Str || len(v.Items) != len(w.Items) {
		return false
	}
	for i := range v.Items {
		if !v.Items[i].Equal(w.Items[i]) {
			return false
		}
	}
	return true
}

// String renders v in Python's notation (for messages and tests): None, True, 7, 'img', b'..'
// as hex, (a, b).
func (v ExtraValue) String() string {
	switch v.Kind {
	case ExtraNone:
		return "None"
	case ExtraBool:
		if v.Bits != 0 {
			return "True"
		}
		return "False"
	case ExtraInt:
		return strconv.FormatInt(int64(v.Bits), 10)
	case ExtraUint:
		return strconv.FormatUint(v.Bits, 10)
	case ExtraFloat:
		return strconv.FormatFloat(math.Float64frombits(v.Bits), 'g', -1, 64)
	case ExtraString:
		return strconv.Quote(v.Str)
	case ExtraBytes:
		return "bytes.fromhex(" + strconv.Quote(hex.EncodeToString([]byte(v.Str))) + ")"
	case ExtraTuple:
		var b bytes.Buffer
		b.WriteByte('(')
		for i, it := range v.Items {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(it.String())
		}
		if len(v.Items) == 1 {
			b.WriteByte(',')
		}
		b.WriteByte(')')
		return b.String()
	}
	return v.Kind.String()
}

// appendCanonical appends v's canonical encoding (see ExtraKeys.AppendCanonical).
func (v ExtraValue) appendCanonical(dst []byte) []byte {
	dst = append(dst, byte(v.Kind))
	switch v.Kind {
	case ExtraNone:
	case ExtraBool:
		dst = append(dst, byte(v.Bits&1))
	case ExtraInt, ExtraUint, ExtraFloat:
		dst = binary.LittleEndian.AppendUint64(dst, v.Bits)
	case ExtraString, ExtraBytes:
		dst = binary.LittleEndian.AppendUint32(dst, uint32(len(v.Str)))
		dst = append(dst, v.Str...)
	case ExtraTuple:
		dst = binary.LittleEndian.AppendUint32(dst, uint32(len(v.Items)))
		for _, it := range v.Items {
			dst = it.appendCanonical(dst)
		}
	}
	return dst
}

// AppendCanonical appends the canonical encoding of k to dst and returns the extended slice;
// an empty k appends nothing. The encoding is k as one tuple, each value type-tagged and
// length-prefixed, little-endian:
//
//	enc(None)     = 00
//	enc(bool b)   = 01 || 01 if b else 00
//	enc(int v)    = 02 || LE64(v)               -2^63 <= v < 2^63 (two's complement)
//	enc(int v)    = 03 || LE64(v)               2^63 <= v < 2^64
//	enc(float f)  = 04 || LE64(binary64 bits of f)
//	enc(str s)    = 05 || LE32(byte length) || the bytes (UTF-8 as sent)
//	enc(bytes b)  = 06 || LE32(length) || b
//	enc(tuple xs) = 07 || LE32(len(xs)) || enc(xs[0]) || enc(xs[1]) || ...
//
// and AppendCanonical(k) = enc(tuple k) for a non-empty k. The encoding is injective: two
// different values (kind or content) never encode alike, so different images or salts give
// different hashes. Lists and tuples are the same kind (msgpack does not tell them apart).
func (k ExtraKeys) AppendCanonical(dst []byte) []byte {
	if len(k) == 0 {
		return dst
	}
	return ExtraTupleValue(k...).appendCanonical(dst)
}

// TokenBlockHashExtra is the local hash of one block with its extra keys (producer §2.2):
//
//   - no extra keys (extra empty): exactly TokenBlockHash(tokens, saltSeed), so text blocks
//     hash as they always did;
//   - otherwise XXH3_64(LE32(t0) || ... || LE32(t{k-1}) || extra.AppendCanonical(), saltSeed).
//
// The LoRA name does not belong in extra: it salts saltSeed already (BlockSaltSeed), and
// producers drop it from an engine's extra keys (bridge.Converter). Order within extra matters.
func TokenBlockHashExtra(tokens []uint32, extra ExtraKeys, saltSeed uint64) LocalBlockHash {
	if len(extra) == 0 {
		return TokenBlockHash(tokens, saltSeed)
	}
	var stack [512]byte
	buf := stack[:0]
	for _, t := range tokens {
		buf = binary.LittleEndian.AppendUint32(buf, t)
	}
	buf = extra.AppendCanonical(buf)
	return LocalBlockHash(xxh3.HashSeed(buf, saltSeed))
}

// TokenBlockHashesExtra is TokenBlockHashes with per-block extra keys: block i is hashed with
// TokenBlockHashExtra and extra[i]; blocks past the end of extra have none, and entries past
// the last full block are ignored. blockSize <= 0 yields nil.
func TokenBlockHashesExtra(tokens []uint32, blockSize int, extra []ExtraKeys, saltSeed uint64) []LocalBlockHash {
	if blockSize <= 0 {
		return nil
	}
	n := len(tokens) / blockSize
	out := make([]LocalBlockHash, 0, n)
	for i := 0; i < n; i++ {
		var e ExtraKeys
		if i < len(extra) {
			e = extra[i]
		}
		out = append(out, TokenBlockHashExtra(tokens[i*blockSize:(i+1)*blockSize], e, saltSeed))
	}
	return out
}

// TokenSequenceHashesExtra is TokenSequenceHashes with per-block extra keys
// (TokenBlockHashesExtra chained into canonical hashes).
func TokenSequenceHashesExtra(tokens []uint32, blockSize int, extra []ExtraKeys, saltSeed uint64) []CanonicalHash {
	return canonicalChain(TokenBlockHashesExtra(tokens, blockSize, extra, saltSeed))
}

// ErrExtraKeys is the kind of every error reading extra keys from JSON (*ExtraKeysError).
var ErrExtraKeys = errors.New("ckf: invalid extra keys")

// ExtraKeysError says which JSON value could not be read as an extra key and why.
type ExtraKeysError struct {
	// Value is the offending JSON text (cut to 64 bytes).
	Value string
	// Detail says what was wrong.
	Detail string
}

func (e *ExtraKeysError) Error() string {
	return fmt.Sprintf("%v: %s: %s", ErrExtraKeys, e.Value, e.Detail)
}

// Unwrap returns ErrExtraKeys.
func (e *ExtraKeysError) Unwrap() error { return ErrExtraKeys }

// MarshalJSON writes v in the JSON form UnmarshalJSON reads.
func (v ExtraValue) MarshalJSON() ([]byte, error) {
	switch v.Kind {
	case ExtraNone:
		return []byte("null"), nil
	case ExtraBool:
		return strconv.AppendBool(nil, v.Bits != 0), nil
	case ExtraInt:
		return strconv.AppendInt(nil, int64(v.Bits), 10), nil
	case ExtraUint:
		return strconv.AppendUint(nil, v.Bits, 10), nil
	case ExtraFloat:
		f := math.Float64frombits(v.Bits)
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return nil, &ExtraKeysError{Value: v.String(), Detail: "a float that JSON cannot hold"}
		}
		s := strconv.FormatFloat(f, 'g', -1, 64)
		if !bytes.ContainsAny([]byte(s), ".eE") {
			s += ".0" // stays a float when read back
		}
		return []byte(s), nil
	case ExtraString:
		return json.Marshal(v.Str)
	case ExtraBytes:
		return json.Marshal(map[string]string{"bytes": hex.EncodeToString([]byte(v.Str))})
	case ExtraTuple:
		items := v.Items
		if items == nil {
			items = []ExtraValue{}
		}
		return json.Marshal(items)
	}
	return nil, &ExtraKeysError{Value: v.Kind.String(), Detail: "unknown kind"}
}

// UnmarshalJSON reads one extra-key value from JSON: null is None, true/false a bool, a
// number an integer when it is one in [-2^63, 2^64) and written without a fraction or
// exponent, otherwise a finite float; a string a string; an array a tuple; an object
// {"bytes": "<hex>"} a byte string. v is read as an element of a block's ExtraKeys (a tuple
// here is at depth 2). Anything else (another object, tuples nested deeper than
// MaxExtraDepth) is an *ExtraKeysError.
func (v *ExtraValue) UnmarshalJSON(b []byte) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var raw any
	if err := dec.Decode(&raw); err != nil {
		return &ExtraKeysError{Value: cut(b), Detail: err.Error()}
	}
	out, err := extraFromJSON(raw, 2) // an element of a block's keys: a tuple here is depth 2
	if err != nil {
		return err
	}
	*v = out
	return nil
}

func cut(b []byte) string {
	if len(b) > 64 {
		b = b[:64]
		for len(b) > 0 && !utf8.Valid(b) {
			b = b[:len(b)-1]
		}
		return string(b) + "..."
	}
	return string(b)
}

func extraFromJSON(raw any, depth int) (ExtraValue, error) {
	bad := func(detail string) (ExtraValue, error) {
		text, _ := json.Marshal(raw)
		return ExtraValue{}, &ExtraKeysError{Value: cut(text), Detail: detail}
	}
	switch x := raw.(type) {
	case nil:
		return ExtraNil(), nil
	case bool:
		return ExtraBoolValue(x), nil
	case json.Number:
		s := string(x)
		if !bytes.ContainsAny([]byte(s), ".eE") {
			if i, err := strconv.ParseInt(s, 10, 64); err == nil {
				return ExtraIntValue(i), nil
			}
			if u, err := strconv.ParseUint(s, 10, 64); err == nil {
				return ExtraUintValue(u), nil
			}
			return bad("an integer outside [-2^63, 2^64)")
		}
		f, err := strconv.ParseFloat(s, 64)
		if err != nil || math.IsInf(f, 0) {
			return bad("a number that is not a finite float64")
		}
		return ExtraFloatValue(f), nil
	case string:
		return ExtraStringValue(x), nil
	case []any:
		if depth > MaxExtraDepth {
			return bad(fmt.Sprintf("tuples nested deeper than %d", MaxExtraDepth))
		}
		items := make([]ExtraValue, len(x))
		for i, it := range x {
			var err error
			if items[i], err = extraFromJSON(it, depth+1); err != nil {
				return ExtraValue{}, err
			}
		}
		return ExtraTupleValue(items...), nil
	case map[string]any:
		h, ok := x["bytes"].(string)
		if len(x) != 1 || !ok {
			return bad(`an object other than {"bytes": "<hex>"}`)
		}
		b, err := hex.DecodeString(h)
		if err != nil {
			return bad("bytes that are not hex: " + err.Error())
		}
		return ExtraBytesValue(b), nil
	}
	return bad("not an extra-key value")
}
