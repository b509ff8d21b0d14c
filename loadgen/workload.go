// Package loadgen generates synthetic traffic for ckf-stream: engines in several DCs that emit
// KV-cache events (schemas.KvEvent) and routers that ask prefix-match queries
// (schemas.QueryRequest). It is used by processor loadgen and processor demo, and by tests and
// benchmarks that need realistic input.
//
// The workload (Workload) is a deterministic function of its Config and seed: the same seed gives
// the same event stream, so a failure seen under load can be replayed. The runner (Runner) paces
// the workload onto Kafka at the requested rates and measures what came back.
//
// The model, per DC:
//
//   - a few shared system prompts (popular ones more often: weight 1/(rank+1)), the same in every
//     DC, so different DCs hold the same prefixes;
//   - conversations that start from a system prompt and grow turn by turn; some fork from an
//     existing conversation at a block boundary (a regenerated answer, an edited message), so
//     prefixes branch;
//   - each conversation sticks to one worker of its DC (KV-aware routing), and now and then moves
//     to another worker, which then stores the whole prefix again;
//   - each worker keeps a bounded prefix cache: a request stores only the blocks the worker does
//     not hold yet (one KvStored event whose parent is the last cached block), and when the cache
//     is over capacity the least recently used leaves are evicted (one KvRemoved event);
//   - rarely a worker restarts and clears its cache (KvCleared).
//
// Blocks are real token blocks: their local hash is ckf.TokenBlockHash of the block's tokens, so
// a router may query by token ids or by local block hashes and get the same answer.
package loadgen

import (
	"cmp"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/schemas"
)

// Config describes the synthetic deployment. Zero fields take the defaults noted.
type Config struct {
	// Seed makes the workload reproducible. Default 1.
	Seed uint64
	// Namespace is the cache namespace every block is salted with (ckf.BlockSaltSeed) and that
	// token-id queries carry. The same seed with another namespace is the same workload on
	// other blocks, which an earlier run's state on the same lanes cannot answer: processor
	// loadgen gives every run its own. Default "" (unsalted blocks).
	Namespace string
	// DCs are the DC ids of the engines' DCs. Required.
	DCs []uint64
	// WorkersPerDC is the number of engine workers per DC (dp rank 0 each). Default 4.
	WorkersPerDC int
	// BlockSize is the number of tokens per KV block. Default 16.
	BlockSize int
	// SystemPrompts is the number of shared system prompts. Default 8.
	SystemPrompts int
	// SystemPromptBlocks bounds a system prompt's length in blocks. Default 4..24.
	SystemPromptBlocks [2]int
	// TurnBlocks bounds the blocks one conversation turn adds. Default 1..6.
	TurnBlocks [2]int
	// MaxTurns ends a conversation after this many turns. Default 12.
	MaxTurns int
	// ConversationsPerDC is the number of conversations alive per DC; a new one replaces the
	// oldest. Default 64.
	ConversationsPerDC int
	// WorkerCapacity is a worker's cache size in blocks; beyond it the least recently used
	// leaves are evicted. Default 2,048.
	WorkerCapacity int
	// NewConversation, Branch and Migrate are the probabilities that a request starts a new
	// conversation, forks an existing one, or moves its conversation to another worker.
	// Defaults 0.25, 0.15, 0.05.
	NewConversation, Branch, Migrate float64
	// Clear is the probability that a request is preceded by its worker clearing its cache (a
	// restart). Default 0.001.
	Clear float64
	// TokenQueries is the share of queries that carry token ids rather than local block
	// hashes. Default 0.5.
	TokenQueries float64
	// FreshQueries is the share of queries for a new conversation (a system prompt plus a new
	// message) rather than the next turn of a live one. Default 0.2.
	FreshQueries float64
}

