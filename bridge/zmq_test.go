package bridge

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/bridge/engineemu"
	"github.com/ckf-stream/ckf-stream/bridge/kvevents"
	"github.com/ckf-stream/ckf-stream/testenv"
	"github.com/go-zeromq/zmq4"
	"github.com/vmihailenco/msgpack/v5"
)

func TestRankEndpoint(t *testing.T) {
	for _, c := range []struct {
		ep   string
		rank int
		want string
	}{
		{"tcp://engine:5557", 0, "tcp://engine:5557"},
		{"tcp://engine:5557", 3, "tcp://engine:5560"},
		{"tcp://*:5557", 1, "tcp://*:5558"},
		{"tcp://[::1]:5557", 2, "tcp://[::1]:5559"},
		{"ipc:///tmp/kv", 1, "ipc:///tmp/kv_dp1"},
		{"", 4, ""},
	} {
		got, err := RankEndpoint(c.ep, c.rank)
		if err != nil || got != c.want {
			t.Errorf("RankEndpoint(%q, %d) = %q, %v; want %q", c.ep, c.rank, got, err, c.want)
		}
	}
	for _, bad := range []string{"tcp://engine", "tcp://engine:port", "udp://e:1"} {
		if _, err := RankEndpoint(bad, 1); err == nil {
			t.Errorf("RankEndpoint(%q, 1) accepted", bad)
		}
	}
	if got := listenAddr("tcp://*:5557"); got != "tcp://0.0.0.0:5557" {
		t.Errorf("listenAddr = %q", got)
	}
}

// Every framing a released engine's replay socket sends, as a DEALER receives it (README.md,
// "The engines' protocol"), yields the batch's sequence and payload, and every end marker the
// end of the replay.
func TestParseReplyEveryReleasedFraming(t *testing.T) {
	seq, payload, end := kvevents.SeqFrame(42), []byte{0x92, 0xcb}, kvevents.SeqFrame(kvevents.EndOfReplay)
	for _, c := range []struct {
		name         string
		reply, final [][]byte
	}{
		{"vLLM before v0.26 and SGLang: delimiter, seq, payload", [][]byte{{}, seq, payload}, [][]byte{{}, end, {}}},
		{"vLLM v0.26 and later: delimiter, topic, seq, payload", [][]byte{{}, []byte("kv@pod@m"), seq, payload}, [][]byte{{}, {}, end, {}}},
		{"vLLM v0.26 with the default empty topic", [][]byte{{}, {}, seq, payload}, [][]byte{{}, {}, end, {}}},
		{"without the delimiter: seq, payload", [][]byte{seq, payload}, [][]byte{end, {}}},
		{"without the delimiter: topic, seq, payload", [][]byte{[]byte("kv@pod@m"), seq, payload}, [][]byte{{}, end, {}}},
	} {
		got, p, err := parseReply(c.reply, "kv@")
		if err != nil || got != 42 || !bytes.Equal(p, payload) {
			t.Errorf("%s: reply = %d, %x, %v; want 42, %x", c.name, got, p, err, payload)
		}
		if got, p, err := parseReply(c.final, "kv@"); err != nil || got != kvevents.EndOfReplay || len(p) != 0 {
			t.Errorf("%s: end marker = %d, %x, %v", c.name, got, p, err)
		}
	}
}

// What no released engine sends is a *FramingError that keeps the frames.
func TestParseReplyRefusesUnknownFramings(t *testing.T) {
	seq, end := kvevents.SeqFrame(7), kvevents.SeqFrame(kvevents.EndOfReplay)
	for _, c := range []struct {
		name   string
		frames [][]byte
	}{
		{"one frame", [][]byte{seq}},
		{"five frames", [][]byte{{}, {}, []byte("t"), seq, {1}}},
		{"four frames without the delimiter", [][]byte{[]byte("x"), []byte("t"), seq, {1}}},
		{"short sequence", [][]byte{{}, {0, 7}, {1}}},
		{"negative sequence other than the end", [][]byte{{}, kvevents.SeqFrame(-2), {1}}},
		{"end marker with a payload", [][]byte{{}, end, {1}}},
		{"topic outside the subscription", [][]byte{{}, []byte("other"), seq, {1}}},
	} {
		_, _, err := parseReply(c.frames, "kv@")
		var fe *FramingError
		if !errors.As(err, &fe) || !errors.Is(err, ErrFraming) || fe.Socket != "replay" || len(fe.Frames) != len(c.frames) {
			t.Errorf("%s: error %v, want a replay *FramingError with the frames", c.name, err)
		}
	}
}

func TestParseLive(t *testing.T) {
	if seq, p, err := parseLive([][]byte{[]byte("kv"), kvevents.SeqFrame(3), {9}}); err != nil || seq != 3 || !bytes.Equal(p, []byte{9}) {
		t.Errorf("parseLive = %d, %x, %v", seq, p, err)
	}
	for _, frames := range [][][]byte{
		{kvevents.SeqFrame(3), {9}},
		{{}, []byte("kv"), kvevents.SeqFrame(3), {9}},
		{{}, {1, 2}, {9}},
		{{}, kvevents.SeqFrame(-1), {}},
	} {
		var fe *FramingError
		if _, _, err := parseLive(frames); !errors.As(err, &fe) || fe.Socket != "live" {
			t.Errorf("parseLive(%d frames) = %v, want a live *FramingError", len(frames), err)
		}
	}
}

