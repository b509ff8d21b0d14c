package ckf

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"unicode/utf8"
)

// Identity material (producer §1.2): the bytes a runtime layer hashes with
// BLAKE3 to obtain the 16-byte CacheSemanticsID / RoutingScopeID digests.
// BLAKE3 itself, and how the 16 bytes are cut from its output (UNKNOWN in
// the spec), are out of scope for this package: ckf builds, validates and
// decodes the material only.
//
// Encoding (all integers little-endian):
//
//	framed(x)  = u32 len(x) || x
//	count      = u32
//	semantics  = framed(tag) || selected || u32 kv_block_size || u16 event_hash_format
//	routing    = framed(tag) || selected
//	selected   = explicit ? count(entries) || (framed(key) framed(value))* in ascending key order
//	                      : count(defaults) || framed(default)* in the given order

// Identity material tags (ASCII).
const (
	TagCacheSemanticsDefault  = "dynamo/indexer-cache-semantics/default/v1"
	TagCacheSemanticsExplicit = "dynamo/indexer-cache-semantics/explicit/v1"
	TagRoutingScopeDefault    = "dynamo/indexer-routing-scope/default/v1"
	TagRoutingScopeExplicit   = "dynamo/indexer-routing-scope/explicit/v1"
)

// Explicit map limits.
const (
	MaxExplicitEntries     = 32
	MaxExplicitKeyBytes    = 128
	MaxExplicitValueBytes  = 1024
	maxFramedMaterialBytes = 1 << 24 // decoder bound on any framed field
)

// ErrInvalidIdentityMaterial matches every material validation/decoding
// error via errors.Is.
var ErrInvalidIdentityMaterial = errors.New("ckf: invalid identity material")

func materialErr(format string, a ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalidIdentityMaterial}, a...)...)
}

// MaterialSelection selects the material of one identity. Explicit is used
// iff it is non-nil (a non-nil empty map is invalid: 1..=32 entries);
// otherwise Defaults are used in the given order.
type MaterialSelection struct {
	Explicit map[string]string
	Defaults []string
}

// ValidateExplicitEntries checks the explicit-map limits: 1..=32 entries,
// keys non-empty, valid UTF-8, <= 128 bytes; values non-empty, valid UTF-8,
// <= 1024 bytes.
func ValidateExplicitEntries(m map[string]string) error {
	if len(m) < 1 || len(m) > MaxExplicitEntries {
		return materialErr("explicit map has %d entries (want 1..=%d)", len(m), MaxExplicitEntries)
	}
	for k, v := range m {
		if err := validateEntry(k, v); err != nil {
			return err
		}
	}
	return nil
}

func validateEntry(k, v string) error {
	switch {
	case k == "" || len(k) > MaxExplicitKeyBytes || !utf8.ValidString(k):
		return materialErr("explicit key %q: must be 1..=%d bytes of UTF-8", k, MaxExplicitKeyBytes)
	case v == "" || len(v) > MaxExplicitValueBytes || !utf8.ValidString(v):
		return materialErr("explicit value for %q: must be 1..=%d bytes of UTF-8", k, MaxExplicitValueBytes)
	}
	return nil
}

// ExplicitEntry is one decoded key/value pair, before duplicate detection.
type ExplicitEntry struct{ Key, Value string }

// DecodeExplicitEntries builds an explicit map from a decoded list,
// rejecting duplicate keys and limit violations.
func DecodeExplicitEntries(entries []ExplicitEntry) (map[string]string, error) {
	m := make(map[string]string, len(entries))
	for _, e := range entries {
		if _, dup := m[e.Key]; dup {
			return nil, materialErr("duplicate explicit key %q", e.Key)
		}
		m[e.Key] = e.Value
	}
	if err := ValidateExplicitEntries(m); err != nil {
		return nil, err
	}
	return m, nil
}

func appendFramed(b []byte, s string) []byte {
	b = binary.LittleEndian.AppendUint32(b, uint32(len(s)))
	return append(b, s...)
}

