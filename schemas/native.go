package schemas

import (
	"fmt"
	"time"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/linkedin/goavro/v2"
)

// This file converts between the Go records and goavro's native form
// (map[string]any per record). The codec uses it for every record type
// whose schema id is not served by a hand-written decoder, in particular for
// records written with another (older or newer) version of a schema: fields
// are matched by name, fields this reader does not know are ignored, and
// optional fields the writer did not have read as absent. This is the
// by-name part of Avro schema resolution.

func nsName(name string) string { return Namespace + "." + name }

func union(branch string, v any) any { return goavro.Union(branch, v) }

const tsBranch = "long.timestamp-micros"

func optLong(o Optional[int64]) any {
	if !o.Valid {
		return nil
	}
	return union("long", o.Value)
}

// optMask64 is a 64-bit lane mask field that is null when 0 (QueryReply.ReadyLanes64).
func optMask64(m uint64) any {
	if m == 0 {
		return nil
	}
	return union("long", int64(m))
}

func optU64(o Optional[uint64]) any {
	if !o.Valid {
		return nil
	}
	return union("long", int64(o.Value))
}

func optString(s string) any {
	if s == "" {
		return nil
	}
	return union("string", s)
}

func optTime(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return union(tsBranch, t.UnixMicro())
}

func optBytes(b []byte) any {
	if b == nil {
		return nil
	}
	return union("bytes", b)
}

func digestNative(d DigestIdentity) map[string]any {
	return map[string]any{"digest": d.Digest[:], "source": identitySourceSymbols[d.Source]}
}

func poolNative(p *PoolID) map[string]any {
	return map[string]any{
		"identity_version": int32(p.IdentityVersion),
		"indexer_domain": map[string]any{
			"cache_semantics": digestNative(p.Domain.CacheSemantics),
			"routing_scope":   digestNative(p.Domain.RoutingScope),
		},
		"dc_id": int64(p.DcID),
	}
}

func identityNative(id *ProducerIdentity) map[string]any {
	f := &id.Format
	return map[string]any{
		"pool":                 poolNative(&id.Pool),
		"producer_incarnation": int64(id.Incarnation),
		"layout_generation":    int64(id.LayoutGeneration),
		"format": map[string]any{
			"format_version":   int32(f.Version),
			"seed":             int64(f.Seed),
			"bucket_count":     int64(f.BucketCount),
			"fingerprint_bits": int32(f.FingerprintBits),
			"slots_per_bucket": int32(f.SlotsPerBucket),
		},
	}
}

func laneRecordNative(r *LaneRecord) map[string]any {
	var body any
	switch r.Kind {
	case LaneSnapshotChunk:
		s := &r.Snapshot
		body = union(nsName("SnapshotChunk"), map[string]any{
			"sequence":      int64(s.Sequence),
			"chunk_index":   int32(s.ChunkIndex),
			"chunk_count":   int32(s.ChunkCount),
			"first_bucket":  int64(s.FirstBucket),
			"total_buckets": int64(s.TotalBuckets),
			"words":         []byte(s.Words),
		})
	case LaneDelta:
		body = union(nsName("Delta"), map[string]any{
			"base_sequence": int64(r.Delta.BaseSequence),
			"sequence":      int64(r.Delta.Sequence),
			"images":        []byte(r.Delta.Images),
		})
	case LaneHeartbeat:
		body = union(nsName("Heartbeat"), map[string]any{
			"last_sequence": int64(r.Heartbeat.LastSequence),
			"producer_time": r.Heartbeat.ProducerTime.UnixMicro(),
		})
	case LaneDrainMarker:
		body = union(nsName("DrainMarker"), map[string]any{
			"expected_sequence": int64(r.Drain.ExpectedSequence),
		})
	}
	return map[string]any{"identity": identityNative(&r.Identity), "body": body, "capacity": capacityNative(r.Capacity),
		"sources": sourcesNative(r.Sources), "as_of": optTime(r.AsOf), "block_size": optBlockSize(r.BlockSize)}
}

// optBlockSize is an optional block size (union ["null", long]): 0 is null.
func optBlockSize(size uint32) any {
	if size == 0 {
		return nil
	}
	return union("long", int64(size))
}

func sourcesNative(o Optional[SourceHealth]) any {
	h, ok := o.Get()
	if !ok {
		return nil
	}
	return union(nsName("SourceHealth"), map[string]any{
		"degraded_sources":    int64(h.DegradedSources),
		"lost_history_clears": int64(h.LostHistoryClears),
	})
}

