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

// OffsetListRetry bounds how long the start-up listings of offsets (ListEndOfLog, the relay's
// listPartitions, the indexer's restore plan) retry a listing that failed with a retriable Kafka
// error: on a multi-broker cluster a topic created a moment ago is unknown to the brokers its
// metadata has not reached yet (UNKNOWN_TOPIC_OR_PARTITION) or names a leader that is not one
// yet (NOT_LEADER_OR_FOLLOWER), and a partition whose leader just failed has none until the
// controller elects one (LEADER_NOT_AVAILABLE; an election takes up to the brokers' session
// timeout, 9 s by default, plus the fencing). 30 s covers both with room; a topic still
// unknown after it is missing, and the error is returned. The caller's context ends the
// retries earlier.
const OffsetListRetry = 30 * time.Second

// offsetListBackoff is the pause between two attempts of a listing.
const offsetListBackoff = 100 * time.Millisecond

// RetryListing calls list until it returns nil or an error that is not a retriable Kafka
// error, OffsetListRetry has passed, or ctx ends; it returns list's last error, or, when ctx
// ended during an attempt, the retriable error of the attempt before (the cause, rather than
// the cancellation).
func RetryListing(ctx context.Context, list func() error) error {
	deadline := time.Now().Add(OffsetListRetry)
	var last error
	for {
		err := list()
		if err != nil && last != nil && ctx.Err() != nil {
			return last
		}
		var ke *kerr.Error
		if err == nil || !errors.As(err, &ke) || !ke.Retriable || !time.Now().Before(deadline) {
			return err
		}
		last = err
		select {
		case <-ctx.Done():
			return err
		case <-time.After(offsetListBackoff):
		}
	}
}

// ListEndOfLog lists the end of every partition of topic (last stable offsets), then the log
// start offsets. The end is listed first so that a start listed after it and found at or past
// it means the records below the end are gone: such a partition is reached at once. A listing
// that fails with a retriable Kafka error is repeated (RetryListing).
func ListEndOfLog(ctx context.Context, adm *kadm.Client, topic string) (*EndOfLog, error) {
	var e *EndOfLog
	err := RetryListing(ctx, func() (err error) {
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
