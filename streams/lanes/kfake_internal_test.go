package lanes

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/ckf/index"
	"github.com/ckf-stream/ckf-stream/ckf/producer"
	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/ckf-stream/ckf-stream/streams"
	"github.com/ckf-stream/ckf-stream/testenv"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap/zaptest"
)

// fakeKafka is an in-process broker (franz-go's kfake) with the indexer's topics, for tests that
// run whole indexers, with their own clients, where nothing depends on a real broker: restores
// from the snapshot index (read whole; compaction plays no part) and commits to the lag group.
type fakeKafka struct {
	t      *testing.T
	c      *kfake.Cluster
	seeds  kgo.Opt
	cfg    IndexerConfig
	codec  *schemas.Codec
	blocks uint64
}

func newFakeKafka(t *testing.T, expectedBlocks uint64) *fakeKafka {
	t.Helper()
	cfg := testConfig()
	cfg.Topics.SnapshotIndex = "snapshot-index"
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(ckf.LaneCount, cfg.Topics.Lanes, cfg.Topics.LaneEvents),
		kfake.SeedTopics(1, cfg.Topics.Control, cfg.Topics.DeadLetter, cfg.Topics.SnapshotIndex))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	codec, err := schemas.NewCodec(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return &fakeKafka{t: t, c: c, seeds: kgo.SeedBrokers(c.ListenAddrs()...), cfg: cfg, codec: codec, blocks: expectedBlocks}
}

func (f *fakeKafka) client(opts ...kgo.Opt) *kgo.Client {
	f.t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{f.seeds}, opts...)...)
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(cl.Close)
	return cl
}

// manifest returns a manifest with lane l owned by DC 100+l for each given lane.
func (f *fakeKafka) manifest(consumer ckf.ConsumerInstanceID, laneNums ...uint8) index.Manifest {
	f.t.Helper()
	var ml index.ManifestLanes
	for _, l := range laneNums {
		p := rigPool(100 + uint64(l))
		ml[l] = &p
	}
	buckets, err := ckf.BucketCountFor(f.blocks)
	if err != nil {
		f.t.Fatal(err)
	}
	m, _, err := index.NewManifest(consumer, rigDomain, ckf.NewFormatIdentity(ckf.DefaultSeed, buckets), ml)
	if err != nil {
		f.t.Fatal(err)
	}
	return m
}

// producer returns lane's producer at incarnation, writing through a lane writer that also
// indexes its snapshots.
func (f *fakeKafka) producer(lane uint8, incarnation uint64) *rigProducer {
	f.t.Helper()
	p := newRigProducer(f.t, lane, rigPool(100+uint64(lane)), f.blocks, incarnation)
	wcfg := streams.DefaultLaneWriterConfig()
	wcfg.LaneTopic, wcfg.IndexTopic, wcfg.Lane, wcfg.ChunkWords = f.cfg.Topics.Lanes, f.cfg.Topics.SnapshotIndex, lane, rigChunkWords
	w, err := streams.NewLaneWriter(f.client(streams.LaneWriterClientOpts()...), f.codec, p.ID, wcfg)
	if err != nil {
		f.t.Fatal(err)
	}
	p.writer = w
	p.Publisher = producer.NewPublisher(p.ID, 0, p)
	return p
}

// runningIndexer is an Indexer run by fakeKafka.start until stop (or the test's end).
type runningIndexer struct {
	ix     *Indexer
	cancel context.CancelFunc
	done   chan error
}