func capacityNative(o Optional[CapacityState]) any {
	c, ok := o.Get()
	if !ok {
		return nil
	}
	return union(nsName("CapacityState"), map[string]any{
		"resident_blocks":    int64(c.ResidentBlocks),
		"omitted_blocks":     int64(c.OmittedBlocks),
		"capacity_omissions": int64(c.CapacityOmissions),
	})
}

func queryRequestNative(q *QueryRequest) map[string]any {
	var input any
	switch q.Input {
	case InputLocalBlockHashes:
		input = union(nsName("LocalBlockHashes"), map[string]any{"hashes": []byte(q.Hashes)})
	case InputTokenIDs:
		input = union(nsName("TokenIds"), map[string]any{
			"tokens":          []byte(q.Tokens),
			"block_size":      int32(q.BlockSize),
			"lora_name":       optString(q.LoraName),
			"cache_namespace": optString(q.CacheNamespace),
		})
	}
	var mask, part any
	if q.LaneMask.Valid {
		mask = union("int", int32(q.LaneMask.Value))
	}
	if q.ReplyPartition.Valid {
		part = union("int", q.ReplyPartition.Value)
	}
	var mask64 any
	if q.LaneMask64.Valid {
		mask = union("int", int32(uint16(q.LaneMask64.Value))) // lane_mask is lane_mask64's low 16 bits
		mask64 = union("long", int64(q.LaneMask64.Value))
	}
	return map[string]any{
		"correlation_id":   q.CorrelationID,
		"input":            input,
		"lane_mask":        mask,
		"lane_mask64":      mask64,
		"reply_topic":      optString(q.ReplyTopic),
		"reply_partition":  part,
		"request_time":     optTime(q.RequestTime),
		"max_age_ms":       optLong(q.MaxAgeMillis),
		"block_extra_keys": blockExtraKeysNative(q.BlockExtraKeys),
	}
}

func queryReplyNative(r *QueryReply) map[string]any {
	lanes := make([]any, len(r.Lanes))
	for i, m := range r.Lanes {
		lanes[i] = map[string]any{"lane": int32(m.Lane), "dc_id": int64(m.DcID), "pool": m.Pool, "depth": int32(m.Depth)}
	}
	states := make([]any, len(r.LaneStates))
	for i, st := range r.LaneStates {
		states[i] = map[string]any{"lane": int32(st.Lane), "state": laneAnswerStateSymbols[st.State], "age_ms": optLong(st.AgeMillis)}
	}
	return map[string]any{
		"correlation_id":     r.CorrelationID,
		"status":             queryStatusSymbols[r.Status],
		"error_message":      optString(r.ErrorMessage),
		"ready_lanes":        int32(r.ReadyLanes),
		"query_blocks":       int32(r.QueryBlocks),
		"lanes":              lanes,
		"reply_time":         r.ReplyTime.UnixMicro(),
		"incomplete_lanes":   int32(r.IncompleteLanes),
		"lane_states":        states,
		"ready_lanes64":      optMask64(r.ReadyLanes64),
		"incomplete_lanes64": optMask64(r.IncompleteLanes64),
	}
}

func laneEventNative(e *LaneEvent) map[string]any {
	var fault, disp any
	if f := e.Fault; f != nil {
		fault = union(nsName("LaneFault"), map[string]any{
			"kind":     laneFaultKindSymbols[f.Kind],
			"detail":   f.Detail,
			"expected": optU64(f.Expected),
			"actual":   optU64(f.Actual),
			"offset":   optLong(f.Offset),
		})
	}
	if d := e.Disposition; d != nil {
		var rd any
		if d.RecoveryDomain.Valid {
			rd = union(nsName("FailureDomain"), failureDomainSymbols[d.RecoveryDomain.Value])
		}
		disp = union(nsName("FailureDisposition"), map[string]any{
			"point":           failurePointSymbols[d.Point],
			"domain":          failureDomainSymbols[d.Domain],
			"commit":          commitStateSymbols[d.Commit],
			"recovery_domain": rd,
			"action":          failureActionSymbols[d.Action],
		})
	}
	return map[string]any{
		"lane":               int32(e.Lane),
		"pool":               poolNative(&e.Pool),
		"consumer_instance":  int64(e.ConsumerInstance),
		"lease_epoch":        optU64(e.LeaseEpoch),
		"kind":               laneEventKindSymbols[e.Kind],
		"fault":              fault,
		"disposition":        disp,
		"installed_sequence": optU64(e.InstalledSequence),
		"applied_offset":     optLong(e.AppliedOffset),
		"high_watermark":     optLong(e.HighWatermark),
		"lag_records":        optLong(e.LagRecords),
		"lag_micros":         optLong(e.LagMicros),
		"event_time":         e.EventTime.UnixMicro(),
		"capacity":           capacityNative(e.Capacity),
	}
}

