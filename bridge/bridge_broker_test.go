package bridge_test

import (
	"bufio"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/bridge"
	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/ckf-stream/ckf-stream/testenv"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/uber-go/tally/v4"
	"github.com/zeebo/xxh3"
)

// engine drives testdata/engine.py, a Python (pyzmq, msgspec) publisher in vLLM's wire format.
type engine struct {
	t     testing.TB
	cmd   *exec.Cmd
	in    io.WriteCloser
	out   *bufio.Scanner
	pub   string
	reply string
}

func startEngine(t *testing.T) *engine {
	t.Helper()
	ps := testenv.FreePorts(t, 2)
	pub, rep := ps[0], ps[1]
	return startEngineAt(t, fmt.Sprintf("tcp://127.0.0.1:%d", pub), fmt.Sprintf("tcp://127.0.0.1:%d", rep), false)
}

func startEngineB(b *testing.B) *engine {
	b.Helper()
	ps := testenv.FreePorts(b, 2)
	return startEngineArgs(b, fmt.Sprintf("tcp://127.0.0.1:%d", ps[0]), fmt.Sprintf("tcp://127.0.0.1:%d", ps[1]))
}

// startEngineRank starts the publisher of one data-parallel rank (its batches name the rank).
func startEngineRank(t *testing.T, pubEP, replayEP string, rank int) *engine {
	t.Helper()
	return startEngineArgs(t, pubEP, replayEP, "bind", strconv.Itoa(rank))
}

// startEngineAt starts the stand-in on the given endpoints; connect makes its PUB socket
// connect (the bridge binds).
func startEngineAt(t *testing.T, pubEP, replayEP string, connect bool) *engine {
	t.Helper()
	if connect {
		return startEngineArgs(t, pubEP, replayEP, "connect")
	}
	return startEngineArgs(t, pubEP, replayEP)
}

func startEngineArgs(t testing.TB, pubEP, replayEP string, extra ...string) *engine {
	t.Helper()
	py := enginePython(t)
	e := &engine{t: t, pub: pubEP, reply: replayEP}
	args := append([]string{"testdata/engine.py", e.pub, e.reply}, extra...)
	e.cmd = exec.Command(py, args...)
	var err error
	if e.in, err = e.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := e.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	e.out = bufio.NewScanner(stdout)
	e.out.Buffer(nil, 1<<24)
	if err := e.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.stop)
	if got := e.line(); got != "ready" {
		t.Fatalf("engine: %q", got)
	}
	return e
}

// enginePython returns the python that runs the stand-in: the engine emulators' pinned virtual
// environment when the repository has one (testenv/engine/venv.sh), else python3, which must
// then have pyzmq and msgspec (.ci/run installs them).
func enginePython(t testing.TB) string {
	t.Helper()
	py := "python3"
	if _, err := os.Stat("../testenv/engine/venv.sh"); err == nil {
		out, err := exec.Command("bash", "../testenv/engine/venv.sh").Output()
		if err != nil {
			t.Fatalf("testenv/engine/venv.sh: %v", err)
		}
		py = strings.TrimSpace(string(out))
	}
	if out, err := exec.Command(py, "-c", "import zmq, msgspec").CombinedOutput(); err != nil {
		t.Fatalf("the engine stand-in needs %s with pyzmq and msgspec (pip install pyzmq msgspec): %v\n%s", py, err, out)
	}
	return py
}

// stop ends the engine process (closing its stdin) and waits for it; a second stop is a no-op.
func (e *engine) stop() {
	if e.cmd.ProcessState == nil {
		_ = e.in.Close()
		_ = e.cmd.Wait()
	}
}

func (e *engine) line() string {
	e.t.Helper()
	if !e.out.Scan() {
		e.t.Fatalf("engine exited: %v", e.out.Err())
	}
	return e.out.Text()
}

func (e *engine) do(cmd string) string {
	e.t.Helper()
	if _, err := fmt.Fprintln(e.in, cmd); err != nil {
		e.t.Fatal(err)
	}
	return e.line()
}

// held returns the engine's device-resident blocks as the bridge names them.
func (e *engine) held() []uint64 {
	e.t.Helper()
	var out []uint64
	for _, h := range strings.Fields(e.do("state")) {
		b, err := hex.DecodeString(h)
		if err != nil {
			e.t.Fatal(err)
		}
		out = append(out, xxh3.Hash(b))
	}
	slices.Sort(out)
	return out
}

