package workers

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/ckf/producer"
	"github.com/ckf-stream/ckf-stream/ckf/workers"
	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/ckf-stream/ckf-stream/streams"
	"github.com/ckf-stream/ckf-stream/streams/internal/asof"
	"github.com/ckf-stream/ckf-stream/streams/relay"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/uber-go/tally/v4"
	"github.com/zeebo/xxh3"
	"go.uber.org/zap"
)

// ErrNotReady is Ready's error while the replica has not caught up with the KV topic's end
// offsets listed at its start.
var ErrNotReady = errors.New("workers: not caught up with the KV topic yet")

// Params are New's inputs.
type Params struct {
	Config Config
	Codec  *schemas.Codec
	// ClientOptsFor gives each Kafka client's options by role ("workers-input",
	// "workers-admin", "workers-outputs", "workers-checkpoints").
	ClientOptsFor streams.ClientOptsFunc
	Metrics       tally.Scope
	Log           *zap.Logger
}

// Replica is one replica of a DC's worker-level read model (workers.md): it reads every
// partition of the DC's KV-events topic by direct assignment, applies each event to a
// workers.Shared that queries read concurrently, and checkpoints the index's rows with the
// offsets it reflects. Build it with New, run it with Run; Match, Ready and Status may be
// called from any goroutine at any time.
type Replica struct {
	cfg   Config
	codec *schemas.Codec
	opts  streams.ClientOpts
	log   *zap.Logger
	l     *ledger
	now   func() time.Time

	mu     sync.RWMutex
	shared *workers.Shared // replaced once, by the restore, before ready

	sizes blockSizes // the DC's block sizes by source (blocksize.go)
	// degradedSources is how many sources of the DC lost engine history (loop.degraded): while
	// some have, answers are incomplete (workers §10 in docs/spec/workers.md).
	degradedSources atomic.Int64
	watch           idleWatch // as_of for queries (asof.go)
	// beforeApply, when set (by this package's tests, before Run), is called with each KV record
	// before it is applied: a test holds the loop there to make the replica lag.
	beforeApply func(*kgo.Record)

	ready     chan struct{}
	readyOnce sync.Once
	applied   atomic.Uint64
	restoreAt atomic.Int64 // the checkpoint's written time (Unix ms), 0 when none was restored
	// readyAt is applied when the replica became ready; ckptApplied the Applied count of the
	// newest checkpoint this replica wrote (the manifest's, restored records included).
	readyAt, ckptApplied atomic.Uint64
}

// New checks the configuration and builds a replica; nothing connects until Run. Errors are
// *streams.ConfigError.
func New(p Params) (*Replica, error) {
	if err := p.Config.validate(); err != nil {
		return nil, err
	}
	if p.Codec == nil {
		return nil, &streams.ConfigError{Config: "workers", Field: "Codec", Reason: "must be set"}
	}
	log := p.Log
	if log == nil {
		log = zap.NewNop()
	}
	return &Replica{cfg: p.Config.derive(), codec: p.Codec, opts: streams.ClientOpts{PerRole: p.ClientOptsFor},
		log: log, l: newLedger(p.Metrics), now: time.Now, shared: workers.NewShared(workers.New()), ready: make(chan struct{})}, nil
}

// Config returns the configuration with the derived names filled in.
func (r *Replica) Config() Config { return r.cfg }

// DC returns the replica's DC.
func (r *Replica) DC() ckf.DcID { return r.cfg.DC }

// Ready returns nil once the replica has read the KV topic up to the end offsets listed at its
// start (after restoring its checkpoint), ErrNotReady before.
func (r *Replica) Ready() error {
	select {
	case <-r.ready:
		return nil
	default:
		return ErrNotReady
	}
}

// WaitReady returns a channel closed once the replica is ready.
func (r *Replica) WaitReady() <-chan struct{} { return r.ready }

// Age is how far a replica has read: what every answer carries.
type Age struct {
	// AsOf is the time up to which the replica reflects its DC's KV events (workers §10 in
	// docs/spec/workers.md: every event appended before it is applied, an idle topic read to its
	// end counting as reflected up to now); zero while the replica knows no such time.
	AsOf time.Time
	// NewestEventMs is the timestamp (Unix ms) of the newest KV record applied; 0 when none.
	NewestEventMs int64
	// LagRecords is how many KV records lie between the replica's positions and the topic's
	// last stable offsets, as last observed (fetch responses, and a listing at every lag
	// commit).
	LagRecords int64
}