func controlRecordNative(c *ControlRecord) map[string]any {
	var body any
	if c.Kind == ControlSnapshotRequest {
		s := &c.SnapshotRequest
		body = union(nsName("SnapshotRequest"), map[string]any{
			"lane":         int32(s.Lane),
			"pool":         poolNative(&s.Pool),
			"requester":    int64(s.Requester),
			"reason":       snapshotRequestReasonSymbols[s.Reason],
			"detail":       s.Detail,
			"after_offset": s.AfterOffset,
			"request_time": s.RequestTime.UnixMicro(),
		})
	}
	return map[string]any{"body": body}
}

func deadLetterNative(d *DeadLetter) map[string]any {
	return map[string]any{
		"source_topic":     d.SourceTopic,
		"source_partition": d.SourcePartition,
		"source_offset":    d.SourceOffset,
		"source_timestamp": optTime(d.SourceTimestamp),
		"key":              optBytes(d.Key),
		"value":            optBytes(d.Value),
		"reason_code":      deadLetterReasonSymbols[d.ReasonCode],
		"reason":           d.Reason,
		"component":        d.Component,
		"dead_letter_time": d.DeadLetterTime.UnixMicro(),
	}
}

func kvEventNative(e *KvEvent) map[string]any {
	var data any
	switch e.Kind {
	case KvStoredEvent:
		s := &e.Stored
		blocks := make([]any, len(s.Blocks))
		for i, b := range s.Blocks {
			blocks[i] = map[string]any{"block_hash": int64(b.BlockHash), "tokens_hash": int64(b.TokensHash)}
		}
		var start any
		if s.StartPosition.Valid {
			start = union("long", int64(s.StartPosition.Value))
		}
		data = union(nsName("KvStored"), map[string]any{
			"parent_hash":           optU64(s.ParentHash),
			"start_position":        start,
			"blocks":                blocks,
			"shared_cache_eligible": s.SharedCacheEligible,
			"block_size":            optBlockSize(s.BlockSize),
		})
	case KvRemovedEvent:
		hs := make([]any, len(e.Removed.BlockHashes))
		for i, h := range e.Removed.BlockHashes {
			hs[i] = int64(h)
		}
		data = union(nsName("KvRemoved"), map[string]any{"block_hashes": hs})
	case KvClearedEvent:
		data = union(nsName("KvCleared"), map[string]any{})
	}
	var rd any
	if e.ResidencyDomain.Valid {
		rd = union("string", e.ResidencyDomain.Value)
	}
	return map[string]any{
		"worker_id":        int64(e.WorkerID),
		"dp_rank":          int64(e.DpRank),
		"event_id":         int64(e.EventID),
		"storage_tier":     storageTierSymbols[e.StorageTier],
		"residency_domain": rd,
		"data":             data,
	}
}

// nat reads goavro native values into Go records. It keeps the first
// failure; later reads return zero values.
type nat struct {
	kind   error
	field  string
	detail string
}

func (n *nat) fail(kind error, field, format string, args ...any) {
	if n.kind == nil {
		n.kind, n.field, n.detail = kind, field, fmt.Sprintf(format, args...)
	}
}

func join(base, name string) string {
	if base == "" {
		return name
	}
	return base + "." + name
}

// rec asserts that v is a record.
func (n *nat) rec(v any, path string) map[string]any {
	m, ok := v.(map[string]any)
	if !ok && n.kind == nil {
		n.fail(ErrMalformed, path, "expected a record, got %T", v)
	}
	return m
}

// get returns field name of m; a missing field is an error unless optional.
func (n *nat) get(m map[string]any, base, name string, optional bool) any {
	v, ok := m[name]
	if !ok && !optional && n.kind == nil && m != nil {
		n.fail(ErrInvalidField, join(base, name), "missing from the writer's schema")
	}
	return v
}

func (n *nat) long(m map[string]any, base, name string) int64 {
	return n.asLong(n.get(m, base, name, false), join(base, name))
}

func (n *nat) asLong(v any, path string) int64 {
	switch x := v.(type) {
	case int64:
		return x
	case int32:
		return int64(x)
	case time.Time:
		return x.UnixMicro()
	case nil:
		return 0
	}
	n.fail(ErrMalformed, path, "expected a long, got %T", v)
	return 0
}

// rangeInt reads an int or long and checks lo <= v <= hi.
func (n *nat) rangeInt(m map[string]any, base, name string, lo, hi int64) int64 {
	v := n.long(m, base, name)
	if n.kind == nil && (v < lo || v > hi) {
		n.fail(ErrInvalidField, join(base, name), "%d is not in [%d, %d]", v, lo, hi)
		return 0
	}
	return v
}

