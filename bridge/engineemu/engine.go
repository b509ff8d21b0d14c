package engineemu

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-zeromq/zmq4"
)

// ErrInvalidConfig is wrapped by every configuration error of New.
var ErrInvalidConfig = errors.New("engineemu: invalid configuration")

// ErrClosed is returned by calls on a closed Engine.
var ErrClosed = errors.New("engineemu: engine closed")

// PubMode says whether the PUB socket binds or connects.
type PubMode int

const (
	// PubAuto is the engines' rule: bind for a wildcard ("*"), IPv6-any ("::"), ipc:// or
	// inproc:// endpoint, connect otherwise (then the bridge binds, bridge.bind).
	PubAuto PubMode = iota
	// PubBind always binds.
	PubBind
	// PubConnect always connects.
	PubConnect
)

// endSeq is the replay socket's end marker: -1 as a signed 8-byte big-endian integer.
var endSeq = []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}

type cfg struct {
	endpoint       string
	replayEndpoint string
	pubMode        PubMode
	topic          string
	ranks          int
	wire           Wire
	hashes         HashFormat
	blockSize      int
	seed           uint64
	capacity       int
	maxEvents      int
	loraName       string
	loraID         int
	loraFraction   float64
	cpuFraction    float64
	dupFraction    float64
	hybrid         bool
	mmFraction     float64
	saltFraction   float64
	bufferSteps    int
	replayTruncate int
	replayTopic    bool
	cpuMedium      string
	sendTimeout    time.Duration
}

func defaultCfg() cfg {
	return cfg{
		endpoint: "tcp://*:5557", ranks: 1, wire: WireMap, hashes: HashInt, blockSize: 16, seed: 1,
		capacity: 512, maxEvents: 4, loraName: "adapter-a", loraID: 1, loraFraction: 0.2,
		cpuFraction: 0.1, dupFraction: 0.03, bufferSteps: 10_000, cpuMedium: "CPU", sendTimeout: 5 * time.Second,
	}
}

func (c *cfg) validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...)
	}
	switch {
	case c.endpoint == "":
		return bad("empty PUB endpoint")
	case c.ranks < 1 || c.ranks > 64:
		return bad("ranks %d outside [1, 64]", c.ranks)
	case c.blockSize < 1 || c.blockSize > 65536:
		return bad("block size %d outside [1, 65536]", c.blockSize)
	case c.capacity < 1:
		return bad("capacity %d below 1", c.capacity)
	case c.maxEvents < 1:
		return bad("events per batch %d below 1", c.maxEvents)
	case c.bufferSteps < 1:
		return bad("replay buffer %d below 1", c.bufferSteps)
	case c.loraFraction < 0 || c.loraFraction > 1, c.cpuFraction < 0 || c.cpuFraction > 0.5,
		c.dupFraction < 0 || c.dupFraction > 0.5:
		return bad("fractions: LoRA %v in [0,1], CPU %v and duplicates %v in [0,0.5]", c.loraFraction, c.cpuFraction, c.dupFraction)
	case c.loraFraction > 0 && c.loraName == "":
		return bad("a LoRA share without a LoRA name")
	case c.mmFraction < 0 || c.mmFraction > 1:
		return bad("image share %v outside [0,1]", c.mmFraction)
	case c.saltFraction < 0 || c.saltFraction > 1:
		return bad("salted share %v outside [0,1]", c.saltFraction)
	}
	for r := range c.ranks {
		if _, err := offsetEndpoint(c.endpoint, r); err != nil {
			return bad("%v", err)
		}
		if _, err := offsetEndpoint(c.replayEndpoint, r); err != nil {
			return bad("%v", err)
		}
	}
	return nil
}

// Opt configures an Engine.
type Opt func(*cfg)

// Endpoint sets rank 0's PUB endpoint (default tcp://*:5557); rank r uses the port plus r, as
// the engines do.
func Endpoint(ep string) Opt { return func(c *cfg) { c.endpoint = ep } }

