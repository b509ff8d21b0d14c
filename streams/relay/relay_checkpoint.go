package relay

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/ckf-stream/ckf-stream/ckf/producer"
	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/ckf-stream/ckf-stream/streams"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"
)

// The relay's state checkpoint and its input positions (relay.md, "State checkpoint"; the record
// framing is in checkpoint_record.go, the search for the newest usable one in
// checkpoint_read.go).
//
// Write: at a publication boundary (the open window is published first), the exact state is
// encoded (producer.DcState.AppendCheckpoint) and written, in chunks and then a manifest holding
// the KV-events offsets the state has applied up to, in the same Kafka transaction as the lane
// deltas taken since the previous commit. Lane output, state and input positions therefore
// commit or abort together: a restarted relay never restores a state whose lane records were
// lost, nor lane records whose state was lost.
//
// Restore: at start the relay reads the newest committed checkpoint of its pool, seeks every KV
// partition to the checkpointed offset (the log start for a partition the checkpoint does not
// name), replays only the tail up to the end listed at start, and then starts a new incarnation
// with a barrier snapshot, as after a full replay. An unusable checkpoint (damaged record,
// missing chunk, payload hash, a state that fails the producer's consistency checks, another
// configuration, offsets beyond the input's end) is logged, counted and dead-lettered, and the
// next older one is tried; with none usable the relay replays the KV topic from its start.
//
// Lag: the KV-events partitions are assigned directly (one relay must read them all), so no
// consumer group tracks them. After committed transactions, at most once per LagCommitInterval,
// the relay commits the offsets whose events are published into LagGroup (kadm CommitOffsets,
// no members, generation -1): standard lag tools (kafka-consumer-groups.sh, kminion, Burrow,
// kafka-lag-exporter) read them. They are for visibility only; restores use the checkpoint.
// After each commit the relay lists the KV topic's last stable offsets (one more request, at most
// once per LagCommitInterval, on the relay's loop) and exports the committed offsets' distance to
// them as ckf_relay_input_lag_records: the lag those tools show, counted as a read_committed
// reader can reach.

// checkpointState is the relay loop's checkpoint bookkeeping.
type checkpointState struct {
	next         map[int32]int64      // KV partition -> next offset to apply (every record read so far)
	published    map[int32]int64      // KV offsets whose events are in committed lane records
	lag          streams.LagCommitter // commits published into LagGroup
	events       uint64               // KV records applied since the relay first started (all incarnations)
	eventsAtLast uint64               // events at the last checkpoint
	lastAt       time.Time            // when the last checkpoint was committed (or restored)
	lastID       uint64
	buf          []byte
	chunkBytes   int // state bytes per chunk record: CheckpointChunkBytes, or less to fit the topic
}

// checkpointRecordLimit reads the checkpoint topic's effective max.message.bytes at a new
// incarnation (as laneRecordLimit does for the lane topic; unreadable: the defaults), sets the
// chunk size to CheckpointChunkBytes or less so that a chunk record fits, and returns the limit
// for the lane client's batches on that topic (0 without checkpoints). A checkpoint that did not
// fit would fail its transaction at every trigger, and every failure starts a new incarnation.
func (rl *relayLoop) checkpointRecordLimit() (int, error) {
	r, cfg := rl.r, rl.cfg
	if cfg.Topics.Checkpoints == "" {
		return 0, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.WriteTimeout)
	defer cancel()
	limit, source, err := streams.ReadTopicMaxMessageBytes(ctx, kadm.NewClient(rl.outCl), cfg.Topics.Checkpoints)
	if err != nil {
		r.log.Warn("checkpoint topic's max.message.bytes unreadable; sizing chunks for the defaults",
			zap.String("topic", cfg.Topics.Checkpoints), zap.Int("record_limit", streams.FallbackLaneRecordBytes), zap.Error(err))
		limit, source = streams.FallbackLaneRecordBytes, "default"
	}
	limit = min(limit, streams.MaxRelayLaneRecordBytes)
	room := limit - streams.BatchOverheadBytes - streams.RecordFramingBytes - len(cfg.Pool.String()) - checkpointChunkFixed
	if room < 1 {
		return 0, fmt.Errorf("%w: %s has max.message.bytes %d (%s), too small for a checkpoint chunk", streams.ErrLaneRecordLimitTooSmall, cfg.Topics.Checkpoints, limit, source)
	}
	rl.ck.chunkBytes = min(cfg.CheckpointChunkBytes, room)
	if rl.ck.chunkBytes < cfg.CheckpointChunkBytes {
		r.log.Info("checkpoint chunks shrunk to fit the checkpoint topic", zap.Int("chunk_bytes", rl.ck.chunkBytes),
			zap.Int("configured_chunk_bytes", cfg.CheckpointChunkBytes), zap.Int("max_message_bytes", limit))
	}
	return limit, nil
}

