package schemas

import "time"

// Hand-written Avro codec for the embedded LaneRecord schema. The lane path
// carries megabytes of bucket words per snapshot and one delta per
// publication, so it avoids goavro's map-per-record native form: decoding
// allocates nothing (the packed fields alias the input) and encoding appends
// straight into the output buffer. It must produce and accept exactly the
// bytes goavro does for lane_record.avsc; TestLaneRecordMatchesGoavro and
// FuzzDecodeLaneRecord check that. Records written with any other schema id
// take the goavro path.

func appendDigest(dst []byte, d DigestIdentity) []byte {
	dst = append(dst, d.Digest[:]...)
	return appendLong(dst, int64(d.Source))
}

func appendIdentity(dst []byte, id *ProducerIdentity) []byte {
	p := &id.Pool
	dst = appendLong(dst, int64(p.IdentityVersion))
	dst = appendDigest(dst, p.Domain.CacheSemantics)
	dst = appendDigest(dst, p.Domain.RoutingScope)
	dst = appendU64(dst, p.DcID)
	dst = appendU64(dst, id.Incarnation)
	dst = appendU64(dst, id.LayoutGeneration)
	f := &id.Format
	dst = appendLong(dst, int64(f.Version))
	dst = appendU64(dst, f.Seed)
	dst = appendU64(dst, f.BucketCount)
	dst = appendLong(dst, int64(f.FingerprintBits))
	return appendLong(dst, int64(f.SlotsPerBucket))
}

// appendLaneRecordBody appends the Avro body of a validated record.
func appendLaneRecordBody(dst []byte, r *LaneRecord) []byte {
	size := 160
	switch r.Kind {
	case LaneSnapshotChunk:
		size += len(r.Snapshot.Words)
	case LaneDelta:
		size += len(r.Delta.Images)
	}
	if cap(dst)-len(dst) < size {
		out := make([]byte, len(dst), len(dst)+size)
		copy(out, dst)
		dst = out
	}
	dst = appendIdentity(dst, &r.Identity)
	dst = appendLong(dst, int64(r.Kind-1))
	switch r.Kind {
	case LaneSnapshotChunk:
		s := &r.Snapshot
		dst = appendU64(dst, s.Sequence)
		dst = appendLong(dst, int64(s.ChunkIndex))
		dst = appendLong(dst, int64(s.ChunkCount))
		dst = appendU64(dst, s.FirstBucket)
		dst = appendU64(dst, s.TotalBuckets)
		dst = appendBytes(dst, s.Words)
	case LaneDelta:
		dst = appendU64(dst, r.Delta.BaseSequence)
		dst = appendU64(dst, r.Delta.Sequence)
		dst = appendBytes(dst, r.Delta.Images)
	case LaneHeartbeat:
		dst = appendU64(dst, r.Heartbeat.LastSequence)
		dst = appendLong(dst, r.Heartbeat.ProducerTime.UnixMicro())
	case LaneDrainMarker:
		dst = appendU64(dst, r.Drain.ExpectedSequence)
	}
	dst = appendOptCapacity(dst, r.Capacity)
	if h, ok := r.Sources.Get(); ok {
		dst = appendU64(appendU64(append(dst, 2), h.DegradedSources), h.LostHistoryClears)
	} else {
		dst = append(dst, 0)
	}
	if r.AsOf.IsZero() {
		dst = append(dst, 0)
	} else {
		dst = appendLong(append(dst, 2), r.AsOf.UnixMicro())
	}
	return appendOptBlockSize(dst, r.BlockSize)
}

// appendOptCapacity appends an optional CapacityState (union ["null", CapacityState]).
func appendOptCapacity(dst []byte, o Optional[CapacityState]) []byte {
	c, ok := o.Get()
	if !ok {
		return append(dst, 0)
	}
	dst = appendU64(append(dst, 2), c.ResidentBlocks)
	dst = appendU64(dst, c.OmittedBlocks)
	return appendU64(dst, c.CapacityOmissions)
}

// optCapacity reads the trailing optional CapacityState of a lane record or lane event. A body
// that ends where it starts was written with the previous revision of the v1 schema, which did
// not have the field (both revisions share the built-in id), and reads as absent, as Avro schema
// resolution would read it.
func (r *reader) optCapacity(base string, nf *nat) Optional[CapacityState] {
	if r.failed() || r.remaining() == 0 || !r.optIndex() {
		return Optional[CapacityState]{}
	}
	return Some(CapacityState{
		ResidentBlocks:    uint64(narrow(r.long(), 0, maxInt64, base+".resident_blocks", nf)),
		OmittedBlocks:     uint64(narrow(r.long(), 0, maxInt64, base+".omitted_blocks", nf)),
		CapacityOmissions: uint64(narrow(r.long(), 0, maxInt64, base+".capacity_omissions", nf)),
	})
}

