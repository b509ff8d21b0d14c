package streams

import (
	"encoding/binary"
	"unicode/utf8"

	"github.com/ckf-stream/ckf-stream/schemas"
)

// salvaged is what can still be read from a query request that failed the codec's contract
// checks: who asked and where the answer should go, so the INVALID_REQUEST reply reaches the
// caller instead of leaving it to time out.
type salvaged struct {
	correlationID  string
	replyTopic     string
	replyPartition schemas.Optional[int32]
}

// salvageQueryRequest reads the routing fields of a framed QueryRequest whose body is valid Avro
// but broke a contract rule (schemas.ErrInvalidField). It only trusts bodies written with
// writerID, the schema id under which the codec writes this build's embedded
// query_request.avsc: for that id the field layout is known exactly. ok is false when the
// frame has another id, the body does not walk, or the correlation id itself is unusable (empty,
// longer than schemas.MaxCorrelationIDBytes, or not UTF-8); the caller then dead-letters the
// record without a reply. The walk reads the fields in schema order:
//
//	correlation_id string
//	input          union { LocalBlockHashes{hashes bytes},
//	                       TokenIds{tokens bytes, block_size int, lora_name [null,string],
//	                                cache_namespace [null,string]} }
//	lane_mask      [null,int]
//	reply_topic    [null,string]
//	reply_partition [null,int]
//
// A negative reply partition is dropped (the reply is then partitioned by correlation id).
func salvageQueryRequest(b []byte, writerID int) (s salvaged, ok bool) {
	id, body, err := schemas.ParseHeader(b)
	if err != nil || id != writerID {
		return salvaged{}, false
	}
	r := avroWalker{b: body}
	cid := r.bytes()
	if r.bad || len(cid) == 0 || len(cid) > schemas.MaxCorrelationIDBytes || !utf8.Valid(cid) {
		return salvaged{}, false
	}
	s.correlationID = string(cid)
	switch r.long() {
	case 0: // LocalBlockHashes
		r.bytes()
	case 1: // TokenIds
		r.bytes()
		r.long()
		r.optionalBytes()
		r.optionalBytes()
	default:
		r.bad = true
	}
	r.optionalLong() // lane_mask
	topic, _ := r.optionalBytes()
	part, hasPart := r.optionalLong()
	if r.bad {
		// The routing fields are unreadable; the correlation id alone still addresses a reply
		// on the configured reply topic.
		return salvaged{correlationID: s.correlationID}, true
	}
	if len(topic) > 0 && len(topic) <= 249 && utf8.Valid(topic) {
		s.replyTopic = string(topic)
	}
	if hasPart && part >= 0 && part <= 1<<31-1 {
		s.replyPartition = schemas.Some(int32(part))
	}
	return s, true
}

// avroWalker reads Avro binary primitives and records the first failure in bad; after a failure
// every read returns a zero value.
type avroWalker struct {
	b   []byte
	off int
	bad bool
}

func (w *avroWalker) long() int64 {
	if w.bad {
		return 0
	}
	u, n := binary.Uvarint(w.b[w.off:])
	if n <= 0 {
		w.bad = true
		return 0
	}
	w.off += n
	return int64(u>>1) ^ -int64(u&1) // zigzag
}

func (w *avroWalker) bytes() []byte {
	n := w.long()
	if w.bad || n < 0 || n > int64(len(w.b)-w.off) {
		w.bad = true
		return nil
	}
	out := w.b[w.off : w.off+int(n)]
	w.off += int(n)
	return out
}

// optionalBytes reads a ["null", bytes-or-string] union.
func (w *avroWalker) optionalBytes() ([]byte, bool) {
	switch w.long() {
	case 0:
		return nil, false
	case 1:
		return w.bytes(), !w.bad
	}
	w.bad = true
	return nil, false
}

// optionalLong reads a ["null", int-or-long] union.
func (w *avroWalker) optionalLong() (int64, bool) {
	switch w.long() {
	case 0:
		return 0, false
	case 1:
		v := w.long()
		return v, !w.bad
	}
	w.bad = true
	return 0, false
}
