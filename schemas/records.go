package schemas

import "unicode/utf8"

// Encode and decode entry points, one set per record type. EncodeX returns a
// new framed record; AppendX appends it to dst (reuse dst to avoid an
// allocation per record); DecodeX reads a framed record. Decoded records may
// alias b (packed fields, Key and Value of a DeadLetter): keep b unchanged
// while the record is in use.

// AppendLaneRecord appends the framed encoding of rec to dst. The record is
// validated first (see DecodeLaneRecord for the rules) and an invalid one is
// reported as an *EncodeError of kind ErrInvalidField with dst unchanged.
func (c *Codec) AppendLaneRecord(dst []byte, rec LaneRecord) ([]byte, error) {
	if err := rec.validate(); err != nil {
		return dst, encodeFieldError(TypeLaneRecord, err)
	}
	if c.cfg.disableFast {
		return c.appendNative(dst, TypeLaneRecord, func() error { return nil }, func() map[string]any { return laneRecordNative(&rec) })
	}
	return appendLaneRecordBody(AppendHeader(dst, c.writeIDs[TypeLaneRecord]), &rec), nil
}

// EncodeLaneRecord returns the framed encoding of rec; see AppendLaneRecord.
func (c *Codec) EncodeLaneRecord(rec LaneRecord) ([]byte, error) { return c.AppendLaneRecord(nil, rec) }

// DecodeLaneRecord decodes a framed lane record. Besides the wire checks
// every decoder makes, it enforces: identity_version >= 0, layout_generation
// != 0, bucket_count a power of two in [2, MaxBucketCount], format fields in
// their u16/u8 ranges; for a snapshot chunk 1 <= chunk_count,
// chunk_index < chunk_count, total_buckets == bucket_count, words a
// non-zero multiple of 8 bytes and first_bucket + words <= total_buckets;
// for a delta images a multiple of 16 bytes with every bucket below
// bucket_count. Sequence rules, empty deltas and duplicate buckets are left
// to the lane ingestor, which reports them as the spec's lane faults.
//
// With the embedded schema's id, decoding allocates nothing: Snapshot.Words
// and Delta.Images alias b.
func (c *Codec) DecodeLaneRecord(b []byte) (LaneRecord, error) {
	const t = TypeLaneRecord
	e, body, err := c.body(t, b)
	if err != nil {
		return LaneRecord{}, err
	}
	if e.fast {
		rec, err := decodeLaneRecordBody(body)
		if err == nil {
			err = rec.validate()
		}
		if err != nil {
			return LaneRecord{}, fastError(t, e.id, err)
		}
		return rec, nil
	}
	v, err := e.native(t, body)
	if err != nil {
		return LaneRecord{}, err
	}
	var n nat
	rec := n.laneRecord(v)
	if err := finish(t, e.id, &n, rec.validate); err != nil {
		return LaneRecord{}, err
	}
	return rec, nil
}

// AppendQueryRequest appends the framed encoding of q to dst; an invalid
// request is reported as an *EncodeError of kind ErrInvalidField.
func (c *Codec) AppendQueryRequest(dst []byte, q QueryRequest) ([]byte, error) {
	if c.cfg.disableFast {
		return c.appendNative(dst, TypeQueryRequest, q.validate, func() map[string]any { return queryRequestNative(&q) })
	}
	if err := q.validate(); err != nil {
		return dst, encodeFieldError(TypeQueryRequest, err)
	}
	return appendQueryRequestBody(AppendHeader(dst, c.writeIDs[TypeQueryRequest]), &q), nil
}

// EncodeQueryRequest returns the framed encoding of q.
func (c *Codec) EncodeQueryRequest(q QueryRequest) ([]byte, error) {
	return c.AppendQueryRequest(nil, q)
}

// DecodeQueryRequest decodes a framed query request and enforces: a
// correlation id of 1 to MaxCorrelationIDBytes bytes of UTF-8, hashes a
// multiple of 8 bytes, tokens a multiple of 4 bytes with block_size in
// [1, MaxBlockSize], a lane mask within 16 bits and a non-negative reply
// partition. Hashes and Tokens alias b. With the embedded schema's id the
// request is decoded without goavro; only the correlation id and salts are
// copied.
func (c *Codec) DecodeQueryRequest(b []byte) (QueryRequest, error) {
	const t = TypeQueryRequest
	e, body, err := c.body(t, b)
	if err != nil {
		return QueryRequest{}, err
	}
	if e.fast {
		q, err := decodeQueryRequestBody(body)
		if err == nil {
			err = q.validate()
		}
		if err != nil {
			return QueryRequest{}, fastError(t, e.id, err)
		}
		return q, nil
	}
	v, err := e.native(t, body)
	if err != nil {
		return QueryRequest{}, err
	}
	var n nat
	q := n.queryRequest(v)
	if err := finish(t, e.id, &n, q.validate); err != nil {
		return QueryRequest{}, err
	}
	return q, nil
}

