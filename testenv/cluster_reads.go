package testenv

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
)

// The tests' own reads of a cluster (offset listings, partition states) go through RetryRead:
// while a leadership moves, a broker answers NOT_LEADER_FOR_PARTITION, and one whose metadata
// lags answers UNKNOWN_TOPIC_OR_PARTITION, for longer than franz-go's own retries of one request
// cover (20 tries within 30 s, and none at all for a shard whose cached metadata another shard
// has just dropped). A scenario's final checks run right after a node returns and takes its
// leaderships back, so they retry such answers until the caller's deadline; an answer no retry
// cures fails at once, naming the topic and the partition.

// readAttempt bounds one attempt of a read, so that a request stuck on a paused or isolated
// broker is tried again (on fresh metadata) before the caller's deadline.
const readAttempt = 10 * time.Second

// TransientReadError reports whether err is one a read retries: a retriable Kafka error
// (NOT_LEADER_FOR_PARTITION, UNKNOWN_TOPIC_OR_PARTITION, LEADER_NOT_AVAILABLE,
// COORDINATOR_LOAD_IN_PROGRESS, NOT_COORDINATOR, REQUEST_TIMED_OUT, ...), a connection refused,
// reset or cut, or an attempt's own deadline.
func TransientReadError(err error) bool {
	var ne net.Error
	switch {
	case err == nil:
		return false
	case kerr.IsRetriable(err), errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, syscall.ECONNREFUSED),
		errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return true
	}
	return false
}

// RetryRead calls read until it succeeds, returns an error TransientReadError does not accept,
// or ctx ends; each call gets a context of its own bounded by readAttempt. The error names what
// and wraps read's last error that was not ctx ending: an attempt cut short by the caller's
// deadline says nothing about the cluster, while the answer before it (NOT_LEADER_FOR_PARTITION,
// say) is why the read never succeeded.
func RetryRead(ctx context.Context, what string, read func(context.Context) error) error {
	backoff := 50 * time.Millisecond
	var answer error // read's last error that was not ctx ending during the attempt
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, readAttempt)
		err := read(actx)
		cancel()
		switch {
		case err == nil:
			return nil
		case !TransientReadError(err):
			return fmt.Errorf("%s: %w", what, err)
		}
		if answer == nil || ctx.Err() == nil || !errors.Is(err, context.DeadlineExceeded) {
			answer = err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %w (still after %d attempts, when the deadline came: %v)", what, answer, attempt, context.Cause(ctx))
		case <-time.After(backoff): // the pause between attempts, not a wait for an outcome
		}
		backoff = min(2*backoff, time.Second)
	}
}

// listedError returns an error of l naming its topic and partition, or nil: an error no retry
// cures before any retriable one, so that a real failure is reported as such at once.
func listedError(l kadm.ListedOffsets) error {
	var errs []kadm.ListedOffset
	l.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			errs = append(errs, o)
		}
	})
	if len(errs) == 0 {
		return nil
	}
	slices.SortFunc(errs, func(a, b kadm.ListedOffset) int {
		if ta, tb := TransientReadError(a.Err), TransientReadError(b.Err); ta != tb {
			if ta {
				return 1
			}
			return -1
		}
		return cmp.Or(cmp.Compare(a.Topic, b.Topic), cmp.Compare(a.Partition, b.Partition))
	})
	return fmt.Errorf("%s partition %d: %w", errs[0].Topic, errs[0].Partition, errs[0].Err)
}

func listOffsets(ctx context.Context, what string, list func(context.Context, ...string) (kadm.ListedOffsets, error), topics []string) (kadm.ListedOffsets, error) {
	var out kadm.ListedOffsets
	err := RetryRead(ctx, fmt.Sprintf("%s of %v", what, topics), func(ctx context.Context) error {
		l, err := list(ctx, topics...)
		if err == nil {
			err = listedError(l)
		}
		if err == nil {
			out = l
		}
		return err
	})
	return out, err
}

// ListEndOffsets lists the end offsets of every partition of topics with adm, retrying
// transient errors (RetryRead) until ctx ends. An error names the topic and the partition.
func ListEndOffsets(ctx context.Context, adm *kadm.Client, topics ...string) (kadm.ListedOffsets, error) {
	return listOffsets(ctx, "end offsets", adm.ListEndOffsets, topics)
}

// ListCommittedOffsets lists the last stable offsets of every partition of topics with adm, as
// ListEndOffsets does.
func ListCommittedOffsets(ctx context.Context, adm *kadm.Client, topics ...string) (kadm.ListedOffsets, error) {
	return listOffsets(ctx, "last stable offsets", adm.ListCommittedOffsets, topics)
}
