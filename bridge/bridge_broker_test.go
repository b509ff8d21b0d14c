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
	if out, err := exec.Command("python3", "-c", "import zmq, msgspec").CombinedOutput(); err != nil {
		t.Fatalf("the engine stand-in needs python3 with pyzmq and msgspec (pip install pyzmq msgspec): %v\n%s", err, out)
	}
	pub, rep := freePort(t), freePort(t)
	e := &engine{t: t, pub: fmt.Sprintf("tcp://127.0.0.1:%d", pub), reply: fmt.Sprintf("tcp://127.0.0.1:%d", rep)}
	e.cmd = exec.Command("python3", "testdata/engine.py", e.pub, e.reply)
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
	t.Cleanup(func() { _ = e.in.Close(); _ = e.cmd.Wait() })
	if got := e.line(); got != "ready" {
		t.Fatalf("engine: %q", got)
	}
	return e
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
	prod := testenv.Client(t, kgo.RecordPartitioner(bridge.KeyPartitioner()))
	b, err := bridge.New(bridge.Params{Config: bridge.Config{Endpoint: e.pub, ReplayEndpoint: e.reply, WorkerID: 7, BlockSize: 4,
		KVTopic: topic, DeadLetterTopic: dlq, IdleRecheck: 100 * time.Millisecond, ReplayRetries: 3, Resume: true},
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
		if c, ok := scope.Snapshot().Counters()["bridge."+name+"+"]; ok {
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
	if c := scope2.Snapshot().Counters()["bridge.engine_restarts+"]; c != nil && c.Value() != 0 {
		t.Fatal("the resumed bridge took its own restart for the engine's")
	}
	e.do("pub 3")
	settle("after resume")
}
