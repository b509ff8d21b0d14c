// Package bridge feeds the index from real inference engines: it subscribes to the KV-cache
// events vLLM and SGLang publish over ZeroMQ (one PUB socket and one optional ROUTER replay
// socket per data-parallel rank), orders and completes each rank's batch stream, converts the
// batches to KvEvent records keyed by worker (local block hashes from the token ids, engine
// hashes as external ids) and produces them to the KV-events topic that the DC's relay reads.
//
// The engines' wire format and the decisions taken on it are in README.md in this directory;
// package kvevents decodes the payloads.
package bridge

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/go-zeromq/zmq4"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/uber-go/tally/v4"
	"go.uber.org/zap"
)

// Record headers the bridge writes on every KvEvent record: the engine batch the record came
// from (8-byte big-endian sequence number, -1 for the clear the bridge writes on an engine
// restart), the XXH3-64 digest of the batch's payload, and the record's place among the batch's
// records (big-endian u32 index, u32 count). A restarted bridge reads them back to find where
// each rank stopped and whether the last batch was written whole (ReadBack).
const (
	HeaderSeq    = "ckf-bridge-seq"
	HeaderDigest = "ckf-bridge-digest"
	HeaderPart   = "ckf-bridge-part"
	// HeaderGroups carries what the rank learned about a hybrid model's groups
	// (Converter.GroupKinds), when it learned anything.
	HeaderGroups = "ckf-bridge-groups"
	// HeaderLost marks the clear the bridge writes in place of lost engine batches
	// (LostHistoryClear): the first and the end of the lost range, two 8-byte big-endian
	// sequence numbers. Such a record's HeaderSeq is the last lost batch and its digest 0. The
	// relay counts these clears (schemas.HeaderLostHistory, the same header).
	HeaderLost = schemas.HeaderLostHistory
)

// Params are New's inputs.
type Params struct {
	Config Config
	Codec  *schemas.Codec
	// Producer writes the records; the bridge does not close it. It must keep records of one
	// key in order (franz-go's default idempotent producer does).
	Producer *kgo.Client
	// Consumer options for Resume's read-back (the connection's options); nil disables it.
	ConsumerOpts []kgo.Opt
	Metrics      tally.Scope
	Log          *zap.Logger
}

// Bridge runs the sources of one engine worker.
type Bridge struct {
	cfg   Config
	codec *schemas.Codec
	prod  *kgo.Client
	copts []kgo.Opt
	log   *zap.Logger
	m     *metrics

	ready   atomic.Bool
	prodErr atomic.Pointer[error]
	// reach holds the ranks waiting for an engine that does not answer (reachEngine).
	reach reachState
	// degraded counts the ranks degraded by lost history (LostHistoryClear).
	degraded atomic.Int64
	// fail stops Run with a cause (a record Kafka refused); set while Run runs.
	fail atomic.Pointer[context.CancelCauseFunc]
}

// New checks the configuration and builds a Bridge; nothing connects until Run.
func New(p Params) (*Bridge, error) { return newBridge(p, "") }

// newBridge is New; a non-empty worker tags the bridge's gauges with it (a Fleet's engines
// share the counters).
func newBridge(p Params, worker string) (*Bridge, error) {
	cfg := p.Config
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if p.Codec == nil || p.Producer == nil {
		return nil, fmt.Errorf("%w: a codec and a producer are required", ErrConfig)
	}
	log := p.Log
	if log == nil {
		log = zap.NewNop()
	}
	return &Bridge{cfg: cfg, codec: p.Codec, prod: p.Producer, copts: p.ConsumerOpts, log: log, m: newWorkerMetrics(p.Metrics, worker)}, nil
}

// Ready reports whether every rank's SUB socket is open and the resume read-back is done. A
// rank waiting for an engine that does not answer (at start, or after its socket failed) makes
// it a *NoEngineError naming the endpoint, the rank and how long it has waited.
func (b *Bridge) Ready() error {
	if u, waiting := b.reach.first(); waiting {
		return &NoEngineError{Rank: u.rank, Endpoint: u.endpoint, For: time.Since(u.since), Err: u.err}
	}
	if !b.ready.Load() {
		return errors.New("bridge: starting (resume read-back, sockets)")
	}
	if e := b.prodErr.Load(); e != nil {
		return fmt.Errorf("bridge: producing: %w", *e)
	}
	return nil
}