func (c Config) withDefaults() Config {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	if c.Seed == 0 {
		c.Seed = 1
	}
	def(&c.WorkersPerDC, 4)
	def(&c.BlockSize, 16)
	def(&c.SystemPrompts, 8)
	def(&c.MaxTurns, 12)
	def(&c.ConversationsPerDC, 64)
	def(&c.WorkerCapacity, 2048)
	if c.SystemPromptBlocks == [2]int{} {
		c.SystemPromptBlocks = [2]int{4, 24}
	}
	if c.TurnBlocks == [2]int{} {
		c.TurnBlocks = [2]int{1, 6}
	}
	prob := func(v *float64, d float64) {
		if *v == 0 {
			*v = d
		}
	}
	prob(&c.NewConversation, 0.25)
	prob(&c.Branch, 0.15)
	prob(&c.Migrate, 0.05)
	prob(&c.Clear, 0.001)
	prob(&c.TokenQueries, 0.5)
	prob(&c.FreshQueries, 0.2)
	return c
}

// ErrConfig reports an unusable Config.
var ErrConfig = errors.New("loadgen: invalid config")

func (c Config) validate() error {
	switch {
	case len(c.DCs) == 0:
		return fmt.Errorf("%w: no DC", ErrConfig)
	case c.SystemPromptBlocks[0] < 1 || c.SystemPromptBlocks[1] < c.SystemPromptBlocks[0]:
		return fmt.Errorf("%w: system prompt blocks %v is not a range of at least 1", ErrConfig, c.SystemPromptBlocks)
	case c.TurnBlocks[0] < 1 || c.TurnBlocks[1] < c.TurnBlocks[0]:
		return fmt.Errorf("%w: turn blocks %v is not a range of at least 1", ErrConfig, c.TurnBlocks)
	case c.BlockSize > schemas.MaxBlockSize:
		return fmt.Errorf("%w: block size %d exceeds %d", ErrConfig, c.BlockSize, schemas.MaxBlockSize)
	}
	seen := map[uint64]bool{}
	for _, dc := range c.DCs {
		if seen[dc] {
			return fmt.Errorf("%w: DC %#x is listed twice", ErrConfig, dc)
		}
		seen[dc] = true
	}
	for _, p := range []float64{c.NewConversation, c.Branch, c.Migrate, c.Clear, c.TokenQueries, c.FreshQueries} {
		if p < 0 || p > 1 {
			return fmt.Errorf("%w: probability %v is not in [0,1]", ErrConfig, p)
		}
	}
	return nil
}

// Event is one KV event of one DC's engine.
type Event struct {
	// DC is the DC id; DCIndex its position in Config.DCs.
	DC      uint64
	DCIndex int
	KV      schemas.KvEvent
}

// block is one KV block of a conversation: its local hash (of its tokens) and its external
// id (the engine's hash of the whole prefix up to it, identical for identical prefixes).
type block struct {
	local, ext uint64
}

// sequence is a block-aligned prompt: its tokens and its blocks.
type sequence struct {
	tokens []uint32
	blocks []block
}

func (s sequence) clone() sequence {
	return sequence{tokens: slices.Clone(s.tokens), blocks: slices.Clone(s.blocks)}
}

type conversation struct {
	seq    sequence
	worker int
	turns  int
}

// cached is one block in a worker's cache.
type cached struct {
	parent   uint64 // ext of the parent, 0 for a root
	children int
	lastUse  uint64
}

type worker struct {
	id      uint64
	nextID  uint64 // event id
	blocks  map[uint64]*cached
	clears  int
	evicted int
}

type dcState struct {
	workers []*worker
	convs   []*conversation
	next    int // ring position of the next conversation to replace
}

// Workload is the deterministic generator. NextEvent is for one goroutine (the engines);
// NextQuery may run concurrently with it and with itself (the routers).
type Workload struct {
	cfg     Config
	salt    uint64
	prompts []sequence
	weights []float64 // cumulative prompt weights

	mu      sync.Mutex // guards everything below and the conversations NextQuery reads
	rng     *rand.Rand
	dcs     []*dcState
	tick    uint64
	pending []Event
	next    int // next DC, round robin
	stats   WorkloadStats
}

