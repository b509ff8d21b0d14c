package queryapi

import (
	"encoding/binary"
	"math"
	"math/bits"
	"strconv"
	"time"
)

// The JSON form of POST /v1/prefix-matches, for the common case. encoding/json reads a request
// by reflection at about half a microsecond per element of local_block_hashes (35 µs for a
// 64-block query's body, over twenty times its answer: BenchmarkPlainRequest), plus a second pass
// for the duplicate-key rule, and writes a 16-lane reply in 2.5 µs (BenchmarkResponseJSON).
// Almost every request and reply is plain: the documented keys in lower case, each once; lists
// of decimal integers; strings of printable ASCII that need no escape. parsePlainRequest and
// appendResponse handle exactly that and decline everything else, which then takes the
// encoding/json path unchanged. What they accept is a subset of what encoding/json accepts, and
// for it they give what encoding/json gives, to the field and to the byte
// (TestPlainRequestMatchesEncodingJSON, FuzzPlainRequest, TestAppendResponseMatchesEncodingJSON,
// FuzzAppendResponse). Nothing they decline is an error of their own: every error a caller sees
// still comes from the encoding/json path.

// parsePlainRequest reads body when it is a plain request and reports whether it was: a JSON
// object (JSON whitespace around any token) whose keys are prefixMatchFields spelled exactly,
// none twice, except block_extra_keys; values null (as the request types of this package and
// of most clients write an absent list) or: lists of decimal integers in range of their element
// type (no sign, fraction, exponent or leading zero, no null element); integers likewise;
// strings of bytes 0x20..0x7E other than '"' and '\'; nothing after the object but whitespace.
// The lists are packed as they are read: each number goes straight into the little-endian bytes
// the answerer searches (schemas.PackedU64, schemas.PackedU32).
func parsePlainRequest(body []byte) (decoded, bool) { return parsePlainRequestBuf(body, nil) }

// parsePlainRequestBuf is parsePlainRequest packing the first list into buf's array (from
// buf[:0]; a buf of no capacity is sized by the body), so that a caller that keeps buf between
// requests decodes without allocating. A second list (a body giving both inputs, refused
// later) gets its own array.
func parsePlainRequestBuf(body, buf []byte) (decoded, bool) {
	p := plainParser{b: body}
	list := func() []byte {
		b := buf[:0]
		if cap(b) == 0 {
			b = make([]byte, 0, len(body))
		}
		buf = nil
		return b
	}
	var in decoded
	var seen [len(prefixMatchFields)]bool
	if !p.byte('{') {
		return in, false
	}
	if p.peek() == '}' {
		p.i++
		return in, p.end()
	}
	for {
		key, ok := p.key()
		if !ok || key == fieldBlockExtraKeys || seen[key] || !p.byte(':') {
			return in, false
		}
		seen[key] = true
		if p.null() {
			key = -1 // a field given as null stays as it is: zero, nil or absent
		}
		switch key {
		case fieldCorrelationID:
			in.CorrelationID, ok = p.str()
		case fieldLoraName:
			in.LoraName, ok = p.str()
		case fieldCacheNamespace:
			in.CacheNamespace, ok = p.str()
		case fieldLocalBlockHashes:
			in.LocalBlockHashes = list()
			ok = p.list(math.MaxUint64, func(v uint64) { in.LocalBlockHashes = binary.LittleEndian.AppendUint64(in.LocalBlockHashes, v) })
		case fieldTokenIDs:
			in.TokenIDs = list()
			ok = p.list(math.MaxUint32, func(v uint64) { in.TokenIDs = binary.LittleEndian.AppendUint32(in.TokenIDs, uint32(v)) })
		case fieldBlockSize:
			var v uint64
			v, ok = p.uint(math.MaxUint32)
			in.BlockSize = uint32(v)
		case fieldLaneMask:
			var v uint64
			v, ok = p.uint(math.MaxUint64)
			in.LaneMask = &v
		case fieldMaxAgeMillis:
			var v uint64
			v, ok = p.uint(math.MaxUint64)
			in.MaxAgeMillis = &v
		}
		if !ok {
			return in, false
		}
		switch p.next() {
		case ',':
		case '}':
			return in, p.end()
		default:
			return in, false
		}
	}
}

// The indexes of prefixMatchFields.
const (
	fieldCorrelationID = iota
	fieldLocalBlockHashes
	fieldTokenIDs
	fieldBlockSize
	fieldLoraName
	fieldCacheNamespace
	fieldBlockExtraKeys
	fieldLaneMask
	fieldMaxAgeMillis
)

// plainParser reads the plain shape from b at i. Every method skips the whitespace before its
// token and reports false on anything outside the shape.
type plainParser struct {
	b []byte
	i int
}

func (p *plainParser) skipSpace() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