// Run reads the worker's previous records back (Config.Resume), opens one SUB socket per rank
// and handles batches until ctx ends; then it flushes the producer. It returns ctx's error, or
// the error that stopped it (a socket that cannot be opened, a failed read-back, a record that
// Kafka refused after the producer's retries: the converter's state then holds what Kafka does
// not, so the bridge stops, and its restart resumes from what Kafka has).
func (b *Bridge) Run(ctx context.Context) error {
	conv := b.newConverter()
	resumes := map[uint32]*Resume{}
	if b.cfg.Resume && b.copts != nil {
		var err error
		if resumes, err = ReadBack(ctx, b.copts, b.codec, b.cfg.KVTopic, b.cfg.WorkerID, conv); err != nil {
			return fmt.Errorf("bridge: resuming from %s: %w", b.cfg.KVTopic, err)
		}
	}
	return b.run(ctx, conv, resumes)
}

func (b *Bridge) newConverter() *Converter {
	return NewConverter(b.cfg.WorkerID, b.cfg.BlockSize, b.cfg.LoraNames)
}

// run is Run after the read-back: conv holds what the worker's records in Kafka hold, and
// resumes says where each rank stopped.
func (b *Bridge) run(ctx context.Context, conv *Converter, resumes map[uint32]*Resume) error {
	for r, res := range resumes {
		b.log.Info("resuming rank from its records in Kafka", zap.Uint32("rank", r), zap.Int64("last_seq", res.Seq),
			zap.Int("held_blocks", conv.HeldBlocks(r)), zap.Bool("degraded", res.Degraded))
	}
	ctx, cancelCause := context.WithCancelCause(ctx)
	cancel := func() { cancelCause(nil) }
	defer cancel()
	b.fail.Store(&cancelCause)
	defer b.fail.Store(nil)
	var wg sync.WaitGroup
	errs := make(chan error, b.cfg.Ranks)
	var convMu sync.Mutex // the converter's ranks are disjoint, but its map is shared
	// Each rank opens its socket on its own goroutine, so that a rank whose engine does not
	// answer holds up no other; the bridge is ready once every rank's socket is open.
	var opened atomic.Int64
	for r := 0; r < b.cfg.Ranks; r++ {
		ep, _ := RankEndpoint(b.cfg.Endpoint, r)
		open := func() (zmq4.Socket, error) {
			if !b.cfg.Bind {
				if err := b.reachEngine(ctx, r, ep); err != nil {
					return nil, err
				}
			}
			return openSub(ctx, ep, b.cfg.Topic, b.cfg.Bind)
		}
		src := &source{rank: uint32(r), conv: conv, sink: b, log: b.log.With(zap.Int("rank", r)), retries: b.cfg.ReplayRetries,
			keepOnLoss: b.cfg.LostHistory == LostHistoryKeep, resume: resumes[uint32(r)], onMetric: b.m.event,
			onDegraded: func(on bool) {
				delta := int64(-1)
				if on {
					delta = 1
				}
				b.m.degradedRanks.Update(float64(b.degraded.Add(delta)))
			}}
		if b.cfg.ReplayEndpoint != "" {
			rep, _ := RankEndpoint(b.cfg.ReplayEndpoint, r)
			src.replay = &zmqReplayer{endpoint: rep, topic: b.cfg.Topic, timeout: b.cfg.ReplayTimeout,
				refused: func(fe *FramingError) { b.refuseFrames(uint32(r), rep, fe) }}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			sub, err := open()
			if err == nil {
				if opened.Add(1) == int64(b.cfg.Ranks) {
					b.ready.Store(true)
				}
				err = b.runSource(ctx, src, ep, sub, open, &convMu)
			}
			if err != nil && ctx.Err() == nil {
				errs <- err
				cancel()
			}
		}()
	}
	<-ctx.Done()
	wg.Wait()
	b.ready.Store(false)
	fctx, fcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer fcancel()
	ferr := b.prod.Flush(fctx)
	select {
	case err := <-errs:
		return err
	default:
	}
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) && !errors.Is(cause, context.DeadlineExceeded) {
		return cause
	}
	if ferr != nil {
		return fmt.Errorf("bridge: flushing: %w", ferr)
	}
	return ctx.Err()
}

type liveMsg struct {
	seq     int64
	payload []byte
}