// ReplayEndpoint sets rank 0's ROUTER replay endpoint (default none); rank r uses the port plus r.
func ReplayEndpoint(ep string) Opt { return func(c *cfg) { c.replayEndpoint = ep } }

// Mode sets whether the PUB socket binds or connects (default PubAuto, the engines' rule).
func Mode(m PubMode) Opt { return func(c *cfg) { c.pubMode = m } }

// Topic sets the topic frame (default empty).
func Topic(t string) Opt { return func(c *cfg) { c.topic = t } }

// Ranks sets the number of data-parallel ranks (default 1).
func Ranks(n int) Opt { return func(c *cfg) { c.ranks = n } }

// Shape sets the payload shape (default WireMap).
func Shape(w Wire) Opt { return func(c *cfg) { c.wire = w } }

// Hashes sets how block hashes travel (default HashInt).
func Hashes(h HashFormat) Opt { return func(c *cfg) { c.hashes = h } }

// BlockSize sets the tokens per block (default 16, vLLM's default).
func BlockSize(n int) Opt { return func(c *cfg) { c.blockSize = n } }

// Seed seeds the workload (default 1); each rank draws from its own stream.
func Seed(s uint64) Opt { return func(c *cfg) { c.seed = s } }

// Capacity sets the GPU blocks per rank before the pool evicts (default 512).
func Capacity(n int) Opt { return func(c *cfg) { c.capacity = n } }

// MaxEvents sets the most events in one batch (default 4).
func MaxEvents(n int) Opt { return func(c *cfg) { c.maxEvents = n } }

// LoRA sets the adapter's name and id and the share of new chains under it (default
// "adapter-a", 1, 0.2). WireArray5 carries only the id.
func LoRA(name string, id int, fraction float64) Opt {
	return func(c *cfg) { c.loraName, c.loraID, c.loraFraction = name, id, fraction }
}

// CPUFraction sets the share of events on the CPU tier (default 0.1; none in WireArray5, which
// has no medium). CPUMedium names the tier.
func CPUFraction(f float64) Opt { return func(c *cfg) { c.cpuFraction = f } }

// CPUMedium sets the medium of CPU-tier events (default "CPU", vLLM's; SGLang's is
// "CPU_PINNED").
func CPUMedium(m string) Opt { return func(c *cfg) { c.cpuMedium = m } }

// DupFraction sets the share of stores that repeat a resident block (default 0.03).
func DupFraction(f float64) Opt { return func(c *cfg) { c.dupFraction = f } }

// Hybrid also stores chains in a sliding-window group, which a bridge must filter out (default
// off; only in the shapes with group fields, Wire.HasGroups).
func Hybrid(on bool) Opt { return func(c *cfg) { c.hybrid = on } }

// MMFraction sets the share of new root chains that carry an image (default 0: none, and no
// extra_keys on the wire). With a share above 0 every store carries extra_keys as vLLM 0.34.0
// publishes them (pool.go); not in WireArray5, which has no extra_keys.
func MMFraction(f float64) Opt { return func(c *cfg) { c.mmFraction = f } }

// SaltFraction sets the share of new text root chains that SGLang salts with a request's
// cache salt (one of two; default 0: none). Every store of a salted chain, continuations
// included, carries the salt as SGLang 0.5.18 and later publish it: a metadata map
// {"cache_salt": ...} after medium in the six-field array shape, a cache_salt key in the map
// events; only in those two shapes (WireArray6, WireMapEvents). The model's chains give the salt
// as the first block's last extra key, where the bridge hashes it (bridge.WithCacheSalt).
func SaltFraction(f float64) Opt { return func(c *cfg) { c.saltFraction = f } }

// BufferSteps sets the replay buffer in batches (default 10,000, the engines' default).
func BufferSteps(n int) Opt { return func(c *cfg) { c.bufferSteps = n } }

// ReplayTruncate makes the first n replay requests get only their first batch and the end
// marker, as when a large reply loses its tail (default 0).
func ReplayTruncate(n int) Opt { return func(c *cfg) { c.replayTruncate = n } }