// checkpointDue reports whether a checkpoint is due now: the topic is set, the stream is live
// and the interval or the event count since the previous one is reached.
func (rl *relayLoop) checkpointDue(now time.Time) bool {
	cfg := rl.cfg
	if cfg.Topics.Checkpoints == "" || rl.replaying || rl.broken || rl.pub == nil {
		return false
	}
	if rl.ck.events == rl.ck.eventsAtLast {
		// Nothing applied since the last checkpoint (transaction markers may have moved the
		// offsets; replaying them changes nothing): an idle DC would rewrite the same state.
		// The checkpoint topic is bounded by size, so the last one stays.
		return false
	}
	if cfg.CheckpointEveryEvents > 0 && rl.ck.events-rl.ck.eventsAtLast >= cfg.CheckpointEveryEvents {
		return true
	}
	return cfg.CheckpointInterval > 0 && !now.Before(rl.ck.lastAt.Add(cfg.CheckpointInterval))
}

// nextCheckpointAt is when the interval trigger fires next (ok false: no checkpoints, or none
// due until an event is applied).
func (rl *relayLoop) nextCheckpointAt() (time.Time, bool) {
	if rl.cfg.Topics.Checkpoints == "" || rl.cfg.CheckpointInterval <= 0 || rl.ck.events == rl.ck.eventsAtLast {
		return time.Time{}, false
	}
	return rl.ck.lastAt.Add(rl.cfg.CheckpointInterval), true
}

// checkpoint publishes the open window, then commits the open transaction's deltas, the encoded
// state and the input offsets in one transaction (bounded by ctx and WriteTimeout). A state that
// cannot be encoded is logged and retried at the next trigger, its deltas left to the next
// commit; a failed write is a failed lane write (writeFailed).
func (rl *relayLoop) checkpoint(ctx context.Context) error {
	r, cfg := rl.r, rl.cfg
	start := rl.now()
	if err := rl.awaitCommit(ctx); err != nil {
		return err
	}
	if images := rl.state.Flush(); len(images) > 0 {
		rl.publish(images)
	}
	rl.pendingSince = zeroTime
	if rl.broken {
		return nil
	}
	payload, err := rl.state.AppendCheckpoint(rl.ck.buf[:0])
	if err != nil {
		r.log.Error("relay state checkpoint not encodable; retrying at the next trigger", zap.Error(err))
		rl.ck.lastAt, rl.ck.eventsAtLast = rl.now(), rl.ck.events
		return nil
	}
	rl.ck.buf = payload
	id := max(uint64(rl.now().UnixNano()), rl.ck.lastID+1)
	key := []byte(cfg.Pool.String())
	values := splitCheckpoint(id, payload, rl.ck.chunkBytes)
	chunks := make([]*kgo.Record, len(values))
	for i, v := range values {
		chunks[i] = &kgo.Record{Topic: cfg.Topics.Checkpoints, Partition: int32(cfg.Lane), Key: key, Value: v}
	}
	offsets := maps.Clone(rl.ck.next)
	m := checkpointManifest{
		ID: id, Pool: cfg.Pool.String(), Lane: cfg.Lane, Incarnation: rl.identity.Incarnation,
		Sequence: rl.pub.LastSequence(), Chunks: uint32(len(chunks)), PayloadLen: uint64(len(payload)),
		PayloadHash: hashPayload(payload), WriteTime: rl.now(), Events: rl.ck.events,
		InputTopic: cfg.Topics.KVEvents, Offsets: sortedOffsets(offsets),
		LostClears: rl.lostClears, Degraded: sortedSources(rl.degraded),
	}
	manifest := func(rs []*kgo.Record) ([]*kgo.Record, error) {
		m.FirstChunkOffset = chunks[0].Offset // set by the produce of rs, which holds chunks
		return []*kgo.Record{{Topic: cfg.Topics.Checkpoints, Partition: int32(cfg.Lane), Key: key,
			Value: appendCheckpointManifest(nil, &m)}}, nil
	}
	err = rl.fault("checkpoint")
	if err == nil {
		err = rl.w.WriteDeltasWith(ctx, rl.txn.unstreamed(), chunks, manifest)
	}
	if err != nil {
		return rl.writeFailed("checkpoint", err)
	}
	rl.txn.taken()
	rl.wrote()
	rl.ck.published = offsets
	rl.ck.lastAt, rl.ck.lastID, rl.ck.eventsAtLast = rl.now(), id, rl.ck.events
	took := rl.now().Sub(start)
	r.c.lastCheckpoint.set(id)
	r.c.checkpoints.add(1)
	r.c.checkpointBytes.set(uint64(len(payload)))
	r.metrics.checkpointDuration.RecordDuration(took)
	r.log.Info("relay state checkpointed", zap.Uint64("id", id), zap.Int("bytes", len(payload)),
		zap.Int("chunks", len(chunks)), zap.Uint64("sequence", m.Sequence), zap.Duration("took", took))
	rl.commitLag(true)
	return nil
}

