package streamtest

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/ckf/index"
	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/ckf-stream/ckf-stream/testenv"
	"github.com/twmb/franz-go/pkg/kgo"
)

const Converge = 45 * time.Second

// ReferenceIndexer builds the in-process reference: a GlobalIndexer with the same manifest whose
// lanes are installed directly from the producers' exact words.
func ReferenceIndexer(t *testing.T, m index.Manifest, ps ...*Producer) *index.GlobalIndexer {
	t.Helper()
	g, err := index.NewGlobalIndexer(m, ckf.DefaultSearchConfig())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ps {
		InstallReference(t, g, p.Lane, p.ID, p.Publisher.LastSequence(), p.State.CopyWords())
	}
	return g
}

// InstallReference installs words as lane's snapshot of id at seq into the reference g (one of
// ReferenceIndexer's), for a lane whose words come from elsewhere than a Producer (a relay's).
func InstallReference(t *testing.T, g *index.GlobalIndexer, lane uint8, id ckf.ProducerIdentity, seq uint64, words []uint64) {
	t.Helper()
	in, err := g.ClaimLane(lane)
	if err != nil {
		t.Fatal(err)
	}
	lease := ckf.LaneLease{Consumer: g.Manifest().ConsumerInstance(), Lane: lane, Epoch: 1}
	if err := in.Assign(id, lease); err != nil {
		t.Fatal(err)
	}
	out := in.InstallSnapshot(&ckf.Snapshot{Identity: id, Lease: lease, Sequence: seq, Buckets: words})
	if out.Kind != index.OutcomeSnapshotInstalled {
		t.Fatalf("reference install of lane %d: %v", lane, out)
	}
}

// CompareQueries checks that the indexer answers every prefix of every producer chain, plus
// divergent variants, exactly like the reference: the 16-lane result (FindPrefixMatches, which
// both refuse alike on a table of lanes beyond 15) and the result of every lane count
// (FindPrefixMatches64, consumer §16), which the reference must answer at least once.
func CompareQueries(t *testing.T, got, want *index.GlobalIndexer, ps ...*Producer) {
	t.Helper()
	n, answered := 0, 0
	for _, p := range ps {
		for _, chain := range p.Chains {
			for _, q := range [][]uint64{chain, chain[:len(chain)/2], append(slices.Clone(chain[:len(chain)/2]), 12345, 678)} {
				a, errA := got.FindPrefixMatches(q)
				b, errB := want.FindPrefixMatches(q)
				if (errA == nil) != (errB == nil) || a != b {
					t.Fatalf("query of %d blocks: indexer %+v (%v), reference %+v (%v)", len(q), a.Depths(), errA, b.Depths(), errB)
				}
				a64, errA := got.FindPrefixMatches64(q, nil)
				b64, errB := want.FindPrefixMatches64(q, nil)
				if (errA == nil) != (errB == nil) || a64 != b64 {
					t.Fatalf("query of %d blocks over every lane count: indexer lanes %#x depths %v (%v), reference lanes %#x depths %v (%v)",
						len(q), a64.ReadyLanes, a64.Depths, errA, b64.ReadyLanes, b64.Depths, errB)
				}
				if errB == nil {
					answered++
				}
				n++
			}
		}
	}
	if n == 0 || answered == 0 {
		t.Fatalf("%d queries compared, %d answered by the reference: nothing was compared", n, answered)
	}
}

// ControlLog collects snapshot requests from the control topic.
type ControlLog struct{ *RecordLog }

func (e *Env) ControlRecords() *ControlLog {
	return &ControlLog{e.Records(e.Topics.Control, 1)}
}

func (c *ControlLog) Count() int { return len(c.Snapshot()) }

func (c *ControlLog) WaitLane(t *testing.T, lane uint8, timeout time.Duration) schemas.SnapshotRequest {
	t.Helper()
	var found schemas.SnapshotRequest
	testenv.WaitUntil(t, timeout, fmt.Sprintf("a snapshot request for lane %d", lane), func() bool {
		for _, r := range c.Snapshot() {
			rec, err := c.codec.DecodeControlRecord(r.Value)
			if err != nil {
				t.Fatalf("undecodable control record: %v", err)
			}
			if rec.Kind == schemas.ControlSnapshotRequest && rec.SnapshotRequest.Lane == lane {
				found = rec.SnapshotRequest
				return true
			}
		}
		return false
	}, func() string { return fmt.Sprintf("%d control records", c.Count()) })
	return found
}

// RecordLog collects every record of a topic (all partitions, from the start).
type RecordLog struct {
	codec *schemas.Codec
	mu    chan struct{}
	recs  []*kgo.Record
}

func (e *Env) Records(topic string, partitions int32) *RecordLog {
	e.T.Helper()
	assign := map[int32]kgo.Offset{}
	for p := int32(0); p < partitions; p++ {
		assign[p] = kgo.NewOffset().AtStart()
	}
	cl := e.Cluster.Client(e.T, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: assign}))
	l := &RecordLog{codec: e.Codec, mu: make(chan struct{}, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	e.T.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
				l.mu <- struct{}{}
				l.recs = append(l.recs, r)
				<-l.mu
			})
		}
	}()
	return l
}

func (l *RecordLog) Snapshot() []*kgo.Record {
	l.mu <- struct{}{}
	defer func() { <-l.mu }()
	return slices.Clone(l.recs)
}