// QueryRoute reads the reply address of a framed QueryRequest without
// applying the request's contract, so that a request DecodeQueryRequest
// rejected with ErrInvalidField (a block size of 0, say) can still be
// answered with INVALID_REQUEST instead of leaving its caller to time out.
//
// It reads only a body whose schema id the codec already holds for the
// embedded query_request.avsc layout (the id it writes, the built-in id, or
// a registry id with the same parsing canonical form); it never asks the
// registry, and no other schema version is trusted. ok is false for any other
// frame, for a body that is not valid Avro (nothing in it can be trusted),
// and for an unusable correlation id (empty or not UTF-8: there is no one to
// answer). An id longer than MaxCorrelationIDBytes is cut to fit
// (FitCorrelationID; rt.IDTruncated is set), so its caller still hears why
// the request failed and can match the reply by prefix. A reply
// topic that cannot be a Kafka topic name (longer than 249 bytes or not
// UTF-8) and a negative reply partition are left out, which sends the reply
// to the default destination; the caller must still check that it may
// write to the topic. It copies the request's strings (correlation id, salts,
// reply topic), which is fine on the error path it is meant for.
func (c *Codec) QueryRoute(b []byte) (rt QueryRoute, ok bool) {
	id, body, err := ParseHeader(b)
	if err != nil {
		return QueryRoute{}, false
	}
	e, known := (*c.byID.Load())[id]
	if !known || e.typ != TypeQueryRequest || !e.embedded {
		return QueryRoute{}, false
	}
	return queryRoute(body)
}

// AppendQueryReply appends the framed encoding of r to dst; an invalid reply
// is reported as an *EncodeError of kind ErrInvalidField.
func (c *Codec) AppendQueryReply(dst []byte, r QueryReply) ([]byte, error) {
	if c.cfg.disableFast {
		return c.appendNative(dst, TypeQueryReply, r.validate, func() map[string]any { return queryReplyNative(&r) })
	}
	if err := r.validate(); err != nil {
		return dst, encodeFieldError(TypeQueryReply, err)
	}
	return appendQueryReplyBody(AppendHeader(dst, c.writeIDs[TypeQueryReply]), &r), nil
}

// EncodeQueryReply returns the framed encoding of r.
func (c *Codec) EncodeQueryReply(r QueryReply) ([]byte, error) { return c.AppendQueryReply(nil, r) }

// DecodeQueryReply decodes a framed query reply and enforces: lanes below
// 16 in strictly ascending order, depths at most query_blocks, no lanes
// unless the status is OK.
func (c *Codec) DecodeQueryReply(b []byte) (QueryReply, error) {
	const t = TypeQueryReply
	e, body, err := c.body(t, b)
	if err != nil {
		return QueryReply{}, err
	}
	if e.fast {
		r, err := decodeQueryReplyBody(body)
		if err == nil {
			err = r.validate()
		}
		if err != nil {
			return QueryReply{}, fastError(t, e.id, err)
		}
		return r, nil
	}
	v, err := e.native(t, body)
	if err != nil {
		return QueryReply{}, err
	}
	var n nat
	r := n.queryReply(v)
	if err := finish(t, e.id, &n, r.validate); err != nil {
		return QueryReply{}, err
	}
	return r, nil
}

// AppendLaneEvent appends the framed encoding of ev to dst; an invalid event
// is reported as an *EncodeError of kind ErrInvalidField.
func (c *Codec) AppendLaneEvent(dst []byte, ev LaneEvent) ([]byte, error) {
	return c.appendNative(dst, TypeLaneEvent, ev.validate, func() map[string]any { return laneEventNative(&ev) })
}

// EncodeLaneEvent returns the framed encoding of ev.
func (c *Codec) EncodeLaneEvent(ev LaneEvent) ([]byte, error) { return c.AppendLaneEvent(nil, ev) }

// DecodeLaneEvent decodes a framed lane event; the lane must be below 16.
func (c *Codec) DecodeLaneEvent(b []byte) (LaneEvent, error) {
	const t = TypeLaneEvent
	e, body, err := c.body(t, b)
	if err != nil {
		return LaneEvent{}, err
	}
	v, err := e.native(t, body)
	if err != nil {
		return LaneEvent{}, err
	}
	var n nat
	ev := n.laneEvent(v)
	if err := finish(t, e.id, &n, ev.validate); err != nil {
		return LaneEvent{}, err
	}
	return ev, nil
}