// peek returns the next byte after whitespace without taking it (0 at the end).
func (p *plainParser) peek() byte {
	p.skipSpace()
	if p.i == len(p.b) {
		return 0
	}
	return p.b[p.i]
}

// next takes the next byte after whitespace (0 at the end).
func (p *plainParser) next() byte {
	c := p.peek()
	if c != 0 {
		p.i++
	}
	return c
}

func (p *plainParser) byte(c byte) bool { return p.next() == c }

// end reports whether only whitespace is left.
func (p *plainParser) end() bool { return p.peek() == 0 && p.i == len(p.b) }

// null takes a null if one is next.
func (p *plainParser) null() bool {
	if p.peek() != 'n' || len(p.b)-p.i < 4 || string(p.b[p.i:p.i+4]) != "null" {
		return false
	}
	p.i += 4
	return true
}

// rawStr takes a string of printable ASCII without escapes and returns its bytes.
func (p *plainParser) rawStr() ([]byte, bool) {
	if !p.byte('"') {
		return nil, false
	}
	start := p.i
	for ; p.i < len(p.b); p.i++ {
		switch c := p.b[p.i]; {
		case c == '"':
			p.i++
			return p.b[start : p.i-1], true
		case c < 0x20 || c > 0x7e || c == '\\':
			return nil, false
		}
	}
	return nil, false
}

func (p *plainParser) str() (string, bool) {
	s, ok := p.rawStr()
	return string(s), ok
}

// key takes a key and returns its index in prefixMatchFields.
func (p *plainParser) key() (int, bool) {
	s, ok := p.rawStr()
	if !ok {
		return 0, false
	}
	for i, f := range prefixMatchFields {
		if string(s) == f {
			return i, true
		}
	}
	return 0, false
}

// uint takes a decimal integer no greater than limit, followed by a byte that can end a number.
func (p *plainParser) uint(limit uint64) (uint64, bool) {
	p.skipSpace()
	b, i := p.b, p.i // locals: the scan below keeps them in registers
	for i+8 <= len(b) {
		if n := leadingDigits(binary.LittleEndian.Uint64(b[i:])); n < 8 {
			i += n
			goto scanned
		}
		i += 8
	}
	for i < len(b) && b[i]-'0' <= 9 {
		i++
	}
scanned:
	digits := b[p.i:i]
	p.i = i
	switch n := len(digits); {
	case n == 0, n > 1 && digits[0] == '0', n > 20:
		return 0, false // no digit, a leading zero, or beyond 64 bits: encoding/json's path
	}
	if p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r', ',', ']', '}':
		default:
			return 0, false // a fraction, an exponent or garbage
		}
	}
	// Up to 19 digits cannot overflow 64 bits; eight at a time where there are eight.
	head := digits[:min(len(digits), 19)]
	var v uint64
	for ; len(head) >= 8; head = head[8:] {
		v = v*100_000_000 + eightDigits(binary.LittleEndian.Uint64(head))
	}
	for _, c := range head {
		v = v*10 + uint64(c-'0')
	}
	if len(digits) == 20 { // the 64-bit range's last decade
		hi, lo := bits.Mul64(v, 10)
		sum, carry := bits.Add64(lo, uint64(digits[19]-'0'), 0)
		if hi != 0 || carry != 0 {
			return 0, false
		}
		v = sum
	}
	if v > limit {
		return 0, false
	}
	return v, true
}

// leadingDigits is how many of the eight bytes of x, loaded little-endian, are ASCII decimal
// digits before the first that is not. A byte is a digit when its high nibble is 3 and stays 3
// once 6 is added; a byte of 0xfa or more carries into the next, which is past the first
// non-digit and so never read.
func leadingDigits(x uint64) int {
	const high, three, six = 0xf0f0f0f0f0f0f0f0, 0x3030303030303030, 0x0606060606060606
	notDigit := ((x & high) ^ three) | (((x + six) & high) ^ three)
	return bits.TrailingZeros64(notDigit) / 8
}

// eightDigits is the value of eight ASCII decimal digits loaded little-endian (the first digit
// in the low byte): pairs, then quadruples, then the whole, each step one multiply.
func eightDigits(x uint64) uint64 {
	x -= 0x3030303030303030
	x = (x * 10) + (x >> 8) // each even byte: two digits
	x = ((x & 0x000000ff000000ff) * (100 + (1_000_000 << 32))) + (((x >> 16) & 0x000000ff000000ff) * (1 + (10_000 << 32)))
	return x >> 32
}

// list takes an array of decimal integers no greater than limit, giving each to add in order.
func (p *plainParser) list(limit uint64, add func(uint64)) bool {
	if !p.byte('[') {
		return false
	}
	if p.peek() == ']' {
		p.i++
		return true
	}
	for {
		v, ok := p.uint(limit)
		if !ok {
			return false
		}
		add(v)
		switch p.next() {
		case ',':
		case ']':
			return true
		default:
			return false
		}
	}
}

