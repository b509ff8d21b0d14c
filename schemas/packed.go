package schemas

import (
	"encoding/binary"
	"slices"
	"strconv"
)

// Packed layouts. Bulk values travel as Avro bytes holding fixed-size
// little-endian elements; these types read them in place, so decoding a
// record never allocates per element. A decoded record's packed fields alias
// the buffer it was decoded from: keep that buffer unchanged while the
// record is in use.
const (
	// WordSize is the size of one packed u64 (bucket word, block hash).
	WordSize = 8
	// ImageSize is the size of one packed delta image: bucket u64 LE, then
	// value u64 LE.
	ImageSize = 16
	// TokenSize is the size of one packed u32 token id.
	TokenSize = 4
)

// BucketImage is the absolute new value of one bucket.
type BucketImage struct {
	Bucket uint64
	Value  uint64
}

// PackedU64 is a sequence of u64 values, WordSize little-endian bytes each:
// snapshot bucket words and query local block hashes.
type PackedU64 []byte

// Len returns the number of complete elements.
func (p PackedU64) Len() int { return len(p) / WordSize }

// At returns element i; it panics if i is out of range, like a slice index.
func (p PackedU64) At(i int) uint64 { return binary.LittleEndian.Uint64(p[i*WordSize:]) }

// AppendTo appends every element to dst and returns the extended slice; it
// allocates only if dst lacks capacity.
func (p PackedU64) AppendTo(dst []uint64) []uint64 {
	dst = slices.Grow(dst, p.Len())
	for i := 0; i+WordSize <= len(p); i += WordSize {
		dst = append(dst, binary.LittleEndian.Uint64(p[i:]))
	}
	return dst
}

// PackedImages is a sequence of bucket images, ImageSize bytes each.
type PackedImages []byte

// Len returns the number of complete images.
func (p PackedImages) Len() int { return len(p) / ImageSize }

// At returns image i; it panics if i is out of range, like a slice index.
func (p PackedImages) At(i int) BucketImage {
	b := p[i*ImageSize : i*ImageSize+ImageSize]
	return BucketImage{Bucket: binary.LittleEndian.Uint64(b), Value: binary.LittleEndian.Uint64(b[8:])}
}

// AppendTo appends every image to dst and returns the extended slice; it
// allocates only if dst lacks capacity.
func (p PackedImages) AppendTo(dst []BucketImage) []BucketImage {
	dst = slices.Grow(dst, p.Len())
	for i := 0; i+ImageSize <= len(p); i += ImageSize {
		dst = append(dst, BucketImage{
			Bucket: binary.LittleEndian.Uint64(p[i:]),
			Value:  binary.LittleEndian.Uint64(p[i+8:]),
		})
	}
	return dst
}

// PackedU32 is a sequence of u32 values, TokenSize little-endian bytes each:
// query token ids.
type PackedU32 []byte

// Len returns the number of complete elements.
func (p PackedU32) Len() int { return len(p) / TokenSize }

// At returns element i; it panics if i is out of range, like a slice index.
func (p PackedU32) At(i int) uint32 { return binary.LittleEndian.Uint32(p[i*TokenSize:]) }

// AppendTo appends every element to dst and returns the extended slice; it
// allocates only if dst lacks capacity.
func (p PackedU32) AppendTo(dst []uint32) []uint32 {
	dst = slices.Grow(dst, p.Len())
	for i := 0; i+TokenSize <= len(p); i += TokenSize {
		dst = append(dst, binary.LittleEndian.Uint32(p[i:]))
	}
	return dst
}

// AppendU64s appends the packed form of vs (snapshot words, block hashes) to
// dst and returns the extended slice.
func AppendU64s(dst []byte, vs []uint64) []byte {
	dst = slices.Grow(dst, len(vs)*WordSize)
	for _, v := range vs {
		dst = binary.LittleEndian.AppendUint64(dst, v)
	}
	return dst
}

// AppendImages appends the packed form of imgs to dst and returns the
// extended slice.
func AppendImages(dst []byte, imgs []BucketImage) []byte {
	dst = slices.Grow(dst, len(imgs)*ImageSize)
	for _, im := range imgs {
		dst = binary.LittleEndian.AppendUint64(dst, im.Bucket)
		dst = binary.LittleEndian.AppendUint64(dst, im.Value)
	}
	return dst
}

// AppendImage appends one packed image to dst; a producer can pack a delta
// straight from its dirty set without building a []BucketImage first.
func AppendImage(dst []byte, bucket, value uint64) []byte {
	dst = binary.LittleEndian.AppendUint64(dst, bucket)
	return binary.LittleEndian.AppendUint64(dst, value)
}

// AppendU32s appends the packed form of vs (token ids) to dst and returns the
// extended slice.
func AppendU32s(dst []byte, vs []uint32) []byte {
	dst = slices.Grow(dst, len(vs)*TokenSize)
	for _, v := range vs {
		dst = binary.LittleEndian.AppendUint32(dst, v)
	}
	return dst
}

// UnpackU64s validates packed (its length must be a multiple of WordSize)
// and appends its elements to dst. On error dst is returned unchanged and the
// error is a *DecodeError of kind ErrInvalidField.
func UnpackU64s(dst []uint64, packed []byte) ([]uint64, error) {
	if err := checkPacked(packed, WordSize); err != nil {
		return dst, err
	}
	return PackedU64(packed).AppendTo(dst), nil
}

// UnpackImages validates packed (its length must be a multiple of
// ImageSize) and appends its images to dst. On error dst is returned
// unchanged and the error is a *DecodeError of kind ErrInvalidField.
func UnpackImages(dst []BucketImage, packed []byte) ([]BucketImage, error) {
	if err := checkPacked(packed, ImageSize); err != nil {
		return dst, err
	}
	return PackedImages(packed).AppendTo(dst), nil
}

// UnpackU32s validates packed (its length must be a multiple of TokenSize)
// and appends its elements to dst. On error dst is returned unchanged and
// the error is a *DecodeError of kind ErrInvalidField.
func UnpackU32s(dst []uint32, packed []byte) ([]uint32, error) {
	if err := checkPacked(packed, TokenSize); err != nil {
		return dst, err
	}
	return PackedU32(packed).AppendTo(dst), nil
}

func checkPacked(packed []byte, size int) error {
	if len(packed)%size == 0 {
		return nil
	}
	return &DecodeError{
		Kind:     ErrInvalidField,
		SchemaID: -1,
		Field:    "packed",
		Detail:   "length " + strconv.Itoa(len(packed)) + " is not a multiple of " + strconv.Itoa(size),
	}
}
