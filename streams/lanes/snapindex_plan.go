package lanes

import (
	"context"
	"fmt"

	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/ckf-stream/ckf-stream/streams"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"
)

// An indexer's start-up plan reads the snapshot index (see streams.ReadSnapshotIndexTopic).

// lanePlan is where a lane starts reading at start-up.
type lanePlan struct {
	start          kgo.Offset
	snapshotOffset int64  // first offset of the latest complete snapshot known, or -1
	request        string // non-empty: ask the relay for a snapshot, for this reason
}

// restorePlan decides each lane's start position: the latest indexed snapshot that is still
// retained; otherwise the log start (any retained snapshot is found by reading) plus a snapshot
// request so the lane does not depend on retention. Lanes are planned per source (Source): the
// lanes of one lane topic and snapshot index together, a mirrored source by time and sequence.
func (ix *Indexer) restorePlan(ctx context.Context, lanes []int32) (map[int32]lanePlan, error) {
	bySource := map[streams.LaneSource][]int32{}
	var sources []streams.LaneSource
	for _, l := range lanes {
		src := ix.cfg.Source(uint8(l))
		if bySource[src] == nil {
			sources = append(sources, src)
		}
		bySource[src] = append(bySource[src], l)
	}
	plan := map[int32]lanePlan{}
	for _, src := range sources {
		if err := ix.planSource(ctx, src, bySource[src], plan); err != nil {
			return nil, err
		}
	}
	return plan, nil
}

