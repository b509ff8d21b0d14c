package schemas

import "bytes"

// LaneRecordDecoder decodes lane records exactly as Codec.DecodeLaneRecord does (the same
// records, the same errors), with less work per record for a stream of one producer's records,
// which is what a lane is.
//
// Every lane record begins with its producer's identity, and a lane's records repeat it byte
// for byte: it changes only with a new incarnation, layout or format. Its dozen fields include
// five 64-bit varints (ten bytes each for random values) and two digests, and decoding and
// validating them was most of the cost of decoding a small delta. The decoder keeps the encoded
// identity of the last record it accepted whole, with its decoded value; a record whose body
// begins with the same bytes takes that value and is read from the byte after it. Avro varints
// are self-delimiting, so equal bytes decode to equal fields and end at the same offset: the
// shortcut cannot change a record's value or outcome. Only an identity that decoded without
// error and passed the identity rules is kept, so a record that takes it skips nothing that
// could have failed. It also remembers the last writer schema it looked up (a schema id's
// entry never changes once known).
//
// A LaneRecordDecoder is not safe for concurrent use: one per decoding goroutine.
type LaneRecordDecoder struct {
	codec *Codec
	// schemaID and entry are the last schema id resolved to a lane-record entry.
	schemaID int
	entry    *schemaEntry
	known    knownIdentity
}

// knownIdentity is an identity decoded and validated before, with its encoding; raw is empty
// when there is none.
type knownIdentity struct {
	raw []byte
	id  ProducerIdentity
}

// prefixes reports whether body begins with the known identity's encoding.
func (k *knownIdentity) prefixes(body []byte) bool {
	return len(k.raw) != 0 && bytes.HasPrefix(body, k.raw)
}

// NewLaneRecordDecoder returns a decoder of lane records using c's schemas.
func (c *Codec) NewLaneRecordDecoder() *LaneRecordDecoder {
	return &LaneRecordDecoder{codec: c, schemaID: -1}
}

// Decode decodes a framed lane record; see Codec.DecodeLaneRecord.
func (d *LaneRecordDecoder) Decode(b []byte) (LaneRecord, error) {
	const t = TypeLaneRecord
	id, body, err := ParseHeader(b)
	if err != nil || id != d.schemaID {
		// Codec.DecodeLaneRecord's first step, with its errors; only a lane-record entry is kept.
		e, _, err := d.codec.body(t, b)
		if err != nil {
			return LaneRecord{}, err
		}
		d.schemaID, d.entry = e.id, e
	}
	if !d.entry.fast {
		return d.codec.DecodeLaneRecord(b)
	}
	rec, end, reused, err := decodeLaneRecordBodyAfter(body, &d.known)
	if err == nil {
		if reused {
			err = rec.validateAfterIdentity()
		} else if err = rec.validate(); err == nil {
			d.known.raw = append(d.known.raw[:0], body[:end]...)
			d.known.id = rec.Identity
		}
	}
	if err != nil {
		return LaneRecord{}, fastError(t, id, err)
	}
	return rec, nil
}
