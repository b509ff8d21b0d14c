package query

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/twmb/franz-go/pkg/kgo"
)

type outKind uint8

// maxOutputsPerRequest bounds the outputs of one request within a batch (see queryBatch.reset).
const maxOutputsPerRequest = 4

const (
	outReply outKind = iota + 1
	outDeadLetter
)

// outRecord is one output of a batch. rec is what franz-go holds while the record is in
// flight; outs never grows past its capacity during a batch, so &rec stays valid and unique.
type outRecord struct {
	rec          kgo.Record
	src          *kgo.Record
	kind         outKind
	status       schemas.QueryStatus
	errorMessage string // the reply's error message, for the reply that replaces it if undeliverable
	partition    int32  // requested partition, -1 = by key
	routed       bool   // destination chosen by the request
	deadLettered bool   // the request has its own dead letter in this batch
	failed       bool
	requestTime  time.Time // the request's request_time, zero if absent
}

type ackFailure struct {
	rec *kgo.Record
	err error
}

// queryBatch is the run goroutine's per-batch state, reused across batches. The promise
// callback (ack) runs on franz-go's goroutine; it touches only wg, mu and failures.
type queryBatch struct {
	outs  []outRecord
	arena []byte // encoded values and keys of the batch; reused once every output is settled
	wg    sync.WaitGroup
	n     atomic.Int64 // promises not yet called

	mu       sync.Mutex
	failures []ackFailure
}

// reset prepares for a batch of requests records: each request causes at most four outputs (a
// reply, a dead letter, and two INVALID_REQUEST replies at the fallback addresses when its own
// reply destination fails; see processBatch), so outs gets that capacity up front and never
// reallocates.
func (b *queryBatch) reset(requests int) {
	if cap(b.outs) < maxOutputsPerRequest*requests {
		b.outs = make([]outRecord, 0, maxOutputsPerRequest*requests)
	}
	clear(b.outs[:cap(b.outs)])
	b.outs = b.outs[:0]
	b.arena = b.arena[:0]
	b.mu.Lock()
	b.failures = b.failures[:0]
	b.mu.Unlock()
}

func (b *queryBatch) add() *outRecord {
	if len(b.outs) == cap(b.outs) {
		// Unreachable by construction (see reset); growing would move records in flight.
		panic("streams: query batch output capacity exceeded")
	}
	b.outs = b.outs[:len(b.outs)+1]
	b.n.Add(1)
	return &b.outs[len(b.outs)-1]
}

// ack is the promise of every output.
func (b *queryBatch) ack(r *kgo.Record, err error) {
	if err != nil {
		b.mu.Lock()
		b.failures = append(b.failures, ackFailure{rec: r, err: err})
		b.mu.Unlock()
	}
	b.n.Add(-1)
	b.wg.Done()
}

func (b *queryBatch) pending() int { return int(b.n.Load()) }

// wait waits for every promise or ctx's end.
func (b *queryBatch) wait(ctx context.Context) error {
	if b.n.Load() == 0 {
		return nil
	}
	done := make(chan struct{})
	go func() { b.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// takeFailures returns the failures so far and marks their outputs failed.
func (b *queryBatch) takeFailures() []ackFailure {
	b.mu.Lock()
	fs := append([]ackFailure(nil), b.failures...)
	b.failures = b.failures[:0]
	b.mu.Unlock()
	for _, f := range fs {
		if o := b.find(f.rec); o != nil {
			o.failed = true
		}
	}
	return fs
}

func (b *queryBatch) find(r *kgo.Record) *outRecord {
	for i := range b.outs {
		if &b.outs[i].rec == r {
			return &b.outs[i]
		}
	}
	return nil
}

// replyPartitioner partitions replies: a record whose Partition is set (>= 0) goes to that
// partition (franz-go fails the record if the topic has no such partition); any other record
// is partitioned by key exactly as Kafka's default partitioner does (murmur2), so a client can
// compute where its reply lands.
type replyPartitioner struct{}

func (replyPartitioner) ForTopic(topic string) kgo.TopicPartitioner {
	return &replyTopicPartitioner{byKey: kgo.StickyKeyPartitioner(nil).ForTopic(topic)}
}

type replyTopicPartitioner struct{ byKey kgo.TopicPartitioner }

func (*replyTopicPartitioner) RequiresConsistency(*kgo.Record) bool { return true }

func (p *replyTopicPartitioner) Partition(r *kgo.Record, n int) int {
	if r.Partition >= 0 {
		return int(r.Partition)
	}
	return p.byKey.Partition(r, n)
}
