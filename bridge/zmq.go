package bridge

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log"
	"strconv"
	"strings"
	"time"

	"github.com/ckf-stream/ckf-stream/bridge/kvevents"
	"github.com/go-zeromq/zmq4"
)

// RankEndpoint returns the endpoint of data-parallel rank rank given the endpoint of rank 0,
// the way the engines derive them: a TCP port is offset by the rank; an inproc or ipc name gets
// the suffix "_dp<rank>". An endpoint without a numeric port is returned unchanged for rank 0
// and is an error for other ranks.
func RankEndpoint(endpoint string, rank int) (string, error) {
	if rank == 0 || endpoint == "" {
		return endpoint, nil
	}
	if strings.HasPrefix(endpoint, "inproc://") || strings.HasPrefix(endpoint, "ipc://") {
		return endpoint + "_dp" + strconv.Itoa(rank), nil
	}
	i := strings.LastIndexByte(endpoint, ':')
	port, err := strconv.Atoi(endpoint[i+1:])
	if i < 0 || err != nil || !strings.HasPrefix(endpoint, "tcp://") {
		return "", fmt.Errorf("bridge: endpoint %q has no TCP port to offset for rank %d", endpoint, rank)
	}
	return endpoint[:i+1] + strconv.Itoa(port+rank), nil
}

// listenAddr turns a wildcard bind endpoint (tcp://*:5557, the engines' spelling) into one the
// Go listener accepts.
func listenAddr(endpoint string) string {
	return strings.Replace(endpoint, "tcp://*:", "tcp://0.0.0.0:", 1)
}

// openSub opens the SUB socket of one rank: it dials the engine's PUB socket (the engine
// binds, the default) and reconnects on its own after the engine restarts, or binds endpoint
// for engines that connect (bind), which connect again after they restart. It subscribes to
// topic (empty: every message).
func openSub(ctx context.Context, endpoint, topic string, bind bool) (zmq4.Socket, error) {
	opts := []zmq4.Option{zmq4.WithLogger(discardLogger())}
	if !bind {
		// Reconnection is only a dialler's. zmq4 (v0.17.0) redials the socket's endpoint
		// whenever one of its connections closes; on a bound socket that endpoint is its own
		// listen address. A handshake that failed in the accepting goroutine (a peer that hung
		// up while connecting) then dialled it from that goroutine and waited for a greeting
		// only that goroutine could send, so the socket never accepted again
		// (TestBoundSubSocketSurvivesAbortedHandshake), and the dial wrote the socket's
		// endpoint while Close read it (a data race).
		opts = append(opts, zmq4.WithAutomaticReconnect(true), zmq4.WithDialerMaxRetries(-1),
			zmq4.WithDialerRetry(250*time.Millisecond))
	}
	sub := zmq4.NewSub(ctx, opts...)
	if err := sub.SetOption(zmq4.OptionSubscribe, topic); err != nil {
		_ = sub.Close()
		return nil, fmt.Errorf("bridge: subscribing to %q: %w", topic, err)
	}
	var err error
	if bind {
		err = sub.Listen(listenAddr(endpoint))
	} else {
		err = sub.Dial(endpoint)
	}
	if err != nil {
		_ = sub.Close()
		return nil, fmt.Errorf("bridge: SUB socket on %s: %w", endpoint, err)
	}
	return sub, nil
}

// ErrFraming is matched by every *FramingError.
var ErrFraming = errors.New("bridge: engine message framing not recognised")

// FramingError is a ZeroMQ message whose frames match none of the framings a released engine
// sends (README.md, "The engines' protocol"). Frames keeps the raw frames, which the bridge
// dead-letters (FramesValue) so that nothing it refuses is lost without a trace.
type FramingError struct {
	// Socket is "live" (the PUB stream) or "replay" (a reply of the ROUTER replay socket).
	Socket string
	// Detail says what did not fit.
	Detail string
	// Frames are the message's frames as received (after the ROUTER's identity, for replies).
	Frames [][]byte
}

func (e *FramingError) Error() string {
	return fmt.Sprintf("%s: %s message of %d frames: %s", ErrFraming, e.Socket, len(e.Frames), e.Detail)
}

func (e *FramingError) Unwrap() error { return ErrFraming }

// FramesValue encodes raw ZeroMQ frames as the value of a dead letter: a msgpack array of bin
// items, one per frame in order, which any msgpack reader can split again.
func FramesValue(frames [][]byte) []byte {
	var out []byte
	switch n := len(frames); {
	case n < 16:
		out = append(out, 0x90|byte(n))
	case n <= 0xffff:
		out = binary.BigEndian.AppendUint16(append(out, 0xdc), uint16(n))
	default:
		out = binary.BigEndian.AppendUint32(append(out, 0xdd), uint32(n))
	}
	for _, f := range frames {
		switch n := len(f); {
		case n <= 0xff:
			out = append(out, 0xc4, byte(n))
		case n <= 0xffff:
			out = binary.BigEndian.AppendUint16(append(out, 0xc5), uint16(n))
		default:
			out = binary.BigEndian.AppendUint32(append(out, 0xc6), uint32(n))
		}
		out = append(out, f...)
	}
	return out
}

// topicMatches says whether a topic frame passes the subscription topic, the way a SUB socket
// filters: by prefix (an empty subscription takes every topic).
func topicMatches(frame []byte, subscription string) bool {
	return strings.HasPrefix(string(frame), subscription)
}

