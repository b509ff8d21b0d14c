package streams

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/twmb/franz-go/pkg/kgo"
)

// DefaultChunkWords is the bucket words per snapshot chunk: an encoded chunk stays under
// franz-go's default 1,000,012-byte batch limit and the broker's default 1 MiB record limit.
var DefaultChunkWords = schemas.MaxSnapshotChunkWords(960_000)

// Record size limits of the lane writer (LaneWriterConfig.MaxRecordBytes).
const (
	// DefaultLaneRecordBytes is MaxRecordBytes's default: franz-go's default ProducerBatchMaxBytes,
	// 1,000,012 bytes, which is below the broker's default message.max.bytes (1,048,588).
	DefaultLaneRecordBytes = 1_000_012
	// MinLaneRecordBytes is the smallest MaxRecordBytes: franz-go refuses a smaller batch limit,
	// and it leaves room for a few images and words next to a record's fixed part (about 250
	// bytes).
	MinLaneRecordBytes = 512
	// MaxLaneRecordBytes is the largest MaxRecordBytes: franz-go's ceiling on a batch (1 GiB).
	MaxLaneRecordBytes = 1 << 30
)

// ErrLaneRecordTooLarge means a delta has more images than one record of the writer's
// MaxRecordBytes carries (LaneWriter.MaxDeltaImages). WriteDeltas returns it, wrapped, before
// producing anything; the relay never hits it, since it splits its publications to that size.
var ErrLaneRecordTooLarge = errors.New("streams: delta larger than the lane record limit")

// ErrWriteUncertain is wrapped by a write that reached WriteTimeout while some of its records
// were still unacknowledged. Whether the broker took them is unknown; the writer's client may
// still hold them, so its stream must be abandoned (the relay starts a new incarnation on a new
// client) rather than written to again.
var ErrWriteUncertain = errors.New("streams: write outcome uncertain")

// LaneWriterConfig configures a LaneWriter. Start from DefaultLaneWriterConfig and name the
// lane topic: NewLaneWriter takes every field as it is.
type LaneWriterConfig struct {
	// LaneTopic is the lane topic. Required.
	LaneTopic string
	// IndexTopic is the compacted snapshot index; "" (the default) does not index snapshots.
	IndexTopic string
	// Lane is the physical lane = partition written, in [0, ckf.MaxLanes) (consumer §16). Default 0.
	Lane uint8
	// ChunkWords is the bucket words per snapshot chunk. Default DefaultChunkWords; >= 1.
	ChunkWords int
	// WriteTimeout bounds one write (one transaction when Transactional). Default 30 s; > 0.
	WriteTimeout time.Duration
	// Transactional says the client has a transactional id: every write is one transaction.
	// Default false.
	Transactional bool
	// MaxRecordBytes is the largest record batch the lane partition takes: the lane topic's
	// max.message.bytes, which the broker enforces per batch, and at most the client's
	// ProducerBatchMaxBytes, which franz-go enforces per batch before it sends (give the client
	// the same value, as the relay does: a larger client limit lets franz-go pack several small
	// records into a batch the broker refuses). Every record must fit in a batch of its own:
	// snapshot chunks shrink to fit (the words per chunk are the smaller of ChunkWords and what
	// fits, ChunkWords()) and a delta may carry at most MaxDeltaImages() images, larger ones
	// fail with ErrLaneRecordTooLarge. Default DefaultLaneRecordBytes (franz-go's default batch
	// limit); in [MinLaneRecordBytes, MaxLaneRecordBytes].
	MaxRecordBytes int
}

// DefaultLaneWriterConfig returns the lane writer's defaults: lane 0, no snapshot index,
// DefaultChunkWords words per chunk, 30 s per write, not transactional, records of at most
// DefaultLaneRecordBytes. LaneTopic is left empty: the caller names it.
func DefaultLaneWriterConfig() LaneWriterConfig {
	return LaneWriterConfig{ChunkWords: DefaultChunkWords, WriteTimeout: 30 * time.Second, MaxRecordBytes: DefaultLaneRecordBytes}
}

// validate checks every field in order and returns the first violation as a *ConfigError.
func (c LaneWriterConfig) validate() error {
	k := ConfigCheck{Config: "lane writer"}
	k.Named("LaneTopic", c.LaneTopic)
	if c.Lane >= ckf.MaxLanes {
		k.Fail("Lane", "must be below %d, got %d", ckf.MaxLanes, c.Lane)
	}
	if c.ChunkWords < 1 {
		k.Fail("ChunkWords", "must be >= 1, got %d", c.ChunkWords)
	}
	k.Positive("WriteTimeout", c.WriteTimeout)
	if c.MaxRecordBytes < MinLaneRecordBytes || c.MaxRecordBytes > MaxLaneRecordBytes {
		k.Fail("MaxRecordBytes", "must be in [%d, %d], got %d", MinLaneRecordBytes, MaxLaneRecordBytes, c.MaxRecordBytes)
	}
	return k.Result()
}

