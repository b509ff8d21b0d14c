package schemas

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// The bounds checker walks an Avro body along its writer schema before
// goavro decodes it. goavro trusts declared array and map block counts when
// it preallocates (up to 2^31 elements), so a few hostile bytes could ask for
// gigabytes; the walk rejects every length and count that the bytes left
// cannot hold, which bounds goavro's allocations to a small multiple of the
// input size. It also enforces what goavro does not: varints of at most 10
// (long) or 5 (int) bytes within range, booleans of 0 or 1, and no trailing
// bytes.

type nodeKind uint8

const (
	kNull nodeKind = iota
	kBoolean
	kInt
	kLong
	kFloat
	kDouble
	kBytes
	kString
	kFixed
	kEnum
	kArray
	kMap
	kUnion
	kRecord
)

// node is one schema type. Named types are shared, so recursive schemas form
// cycles; the walk bounds its depth.
type node struct {
	kind nodeKind
	name string  // full name of a record, enum or fixed
	size int     // fixed size, or enum symbol count
	elem *node   // array items or map values
	subs []*node // union branches or record fields
	min  int     // minimum encoded size in bytes; -1 while being computed
}

// maxSkimDepth bounds nesting (and recursion through recursive schemas).
const maxSkimDepth = 64

var primitives = map[string]nodeKind{
	"null": kNull, "boolean": kBoolean, "int": kInt, "long": kLong, "float": kFloat,
	"double": kDouble, "bytes": kBytes, "string": kString,
}

type schemaParser struct{ names map[string]*node }

func parseSchema(text string) (*node, error) {
	var v any
	if err := json.Unmarshal([]byte(text), &v); err != nil {
		return nil, err
	}
	p := schemaParser{names: map[string]*node{}}
	n, err := p.parse(v, "")
	if err != nil {
		return nil, err
	}
	minSize(n)
	return n, nil
}

func fullName(name, namespace string) string {
	if strings.Contains(name, ".") || namespace == "" {
		return name
	}
	return namespace + "." + name
}

func (p *schemaParser) parse(v any, ns string) (*node, error) {
	switch s := v.(type) {
	case string:
		if k, ok := primitives[s]; ok {
			return &node{kind: k}, nil
		}
		if n, ok := p.names[fullName(s, ns)]; ok {
			return n, nil
		}
		if n, ok := p.names[s]; ok {
			return n, nil
		}
		return nil, fmt.Errorf("unknown type %q", s)
	case []any:
		n := &node{kind: kUnion}
		for _, b := range s {
			sub, err := p.parse(b, ns)
			if err != nil {
				return nil, err
			}
			n.subs = append(n.subs, sub)
		}
		if len(n.subs) == 0 {
			return nil, errors.New("empty union")
		}
		return n, nil
	case map[string]any:
		typ, _ := s["type"].(string)
		switch typ {
		case "record", "error", "enum", "fixed":
			name, _ := s["name"].(string)
			if name == "" {
				return nil, fmt.Errorf("%s without a name", typ)
			}
			if nsv, ok := s["namespace"].(string); ok && !strings.Contains(name, ".") {
				ns = nsv
			}
			full := fullName(name, ns)
			if i := strings.LastIndexByte(full, '.'); i >= 0 {
				ns = full[:i]
			}
			n := &node{name: full}
			p.names[full] = n
			switch typ {
			case "enum":
				syms, _ := s["symbols"].([]any)
				if len(syms) == 0 {
					return nil, fmt.Errorf("enum %s without symbols", full)
				}
				n.kind, n.size = kEnum, len(syms)
			case "fixed":
				size, _ := s["size"].(float64)
				if size < 0 || size > 1<<20 || size != float64(int(size)) {
					return nil, fmt.Errorf("fixed %s has a bad size", full)
				}
				n.kind, n.size = kFixed, int(size)
			default:
				n.kind = kRecord
				fields, _ := s["fields"].([]any)
				for _, f := range fields {
					fm, ok := f.(map[string]any)
					if !ok {
						return nil, fmt.Errorf("record %s has a bad field", full)
					}
					sub, err := p.parse(fm["type"], ns)
					if err != nil {
						return nil, err
					}
					n.subs = append(n.subs, sub)
				}
			}
			return n, nil
		case "array":
			elem, err := p.parse(s["items"], ns)
			if err != nil {
				return nil, err
			}
			return &node{kind: kArray, elem: elem}, nil
		case "map":
			elem, err := p.parse(s["values"], ns)
			if err != nil {
				return nil, err
			}
			return &node{kind: kMap, elem: elem}, nil
		default:
			// A primitive written as an object, possibly with a logical type.
			return p.parse(s["type"], ns)
		}
	}
	return nil, fmt.Errorf("bad schema element %T", v)
}

