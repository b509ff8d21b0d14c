package streams

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"
)

// Start-up readers (the relay's replay of its KV events, the indexer's and the relay's reads of
// the snapshot index) must know exactly when they have read everything the log held when they
// started. "Caught up" is therefore a fact about offsets, never a guess from silence:
//
//   - The end a reader must reach is each partition's last stable offset (LSO), listed once
//     before reading. Under read_committed nothing at or past the LSO can be fetched until the
//     transaction that holds it ends, and every offset below it is decided: a committed record,
//     an aborted record, or a transaction marker. Without transactions the LSO is the high
//     watermark.
//   - Readers consume with kgo.KeepControlRecords, so commit and abort markers arrive as records
//     (Attrs.IsControl). A transactional log usually ends with a marker, and a partition whose
//     last transaction aborted holds nothing fetchable but that marker: counting markers makes
//     "offset+1 >= end" observable on every partition. Readers skip markers for processing.
//   - A partition whose log start offset is at or past its end (empty, or emptied by retention
//     or DeleteRecords before the listing) is caught up at once; nothing is fetched from it.
//
// Records at or past a partition's end were written after the listing: they belong to the
// reader's normal processing, not to its start-up read.
//
// A reader waits, without a timer, for as long as the broker withholds records below the end.
// Two cases make that wait longer than a fetch: a slow broker (the wait is exactly as long as
// it must be), and aborted records directly below the end whose abort marker lies past it,
// behind another producer's open transaction (read_committed filters them, so the partition is
// reached by the first record of that transaction once it ends; transactions end within the
// broker's transaction timeout). A partition emptied by retention while it is being read is
// reached by its next record. Bound the wait with the context when a caller needs a bound (the
// indexer's RestoreTimeout).

// ErrNoPartitions is the cause of an EndOfLogError for a topic the broker lists without
// partitions.
var ErrNoPartitions = errors.New("streams: topic has no partitions")

// EndOfLogError reports why a reader could not establish or reach the end of a topic: listing
// its offsets failed, a fetch of one of its partitions failed, or the reader's context ended.
// Err is the cause (a kerr error, ErrNoPartitions, the context's error); errors.Is sees it.
type EndOfLogError struct {
	Topic string
	// Partition is the failed partition, or -1 when the failure is the whole topic's.
	Partition int32
	// Op is what failed: "list end offsets", "list start offsets", "fetch" or "wait".
	Op  string
	Err error
}

// Error implements error.
func (e *EndOfLogError) Error() string {
	if e.Partition < 0 {
		return fmt.Sprintf("streams: end of log of %s: %s: %v", e.Topic, e.Op, e.Err)
	}
	return fmt.Sprintf("streams: end of log of %s[%d]: %s: %v", e.Topic, e.Partition, e.Op, e.Err)
}

// Unwrap returns the cause.
func (e *EndOfLogError) Unwrap() error { return e.Err }

// EndOfLog is one reader's target on one topic: every partition's end as listed, and which
// partitions the reader has not reached yet. It is not safe for concurrent use; a reader owns it.
type EndOfLog struct {
	topic   string
	ends    map[int32]int64 // partition -> last stable offset at listing
	starts  map[int32]int64 // partition -> log start offset at listing (absent: 0)
	pending map[int32]struct{}
}

// A start-up listing of offsets (ListEndOfLog, the relay's listings of its topics' partitions,
// the indexer's restore plan, the worker stages' first listing) fails with a retriable Kafka
// error while the cluster has not settled: right after the topics are created, or during a
// leader election. The errors say two different things, and a listing waits for them
// differently (ListingWait.Retry):
//
//   - The topic or partition is unknown (UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN_TOPIC_ID): on a
//     multi-broker cluster a topic created a moment ago is unknown to the brokers its metadata
//     has not reached yet, which takes a moment; a topic still unknown after OffsetListRetry is
//     missing (misnamed, or never created), waiting does not create it, and the error is
//     returned, naming the topic.
//   - Any other retriable error (NOT_LEADER_OR_FOLLOWER, LEADER_NOT_AVAILABLE,
//     OFFSET_NOT_AVAILABLE, a request timeout, ...): the topic exists and its partition has no
//     answering leader yet. A freshly created topic's leaders are elected when the brokers get
//     to it, and a failed leader's successor after the brokers' session timeout plus the
//     fencing; on a loaded broker that took longer than 30 s for 64 freshly created topics
//     (docs/EVALUATION.md, the 64-DC hour), and a process that gave up then had to be started
//     again only to wait for the same election. Such a listing is retried for as long as the
//     caller's context allows (the indexer bounds its restore with RestoreTimeout; a relay
//     waits, not ready, until the brokers elect the leaders), with a log line every
//     ListingWaitLogEvery saying what it waits for.