func (n *nat) str(m map[string]any, base, name string) string {
	v := n.get(m, base, name, false)
	s, ok := v.(string)
	if !ok && v != nil {
		n.fail(ErrMalformed, join(base, name), "expected a string, got %T", v)
	}
	return s
}

func (n *nat) bytes(m map[string]any, base, name string) []byte {
	v := n.get(m, base, name, false)
	b, ok := v.([]byte)
	if !ok && v != nil {
		n.fail(ErrMalformed, join(base, name), "expected bytes, got %T", v)
	}
	return b
}

func (n *nat) boolean(m map[string]any, base, name string, def bool) bool {
	v, ok := m[name]
	if !ok {
		return def
	}
	b, ok := v.(bool)
	if !ok {
		n.fail(ErrMalformed, join(base, name), "expected a boolean, got %T", v)
	}
	return b
}

func (n *nat) time(m map[string]any, base, name string) time.Time {
	return time.UnixMicro(n.long(m, base, name)).UTC()
}

// enum maps a symbol to its index. A symbol this reader does not know maps
// to 0 when the enum's first symbol is UNKNOWN (the schema's default), and
// is an error otherwise.
func (n *nat) enum(m map[string]any, base, name string, symbols []string) int {
	v := n.get(m, base, name, false)
	s, ok := v.(string)
	if !ok {
		if v != nil {
			n.fail(ErrMalformed, join(base, name), "expected an enum symbol, got %T", v)
		}
		return 0
	}
	for i, sym := range symbols {
		if sym == s {
			return i
		}
	}
	if symbols[0] != "UNKNOWN" {
		n.fail(ErrInvalidField, join(base, name), "unknown symbol %q", s)
	}
	return 0
}

// branch returns the union branch of field name: its name ("" for null) and
// value. Missing optional fields read as null.
func (n *nat) branch(m map[string]any, base, name string, optional bool) (string, any) {
	v := n.get(m, base, name, optional)
	if v == nil {
		return "", nil
	}
	u, ok := v.(map[string]any)
	if !ok || len(u) != 1 {
		n.fail(ErrMalformed, join(base, name), "expected a union value, got %T", v)
		return "", nil
	}
	for k, x := range u {
		return k, x
	}
	return "", nil
}

func (n *nat) optLong(m map[string]any, base, name string) Optional[int64] {
	b, v := n.branch(m, base, name, true)
	if b == "" {
		return Optional[int64]{}
	}
	return Some(n.asLong(v, join(base, name)))
}

// blockSize reads an optional block size: absent (a writer schema before the field) or null
// reads as 0; a written size must be a u32 above 0.
func (n *nat) blockSize(m map[string]any, base, name string) uint32 {
	o := n.optLong(m, base, name)
	if !o.Valid {
		return 0
	}
	if o.Value < 1 || o.Value > 1<<32-1 {
		n.fail(ErrInvalidField, join(base, name), "%d is not in [1, %d]", o.Value, int64(1<<32-1))
		return 0
	}
	return uint32(o.Value)
}

func (n *nat) optU64(m map[string]any, base, name string) Optional[uint64] {
	o := n.optLong(m, base, name)
	return Optional[uint64]{Value: uint64(o.Value), Valid: o.Valid}
}

func (n *nat) optString(m map[string]any, base, name string) Optional[string] {
	b, v := n.branch(m, base, name, true)
	if b == "" {
		return Optional[string]{}
	}
	s, ok := v.(string)
	if !ok {
		n.fail(ErrMalformed, join(base, name), "expected a string, got %T", v)
	}
	return Some(s)
}

func (n *nat) optTime(m map[string]any, base, name string) time.Time {
	o := n.optLong(m, base, name)
	if !o.Valid {
		return time.Time{}
	}
	return time.UnixMicro(o.Value).UTC()
}

func (n *nat) digest(v any, path string) DigestIdentity {
	m := n.rec(v, path)
	var d DigestIdentity
	raw := n.bytes(m, path, "digest")
	if n.kind == nil && len(raw) != len(d.Digest) {
		n.fail(ErrInvalidField, join(path, "digest"), "length %d, want 16", len(raw))
	}
	copy(d.Digest[:], raw)
	d.Source = IdentitySource(n.enum(m, path, "source", identitySourceSymbols))
	return d
}