// minSize computes (and caches) the minimum encoded size of n. A record met
// again while its size is being computed counts as 0, which keeps the bound
// a lower bound for recursive schemas.
func minSize(n *node) int {
	if n.min > 0 || n.min == -1 {
		return max(n.min, 0)
	}
	n.min = -1
	var m int
	switch n.kind {
	case kNull:
		m = 0
	case kBoolean, kInt, kLong, kBytes, kString, kEnum, kArray, kMap:
		m = 1
	case kFloat:
		m = 4
	case kDouble:
		m = 8
	case kFixed:
		m = n.size
	case kUnion:
		best := -1
		for _, b := range n.subs {
			if s := minSize(b); best < 0 || s < best {
				best = s
			}
		}
		m = 1 + best
	case kRecord:
		for _, f := range n.subs {
			m += minSize(f)
		}
	}
	if n.elem != nil {
		minSize(n.elem)
	}
	n.min = m
	return m
}

// skim checks that body is exactly one value of schema n. A failure is a
// *DecodeError without Type and SchemaID, which the caller fills in.
func skim(n *node, body []byte) error {
	r := reader{b: body}
	skimValue(&r, n, 0)
	if !r.failed() && r.remaining() != 0 {
		r.fail(ErrMalformed, fmt.Sprintf("%d trailing bytes", r.remaining()))
	}
	if r.failed() {
		return &DecodeError{Kind: r.kind, SchemaID: -1, Detail: r.detail}
	}
	return nil
}

func skimValue(r *reader, n *node, depth int) {
	if depth > maxSkimDepth {
		r.fail(ErrMalformed, "nesting deeper than the bounds checker allows")
		return
	}
	switch n.kind {
	case kNull:
	case kBoolean:
		r.boolean()
	case kInt:
		r.int()
	case kLong:
		r.long()
	case kFloat:
		r.fixed(4)
	case kDouble:
		r.fixed(8)
	case kBytes, kString:
		r.bytes()
	case kFixed:
		r.fixed(n.size)
	case kEnum:
		r.index(n.size, "enum")
	case kUnion:
		i := r.index(len(n.subs), "union")
		if !r.failed() {
			skimValue(r, n.subs[i], depth+1)
		}
	case kRecord:
		for _, f := range n.subs {
			if r.failed() {
				return
			}
			skimValue(r, f, depth+1)
		}
	case kArray, kMap:
		skimBlocks(r, n, depth)
	}
}

// skimBlocks walks array or map blocks. A block count is accepted only if
// the bytes left can hold that many elements of the element type's minimum
// size (at least one byte each, so zero-size elements are capped too).
func skimBlocks(r *reader, n *node, depth int) {
	elemMin := max(minSize(n.elem), 1)
	if n.kind == kMap {
		elemMin++ // the key string
	}
	for !r.failed() {
		count := r.blockCount(elemMin)
		if count == 0 {
			return
		}
		for i := int64(0); i < count && !r.failed(); i++ {
			if n.kind == kMap {
				r.bytes()
			}
			skimValue(r, n.elem, depth+1)
		}
	}
}
