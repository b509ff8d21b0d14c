package streams

import (
	"context"
	"maps"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// LagCommitter makes a directly assigned consumer visible to standard lag tools
// (kafka-consumer-groups.sh, kminion, Burrow, kafka-lag-exporter), which read committed group
// offsets: it commits the consumer's positions into a consumer group of its own with
// kadm CommitOffsets, as a group without members (generation -1), so the consumer keeps its
// direct assignment and no rebalance ever involves it. The offsets are for visibility only:
// nobody restores from them (the relay restores from its checkpoint, the indexer seeks to
// snapshots).
//
// A position is the offset after the last record the consumer applied (Kafka's committed-offset
// convention: the next offset to read), so a caught-up consumer's lag is 0 against the
// partition's last stable offset. Both the relay (its KV-events input) and the indexer (its lane
// partitions) use it; it is not safe for concurrent use (each owner calls it from one goroutine).
type LagCommitter struct {
	Group    string
	Topic    string
	Interval time.Duration // least time between two commits, unless forced
	Timeout  time.Duration // bound of one CommitOffsets request

	committed map[int32]int64 // what the group last received
	last      time.Time       // when the last commit was attempted
}

// Pending reports whether positions differ from what the group last received.
func (c *LagCommitter) Pending(positions map[int32]int64) bool {
	return c.Group != "" && len(positions) > 0 && !maps.Equal(positions, c.committed)
}

// NextAt is the earliest time an unforced commit may run.
func (c *LagCommitter) NextAt() time.Time { return c.last.Add(c.Interval) }

// Commit commits positions into the group when they moved since the last commit and the interval
// has passed since the last attempt (force: whatever the interval). committed says whether a
// commit succeeded; err is the failure of an attempted one, for the caller to count and log (it
// is never fatal: the next call retries).
func (c *LagCommitter) Commit(cl *kgo.Client, now time.Time, positions map[int32]int64, force bool) (committed bool, err error) {
	if !c.Pending(positions) || (!force && now.Before(c.NextAt())) {
		return false, nil
	}
	c.last = now
	var os kadm.Offsets
	for p, o := range positions {
		os.Add(kadm.Offset{Topic: c.Topic, Partition: p, At: o, LeaderEpoch: -1})
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.Timeout)
	defer cancel()
	resp, err := kadm.NewClient(cl).CommitOffsets(ctx, c.Group, os)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		return false, err
	}
	c.committed = maps.Clone(positions)
	return true, nil
}

// LagFromStable lists the topic's last stable offsets (ListOffsets under read_committed) and
// returns, summed over its partitions, how far positions are behind them: the lag of the offsets
// just committed, counted as a read_committed consumer can reach, which group lag tools (counting
// to the high watermark) can exceed only by records of open transactions and records written
// since. A partition without a position counts from its log start.
func (c *LagCommitter) LagFromStable(cl *kgo.Client, positions map[int32]int64) (int64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), c.Timeout)
	defer cancel()
	adm := kadm.NewClient(cl)
	stable, err := adm.ListCommittedOffsets(ctx, c.Topic)
	if err == nil {
		err = stable.Error()
	}
	if err != nil {
		return 0, err
	}
	var starts kadm.ListedOffsets
	var lag int64
	for p, o := range stable[c.Topic] {
		pos, ok := positions[p]
		if !ok {
			if starts == nil {
				if starts, err = adm.ListStartOffsets(ctx, c.Topic); err != nil {
					return 0, err
				}
			}
			s, _ := starts.Lookup(c.Topic, p)
			pos = s.Offset
		}
		lag += max(o.Offset-pos, 0)
	}
	return lag, nil
}