// AgeMs returns the DC's age at now: the milliseconds from AsOf to now, never negative (a
// clock behind AsOf reads 0); -1 when AsOf is unknown.
func (a Age) AgeMs(now time.Time) int64 {
	if a.AsOf.IsZero() {
		return -1
	}
	return max(now.UnixMicro()-a.AsOf.UnixMicro(), 0) / 1000
}

// Status is the replica's state for the status route and tests.
type Status struct {
	DC      ckf.DcID
	KVTopic string
	Ready   bool
	// CaughtUpNow says the replica has read every KV partition to its end and waits for records:
	// it reflects the DC up to this moment (Age.AsOf is now).
	CaughtUpNow bool
	Age         Age
	Applied     uint64 // KV records applied by this process (restored ones excluded)
	Sources     int
	Rows        int
	Restored    bool // started from a checkpoint
	// ReadyAfter is Applied at the moment the replica became ready: the records between its
	// start positions and the end offsets listed at start (plus any later record of the same
	// poll).
	ReadyAfter uint64
	// CheckpointApplied is the manifest's Applied of the newest checkpoint this replica wrote:
	// every KV record it reflects, restored ones included.
	CheckpointApplied uint64
	// Counters of the ledger.
	Rejected, Undecodable, UnknownRemovals, UnknownSources, DeadLetters  uint64
	Checkpoints, CheckpointFailures, CheckpointsRejected, CheckpointGaps uint64
	// DegradedSources counts the sources of the DC whose engine history was lost (a clear
	// marked schemas.HeaderLostHistory, until a clear without the mark): while it is above 0,
	// answers may be short and say so (state incomplete).
	DegradedSources int
	// BlockSizes are the distinct block sizes the DC's sources report, ascending (empty: none
	// known); BlockSizesBySource names each size's sources (CheckBlockSize's rule).
	BlockSizes         []uint32
	BlockSizesBySource string
}

// Status returns the current status.
func (r *Replica) Status() Status {
	l := r.l
	var rej uint64
	for i := range l.rejected {
		rej += l.rejected[i].load()
	}
	sizes, bySource := r.BlockSizes()
	return Status{DC: r.cfg.DC, KVTopic: r.cfg.Topics.KVEvents, Ready: r.Ready() == nil, CaughtUpNow: r.watch.waitingSince.Load() != 0,
		Age: r.Age(), Applied: r.applied.Load(), DegradedSources: int(r.degradedSources.Load()),
		BlockSizes: sizes, BlockSizesBySource: bySource,
		Sources: int(l.sources.load()), Rows: int(l.rows.load()), Restored: l.restored.load() == 1,
		ReadyAfter: r.readyAt.Load(), CheckpointApplied: r.ckptApplied.Load(),
		Rejected: rej, Undecodable: l.undecodable.load(), UnknownRemovals: l.unknownRemovals.load(), UnknownSources: l.unknownSources.load(),
		DeadLetters: l.deadLetters.load(), Checkpoints: l.checkpoints.load(), CheckpointFailures: l.checkpointFailures.load(),
		CheckpointsRejected: l.checkpointsRejected.load(), CheckpointGaps: l.checkpointGaps.load()}
}

// ageReportInterval is how often ckf_workers_age_seconds is set.
const ageReportInterval = time.Second