// runSource reads one rank's SUB socket on a goroutine into a bounded buffer and handles the
// batches in order on this one. A full buffer blocks the reader (counted): the engine's PUB
// socket then drops at its high-water mark, and the gaps are filled from the replay socket.
// After IdleRecheck without a batch it asks the replay socket for what it may have missed.
//
// A dialled socket that fails (the engine went away: the connection broke) is closed and opened
// again until ctx ends; a bound socket (Config.Bind) stays open, and the engine connects to it
// again. What was published meanwhile is a gap like any other.
func (b *Bridge) runSource(ctx context.Context, src *source, ep string, sub zmq4.Socket, open func() (zmq4.Socket, error), mu *sync.Mutex) error {
	buf := make(chan liveMsg, b.cfg.BufferBatches)
	// The socket in use is closed when ctx ends, which ends a Recv in progress.
	var curMu sync.Mutex
	cur := sub
	stopClose := context.AfterFunc(ctx, func() { curMu.Lock(); _ = cur.Close(); curMu.Unlock() })
	defer stopClose()
	go func() {
		defer close(buf)
		defer func() { curMu.Lock(); _ = cur.Close(); curMu.Unlock() }()
		for {
			msg, err := sub.Recv()
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				if b.cfg.Bind {
					// One of the engine's connections to the bound socket ended (the engine
					// stopped or restarted): zmq4 drops it, and the listener accepts the
					// engine when it connects again. The socket stays open: a restarted
					// engine connects again at once, and a connection whose handshake ended
					// after the socket's Close would join the closed socket, never be sent the
					// subscription nor be closed (zmq4 v0.17.0), and keep the engine, which
					// sees itself connected, from ever connecting again.
					b.log.Warn("engine connection to the bound socket ended; the engine connects again", zap.Uint32("rank", src.rank), zap.Error(err))
					continue
				}
				b.m.reconnects.Inc(1)
				b.log.Warn("engine socket failed; opening it again", zap.Uint32("rank", src.rank), zap.Error(err))
				_ = sub.Close()
				for {
					select {
					case <-ctx.Done():
						return
					case <-time.After(250 * time.Millisecond): // reconnection back-off, not a wait for an outcome
					}
					if sub, err = open(); err == nil {
						curMu.Lock()
						cur = sub
						curMu.Unlock()
						if ctx.Err() != nil {
							return // the deferred close closes it
						}
						break
					}
					b.log.Warn("engine socket not opened", zap.Uint32("rank", src.rank), zap.Error(err))
				}
				continue
			}
			seq, payload, err := parseLive(msg.Frames)
			if err != nil {
				var fe *FramingError
				errors.As(err, &fe)
				b.refuseFrames(src.rank, ep, fe)
				continue
			}
			select {
			case buf <- liveMsg{seq, payload}:
				continue
			default:
			}
			b.m.bufferFull.Inc(1)
			select {
			case buf <- liveMsg{seq, payload}:
			case <-ctx.Done():
				return
			}
		}
	}()
	var idle <-chan time.Time
	var timer *time.Timer
	if b.cfg.IdleRecheck > 0 && src.replay != nil {
		timer = time.NewTimer(b.cfg.IdleRecheck)
		defer timer.Stop()
		idle = timer.C
	}
	last := src.stats
	report := func() {
		st := src.stats
		b.m.batches.Inc(int64(st.batches - last.batches))
		b.m.replayed.Inc(int64(st.replayed - last.replayed))
		b.m.duplicates.Inc(int64(st.duplicates - last.duplicates))
		b.m.restarts.Inc(int64(st.restarts - last.restarts))
		b.m.gaps.Inc(int64(st.gaps - last.gaps))
		b.m.lost.Inc(int64(st.lost - last.lost))
		b.m.undecodable.Inc(int64(st.undecodable - last.undecodable))
		b.m.refused.Inc(int64(st.refused - last.refused))
		b.m.replayRetries.Inc(int64(st.retries - last.retries))
		b.m.lostClears.Inc(int64(st.lostClears - last.lostClears))
		b.m.buffered.Update(float64(len(buf)))
		last = st
	}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case msg, ok := <-buf:
			if !ok {
				return ctx.Err()
			}
			mu.Lock()
			src.live(ctx, msg.seq, msg.payload)
			mu.Unlock()
			b.m.sequenceLag.Update(float64(msg.seq + 1 - src.next + int64(len(buf))))
			report()
			if timer != nil {
				timer.Reset(b.cfg.IdleRecheck)
			}
		case <-idle:
			mu.Lock()
			src.idle(ctx)
			mu.Unlock()
			report()
			timer.Reset(b.cfg.IdleRecheck)
		}
	}
}

// DegradedRanks returns how many ranks are degraded by lost history: a clear replaced lost
// batches and no full clear came since (LostHistoryClear).
func (b *Bridge) DegradedRanks() int { return int(b.degraded.Load()) }

// WriteLost produces the clear that replaces the lost batches [from, to) of rank, marked with
// HeaderLost so that a restarted bridge resumes after it (ReadBack).
func (b *Bridge) WriteLost(rank uint32, from, to int64, groups []byte, clear schemas.KvEvent) {
	lost := binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(nil, uint64(from)), uint64(to))
	b.write(rank, to-1, 0, groups, []schemas.KvEvent{clear}, kgo.RecordHeader{Key: HeaderLost, Value: lost})
}

