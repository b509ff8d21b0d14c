package streams

import (
	"context"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"
)

// The snapshot index is a compacted topic with one live record per lane (key "lane-<n>"): where
// the latest complete snapshot of that lane starts on the lane topic. Relays write it in the
// same transaction as the snapshot's last chunk, so an index entry never points at a snapshot
// that was not committed whole. A starting indexer reads the index (a handful of records)
// instead of scanning the lane partitions, and seeks each lane straight to its snapshot.

// ReadSnapshotIndexTopic reads the snapshot index topic from its start to the end listed at the
// call (see EndOfLog: the read ends exactly when every partition is read up to its last stable
// offset, transaction markers included) and returns the latest entry per lane; a tombstone
// removes the lane's entry, and an entry that does not decode, or names another lane than its
// key, is skipped with a warning. Entries written after the listing are not part of the result.
// opts carry the connection (the reader adds its assignment and isolation). Errors are
// *EndOfLogError (listing, fetch, or ctx ending first); a listing that waits for the brokers
// logs to log (ListingWait).
func ReadSnapshotIndexTopic(ctx context.Context, adm *kadm.Client, opts []kgo.Opt, codec *schemas.Codec, topic string, log *zap.Logger) (map[uint8]schemas.SnapshotIndexEntry, error) {
	end, err := ListingWait{Log: log}.ListEndOfLog(ctx, adm, topic)
	if err != nil {
		return nil, err
	}
	out := map[uint8]schemas.SnapshotIndexEntry{}
	err = end.Read(ctx, opts, func(r *kgo.Record) {
		lane, ok := parseLaneKey(r.Key)
		if !ok {
			return
		}
		if r.Value == nil {
			delete(out, lane)
			return
		}
		e, derr := codec.DecodeSnapshotIndexEntry(r.Value)
		if derr != nil || e.Lane != lane {
			log.Warn("unreadable snapshot index entry skipped", zap.Int32("partition", r.Partition), zap.Int64("offset", r.Offset), zap.Error(derr))
			return
		}
		out[lane] = e
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func parseLaneKey(k []byte) (uint8, bool) {
	const prefix = "lane-"
	if len(k) <= len(prefix) || string(k[:len(prefix)]) != prefix {
		return 0, false
	}
	n := 0
	for _, c := range k[len(prefix):] {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
		if n >= ckf.MaxLanes {
			return 0, false
		}
	}
	return uint8(n), true
}
