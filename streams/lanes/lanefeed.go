package lanes

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/streams"
	"github.com/twmb/franz-go/pkg/kgo"
)

// LaneBatch is a run of consecutive records of one lane partition, in offset order, as one
// poll returned them.
type LaneBatch struct {
	Records []*kgo.Record
	// LastStableOffset is the partition's last stable offset reported with these records: the
	// end of what a read_committed consumer can read. The lane topic is transactional, so its
	// high watermark runs ahead of it while a relay's transaction is open, and a caught-up
	// consumer never reaches it then; lag is measured against this offset.
	LastStableOffset int64
	// Epoch is the seek generation the records belong to: the value Seek returned for the
	// latest seek before they were fetched, 0 before any seek. A consumer that hands batches to
	// another stage compares it with its own latest Seek to drop what the seek made stale.
	Epoch uint64
	bytes int
}

// FeedConfig bounds the per-lane queues of a LaneFeed. Start from DefaultFeedConfig:
// NewLaneFeed takes every field as it is.
type FeedConfig struct {
	// PauseBytes pauses fetching of a lane's partition once that many bytes of its records wait
	// in its queue. Other lanes keep fetching. Default 64 MiB (16 one-MiB snapshot chunks per
	// lane, four lanes' worth of a 2^20-bucket snapshot); > 0. Trade-off: a larger bound lets a
	// slow lane hold more memory, a smaller one pauses and resumes its partition more often.
	PauseBytes int
	// ResumeBytes resumes fetching once the queue drains to this many bytes. Default 16 MiB
	// (a quarter of the default PauseBytes); in [0, PauseBytes); 0 resumes only once the queue
	// is empty.
	ResumeBytes int
	// OnFetchError, when set, receives fetch errors (the client keeps retrying the partition).
	// Default nil: fetch errors are not reported.
	OnFetchError func(error)
}

// DefaultFeedConfig returns the feed's defaults: pause a lane's partition at 64 MiB queued,
// resume it at 16 MiB, fetch errors not reported.
func DefaultFeedConfig() FeedConfig {
	return FeedConfig{PauseBytes: 64 << 20, ResumeBytes: 16 << 20}
}

func (c FeedConfig) check(k *streams.ConfigCheck, prefix string) {
	if c.PauseBytes <= 0 {
		k.Fail(prefix+"PauseBytes", "must be > 0, got %d", c.PauseBytes)
	}
	if c.ResumeBytes < 0 || c.ResumeBytes >= c.PauseBytes {
		k.Fail(prefix+"ResumeBytes", "must be in [0, PauseBytes=%d), got %d", c.PauseBytes, c.ResumeBytes)
	}
}

// validate checks every field in order and returns the first violation as a *ConfigError.
func (c FeedConfig) validate() error {
	k := streams.ConfigCheck{Config: "lane feed"}
	c.check(&k, "")
	return k.Result()
}

// LaneFeed fetches the partitions of the lane topic by direct assignment (no consumer group:
// every indexer replica reads every lane) on one polling goroutine and hands each partition's
// records to that lane's bounded queue. One slow lane pauses only its own partition.
//
// Seeks are carried out by the polling goroutine between polls, so a lane never sees a record
// fetched before its seek after it: SetOffsets invalidates what franz-go buffered for the
// partition, and the lane's queue is cleared and its epoch advanced under the queue's lock in
// the same step.
type LaneFeed struct {
	cl  *kgo.Client
	cfg FeedConfig
	// topicOf names each lane's topic: partition p of topicOf[p] is lane p (a lane of another
	// region is read from a mirror's copy of its lane topic, design §8).
	topicOf [ckf.MaxLanes]string

	queues [ckf.MaxLanes]*laneQueue

	mu         sync.Mutex
	pending    map[int32]pendingSeek
	cancelPoll context.CancelFunc
}

type pendingSeek struct {
	offset int64
	epoch  uint64
}

// NewLaneFeed returns a feed for the given lanes of topic. cl must be a client created with
// kgo.ConsumePartitions for exactly those partitions (see LaneConsumerOpts). cfg is taken as it
// is; an invalid field is a *ConfigError.
func NewLaneFeed(cl *kgo.Client, topic string, lanes []int32, cfg FeedConfig) (*LaneFeed, error) {
	topics := make(map[int32]string, len(lanes))
	for _, l := range lanes {
		if _, dup := topics[l]; dup {
			return nil, fmt.Errorf("streams: lane %d listed twice", l)
		}
		topics[l] = topic
	}
	return NewLaneFeedTopics(cl, topics, cfg)
}