// stopCheckpointDue reports whether the graceful stop should end with a checkpoint: checkpoints
// are on and events were applied since the last one, so the next start replays nothing.
func (rl *relayLoop) stopCheckpointDue() bool {
	return rl.cfg.Topics.Checkpoints != "" && rl.ck.events != rl.ck.eventsAtLast
}

// noteRead records that rec (a KV record, control records included) has been applied.
func (rl *relayLoop) noteRead(rec *kgo.Record) {
	rl.ck.next[rec.Partition] = rec.Offset + 1
	if !rec.Attrs.IsControl() {
		rl.ck.events++
	}
}

// notePublished records, after a committed lane transaction, that every event applied so far is
// in committed lane records (unless the window still holds some).
func (rl *relayLoop) notePublished() {
	if rl.state.HasPendingPublication() {
		return
	}
	if rl.ck.published == nil {
		rl.ck.published = make(map[int32]int64, len(rl.ck.next))
	}
	maps.Copy(rl.ck.published, rl.ck.next)
}

// commitLag commits the published offsets to LagGroup when they moved and LagCommitInterval has
// passed (force: whatever the interval). A failure is counted and logged; the next one retries.
func (rl *relayLoop) commitLag(force bool) {
	r := rl.r
	ok, err := rl.ck.lag.Commit(rl.outCl, rl.now(), rl.ck.published, force)
	if err != nil {
		r.metrics.lagCommitErrors.Inc(1)
		r.log.Warn("lag offsets not committed", zap.String("group", rl.ck.lag.Group), zap.Error(err))
		return
	}
	if !ok {
		return
	}
	r.c.lagCommits.add(1)
	lag, err := rl.ck.lag.LagFromStable(rl.outCl, rl.ck.published)
	if err != nil {
		r.metrics.lagCommitErrors.Inc(1)
		r.log.Warn("KV topic's last stable offsets not listed; ckf_relay_input_lag_records not updated", zap.Error(err))
		return
	}
	r.metrics.inputLag.Update(float64(lag))
}

// restoreCheckpoint reads the newest usable checkpoint of the pool, given the KV topic's listed
// start and end offsets. ok is false when there is none (the relay then replays from the start).
func (rl *relayLoop) restoreCheckpoint(ctx context.Context, adm *kadm.Client, kv *streams.EndOfLog) (st *producer.DcState, m checkpointManifest, ok bool, err error) {
	r, cfg := rl.r, rl.cfg
	cr := &checkpointReader{adm: adm, opts: r.opts.ForRole("relay-checkpoints"), topic: cfg.Topics.Checkpoints,
		partition: int32(cfg.Lane), key: []byte(cfg.Pool.String()), wait: streams.ListingWait{Log: r.log}}
	accept := func(m *checkpointManifest, payload []byte) error {
		switch {
		case m.Pool != cfg.Pool.String() || m.Lane != cfg.Lane:
			return &CheckpointRecordError{Offset: m.offset, Reason: fmt.Sprintf("written for pool %s lane %d", m.Pool, m.Lane)}
		case m.InputTopic != cfg.Topics.KVEvents:
			return &CheckpointRecordError{Offset: m.offset, Reason: fmt.Sprintf("input topic %q, the relay reads %q", m.InputTopic, cfg.Topics.KVEvents)}
		}
		for _, o := range m.Offsets {
			end, listed := kv.End(o.Partition)
			if !listed || o.Next > end {
				return &CheckpointRecordError{Offset: m.offset, Reason: fmt.Sprintf(
					"input partition %d offset %d is beyond the KV topic's end %d (listed %v): the topic was recreated or truncated", o.Partition, o.Next, end, listed)}
			}
		}
		restored, err := producer.RestoreDcState(cfg.CKF, payload)
		if err != nil {
			return fmt.Errorf("streams: relay checkpoint at offset %d: %w", m.offset, err)
		}
		st = restored
		return nil
	}
	reject := func(rec *kgo.Record, err error) {
		r.c.checkpointsRejected.add(1)
		r.log.Error("relay checkpoint unusable; trying an older one", zap.Int64("offset", rec.Offset), zap.Error(err))
		if rl.out != nil {
			code := schemas.DeadLetterMalformed
			if !errors.Is(err, ErrCheckpointRecord) {
				code = schemas.DeadLetterInvalidField // decoded, but the state is not usable
			}
			rl.out.DeadLetter(rec, code, err.Error(), "relay-checkpoint")
			r.c.deadLetters.add(1)
		}
	}
	m, ok, err = cr.latest(ctx, accept, reject)
	if err != nil {
		return nil, checkpointManifest{}, false, fmt.Errorf("streams: relay: reading checkpoints: %w", err)
	}
	return st, m, ok, nil
}