func (n *nat) pool(v any, path string) PoolID {
	m := n.rec(v, path)
	dom := n.rec(n.get(m, path, "indexer_domain", false), join(path, "indexer_domain"))
	dpath := join(path, "indexer_domain")
	return PoolID{
		IdentityVersion: uint32(n.rangeInt(m, path, "identity_version", 0, maxInt32)),
		Domain: IndexerDomainID{
			CacheSemantics: n.digest(n.get(dom, dpath, "cache_semantics", false), join(dpath, "cache_semantics")),
			RoutingScope:   n.digest(n.get(dom, dpath, "routing_scope", false), join(dpath, "routing_scope")),
		},
		DcID: uint64(n.long(m, path, "dc_id")),
	}
}

func (n *nat) identity(v any, path string) ProducerIdentity {
	m := n.rec(v, path)
	fpath := join(path, "format")
	f := n.rec(n.get(m, path, "format", false), fpath)
	return ProducerIdentity{
		Pool:             n.pool(n.get(m, path, "pool", false), join(path, "pool")),
		Incarnation:      uint64(n.long(m, path, "producer_incarnation")),
		LayoutGeneration: uint64(n.long(m, path, "layout_generation")),
		Format: CkfFormat{
			Version:         uint16(n.rangeInt(f, fpath, "format_version", 0, 0xFFFF)),
			Seed:            uint64(n.long(f, fpath, "seed")),
			BucketCount:     uint64(n.long(f, fpath, "bucket_count")),
			FingerprintBits: uint8(n.rangeInt(f, fpath, "fingerprint_bits", 0, 0xFF)),
			SlotsPerBucket:  uint8(n.rangeInt(f, fpath, "slots_per_bucket", 0, 0xFF)),
		},
	}
}

func (n *nat) laneRecord(v any) LaneRecord {
	m := n.rec(v, "")
	r := LaneRecord{Identity: n.identity(n.get(m, "", "identity", false), "identity")}
	branch, bv := n.branch(m, "", "body", false)
	b := n.rec(bv, "body")
	switch branch {
	case nsName("SnapshotChunk"):
		r.Kind = LaneSnapshotChunk
		r.Snapshot = SnapshotChunk{
			Sequence:     uint64(n.long(b, "body", "sequence")),
			ChunkIndex:   uint32(n.rangeInt(b, "body", "chunk_index", 0, maxInt32)),
			ChunkCount:   uint32(n.rangeInt(b, "body", "chunk_count", 0, maxInt32)),
			FirstBucket:  uint64(n.long(b, "body", "first_bucket")),
			TotalBuckets: uint64(n.long(b, "body", "total_buckets")),
			Words:        n.bytes(b, "body", "words"),
		}
	case nsName("Delta"):
		r.Kind = LaneDelta
		r.Delta = Delta{
			BaseSequence: uint64(n.long(b, "body", "base_sequence")),
			Sequence:     uint64(n.long(b, "body", "sequence")),
			Images:       n.bytes(b, "body", "images"),
		}
	case nsName("Heartbeat"):
		r.Kind = LaneHeartbeat
		r.Heartbeat = Heartbeat{
			LastSequence: uint64(n.long(b, "body", "last_sequence")),
			ProducerTime: n.time(b, "body", "producer_time"),
		}
	case nsName("DrainMarker"):
		r.Kind = LaneDrainMarker
		r.Drain = DrainMarker{ExpectedSequence: uint64(n.long(b, "body", "expected_sequence"))}
	default:
		n.fail(ErrMalformed, "body", "unknown branch %q", branch)
	}
	r.Capacity = n.capacity(m)
	r.Sources = n.sources(m)
	r.AsOf = n.optTime(m, "", "as_of") // absent from writer schemas before the field: null
	r.BlockSize = n.blockSize(m, "", "block_size")
	return r
}

// sources reads the optional sources field; a writer schema without it reads as absent.
func (n *nat) sources(m map[string]any) Optional[SourceHealth] {
	b, hv := n.branch(m, "", "sources", true)
	if b == "" {
		return Optional[SourceHealth]{}
	}
	h := n.rec(hv, "sources")
	return Some(SourceHealth{
		DegradedSources:   uint64(n.rangeInt(h, "sources", "degraded_sources", 0, maxInt64)),
		LostHistoryClears: uint64(n.rangeInt(h, "sources", "lost_history_clears", 0, maxInt64)),
	})
}

// capacity reads the optional capacity field; a writer schema without it reads as absent.
func (n *nat) capacity(m map[string]any) Optional[CapacityState] {
	b, cv := n.branch(m, "", "capacity", true)
	if b == "" {
		return Optional[CapacityState]{}
	}
	c := n.rec(cv, "capacity")
	return Some(CapacityState{
		ResidentBlocks:    uint64(n.rangeInt(c, "capacity", "resident_blocks", 0, maxInt64)),
		OmittedBlocks:     uint64(n.rangeInt(c, "capacity", "omitted_blocks", 0, maxInt64)),
		CapacityOmissions: uint64(n.rangeInt(c, "capacity", "capacity_omissions", 0, maxInt64)),
	})
}