// NewLaneFeedTopics returns a feed for the given lanes, each read as its own partition of the
// topic named for it (lanes of one region share their region's lane topic). cl must be a client
// created with kgo.ConsumePartitions for exactly those partitions (see LaneConsumerOptsFor).
func NewLaneFeedTopics(cl *kgo.Client, topics map[int32]string, cfg FeedConfig) (*LaneFeed, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	f := &LaneFeed{cl: cl, cfg: cfg, pending: map[int32]pendingSeek{}}
	for l, topic := range topics {
		if l < 0 || l >= ckf.MaxLanes {
			return nil, fmt.Errorf("streams: lane %d out of range [0,%d)", l, ckf.MaxLanes)
		}
		if topic == "" {
			return nil, fmt.Errorf("streams: lane %d has no topic", l)
		}
		f.topicOf[l] = topic
		f.queues[l] = &laneQueue{lane: l, notify: make(chan struct{}, 1)}
	}
	return f, nil
}

// partition is lane's partition as a pause, resume or offset map names it.
func (f *LaneFeed) partition(lane int32) map[string][]int32 {
	return map[string][]int32{f.topicOf[lane]: {lane}}
}

// Config returns the configuration the feed runs with: the one it was built with.
func (f *LaneFeed) Config() FeedConfig { return f.cfg }

// LaneConsumerOpts returns the client options a LaneFeed needs: direct assignment of the lane
// partitions (partition p is lane p) starting at the given offsets (kgo.NewOffset().AtStart()
// where none is known); read_committed isolation, so aborted records of a fenced relay are never
// applied; and transaction markers kept as records (Attrs.IsControl), so a lane's applied
// position reaches the last stable offset exactly when it is caught up.
func LaneConsumerOpts(topic string, start map[int32]kgo.Offset) []kgo.Opt {
	return LaneConsumerOptsFor(map[string]map[int32]kgo.Offset{topic: start})
}

// LaneConsumerOptsFor is LaneConsumerOpts for lanes on several topics: start maps each topic to
// its lane partitions' start offsets.
func LaneConsumerOptsFor(start map[string]map[int32]kgo.Offset) []kgo.Opt {
	return []kgo.Opt{
		kgo.ConsumePartitions(start),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(),
		kgo.FetchMaxPartitionBytes(8 << 20),
		kgo.FetchMaxBytes(32 << 20),
	}
}

// Run polls until ctx ends or the client closes. It returns nil on ctx's end.
func (f *LaneFeed) Run(ctx context.Context) error {
	for {
		if err := ctx.Err(); err != nil {
			return nil
		}
		f.applySeeks()
		pctx, cancel := context.WithCancel(ctx)
		f.mu.Lock()
		f.cancelPoll = cancel
		pendingSeeks := len(f.pending) > 0
		f.mu.Unlock()
		if pendingSeeks { // a seek arrived between applySeeks and here
			cancel()
			continue
		}
		fetches := f.cl.PollFetches(pctx)
		f.mu.Lock()
		f.cancelPoll = nil
		f.mu.Unlock()
		cancel()
		if fetches.IsClientClosed() {
			return nil
		}
		var fatal error
		fetches.EachError(func(topic string, p int32, err error) {
			if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
				return
			}
			// franz-go retries retriable errors itself; what reaches here is for the operator.
			fatal = fmt.Errorf("fetch %s[%d]: %w", topic, p, err)
		})
		if fatal != nil && ctx.Err() == nil {
			// Not fatal for the feed: the partition keeps being retried by the client. Surface it.
			f.deliverError(fatal)
		}
		fetches.EachPartition(func(fp kgo.FetchTopicPartition) {
			if fp.Partition < 0 || fp.Partition >= ckf.MaxLanes || fp.Topic != f.topicOf[fp.Partition] {
				return
			}
			q := f.queues[fp.Partition]
			if q == nil || len(fp.Records) == 0 {
				if q != nil {
					q.observeLastStableOffset(stableEnd(fp))
				}
				return
			}
			q.push(fp.Records, stableEnd(fp), f.cfg.PauseBytes, func() {
				f.cl.PauseFetchPartitions(f.partition(fp.Partition))
			})
		})
	}
}

func (f *LaneFeed) deliverError(err error) {
	if f.cfg.OnFetchError != nil {
		f.cfg.OnFetchError(err)
	}
}

// Seek makes lane's next records start at offset. Records already queued for the lane, and any
// fetched before the seek takes effect, are discarded. It returns at once; the polling goroutine
// carries the seek out before its next poll. It returns the seek's epoch: every batch of records
// fetched after it carries it (LaneBatch.Epoch).
func (f *LaneFeed) Seek(lane int32, offset int64) uint64 {
	q := f.queues[lane]
	q.mu.Lock()
	q.wantEpoch++
	epoch := q.wantEpoch
	q.mu.Unlock()
	f.mu.Lock()
	f.pending[lane] = pendingSeek{offset: offset, epoch: epoch}
	if f.cancelPoll != nil {
		f.cancelPoll()
	}
	f.mu.Unlock()
	return epoch
}