// LaneWriter writes one producer's lane records: snapshots (chunked, then indexed), deltas,
// heartbeats and drain markers, all to the lane's own partition and in call order. The relay
// writes the deltas it takes from its publisher (producer.Publisher.AppendDelta) with
// StreamDeltas and WriteDeltas; the integration tests' producers use it as the publisher's sink
// (it implements producer.DeltaSink). It is not safe for concurrent use: one producer, one
// writer.
//
// Delivery: each call returns only once the broker acknowledged every record it wrote (acks=all,
// idempotent producer; with Transactional, once the transaction committed). An error means
// delivery is uncertain: the publisher is fenced DeliveryUncertain (by the sink's error, or the
// relay's producer.Publisher.MarkDeliveryUncertain) and the relay recovers with a new snapshot.
type LaneWriter struct {
	cl       *kgo.Client
	codec    *schemas.Codec
	cfg      LaneWriterConfig
	identity schemas.ProducerIdentity
	key      []byte
	buf      []byte
	// maxImages and chunkWords are what one record of cfg.MaxRecordBytes carries (laneRecordBudget).
	maxImages, chunkWords int
	// open says a transaction was begun by StreamDeltas and not yet ended: the next write
	// produces into it and ends it. streamErr holds the first failure of a streamed record
	// (set by the client's promise goroutine), which makes that write abort.
	open      bool
	streamErr atomic.Pointer[error]
	// capacity, when set (ReportCapacity), is called for every record the writer encodes.
	capacity func() schemas.CapacityState
	// sources, when set (ReportSources), is called for every record the writer encodes.
	sources func() schemas.SourceHealth
	// asOf, when set (ReportAsOf), is called for every record the writer encodes.
	asOf func() time.Time
	// blockSize, when set (ReportBlockSize), is called for every record the writer encodes.
	blockSize func() uint32
}

// ReportCapacity makes the writer stamp every record it writes with the producer's capacity state
// (LaneRecord.capacity), read from fn as the record is encoded, so each record carries the state
// of the filter it was cut from. fn runs on the goroutine that calls the writer's methods, which
// for the relay is the goroutine that owns the filter. A nil fn stops the reports (records then
// carry null, as a writer of the previous schema revision does).
func (w *LaneWriter) ReportCapacity(fn func() schemas.CapacityState) { w.capacity = fn }

// ReportSources makes the writer stamp every record it writes with the health of the DC's
// sources (LaneRecord.sources), read from fn as the record is encoded, on the same goroutine as
// ReportCapacity's. A nil fn stops the reports.
func (w *LaneWriter) ReportSources(fn func() schemas.SourceHealth) { w.sources = fn }

// ReportAsOf makes the writer stamp every record it writes with the time up to which the lane
// reflects its DC's KV events (LaneRecord.as_of), read from fn as the record is encoded, on the
// same goroutine as ReportCapacity's. Deltas are encoded when they are produced (StreamDeltas,
// WriteDeltas), so fn must answer for every delta the call encodes: the relay's answers for the
// events published so far, and all of them go into the same transaction. A zero time, or a nil
// fn, writes null (as a writer of an earlier schema revision does).
func (w *LaneWriter) ReportAsOf(fn func() time.Time) { w.asOf = fn }

// ReportBlockSize makes the writer stamp every record it writes with the block size of the DC's
// engines (LaneRecord.block_size), read from fn as the record is encoded, on the same goroutine
// as ReportCapacity's. 0, or a nil fn, writes null (the size is not known).
func (w *LaneWriter) ReportBlockSize(fn func() uint32) { w.blockSize = fn }

// LaneWriterClientOpts are the options a LaneWriter's client needs in addition to the
// connection: records go to the partition the writer names, with acks from all in-sync replicas.
// A restarting broker answers UNKNOWN_TOPIC_OR_PARTITION until it has loaded its metadata;
// franz-go's default fails records after 4 such answers, which would fence the publisher over a
// routine rolling restart. The writer retries them instead, bounded by WriteTimeout.
func LaneWriterClientOpts() []kgo.Opt {
	return []kgo.Opt{kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.UnknownTopicRetries(-1)}
}