// ReplayTopicFrame makes replay replies carry the topic frame, as vLLM does from v0.26.0 on:
// [identity, "", topic, sequence, batch] and the end marker [identity, "", "", -1, ""]. Off (the
// default), replies are [identity, "", sequence, batch] and [identity, "", -1, ""], as in
// earlier vLLM releases and in SGLang.
func ReplayTopicFrame(on bool) Opt { return func(c *cfg) { c.replayTopic = on } }

// offsetEndpoint is the endpoint of rank r: the port plus r for tcp, a _dp suffix otherwise.
func offsetEndpoint(ep string, r int) (string, error) {
	if ep == "" || r == 0 {
		return ep, nil
	}
	if strings.HasPrefix(ep, "tcp://") {
		i := strings.LastIndexByte(ep, ':')
		port, err := strconv.Atoi(ep[i+1:])
		if err != nil || port+r > 65535 {
			return "", fmt.Errorf("endpoint %q: no port to offset by rank %d", ep, r)
		}
		return ep[:i+1] + strconv.Itoa(port+r), nil
	}
	return fmt.Sprintf("%s_dp%d", ep, r), nil
}

func autoBinds(ep string) bool {
	return strings.Contains(ep, "*") || strings.Contains(ep, "::") ||
		strings.HasPrefix(ep, "ipc://") || strings.HasPrefix(ep, "inproc://")
}

// Stats counts what the engine did.
type Stats struct {
	Batches          int64 `json:"batches"`
	DroppedLive      int64 `json:"dropped_live"`
	ReplayRequests   int64 `json:"replay_requests"`
	ReplayedBatches  int64 `json:"replayed_batches"`
	ReplayTruncated  int64 `json:"replay_truncated"`
	ReplayInvalid    int64 `json:"replay_invalid"`
	Restarts         int64 `json:"restarts"`
	DuplicateStores  int64 `json:"duplicate_stores"`
	Stored           int64 `json:"events_BlockStored"`
	Removed          int64 `json:"events_BlockRemoved"`
	Cleared          int64 `json:"events_AllBlocksCleared"`
	SendErrors       int64 `json:"send_errors"`
	PublishedEvents  int64 `json:"-"`
	LastPublishError error `json:"-"`
}

// Chain is one chain of blocks from a root: its LoRA name ("" for none), its tokens, its
// number of blocks and, for chains with an image (MMFraction), the extra keys of each block as
// they enter its local hash (ckf.TokenSequenceHashesExtra; the LoRA name left out), nil when no
// block has any.
type Chain struct {
	LoRAName  string      `json:"lora_name"`
	Tokens    []uint32    `json:"tokens"`
	Blocks    int         `json:"blocks"`
	ExtraKeys []ExtraKeys `json:"extra_keys,omitempty"`
}

// RankModel is what one rank holds: Resident lists every resident GPU leaf chain (each prefix of
// one is resident, and every resident block is on one), Absent chains that were stored on other
// media or groups or evicted and are not resident on GPU (a bounded sample).
type RankModel struct {
	Rank           int     `json:"rank"`
	NextSeq        uint64  `json:"next_seq"`
	ResidentBlocks int     `json:"resident_blocks"`
	Resident       []Chain `json:"resident"`
	Absent         []Chain `json:"absent"`
}

// Model is the engine's exact state, in the JSON layout the Python emulator writes too.
type Model struct {
	BlockSize  int         `json:"block_size"`
	Wire       string      `json:"wire"`
	HashFormat string      `json:"hash_format"`
	LoRAName   string      `json:"lora_name"`
	LoRAID     int         `json:"lora_id"`
	Ranks      []RankModel `json:"ranks"`
	Stats      Stats       `json:"stats"`
}

type buffered struct {
	seq     uint64
	payload []byte
}