// WorkloadStats counts what the workload generated.
type WorkloadStats struct {
	Stored, Removed, Cleared  uint64 // events by kind
	StoredBlocks, Evictions   uint64 // blocks stored and removed
	Conversations, Branches   uint64
	Migrations, CachedBlocks  uint64 // CachedBlocks: blocks held by every worker now
	PromptBlocks, TotalBlocks uint64 // of the system prompts; of every request
}

// NewWorkload validates cfg and builds the system prompts and the engines.
func NewWorkload(cfg Config) (*Workload, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	w := &Workload{cfg: cfg, salt: ckf.BlockSaltSeed("", cfg.Namespace), rng: rand.New(rand.NewPCG(cfg.Seed, 0x6c6f616467656e))}
	total := 0.0
	for i := 0; i < cfg.SystemPrompts; i++ {
		n := w.between(cfg.SystemPromptBlocks)
		w.prompts = append(w.prompts, w.extend(sequence{}, n))
		total += 1 / float64(i+1)
		w.weights = append(w.weights, total)
	}
	for i := range cfg.DCs {
		d := &dcState{}
		for k := 0; k < cfg.WorkersPerDC; k++ {
			// Worker ids are unique across DCs, as engine ids are across a fleet.
			d.workers = append(d.workers, &worker{id: uint64(i+1)<<16 | uint64(k+1), nextID: 1, blocks: map[uint64]*cached{}})
		}
		w.dcs = append(w.dcs, d)
	}
	return w, nil
}

// Config returns the effective configuration.
func (w *Workload) Config() Config { return w.cfg }

// Stats returns the counts so far.
func (w *Workload) Stats() WorkloadStats {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := w.stats
	for _, d := range w.dcs {
		for _, wk := range d.workers {
			s.CachedBlocks += uint64(len(wk.blocks))
		}
	}
	return s
}

func (w *Workload) between(r [2]int) int { return r[0] + w.rng.IntN(r[1]-r[0]+1) }

// extend returns s plus n new blocks of random tokens (a vocabulary of 50,000).
func (w *Workload) extend(s sequence, n int) sequence {
	out := s.clone()
	bs := w.cfg.BlockSize
	for i := 0; i < n; i++ {
		start := len(out.tokens)
		for k := 0; k < bs; k++ {
			out.tokens = append(out.tokens, uint32(w.rng.IntN(50_000)))
		}
		local := uint64(ckf.TokenBlockHash(out.tokens[start:], w.salt))
		parent := uint64(0)
		if len(out.blocks) > 0 {
			parent = out.blocks[len(out.blocks)-1].ext
		}
		out.blocks = append(out.blocks, block{local: local, ext: extHash(parent, local)})
	}
	return out
}

// extHash is the engine's block id: a hash of the parent's id and the block's tokens, so equal
// prefixes get equal ids (as vLLM's prefix-caching hashes do). Never 0.
func extHash(parent, local uint64) uint64 {
	h := mix(parent ^ mix(local+0x9e3779b97f4a7c15))
	if h == 0 {
		h = 1
	}
	return h
}