func (n *nat) queryRequest(v any) QueryRequest {
	m := n.rec(v, "")
	q := QueryRequest{
		CorrelationID: n.str(m, "", "correlation_id"),
		ReplyTopic:    n.optString(m, "", "reply_topic").Value,
		RequestTime:   n.optTime(m, "", "request_time"),
	}
	if o := n.optLong(m, "", "max_age_ms"); o.Valid { // absent from writer schemas before the field
		if o.Value < 0 {
			n.fail(ErrInvalidField, "max_age_ms", "%d is negative", o.Value)
		}
		q.MaxAgeMillis = o
	}
	q.BlockExtraKeys = n.blockExtraKeys(m) // absent from writer schemas before the field
	if o := n.optLong(m, "", "lane_mask"); o.Valid {
		if o.Value < 0 || o.Value > int64(AllLanes) {
			n.fail(ErrInvalidField, "lane_mask", "%d sets bits above lane 15", o.Value)
		}
		q.LaneMask = Some(uint16(o.Value))
	}
	if o := n.optLong(m, "", "lane_mask64"); o.Valid { // absent from writer schemas before the field
		if q.LaneMask != Some(uint16(o.Value)) {
			n.fail(ErrInvalidField, "lane_mask", "%s is not the low 16 bits of lane_mask64 %#x", laneMaskText(q.LaneMask), uint64(o.Value))
		}
		q.LaneMask, q.LaneMask64 = Optional[uint16]{}, Some(uint64(o.Value))
	}
	if o := n.optLong(m, "", "reply_partition"); o.Valid {
		if o.Value < 0 || o.Value > maxInt32 {
			n.fail(ErrInvalidField, "reply_partition", "%d is negative", o.Value)
		}
		q.ReplyPartition = Some(int32(o.Value))
	}
	branch, iv := n.branch(m, "", "input", false)
	in := n.rec(iv, "input")
	switch branch {
	case nsName("LocalBlockHashes"):
		q.Input = InputLocalBlockHashes
		q.Hashes = n.bytes(in, "input", "hashes")
	case nsName("TokenIds"):
		q.Input = InputTokenIDs
		q.Tokens = n.bytes(in, "input", "tokens")
		q.BlockSize = uint32(n.rangeInt(in, "input", "block_size", 0, maxInt32))
		q.LoraName = n.optString(in, "input", "lora_name").Value
		q.CacheNamespace = n.optString(in, "input", "cache_namespace").Value
	default:
		n.fail(ErrMalformed, "input", "unknown branch %q", branch)
	}
	return q
}

// blockExtraKeys reads the optional block_extra_keys field; a writer schema without it reads
// as none.
func (n *nat) blockExtraKeys(m map[string]any) []ckf.ExtraKeys {
	b, av := n.branch(m, "", "block_extra_keys", true)
	if b == "" {
		return nil
	}
	arr, ok := av.([]any)
	if !ok {
		n.fail(ErrMalformed, "block_extra_keys", "expected an array, got %T", av)
		return nil
	}
	items := make([][]byte, len(arr))
	for i, it := range arr {
		if items[i], ok = it.([]byte); !ok {
			n.fail(ErrMalformed, "block_extra_keys", "entry %d: expected bytes, got %T", i, it)
			return nil
		}
	}
	keys, err := parseBlockExtraKeys(items)
	if err != nil {
		n.fail(ErrInvalidField, "block_extra_keys", "%v", err)
		return nil
	}
	return keys
}