// NewLaneWriter returns a writer for identity's stream on cfg.Lane. cl must carry
// LaneWriterClientOpts (and kgo.TransactionalID when cfg.Transactional). cfg is taken as it is;
// an invalid field is a *ConfigError.
func NewLaneWriter(cl *kgo.Client, codec *schemas.Codec, identity ckf.ProducerIdentity, cfg LaneWriterConfig) (*LaneWriter, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	w := &LaneWriter{cl: cl, codec: codec, cfg: cfg, identity: WireIdentity(identity),
		key: []byte(identity.Pool.String())}
	b, err := w.recordBudget()
	if err != nil {
		return nil, err
	}
	w.maxImages, w.chunkWords = b.maxImages, min(cfg.ChunkWords, b.maxWords)
	return w, nil
}

// MaxDeltaImages is the most images one delta record carries within MaxRecordBytes (at least
// 1). A publication with more is split into several deltas by the relay.
func (w *LaneWriter) MaxDeltaImages() int { return w.maxImages }

// ChunkWords is the bucket words per snapshot chunk the writer uses: the configured ChunkWords,
// or fewer when a chunk of that many would not fit in MaxRecordBytes.
func (w *LaneWriter) ChunkWords() int { return w.chunkWords }

// Identity returns the producer identity the writer stamps on every record.
func (w *LaneWriter) Identity() schemas.ProducerIdentity { return w.identity }

// SnapshotPosition says where a snapshot landed on the lane partition.
type SnapshotPosition struct {
	FirstOffset, LastOffset int64
	Chunks                  int
}

func (w *LaneWriter) record(lr schemas.LaneRecord) (*kgo.Record, error) {
	lr.Identity = w.identity
	if w.capacity != nil {
		lr.Capacity = schemas.Some(w.capacity())
	}
	if w.sources != nil {
		lr.Sources = schemas.Some(w.sources())
	}
	if w.blockSize != nil {
		lr.BlockSize = w.blockSize()
	}
	if w.asOf != nil {
		lr.AsOf = w.asOf()
	}
	b, err := w.codec.EncodeLaneRecord(lr)
	if err != nil {
		return nil, err
	}
	return &kgo.Record{Topic: w.cfg.LaneTopic, Partition: int32(w.cfg.Lane), Key: w.key, Value: b}, nil
}

// StreamDeltas produces ds into the writer's open transaction, beginning one when none is open,
// and returns without waiting for the broker. A transactional writer only: the deltas become
// visible (read_committed) when the next write, which waits for them and ends the transaction,
// commits; if any of them fails, that write aborts the whole transaction and reports the
// failure. Streaming lets the broker take a transaction's deltas while the caller still
// computes the rest, so a commit waits only for the tail instead of the whole transaction.
// An error here (a delta too large for one record, an unencodable delta, a transaction that
// cannot begin) means ds was not produced; the caller leaves them to the next write, which
// meets the same error.
func (w *LaneWriter) StreamDeltas(ds []ckf.Delta) error {
	if !w.cfg.Transactional {
		return errors.New("streams: StreamDeltas needs a transactional writer")
	}
	rs := make([]*kgo.Record, 0, len(ds))
	for i := range ds {
		rec, err := w.deltaRecord(&ds[i])
		if err != nil {
			return err
		}
		rs = append(rs, rec)
	}
	if !w.open {
		if err := w.cl.BeginTransaction(); err != nil {
			return fmt.Errorf("streams: begin transaction: %w", err)
		}
		w.open = true
		w.streamErr.Store(nil)
	}
	for _, rec := range rs {
		w.cl.Produce(context.Background(), rec, func(_ *kgo.Record, err error) {
			if err != nil {
				err = fmt.Errorf("streams: produce to %s[%d]: %w", w.cfg.LaneTopic, w.cfg.Lane, err)
				w.streamErr.CompareAndSwap(nil, &err)
			}
		})
	}
	return nil
}

// write produces rs (and, when a function is given, what it adds once rs' offsets are known) as
// one unit: one transaction when the writer is transactional. A transaction StreamDeltas opened
// is this write's: its streamed records are flushed and committed (or aborted) with rs.
func (w *LaneWriter) write(ctx context.Context, rs []*kgo.Record, after func([]*kgo.Record) ([]*kgo.Record, error)) (err error) {
	ctx, cancel := context.WithTimeout(ctx, w.cfg.WriteTimeout)
	defer cancel()
	if w.cfg.Transactional {
		streamed := w.open
		if !streamed {
			if err := w.cl.BeginTransaction(); err != nil {
				return fmt.Errorf("streams: begin transaction: %w", err)
			}
		}
		w.open = false
		defer func() { err = w.endTransaction(ctx, streamed, err) }()
	}
	if err := w.produceWithin(ctx, rs); err != nil {
		return fmt.Errorf("streams: produce to %s[%d]: %w", w.cfg.LaneTopic, w.cfg.Lane, err)
	}
	if after != nil {
		more, err := after(rs)
		if err != nil {
			return err
		}
		if err := w.produceWithin(ctx, more); err != nil {
			return fmt.Errorf("streams: produce %s: %w", more[0].Topic, err)
		}
	}
	return nil
}