func appendSelected(b []byte, sel MaterialSelection) ([]byte, error) {
	if sel.Explicit != nil {
		if err := ValidateExplicitEntries(sel.Explicit); err != nil {
			return nil, err
		}
		keys := make([]string, 0, len(sel.Explicit))
		for k := range sel.Explicit {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		b = binary.LittleEndian.AppendUint32(b, uint32(len(keys)))
		for _, k := range keys {
			b = appendFramed(appendFramed(b, k), sel.Explicit[k])
		}
		return b, nil
	}
	if uint64(len(sel.Defaults)) > 1<<32-1 {
		return nil, materialErr("too many defaults")
	}
	b = binary.LittleEndian.AppendUint32(b, uint32(len(sel.Defaults)))
	for _, d := range sel.Defaults {
		if uint64(len(d)) > 1<<32-1 {
			return nil, materialErr("default too long")
		}
		b = appendFramed(b, d)
	}
	return b, nil
}

// CacheSemanticsMaterial returns the cache-semantics material and the
// identity source (Explicit iff sel.Explicit != nil).
func CacheSemanticsMaterial(sel MaterialSelection, kvBlockSize uint32, eventHashFormat uint16) ([]byte, IdentitySource, error) {
	tag, src := TagCacheSemanticsDefault, IdentityDefaultDerived
	if sel.Explicit != nil {
		tag, src = TagCacheSemanticsExplicit, IdentityExplicit
	}
	b, err := appendSelected(appendFramed(nil, tag), sel)
	if err != nil {
		return nil, 0, err
	}
	b = binary.LittleEndian.AppendUint32(b, kvBlockSize)
	b = binary.LittleEndian.AppendUint16(b, eventHashFormat)
	return b, src, nil
}

// RoutingScopeMaterial returns the routing-scope material and the identity
// source (Explicit iff sel.Explicit != nil).
func RoutingScopeMaterial(sel MaterialSelection) ([]byte, IdentitySource, error) {
	tag, src := TagRoutingScopeDefault, IdentityDefaultDerived
	if sel.Explicit != nil {
		tag, src = TagRoutingScopeExplicit, IdentityExplicit
	}
	b, err := appendSelected(appendFramed(nil, tag), sel)
	if err != nil {
		return nil, 0, err
	}
	return b, src, nil
}

// MaterialKind distinguishes the two identity materials.
type MaterialKind uint8

const (
	// MaterialCacheSemantics: cache-semantics material.
	MaterialCacheSemantics MaterialKind = iota + 1
	// MaterialRoutingScope: routing-scope material.
	MaterialRoutingScope
)

// IdentityMaterial is a decoded material. KvBlockSize and EventHashFormat
// are set only for MaterialCacheSemantics.
type IdentityMaterial struct {
	Kind            MaterialKind
	Source          IdentitySource
	Selection       MaterialSelection
	KvBlockSize     uint32
	EventHashFormat uint16
}

type materialReader struct{ b []byte }

func (r *materialReader) u32() (uint32, error) {
	if len(r.b) < 4 {
		return 0, materialErr("truncated")
	}
	v := binary.LittleEndian.Uint32(r.b)
	r.b = r.b[4:]
	return v, nil
}

func (r *materialReader) framed() (string, error) {
	n, err := r.u32()
	if err != nil {
		return "", err
	}
	if uint64(n) > uint64(len(r.b)) || n > maxFramedMaterialBytes {
		return "", materialErr("framed length %d exceeds input", n)
	}
	s := string(r.b[:n])
	r.b = r.b[n:]
	return s, nil
}

// DecodeIdentityMaterial parses material built by CacheSemanticsMaterial or
// RoutingScopeMaterial. It rejects unknown tags, truncation, trailing
// bytes, explicit keys that are not strictly ascending (which covers
// duplicates) and explicit-map limit violations, and bounds every count by
// the remaining input before allocating.
func DecodeIdentityMaterial(b []byte) (IdentityMaterial, error) {
	r := materialReader{b: b}
	tag, err := r.framed()
	if err != nil {
		return IdentityMaterial{}, err
	}
	var m IdentityMaterial
	switch tag {
	case TagCacheSemanticsDefault:
		m.Kind, m.Source = MaterialCacheSemantics, IdentityDefaultDerived
	case TagCacheSemanticsExplicit:
		m.Kind, m.Source = MaterialCacheSemantics, IdentityExplicit
	case TagRoutingScopeDefault:
		m.Kind, m.Source = MaterialRoutingScope, IdentityDefaultDerived
	case TagRoutingScopeExplicit:
		m.Kind, m.Source = MaterialRoutingScope, IdentityExplicit
	default:
		return IdentityMaterial{}, materialErr("unknown tag %q", tag)
	}
	n, err := r.u32()
	if err != nil {
		return IdentityMaterial{}, err
	}
	if uint64(n) > uint64(len(r.b))/4 {
		return IdentityMaterial{}, materialErr("count %d exceeds input", n)
	}
	if m.Source == IdentityExplicit {
		if n < 1 || n > MaxExplicitEntries {
			return IdentityMaterial{}, materialErr("explicit map has %d entries", n)
		}
		m.Selection.Explicit = make(map[string]string, n)
		prev := ""
		for i := uint32(0); i < n; i++ {
			k, err := r.framed()
			if err != nil {
				return IdentityMaterial{}, err
			}
			v, err := r.framed()
			if err != nil {
				return IdentityMaterial{}, err
			}
			if i > 0 && k <= prev {
				return IdentityMaterial{}, materialErr("explicit key %q duplicated or out of order", k)
			}
			if err := validateEntry(k, v); err != nil {
				return IdentityMaterial{}, err
			}
			m.Selection.Explicit[k], prev = v, k
		}
	} else {
		m.Selection.Defaults = make([]string, 0, n)
		for i := uint32(0); i < n; i++ {
			d, err := r.framed()
			if err != nil {
				return IdentityMaterial{}, err
			}
			m.Selection.Defaults = append(m.Selection.Defaults, d)
		}
	}
	if m.Kind == MaterialCacheSemantics {
		if len(r.b) < 6 {
			return IdentityMaterial{}, materialErr("truncated")
		}
		m.KvBlockSize = binary.LittleEndian.Uint32(r.b)
		m.EventHashFormat = binary.LittleEndian.Uint16(r.b[4:])
		r.b = r.b[6:]
	}
	if len(r.b) != 0 {
		return IdentityMaterial{}, materialErr("%d trailing bytes", len(r.b))
	}
	return m, nil
}