// OffsetListRetry bounds how long a listing retries a topic the brokers do not know
// (UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN_TOPIC_ID), counted from its first attempt: metadata
// reaches every broker well within it; a topic still unknown after it is missing, and the error
// is returned. Other retriable errors are retried until the caller's context ends, which may
// also end these retries earlier.
const OffsetListRetry = 30 * time.Second

// ListingWaitLogEvery is how often a listing that keeps failing with a retriable error logs
// what it waits for (ListingWait.Log).
const ListingWaitLogEvery = 10 * time.Second

// offsetListBackoff is the pause after a listing's first failed attempt; it doubles at every
// attempt up to offsetListMaxBackoff, so that a long election is not met by every relay and
// worker replica of the deployment listing ten times a second.
const (
	offsetListBackoff    = 100 * time.Millisecond
	offsetListMaxBackoff = time.Second
)

// listingClock is the time a listing's retries run on: the wall clock, or a test's.
type listingClock struct {
	now   func() time.Time
	after func(time.Duration) <-chan time.Time
}

var wallClock = listingClock{now: time.Now, after: time.After}

// ListingWait is how a start-up listing waits for the brokers (see above). The zero value waits
// without logging.
type ListingWait struct {
	// Log, when set, gets a line every ListingWaitLogEvery while a listing keeps failing with a
	// retriable error: what it lists, the error, how long and how many times it has tried.
	Log *zap.Logger

	clock listingClock // zero: wallClock
}

// RetryListing is ListingWait{}.Retry(ctx, "", list): the same retries, without a log line.
func RetryListing(ctx context.Context, list func() error) error {
	return ListingWait{}.Retry(ctx, "", list)
}

// Retry calls list until it returns nil or an error that is not a retriable Kafka error, ctx
// ends, or the error says the topic is unknown and OffsetListRetry has passed since the first
// attempt. It returns list's last error, or, when ctx ended during an attempt, the retriable
// error of the attempt before (the cause, rather than the cancellation). what names the listing
// in the log line ("" leaves it to the error).
func (w ListingWait) Retry(ctx context.Context, what string, list func() error) error {
	clk := w.clock
	if clk.now == nil {
		clk = wallClock
	}
	start := clk.now()
	nextLog := start.Add(ListingWaitLogEvery)
	backoff := offsetListBackoff
	var last error
	for attempt := 1; ; attempt++ {
		err := list()
		if err != nil && last != nil && ctx.Err() != nil {
			return last
		}
		var ke *kerr.Error
		if err == nil || !errors.As(err, &ke) || !ke.Retriable {
			return err
		}
		now := clk.now()
		waited := now.Sub(start)
		if topicUnknown(ke) && waited >= OffsetListRetry {
			return err
		}
		if w.Log != nil && !now.Before(nextLog) {
			w.Log.Warn("waiting for the brokers: a start-up listing keeps failing with a retriable error; retrying",
				zap.String("listing", what), zap.Duration("waited", waited), zap.Int("attempts", attempt), zap.Error(err))
			nextLog = now.Add(ListingWaitLogEvery)
		}
		last = err
		select {
		case <-ctx.Done():
			return err
		case <-clk.after(backoff):
		}
		backoff = min(2*backoff, offsetListMaxBackoff)
	}
}

// topicUnknown reports whether a retriable error says the brokers do not know the topic or
// partition, rather than that its leader is not there yet.
func topicUnknown(ke *kerr.Error) bool {
	return ke == kerr.UnknownTopicOrPartition || ke == kerr.UnknownTopicID
}

// ListEndOfLog lists the end of every partition of topic (last stable offsets), then the log
// start offsets. The end is listed first so that a start listed after it and found at or past
// it means the records below the end are gone: such a partition is reached at once. A listing
// that fails with a retriable Kafka error is repeated (RetryListing).
func ListEndOfLog(ctx context.Context, adm *kadm.Client, topic string) (*EndOfLog, error) {
	return ListingWait{}.ListEndOfLog(ctx, adm, topic)
}

// ListEndOfLog is the package's ListEndOfLog, waiting for the brokers as w does.
func (w ListingWait) ListEndOfLog(ctx context.Context, adm *kadm.Client, topic string) (*EndOfLog, error) {
	var e *EndOfLog
	err := w.Retry(ctx, "end of log of "+topic, func() (err error) {
		e, err = listEndOfLogOnce(ctx, adm, topic)
		return err
	})
	return e, err
}

func listEndOfLogOnce(ctx context.Context, adm *kadm.Client, topic string) (*EndOfLog, error) {
	ends, err := adm.ListCommittedOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return nil, &EndOfLogError{Topic: topic, Partition: -1, Op: "list end offsets", Err: err}
	}
	starts, err := adm.ListStartOffsets(ctx, topic)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return nil, &EndOfLogError{Topic: topic, Partition: -1, Op: "list start offsets", Err: err}
	}
	endOf, startOf := map[int32]int64{}, map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Topic == topic {
			endOf[o.Partition] = o.Offset
		}
	})
	starts.Each(func(o kadm.ListedOffset) {
		if o.Topic == topic {
			startOf[o.Partition] = o.Offset
		}
	})
	if len(endOf) == 0 {
		return nil, &EndOfLogError{Topic: topic, Partition: -1, Op: "list end offsets", Err: ErrNoPartitions}
	}
	return NewEndOfLog(topic, startOf, endOf), nil
}