// AppendControlRecord appends the framed encoding of rec to dst; an invalid
// record is reported as an *EncodeError of kind ErrInvalidField.
func (c *Codec) AppendControlRecord(dst []byte, rec ControlRecord) ([]byte, error) {
	return c.appendNative(dst, TypeControlRecord, rec.validate, func() map[string]any { return controlRecordNative(&rec) })
}

// EncodeControlRecord returns the framed encoding of rec.
func (c *Codec) EncodeControlRecord(rec ControlRecord) ([]byte, error) {
	return c.AppendControlRecord(nil, rec)
}

// DecodeControlRecord decodes a framed control record; a snapshot request
// needs a lane below 16 and after_offset >= -1.
func (c *Codec) DecodeControlRecord(b []byte) (ControlRecord, error) {
	const t = TypeControlRecord
	e, body, err := c.body(t, b)
	if err != nil {
		return ControlRecord{}, err
	}
	v, err := e.native(t, body)
	if err != nil {
		return ControlRecord{}, err
	}
	var n nat
	rec := n.controlRecord(v)
	if err := finish(t, e.id, &n, rec.validate); err != nil {
		return ControlRecord{}, err
	}
	return rec, nil
}

// AppendDeadLetter appends the framed encoding of d to dst; an invalid
// record is reported as an *EncodeError of kind ErrInvalidField.
func (c *Codec) AppendDeadLetter(dst []byte, d DeadLetter) ([]byte, error) {
	return c.appendNative(dst, TypeDeadLetter, d.validate, func() map[string]any { return deadLetterNative(&d) })
}

// EncodeDeadLetter returns the framed encoding of d.
func (c *Codec) EncodeDeadLetter(d DeadLetter) ([]byte, error) { return c.AppendDeadLetter(nil, d) }

// DecodeDeadLetter decodes a framed dead-letter record; partition and
// offset must be non-negative. Key and Value alias b.
func (c *Codec) DecodeDeadLetter(b []byte) (DeadLetter, error) {
	const t = TypeDeadLetter
	e, body, err := c.body(t, b)
	if err != nil {
		return DeadLetter{}, err
	}
	v, err := e.native(t, body)
	if err != nil {
		return DeadLetter{}, err
	}
	var n nat
	d := n.deadLetter(v)
	if err := finish(t, e.id, &n, d.validate); err != nil {
		return DeadLetter{}, err
	}
	return d, nil
}

// AppendKvEvent appends the framed encoding of ev to dst; an invalid event is
// reported as an *EncodeError of kind ErrInvalidField.
func (c *Codec) AppendKvEvent(dst []byte, ev KvEvent) ([]byte, error) {
	if c.cfg.disableFast {
		return c.appendNative(dst, TypeKvEvent, ev.validate, func() map[string]any { return kvEventNative(&ev) })
	}
	if err := ev.validate(); err != nil {
		return dst, encodeFieldError(TypeKvEvent, err)
	}
	return appendKvEventBody(AppendHeader(dst, c.writeIDs[TypeKvEvent]), &ev), nil
}

// EncodeKvEvent returns the framed encoding of ev.
func (c *Codec) EncodeKvEvent(ev KvEvent) ([]byte, error) { return c.AppendKvEvent(nil, ev) }

// DecodeKvEvent decodes a framed KV event; dp_rank and start_position must
// be u32 values. Semantic rules (residency, parent lineage, positions) are
// the relay's to judge. With the embedded schema's id the event is decoded
// without goavro: one allocation for the blocks or hashes, none for the
// known residency domains.
func (c *Codec) DecodeKvEvent(b []byte) (KvEvent, error) {
	const t = TypeKvEvent
	e, body, err := c.body(t, b)
	if err != nil {
		return KvEvent{}, err
	}
	if e.fast {
		ev, err := decodeKvEventBody(body)
		if err == nil {
			err = ev.validate()
		}
		if err != nil {
			return KvEvent{}, fastError(t, e.id, err)
		}
		return ev, nil
	}
	v, err := e.native(t, body)
	if err != nil {
		return KvEvent{}, err
	}
	var n nat
	ev := n.kvEvent(v)
	if err := finish(t, e.id, &n, ev.validate); err != nil {
		return KvEvent{}, err
	}
	return ev, nil
}

// fastError completes an error from a hand-written decoder: a wire or range
// *DecodeError gets its type and id, a validation failure becomes one.
func fastError(t RecordType, id int, err error) error {
	if de, ok := err.(*DecodeError); ok {
		de.Type, de.SchemaID = t, id
		return de
	}
	return decodeFieldError(t, id, err)
}