// appendResponse appends r as encoding/json marshals it (json.Marshal(r), byte for byte) when
// every string in it is plain, and reports whether it did; otherwise it appends nothing and the
// caller marshals with encoding/json. A plain string is printable ASCII that encoding/json writes
// as it is: no '"', '\' or control byte, and none of '<', '>', '&', which it escapes for HTML.
func appendResponse(dst []byte, r *PrefixMatchResponse) ([]byte, bool) {
	if !plainString(r.CorrelationID) || !plainString(r.Status) || !plainString(r.Error) {
		return dst, false
	}
	for i := range r.Matches {
		if !plainString(r.Matches[i].DcID) || !plainString(r.Matches[i].Pool) {
			return dst, false
		}
	}
	for i := range r.Lanes {
		if !plainString(r.Lanes[i].DcID) || !plainString(r.Lanes[i].Pool) || !plainString(r.Lanes[i].State) {
			return dst, false
		}
	}
	if y := r.ReplyTime.Year(); y < 0 || y > 9999 { // time.Time.MarshalJSON's error
		return dst, false
	}
	dst = append(dst, '{')
	if r.CorrelationID != "" {
		dst = append(dst, `"correlation_id":"`...)
		dst = append(dst, r.CorrelationID...)
		dst = append(dst, `",`...)
	}
	dst = append(dst, `"status":"`...)
	dst = append(dst, r.Status...)
	dst = append(dst, '"')
	if r.Error != "" {
		dst = append(dst, `,"error":"`...)
		dst = append(dst, r.Error...)
		dst = append(dst, '"')
	}
	dst = append(dst, `,"query_blocks":`...)
	dst = strconv.AppendUint(dst, uint64(r.QueryBlocks), 10)
	dst = append(dst, `,"ready_lanes":`...)
	dst = strconv.AppendUint(dst, uint64(r.ReadyLanes), 10)
	dst = append(dst, `,"incomplete_lanes":`...)
	dst = strconv.AppendUint(dst, uint64(r.IncompleteLanes), 10)
	dst = append(dst, `,"matches":`...)
	if r.Matches == nil {
		dst = append(dst, "null"...)
	} else {
		dst = appendMatches(dst, r.Matches)
	}
	dst = append(dst, `,"lanes":`...)
	if r.Lanes == nil {
		dst = append(dst, "null"...)
	} else {
		dst = appendLaneAnswers(dst, r.Lanes)
	}
	if !r.ReplyTime.IsZero() {
		dst = append(dst, `,"reply_time":"`...)
		dst = r.ReplyTime.AppendFormat(dst, time.RFC3339Nano)
		dst = append(dst, '"')
	}
	return append(dst, '}'), true
}

// appendMatches appends ms as encoding/json writes a []DCMatch of plain strings.
func appendMatches(dst []byte, ms []DCMatch) []byte {
	dst = append(dst, '[')
	for i := range ms {
		m := &ms[i]
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, `{"lane":`...)
		dst = strconv.AppendUint(dst, uint64(m.Lane), 10)
		dst = append(dst, `,"dc_id":"`...)
		dst = append(dst, m.DcID...)
		dst = append(dst, `","pool":"`...)
		dst = append(dst, m.Pool...)
		dst = append(dst, `","depth":`...)
		dst = strconv.AppendUint(dst, uint64(m.Depth), 10)
		if m.Incomplete {
			dst = append(dst, `,"incomplete":true`...)
		}
		dst = append(dst, '}')
	}
	return append(dst, ']')
}

// appendLaneAnswers appends ls as encoding/json writes a []LaneAnswer of plain strings.
func appendLaneAnswers(dst []byte, ls []LaneAnswer) []byte {
	dst = append(dst, '[')
	for i := range ls {
		l := &ls[i]
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, `{"lane":`...)
		dst = strconv.AppendUint(dst, uint64(l.Lane), 10)
		dst = append(dst, `,"dc_id":"`...)
		dst = append(dst, l.DcID...)
		dst = append(dst, `","pool":"`...)
		dst = append(dst, l.Pool...)
		dst = append(dst, `","state":"`...)
		dst = append(dst, l.State...)
		dst = append(dst, '"')
		if l.AgeMillis != nil {
			dst = append(dst, `,"age_ms":`...)
			dst = strconv.AppendInt(dst, *l.AgeMillis, 10)
		}
		if l.Depth != nil {
			dst = append(dst, `,"depth":`...)
			dst = strconv.AppendUint(dst, uint64(*l.Depth), 10)
		}
		dst = append(dst, '}')
	}
	return append(dst, ']')
}

// plainString reports whether encoding/json writes s between quotes unchanged.
func plainString(s string) bool {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c < 0x20 || c > 0x7e, c == '"', c == '\\', c == '<', c == '>', c == '&':
			return false
		}
	}
	return true
}
