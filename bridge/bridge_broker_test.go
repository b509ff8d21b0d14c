package bridge_test

import (
	"bufio"
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"os/exec"
	"slices"
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
	t     *testing.T
	cmd   *exec.Cmd
	in    io.WriteCloser
	out   *bufio.Scanner
	pub   string
	reply string
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func startEngine(t *testing.T) *engine {
	t.Helper()
	pub, rep := freePort(t), freePort(t)
	return startEngineAt(t, fmt.Sprintf("tcp://127.0.0.1:%d", pub), fmt.Sprintf("tcp://127.0.0.1:%d", rep), false)
}

// startEngineAt starts the stand-in on the given endpoints; connect makes its PUB socket
// connect (the bridge binds).
func startEngineAt(t *testing.T, pubEP, replayEP string, connect bool) *engine {
	t.Helper()
	if out, err := exec.Command("python3", "-c", "import zmq, msgspec").CombinedOutput(); err != nil {
		t.Fatalf("the engine stand-in needs python3 with pyzmq and msgspec (pip install pyzmq msgspec): %v\n%s", err, out)
	}
	e := &engine{t: t, pub: pubEP, reply: replayEP}
	args := []string{"testdata/engine.py", e.pub, e.reply}
	if connect {
		args = append(args, "connect")
	}
	e.cmd = exec.Command("python3", args...)
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

// written rebuilds, from the worker's records in Kafka, the blocks the relay will hold.
func written(t *testing.T, opts []kgo.Opt, codec *schemas.Codec, topic string) []uint64 {
	t.Helper()
	conv := bridge.NewConverter(7, 4, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := bridge.ReadBack(ctx, opts, codec, topic, 7, conv); err != nil {
		t.Fatal(err)
	}
	return conv.HeldHashes(0)
}

type runningBridge struct {
	cancel context.CancelFunc
	done   chan error
	b      *bridge.Bridge
}

func runBridge(t *testing.T, e *engine, opts []kgo.Opt, codec *schemas.Codec, topic, dlq string, scope tally.Scope) *runningBridge {
	t.Helper()
	return runBridgeWith(t, bridge.Config{Endpoint: e.pub, ReplayEndpoint: e.reply}, opts, codec, topic, dlq, scope)
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

	// An undecodable batch is dead-lettered with its raw bytes and does not stop the stream.
	e.do("junk")
	e.do("pub 2")
	settle("after an undecodable batch")
	cl := testenv.Client(t, kgo.ConsumeTopics(dlq), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	fs := cl.PollFetches(ctx)
	if err := fs.Err0(); err != nil {
		t.Fatal(err)
	}
	recs := fs.Records()
	if len(recs) != 1 {
		t.Fatalf("%d dead letters", len(recs))
	}
	dl, err := codec.DecodeDeadLetter(recs[0].Value)
	if err != nil || string(dl.Value) != "\xc1not msgpack" || dl.Component != "bridge" || dl.ReasonCode != schemas.DeadLetterMalformed ||
		!strings.Contains(dl.Reason, "malformed") {
		t.Fatalf("dead letter %+v, %v", dl, err)
	}
}

// TestBridgeBindModeEngineProcessRestart: with bridge.bind the engine's PUB socket connects to
// the bridge (vLLM's deployment for an endpoint without a wildcard). When the engine process
// is killed and started again on the same endpoints, the bridge reopens its socket, sees the
// sequence start again, clears the worker and follows the new process.
func TestBridgeBindModeEngineProcessRestart(t *testing.T) {
	topic := testenv.NewTopic(t, 2)
	dlq := testenv.NewTopic(t, 1)
	codec, err := schemas.NewCodec(context.Background(), schemas.Topic(schemas.TypeKvEvent, topic), schemas.Topic(schemas.TypeDeadLetter, dlq))
	if err != nil {
		t.Fatal(err)
	}
	opts := []kgo.Opt{kgo.SeedBrokers(testenv.Brokers(t)...)}
	pubEP, replayEP := fmt.Sprintf("tcp://127.0.0.1:%d", freePort(t)), fmt.Sprintf("tcp://127.0.0.1:%d", freePort(t))
	scope := tally.NewTestScope("", nil)
	runBridgeWith(t, bridge.Config{Endpoint: pubEP, ReplayEndpoint: replayEP, Bind: true}, opts, codec, topic, dlq, scope)
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