// FramesValue is a msgpack array of bin items any msgpack reader splits back into the frames.
func TestFramesValueRoundTrips(t *testing.T) {
	for _, frames := range [][][]byte{
		nil,
		{{}, kvevents.SeqFrame(1), []byte("payload")},
		{bytes.Repeat([]byte{1}, 300), bytes.Repeat([]byte{2}, 70_000)},
		make([][]byte, 17),
	} {
		var back [][]byte
		if err := msgpack.Unmarshal(FramesValue(frames), &back); err != nil {
			t.Fatalf("%d frames: %v", len(frames), err)
		}
		if len(back) != len(frames) {
			t.Fatalf("%d frames came back as %d", len(frames), len(back))
		}
		for i := range frames {
			if !bytes.Equal(back[i], frames[i]) {
				t.Errorf("frame %d of %d differs", i, len(frames))
			}
		}
	}
}

// The bridge's replay client reads a real ROUTER socket in both framings the engines' releases
// use (engineemu.ReplayTopicFrame), with and without a topic, to the end marker.
func TestReplayerReadsEveryEngineFraming(t *testing.T) {
	for _, c := range []struct {
		topicFrame bool
		topic      string
	}{{false, ""}, {false, "kv@pod"}, {true, ""}, {true, "kv@pod"}} {
		ports := testenv.FreePorts(t, 2)
		e, err := engineemu.New(engineemu.Endpoint(fmt.Sprintf("tcp://127.0.0.1:%d", ports[0])), engineemu.Mode(engineemu.PubBind),
			engineemu.ReplayEndpoint(fmt.Sprintf("tcp://127.0.0.1:%d", ports[1])), engineemu.Topic(c.topic),
			engineemu.ReplayTopicFrame(c.topicFrame), engineemu.Seed(3))
		if err != nil {
			t.Fatal(err)
		}
		if err := e.Publish(5, func(int, uint64) bool { return true }); err != nil { // kept off the live socket
			t.Fatal(err)
		}
		var refused []*FramingError
		z := &zmqReplayer{endpoint: fmt.Sprintf("tcp://127.0.0.1:%d", ports[1]), topic: c.topic, timeout: 30 * time.Second,
			refused: func(fe *FramingError) { refused = append(refused, fe) }}
		replies, complete, err := z.Replay(t.Context(), 1)
		e.Close()
		if err != nil || !complete || len(refused) != 0 {
			t.Fatalf("topic frame %v, topic %q: complete %v, %v, refused %v", c.topicFrame, c.topic, complete, err, refused)
		}
		if len(replies) != 4 || replies[0].Seq != 1 || replies[3].Seq != 4 {
			t.Errorf("topic frame %v, topic %q: replies %v", c.topicFrame, c.topic, replies)
		}
		for _, r := range replies {
			if _, err := kvevents.Decode(r.Payload); err != nil {
				t.Errorf("reply %d: %v", r.Seq, err)
			}
		}
	}
}

// TestBoundSubSocketSurvivesAbortedHandshake: a peer that hangs up in the middle of the ZMTP
// handshake (an engine stopped while it connects, a port probe) leaves a bound SUB socket
// (bridge.bind) accepting, and the next publisher's messages arrive. With zmq4's reconnection on
// (v0.17.0), the failed handshake made the accepting goroutine dial the socket's own listen
// address and wait there for a greeting only it could answer: nothing was accepted any more.
func TestBoundSubSocketSurvivesAbortedHandshake(t *testing.T) {
	ep := fmt.Sprintf("tcp://127.0.0.1:%d", testenv.FreePort(t))
	sub, err := openSub(t.Context(), ep, "", true)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	for range 2 {
		c, err := net.Dial("tcp", strings.TrimPrefix(ep, "tcp://"))
		if err != nil {
			t.Fatal(err)
		}
		_ = c.Close() // before the greeting
	}
	got := make(chan zmq4.Msg, 1)
	go func() {
		if m, err := sub.Recv(); err == nil {
			got <- m
		}
	}()
	pub := zmq4.NewPub(t.Context(), zmq4.WithLogger(discardLogger()))
	defer pub.Close()
	dialled := make(chan error, 1)
	go func() { dialled <- pub.Dial(ep) }()
	// The publisher's connection is accepted and subscribed (the wait's bound only guards
	// against a socket that stopped accepting); a PUB socket drops what it sends before.
	var dialErr error
	testenv.WaitUntil(t, 30*time.Second, "a publisher connected after the aborted handshakes is heard", func() bool {
		select {
		case dialErr = <-dialled:
			if dialErr != nil {
				t.Fatalf("publisher: %v", dialErr)
			}
			dialled = nil
		case m := <-got:
			if string(m.Frames[0]) != "batch" {
				t.Fatalf("received %q", m.Frames)
			}
			return true
		default:
		}
		if dialled == nil {
			_ = pub.Send(zmq4.NewMsgFrom([]byte("batch")))
		}
		return false
	})
}
