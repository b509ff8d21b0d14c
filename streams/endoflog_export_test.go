package streams

import (
	"context"

	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"
)

// EndOfLog is the end-of-log helper, for the broker tests of the streams_test package.
type EndOfLog = endOfLog

// ListEndOfLog lists topic's end (see listEndOfLog).
func ListEndOfLog(ctx context.Context, adm *kadm.Client, topic string) (*EndOfLog, error) {
	return listEndOfLog(ctx, adm, topic)
}

// Remaining is how many partitions are not read up to their end.
func (e *endOfLog) Remaining() int { return e.remaining() }

// End is partition p's listed end.
func (e *endOfLog) End(p int32) (int64, bool) { return e.end(p) }

// Read reads the pending partitions up to their end (see endOfLog.read).
func (e *endOfLog) Read(ctx context.Context, opts []kgo.Opt, fn func(*kgo.Record)) error {
	return e.read(ctx, opts, fn)
}

// ReadSnapshotIndexTopic is the start-up reader of the snapshot index (see
// readSnapshotIndexTopic).
func ReadSnapshotIndexTopic(ctx context.Context, adm *kadm.Client, opts []kgo.Opt, codec *schemas.Codec, topic string, log *zap.Logger) (map[uint8]schemas.SnapshotIndexEntry, error) {
	return readSnapshotIndexTopic(ctx, adm, opts, codec, topic, log)
}