// reportAge sets ckf_workers_age_seconds every interval until ctx ends: the DC's age as an answer
// would state it at that moment (Age.AgeMs). It runs on a goroutine of its own, reading what the
// loop publishes (idleWatch), so that a loop held up in an apply or a fetch does not freeze the
// gauge: the age it reports keeps growing while the loop is held. Not set while the as_of is
// unknown (before the replica has read its topic to the end once; ckf_workers_ready says so).
func (r *Replica) reportAge(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if ms := r.Age().AgeMs(r.now()); ms >= 0 {
			r.l.ageSeconds.Update(float64(ms) / 1000)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Age returns how far the replica has read.
func (r *Replica) Age() Age {
	return Age{AsOf: r.watch.at(r.now()), NewestEventMs: r.l.newestEventMs.load(), LagRecords: r.l.lagRecords.load()}
}

// DegradedSources returns how many sources of the DC lost engine history (Status.DegradedSources).
func (r *Replica) DegradedSources() int { return int(r.degradedSources.Load()) }

// Match answers query (canonical sequence hashes, ckf.SequenceHashes of the prompt's local block
// hashes) into res under opt, and returns the replica's age as of the answer.
func (r *Replica) Match(query []ckf.CanonicalHash, opt workers.Options, res *workers.Result) Age {
	return r.answer(res, func(sh *workers.Shared) { sh.Match(query, opt, res) })
}

// MatchLocal is Match on the prompt's local block hashes (workers.Index.MatchLocal: the chain is
// read from the index's memo of stored chains where it can, and hashed where it cannot); *chain
// receives the canonical chain unless chain is nil.
func (r *Replica) MatchLocal(local []ckf.LocalBlockHash, opt workers.Options, res *workers.Result, chain *[]ckf.CanonicalHash) Age {
	return r.answer(res, func(sh *workers.Shared) { sh.MatchLocal(local, opt, res, chain) })
}

// answer runs query on the index the replica serves now, into res, and returns the replica's
// age read before it (the index searched is at least as new), timing and counting it
// (ckf_workers_match_duration_seconds, ckf_workers_match_blocks_total and _followed_total).
func (r *Replica) answer(res *workers.Result, query func(*workers.Shared)) Age {
	start := time.Now()
	r.mu.RLock()
	sh := r.shared
	r.mu.RUnlock()
	age := r.Age()
	query(sh)
	r.l.matchSeconds.RecordDuration(time.Since(start))
	r.l.matched(res)
	return age
}

// loop is Run's state, owned by Run's goroutine.
type loop struct {
	r         *Replica
	sh        *workers.Shared
	eol       *streams.EndOfLog
	pos       map[int32]int64 // next offset to apply, per KV partition
	lso       map[int32]int64 // last stable offset as last observed
	out       *streams.Outputs
	ckptPart  int32
	staleTo   int    // chunk count of the newest checkpoint known (tombstones for a smaller one)
	applied   uint64 // KV records applied, restored count included (the manifests' Applied)
	sinceCkpt bool   // something was applied since the last checkpoint
	lastCkpt  time.Time
	writing   chan ckptResult // non-nil while a checkpoint is being written
	lag       streams.LagCommitter
	kv        schemas.KvEvent      // the record being applied, decoded into reused slices
	ev        producer.RouterEvent // kv converted, into reused slices (the index keeps none of them)
	// asOf is the as_of bookkeeping (streams/internal/asof, asof.go). arrival is a lower bound
	// of the arrival of the fetches of the poll being applied (zero: unknown); drainedStart the start of the latest
	// poll that took every buffered record (the fetches buffered since were requested after
	// it); syncAt, when not zero, the time up to which the replica is caught up once the poll
	// being applied is.
	asOf                          *asof.Book
	arrival, drainedStart, syncAt time.Time
	// degraded holds the sources whose engine history was lost (noteClear); checkpointed.
	degraded map[ckf.SourceKey]struct{}
}

type ckptResult struct {
	m     checkpointManifest
	bytes int
	err   error
}

// Run restores the newest usable checkpoint, reads the KV topic from its offsets (from the log
// start without one), becomes ready at the end offsets listed at start, and then follows the
// topic until ctx ends (nil) or a client cannot be built (an error). Fetch errors are counted and
// logged; franz-go retries them.
func (r *Replica) Run(ctx context.Context) error {
	cfg := r.cfg
	admCl, err := kgo.NewClient(r.opts.ForRole("workers-admin")...)
	if err != nil {
		return fmt.Errorf("workers: admin client: %w", err)
	}
	defer admCl.Close()
	adm := kadm.NewClient(admCl)
	lp := &loop{r: r, lso: map[int32]int64{}, lag: streams.LagCommitter{Group: cfg.LagGroup, Topic: cfg.Topics.KVEvents,
		Interval: cfg.LagCommitInterval, Timeout: 10 * time.Second}}
	if cfg.LagCommitInterval == 0 {
		lp.lag.Group = ""
	}
	if cfg.Topics.DeadLetter != "" {
		outCl, err := kgo.NewClient(r.opts.ForRole("workers-outputs", kgo.ProducerLinger(5*time.Millisecond))...)
		if err != nil {
			return fmt.Errorf("workers: output client: %w", err)
		}
		defer outCl.Close()
		lp.out = streams.NewOutputs(outCl, r.codec, 0, streams.OutputTopics{DeadLetter: cfg.Topics.DeadLetter}, r.log)
	}
	start := time.Now()
	if err := lp.restore(ctx, adm); err != nil {
		return err
	}
	assign := map[int32]kgo.Offset{}
	for _, p := range lp.eol.Partitions() {
		assign[p] = kgo.NewOffset().At(lp.pos[p])
	}
	inCl, err := kgo.NewClient(r.opts.ForRole("workers-input", append([]kgo.Opt{
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{cfg.Topics.KVEvents: assign}),
		// Without fetch sessions every fetch answers every partition of its broker with its last
		// stable offset, so an idle partition keeps being seen at its end (as_of, asof.go).
		kgo.DisableFetchSessions(), kgo.WithHooks(&r.watch)}, streams.EndOfLogConsumerOpts()...)...)...)
	if err != nil {
		return fmt.Errorf("workers: input client: %w", err)
	}
	defer inCl.Close()
	r.l.restoreSeconds.RecordDuration(time.Since(start))
	lp.checkReady(start)
	defer lp.stop(inCl)
	ageCtx, stopAge := context.WithCancel(ctx)
	defer stopAge()
	go r.reportAge(ageCtx, ageReportInterval)
	for {
		pctx, cancel := lp.pollContext(ctx)
		fs := lp.poll(pctx, inCl)
		cancel()
		if ctx.Err() != nil {
			return nil
		}
		lp.onFetches(fs)
		lp.checkReady(start)
		lp.maybeCheckpoint(ctx)
		lp.maybeCommitLag(inCl)
	}
}

// restore lists the KV topic's ends, restores the newest usable checkpoint (or none) and builds
// the end-of-log target from the resulting positions.
func (lp *loop) restore(ctx context.Context, adm *kadm.Client) error {
	r, cfg := lp.r, lp.r.cfg
	listedAt := r.now() // before the listing: a partition at its listed end is reflected up to it
	eol, err := streams.ListingWait{Log: r.log}.ListEndOfLog(ctx, adm, cfg.Topics.KVEvents)
	if err != nil {
		return fmt.Errorf("workers: %w", err)
	}
	var got *restored
	if cfg.Topics.Checkpoints != "" {
		got, err = lp.readCheckpoint(ctx, adm, eol)
		if err != nil {
			return err
		}
	}
	ix := workers.New()
	starts, ends := map[int32]int64{}, map[int32]int64{}
	if got != nil {
		if err := got.payload.restoreInto(ix); err != nil {
			// The payload decoded and checked out, but the index refuses it: the rules changed
			// under it. Loudly start over from the log start.
			r.log.Error("checkpoint does not restore into the index; replaying the KV topic from its log start",
				zap.Uint64("generation", got.m.Generation), zap.Error(err))
			r.l.checkpointsRejected.add(1)
			got, ix = nil, workers.New()
		}
	}
	lp.pos = map[int32]int64{}
	for _, p := range eol.Partitions() {
		end, _ := eol.End(p)
		ends[p] = end
		pos := eol.Start(p)
		if got != nil {
			if off, ok := got.m.Offsets[p]; ok {
				if off < pos {
					r.l.checkpointGaps.add(1)
					r.log.Error("KV events after the checkpoint were deleted by retention: reading the partition from its log start (answers miss what those events stored)",
						zap.Int32("partition", p), zap.Int64("checkpoint_offset", off), zap.Int64("log_start", pos))
				} else {
					pos = off
				}
			}
		}
		lp.pos[p], starts[p] = pos, pos
	}
	lp.eol = streams.NewEndOfLog(cfg.Topics.KVEvents, starts, ends)
	lp.asOf = asof.NewBook(listedAt, starts, ends)
	r.watch.publish(lp.asOf.AsOf())
	if got != nil {
		lp.staleTo = got.m.Chunks
		lp.applied = got.m.Applied
		r.l.restored.set(1)
		r.l.newestEventMs.set(got.m.NewestEventMs)
		for _, d := range got.m.Degraded {
			if lp.degraded == nil {
				lp.degraded = map[ckf.SourceKey]struct{}{}
			}
			lp.degraded[ckf.SourceKey{Worker: ckf.WorkerID(d[0]), Rank: ckf.DpRank(d[1])}] = struct{}{}
		}
		lp.setDegraded()
		r.restoreAt.Store(got.m.WrittenMs)
		r.log.Info("restored from checkpoint", zap.Uint64("generation", got.m.Generation), zap.Int("rows", got.payload.rows),
			zap.Int("sources", got.payload.sources), zap.Int64("written_ms", got.m.WrittenMs))
	}
	lp.sh = workers.NewShared(ix)
	r.l.lastTel = lp.sh.Telemetry()
	r.mu.Lock()
	r.shared = lp.sh
	r.mu.Unlock()
	lp.setSize()
	lp.lastCkpt = r.now()
	return nil
}

// readCheckpoint finds the checkpoint partition and the newest usable checkpoint; one whose
// offsets lie beyond the KV topic's end (the topic was recreated) is rejected too.
func (lp *loop) readCheckpoint(ctx context.Context, adm *kadm.Client, eol *streams.EndOfLog) (*restored, error) {
	r, cfg := lp.r, lp.r.cfg
	var n int
	err := streams.ListingWait{Log: r.log}.Retry(ctx, "partitions of "+cfg.Topics.Checkpoints, func() error {
		td, err := adm.ListTopics(ctx, cfg.Topics.Checkpoints)
		if err != nil {
			return err
		}
		d := td[cfg.Topics.Checkpoints]
		if d.Err != nil {
			return d.Err
		}
		n = len(d.Partitions)
		return nil
	})
	if err != nil || n == 0 {
		return nil, fmt.Errorf("workers: checkpoint topic %s: %d partitions, %w", cfg.Topics.Checkpoints, n, err)
	}
	lp.ckptPart = checkpointPartition(cfg.DC, n)
	cr := &checkpointReader{adm: adm, wait: streams.ListingWait{Log: r.log}, opts: r.opts.ForRole("workers-checkpoints"), topic: cfg.Topics.Checkpoints,
		partition: lp.ckptPart, dc: cfg.DC, kvTopic: cfg.Topics.KVEvents}
	rejected := 0
	reject := func(rec *kgo.Record, err error) {
		rejected++
		r.l.checkpointsRejected.add(1)
		r.log.Error("unusable checkpoint: trying an older one, else replaying the KV topic from its log start", zap.Int64("offset", rec.Offset), zap.Error(err))
		if lp.out != nil {
			lp.out.DeadLetter(rec, schemas.DeadLetterMalformed, err.Error(), "workers-checkpoint")
			r.l.deadLetters.add(1)
		}
	}
	got, err := cr.latest(ctx, reject)
	if err != nil || got == nil {
		if err == nil && rejected > 0 {
			r.log.Error("no usable checkpoint: replaying the KV topic from its log start", zap.Int("rejected", rejected))
		}
		return nil, err
	}
	for p, off := range got.m.Offsets {
		if end, ok := eol.End(p); !ok || off > end {
			// Not an older one either: the KV topic is no longer the one the checkpoints describe.
			reject(&kgo.Record{Topic: cfg.Topics.Checkpoints, Partition: lp.ckptPart, Offset: got.m.FirstChunk},
				fmt.Errorf("offset %d of partition %d beyond the KV topic's end: the topic was recreated", off, p))
			return nil, nil
		}
	}
	return got, nil
}

// pollContext bounds a poll by the next time a checkpoint or a lag commit may be due, so that an
// idle topic does not hold them back.
func (lp *loop) pollContext(ctx context.Context) (context.Context, context.CancelFunc) {
	cfg := lp.r.cfg
	var due time.Time
	if lp.writing != nil {
		due = lp.r.now().Add(100 * time.Millisecond) // collect the result
	}
	if lp.sinceCkpt && cfg.CheckpointInterval > 0 && cfg.Topics.Checkpoints != "" && lp.r.Ready() == nil {
		if at := lp.lastCkpt.Add(cfg.CheckpointInterval); due.IsZero() || at.Before(due) {
			due = at
		}
	}
	if lp.lag.Group != "" && lp.lag.Pending(lp.pos) {
		if at := lp.lag.NextAt(); due.IsZero() || at.Before(due) {
			due = at
		}
	}
	if due.IsZero() {
		return context.WithCancel(ctx)
	}
	return context.WithDeadline(ctx, due)
}

// poll takes the next records (at most MaxPollRecords): first whatever the input client holds,
// without waiting; when it holds nothing, it waits until ctx ends or a fetch brings records. While
// it so waits with every partition applied up to its end, queries take the replica as caught up
// at their own moment (idleWatch.at); when the wait ends, the replica was caught up until the
// first fetch response read during it (or its end, with none). It sets what onFetches needs to
// keep the as_of bookkeeping: the fetches' arrival bound and the time to sync to.
func (lp *loop) poll(ctx context.Context, cl *kgo.Client) kgo.Fetches {
	r, w, most := lp.r, &lp.r.watch, lp.r.cfg.MaxPollRecords
	start := r.now()
	w.firstRead.Store(0)
	w.armed.Store(true) // before the take: a batch read after start is seen
	lp.syncAt = time.Time{}
	//lint:ignore SA1012 a nil context is franz-go's documented way to take what is buffered without waiting
	if fs := cl.PollRecords(nil, most); len(fs) != 0 {
		w.armed.Store(false)
		lp.arrival = lp.drainedStart
		if fs.NumRecords() < most {
			lp.drainedStart = start
		}
		return fs
	}
	caught := lp.asOf.CaughtUp()
	if caught {
		lp.asOf.Sync(start)
		w.publish(lp.asOf.AsOf())
		w.waitingSince.Store(start.UnixNano())
	}
	fs := cl.PollRecords(ctx, most)
	bound, read := r.now(), false
	if fr := w.firstRead.Load(); fr != 0 {
		bound, read = time.Unix(0, fr), true
	}
	lp.arrival = start
	if read {
		lp.arrival = bound
	}
	drained := fs.NumRecords() < most
	if drained {
		lp.drainedStart = start
	}
	if caught {
		// Until the records of this poll are applied, the index reflects every event appended
		// before the earliest of them (and before the wait began, at the least).
		during := bound
		if e := earliestTimestamp(fs); !e.IsZero() && e.Before(during) {
			during = e
		}
		if during.Before(start) {
			during = start
		}
		lp.asOf.Sync(during)
		w.publish(lp.asOf.AsOf())
		w.waitingSince.Store(0)
		if drained {
			lp.syncAt = bound
		}
	}
	return fs
}

// earliestTimestamp is the earliest Kafka timestamp of fs's records (zero: none).
func earliestTimestamp(fs kgo.Fetches) time.Time {
	var out time.Time
	fs.EachRecord(func(rec *kgo.Record) {
		if out.IsZero() || rec.Timestamp.Before(out) {
			out = rec.Timestamp
		}
	})
	return out
}

// onFetches applies a poll's records.
func (lp *loop) onFetches(fs kgo.Fetches) {
	r := lp.r
	fs.EachError(func(t string, p int32, err error) {
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
			return
		}
		r.l.fetchErrors.add(1)
		r.log.Warn("fetching KV events", zap.String("topic", t), zap.Int32("partition", p), zap.Error(err))
	})
	var live, replayed uint64
	newest := r.l.newestEventMs.load()
	fs.EachPartition(func(fp kgo.FetchTopicPartition) {
		if fp.Topic != r.cfg.Topics.KVEvents {
			return
		}
		if fp.LastStableOffset > 0 {
			lp.lso[fp.Partition] = fp.LastStableOffset
		}
		if fp.Err == nil {
			end := fp.LastStableOffset
			if end < 0 { // a broker that does not report it: the high watermark
				end = fp.HighWatermark
			}
			lp.asOf.Fetched(fp.Partition, end, lp.arrival)
		}
		for _, rec := range fp.Records {
			below := lp.eol.Observe(rec)
			lp.pos[rec.Partition] = rec.Offset + 1
			lp.asOf.Applied(rec.Partition, rec.Offset, rec.Timestamp)
			if rec.Attrs.IsControl() {
				continue
			}
			lp.apply(rec, !below)
			if below {
				replayed++
			} else {
				live++
			}
			newest = max(newest, rec.Timestamp.UnixMilli())
		}
	})
	if live+replayed > 0 {
		lp.applied += live + replayed
		lp.sinceCkpt = true
		r.applied.Add(live + replayed)
		r.l.events.add(live + replayed)
		r.l.replayed.add(replayed)
		r.l.newestEventMs.set(newest)
		r.l.telemetry(lp.sh.Telemetry())
		lp.setSize()
	}
	if !lp.syncAt.IsZero() {
		lp.asOf.Sync(lp.syncAt)
	}
	lp.r.watch.publish(lp.asOf.AsOf())
	lp.setLag()
}

