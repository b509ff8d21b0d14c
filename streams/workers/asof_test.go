package workers

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/ckf/producer"
	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/ckf-stream/ckf-stream/streams/relay"
	"github.com/ckf-stream/ckf-stream/testenv"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/uber-go/tally/v4"
)

// produceAt writes evs with the Kafka timestamp ts (a producer's CreateTime).
func (e *env) produceAt(ts time.Time, evs []producer.RouterEvent) {
	e.t.Helper()
	var recs []*kgo.Record
	for _, ev := range evs {
		b, err := e.codec.EncodeKvEvent(relay.KvEventOf(ev))
		if err != nil {
			e.t.Fatal(err)
		}
		recs = append(recs, &kgo.Record{Topic: e.kv, Key: []byte(strconv.FormatUint(uint64(ev.WorkerID), 10)), Value: b, Timestamp: ts})
	}
	if err := e.cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		e.t.Fatal(err)
	}
}

// waitIdle waits until the replica's loop waits for records with every partition read to its
// end, and returns the moment it began to (Unix ns) and a time read just before the wait was
// seen: the replica's as_of is no earlier from then on, as long as nothing is written.
func (run *running) waitIdle(t *testing.T) (since int64, seen time.Time) {
	t.Helper()
	testenv.WaitUntil(t, time.Minute, "the replica waiting, caught up", func() bool {
		seen = time.Now()
		since = run.r.watch.waitingSince.Load()
		return since != 0
	}, func() string { return run.r.Age().AsOf.String() })
	return since, seen
}

// TestAgeMs: a DC's age is the milliseconds from its as_of to the moment asked, 0 on a clock
// behind as_of, and -1 (unknown) without an as_of.
func TestAgeMs(t *testing.T) {
	t.Parallel()
	base := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return base.Add(time.Duration(ms) * time.Millisecond) }
	age := Age{AsOf: at(9000)}
	if a := age.AgeMs(at(12_500)); a != 3500 {
		t.Fatalf("age at 12500: %d ms, want 3500", a)
	}
	if a := age.AgeMs(at(8000)); a != 0 {
		t.Fatalf("a clock behind as_of reads %d ms, want 0", a)
	}
	if a := (Age{}).AgeMs(at(0)); a != -1 {
		t.Fatalf("no as_of: %d, want -1", a)
	}
}

// TestIdleDCReadsFresh: a DC whose engines last wrote an hour ago, and whose KV topic the replica
// has read to its end, is as fresh as the replica's last look at the topic, not an hour old: its
// as_of is no earlier than the replica's start once ready, and no earlier than the moment it is
// asked while the topic stays silent. (Counting from the newest event, the age was an hour.)
func TestIdleDCReadsFresh(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	hourAgo := time.Now().Add(-time.Hour)
	e.produceAt(hourAgo, newTraceGen(5).trace(60))
	started := time.Now()
	run := e.start(e.config())
	run.waitReady(t)
	now := time.Now()
	if a := run.r.Age(); a.AsOf.Before(started) || a.AgeMs(now) > now.Sub(started).Milliseconds() || a.NewestEventMs != hourAgo.UnixMilli() {
		t.Fatalf("ready: as_of %v before the start %v (age %d ms; the newest event, %d ms old, is not the DC's age)",
			a.AsOf, started, a.AgeMs(now), now.Sub(hourAgo).Milliseconds())
	}
	_, seen := run.waitIdle(t)
	if a := run.r.Age(); a.AsOf.Before(seen) {
		t.Fatalf("silent topic read to its end: as_of %v, before the replica was seen waiting at %v", a.AsOf, seen)
	}
}

// TestLaggingReplicaKeepsItsBound: a replica held before applying a record written after it
// caught up (as a slow replica is) reflects the DC only up to the moment it last found nothing to
// read, however late it is asked, so its age grows; once the record is applied and the topic is
// silent again, it is fresh again. The record's own timestamp (an hour old) does not count as the
// replica's progress.
func TestLaggingReplicaKeepsItsBound(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	hourAgo := time.Now().Add(-time.Hour)
	run := startHeld(t, e, Params{}, func(rec *kgo.Record) bool { return rec.Timestamp.Before(hourAgo.Add(time.Second)) }, nil)
	r := run.r
	run.waitReady(t)
	since, _ := run.waitIdle(t)
	written := time.Now()
	e.produceAt(hourAgo, newTraceGen(5).trace(1))
	acked := time.Now() // the record was appended between written and acked
	run.waitHeld(t)
	a := r.Age()
	if a.AsOf.UnixMicro() < since/1000 || !a.AsOf.Before(acked) {
		t.Fatalf("lagging: as_of %v, want the moment it last found nothing to read (%v, or a later wait's), before the write's ack at %v", a.AsOf, time.Unix(0, since), acked)
	}
	later := acked.Add(time.Hour)
	if age := a.AgeMs(later); age < time.Hour.Milliseconds() {
		t.Fatalf("asked an hour after the write: age %d ms, want at least an hour", age)
	}
	if again := r.Age(); !again.AsOf.Equal(a.AsOf) {
		t.Fatalf("still held: as_of moved from %v to %v", a.AsOf, again.AsOf)
	}
	run.release()
	run.waitApplied(t, 1)
	run.waitIdle(t)
	if a := r.Age(); a.AsOf.Before(written) {
		t.Fatalf("caught up again: as_of %v, before the write at %v", a.AsOf, written)
	}
}

