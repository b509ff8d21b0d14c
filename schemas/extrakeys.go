package schemas

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"unicode/utf8"

	"github.com/ckf-stream/ckf-stream/ckf"
)

// A token query's per-block extra keys on the wire (QueryRequest.block_extra_keys and
// WorkerQueryRequest.block_extra_keys): one Avro bytes item per block, the block's keys in the
// canonical encoding the local hash appends after the block's tokens (ckf.ExtraKeys.
// AppendCanonical; producer §2.2, "Extra keys"), empty bytes for a block without. Avro has no
// dynamically typed value, so a structured form would be a union per value and a recursive
// record for tuples; the canonical encoding is already the contract's, injective, and exactly
// the bytes a router's own hash appends, so the item is that.

// errExtraKeysEncoding is the kind of the errors parseCanonicalExtraKeys returns; the caller
// reports them as the field's.
var errExtraKeysEncoding = errors.New("not a canonical extra-key encoding")

// canonicalExtraKeys returns each block's canonical encoding (nil for a block without keys).
func canonicalExtraKeys(keys []ckf.ExtraKeys) [][]byte {
	out := make([][]byte, len(keys))
	for i, k := range keys {
		out[i] = k.AppendCanonical(nil)
	}
	return out
}

// appendBlockExtraKeys appends the block_extra_keys field: null when keys is empty, else an
// array of one bytes item per block.
func appendBlockExtraKeys(dst []byte, keys []ckf.ExtraKeys) []byte {
	if len(keys) == 0 {
		return append(dst, 0)
	}
	dst = appendLong(append(dst, 2), int64(len(keys)))
	for _, k := range keys {
		if len(k) == 0 {
			dst = append(dst, 0) // empty bytes: a block without keys
			continue
		}
		dst = appendBytes(dst, k.AppendCanonical(nil))
	}
	return append(dst, 0) // end of the array
}

// blockExtraKeysNative is the block_extra_keys field for goavro.
func blockExtraKeysNative(keys []ckf.ExtraKeys) any {
	if len(keys) == 0 {
		return nil
	}
	items := make([]any, len(keys))
	for i, b := range canonicalExtraKeys(keys) {
		if b == nil {
			b = []byte{}
		}
		items[i] = b
	}
	return union("array", items)
}

// parseBlockExtraKeys turns the wire items into the blocks' keys; an empty list is nil.
func parseBlockExtraKeys(items [][]byte) ([]ckf.ExtraKeys, error) {
	if len(items) == 0 {
		return nil, nil
	}
	out := make([]ckf.ExtraKeys, len(items))
	for i, b := range items {
		k, err := parseCanonicalExtraKeys(b)
		if err != nil {
			return nil, fmt.Errorf("entry %d: %w", i, err)
		}
		out[i] = k
	}
	return out, nil
}

// parseCanonicalExtraKeys reads one block's keys from their canonical encoding: empty bytes
// are a block without keys; otherwise one tuple (tag 07) of at least one value, every value
// of a known tag, a bool 0 or 1, a tag-03 integer at least 2^63 (below it the integer is tag
// 02: one value, one encoding), strings of UTF-8, tuples nested at most ckf.MaxExtraDepth
// deep, and no byte after the tuple. Anything else would hash differently from what an engine
// stores, so it is refused rather than answered for another prompt.
func parseCanonicalExtraKeys(b []byte) (ckf.ExtraKeys, error) {
	if len(b) == 0 {
		return nil, nil
	}
	p := canonicalParser{b: b}
	if b[0] != byte(ckf.ExtraTuple) {
		return nil, fmt.Errorf("%w: starts with tag %#02x, not the tuple tag %#02x", errExtraKeysEncoding, b[0], byte(ckf.ExtraTuple))
	}
	v, err := p.value(1)
	if err != nil {
		return nil, err
	}
	if p.off != len(b) {
		return nil, fmt.Errorf("%w: %d bytes after the tuple", errExtraKeysEncoding, len(b)-p.off)
	}
	if len(v.Items) == 0 {
		return nil, fmt.Errorf("%w: an empty tuple (a block without keys is empty bytes)", errExtraKeysEncoding)
	}
	return ckf.ExtraKeys(v.Items), nil
}

type canonicalParser struct {
	b   []byte
	off int
}

func (p *canonicalParser) take(n int, what string) ([]byte, error) {
	if n < 0 || n > len(p.b)-p.off {
		return nil, fmt.Errorf("%w: %s needs %d bytes at offset %d, %d left", errExtraKeysEncoding, what, n, p.off, len(p.b)-p.off)
	}
	v := p.b[p.off : p.off+n]
	p.off += n
	return v, nil
}

