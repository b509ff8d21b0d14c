package schemas

import (
	"encoding/binary"
	"strconv"
)

// This file holds the Avro binary primitives of the package's two readers:
// the hand-written codecs of the hot records (fastlane.go, fastquery.go,
// fastkv.go) and the bounds checker that walks every body before goavro sees
// it (skim.go). No other code reads Avro bytes. Reading never allocates: byte
// values are returned as subslices of the input.

// reader walks an Avro binary body. The first failure is kept in err (kind
// and detail) and every later read returns zero values, so decoders read a
// whole record and check err once.
type reader struct {
	b      []byte
	off    int
	kind   error
	detail string
}

func (r *reader) fail(kind error, detail string) {
	if r.kind == nil {
		r.kind, r.detail = kind, detail
		r.off = len(r.b)
	}
}

func (r *reader) failed() bool { return r.kind != nil }

func (r *reader) remaining() int { return len(r.b) - r.off }

// varint reads a zig-zag varint of at most maxBytes bytes. A one-byte varint (a value in
// [-64, 63]: union and enum indexes, small lengths and counts) takes the first branch; longer
// ones, and the end of the input, varintLong.
func (r *reader) varint(maxBytes int) int64 {
	if r.off < len(r.b) {
		if c := r.b[r.off]; c < 0x80 {
			r.off++
			return int64(c>>1) ^ -int64(c&1)
		}
	}
	return r.varintLong(maxBytes)
}

// varintLong is varint for a varint that does not end in its first byte, or at the end of the
// input.
func (r *reader) varintLong(maxBytes int) int64 {
	var v uint64
	for i := 0; i < maxBytes; i++ {
		if r.off >= len(r.b) {
			r.fail(ErrTruncated, "input ends inside a varint at byte "+strconv.Itoa(r.off))
			return 0
		}
		c := r.b[r.off]
		r.off++
		if i == 9 && c > 1 {
			r.fail(ErrMalformed, "varint overflows 64 bits at byte "+strconv.Itoa(r.off-1))
			return 0
		}
		v |= uint64(c&0x7f) << (7 * i)
		if c < 0x80 {
			return int64(v>>1) ^ -int64(v&1)
		}
	}
	r.fail(ErrMalformed, "varint longer than "+strconv.Itoa(maxBytes)+" bytes at byte "+strconv.Itoa(r.off))
	return 0
}

func (r *reader) long() int64 { return r.varint(10) }

func (r *reader) int() int32 {
	v := r.varint(5)
	if v != int64(int32(v)) {
		r.fail(ErrMalformed, "int out of 32-bit range at byte "+strconv.Itoa(r.off))
		return 0
	}
	return int32(v)
}

// u64 reads a long carrying a u64's two's-complement bit pattern.
func (r *reader) u64() uint64 { return uint64(r.long()) }

// length reads a bytes/string length and checks it against the input left.
func (r *reader) length() int {
	n := r.long()
	switch {
	case r.failed():
		return 0
	case n < 0:
		r.fail(ErrMalformed, "negative length "+strconv.FormatInt(n, 10))
		return 0
	case n > int64(r.remaining()):
		r.fail(ErrTruncated, "declared length "+strconv.FormatInt(n, 10)+" exceeds the "+strconv.Itoa(r.remaining())+" bytes left")
		return 0
	}
	return int(n)
}

// bytes reads an Avro bytes value as a subslice of the input (no copy).
func (r *reader) bytes() []byte {
	n := r.length()
	if r.failed() {
		return nil
	}
	v := r.b[r.off : r.off+n : r.off+n]
	r.off += n
	return v
}

func (r *reader) fixed(n int) []byte {
	if n > r.remaining() {
		r.fail(ErrTruncated, "fixed of "+strconv.Itoa(n)+" bytes exceeds the "+strconv.Itoa(r.remaining())+" bytes left")
		return nil
	}
	v := r.b[r.off : r.off+n : r.off+n]
	r.off += n
	return v
}

// index reads a union branch or enum symbol index and checks it is below n.
func (r *reader) index(n int, what string) int {
	i := r.long()
	if r.failed() {
		return 0
	}
	if i < 0 || i >= int64(n) {
		r.fail(ErrMalformed, what+" index "+strconv.FormatInt(i, 10)+" out of range [0, "+strconv.Itoa(n)+")")
		return 0
	}
	return int(i)
}

func (r *reader) boolean() bool {
	if r.off >= len(r.b) {
		r.fail(ErrTruncated, "input ends inside a boolean")
		return false
	}
	c := r.b[r.off]
	r.off++
	if c > 1 {
		r.fail(ErrMalformed, "boolean byte "+strconv.Itoa(int(c)))
	}
	return c == 1
}

// blockCount reads the header of one array or map block and returns its
// element count (0 ends the array). A negative count is followed by the
// block's byte size, which is checked and skipped. The count is accepted
// only if the bytes left can hold that many elements of elemMin bytes each
// (elemMin >= 1), which bounds what any decoder allocates for the block.
func (r *reader) blockCount(elemMin int) int64 {
	count := r.long()
	if r.failed() || count == 0 {
		return 0
	}
	if count < 0 {
		if count == -count { // math.MinInt64
			r.fail(ErrMalformed, "block count out of range")
			return 0
		}
		count = -count
		if size := r.long(); !r.failed() && (size < 0 || size > int64(r.remaining())) {
			r.fail(ErrTruncated, "block size "+strconv.FormatInt(size, 10)+" exceeds the "+strconv.Itoa(r.remaining())+" bytes left")
			return 0
		}
	}
	if count > int64(r.remaining()/elemMin) {
		r.fail(ErrTruncated, "block count "+strconv.FormatInt(count, 10)+" needs more than the "+strconv.Itoa(r.remaining())+" bytes left")
		return 0
	}
	return count
}

// str reads an Avro string (one allocation for the copy).
func (r *reader) str() string { return string(r.bytes()) }

// optIndex reads the branch index of a ["null", T] union: false for null.
func (r *reader) optIndex() bool { return r.index(2, "union") == 1 }

// appendString appends s as an Avro string.
func appendString(dst []byte, s string) []byte {
	dst = appendLong(dst, int64(len(s)))
	return append(dst, s...)
}

// appendLong appends v as an Avro long (zig-zag varint).
func appendLong(dst []byte, v int64) []byte {
	return binary.AppendUvarint(dst, uint64(v<<1)^uint64(v>>63))
}

func appendU64(dst []byte, v uint64) []byte { return appendLong(dst, int64(v)) }

func appendBytes(dst []byte, b []byte) []byte {
	dst = appendLong(dst, int64(len(b)))
	return append(dst, b...)
}

func le64(b []byte) uint64 { return binary.LittleEndian.Uint64(b) }

func itoa(i int) string { return strconv.Itoa(i) }