// rankState is one rank: its sockets, sequence, replay buffer and pool. mu guards everything
// but the sockets' own goroutines.
type rankState struct {
	e      *Engine
	rank   int
	mu     sync.Mutex
	seq    uint64
	buffer []buffered // the last bufferSteps batches, oldest first
	pool   *pool
	enc    *encoder
	pub    zmq4.Socket
	replay zmq4.Socket
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// Engine is an emulated inference engine: one PUB socket and one optional ROUTER replay socket
// per data-parallel rank, in the engines' wire protocol.
type Engine struct {
	cfg   cfg
	ranks []*rankState

	mu     sync.Mutex // guards stats and closed
	stats  Stats
	closed bool
}

// New validates the options and opens the sockets of every rank.
func New(opts ...Opt) (*Engine, error) {
	c := defaultCfg()
	for _, o := range opts {
		o(&c)
	}
	if err := c.validate(); err != nil {
		return nil, err
	}
	e := &Engine{cfg: c}
	for r := range c.ranks {
		rs := &rankState{e: e, rank: r, pool: newPool(&e.cfg, r), enc: newEncoder(c.wire, c.hashes)}
		e.ranks = append(e.ranks, rs)
		if err := rs.open(); err != nil {
			_ = e.Close()
			return nil, err
		}
	}
	return e, nil
}

// open makes the rank's sockets and starts its replay server.
func (rs *rankState) open() error {
	c := &rs.e.cfg
	ctx, cancel := context.WithCancel(context.Background())
	rs.cancel = cancel
	ep, _ := offsetEndpoint(c.endpoint, rs.rank)
	rs.pub = zmq4.NewPub(ctx, zmq4.WithTimeout(c.sendTimeout))
	bind := c.pubMode == PubBind || (c.pubMode == PubAuto && autoBinds(ep))
	var err error
	if bind {
		err = rs.pub.Listen(ep)
	} else {
		err = rs.pub.Dial(ep)
	}
	if err != nil {
		return fmt.Errorf("engineemu: rank %d PUB %s: %w", rs.rank, ep, err)
	}
	rs.replay = nil
	if c.replayEndpoint != "" {
		rep, _ := offsetEndpoint(c.replayEndpoint, rs.rank)
		rs.replay = zmq4.NewRouter(ctx, zmq4.WithTimeout(c.sendTimeout))
		if err := rs.replay.Listen(rep); err != nil {
			return fmt.Errorf("engineemu: rank %d ROUTER %s: %w", rs.rank, rep, err)
		}
		sock := rs.replay
		rs.wg.Add(1)
		go func() {
			defer rs.wg.Done()
			rs.serveReplay(ctx, sock)
		}()
	}
	return nil
}

func (rs *rankState) close() {
	if rs.cancel != nil {
		rs.cancel()
	}
	if rs.pub != nil {
		_ = rs.pub.Close()
	}
	if rs.replay != nil {
		_ = rs.replay.Close()
	}
	rs.wg.Wait()
}

// serveReplay answers replay requests until the socket closes: every buffered batch at or after
// the requested sequence, then the end marker.
func (rs *rankState) serveReplay(ctx context.Context, sock zmq4.Socket) {
	for {
		msg, err := sock.Recv()
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			continue
		}
		if len(msg.Frames) != 3 || len(msg.Frames[2]) != 8 {
			rs.e.count(func(s *Stats) { s.ReplayInvalid++ })
			continue
		}
		id := msg.Frames[0]
		start := binary.BigEndian.Uint64(msg.Frames[2])
		var requests int64
		rs.e.count(func(s *Stats) { s.ReplayRequests++; requests = s.ReplayRequests })
		truncate := requests <= int64(rs.e.cfg.replayTruncate)
		rs.mu.Lock()
		var out []buffered
		for _, b := range rs.buffer {
			if b.seq >= start {
				out = append(out, b)
			}
		}
		rs.mu.Unlock()
		if truncate && len(out) > 1 {
			rs.e.count(func(s *Stats) { s.ReplayTruncated++ })
			out = out[:1]
		}
		topic := []byte(rs.e.cfg.topic)
		for _, b := range out {
			var seq [8]byte
			binary.BigEndian.PutUint64(seq[:], b.seq)
			msg := zmq4.NewMsgFrom(id, nil, seq[:], b.payload)
			if rs.e.cfg.replayTopic {
				msg = zmq4.NewMsgFrom(id, nil, topic, seq[:], b.payload)
			}
			if err := sock.Send(msg); err != nil {
				break
			}
		}
		rs.e.count(func(s *Stats) { s.ReplayedBatches += int64(len(out)) })
		if rs.e.cfg.replayTopic {
			_ = sock.Send(zmq4.NewMsgFrom(id, nil, nil, endSeq, nil))
		} else {
			_ = sock.Send(zmq4.NewMsgFrom(id, nil, endSeq, nil))
		}
	}
}