func (p *canonicalParser) value(depth int) (ckf.ExtraValue, error) {
	tag, err := p.take(1, "a tag")
	if err != nil {
		return ckf.ExtraValue{}, err
	}
	switch kind := ckf.ExtraKind(tag[0]); kind {
	case ckf.ExtraNone:
		return ckf.ExtraNil(), nil
	case ckf.ExtraBool:
		c, err := p.take(1, "a bool")
		if err != nil {
			return ckf.ExtraValue{}, err
		}
		if c[0] > 1 {
			return ckf.ExtraValue{}, fmt.Errorf("%w: bool byte %d at offset %d", errExtraKeysEncoding, c[0], p.off-1)
		}
		return ckf.ExtraBoolValue(c[0] == 1), nil
	case ckf.ExtraInt, ckf.ExtraUint, ckf.ExtraFloat:
		c, err := p.take(8, "a "+kind.String())
		if err != nil {
			return ckf.ExtraValue{}, err
		}
		bits := binary.LittleEndian.Uint64(c)
		if kind == ckf.ExtraUint && bits <= math.MaxInt64 {
			return ckf.ExtraValue{}, fmt.Errorf("%w: tag 03 holds %d, below 2^63 (an integer below 2^63 is tag 02)", errExtraKeysEncoding, bits)
		}
		return ckf.ExtraValue{Kind: kind, Bits: bits}, nil
	case ckf.ExtraString, ckf.ExtraBytes:
		c, err := p.take(4, "a length")
		if err != nil {
			return ckf.ExtraValue{}, err
		}
		s, err := p.take(int(binary.LittleEndian.Uint32(c)), "a "+kind.String())
		if err != nil {
			return ckf.ExtraValue{}, err
		}
		if kind == ckf.ExtraString && !utf8.Valid(s) {
			return ckf.ExtraValue{}, fmt.Errorf("%w: a string that is not UTF-8 at offset %d", errExtraKeysEncoding, p.off-len(s))
		}
		return ckf.ExtraValue{Kind: kind, Str: string(s)}, nil
	case ckf.ExtraTuple:
		if depth > ckf.MaxExtraDepth {
			return ckf.ExtraValue{}, fmt.Errorf("%w: tuples nested deeper than %d", errExtraKeysEncoding, ckf.MaxExtraDepth)
		}
		c, err := p.take(4, "a tuple count")
		if err != nil {
			return ckf.ExtraValue{}, err
		}
		n := int(binary.LittleEndian.Uint32(c))
		if n > len(p.b)-p.off { // every value takes at least its tag byte
			return ckf.ExtraValue{}, fmt.Errorf("%w: a tuple of %d values in %d bytes", errExtraKeysEncoding, n, len(p.b)-p.off)
		}
		var items []ckf.ExtraValue // nil for (), as ckf.ExtraTupleValue() builds it
		if n > 0 {
			items = make([]ckf.ExtraValue, n)
		}
		for i := range items {
			if items[i], err = p.value(depth + 1); err != nil {
				return ckf.ExtraValue{}, err
			}
		}
		return ckf.ExtraTupleValue(items...), nil
	default:
		return ckf.ExtraValue{}, fmt.Errorf("%w: unknown tag %#02x at offset %d", errExtraKeysEncoding, tag[0], p.off-1)
	}
}

// checkBlockExtraKeys applies the request rules to a query's per-block extra keys: the shape
// rule of CheckBlockExtraKeys, and values that parseCanonicalExtraKeys reads back as they are
// (known kinds, booleans 0 or 1, an ExtraUint at least 2^63, strings of UTF-8, nesting at most
// ckf.MaxExtraDepth, no empty tuple for a block). The error names the field.
func checkBlockExtraKeys(q *QueryRequest, keys []ckf.ExtraKeys) error {
	if err := CheckBlockExtraKeys(q, len(keys)); err != nil {
		return invalid("block_extra_keys", "%v", err)
	}
	for i, k := range keys {
		for _, v := range k {
			if err := checkExtraValue(v, 2); err != nil {
				return invalid("block_extra_keys", "entry %d: %v", i, err)
			}
		}
	}
	return nil
}

func checkExtraValue(v ckf.ExtraValue, depth int) error {
	switch v.Kind {
	case ckf.ExtraNone, ckf.ExtraInt, ckf.ExtraFloat, ckf.ExtraBytes:
	case ckf.ExtraBool:
		if v.Bits > 1 {
			return fmt.Errorf("bool with bits %d", v.Bits)
		}
	case ckf.ExtraUint:
		if v.Bits <= math.MaxInt64 {
			return fmt.Errorf("uint %d below 2^63 (build it with ckf.ExtraUintValue)", v.Bits)
		}
	case ckf.ExtraString:
		if !utf8.ValidString(v.Str) {
			return errors.New("a string that is not UTF-8")
		}
	case ckf.ExtraTuple:
		if depth > ckf.MaxExtraDepth {
			return fmt.Errorf("tuples nested deeper than %d", ckf.MaxExtraDepth)
		}
		for _, it := range v.Items {
			if err := checkExtraValue(it, depth+1); err != nil {
				return err
			}
		}
	default:
		return fmt.Errorf("unknown kind %d", v.Kind)
	}
	return nil
}