// planSource plans the lanes read from one source. A local lane seeks to its entry's first
// offset; a mirrored lane to chunk 0 of its entry's snapshot, found by the entry's write time,
// identity and sequence (consumer §9.8), since the entry's offsets are the source region's.
func (ix *Indexer) planSource(ctx context.Context, src streams.LaneSource, lanes []int32, plan map[int32]lanePlan) error {
	adm := kadm.NewClient(ix.outCl)
	topic := src.Topic
	// Both listings wait for the brokers on retriable Kafka errors (streams.ListingWait, with a
	// warning every streams.ListingWaitLogEvery): right after the topics are created, or during a
	// leader election, a broker may not know a partition's leader yet. The restore's deadline
	// (RestoreTimeout) bounds the wait.
	if src.Mirrored {
		// A copy the mirror has not created yet is not an error (planMirrorNotThere); asked
		// first, so that the listings below do not retry it until the restore deadline.
		topics, err := adm.ListTopics(ctx, topic)
		if err != nil {
			return fmt.Errorf("streams: listing %s: %w", topic, err)
		}
		if !topics.Has(topic) {
			ix.planMirrorNotThere(src, lanes, plan)
			return nil
		}
	}
	var starts, ends kadm.ListedOffsets
	wait := streams.ListingWait{Log: ix.log}
	err := wait.Retry(ctx, "start offsets of "+topic, func() (err error) {
		starts, err = adm.ListStartOffsets(ctx, topic)
		if err == nil {
			err = starts.Error()
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("streams: start offsets of %s: %w", topic, err)
	}
	err = wait.Retry(ctx, "end offsets of "+topic, func() (err error) {
		ends, err = adm.ListEndOffsets(ctx, topic)
		if err == nil {
			err = ends.Error()
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("streams: end offsets of %s: %w", topic, err)
	}
	entries := map[uint8]schemas.SnapshotIndexEntry{}
	if src.SnapshotIndex != "" {
		if entries, err = ix.readSnapshotIndex(ctx, adm, src.SnapshotIndex); err != nil {
			return err
		}
	}
	m := ix.g.Manifest()
	for _, l := range lanes {
		so, _ := starts.Lookup(topic, l)
		eo, _ := ends.Lookup(topic, l)
		pool, _ := m.PoolOf(uint8(l))
		e, ok := entries[uint8(l)]
		if ok {
			id, err := streams.CkfIdentity(e.Identity)
			if err != nil || id.Pool != pool || id.Format != m.Format() {
				ix.log.Warn("snapshot index entry does not match the manifest; ignored", zap.Int32("lane", l))
				ok = false
			}
		}
		switch {
		case ok && src.Mirrored:
			plan[l] = ix.planMirrored(ctx, adm, src, l, e, eo.Offset)
		case ok && e.FirstOffset >= so.Offset && e.FirstOffset < eo.Offset:
			plan[l] = lanePlan{start: kgo.NewOffset().At(e.FirstOffset), snapshotOffset: e.FirstOffset}
			ix.log.Info("lane restores from indexed snapshot", zap.Int32("lane", l), zap.Int64("offset", e.FirstOffset),
				zap.Uint64("sequence", e.Sequence))
		case ok:
			// From the end as listed now, before the request is sent, not "at end" resolved
			// when the consumer first fetches: a relay quick to answer would write the
			// requested snapshot before that, and the lane would start after it and wait.
			plan[l] = lanePlan{start: kgo.NewOffset().At(eo.Offset), snapshotOffset: -1,
				request: fmt.Sprintf("indexed snapshot at offset %d is no longer retained (log start %d)", e.FirstOffset, so.Offset)}
		default:
			plan[l] = lanePlan{start: kgo.NewOffset().AtStart(), snapshotOffset: -1,
				request: "no snapshot of this lane is indexed"}
		}
	}
	return nil
}

// planMirrorNotThere plans the lanes of a mirrored source whose lane topic does not exist yet:
// the region's MirrorMaker has not created its copy (this region came up before its peer, or
// before the mirror's first pass), so there is no snapshot index to read either. Rather than
// failing the indexer's start (and with it the local lanes' answers), each such lane starts at
// the copy's start, which the lane consumer reads once the mirror creates it (franz-go keeps
// asking the brokers for a partition it was told to consume), and asks for a snapshot, which
// the peer's relay answers once the reverse mirror carries the request; until a snapshot
// arrives the lane waits, out of answers (awaiting_snapshot). The mirror copies what the peer
// still retains, snapshot included, so the request is a second way in, not the only one.
func (ix *Indexer) planMirrorNotThere(src streams.LaneSource, lanes []int32, plan map[int32]lanePlan) {
	why := fmt.Sprintf("mirrored topic %s does not exist yet (the region's MirrorMaker has not created it)", src.Topic)
	ix.log.Warn("mirrored lanes wait for their topic: "+why, zap.String("source", src.String()), zap.Int32s("lanes", lanes))
	for _, l := range lanes {
		plan[l] = lanePlan{start: kgo.NewOffset().AtStart(), snapshotOffset: -1, request: why}
	}
}

// planMirrored finds a mirrored lane's indexed snapshot by time and sequence. A snapshot not on
// the partition (not mirrored yet, or no longer retained), or a search that fails, starts the
// lane at the partition's end (end, as listed before the request is sent) with a snapshot
// request, as a snapshot no longer retained does.
func (ix *Indexer) planMirrored(ctx context.Context, adm *kadm.Client, src streams.LaneSource, l int32, e schemas.SnapshotIndexEntry, end int64) lanePlan {
	found, err := streams.FindSnapshotByTime(ctx, adm, ix.opts.ForRole("snapshot-index"), ix.codec,
		streams.SnapshotSeek{Topic: src.Topic, Partition: l, Entry: e})
	if err != nil {
		ix.log.Warn("mirrored lane's indexed snapshot not found by time", zap.Int32("lane", l), zap.String("source", src.String()),
			zap.Uint64("sequence", e.Sequence), zap.Time("write_time", e.WriteTime), zap.Error(err))
		return lanePlan{start: kgo.NewOffset().At(end), snapshotOffset: -1,
			request: fmt.Sprintf("indexed snapshot %d not found on %s by its write time: %v", e.Sequence, src, err)}
	}
	ix.log.Info("mirrored lane restores from indexed snapshot found by time", zap.Int32("lane", l), zap.String("source", src.String()),
		zap.Int64("offset", found.Offset), zap.Int64("source_offset", e.FirstOffset), zap.Uint64("sequence", e.Sequence),
		zap.Int("seeks", found.Seeks), zap.Duration("margin", found.Margin), zap.Int("records_read", found.Read))
	return lanePlan{start: kgo.NewOffset().At(found.Offset), snapshotOffset: found.Offset}
}

// readSnapshotIndex reads the compacted index topic up to its end at the call and returns the
// latest entry per lane (a tombstone removes the lane's entry).
func (ix *Indexer) readSnapshotIndex(ctx context.Context, adm *kadm.Client, topic string) (map[uint8]schemas.SnapshotIndexEntry, error) {
	return streams.ReadSnapshotIndexTopic(ctx, adm, ix.opts.ForRole("snapshot-index"), ix.codec, topic, ix.log)
}
