package replay

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ckf-stream/ckf-stream/app/kafka"
	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/ckf-stream/ckf-stream/streams"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"
)

// The replay's regions are in-process clusters, where MirrorMaker 2 (a Java process on Kafka
// Connect) cannot run; mirror stands in for it, doing what the product relies on MirrorMaker
// for (design §8) and nothing more: it reads each region's lane topic, snapshot index and
// control topic read_committed, as MirrorMaker must be configured to, and writes every record
// to the same partition of the copy in every other region, named by MirrorMaker's default
// policy (<alias>.<topic>), with its key, value, headers and timestamp and without transaction
// markers. Offsets are not preserved, and nothing depends on them: a remote lane is restored by
// time and sequence (consumer §9.8), as on MirrorMaker's copies. Like MirrorMaker it copies at
// least once; unlike it, it does not translate consumer offsets (off in the product too).

// mirrorFlow copies one region's mirrored topics into one other region, delayed by the WAN's
// one-way delay.
type mirrorFlow struct {
	from, to *region
	// The bytes copied (key, value and headers of each record): of the lane topic's snapshot
	// chunks, deltas and other records (heartbeats, drain markers), of the snapshot index, and
	// of the control topic.
	snapshot, delta, laneOther, index, control atomic.Uint64
	records                                    atomic.Uint64
	failed                                     atomic.Uint64
}

// mirror runs every flow between the regions (N × (N-1)) from the application's start to its
// stop.
type mirror struct {
	regions []*region
	delay   time.Duration
	log     *zap.Logger
	flows   []*mirrorFlow

	cancel context.CancelFunc
	wg     sync.WaitGroup
	errMu  sync.Mutex
	err    error
}

func newMirror(regions []*region, delay time.Duration, log *zap.Logger) *mirror {
	m := &mirror{regions: regions, delay: delay, log: log.Named("mirror")}
	for _, from := range regions {
		for _, to := range regions {
			if from != to {
				m.flows = append(m.flows, &mirrorFlow{from: from, to: to})
			}
		}
	}
	return m
}

// mirroredTopics are the topics of a region that cross the WAN (design §8): the lanes and the
// snapshot index (other regions' indexers read them) and the control topic (their snapshot
// requests, back to the lane's relay).
func mirroredTopics(c *kafka.Connection) []string {
	return []string{c.Topics.Lanes, c.Topics.SnapshotIndex, c.Topics.Control}
}

// createCopies creates, in every region, the copies of every other region's mirrored topics
// with the source's partitions and configs, as MirrorMaker does; it runs before the indexers
// and relays start, which read the copies from their start.
func (m *mirror) createCopies(ctx context.Context) error {
	for _, to := range m.regions {
		cl, err := to.conn.NewClient("replay-mirror-admin")
		if err != nil {
			return err
		}
		adm := kadm.NewClient(cl)
		for _, from := range m.regions {
			if from == to {
				continue
			}
			for _, spec := range kafka.TopicLayout(from.conn.Topics) {
				if !isMirrored(from.conn, spec.Name) {
					continue
				}
				name := streams.MirroredTopic(streams.MirrorPolicyDefault, from.alias, spec.Name)
				res, err := adm.CreateTopic(ctx, spec.Partitions, -1, spec.Configs, name)
				if err == nil {
					err = res.Err
				}
				if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
					cl.Close()
					return fmt.Errorf("replay: mirror: creating %s in region %s: %w", name, to.alias, err)
				}
			}
		}
		cl.Close()
	}
	return nil
}

func isMirrored(c *kafka.Connection, topic string) bool {
	for _, t := range mirroredTopics(c) {
		if t == topic {
			return true
		}
	}
	return false
}