// TestLostHistoryDegradesUntilAFullClear: a clear written in place of lost engine history
// (schemas.HeaderLostHistory) leaves its source degraded, which a checkpoint keeps across a
// restart; a clear without the mark makes it whole again.
func TestLostHistoryDegradesUntilAFullClear(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	g := newTraceGen(3)
	evs := g.trace(50)
	e.produce(evs)
	clear := func(lost bool) {
		t.Helper()
		ev := producer.RouterEvent{WorkerID: evs[0].WorkerID, Residency: producer.ResidencyWorker, Event: producer.KvCacheEvent{Kind: producer.KvEventCleared}}
		b, err := e.codec.EncodeKvEvent(relay.KvEventOf(ev))
		if err != nil {
			t.Fatal(err)
		}
		rec := &kgo.Record{Topic: e.kv, Key: []byte(strconv.FormatUint(uint64(ev.WorkerID), 10)), Value: b}
		if lost {
			rec.Headers = []kgo.RecordHeader{{Key: schemas.HeaderLostHistory, Value: make([]byte, 16)}}
		}
		if err := e.cl.ProduceSync(context.Background(), rec).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	clear(true)
	cfg := e.config()
	cfg.CheckpointInterval = time.Millisecond
	a := e.start(cfg)
	a.waitReady(t)
	if s := a.r.Status(); s.DegradedSources != 1 || a.r.DegradedSources() != 1 {
		t.Fatalf("after a lost-history clear: %d degraded sources, want 1", s.DegradedSources)
	}
	testenv.WaitUntil(t, time.Minute, "a checkpoint of every record", func() bool { return a.r.Status().CheckpointApplied == uint64(len(evs)+1) })
	a.stop()

	b := e.start(e.config())
	b.waitReady(t)
	if s := b.r.Status(); !s.Restored || s.DegradedSources != 1 {
		t.Fatalf("restored: %+v, want 1 degraded source kept by the checkpoint", s)
	}
	clear(false)
	b.waitApplied(t, 1)
	if n := b.r.DegradedSources(); n != 0 {
		t.Fatalf("after a clear without the mark: %d degraded sources, want 0", n)
	}
}

// TestAgeGaugeWhileTheLoopIsHeld: ckf_workers_age_seconds is set on a goroutine of its own, so
// while the loop is held before applying a record (a slow apply, a stuck fetch) the gauge keeps
// stating the age an answer would state, here an hour on by the replica's clock, instead of
// freezing at the last value the loop left; while the replica idles caught up it reads fresh.
func TestAgeGaugeWhileTheLoopIsHeld(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	scope := tally.NewTestScope("ckf", nil)
	var skew atomic.Int64 // the replica's clock runs this far ahead once the loop is held
	run := startHeld(t, e, Params{Metrics: scope}, func(*kgo.Record) bool { return true },
		func() time.Time { return time.Now().Add(time.Duration(skew.Load())) })
	gauge := func() (float64, bool) {
		g, ok := scope.Snapshot().Gauges()["ckf.workers.age_seconds+"]
		if !ok {
			return 0, false
		}
		return g.Value(), true
	}
	run.waitReady(t)
	run.waitIdle(t)
	testenv.WaitUntil(t, time.Minute, "the age gauge set, under a minute while the replica idles caught up", func() bool {
		v, ok := gauge()
		return ok && v < 60
	})
	e.produce(newTraceGen(5).trace(1))
	run.waitHeld(t)
	skew.Store(int64(time.Hour))
	testenv.WaitUntil(t, time.Minute, "the age gauge at an hour or more while the loop is held", func() bool {
		v, _ := gauge()
		return v >= 3600
	}, func() string { v, ok := gauge(); return fmt.Sprintf("gauge %v (set %v)", v, ok) })
}

// heldReplica runs a replica whose loop stops before applying a record that hold selects, until
// the test releases it (at the latest when the test ends), as a slow or stuck replica does.
type heldReplica struct {
	*running
	held    chan struct{}
	release func()
}

// startHeld starts a replica of e with p (its configuration, codec and clients e's) whose loop
// holds before every record hold selects; clock, when not nil, is the replica's clock.
func startHeld(t *testing.T, e *env, p Params, hold func(*kgo.Record) bool, clock func() time.Time) *heldReplica {
	t.Helper()
	p.Config, p.Codec = e.config(), e.codec
	p.ClientOptsFor = func(string) []kgo.Opt { return []kgo.Opt{kgo.SeedBrokers(e.c.Seeds()...)} }
	r, err := New(p)
	if err != nil {
		t.Fatal(err)
	}
	if clock != nil {
		r.now = clock
	}
	held, released := make(chan struct{}, 1), make(chan struct{})
	var once sync.Once
	h := &heldReplica{held: held, release: func() { once.Do(func() { close(released) }) }}
	r.beforeApply = func(rec *kgo.Record) {
		if hold(rec) {
			held <- struct{}{}
			<-released
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	h.running = &running{r: r, cancel: cancel, done: make(chan error, 1)}
	go func() { h.done <- r.Run(ctx) }()
	t.Cleanup(func() {
		h.release()
		h.stop()
	})
	return h
}

// waitHeld waits until the loop holds a record.
func (h *heldReplica) waitHeld(t *testing.T) {
	t.Helper()
	select {
	case <-h.held:
	case err := <-h.done:
		t.Fatalf("replica stopped: %v", err)
	case <-time.After(time.Minute):
		t.Fatal("the record never reached the replica")
	}
}