// optSources reads the trailing optional SourceHealth of a lane record: a body that ends before
// it was written with an earlier revision of the v1 schema and reads as absent.
func (r *reader) optSources(base string, nf *nat) Optional[SourceHealth] {
	if r.failed() || r.remaining() == 0 || !r.optIndex() {
		return Optional[SourceHealth]{}
	}
	return Some(SourceHealth{
		DegradedSources:   uint64(narrow(r.long(), 0, maxInt64, base+".degraded_sources", nf)),
		LostHistoryClears: uint64(narrow(r.long(), 0, maxInt64, base+".lost_history_clears", nf)),
	})
}

// optAsOf reads the trailing optional as_of of a lane record: a body that ends before it was
// written with an earlier revision of the v1 schema and reads as the zero Time (null).
func (r *reader) optAsOf() time.Time {
	if r.failed() || r.remaining() == 0 || !r.optIndex() {
		return time.Time{}
	}
	return time.UnixMicro(r.long()).UTC()
}

func (r *reader) digest(enum string) DigestIdentity {
	var d DigestIdentity
	copy(d.Digest[:], r.fixed(len(d.Digest)))
	d.Source = IdentitySource(r.index(len(identitySourceSymbols), enum))
	return d
}

// narrow checks lo <= v <= hi for an int field; a violation is reported as
// ErrInvalidField through nf (the reader only tracks wire errors).
func narrow(v int64, lo, hi int64, field string, nf *nat) int64 {
	if v < lo || v > hi {
		nf.fail(ErrInvalidField, field, "%d is not in [%d, %d]", v, lo, hi)
		return 0
	}
	return v
}

// decodeLaneRecordBody decodes a body written with the embedded schema.
func decodeLaneRecordBody(body []byte) (LaneRecord, error) {
	rec, _, _, err := decodeLaneRecordBodyAfter(body, nil)
	return rec, err
}

// decodeLaneIdentity reads the producer identity that begins every lane record body; a value
// out of its field's range is reported through nf.
func decodeLaneIdentity(r *reader, nf *nat, id *ProducerIdentity) {
	id.Pool.IdentityVersion = uint32(narrow(int64(r.int()), 0, maxInt32, "identity.pool.identity_version", nf))
	id.Pool.Domain.CacheSemantics = r.digest("cache_semantics enum")
	id.Pool.Domain.RoutingScope = r.digest("routing_scope enum")
	id.Pool.DcID = r.u64()
	id.Incarnation = r.u64()
	id.LayoutGeneration = r.u64()
	f := &id.Format
	f.Version = uint16(narrow(int64(r.int()), 0, 0xFFFF, "identity.format.format_version", nf))
	f.Seed = r.u64()
	f.BucketCount = r.u64()
	f.FingerprintBits = uint8(narrow(int64(r.int()), 0, 0xFF, "identity.format.fingerprint_bits", nf))
	f.SlotsPerBucket = uint8(narrow(int64(r.int()), 0, 0xFF, "identity.format.slots_per_bucket", nf))
}

// decodeLaneRecordBodyAfter is decodeLaneRecordBody for a body that may begin with known, the
// encoding of an identity decoded before without error (nil: none): when it does, the identity
// is known's and reading resumes after it (reused reports it). It also returns where the body's
// identity ends.
func decodeLaneRecordBodyAfter(body []byte, known *knownIdentity) (rec LaneRecord, identityEnd int, reused bool, err error) {
	r := reader{b: body}
	var nf nat
	if reused = known != nil && known.prefixes(body); reused {
		rec.Identity, r.off = known.id, len(known.raw)
	} else {
		decodeLaneIdentity(&r, &nf, &rec.Identity)
	}
	identityEnd = r.off
	rec.Kind = LaneRecordKind(r.index(4, "union") + 1)
	if r.failed() {
		return LaneRecord{}, 0, false, wireError(&r)
	}
	switch rec.Kind {
	case LaneSnapshotChunk:
		s := &rec.Snapshot
		s.Sequence = r.u64()
		s.ChunkIndex = uint32(narrow(int64(r.int()), 0, maxInt32, "body.chunk_index", &nf))
		s.ChunkCount = uint32(narrow(int64(r.int()), 0, maxInt32, "body.chunk_count", &nf))
		s.FirstBucket = r.u64()
		s.TotalBuckets = r.u64()
		s.Words = r.bytes()
	case LaneDelta:
		rec.Delta.BaseSequence = r.u64()
		rec.Delta.Sequence = r.u64()
		rec.Delta.Images = r.bytes()
	case LaneHeartbeat:
		rec.Heartbeat.LastSequence = r.u64()
		rec.Heartbeat.ProducerTime = time.UnixMicro(r.long()).UTC()
	case LaneDrainMarker:
		rec.Drain.ExpectedSequence = r.u64()
	}
	rec.Capacity = r.optCapacity("capacity", &nf)
	rec.Sources = r.optSources("sources", &nf)
	rec.AsOf = r.optAsOf()
	rec.BlockSize = r.optBlockSize("block_size", &nf)
	if err := r.end(&nf); err != nil {
		return LaneRecord{}, 0, false, err
	}
	return rec, identityEnd, reused, nil
}

func wireError(r *reader) *DecodeError {
	return &DecodeError{Kind: r.kind, Detail: r.detail}
}
