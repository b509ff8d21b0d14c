package replay

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/ckf-stream/ckf-stream/bridge"
	"github.com/ckf-stream/ckf-stream/bridge/engineemu"
	"github.com/ckf-stream/ckf-stream/eval"
	"github.com/go-zeromq/zmq4"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/uber-go/tally/v4"
	"go.uber.org/zap"
)

// bridgeBlockSize is the block size the bridges accept. Each trace block is published as two
// token ids, the low and high 32-bit halves of its hash id: the bridge's token hash of the
// block, XXH3-64 of the two little-endian u32s with seed 1337, is then XXH3-64(LE64(id), seed
// 1337), the local hash of eval.LocalHash, and the routers' queries are the same in both paths.
const bridgeBlockSize = 2

// bridgedWorker is one simulated worker's engine socket (vLLM's ZeroMQ PUB wire protocol) and
// the bridge that reads it (processor bridge's package).
type bridgedWorker struct {
	pub    zmq4.Socket
	bridge *bridge.Bridge
	seq    uint64
	done   chan error
}

// bridges are the --via-bridge path: one PUB socket and one bridge per simulated worker, all
// bridges sharing one producer.
type bridges struct {
	workers [][]*bridgedWorker
	prod    *kgo.Client
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

// startBridges opens every worker's PUB socket on a loopback port, starts a bridge on it that
// writes to the worker's DC topic, and waits until every bridge is ready and subscribed.
func (r *replay) startBridges(ctx context.Context) (*bridges, error) {
	prod, err := r.conn.NewClient("replay-bridges", kgo.RecordPartitioner(bridge.KeyPartitioner()), kgo.ProducerLinger(0))
	if err != nil {
		return nil, err
	}
	bctx, cancel := context.WithCancel(context.Background())
	bs := &bridges{prod: prod, cancel: cancel}
	fail := func(err error) (*bridges, error) {
		bs.close()
		return nil, err
	}
	for d := range r.opts.Fleet.DCs {
		var row []*bridgedWorker
		for w := range r.opts.Fleet.Workers {
			pub := zmq4.NewPub(bctx, zmq4.WithTimeout(5*time.Second))
			bw := &bridgedWorker{pub: pub, done: make(chan error, 1)}
			row = append(row, bw)
			if err := pub.Listen("tcp://127.0.0.1:0"); err != nil {
				bs.workers = append(bs.workers, row)
				return fail(fmt.Errorf("replay: engine socket of DC %d worker %d: %w", d, w, err))
			}
			cfg := bridge.DefaultConfig()
			cfg.Endpoint, cfg.WorkerID, cfg.BlockSize = "tcp://"+pub.Addr().String(), WorkerID(d, w), bridgeBlockSize
			cfg.KVTopic, cfg.DeadLetterTopic = r.kvTopic(r.dcs[d]), r.conn.Topics.DeadLetter
			b, err := bridge.New(bridge.Params{
				Config: cfg,
				Codec:  r.codec, Producer: prod, Metrics: tally.NoopScope,
				Log: r.log.Named("bridge").With(zap.Uint64("worker_id", WorkerID(d, w))),
			})
			if err != nil {
				bs.workers = append(bs.workers, row)
				return fail(fmt.Errorf("replay: bridge of DC %d worker %d: %w", d, w, err))
			}
			bw.bridge = b
			bs.wg.Add(1)
			go func() {
				defer bs.wg.Done()
				bw.done <- b.Run(bctx)
			}()
		}
		bs.workers = append(bs.workers, row)
	}
	deadline := time.Now().Add(r.opts.ReadyTimeout)
	for _, row := range bs.workers {
		for _, bw := range row {
			for !subscribed(bw.pub) || bw.bridge.Ready() != nil {
				select {
				case err := <-bw.done:
					return fail(fmt.Errorf("replay: a bridge stopped at start: %w", err))
				case <-ctx.Done():
					return fail(ctx.Err())
				case <-time.After(10 * time.Millisecond): // polling the sockets' subscriptions, as app/demo polls its engines
				}
				if time.Now().After(deadline) {
					return fail(fmt.Errorf("replay: the bridges did not subscribe within %v", r.opts.ReadyTimeout))
				}
			}
		}
	}
	return bs, nil
}

// subscribed reports whether a PUB socket has a subscriber (ZeroMQ drops what a PUB socket sends
// before its subscribers joined).
func subscribed(s zmq4.Socket) bool {
	t, ok := s.(zmq4.Topics)
	if !ok {
		return false
	}
	for _, sub := range t.Topics() {
		if strings.HasPrefix("", sub) {
			return true
		}
	}
	return false
}

// send publishes one event of worker (d, w) as a vLLM batch.
func (bs *bridges) send(ev *eval.KVEvent) error {
	bw := bs.workers[ev.DC][ev.Worker]
	e := engineemu.Event{Medium: bridge.MediumGPU}
	switch ev.Kind {
	case eval.KVStored:
		e.Kind, e.BlockSize = engineemu.BlockStored, bridgeBlockSize
		if ev.HasParent {
			p := digest(ev.Parent)
			e.Parent = &p
		}
		for i, k := range ev.Keys {
			e.Hashes = append(e.Hashes, digest(k))
			e.Tokens = append(e.Tokens, uint32(ev.IDs[i]), uint32(ev.IDs[i]>>32))
		}
	case eval.KVRemoved:
		e.Kind = engineemu.BlockRemoved
		for _, k := range ev.Keys {
			e.Hashes = append(e.Hashes, digest(k))
		}
	}
	payload, err := engineemu.EncodeBatch(engineemu.WireMap, engineemu.HashInt, float64(time.Now().UnixNano())/1e9, []engineemu.Event{e}, 0)
	if err != nil {
		return err
	}
	var sb [8]byte
	binary.BigEndian.PutUint64(sb[:], bw.seq)
	bw.seq++
	return bw.pub.Send(zmq4.NewMsgFrom(nil, sb[:], payload))
}

// digest is the 32-byte digest whose low 64 bits (what an engine with integer hashes sends) are k.
func digest(k uint64) engineemu.Digest {
	var d engineemu.Digest
	binary.BigEndian.PutUint64(d[24:], k)
	return d
}

// flush waits until the shared producer has delivered every record the bridges handed it.
func (bs *bridges) flush(ctx context.Context) error { return bs.prod.Flush(ctx) }

// close stops the bridges and closes the sockets and the producer.
func (bs *bridges) close() error {
	bs.cancel()
	bs.wg.Wait()
	var errs []error
	for _, row := range bs.workers {
		for _, bw := range row {
			select {
			case err := <-bw.done:
				if err != nil && !errors.Is(err, context.Canceled) {
					errs = append(errs, err)
				}
			default:
			}
			_ = bw.pub.Close()
		}
	}
	bs.prod.Close()
	return errors.Join(errs...)
}