// produceWithin produces rs and waits for every acknowledgement, or for ctx, whichever comes
// first. The client (franz-go v1.22.3) honours ctx only for records it has not sent: an
// idempotent producer cannot fail a record whose request the broker took without answering, so
// ProduceSync alone would wait out the client's retries against a leader that holds the request. Past ctx the write is
// ErrWriteUncertain; the produce keeps running on its goroutine until the client answers or is
// closed (the caller abandons it), and its results are dropped.
func (w *LaneWriter) produceWithin(ctx context.Context, rs []*kgo.Record) error {
	done := make(chan error, 1)
	go func() { done <- w.cl.ProduceSync(ctx, rs...).FirstErr() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		select {
		case err := <-done: // answered as the deadline passed: the answer stands
			return err
		default:
		}
		return fmt.Errorf("%w: %d records unacknowledged when the write's context ended (write timeout %s): %w", ErrWriteUncertain, len(rs), w.cfg.WriteTimeout, ctx.Err())
	}
}

// endTransaction ends the writer's open transaction: it commits when err is nil and aborts
// otherwise, and returns the write's outcome. After a streamed transaction it first waits for
// every streamed record (EndTransaction does not flush) and aborts if one failed.
func (w *LaneWriter) endTransaction(ctx context.Context, streamed bool, err error) error {
	if streamed && err == nil {
		if ferr := w.cl.Flush(ctx); ferr != nil {
			err = fmt.Errorf("streams: flush streamed deltas: %w", ferr)
		} else if serr := w.streamErr.Load(); serr != nil {
			err = *serr
		}
	}
	commit := kgo.TryCommit
	if err != nil {
		commit = kgo.TryAbort
	}
	if eerr := w.cl.EndTransaction(ctx, commit); eerr != nil && err == nil {
		err = fmt.Errorf("streams: commit transaction: %w", eerr)
	}
	return err
}

// CommitStreamedAsync commits the transaction StreamDeltas opened on a goroutine of its own and
// returns at once: the goroutine waits for every streamed record, commits (or aborts when one of
// them failed) and sends the outcome, nil or the error, on the returned channel (buffered: the
// goroutine never blocks on it). ok is false, and nothing starts, when no streamed transaction is
// open. Until the outcome is received the writer must not be used at all: the client is in the
// middle of ending the transaction. The commit is bounded by ctx and WriteTimeout. This lets the
// caller compute the next transaction's records while the broker commits the previous one; an
// error means the same as a failed WriteDeltas (delivery of the transaction is uncertain).
func (w *LaneWriter) CommitStreamedAsync(ctx context.Context) (done <-chan error, ok bool) {
	if !w.cfg.Transactional || !w.open {
		return nil, false
	}
	w.open = false
	ch := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(ctx, w.cfg.WriteTimeout)
		defer cancel()
		ch <- w.endTransaction(ctx, true, nil)
	}()
	return ch, true
}