// publishOne makes, encodes, buffers and (unless drop) sends one batch.
func (rs *rankState) publishOne(drop func(rank int, seq uint64) bool) error {
	rs.mu.Lock()
	events := rs.pool.nextBatch()
	err := rs.sendLocked(events, drop)
	rs.mu.Unlock()
	return err
}

func (rs *rankState) sendLocked(events []Event, drop func(rank int, seq uint64) bool) error {
	payload, err := rs.enc.batch(float64(time.Now().UnixNano())/1e9, events, rs.rank)
	if err != nil {
		return err
	}
	seq := rs.seq
	rs.seq++
	rs.buffer = append(rs.buffer, buffered{seq, payload})
	if over := len(rs.buffer) - rs.e.cfg.bufferSteps; over > 0 {
		rs.buffer = append(rs.buffer[:0], rs.buffer[over:]...)
	}
	dropped := drop != nil && drop(rs.rank, seq)
	var sendErr error
	if !dropped {
		var sb [8]byte
		binary.BigEndian.PutUint64(sb[:], seq)
		sendErr = rs.pub.Send(zmq4.NewMsgFrom([]byte(rs.e.cfg.topic), sb[:], payload))
	}
	rs.e.count(func(s *Stats) {
		s.Batches++
		if dropped {
			s.DroppedLive++
		}
		if sendErr != nil {
			s.SendErrors++
			s.LastPublishError = sendErr
		}
		for i := range events {
			switch events[i].Kind {
			case BlockStored:
				s.Stored++
			case BlockRemoved:
				s.Removed++
			case AllBlocksCleared:
				s.Cleared++
			}
		}
		s.PublishedEvents += int64(len(events))
	})
	return nil
}

func (e *Engine) count(f func(*Stats)) {
	e.mu.Lock()
	f(&e.stats)
	e.mu.Unlock()
}

func (e *Engine) rank(r int) (*rankState, error) {
	e.mu.Lock()
	closed := e.closed
	e.mu.Unlock()
	if closed {
		return nil, ErrClosed
	}
	if r < 0 || r >= len(e.ranks) {
		return nil, fmt.Errorf("engineemu: rank %d outside [0, %d)", r, len(e.ranks))
	}
	return e.ranks[r], nil
}

// Publish publishes n batches on every rank, in turn. drop (may be nil) names the sequence
// numbers that are not sent live: they stay in the replay buffer only. A send that fails (a
// subscriber's connection that broke) is counted in Stats, not returned: a PUB socket loses
// messages silently, and the replay socket is how a subscriber recovers them.
func (e *Engine) Publish(n int, drop func(rank int, seq uint64) bool) error {
	for range n {
		for r := range e.ranks {
			rs, err := e.rank(r)
			if err != nil {
				return err
			}
			if err := rs.publishOne(drop); err != nil {
				return err
			}
		}
	}
	return nil
}

// Run publishes rate batches per second on every rank (at least one batch per tick) until ctx
// ends; it returns nil then, or the first error.
func (e *Engine) Run(ctx context.Context, rate float64) error {
	if rate <= 0 {
		return fmt.Errorf("%w: rate %v not positive", ErrInvalidConfig, rate)
	}
	const tick = 10 * time.Millisecond
	t := time.NewTicker(tick)
	defer t.Stop()
	start := time.Now()
	var sent float64
	for {
		select {
		case <-ctx.Done():
			return nil
		case now := <-t.C:
			due := rate * now.Sub(start).Seconds()
			n := int(due - sent)
			if n <= 0 {
				continue
			}
			if err := e.Publish(n, nil); err != nil {
				return err
			}
			sent += float64(n)
		}
	}
}

