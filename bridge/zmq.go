package bridge

import (
	"context"
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
// binds, the default), or binds endpoint for engines that connect (bind). It subscribes to
// topic (empty: every message) and reconnects on its own after the engine restarts.
func openSub(ctx context.Context, endpoint, topic string, bind bool) (zmq4.Socket, error) {
	sub := zmq4.NewSub(ctx, zmq4.WithAutomaticReconnect(true), zmq4.WithDialerMaxRetries(-1),
		zmq4.WithDialerRetry(250*time.Millisecond), zmq4.WithLogger(discardLogger()))
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

// parseLive splits a published message: [topic, 8-byte sequence, payload].
func parseLive(frames [][]byte) (seq int64, payload []byte, err error) {
	if len(frames) != 3 {
		return 0, nil, &kvevents.DecodeError{Kind: kvevents.ErrMalformed, Path: "message", Detail: fmt.Sprintf("%d frames, want topic, sequence, payload", len(frames))}
	}
	seq, err = kvevents.ParseSeq(frames[1])
	if err == nil && seq < 0 {
		err = &kvevents.DecodeError{Kind: kvevents.ErrMalformed, Path: "seq", Detail: fmt.Sprintf("negative sequence %d", seq)}
	}
	return seq, frames[2], err
}

// zmqReplayer asks an engine's ROUTER replay socket for batches. Each request uses a fresh
// DEALER connection, so a reply that arrives after its request timed out is never mistaken for
// the answer to the next one.
type zmqReplayer struct {
	endpoint string
	// timeout bounds the wait for each reply message; the engine answers from its publishing
	// loop, between batches, so a live engine answers well within it.
	timeout time.Duration
}

var errReplayTimeout = errors.New("bridge: replay reply timed out")

// NewReplayer returns the client the bridge uses for an engine's ROUTER replay socket at
// endpoint, waiting up to timeout for each reply message: for tools and tests that read an
// engine's replay buffer as the bridge does.
func NewReplayer(endpoint string, timeout time.Duration) Replayer {
	return &zmqReplayer{endpoint: endpoint, timeout: timeout}
}

// Replay sends the DEALER request [empty delimiter, 8-byte start sequence] and reads
// [empty, sequence, payload] replies until the end marker (sequence -1).
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
		frames := r.msg.Frames
		if len(frames) == 3 && len(frames[0]) == 0 {
			frames = frames[1:]
		}
		if len(frames) != 2 {
			return out, false, &kvevents.DecodeError{Kind: kvevents.ErrMalformed, Path: "replay", Detail: fmt.Sprintf("%d frames, want sequence and payload", len(frames))}
		}
		seq, err := kvevents.ParseSeq(frames[0])
		if err != nil {
			return out, false, err
		}
		if seq == kvevents.EndOfReplay {
			return out, true, nil
		}
		out = append(out, Replayed{Seq: seq, Payload: frames[1]})
	}
}

func discardLogger() *log.Logger { return log.New(io.Discard, "", 0) }