func (n *nat) queryReply(v any) QueryReply {
	m := n.rec(v, "")
	r := QueryReply{
		CorrelationID: n.str(m, "", "correlation_id"),
		Status:        QueryStatus(n.enum(m, "", "status", queryStatusSymbols)),
		ErrorMessage:  n.optString(m, "", "error_message").Value,
		ReadyLanes:    uint16(n.rangeInt(m, "", "ready_lanes", 0, int64(AllLanes))),
		QueryBlocks:   uint32(n.rangeInt(m, "", "query_blocks", 0, maxInt32)),
		ReplyTime:     n.time(m, "", "reply_time"),
	}
	if _, ok := m["incomplete_lanes"]; ok { // absent from writer schemas before the field
		r.IncompleteLanes = uint16(n.rangeInt(m, "", "incomplete_lanes", 0, int64(AllLanes)))
	}
	// ready_lanes64 and incomplete_lanes64: absent from writer schemas before the fields, null.
	if o := n.optLong(m, "", "ready_lanes64"); o.Valid {
		r.ReadyLanes64 = uint64(o.Value)
	}
	if o := n.optLong(m, "", "incomplete_lanes64"); o.Valid {
		r.IncompleteLanes64 = uint64(o.Value)
	}
	arr, ok := n.get(m, "", "lanes", false).([]any)
	if !ok && n.kind == nil {
		n.fail(ErrMalformed, "lanes", "expected an array")
	}
	if len(arr) > 0 {
		r.Lanes = make([]LaneMatch, 0, len(arr))
	}
	for _, e := range arr {
		lm := n.rec(e, "lanes")
		r.Lanes = append(r.Lanes, LaneMatch{
			Lane:  uint8(n.rangeInt(lm, "lanes", "lane", 0, ckf.MaxLanes-1)),
			DcID:  uint64(n.long(lm, "lanes", "dc_id")),
			Pool:  n.str(lm, "lanes", "pool"),
			Depth: uint32(n.rangeInt(lm, "lanes", "depth", 0, maxInt32)),
		})
	}
	if v, ok := m["lane_states"]; ok { // absent from writer schemas before the field: empty
		states, ok := v.([]any)
		if !ok && n.kind == nil {
			n.fail(ErrMalformed, "lane_states", "expected an array")
		}
		if len(states) > 0 {
			r.LaneStates = make([]LaneState, 0, len(states))
		}
		for _, e := range states {
			sm := n.rec(e, "lane_states")
			st := LaneState{
				Lane:      uint8(n.rangeInt(sm, "lane_states", "lane", 0, ckf.MaxLanes-1)),
				State:     LaneAnswerState(n.enum(sm, "lane_states", "state", laneAnswerStateSymbols)),
				AgeMillis: n.optLong(sm, "lane_states", "age_ms"),
			}
			if st.AgeMillis.Valid && st.AgeMillis.Value < 0 {
				n.fail(ErrInvalidField, "lane_states.age_ms", "%d is negative", st.AgeMillis.Value)
			}
			r.LaneStates = append(r.LaneStates, st)
		}
	}
	return r
}

func (n *nat) laneEvent(v any) LaneEvent {
	m := n.rec(v, "")
	e := LaneEvent{
		Lane:              uint8(n.rangeInt(m, "", "lane", 0, ckf.MaxLanes-1)),
		Pool:              n.pool(n.get(m, "", "pool", false), "pool"),
		ConsumerInstance:  uint64(n.long(m, "", "consumer_instance")),
		LeaseEpoch:        n.optU64(m, "", "lease_epoch"),
		Kind:              LaneEventKind(n.enum(m, "", "kind", laneEventKindSymbols)),
		InstalledSequence: n.optU64(m, "", "installed_sequence"),
		AppliedOffset:     n.optLong(m, "", "applied_offset"),
		HighWatermark:     n.optLong(m, "", "high_watermark"),
		LagRecords:        n.optLong(m, "", "lag_records"),
		LagMicros:         n.optLong(m, "", "lag_micros"),
		EventTime:         n.time(m, "", "event_time"),
	}
	e.Capacity = n.capacity(m)
	if b, fv := n.branch(m, "", "fault", true); b != "" {
		f := n.rec(fv, "fault")
		e.Fault = &LaneFault{
			Kind:     LaneFaultKind(n.enum(f, "fault", "kind", laneFaultKindSymbols)),
			Detail:   n.str(f, "fault", "detail"),
			Expected: n.optU64(f, "fault", "expected"),
			Actual:   n.optU64(f, "fault", "actual"),
			Offset:   n.optLong(f, "fault", "offset"),
		}
	}
	if b, dv := n.branch(m, "", "disposition", true); b != "" {
		d := n.rec(dv, "disposition")
		e.Disposition = &FailureDisposition{
			Point:  FailurePoint(n.enum(d, "disposition", "point", failurePointSymbols)),
			Domain: FailureDomain(n.enum(d, "disposition", "domain", failureDomainSymbols)),
			Commit: CommitState(n.enum(d, "disposition", "commit", commitStateSymbols)),
			Action: FailureAction(n.enum(d, "disposition", "action", failureActionSymbols)),
		}
		if rb, rv := n.branch(d, "disposition", "recovery_domain", true); rb != "" {
			e.Disposition.RecoveryDomain = Some(FailureDomain(n.enum(map[string]any{"v": rv}, "disposition.recovery_domain", "v", failureDomainSymbols)))
		}
	}
	return e
}