// written rebuilds, from the worker's records in Kafka, the blocks the relay will hold (rank 0).
func written(t *testing.T, opts []kgo.Opt, codec *schemas.Codec, topic string) []uint64 {
	t.Helper()
	return writtenRanks(t, opts, codec, topic, 1)[0]
}

// writtenRanks is written for ranks 0..n-1.
func writtenRanks(t *testing.T, opts []kgo.Opt, codec *schemas.Codec, topic string, n int) [][]uint64 {
	t.Helper()
	conv := bridge.NewConverter(7, 4, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := bridge.ReadBack(ctx, opts, codec, topic, 7, conv); err != nil {
		t.Fatal(err)
	}
	out := make([][]uint64, n)
	for r := range out {
		out[r] = conv.HeldHashes(uint32(r))
	}
	return out
}

type runningBridge struct {
	cancel context.CancelFunc
	done   chan error
	b      *bridge.Bridge
}

func runBridge(t *testing.T, e *engine, opts []kgo.Opt, codec *schemas.Codec, topic, dlq string, scope tally.Scope) *runningBridge {
	t.Helper()
	return runBridgeWith(t, defaulted(bridge.Config{Endpoint: e.pub, ReplayEndpoint: e.reply}), opts, codec, topic, dlq, scope)
}

func runBridgeWith(t *testing.T, cfg bridge.Config, opts []kgo.Opt, codec *schemas.Codec, topic, dlq string, scope tally.Scope) *runningBridge {
	t.Helper()
	prod := testenv.Client(t, kgo.RecordPartitioner(bridge.KeyPartitioner()))
	cfg.WorkerID, cfg.BlockSize, cfg.KVTopic, cfg.DeadLetterTopic = 7, 4, topic, dlq
	cfg.IdleRecheck, cfg.ReplayRetries, cfg.Resume = 100*time.Millisecond, 3, true
	b, err := bridge.New(bridge.Params{Config: cfg,
		Codec: codec, Producer: prod, ConsumerOpts: opts, Metrics: scope})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	rb := &runningBridge{cancel: cancel, done: make(chan error, 1), b: b}
	go func() { rb.done <- b.Run(ctx) }()
	t.Cleanup(rb.stop)
	testenv.WaitUntil(t, 30*time.Second, "bridge ready", func() bool { return b.Ready() == nil })
	return rb
}

func (rb *runningBridge) stop() {
	rb.cancel()
	<-rb.done
	rb.done <- nil // a second stop returns at once
}

// TestBridgeOnBroker runs the bridge between the Python engine stand-in (real ZeroMQ: PUB/SUB
// and ROUTER/DEALER against libzmq) and the real broker: batches sent before the bridge
// subscribed and batches dropped on the PUB socket come from the replay socket, an engine
// restart clears the worker, and a restarted bridge resumes from its records in Kafka. After
// each step the blocks the worker's records leave held equal the engine's device cache.
func TestBridgeOnBroker(t *testing.T) {
	topic := testenv.NewTopic(t, 4)
	dlq := testenv.NewTopic(t, 1)
	codec, err := schemas.NewCodec(context.Background(), schemas.Topic(schemas.TypeKvEvent, topic), schemas.Topic(schemas.TypeDeadLetter, dlq))
	if err != nil {
		t.Fatal(err)
	}
	opts := []kgo.Opt{kgo.SeedBrokers(testenv.Brokers(t)...)}
	e := startEngine(t)
	e.do("pub 20") // before any subscriber: only the replay socket has them
	scope := tally.NewTestScope("", nil)
	counter := func(name string) int64 {
		if c, ok := scope.Snapshot().Counters()["bridge."+name+"_total+"]; ok {
			return c.Value()
		}
		return 0
	}
	rb := runBridge(t, e, opts, codec, topic, dlq, scope)
	settle := func(what string) {
		t.Helper()
		want := e.held()
		var got []uint64
		testenv.WaitUntilEvery(t, 100*time.Millisecond, 60*time.Second, what, func() bool {
			got = written(t, opts, codec, topic)
			return slices.Equal(got, want)
		}, func() string { return fmt.Sprintf("written %d blocks, engine holds %d", len(got), len(want)) })
	}
	settle("history from before the subscription")
	e.do("pub 10")
	e.do("drop 5") // lost on the PUB socket, final: only the idle re-check finds them
	settle("dropped final batches")
	e.do("drop 3")
	e.do("pub 4") // a gap before live batches
	settle("gap before live batches")
	e.do("restart")
	e.do("pub 6")
	settle("engine restart")
	if counter("engine_restarts") != 1 || counter("replayed_batches") < 28 || counter("lost_batches") != 0 || counter("dead_letters") != 0 {
		t.Fatalf("restarts %d, replayed %d, lost %d, dead letters %d", counter("engine_restarts"),
			counter("replayed_batches"), counter("lost_batches"), counter("dead_letters"))
	}
	rb.stop()
	e.do("pub 7") // while the bridge is down
	scope2 := tally.NewTestScope("", nil)
	runBridge(t, e, opts, codec, topic, dlq, scope2)
	settle("bridge restart resumes")
	if c := scope2.Snapshot().Counters()["bridge.engine_restarts_total+"]; c != nil && c.Value() != 0 {
		t.Fatal("the resumed bridge took its own restart for the engine's")
	}
	e.do("pub 3")
	settle("after resume")

	// An undecodable batch and a batch of another block size are dead-lettered with their raw
	// bytes and do not stop the stream.
	e.do("junk")
	e.do("badsize")
	e.do("pub 2")
	settle("after an undecodable batch and a refused one")
	cl := testenv.Client(t, kgo.ConsumeTopics(dlq), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var recs []*kgo.Record
	testenv.WaitUntil(t, 30*time.Second, "two dead letters", func() bool {
		recs = append(recs, cl.PollRecords(ctx, 0).Records()...)
		return len(recs) >= 2
	}, func() string { return fmt.Sprintf("%d dead letters", len(recs)) })
	if len(recs) != 2 {
		t.Fatalf("%d dead letters", len(recs))
	}
	dl, err := codec.DecodeDeadLetter(recs[0].Value)
	if err != nil || string(dl.Value) != "\xc1not msgpack" || dl.Component != "bridge" || dl.ReasonCode != schemas.DeadLetterMalformed ||
		!strings.Contains(dl.Reason, "malformed") {
		t.Fatalf("dead letter %+v, %v", dl, err)
	}
	dl, err = codec.DecodeDeadLetter(recs[1].Value)
	if err != nil || dl.ReasonCode != schemas.DeadLetterRejected || !strings.Contains(dl.Reason, "block size") || len(dl.Value) == 0 {
		t.Fatalf("refused batch's dead letter %+v, %v", dl, err)
	}
}

// TestBridgeBindModeEngineProcessRestart: with bridge.bind the engine's PUB socket connects to
// the bridge (vLLM's deployment for an endpoint without a wildcard). When the engine process
// is killed and started again on the same endpoints, the new process connects to the bridge's
// socket (still bound), the bridge sees the sequence start again, clears the worker and follows
// the new process.
func TestBridgeBindModeEngineProcessRestart(t *testing.T) {
	topic := testenv.NewTopic(t, 2)
	dlq := testenv.NewTopic(t, 1)
	codec, err := schemas.NewCodec(context.Background(), schemas.Topic(schemas.TypeKvEvent, topic), schemas.Topic(schemas.TypeDeadLetter, dlq))
	if err != nil {
		t.Fatal(err)
	}
	opts := []kgo.Opt{kgo.SeedBrokers(testenv.Brokers(t)...)}
	ps := testenv.FreePorts(t, 2)
	pubEP, replayEP := fmt.Sprintf("tcp://127.0.0.1:%d", ps[0]), fmt.Sprintf("tcp://127.0.0.1:%d", ps[1])
	scope := tally.NewTestScope("", nil)
	runBridgeWith(t, defaulted(bridge.Config{Endpoint: pubEP, ReplayEndpoint: replayEP, Bind: true}), opts, codec, topic, dlq, scope)
	settle := func(e *engine, what string) {
		t.Helper()
		want := e.held()
		var got []uint64
		testenv.WaitUntilEvery(t, 100*time.Millisecond, 60*time.Second, what, func() bool {
			got = written(t, opts, codec, topic)
			return slices.Equal(got, want)
		}, func() string { return fmt.Sprintf("written %d blocks, engine holds %d", len(got), len(want)) })
	}
	e := startEngineAt(t, pubEP, replayEP, true)
	e.do("pub 12")
	settle(e, "engine connecting to the bound bridge")
	_ = e.cmd.Process.Kill()
	e.stop()
	e2 := startEngineAt(t, pubEP, replayEP, true)
	e2.do("pub 5")
	settle(e2, "new engine process")
	if c := scope.Snapshot().Counters()["bridge.engine_restarts_total+"]; c == nil || c.Value() != 1 {
		t.Fatalf("engine restarts: %v", c)
	}
}

// TestBridgeRanks: one bridge follows an engine's two data-parallel ranks (ports base and
// base+1, each with its own sequence numbers and replay socket); each rank's records carry its
// rank and leave held exactly that rank's device cache.
func TestBridgeRanks(t *testing.T) {
	topic := testenv.NewTopic(t, 2)
	dlq := testenv.NewTopic(t, 1)
	codec, err := schemas.NewCodec(context.Background(), schemas.Topic(schemas.TypeKvEvent, topic), schemas.Topic(schemas.TypeDeadLetter, dlq))
	if err != nil {
		t.Fatal(err)
	}
	opts := []kgo.Opt{kgo.SeedBrokers(testenv.Brokers(t)...)}
	pub, rep := testenv.FreePortRun(t, 2), testenv.FreePortRun(t, 2)
	var engines []*engine
	for r := 0; r < 2; r++ {
		engines = append(engines, startEngineRank(t, fmt.Sprintf("tcp://127.0.0.1:%d", pub+r), fmt.Sprintf("tcp://127.0.0.1:%d", rep+r), r))
	}
	engines[0].do("pub 6")
	engines[1].do("pub 9")
	runBridgeWith(t, defaulted(bridge.Config{Endpoint: fmt.Sprintf("tcp://127.0.0.1:%d", pub), ReplayEndpoint: fmt.Sprintf("tcp://127.0.0.1:%d", rep), Ranks: 2}),
		opts, codec, topic, dlq, nil)
	engines[0].do("pub 2")
	engines[1].do("drop 2")
	want := [][]uint64{engines[0].held(), engines[1].held()}
	var got [][]uint64
	testenv.WaitUntilEvery(t, 100*time.Millisecond, 60*time.Second, "both ranks written", func() bool {
		got = writtenRanks(t, opts, codec, topic, 2)
		return slices.Equal(got[0], want[0]) && slices.Equal(got[1], want[1])
	}, func() string {
		return fmt.Sprintf("written %d+%d blocks, engine holds %d+%d", len(got[0]), len(got[1]), len(want[0]), len(want[1]))
	})
}

// BenchmarkBridgeWithEngine measures the bridge end to end with the Python engine stand-in on
// the same machine: b.N batches published at the engine's pace (a burst), decoded, converted and
// produced to the real broker, until the last record is acknowledged. events/s counts engine
// events; batches that the PUB socket dropped come from the replay socket and count too.
func BenchmarkBridgeWithEngine(b *testing.B) {
	topic := testenv.NewTopic(b, 4)
	dlq := testenv.NewTopic(b, 1)
	codec, err := schemas.NewCodec(context.Background(), schemas.Topic(schemas.TypeKvEvent, topic), schemas.Topic(schemas.TypeDeadLetter, dlq))
	if err != nil {
		b.Fatal(err)
	}
	e := startEngineB(b)
	scope := tally.NewTestScope("", nil)
	prod := testenv.Client(b, kgo.RecordPartitioner(bridge.KeyPartitioner()))
	br, err := bridge.New(bridge.Params{Config: defaulted(bridge.Config{Endpoint: e.pub, ReplayEndpoint: e.reply, WorkerID: 7, BlockSize: 4,
		KVTopic: topic, DeadLetterTopic: dlq, IdleRecheck: 100 * time.Millisecond, ReplayRetries: 3}),
		Codec: codec, Producer: prod, Metrics: scope})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- br.Run(ctx) }()
	defer func() { cancel(); <-done }()
	testenv.WaitUntil(b, 30*time.Second, "bridge ready", func() bool { return br.Ready() == nil })
	counter := func(name string) int64 {
		var n int64
		for k, c := range scope.Snapshot().Counters() {
			if strings.HasPrefix(k, "bridge."+name+"+") {
				n += c.Value()
			}
		}
		return n
	}
	// Warm up until the subscription is in place (a PUB socket drops what it sends before).
	e.do("pub 10")
	testenv.WaitUntil(b, 30*time.Second, "warm-up batches handled", func() bool { return counter("batches_total") >= 10 })
	events0 := counter("events_total")
	b.ResetTimer()
	e.do(fmt.Sprintf("pub %d", b.N))
	testenv.WaitUntil(b, 10*time.Minute, "every batch handled", func() bool { return counter("batches_total") >= int64(b.N)+10 })
	if err := prod.Flush(context.Background()); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	events := counter("events_total") - events0
	b.ReportMetric(float64(events)/b.Elapsed().Seconds(), "events/s")
	b.ReportMetric(float64(counter("replayed_batches_total")), "replayed")
	b.ReportMetric(float64(counter("lost_batches_total")), "lost")
	b.ReportMetric(float64(counter("gaps_total")), "gaps")
	b.ReportMetric(float64(counter("socket_reopens_total")), "reopens")
	b.ReportMetric(float64(counter("buffer_full_total")), "buffer-full")
}

// TestBridgeCrashMidStream: a bridge whose producer dies mid-stream (records buffered and not
// acknowledged are gone, as with kill -9) is replaced by a new one, which reads the worker's
// records back, verifies the engine by the last batch written whole, and writes the rest from
// the replay buffer: the records leave held exactly the engine's cache. The new bridge's first
// replay (the whole buffer, from 0) is far beyond the engine's high-water mark: on a loaded
// machine the ROUTER socket drops part of it, and nothing may be reported lost for that.
func TestBridgeCrashMidStream(t *testing.T) {
	topic := testenv.NewTopic(t, 4)
	dlq := testenv.NewTopic(t, 1)
	codec, err := schemas.NewCodec(context.Background(), schemas.Topic(schemas.TypeKvEvent, topic), schemas.Topic(schemas.TypeDeadLetter, dlq))
	if err != nil {
		t.Fatal(err)
	}
	opts := []kgo.Opt{kgo.SeedBrokers(testenv.Brokers(t)...)}
	e := startEngine(t)
	scope := tally.NewTestScope("", nil)
	prod, err := kgo.NewClient(kgo.SeedBrokers(testenv.Brokers(t)...), kgo.RecordPartitioner(bridge.KeyPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	b, err := bridge.New(bridge.Params{Config: defaulted(bridge.Config{Endpoint: e.pub, ReplayEndpoint: e.reply, WorkerID: 7, BlockSize: 4,
		KVTopic: topic, DeadLetterTopic: dlq, IdleRecheck: 100 * time.Millisecond, ReplayRetries: 3, Resume: true}),
		Codec: codec, Producer: prod, ConsumerOpts: opts, Metrics: scope})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx) }()
	testenv.WaitUntil(t, 30*time.Second, "bridge ready", func() bool { return b.Ready() == nil })
	handled := func() int64 {
		if c := scope.Snapshot().Counters()["bridge.batches_total+"]; c != nil {
			return c.Value()
		}
		return 0
	}
	// 8,000 batches: the engine's replay buffer (10,000) still holds all of them when the new
	// bridge asks.
	e.do("pub 8000")
	testenv.WaitUntil(t, time.Minute, "the bridge mid-stream", func() bool { return handled() >= 1000 })
	prod.Close() // the crash: what the producer still buffers is never written
	cancel()
	<-done
	if slices.Equal(written(t, opts, codec, topic), e.held()) {
		t.Fatal("the first bridge wrote everything before the crash: nothing left to resume")
	}
	e.do("pub 50")
	scope2 := tally.NewTestScope("", nil)
	runBridge(t, e, opts, codec, topic, dlq, scope2)
	want := e.held()
	var got []uint64
	counter := func(name string) int64 {
		if c := scope2.Snapshot().Counters()["bridge."+name+"+"]; c != nil {
			return c.Value()
		}
		return 0
	}
	// Reading the topic back decodes every record written so far: done on every poll, it took
	// the CPU the new bridge needed on a loaded machine (make test's packages beside it), and the
	// catch-up ran past the bound. So the topic is read only once the bridge has been idle for a
	// poll (its batch count unchanged), which it is once it has caught up.
	lastHandled := int64(-1)
	testenv.WaitUntilEvery(t, 250*time.Millisecond, 3*time.Minute, "the new bridge catches up", func() bool {
		if n := counter("lost_batches_total"); n != 0 {
			// A clear for lost history was written: the records can no longer match the engine.
			t.Fatalf("the new bridge lost %d batches (replayed %d, %d replay retries)", n, counter("replayed_batches_total"), counter("replay_retries_total"))
		}
		n := counter("batches_total")
		if busy := n != lastHandled; busy {
			lastHandled = n
			return false
		}
		got = written(t, opts, codec, topic)
		return slices.Equal(got, want)
	}, func() string {
		return fmt.Sprintf("written %d blocks, engine holds %d; the new bridge handled %d batches, %d of them replayed, with %d replay retries",
			len(got), len(want), counter("batches_total"), counter("replayed_batches_total"), counter("replay_retries_total"))
	})
	if n := counter("lost_batches_total"); n != 0 {
		t.Fatalf("the new bridge lost %d batches", n)
	}
	if counter("replayed_batches_total") == 0 {
		t.Fatal("the new bridge replayed nothing")
	}
}

// BenchmarkBridgeGapFill measures filling a gap from the replay socket: b.N batches (at most
// 9,000, inside the engine's 10,000-batch buffer) are lost on the PUB socket, then one live
// batch reveals the gap; the time runs until every batch is handled and acknowledged.
func BenchmarkBridgeGapFill(b *testing.B) {
	gap := min(b.N, 9000)
	topic := testenv.NewTopic(b, 4)
	dlq := testenv.NewTopic(b, 1)
	codec, err := schemas.NewCodec(context.Background(), schemas.Topic(schemas.TypeKvEvent, topic), schemas.Topic(schemas.TypeDeadLetter, dlq))
	if err != nil {
		b.Fatal(err)
	}
	e := startEngineB(b)
	scope := tally.NewTestScope("", nil)
	prod := testenv.Client(b, kgo.RecordPartitioner(bridge.KeyPartitioner()))
	br, err := bridge.New(bridge.Params{Config: defaulted(bridge.Config{Endpoint: e.pub, ReplayEndpoint: e.reply, WorkerID: 7, BlockSize: 4,
		KVTopic: topic, DeadLetterTopic: dlq, ReplayRetries: 3}),
		Codec: codec, Producer: prod, Metrics: scope})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- br.Run(ctx) }()
	defer func() { cancel(); <-done }()
	testenv.WaitUntil(b, 30*time.Second, "bridge ready", func() bool { return br.Ready() == nil })
	counter := func(name string) int64 {
		if c := scope.Snapshot().Counters()["bridge."+name+"+"]; c != nil {
			return c.Value()
		}
		return 0
	}
	e.do("pub 10")
	testenv.WaitUntil(b, 30*time.Second, "warm-up batches handled", func() bool { return counter("batches_total") >= 10 })
	e.do(fmt.Sprintf("drop %d", gap))
	b.ResetTimer()
	e.do("pub 1")
	testenv.WaitUntil(b, 10*time.Minute, "the gap filled", func() bool { return counter("batches_total") >= int64(gap)+11 })
	if err := prod.Flush(context.Background()); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	b.ReportMetric(float64(counter("replayed_batches_total"))/b.Elapsed().Seconds(), "replayed-batches/s")
	b.ReportMetric(float64(counter("lost_batches_total")), "lost")
}

// TestBridgeStopsWhileDialling: a bridge waiting for an engine that is not up stops cleanly
// (its context's error, not a socket error) and was never ready.
func TestBridgeStopsWhileDialling(t *testing.T) {
	prod := testenv.Client(t)
	codec, err := schemas.NewCodec(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	b, err := bridge.New(bridge.Params{Config: defaulted(bridge.Config{Endpoint: fmt.Sprintf("tcp://127.0.0.1:%d", testenv.FreePort(t)), WorkerID: 7,
		KVTopic: "unused", DeadLetterTopic: "unused"}), Codec: codec, Producer: prod})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx) }()
	if b.Ready() == nil {
		t.Fatal("ready before the engine answered")
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Run returned %v", err)
	}
}