// apply decodes one KV record and applies it to the index. live: the record is at or past its
// partition's end listed at start; only live rejections are dead-lettered (the replayed ones
// were when this DC's replicas first read them), as the relay does.
func (lp *loop) apply(rec *kgo.Record, live bool) {
	r := lp.r
	if r.beforeApply != nil {
		r.beforeApply(rec)
	}
	if err := r.codec.DecodeKvEventInto(rec.Value, &lp.kv); err != nil {
		r.l.undecodable.add(1)
		lp.reject(rec, live, schemas.DeadLetterReasonOf(err), "undecodable KV event: "+err.Error(), err)
		return
	}
	relay.RouterEventInto(&lp.kv, &lp.ev)
	if err := lp.sh.Apply(lp.ev); err != nil {
		r.l.rejected[rejectReason(err)].add(1)
		lp.reject(rec, live, schemas.DeadLetterRejected, "worker index refused the event ("+reasonOf(err)+"): "+err.Error(), err)
		return
	}
	r.sizes.observe(&lp.kv)
	if lp.kv.Kind == schemas.KvClearedEvent {
		lp.noteClear(rec, lp.ev.Source())
	}
}

// noteClear follows an applied KvCleared record of src, as the relay does for its lane records
// (LaneRecord.Sources): one marked with schemas.HeaderLostHistory (a bridge that lost engine
// history cleared the source in its place) leaves the source degraded, since its engine may
// still hold blocks this index no longer credits it with; any other clear of the source makes it
// whole again (its engine restarted or cleared).
func (lp *loop) noteClear(rec *kgo.Record, src ckf.SourceKey) {
	r := lp.r
	for _, h := range rec.Headers {
		if h.Key == schemas.HeaderLostHistory {
			if lp.degraded == nil {
				lp.degraded = map[ckf.SourceKey]struct{}{}
			}
			lp.degraded[src] = struct{}{}
			r.l.lostHistoryClears.add(1)
			r.log.Warn("a source's engine history was lost: its blocks were cleared (its depths may be short in answers, marked incomplete)",
				zap.Uint64("worker_id", uint64(src.Worker)), zap.Uint32("dp_rank", uint32(src.Rank)), zap.Int("degraded_sources", len(lp.degraded)))
			lp.setDegraded()
			return
		}
	}
	if _, ok := lp.degraded[src]; ok {
		delete(lp.degraded, src)
		lp.setDegraded()
	}
}