// openState builds the loop's state, from the newest usable checkpoint when the relay has a
// checkpoint topic and one is found, fresh otherwise, with publication materialisation off for
// the replay (the start-up snapshot carries the replayed state). It returns where each KV
// partition's replay starts: the checkpointed offset, or the log start for a partition the
// checkpoint does not name or whose checkpointed offset retention already deleted (a gap: the
// events in between are lost to the state; logged and counted).
func (rl *relayLoop) openState(ctx context.Context, adm *kadm.Client, kv *streams.EndOfLog) (map[int32]int64, error) {
	r, cfg := rl.r, rl.cfg
	rl.ck.next = map[int32]int64{}
	from := make(map[int32]int64, len(kv.Partitions()))
	for _, p := range kv.Partitions() {
		from[p] = kv.Start(p)
	}
	var state *producer.DcState
	if cfg.Topics.Checkpoints != "" {
		st, m, ok, err := rl.restoreCheckpoint(ctx, adm, kv)
		if err != nil {
			return nil, err
		}
		if ok {
			state = st
			rl.ck.events, rl.ck.eventsAtLast = m.Events, m.Events
			// The sources degraded before the checkpoint stay degraded: the clears that did it
			// are not in the tail the relay replays.
			rl.lostClears, rl.degraded = m.LostClears, nil
			for _, d := range m.Degraded {
				if rl.degraded == nil {
					rl.degraded = map[sourceKey]struct{}{}
				}
				rl.degraded[d] = struct{}{}
			}
			rl.ck.lastAt, rl.ck.lastID = m.WriteTime, m.ID
			rl.prevInc = max(rl.prevInc, m.Incarnation)
			r.c.restore(m.ID)
			for _, o := range m.Offsets {
				rl.ck.next[o.Partition] = o.Next
				if o.Next < kv.Start(o.Partition) {
					r.c.checkpointGaps.add(1)
					r.log.Error("KV events after the checkpoint were deleted by retention before the relay read them: the state misses them (keep the KV topic's retention above the checkpoint interval)",
						zap.Int32("partition", o.Partition), zap.Int64("checkpoint_offset", o.Next), zap.Int64("log_start", kv.Start(o.Partition)))
					continue
				}
				from[o.Partition] = o.Next
			}
			r.log.Info("relay state restored from checkpoint", zap.Uint64("id", m.ID), zap.Int64("offset", m.offset),
				zap.Uint64("incarnation", m.Incarnation), zap.Uint64("sequence", m.Sequence),
				zap.Uint64("resident_blocks", st.ResidentCount()), zap.Time("written", m.WriteTime))
		} else {
			r.log.Info("no usable relay checkpoint; replaying the KV events from their start")
		}
	}
	if state == nil {
		var err error
		if state, err = producer.NewDcState(cfg.CKF); err != nil {
			return nil, fmt.Errorf("streams: relay state: %w", err)
		}
	}
	state.SetPublicationMaterializationEnabled(false)
	rl.state = state
	return from, nil
}

// sortedSources lists the keys of set, sorted by worker then rank (a checkpoint's order).
func sortedSources(set map[sourceKey]struct{}) []sourceKey {
	out := make([]sourceKey, 0, len(set))
	for k := range set {
		out = append(out, k)
	}
	slices.SortFunc(out, func(a, b sourceKey) int {
		if c := cmp.Compare(a.worker, b.worker); c != 0 {
			return c
		}
		return cmp.Compare(a.rank, b.rank)
	})
	return out
}