func (f *LaneFeed) applySeeks() {
	f.mu.Lock()
	if len(f.pending) == 0 {
		f.mu.Unlock()
		return
	}
	seeks := f.pending
	f.pending = map[int32]pendingSeek{}
	f.mu.Unlock()
	set := map[string]map[int32]kgo.EpochOffset{}
	for lane, s := range seeks {
		q := f.queues[lane]
		q.mu.Lock()
		q.batches, q.bytes, q.epoch = nil, 0, s.epoch
		if q.paused {
			q.paused = false
			f.cl.ResumeFetchPartitions(f.partition(lane))
		}
		q.mu.Unlock()
		topic := f.topicOf[lane]
		if set[topic] == nil {
			set[topic] = map[int32]kgo.EpochOffset{}
		}
		set[topic][lane] = kgo.EpochOffset{Epoch: -1, Offset: s.offset}
	}
	f.cl.SetOffsets(set)
}

// Next blocks until lane has records (or ctx ends) and returns them. Records fetched before the
// lane's latest Seek are never returned.
func (f *LaneFeed) Next(ctx context.Context, lane int32) (LaneBatch, error) {
	for {
		if b, ok := f.TryNext(lane); ok {
			return b, nil
		}
		select {
		case <-ctx.Done():
			return LaneBatch{}, ctx.Err()
		case <-f.Ready(lane):
		}
	}
}

// TryNext returns lane's next batch if one is queued. Records fetched before the lane's latest
// Seek are never returned.
func (f *LaneFeed) TryNext(lane int32) (LaneBatch, bool) {
	q := f.queues[lane]
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.batches) > 0 {
		b := q.batches[0]
		q.batches[0] = LaneBatch{}
		q.batches = q.batches[1:]
		q.bytes -= b.bytes
		if q.paused && q.bytes <= f.cfg.ResumeBytes {
			q.paused = false
			f.cl.ResumeFetchPartitions(f.partition(lane))
		}
		if b.Epoch != q.wantEpoch {
			continue // fetched before a seek that is still pending or was just applied
		}
		return b, true
	}
	return LaneBatch{}, false
}

// Ready returns a channel that receives after records were queued for lane. A receive does not
// guarantee TryNext succeeds (another seek may have discarded them); callers loop.
func (f *LaneFeed) Ready(lane int32) <-chan struct{} { return f.queues[lane].notify }

// stableEnd is the partition's last stable offset from a fetch response, or its high watermark
// from a broker that reports no last stable offset (-1: fetch versions before 4, where there are
// no transactions to wait for either).
func stableEnd(fp kgo.FetchTopicPartition) int64 {
	if fp.LastStableOffset >= 0 {
		return fp.LastStableOffset
	}
	return fp.HighWatermark
}

// LastStableOffset returns the latest last stable offset seen for lane's partition (-1 before
// the first fetch).
func (f *LaneFeed) LastStableOffset(lane int32) int64 {
	q := f.queues[lane]
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.seenLSO {
		return -1
	}
	return q.lso
}

// QueueState is the state of one lane's fetch queue.
type QueueState struct {
	Bytes  int    // record bytes waiting for the lane
	Paused bool   // the partition is paused because Bytes reached FeedConfig.PauseBytes
	Pauses uint64 // how many times the partition was paused so far
}

// Queue returns the state of lane's fetch queue.
func (f *LaneFeed) Queue(lane int32) QueueState {
	q := f.queues[lane]
	q.mu.Lock()
	defer q.mu.Unlock()
	return QueueState{Bytes: q.bytes, Paused: q.paused, Pauses: q.pauses}
}

type laneQueue struct {
	lane   int32
	notify chan struct{}

	mu        sync.Mutex
	batches   []LaneBatch
	bytes     int
	epoch     uint64 // epoch of the seek the poller last applied
	wantEpoch uint64 // epoch of the latest seek requested
	paused    bool
	pauses    uint64
	lso       int64
	seenLSO   bool
}

// push appends records and pauses the partition once the queue holds pauseBytes. Pausing and
// resuming both happen under q.mu, so a resume from Next can never be overtaken by a stale pause.
func (q *laneQueue) push(rs []*kgo.Record, lso int64, pauseBytes int, pause func()) {
	n := 0
	for _, r := range rs {
		n += len(r.Key) + len(r.Value)
	}
	q.mu.Lock()
	q.batches = append(q.batches, LaneBatch{Records: rs, LastStableOffset: lso, Epoch: q.epoch, bytes: n})
	q.bytes += n
	q.lso, q.seenLSO = lso, true
	if q.bytes >= pauseBytes && !q.paused {
		q.paused = true
		q.pauses++
		pause()
	}
	q.mu.Unlock()
	select {
	case q.notify <- struct{}{}:
	default:
	}
}

func (q *laneQueue) observeLastStableOffset(lso int64) {
	if lso < 0 {
		return
	}
	q.mu.Lock()
	q.lso, q.seenLSO = lso, true
	q.mu.Unlock()
}