// parseLive splits a published message: [topic, 8-byte sequence, payload], the one live
// framing every released engine sends. The SUB socket already filtered the topic.
func parseLive(frames [][]byte) (seq int64, payload []byte, err error) {
	if len(frames) != 3 {
		return 0, nil, &FramingError{Socket: "live", Frames: frames, Detail: "want topic, sequence, payload"}
	}
	seq, err = kvevents.ParseSeq(frames[1])
	switch {
	case err != nil:
		return 0, nil, &FramingError{Socket: "live", Frames: frames, Detail: err.Error()}
	case seq < 0:
		return 0, nil, &FramingError{Socket: "live", Frames: frames, Detail: fmt.Sprintf("negative sequence %d", seq)}
	}
	return seq, frames[2], nil
}

// parseReply splits one message of the replay socket as a DEALER receives it (the ROUTER has
// taken its identity frame). Released engines send one of these (README.md, "Replay"):
//
//	["", seq, payload]         vLLM before v0.26.0, SGLang
//	["", topic, seq, payload]  vLLM v0.26.0 and later (the topic of the live stream; the end
//	                           marker's topic frame is empty)
//
// and the same without the empty delimiter ([seq, payload], [topic, seq, payload]), which a
// client that strips the delimiter (a REQ socket) sees. A three-frame message is read as
// [delimiter or topic, seq, payload]: both readings give the same sequence and payload. The end
// marker is sequence EndOfReplay with an empty payload. A non-empty topic frame must pass the
// subscription topic, as the live stream's does. Anything else is a *FramingError.
func parseReply(frames [][]byte, subscription string) (seq int64, payload []byte, err error) {
	bad := func(detail string) error { return &FramingError{Socket: "replay", Frames: frames, Detail: detail} }
	var topic []byte
	switch len(frames) {
	case 2:
	case 3:
		topic = frames[0]
	case 4:
		if len(frames[0]) != 0 {
			return 0, nil, bad("four frames without the empty delimiter first")
		}
		topic = frames[1]
	default:
		return 0, nil, bad("want [delimiter,] [topic,] sequence, payload")
	}
	tail := frames[len(frames)-2:]
	seq, err = kvevents.ParseSeq(tail[0])
	switch {
	case err != nil:
		return 0, nil, bad(err.Error())
	case seq == kvevents.EndOfReplay:
		if len(tail[1]) != 0 {
			return 0, nil, bad("end marker with a payload")
		}
		return seq, nil, nil
	case seq < 0:
		return 0, nil, bad(fmt.Sprintf("negative sequence %d", seq))
	case len(topic) > 0 && !topicMatches(topic, subscription):
		return 0, nil, bad(fmt.Sprintf("topic %q does not match the subscription %q", topic, subscription))
	}
	return seq, tail[1], nil
}

// zmqReplayer asks an engine's ROUTER replay socket for batches. Each request uses a fresh
// DEALER connection, so a reply that arrives after its request timed out is never mistaken for
// the answer to the next one.
type zmqReplayer struct {
	endpoint string
	// topic is the subscription topic that a reply's topic frame must pass.
	topic string
	// timeout bounds the wait for each reply message; the engine answers from its publishing
	// loop, between batches, so a live engine answers well within it.
	timeout time.Duration
	// refused receives each reply whose framing is not recognised (it is skipped: the source
	// sees the hole and asks again); nil drops them.
	refused func(*FramingError)
}

var errReplayTimeout = errors.New("bridge: replay reply timed out")

// NewReplayer returns the client the bridge uses for an engine's ROUTER replay socket at
// endpoint, waiting up to timeout for each reply message: for tools and tests that read an
// engine's replay buffer as the bridge does. topic is the subscription topic (empty: any).
func NewReplayer(endpoint, topic string, timeout time.Duration) Replayer {
	return &zmqReplayer{endpoint: endpoint, topic: topic, timeout: timeout}
}

// Replay sends the DEALER request [empty delimiter, 8-byte start sequence] and reads replies in
// any released framing (parseReply) until the end marker (sequence -1). A reply whose framing
// is not recognised is handed to refused and skipped.
func (z *zmqReplayer) Replay(ctx context.Context, from int64) ([]Replayed, bool, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	d := zmq4.NewDealer(ctx, zmq4.WithDialerMaxRetries(3), zmq4.WithDialerRetry(100*time.Millisecond), zmq4.WithLogger(discardLogger()))
	defer d.Close()
	if err := d.Dial(z.endpoint); err != nil {
		return nil, false, fmt.Errorf("bridge: replay socket %s: %w", z.endpoint, err)
	}
	if err := d.Send(zmq4.NewMsgFrom([]byte{}, kvevents.SeqFrame(from))); err != nil {
		return nil, false, fmt.Errorf("bridge: replay request to %s: %w", z.endpoint, err)
	}
	type recv struct {
		msg zmq4.Msg
		err error
	}
	ch := make(chan recv, 1)
	var out []Replayed
	for {
		go func() { m, err := d.Recv(); ch <- recv{m, err} }()
		timer := time.NewTimer(z.timeout)
		var r recv
		select {
		case r = <-ch:
			timer.Stop()
		case <-timer.C:
			return out, false, errReplayTimeout
		case <-ctx.Done():
			timer.Stop()
			return out, false, ctx.Err()
		}
		if r.err != nil {
			return out, false, fmt.Errorf("bridge: replay reply from %s: %w", z.endpoint, r.err)
		}
		seq, payload, err := parseReply(r.msg.Frames, z.topic)
		if err != nil {
			var fe *FramingError
			if errors.As(err, &fe) && z.refused != nil {
				z.refused(fe)
			}
			continue
		}
		if seq == kvevents.EndOfReplay {
			return out, true, nil
		}
		out = append(out, Replayed{Seq: seq, Payload: payload})
	}
}

func discardLogger() *log.Logger { return log.New(io.Discard, "", 0) }