// WriteSnapshot writes s as chunks of ChunkWords() words, then (when an index topic is set) the
// lane's snapshot-index entry pointing at its first chunk.
func (w *LaneWriter) WriteSnapshot(ctx context.Context, s *ckf.Snapshot) (SnapshotPosition, error) {
	total := len(s.Buckets)
	if total == 0 {
		return SnapshotPosition{}, errors.New("streams: empty snapshot")
	}
	count := (total + w.chunkWords - 1) / w.chunkWords
	rs := make([]*kgo.Record, 0, count)
	for i := 0; i < count; i++ {
		lo := i * w.chunkWords
		hi := min(lo+w.chunkWords, total)
		rec, err := w.record(schemas.LaneRecord{Kind: schemas.LaneSnapshotChunk, Snapshot: schemas.SnapshotChunk{
			Sequence: s.Sequence, ChunkIndex: uint32(i), ChunkCount: uint32(count), FirstBucket: uint64(lo),
			TotalBuckets: uint64(total), Words: schemas.AppendU64s(nil, s.Buckets[lo:hi]),
		}})
		if err != nil {
			return SnapshotPosition{}, err
		}
		rs = append(rs, rec)
	}
	var pos SnapshotPosition
	index := func(rs []*kgo.Record) ([]*kgo.Record, error) {
		pos = SnapshotPosition{FirstOffset: rs[0].Offset, LastOffset: rs[len(rs)-1].Offset, Chunks: len(rs)}
		if w.cfg.IndexTopic == "" {
			return nil, nil
		}
		b, err := w.codec.EncodeSnapshotIndexEntry(schemas.SnapshotIndexEntry{
			Lane: w.cfg.Lane, Identity: w.identity, Sequence: s.Sequence, FirstOffset: pos.FirstOffset,
			LastOffset: pos.LastOffset, ChunkCount: uint32(pos.Chunks), WriteTime: time.Now(),
		})
		if err != nil {
			return nil, err
		}
		return []*kgo.Record{{Topic: w.cfg.IndexTopic, Partition: 0, Key: laneKey(w.cfg.Lane), Value: b}}, nil
	}
	if err := w.write(ctx, rs, index); err != nil {
		return SnapshotPosition{}, err
	}
	return pos, nil
}

// WriteDeltas writes ds in order (one transaction when transactional). A delta of more than
// MaxDeltaImages() images is refused before anything is produced (ErrLaneRecordTooLarge).
// Many deltas in one call are fine: franz-go packs them into batches of at most the client's
// batch limit, several batches per transaction.
func (w *LaneWriter) WriteDeltas(ctx context.Context, ds []ckf.Delta) error {
	return w.WriteDeltasWith(ctx, ds, nil, nil)
}

// WriteDeltasWith writes ds in order, then extra (records of other partitions, the relay's
// checkpoint chunks), then what after adds once their offsets are known: one unit, one
// transaction when transactional.
func (w *LaneWriter) WriteDeltasWith(ctx context.Context, ds []ckf.Delta, extra []*kgo.Record, after func([]*kgo.Record) ([]*kgo.Record, error)) error {
	rs := make([]*kgo.Record, 0, len(ds)+len(extra))
	for i := range ds {
		rec, err := w.deltaRecord(&ds[i])
		if err != nil {
			return err
		}
		rs = append(rs, rec)
	}
	return w.write(ctx, append(rs, extra...), after)
}

// deltaRecord encodes one delta as one lane record; ErrLaneRecordTooLarge when its images do
// not fit in MaxRecordBytes.
func (w *LaneWriter) deltaRecord(d *ckf.Delta) (*kgo.Record, error) {
	if len(d.Images) > w.maxImages {
		return nil, fmt.Errorf("%w: delta %d has %d images, one record of %d bytes carries %d",
			ErrLaneRecordTooLarge, d.Sequence, len(d.Images), w.cfg.MaxRecordBytes, w.maxImages)
	}
	w.buf = w.buf[:0]
	for _, im := range d.Images {
		w.buf = schemas.AppendImage(w.buf, im.Bucket, im.Value)
	}
	return w.record(schemas.LaneRecord{Kind: schemas.LaneDelta, Delta: schemas.Delta{
		BaseSequence: d.BaseSequence, Sequence: d.Sequence, Images: append(schemas.PackedImages(nil), w.buf...),
	}})
}

// Enqueue implements producer.DeltaSink: the delta is written and acknowledged before it returns.
func (w *LaneWriter) Enqueue(d ckf.Delta) error {
	return w.WriteDeltas(context.Background(), []ckf.Delta{d})
}

// WriteHeartbeat tells consumers the producer is alive at lastSequence.
func (w *LaneWriter) WriteHeartbeat(ctx context.Context, lastSequence uint64) error {
	rec, err := w.record(schemas.LaneRecord{Kind: schemas.LaneHeartbeat, Heartbeat: schemas.Heartbeat{
		LastSequence: lastSequence, ProducerTime: time.Now()}})
	if err != nil {
		return err
	}
	return w.write(ctx, []*kgo.Record{rec}, nil)
}

// WriteDrainMarker ends a graceful stop: consumers acknowledge it only if they applied exactly
// expectedSequence.
func (w *LaneWriter) WriteDrainMarker(ctx context.Context, expectedSequence uint64) error {
	rec, err := w.record(schemas.LaneRecord{Kind: schemas.LaneDrainMarker, Drain: schemas.DrainMarker{ExpectedSequence: expectedSequence}})
	if err != nil {
		return err
	}
	return w.write(ctx, []*kgo.Record{rec}, nil)
}