// AppendWorkerQueryRequest appends the framed encoding of q to dst; an invalid request is
// reported as an *EncodeError of kind ErrInvalidField.
func (c *Codec) AppendWorkerQueryRequest(dst []byte, q WorkerQueryRequest) ([]byte, error) {
	return c.appendNative(dst, TypeWorkerQueryRequest, q.validate, func() map[string]any { return workerQueryRequestNative(&q) })
}

// EncodeWorkerQueryRequest returns the framed encoding of q.
func (c *Codec) EncodeWorkerQueryRequest(q WorkerQueryRequest) ([]byte, error) {
	return c.AppendWorkerQueryRequest(nil, q)
}

// DecodeWorkerQueryRequest decodes a framed worker query request and enforces the prompt rules of
// DecodeQueryRequest (correlation id, packed lengths, block size, reply partition), dc_ids a
// multiple of 8 bytes and top_k in [0, MaxWorkerTopK].
func (c *Codec) DecodeWorkerQueryRequest(b []byte) (WorkerQueryRequest, error) {
	const t = TypeWorkerQueryRequest
	e, body, err := c.body(t, b)
	if err != nil {
		return WorkerQueryRequest{}, err
	}
	v, err := e.native(t, body)
	if err != nil {
		return WorkerQueryRequest{}, err
	}
	var n nat
	q := n.workerQueryRequest(v)
	if err := finish(t, e.id, &n, q.validate); err != nil {
		return WorkerQueryRequest{}, err
	}
	return q, nil
}

// WorkerQueryRoute is QueryRoute for a framed WorkerQueryRequest: the reply address of a request
// DecodeWorkerQueryRequest rejected with ErrInvalidField, read without the request's contract,
// with QueryRoute's rules (only the embedded layout's ids; no usable correlation id, no route; an
// id over MaxCorrelationIDBytes cut to fit; an impossible reply topic or a negative partition left
// out).
func (c *Codec) WorkerQueryRoute(b []byte) (rt QueryRoute, ok bool) {
	id, body, err := ParseHeader(b)
	if err != nil {
		return QueryRoute{}, false
	}
	e, known := (*c.byID.Load())[id]
	if !known || e.typ != TypeWorkerQueryRequest || !e.embedded {
		return QueryRoute{}, false
	}
	v, err := e.native(TypeWorkerQueryRequest, body)
	if err != nil {
		return QueryRoute{}, false
	}
	m, _ := v.(map[string]any)
	var n nat
	id0, _ := m["correlation_id"].(string)
	fit, truncated, ok := FitCorrelationID(id0)
	if !ok {
		return QueryRoute{}, false
	}
	rt = QueryRoute{CorrelationID: fit, IDTruncated: truncated}
	if s := n.optString(m, "", "reply_topic"); n.kind == nil && s.Valid && len(s.Value) <= 249 && utf8.ValidString(s.Value) {
		rt.ReplyTopic = s.Value
	}
	n = nat{}
	if p := n.optLong(m, "", "reply_partition"); n.kind == nil && p.Valid && p.Value >= 0 && p.Value <= maxInt32 {
		rt.ReplyPartition = Some(int32(p.Value))
	}
	return rt, true
}

// AppendWorkerQueryReply appends the framed encoding of r to dst; an invalid reply is reported
// as an *EncodeError of kind ErrInvalidField.
func (c *Codec) AppendWorkerQueryReply(dst []byte, r WorkerQueryReply) ([]byte, error) {
	return c.appendNative(dst, TypeWorkerQueryReply, r.validate, func() map[string]any { return workerQueryReplyNative(&r) })
}

// EncodeWorkerQueryReply returns the framed encoding of r.
func (c *Codec) EncodeWorkerQueryReply(r WorkerQueryReply) ([]byte, error) {
	return c.AppendWorkerQueryReply(nil, r)
}

// DecodeWorkerQueryReply decodes a framed worker query reply and enforces: sources a multiple of
// WorkerSourceBytes, every source's depths summing to at most query_blocks, no sources unless the
// status is OK, a non-negative age and lag.
func (c *Codec) DecodeWorkerQueryReply(b []byte) (WorkerQueryReply, error) {
	const t = TypeWorkerQueryReply
	e, body, err := c.body(t, b)
	if err != nil {
		return WorkerQueryReply{}, err
	}
	v, err := e.native(t, body)
	if err != nil {
		return WorkerQueryReply{}, err
	}
	var n nat
	r := n.workerQueryReply(v)
	if err := finish(t, e.id, &n, r.validate); err != nil {
		return WorkerQueryReply{}, err
	}
	return r, nil
}