// NewEndOfLog builds the target from listed offsets: a partition is pending while its end is
// above its start (a partition without a listed start counts from 0).
func NewEndOfLog(topic string, starts, ends map[int32]int64) *EndOfLog {
	e := &EndOfLog{topic: topic, ends: make(map[int32]int64, len(ends)), starts: starts, pending: map[int32]struct{}{}}
	for p, end := range ends {
		e.ends[p] = end
		if end > starts[p] {
			e.pending[p] = struct{}{}
		}
	}
	return e
}

// Partitions returns every listed partition, in order.
func (e *EndOfLog) Partitions() []int32 {
	ps := make([]int32, 0, len(e.ends))
	for p := range e.ends {
		ps = append(ps, p)
	}
	slices.Sort(ps)
	return ps
}

// End returns partition p's listed end.
func (e *EndOfLog) End(p int32) (int64, bool) {
	end, ok := e.ends[p]
	return end, ok
}

// Start returns partition p's log start as listed (0 when none was listed).
func (e *EndOfLog) Start(p int32) int64 { return e.starts[p] }

// Reached reports whether every partition has been read up to its end.
func (e *EndOfLog) Reached() bool { return len(e.pending) == 0 }

// Remaining returns how many partitions are not read up to their end yet.
func (e *EndOfLog) Remaining() int { return len(e.pending) }

// Observe records that rec was read, control records included, and reports whether rec lies
// below its partition's end (part of the start-up read) rather than past it (written after the
// listing). Records of another topic or of a partition not listed are not below any end.
func (e *EndOfLog) Observe(rec *kgo.Record) (below bool) {
	if rec.Topic != e.topic {
		return false
	}
	end, ok := e.ends[rec.Partition]
	if !ok {
		return false
	}
	if rec.Offset+1 >= end {
		delete(e.pending, rec.Partition)
	}
	return rec.Offset < end
}

// pendingAssignment is a consumer assignment of the pending partitions from their log start.
func (e *EndOfLog) pendingAssignment() map[string]map[int32]kgo.Offset {
	a := make(map[int32]kgo.Offset, len(e.pending))
	for p := range e.pending {
		a[p] = kgo.NewOffset().AtStart()
	}
	return map[string]map[int32]kgo.Offset{e.topic: a}
}

// EndOfLogConsumerOpts are the options every end-of-log reader's consumer needs: committed
// records only, and transaction markers delivered as records so that their offsets count.
func EndOfLogConsumerOpts() []kgo.Opt {
	return []kgo.Opt{kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords()}
}

// fetchPoller is the part of *kgo.Client that readToEnd uses.
type fetchPoller interface {
	PollFetches(ctx context.Context) kgo.Fetches
}

// Read reads the pending partitions from their log start to their end with a client of its own
// (opts carry the connection; the assignment and EndOfLogConsumerOpts are added), calling fn for
// every data record below its partition's end, in partition order. It fetches nothing when every
// partition is already reached.
func (e *EndOfLog) Read(ctx context.Context, opts []kgo.Opt, fn func(*kgo.Record)) error {
	if e.Reached() {
		return nil
	}
	all := append(append(slices.Clip(opts), kgo.ConsumePartitions(e.pendingAssignment())), EndOfLogConsumerOpts()...)
	cl, err := kgo.NewClient(all...)
	if err != nil {
		return &EndOfLogError{Topic: e.topic, Partition: -1, Op: "fetch", Err: err}
	}
	defer cl.Close()
	return e.ReadToEnd(ctx, cl, fn)
}

// ReadToEnd polls until every partition is reached, calling fn for every data record below its
// partition's end; control records and records past the end are only counted. It returns nil
// once caught up, an *EndOfLogError wrapping ctx's error when ctx ends first, or one wrapping
// the first fetch error (franz-go retries transient errors itself; what reaches a poll is not
// going to clear).
func (e *EndOfLog) ReadToEnd(ctx context.Context, cl fetchPoller, fn func(*kgo.Record)) error {
	for !e.Reached() {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return &EndOfLogError{Topic: e.topic, Partition: -1, Op: "wait", Err: err}
		}
		var ferr error
		fs.EachError(func(t string, p int32, err error) {
			if ferr == nil {
				ferr = &EndOfLogError{Topic: t, Partition: p, Op: "fetch", Err: err}
			}
		})
		if ferr != nil {
			return ferr
		}
		fs.EachRecord(func(rec *kgo.Record) {
			if e.Observe(rec) && !rec.Attrs.IsControl() {
				fn(rec)
			}
		})
	}
	return nil
}