// Write produces the records of one batch, in order, keyed by worker, with the batch's
// provenance headers. Production is asynchronous; a failed record is counted, logged and
// makes the bridge unready (franz-go retries until its delivery timeout first).
func (b *Bridge) Write(rank uint32, seq int64, digest uint64, groups []byte, evs []schemas.KvEvent) {
	b.write(rank, seq, digest, groups, evs)
}

func (b *Bridge) write(rank uint32, seq int64, digest uint64, groups []byte, evs []schemas.KvEvent, extra ...kgo.RecordHeader) {
	if len(evs) == 0 {
		return
	}
	key := strconv.AppendUint(nil, b.cfg.WorkerID, 10)
	seqH, digestH := binary.BigEndian.AppendUint64(nil, uint64(seq)), binary.BigEndian.AppendUint64(nil, digest)
	for i := range evs {
		headers := []kgo.RecordHeader{{Key: HeaderSeq, Value: seqH}, {Key: HeaderDigest, Value: digestH},
			{Key: HeaderPart, Value: binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint32(nil, uint32(i)), uint32(len(evs)))}}
		if len(groups) > 0 {
			headers = append(headers, kgo.RecordHeader{Key: HeaderGroups, Value: groups})
		}
		headers = append(headers, extra...)
		v, err := b.codec.EncodeKvEvent(evs[i])
		if err != nil {
			// Only a bug can make a converted event unencodable; keep going with the rest.
			b.log.Error("KvEvent not encodable", zap.Uint32("rank", rank), zap.Int64("seq", seq), zap.Error(err))
			continue
		}
		start := time.Now()
		b.m.records(evs[i].Kind)
		b.prod.Produce(context.Background(), &kgo.Record{Topic: b.cfg.KVTopic, Key: key, Value: v, Headers: headers},
			func(_ *kgo.Record, err error) {
				b.m.produceLatency.RecordDuration(time.Since(start))
				if err != nil {
					b.m.produceErrors.Inc(1)
					b.prodErr.Store(&err)
					b.log.Error("KV event not produced; stopping the bridge (a restart resumes from Kafka)", zap.Uint32("rank", rank), zap.Int64("seq", seq), zap.Error(err))
					if f := b.fail.Load(); f != nil {
						(*f)(fmt.Errorf("bridge: KV event of rank %d, batch %d not produced: %w", rank, seq, err))
					}
				}
			})
	}
}

// refuseFrames handles a message of endpoint (rank's PUB or replay socket) whose framing no
// released engine sends: counted (ckf_bridge_malformed_messages_total), logged, and
// dead-lettered with its raw frames (FramesValue) and the reason.
func (b *Bridge) refuseFrames(rank uint32, endpoint string, fe *FramingError) {
	b.m.malformedMessages.Inc(1)
	b.log.Warn("engine message of unknown framing dead-lettered", zap.Uint32("rank", rank), zap.String("endpoint", endpoint), zap.Error(fe))
	b.deadLetter(rank, "zmq:"+endpoint, 0, FramesValue(fe.Frames), fe)
}

// DeadLetter produces an undecodable or refused batch, raw bytes and reason, to the
// dead-letter topic (source topic "zmq:<endpoint>", partition the rank, offset the sequence).
func (b *Bridge) DeadLetter(rank uint32, seq int64, payload []byte, cause error) {
	b.log.Warn("engine batch dead-lettered", zap.Uint32("rank", rank), zap.Int64("seq", seq), zap.Error(cause))
	ep, _ := RankEndpoint(b.cfg.Endpoint, int(rank))
	b.deadLetter(rank, "zmq:"+ep, max(seq, 0), payload, cause)
}

// deadLetter produces one dead letter of the bridge: value is what was refused, as received.
func (b *Bridge) deadLetter(rank uint32, source string, offset int64, value []byte, cause error) {
	b.m.deadLetters.Inc(1)
	code := schemas.DeadLetterMalformed
	var re *RefusedError
	if errors.As(cause, &re) {
		code = schemas.DeadLetterRejected
	}
	d := schemas.DeadLetter{SourceTopic: source, SourcePartition: int32(rank & 0x7fffffff), SourceOffset: offset,
		Key: strconv.AppendUint(nil, b.cfg.WorkerID, 10), Value: value, ReasonCode: code, Reason: cause.Error(),
		Component: "bridge", DeadLetterTime: time.Now()}
	v, err := b.codec.EncodeDeadLetter(d)
	if err != nil {
		b.log.Error("dead letter not encodable", zap.Error(err))
		return
	}
	b.prod.Produce(context.Background(), &kgo.Record{Topic: b.cfg.DeadLetterTopic, Key: d.Key, Value: v}, func(_ *kgo.Record, err error) {
		if err != nil {
			b.m.produceErrors.Inc(1)
			b.log.Error("dead letter not produced", zap.Error(err))
		}
	})
}
