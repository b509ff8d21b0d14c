// Package schemas is ckf-stream's contract with the outside world: the Avro
// schemas of every record the system reads or writes on Kafka, the Go records
// that mirror them, and the codec that frames them in the Confluent wire
// format.
//
// The .avsc files in this directory are the documentation of the wire: every
// field carries a "doc". They are embedded in the binary, share the namespace
// io.ckfstream.v1, and are parsed by goavro at start-up.
//
// A framed record is
//
//	byte 0     magic, always 0
//	bytes 1-4  schema id, big-endian
//	bytes 5-   the Avro binary encoding of the record
//
// Schema ids come from a Confluent schema registry when one is configured
// (subjects <topic>-value) and from a fixed built-in table otherwise; see
// BuiltinID and README.md.
//
// The package takes only three constants from ckf (LaneCount, which bounds the
// 16-bit lane masks of the reference, MaxLanes, which bounds every lane number and
// the 64-bit masks of consumer §16, and PoolIdentityVersion); its records are plain wire
// structs, and the streams layer converts them to and from ckf's types. Bulk data (bucket words, delta images, query
// hashes and tokens) travels as packed little-endian bytes; the decoded
// records alias the input buffer for those fields instead of copying them, and
// PackedU64, PackedImages and PackedU32 read elements in place.
//
// Avro bytes are read in exactly two ways, both here. Lane records, query
// requests and replies, and KV events written with the embedded schemas are
// encoded and decoded by hand-written codecs that never touch goavro's
// map-based native form; every other record type and schema version goes
// through goavro (after a bounds check over the same primitives) and is
// matched by field name. The tests and fuzz targets hold both paths to the
// same bytes and the same results. Codec.QueryRoute is the hand-written
// request reader without the contract checks: it recovers the reply address
// of a request the decoder rejected.
//
// Decoders never panic and never allocate more than a small multiple of the
// input size: every declared length and count is checked against the bytes
// that remain before anything is allocated. Errors are *DecodeError values
// classified by the sentinels ErrUnknownMagic, ErrUnknownSchemaID,
// ErrSchemaMismatch, ErrTruncated, ErrMalformed, ErrInvalidField and
// ErrRegistry.
package schemas
