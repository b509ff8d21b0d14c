package schemas

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Error kinds. Every error returned by a decoder is a *DecodeError whose Kind
// is one of these sentinels, so callers classify with errors.Is:
//
//	if errors.Is(err, schemas.ErrUnknownSchemaID) { ... }
var (
	// ErrUnknownMagic: the first byte of a framed record is not 0, or the
	// record is shorter than the 5-byte frame header. The record was not
	// written in the Confluent wire format (or not by this system).
	ErrUnknownMagic = errors.New("schemas: unknown magic byte")

	// ErrUnknownSchemaID: the frame names a schema id that is neither in the
	// built-in table nor known to (or resolvable by) the configured registry.
	ErrUnknownSchemaID = errors.New("schemas: unknown schema id")

	// ErrSchemaMismatch: the schema id is known but belongs to another record
	// type than the one being decoded (for example a query on the lane topic).
	ErrSchemaMismatch = errors.New("schemas: schema id is for another record type")

	// ErrTruncated: the input ends inside a value, or a declared length or
	// count needs more bytes than remain. Oversize declared lengths are
	// reported with this kind before anything is allocated.
	ErrTruncated = errors.New("schemas: truncated input")

	// ErrMalformed: the bytes are not a valid Avro encoding of the schema
	// (bad varint, out-of-range union or enum index, trailing bytes).
	ErrMalformed = errors.New("schemas: malformed avro body")

	// ErrInvalidField: the body is valid Avro but a field breaks a rule of
	// the contract (range, packed length, consistency between fields).
	// DecodeError.Field names the field.
	ErrInvalidField = errors.New("schemas: invalid field")

	// ErrRegistry: the schema registry could not be reached or refused a
	// request; DecodeError.Err (or EncodeError.Err) holds the cause.
	ErrRegistry = errors.New("schemas: schema registry failure")
)

// DecodeError describes why a record could not be decoded. It wraps its Kind
// (one of the Err* sentinels) and, when there is one, the underlying cause,
// so both errors.Is(err, ErrTruncated) and errors.Is(err, context.Canceled)
// work.
type DecodeError struct {
	// Kind is the error class, one of the Err* sentinels of this package.
	Kind error
	// Type is the record type being decoded; 0 for the standalone
	// Unpack* helpers.
	Type RecordType
	// SchemaID is the schema id read from the frame, or -1 when the frame
	// header could not be read.
	SchemaID int
	// Field is the dotted Avro path of the offending field for
	// ErrInvalidField (for example "body.images"); empty otherwise.
	Field string
	// Detail says what was wrong, in words.
	Detail string
	// Err is the underlying cause, if any (a goavro or registry error).
	Err error
}

// Error implements error.
func (e *DecodeError) Error() string {
	var b strings.Builder
	b.WriteString(e.Kind.Error())
	if e.Type != 0 {
		b.WriteString(": ")
		b.WriteString(e.Type.String())
	}
	if e.SchemaID >= 0 {
		b.WriteString(" (schema id ")
		b.WriteString(strconv.Itoa(e.SchemaID))
		b.WriteString(")")
	}
	if e.Field != "" {
		b.WriteString(": field ")
		b.WriteString(e.Field)
	}
	if e.Detail != "" {
		b.WriteString(": ")
		b.WriteString(e.Detail)
	}
	if e.Err != nil {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

// Unwrap returns the Kind and, if set, the underlying cause.
func (e *DecodeError) Unwrap() []error {
	if e.Err == nil {
		return []error{e.Kind}
	}
	return []error{e.Kind, e.Err}
}

// EncodeError describes why a record could not be encoded: a field value the
// wire cannot carry or the contract forbids (Kind ErrInvalidField), or a
// registry failure while resolving the writer schema id (Kind ErrRegistry).
type EncodeError struct {
	// Kind is ErrInvalidField or ErrRegistry.
	Kind error
	// Type is the record type being encoded.
	Type RecordType
	// Field is the dotted Avro path of the offending field for
	// ErrInvalidField.
	Field string
	// Detail says what was wrong, in words.
	Detail string
	// Err is the underlying cause, if any.
	Err error
}

// Error implements error.
func (e *EncodeError) Error() string {
	var b strings.Builder
	b.WriteString(e.Kind.Error())
	b.WriteString(": encoding ")
	b.WriteString(e.Type.String())
	if e.Field != "" {
		b.WriteString(": field ")
		b.WriteString(e.Field)
	}
	if e.Detail != "" {
		b.WriteString(": ")
		b.WriteString(e.Detail)
	}
	if e.Err != nil {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

// Unwrap returns the Kind and, if set, the underlying cause.
func (e *EncodeError) Unwrap() []error {
	if e.Err == nil {
		return []error{e.Kind}
	}
	return []error{e.Kind, e.Err}
}

// fieldError is the internal form of a contract violation found by a
// validate method; the codec turns it into a DecodeError or EncodeError.
type fieldError struct {
	field  string
	detail string
	cause  error // a typed detail callers may inspect with errors.As (becomes DecodeError.Err)
}

func (e *fieldError) Error() string { return "field " + e.field + ": " + e.detail }

func invalid(field, format string, args ...any) error {
	return &fieldError{field: field, detail: fmt.Sprintf(format, args...)}
}

// ImageRangeError is the typed detail of a delta image whose bucket index is not below the
// identity's bucket count. A decode error carries it (errors.As) so a consumer can report the
// spec's lane fault, InvalidImageIndex{bucket}, for the record it rejected.
type ImageRangeError struct {
	Index       int    // position of the first offending image in the delta
	Bucket      uint64 // its bucket index
	BucketCount uint64
}

func (e *ImageRangeError) Error() string {
	return fmt.Sprintf("image %d: bucket %d is not below bucket_count %d", e.Index, e.Bucket, e.BucketCount)
}