func (n *nat) controlRecord(v any) ControlRecord {
	m := n.rec(v, "")
	var c ControlRecord
	branch, bv := n.branch(m, "", "body", false)
	b := n.rec(bv, "body")
	switch branch {
	case nsName("SnapshotRequest"):
		c.Kind = ControlSnapshotRequest
		c.SnapshotRequest = SnapshotRequest{
			Lane:        uint8(n.rangeInt(b, "body", "lane", 0, ckf.MaxLanes-1)),
			Pool:        n.pool(n.get(b, "body", "pool", false), "body.pool"),
			Requester:   uint64(n.long(b, "body", "requester")),
			Reason:      SnapshotRequestReason(n.enum(b, "body", "reason", snapshotRequestReasonSymbols)),
			Detail:      n.str(b, "body", "detail"),
			AfterOffset: n.long(b, "body", "after_offset"),
			RequestTime: n.time(b, "body", "request_time"),
		}
	default:
		n.fail(ErrMalformed, "body", "unknown branch %q", branch)
	}
	return c
}

func (n *nat) deadLetter(v any) DeadLetter {
	m := n.rec(v, "")
	d := DeadLetter{
		SourceTopic:     n.str(m, "", "source_topic"),
		SourcePartition: int32(n.rangeInt(m, "", "source_partition", 0, maxInt32)),
		SourceOffset:    n.long(m, "", "source_offset"),
		SourceTimestamp: n.optTime(m, "", "source_timestamp"),
		ReasonCode:      DeadLetterReason(n.enum(m, "", "reason_code", deadLetterReasonSymbols)),
		Reason:          n.str(m, "", "reason"),
		Component:       n.str(m, "", "component"),
		DeadLetterTime:  n.time(m, "", "dead_letter_time"),
	}
	if b, kv := n.branch(m, "", "key", true); b != "" {
		d.Key, _ = kv.([]byte)
	}
	if b, vv := n.branch(m, "", "value", true); b != "" {
		d.Value, _ = vv.([]byte)
	}
	return d
}

func (n *nat) kvEvent(v any) KvEvent {
	m := n.rec(v, "")
	e := KvEvent{
		WorkerID:        uint64(n.long(m, "", "worker_id")),
		DpRank:          uint32(n.rangeInt(m, "", "dp_rank", 0, 1<<32-1)),
		EventID:         uint64(n.long(m, "", "event_id")),
		StorageTier:     StorageTier(n.enum(m, "", "storage_tier", storageTierSymbols)),
		ResidencyDomain: n.optString(m, "", "residency_domain"),
	}
	branch, dv := n.branch(m, "", "data", false)
	d := n.rec(dv, "data")
	switch branch {
	case nsName("KvStored"):
		e.Kind = KvStoredEvent
		s := &e.Stored
		s.ParentHash = n.optU64(d, "data", "parent_hash")
		if o := n.optLong(d, "data", "start_position"); o.Valid {
			if o.Value < 0 || o.Value > 1<<32-1 {
				n.fail(ErrInvalidField, "data.start_position", "%d is not a u32", o.Value)
			}
			s.StartPosition = Some(uint32(o.Value))
		}
		s.SharedCacheEligible = n.boolean(d, "data", "shared_cache_eligible", false)
		s.BlockSize = n.blockSize(d, "data", "block_size")
		arr, ok := n.get(d, "data", "blocks", false).([]any)
		if !ok && n.kind == nil {
			n.fail(ErrMalformed, "data.blocks", "expected an array")
		}
		if len(arr) > 0 {
			s.Blocks = make([]KvBlock, 0, len(arr))
		}
		for _, bv := range arr {
			b := n.rec(bv, "data.blocks")
			s.Blocks = append(s.Blocks, KvBlock{
				BlockHash:  uint64(n.long(b, "data.blocks", "block_hash")),
				TokensHash: uint64(n.long(b, "data.blocks", "tokens_hash")),
			})
		}
	case nsName("KvRemoved"):
		e.Kind = KvRemovedEvent
		arr, ok := n.get(d, "data", "block_hashes", false).([]any)
		if !ok && n.kind == nil {
			n.fail(ErrMalformed, "data.block_hashes", "expected an array")
		}
		if len(arr) > 0 {
			e.Removed.BlockHashes = make([]uint64, 0, len(arr))
		}
		for _, h := range arr {
			e.Removed.BlockHashes = append(e.Removed.BlockHashes, uint64(n.asLong(h, "data.block_hashes")))
		}
	case nsName("KvCleared"):
		e.Kind = KvClearedEvent
	default:
		n.fail(ErrMalformed, "data", "unknown branch %q", branch)
	}
	return e
}