// mix is SplitMix64's finaliser.
func mix(z uint64) uint64 {
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

func (w *Workload) pickPrompt(rng *rand.Rand) sequence {
	x := rng.Float64() * w.weights[len(w.weights)-1]
	i, _ := slices.BinarySearch(w.weights, x)
	return w.prompts[min(i, len(w.prompts)-1)]
}

// NextEvent returns the next KV event. Events of one worker come in the order its engine
// emitted them (event ids increase by one); DCs take turns.
func (w *Workload) NextEvent() Event {
	w.mu.Lock()
	defer w.mu.Unlock()
	for len(w.pending) == 0 {
		w.request(w.next)
		w.next = (w.next + 1) % len(w.dcs)
	}
	ev := w.pending[0]
	w.pending = w.pending[1:]
	if len(w.pending) == 0 {
		w.pending = w.pending[:0:0] // let the backing array go
	}
	return ev
}

// request simulates one inference request in DC i and queues the events it causes.
func (w *Workload) request(i int) {
	cfg, d := w.cfg, w.dcs[i]
	w.tick++
	var c *conversation
	switch r := w.rng.Float64(); {
	case len(d.convs) == 0 || r < cfg.NewConversation:
		c = &conversation{seq: w.extend(w.pickPrompt(w.rng), w.between(cfg.TurnBlocks)), worker: w.rng.IntN(len(d.workers))}
		w.stats.Conversations++
		w.addConversation(d, c)
	case r < cfg.NewConversation+cfg.Branch:
		src := d.convs[w.rng.IntN(len(d.convs))]
		cut := 1 + w.rng.IntN(len(src.seq.blocks))
		base := sequence{tokens: src.seq.tokens[:cut*cfg.BlockSize], blocks: src.seq.blocks[:cut]}
		c = &conversation{seq: w.extend(base, w.between(cfg.TurnBlocks)), worker: src.worker}
		w.stats.Branches++
		w.addConversation(d, c)
	default:
		c = d.convs[w.rng.IntN(len(d.convs))]
		c.seq = w.extend(c.seq, w.between(cfg.TurnBlocks))
		c.turns++
		if w.rng.Float64() < cfg.Migrate {
			c.worker = w.rng.IntN(len(d.workers))
			w.stats.Migrations++
		}
		if c.turns >= cfg.MaxTurns {
			// The conversation ends; a new one takes its place next time.
			c.turns = 0
			c.seq = w.extend(w.pickPrompt(w.rng), w.between(cfg.TurnBlocks))
			w.stats.Conversations++
		}
	}
	wk := d.workers[c.worker]
	if w.rng.Float64() < cfg.Clear {
		w.emit(i, wk, schemas.KvEvent{Kind: schemas.KvClearedEvent})
		clear(wk.blocks)
		wk.clears++
		w.stats.Cleared++
	}
	w.stats.TotalBlocks += uint64(len(c.seq.blocks))
	w.store(i, wk, c.seq.blocks)
	w.evict(i, wk)
}

func (w *Workload) addConversation(d *dcState, c *conversation) {
	if len(d.convs) < w.cfg.ConversationsPerDC {
		d.convs = append(d.convs, c)
		return
	}
	d.convs[d.next] = c
	d.next = (d.next + 1) % len(d.convs)
}

func (w *Workload) emit(i int, wk *worker, kv schemas.KvEvent) {
	kv.WorkerID = wk.id
	kv.EventID = wk.nextID
	kv.StorageTier = schemas.TierDevice
	wk.nextID++
	w.pending = append(w.pending, Event{DC: w.cfg.DCs[i], DCIndex: i, KV: kv})
}

// store emits the blocks of seq the worker does not hold, as one KvStored event whose parent is
// the last block it holds, and marks the whole prefix used.
func (w *Workload) store(i int, wk *worker, blocks []block) {
	k := 0
	for k < len(blocks) && wk.blocks[blocks[k].ext] != nil {
		wk.blocks[blocks[k].ext].lastUse = w.tick
		k++
	}
	if k == len(blocks) {
		return
	}
	kv := schemas.KvEvent{Kind: schemas.KvStoredEvent, Stored: schemas.KvStored{BlockSize: uint32(w.cfg.BlockSize)}} // the relay stamps it on the lane (consumer §6.5)
	parent := uint64(0)
	if k > 0 {
		parent = blocks[k-1].ext
		kv.Stored.ParentHash = schemas.Some(parent)
		wk.blocks[parent].children++
	}
	for _, b := range blocks[k:] {
		kv.Stored.Blocks = append(kv.Stored.Blocks, schemas.KvBlock{BlockHash: b.ext, TokensHash: b.local})
		wk.blocks[b.ext] = &cached{parent: parent, lastUse: w.tick, children: 1}
		parent = b.ext
	}
	wk.blocks[parent].children = 0 // the last block is a leaf
	w.emit(i, wk, kv)
	w.stats.Stored++
	w.stats.StoredBlocks += uint64(len(blocks) - k)
}

// evict removes least recently used leaves while the worker holds more than its capacity: one
// KvRemoved event per pass, of a tenth of the capacity at most.
func (w *Workload) evict(i int, wk *worker) {
	over := len(wk.blocks) - w.cfg.WorkerCapacity
	if over <= 0 {
		return
	}
	batch := max(over, w.cfg.WorkerCapacity/10)
	type leaf struct{ ext, lastUse uint64 }
	var leaves []leaf
	for ext, b := range wk.blocks {
		if b.children == 0 {
			leaves = append(leaves, leaf{ext, b.lastUse})
		}
	}
	// Map order is random: sort by (lastUse, ext) so the choice is deterministic.
	slices.SortFunc(leaves, func(a, b leaf) int {
		if c := cmp.Compare(a.lastUse, b.lastUse); c != 0 {
			return c
		}
		return cmp.Compare(a.ext, b.ext)
	})
	if len(leaves) > batch {
		leaves = leaves[:batch]
	}
	kv := schemas.KvEvent{Kind: schemas.KvRemovedEvent}
	for _, l := range leaves {
		b := wk.blocks[l.ext]
		if b.parent != 0 {
			if p := wk.blocks[b.parent]; p != nil {
				p.children--
			}
		}
		delete(wk.blocks, l.ext)
		kv.Removed.BlockHashes = append(kv.Removed.BlockHashes, l.ext)
	}
	w.emit(i, wk, kv)
	wk.evicted += len(leaves)
	w.stats.Removed++
	w.stats.Evictions += uint64(len(leaves))
}

// Query is one router query: the request (without correlation id) and the DC whose engines
// served the conversation, if it is a live one (-1 for a fresh conversation).
type Query struct {
	Request schemas.QueryRequest
	HomeDC  int
	Blocks  int
}

// NextQuery returns a router query drawn with rng (each router goroutine has its own): the next
// turn of a live conversation of a random DC, or a new conversation on a popular system prompt.
// The query carries token ids or local block hashes (Config.TokenQueries).
func (w *Workload) NextQuery(rng *rand.Rand) Query {
	cfg := w.cfg
	var seq sequence
	home := -1
	w.mu.Lock()
	i := rng.IntN(len(w.dcs))
	if d := w.dcs[i]; len(d.convs) > 0 && rng.Float64() >= cfg.FreshQueries {
		c := d.convs[rng.IntN(len(d.convs))]
		seq = sequence{tokens: c.seq.tokens, blocks: c.seq.blocks} // read-only: extend copies
		home = i
	} else {
		seq = w.pickPrompt(rng)
	}
	w.mu.Unlock()
	// The new message: fresh tokens the engines have not seen.
	n := cfg.TurnBlocks[0] + rng.IntN(cfg.TurnBlocks[1]-cfg.TurnBlocks[0]+1)
	tokens := slices.Grow(slices.Clone(seq.tokens), n*cfg.BlockSize)
	for k := 0; k < n*cfg.BlockSize; k++ {
		tokens = append(tokens, uint32(rng.IntN(50_000)))
	}
	q := Query{HomeDC: home, Blocks: len(tokens) / cfg.BlockSize}
	if rng.Float64() < cfg.TokenQueries {
		q.Request = schemas.QueryRequest{Input: schemas.InputTokenIDs, Tokens: schemas.AppendU32s(nil, tokens), BlockSize: uint32(cfg.BlockSize),
			CacheNamespace: cfg.Namespace, LaneMask64: schemas.Some(schemas.AllLanes64)}
		return q
	}
	hashes := make([]uint64, 0, q.Blocks)
	for _, b := range seq.blocks {
		hashes = append(hashes, b.local)
	}
	for k := len(seq.blocks); k < q.Blocks; k++ {
		hashes = append(hashes, uint64(ckf.TokenBlockHash(tokens[k*cfg.BlockSize:(k+1)*cfg.BlockSize], w.salt)))
	}
	// lane_mask64: every lane, read as up to 64 (consumer §16), as routers of this revision ask.
	q.Request = schemas.QueryRequest{Input: schemas.InputLocalBlockHashes, Hashes: schemas.AppendU64s(nil, hashes),
		LaneMask64: schemas.Some(schemas.AllLanes64)}
	return q
}