// Start creates the copies and starts every flow.
func (m *mirror) Start(ctx context.Context) error {
	if err := m.createCopies(ctx); err != nil {
		return err
	}
	runCtx, cancel := context.WithCancel(context.Background())
	m.cancel = cancel
	for _, f := range m.flows {
		src, err := f.from.conn.NewClient(fmt.Sprintf("replay-mirror-%s-%s-src", f.from.alias, f.to.alias),
			kgo.ConsumeTopics(mirroredTopics(f.from.conn)...), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
			kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.FetchMaxWait(50*time.Millisecond))
		if err != nil {
			cancel()
			return err
		}
		dst, err := f.to.conn.NewClient(fmt.Sprintf("replay-mirror-%s-%s-dst", f.from.alias, f.to.alias),
			kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0), kgo.RequiredAcks(kgo.AllISRAcks()))
		if err != nil {
			src.Close()
			cancel()
			return err
		}
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			defer dst.Close()
			defer src.Close()
			if err := m.run(runCtx, f, src, dst); err != nil && runCtx.Err() == nil {
				m.errMu.Lock()
				m.err = errors.Join(m.err, err)
				m.errMu.Unlock()
				m.log.Error("mirror flow stopped", zap.String("from", f.from.alias), zap.String("to", f.to.alias), zap.Error(err))
			}
		}()
	}
	return nil
}

// Stop stops every flow and returns what any failed with.
func (m *mirror) Stop(context.Context) error {
	if m.cancel != nil {
		m.cancel()
	}
	m.wg.Wait()
	m.errMu.Lock()
	defer m.errMu.Unlock()
	return m.err
}

// batch is what one poll fetched, and when.
type batch struct {
	at   time.Time
	recs []*kgo.Record
}

// run copies f: a fetch loop hands each poll's records, stamped with the poll's time, to a
// writer that holds them until that time plus the WAN delay, so a record arrives one delay after
// the mirror read it, however many records are in flight.
func (m *mirror) run(ctx context.Context, f *mirrorFlow, src, dst *kgo.Client) error {
	topics := f.from.conn.Topics
	queue := make(chan batch, 4096)
	fetchErr := make(chan error, 1)
	go func() {
		defer close(queue)
		for {
			fs := src.PollFetches(ctx)
			if ctx.Err() != nil {
				return
			}
			var errs []error
			fs.EachError(func(t string, p int32, err error) {
				errs = append(errs, fmt.Errorf("reading %s[%d] of region %s: %w", t, p, f.from.alias, err))
			})
			if len(errs) > 0 {
				fetchErr <- errors.Join(errs...)
				return
			}
			b := batch{at: time.Now(), recs: fs.Records()}
			if len(b.recs) == 0 {
				continue
			}
			select {
			case queue <- b:
			case <-ctx.Done():
				return
			}
		}
	}()
	for b := range queue {
		if d := time.Until(b.at.Add(m.delay)); d > 0 {
			t := time.NewTimer(d)
			select {
			case <-ctx.Done():
				t.Stop()
				return nil
			case <-t.C:
			}
		}
		for _, r := range b.recs {
			size := uint64(len(r.Key) + len(r.Value))
			for _, h := range r.Headers {
				size += uint64(len(h.Key) + len(h.Value))
			}
			switch r.Topic {
			case topics.Control:
				f.control.Add(size)
			case topics.SnapshotIndex:
				f.index.Add(size)
			default:
				lr, err := f.from.codec.DecodeLaneRecord(r.Value)
				switch {
				case err == nil && lr.Kind == schemas.LaneSnapshotChunk:
					f.snapshot.Add(size)
				case err == nil && lr.Kind == schemas.LaneDelta:
					f.delta.Add(size)
				default:
					f.laneOther.Add(size)
				}
			}
			f.records.Add(1)
			cp := &kgo.Record{Topic: streams.MirroredTopic(streams.MirrorPolicyDefault, f.from.alias, r.Topic), Partition: r.Partition,
				Key: r.Key, Value: r.Value, Headers: r.Headers, Timestamp: r.Timestamp}
			dst.Produce(ctx, cp, func(_ *kgo.Record, err error) {
				if err != nil && ctx.Err() == nil {
					f.failed.Add(1)
					m.log.Warn("mirror: copying a record", zap.String("topic", cp.Topic), zap.Error(err))
				}
			})
		}
	}
	select {
	case err := <-fetchErr:
		return err
	default:
		return nil
	}
}