func (lp *loop) setDegraded() {
	lp.r.degradedSources.Store(int64(len(lp.degraded)))
	lp.r.l.degradedSources.set(int64(len(lp.degraded)))
}

func (lp *loop) reject(rec *kgo.Record, live bool, code schemas.DeadLetterReason, reason string, err error) {
	r := lp.r
	if !live {
		r.log.Debug("replayed KV event rejected again", zap.Int32("partition", rec.Partition), zap.Int64("offset", rec.Offset), zap.Error(err))
		return
	}
	r.log.Warn("KV event rejected", zap.Int32("partition", rec.Partition), zap.Int64("offset", rec.Offset), zap.Error(err))
	if lp.out != nil {
		lp.out.DeadLetter(rec, code, reason, "workers")
		r.l.deadLetters.add(1)
	}
}

func (lp *loop) setSize() {
	sources, rows := lp.sh.LineageSize()
	lp.r.l.sources.set(int64(sources))
	lp.r.l.rows.set(int64(rows))
}

// setLag sums, over the partitions, the last observed stable offset (the listed end before any
// fetch) minus the position.
func (lp *loop) setLag() {
	var lag int64
	for p, pos := range lp.pos {
		end, ok := lp.lso[p]
		if !ok {
			end, _ = lp.eol.End(p)
		}
		lag += max(end-pos, 0)
	}
	lp.r.l.lagRecords.set(lag)
}