func (f *fakeKafka) start(m index.Manifest, cfg IndexerConfig, setup func(*Indexer)) *runningIndexer {
	f.t.Helper()
	g, err := index.NewGlobalIndexer(m, ckf.DefaultSearchConfig())
	if err != nil {
		f.t.Fatal(err)
	}
	ix, err := NewIndexer(IndexerParams{Config: cfg, Indexer: g, Codec: f.codec, ClientOpts: []kgo.Opt{f.seeds},
		Log: zaptest.NewLogger(f.t).Named("ix")})
	if err != nil {
		f.t.Fatal(err)
	}
	if setup != nil {
		setup(ix)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ri := &runningIndexer{ix: ix, cancel: cancel, done: make(chan error, 1)}
	go func() { ri.done <- ix.Run(ctx) }()
	f.t.Cleanup(ri.stop)
	select {
	case <-ix.Started():
	case err := <-ri.done:
		f.t.Fatalf("indexer stopped at start-up: %v", err)
	}
	return ri
}

func (ri *runningIndexer) stop() {
	if ri.cancel == nil {
		return
	}
	ri.cancel()
	<-ri.done
	ri.cancel = nil
}

func (ri *runningIndexer) status(lane uint8) LaneStatus { return ri.ix.lanes[lane].stats.snapshot() }

// waitLane waits until the indexer's words of p's lane equal the producer's and the lane is
// ready at the producer's last sequence.
func (ri *runningIndexer) waitLane(t *testing.T, p *rigProducer) {
	t.Helper()
	want := p.State.CopyWords()
	g := ri.ix.g
	testenv.WaitUntil(t, time.Minute, fmt.Sprintf("lane %d converges to the producer", p.lane), func() bool {
		return g.ReadyLanes()&(1<<p.lane) != 0 && slices.Equal(g.LaneWords(p.lane), want) &&
			ri.status(p.lane).InstalledSequence == p.Publisher.LastSequence()
	}, func() string {
		return fmt.Sprintf("status %+v, producer sequence %d", ri.status(p.lane), p.Publisher.LastSequence())
	})
}

// referenceIndexer returns a table with each producer's exact state installed: the table of a
// replica that read the same streams without any fault.
func referenceIndexer(t *testing.T, m index.Manifest, ps ...*rigProducer) *index.GlobalIndexer {
	t.Helper()
	g, err := index.NewGlobalIndexer(m, ckf.DefaultSearchConfig())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ps {
		in, err := g.ClaimLane(p.lane)
		if err != nil {
			t.Fatal(err)
		}
		lease := ckf.LaneLease{Consumer: m.ConsumerInstance(), Lane: p.lane, Epoch: 1}
		if err := in.Assign(p.ID, lease); err != nil {
			t.Fatal(err)
		}
		if out := in.InstallSnapshot(&ckf.Snapshot{Identity: p.ID, Lease: lease, Sequence: p.Publisher.LastSequence(),
			Buckets: p.State.CopyWords()}); out.Kind != index.OutcomeSnapshotInstalled {
			t.Fatalf("reference install: %v", out)
		}
	}
	return g
}

// compareQueries checks that got answers every producer chain, its first half and a divergent
// variant exactly like want.
func compareQueries(t *testing.T, got, want *index.GlobalIndexer, ps ...*rigProducer) {
	t.Helper()
	n := 0
	for _, p := range ps {
		for _, chain := range p.Chains {
			for _, q := range [][]uint64{chain, chain[:len(chain)/2], append(slices.Clone(chain[:len(chain)/2]), 12345, 678)} {
				a, errA := got.FindPrefixMatches(q)
				b, errB := want.FindPrefixMatches(q)
				if (errA == nil) != (errB == nil) || a != b {
					t.Fatalf("query of %d blocks: indexer %+v (%v), reference %+v (%v)", len(q), a.Depths(), errA, b.Depths(), errB)
				}
				n++
			}
		}
	}
	if n == 0 {
		t.Fatal("no query compared")
	}
}

// endOffset returns the end offset of topic's partition.
func (f *fakeKafka) endOffset(topic string, partition int32) int64 {
	f.t.Helper()
	ends, err := kadm.NewClient(f.client()).ListEndOffsets(context.Background(), topic)
	if err != nil {
		f.t.Fatal(err)
	}
	o, _ := ends.Lookup(topic, partition)
	return o.Offset
}
