package relay

import (
	"context"
	"fmt"

	"github.com/ckf-stream/ckf-stream/streams"
	"github.com/twmb/franz-go/pkg/kadm"
	"go.uber.org/zap"
)

// laneRecordLimit is the record limit of a new incarnation's lane writer and lane client: the
// lane topic's effective max.message.bytes (its override, else the broker's message.max.bytes),
// capped at streams.MaxRelayLaneRecordBytes. When the configuration cannot be read (no DescribeConfigs
// permission on the topic, broker unreachable) it logs why and takes streams.FallbackLaneRecordBytes,
// the smaller of the broker's and franz-go's defaults; should the topic's real limit be smaller,
// the first write over it fails and the next incarnation reads it again. A topic limit below
// MinLaneRecordBytes is ErrLaneRecordLimitTooSmall, fatal to Run: no incarnation could write.
func (rl *relayLoop) laneRecordLimit() (int, error) {
	r, topic := rl.r, rl.cfg.Topics.Lanes
	ctx, cancel := context.WithTimeout(context.Background(), rl.cfg.WriteTimeout)
	defer cancel()
	v, source, err := streams.ReadTopicMaxMessageBytes(ctx, kadm.NewClient(rl.outCl), topic)
	if err != nil {
		r.log.Warn("lane topic's max.message.bytes unreadable; sizing lane records for the defaults",
			zap.String("topic", topic), zap.Int("record_limit", streams.FallbackLaneRecordBytes), zap.Error(err))
		return streams.FallbackLaneRecordBytes, nil
	}
	if v < streams.MinLaneRecordBytes {
		return 0, fmt.Errorf("%w: %s has max.message.bytes %d (%s), below %d", streams.ErrLaneRecordLimitTooSmall, topic, v, source, streams.MinLaneRecordBytes)
	}
	limit := min(v, streams.MaxRelayLaneRecordBytes)
	r.log.Info("lane record limit", zap.String("topic", topic), zap.Int("max_message_bytes", v),
		zap.String("source", source), zap.Int("record_limit", limit))
	return limit, nil
}