func (lp *loop) checkReady(start time.Time) {
	r := lp.r
	if r.Ready() == nil || !lp.eol.Reached() {
		return
	}
	r.readyOnce.Do(func() {
		sources, rows := lp.sh.LineageSize()
		r.readyAt.Store(r.applied.Load())
		close(r.ready)
		r.l.ready.set(1)
		r.log.Info("caught up with the KV topic's end offsets listed at start: ready", zap.Duration("after", time.Since(start)),
			zap.Uint64("applied", r.applied.Load()), zap.Int("sources", sources), zap.Int("rows", rows))
	})
}

// maybeCheckpoint collects a finished checkpoint write and starts the next one when due: ready,
// something applied since the last one, the interval passed, none in flight. The index's
// lineage is snapshotted here, between two polls, so the checkpoint reflects exactly lp.pos
// (workers.Index.SnapshotLineage: O(sources), the buckets shared and copied on write); the
// payload is sorted and encoded from the snapshot, and the transaction runs, on a goroutine of
// its own while the loop goes on applying.
func (lp *loop) maybeCheckpoint(ctx context.Context) {
	r, cfg := lp.r, lp.r.cfg
	if lp.writing != nil {
		select {
		case res := <-lp.writing:
			lp.writing = nil
			if res.err != nil {
				r.l.checkpointFailures.add(1)
				r.log.Warn("checkpoint not written; retrying at the next interval", zap.Error(res.err))
				break
			}
			lp.staleTo = res.m.Chunks
			r.ckptApplied.Store(res.m.Applied)
			r.l.checkpoints.add(1)
			r.l.checkpointBytes.set(int64(res.bytes))
			r.log.Debug("checkpoint written", zap.Uint64("generation", res.m.Generation), zap.Int("chunks", res.m.Chunks), zap.Int("bytes", res.bytes))
		default:
			return
		}
	}
	if cfg.Topics.Checkpoints == "" || cfg.CheckpointInterval == 0 || !lp.sinceCkpt || r.Ready() != nil ||
		r.now().Before(lp.lastCkpt.Add(cfg.CheckpointInterval)) {
		return
	}
	now := r.now()
	lp.lastCkpt, lp.sinceCkpt = now, false
	snap := lp.sh.SnapshotLineage()
	var g [8]byte
	_, _ = rand.Read(g[:])
	m := checkpointManifest{DC: cfg.DC.String(), KVTopic: cfg.Topics.KVEvents, Generation: binary.LittleEndian.Uint64(g[:]),
		Offsets: maps.Clone(lp.pos), NewestEventMs: r.l.newestEventMs.load(), Applied: lp.applied, WrittenMs: now.UnixMilli(),
		Degraded: degradedList(lp.degraded)}
	done := make(chan ckptResult, 1)
	lp.writing = done
	opts, part, staleTo := r.opts.ForRole("workers-checkpoints"), lp.ckptPart, lp.staleTo
	go func() {
		payload, rows := appendPayload(nil, cfg.DC, snap)
		m.PayloadLen, m.PayloadHash, m.Rows = len(payload), xxh3.Hash(payload), rows
		wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
		m, err := writeCheckpoint(wctx, opts, cfg.TransactionalID, cfg.Topics.Checkpoints, part, cfg.DC, m, payload, cfg.CheckpointChunkBytes, staleTo)
		done <- ckptResult{m: m, bytes: len(payload), err: err}
	}()
}

// maybeCommitLag commits the positions into the lag group and refreshes the lag from a listing.
func (lp *loop) maybeCommitLag(cl *kgo.Client) {
	r := lp.r
	if lp.lag.Group == "" {
		return
	}
	committed, err := lp.lag.Commit(cl, r.now(), lp.pos, false)
	if err != nil {
		r.l.lagCommitErrors.add(1)
		r.log.Warn("lag commit failed; retried at the next one", zap.String("group", lp.lag.Group), zap.Error(err))
		return
	}
	if committed {
		if lag, err := lp.lag.LagFromStable(cl, lp.pos); err == nil {
			r.l.lagRecords.set(lag)
		}
	}
}

// stop waits for a checkpoint in flight and commits the last positions.
func (lp *loop) stop(cl *kgo.Client) {
	if lp.writing != nil {
		<-lp.writing
	}
	if lp.lag.Group != "" {
		_, _ = lp.lag.Commit(cl, lp.r.now(), lp.pos, true)
	}
	if lp.out != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = lp.out.Flush(ctx)
		cancel()
	}
	lp.r.l.ready.set(0)
}
