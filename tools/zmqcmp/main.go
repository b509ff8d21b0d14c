// Command zmqcmp compares two Go ZeroMQ libraries as the bridge uses them: a SUB socket that
// follows a libzmq PUB (the engines' side: vLLM and SGLang publish with pyzmq, which is libzmq)
// across engine restarts, in both directions of connection (bind: the SUB binds and the engine
// connects, bridge.bind; dial: the engine binds and the SUB dials), with aborted TCP handshakes
// mixed in. The pure-Go go-zeromq/zmq4 is driven as package bridge drives it (a dialled socket
// that fails is closed and opened again once the endpoint accepts connections; a bound one stays
// open); pebbe/zmq4 (libzmq through cgo) by libzmq's own reconnection. It reports, per library
// and mode, how long the SUB took to hear each restarted publisher, and how many restarts it
// never heard. bridge/README.md ("The ZeroMQ library") records the figures and the decision.
//
// It is a module of its own because pebbe/zmq4 needs cgo and libzmq's headers
// (apt-get install libzmq3-dev), which nothing else in the project does:
//
//	go -C tools/zmqcmp build -race -o ../../bin/zmqcmp .
//	bin/zmqcmp -lib go -mode bind -n 300 -aborts 3
//	bin/zmqcmp -lib c -mode dial -n 60
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	gozmq "github.com/go-zeromq/zmq4"
	czmq "github.com/pebbe/zmq4"
)

var reopens atomic.Int64

type sub interface {
	recv(timeout time.Duration) bool // a message arrived within timeout
	close()
}

// --- go-zeromq/zmq4 (pure Go) ---
type goSub struct {
	s  gozmq.Socket
	ch chan struct{}
}

func newGoSub(ep string, bind bool) (sub, error) {
	opts := []gozmq.Option{}
	if !bind {
		opts = append(opts, gozmq.WithAutomaticReconnect(true), gozmq.WithDialerMaxRetries(-1), gozmq.WithDialerRetry(250*time.Millisecond))
	}
	s := gozmq.NewSub(context.Background(), opts...)
	if err := s.SetOption(gozmq.OptionSubscribe, ""); err != nil {
		return nil, err
	}
	var err error
	if bind {
		err = s.Listen(ep)
	} else {
		err = s.Dial(ep)
	}
	if err != nil {
		return nil, err
	}
	g := &goSub{s: s, ch: make(chan struct{}, 1024)}
	go func() {
		for {
			if _, err := s.Recv(); err != nil {
				if bind {
					// the bridge's bound mode keeps the socket and goes on receiving
					select {
					case <-time.After(time.Millisecond):
					}
					continue
				}
				// the bridge's dial mode: close, wait for a listener, open again
				reopens.Add(1)
				s.Close()
				for {
					time.Sleep(250 * time.Millisecond)
					if c, err := net.Dial("tcp", strings.TrimPrefix(ep, "tcp://")); err == nil {
						c.Close()
					} else {
						continue
					}
					s = gozmq.NewSub(context.Background(), opts...)
					s.SetOption(gozmq.OptionSubscribe, "")
					if err := s.Dial(ep); err == nil {
						break
					}
				}
				continue
			}
			select {
			case g.ch <- struct{}{}:
			default:
			}
		}
	}()
	return g, nil
}

func (g *goSub) recv(timeout time.Duration) bool {
	select {
	case <-g.ch:
		return true
	case <-time.After(timeout):
		return false
	}
}
func (g *goSub) close() { g.s.Close() }

// --- pebbe/zmq4 (libzmq through cgo) ---
type cSub struct{ s *czmq.Socket }

func newCSub(ep string, bind bool) (sub, error) {
	s, err := czmq.NewSocket(czmq.SUB)
	if err != nil {
		return nil, err
	}
	s.SetSubscribe("")
	s.SetReconnectIvl(250 * time.Millisecond)
	if bind {
		err = s.Bind(ep)
	} else {
		err = s.Connect(ep)
	}
	return &cSub{s}, err
}

func (c *cSub) recv(timeout time.Duration) bool {
	c.s.SetRcvtimeo(timeout)
	_, err := c.s.RecvMessageBytes(0)
	return err == nil
}
func (c *cSub) close() { c.s.Close() }

// drain empties what a previous publisher left.
func drain(s sub) {
	for s.recv(5 * time.Millisecond) {
	}
}

func main() {
	lib := flag.String("lib", "go", "go (go-zeromq/zmq4) or c (pebbe/zmq4)")
	mode := flag.String("mode", "bind", "bind: SUB binds, PUB connects; dial: PUB binds, SUB dials")
	n := flag.Int("n", 100, "publisher restarts")
	port := flag.Int("port", 47000, "TCP port")
	limit := flag.Duration("limit", 10*time.Second, "a restart not heard within this counts as missed")
	aborts := flag.Int("aborts", 2, "aborted TCP connections to the SUB's port per restart (bind mode)")
	flag.Parse()
	ep := fmt.Sprintf("tcp://127.0.0.1:%d", *port)
	bind := *mode == "bind"
	var s sub
	var err error
	var first *czmq.Socket
	if !bind {
		// go-zeromq's Dial waits for a listener (the bridge probes first): bind the first
		// publisher before the SUB dials.
		first, _ = czmq.NewSocket(czmq.PUB)
		first.SetLinger(0)
		if err := first.Bind(ep); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	if *lib == "go" {
		s, err = newGoSub(ep, bind)
	} else {
		s, err = newCSub(ep, bind)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer s.close()
	var took []time.Duration
	missed := 0
	for i := 0; i < *n; i++ {
		pub := first
		first = nil
		if pub == nil {
			pub, _ = czmq.NewSocket(czmq.PUB)
			pub.SetLinger(0)
		}
		if bind {
			for j := 0; j < *aborts; j++ {
				if c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", *port)); err == nil {
					c.Close()
				}
			}
			err = pub.Connect(ep)
		} else if i > 0 {
			for {
				if err = pub.Bind(ep); err == nil {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "pub:", err)
			os.Exit(1)
		}
		start := time.Now()
		heard := false
		for time.Since(start) < *limit {
			pub.SendMessage("", "probe")
			if s.recv(20 * time.Millisecond) {
				heard = true
				break
			}
		}
		if heard {
			took = append(took, time.Since(start))
		} else {
			missed++
		}
		pub.Close()
		drain(s)
	}
	slices.Sort(took)
	q := func(p float64) time.Duration {
		if len(took) == 0 {
			return 0
		}
		return took[int(p*float64(len(took)-1))].Round(time.Millisecond)
	}
	fmt.Printf("lib=%s mode=%s restarts=%d heard=%d missed=%d p50=%v p99=%v max=%v reopens=%d\n", *lib, *mode, *n, len(took), missed, q(0.5), q(0.99), q(1), reopens.Load())
}
