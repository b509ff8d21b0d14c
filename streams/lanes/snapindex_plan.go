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
// request so the lane does not depend on retention.
func (ix *Indexer) restorePlan(ctx context.Context, lanes []int32) (map[int32]lanePlan, error) {
	adm := kadm.NewClient(ix.outCl)
	topic := ix.cfg.Topics.Lanes
	// Both listings are retried on retriable Kafka errors (streams.RetryListing): right after the
	// topics are created, or during a leader election, a broker may not know a partition's
	// leader yet.
	var starts, ends kadm.ListedOffsets
	err := streams.RetryListing(ctx, func() (err error) {
		starts, err = adm.ListStartOffsets(ctx, topic)
		if err == nil {
			err = starts.Error()
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("streams: start offsets of %s: %w", topic, err)
	}
	err = streams.RetryListing(ctx, func() (err error) {
		ends, err = adm.ListEndOffsets(ctx, topic)
		if err == nil {
			err = ends.Error()
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("streams: end offsets of %s: %w", topic, err)
	}
	entries := map[uint8]schemas.SnapshotIndexEntry{}
	if ix.cfg.Topics.SnapshotIndex != "" {
		if entries, err = ix.readSnapshotIndex(ctx, adm); err != nil {
			return nil, err
		}
	}
	m := ix.g.Manifest()
	plan := map[int32]lanePlan{}
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
		case ok && e.FirstOffset >= so.Offset && e.FirstOffset < eo.Offset:
			plan[l] = lanePlan{start: kgo.NewOffset().At(e.FirstOffset), snapshotOffset: e.FirstOffset}
			ix.log.Info("lane restores from indexed snapshot", zap.Int32("lane", l), zap.Int64("offset", e.FirstOffset),
				zap.Uint64("sequence", e.Sequence))
		case ok:
			plan[l] = lanePlan{start: kgo.NewOffset().AtEnd(), snapshotOffset: -1,
				request: fmt.Sprintf("indexed snapshot at offset %d is no longer retained (log start %d)", e.FirstOffset, so.Offset)}
		default:
			plan[l] = lanePlan{start: kgo.NewOffset().AtStart(), snapshotOffset: -1,
				request: "no snapshot of this lane is indexed"}
		}
	}
	return plan, nil
}

// readSnapshotIndex reads the compacted index topic up to its end at the call and returns the
// latest entry per lane (a tombstone removes the lane's entry).
func (ix *Indexer) readSnapshotIndex(ctx context.Context, adm *kadm.Client) (map[uint8]schemas.SnapshotIndexEntry, error) {
	return streams.ReadSnapshotIndexTopic(ctx, adm, ix.opts.ForRole("snapshot-index"), ix.codec, ix.cfg.Topics.SnapshotIndex, ix.log)
}