// Restart emulates an engine restart on rank r: new sockets on the same endpoints, sequence
// numbers from 0 again, an empty replay buffer and block pool, and no clear event.
func (e *Engine) Restart(r int) error {
	rs, err := e.rank(r)
	if err != nil {
		return err
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	rs.close()
	rs.seq = 0
	rs.buffer = nil
	rs.pool.dropAll()
	e.count(func(s *Stats) { s.Restarts++ })
	return rs.open()
}

// Clear publishes an AllBlocksCleared batch on rank r and empties its pool.
func (e *Engine) Clear(r int) error { return e.clear(r, nil) }

// ClearOffLive is Clear with the batch kept off the live socket: a subscriber gets it only from
// the replay socket (a clear lost on the wire).
func (e *Engine) ClearOffLive(r int) error {
	return e.clear(r, func(int, uint64) bool { return true })
}

func (e *Engine) clear(r int, drop func(rank int, seq uint64) bool) error {
	rs, err := e.rank(r)
	if err != nil {
		return err
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	rs.pool.dropAll()
	return rs.sendLocked([]Event{{Kind: AllBlocksCleared}}, drop)
}

// Subscribed reports whether rank r's PUB socket has a subscriber whose subscription matches the
// topic: a test can then publish without losing batches to ZeroMQ's late-joiner window.
func (e *Engine) Subscribed(r int) bool {
	rs, err := e.rank(r)
	if err != nil {
		return false
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	t, ok := rs.pub.(zmq4.Topics)
	if !ok {
		return false
	}
	for _, sub := range t.Topics() {
		if strings.HasPrefix(e.cfg.topic, sub) {
			return true
		}
	}
	return false
}

// Endpoints returns rank r's PUB and replay endpoints as bound, so that a port 0 in the options
// reads as the port the system chose ("" for a socket that connects or does not exist). Rank r's
// ports are not rank 0's plus r when the options give port 0: Endpoints is then the way to learn
// them.
func (e *Engine) Endpoints(r int) (pub, replay string) {
	rs, err := e.rank(r)
	if err != nil {
		return "", ""
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	name := func(s zmq4.Socket) string {
		if s == nil || s.Addr() == nil {
			return ""
		}
		return "tcp://" + s.Addr().String()
	}
	return name(rs.pub), name(rs.replay)
}

// NextSeq returns the sequence number rank r's next batch gets.
func (e *Engine) NextSeq(r int) uint64 {
	rs, err := e.rank(r)
	if err != nil {
		return 0
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return rs.seq
}

// Stats returns the counters.
func (e *Engine) Stats() Stats {
	e.mu.Lock()
	s := e.stats
	e.mu.Unlock()
	for _, rs := range e.ranks {
		rs.mu.Lock()
		s.DuplicateStores += int64(rs.pool.dupStores)
		rs.mu.Unlock()
	}
	return s
}

// Model returns the exact state of every rank.
func (e *Engine) Model() Model {
	m := Model{BlockSize: e.cfg.blockSize, Wire: e.cfg.wire.String(), HashFormat: e.cfg.hashes.String(),
		LoRAName: e.cfg.loraName, LoRAID: e.cfg.loraID, Stats: e.Stats()}
	for _, rs := range e.ranks {
		rs.mu.Lock()
		m.Ranks = append(m.Ranks, rs.pool.model(rs.rank, rs.seq))
		rs.mu.Unlock()
	}
	return m
}

// Close closes every socket; later calls fail with ErrClosed.
func (e *Engine) Close() error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil
	}
	e.closed = true
	e.mu.Unlock()
	for _, rs := range e.ranks {
		rs.mu.Lock()
		rs.close()
		rs.mu.Unlock()
	}
	return nil
}
