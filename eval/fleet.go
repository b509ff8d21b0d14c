package eval

import (
	"container/heap"
	"errors"
	"fmt"
	"math/rand/v2"
)

// Config describes the simulated fleet and its service-time model (docs/EVALUATION.md,
// "Topology" and "Service-time model").
type Config struct {
	// DCs and Workers are the fleet's shape: DCs DCs of Workers workers each.
	DCs, Workers int
	// CacheBlocks is each worker's KV cache in blocks. When a block must be stored in a full
	// cache, the least recently released unpinned block is evicted (leaves first: a block's
	// children are always released no later than it, and a released request's blocks are
	// queued tail first, as vLLM frees them).
	CacheBlocks int
	// BlockTokens is the tokens per block (512 for the Mooncake traces).
	BlockTokens int
	// PrefillRate is one worker's prefill throughput in tokens per second. A worker prefills
	// one request at a time, first come first served: a request's time to first token is its
	// wait in the worker's queue plus its uncached tokens / PrefillRate.
	PrefillRate float64
	// DecodeRate is one request's decode speed in tokens per second. Decoding runs batched,
	// beside the prefill queue (it does not delay it); it keeps the request's blocks pinned for
	// OutputTokens / DecodeRate seconds after its prefill.
	DecodeRate float64
	// LoadWeight is λ in the cost the ckf policy and the cost oracle minimise (Cost).
	LoadWeight float64
	// Warm preloads the trace's shared prefix (SharedPrefix) on every worker before the first
	// request; otherwise every cache starts empty.
	Warm bool
	// Seed drives every random choice (ties, the random policy).
	Seed uint64
	// Buckets is the number of time buckets of the series (hit rate and load over time).
	Buckets int
}

// DefaultConfig is the fleet processor replay simulates unless told otherwise: 4 DCs × 8 workers,
// 512 blocks of 512 tokens per worker (262,144 tokens: one 8-GPU node's KV cache for a 70B
// model), 8,000 prefill tokens/s per worker, 30 decode tokens/s per request, λ = DefaultLoadWeight,
// warm start.
func DefaultConfig() Config {
	return Config{DCs: 4, Workers: 8, CacheBlocks: 512, BlockTokens: 512, PrefillRate: 8000, DecodeRate: 30,
		LoadWeight: DefaultLoadWeight, Warm: true, Seed: 1, Buckets: 60}
}

// DefaultLoadWeight is λ unless told otherwise. λ = 1 would make Cost the literal estimate of the
// time to first token; it undervalues a cached prefix, whose worth includes the later turns of
// the same conversation that will find it there. On the Mooncake conversation trace the cost
// oracle's hit rate, over five seeds, is 0.980 of the depth oracle's at λ = 1 and 0.993 at
// λ = 0.25, at an equal or better mean time to first token (TestLoadWeightSweep with -sweep).
const DefaultLoadWeight = 0.25

// ErrConfig reports an unusable Config.
var ErrConfig = errors.New("eval: invalid config")

// Validate reports the first field out of range.
func (c Config) Validate() error {
	switch {
	case c.DCs < 1 || c.DCs > 64: // one lane a DC, up to ckf.MaxLanes (consumer §16)
		return fmt.Errorf("%w: %d DCs is not in [1,64]", ErrConfig, c.DCs)
	case c.Workers < 1:
		return fmt.Errorf("%w: %d workers per DC", ErrConfig, c.Workers)
	case c.CacheBlocks < 1:
		return fmt.Errorf("%w: a cache of %d blocks", ErrConfig, c.CacheBlocks)
	case c.BlockTokens < 1:
		return fmt.Errorf("%w: %d tokens per block", ErrConfig, c.BlockTokens)
	case !(c.PrefillRate > 0) || !(c.DecodeRate > 0):
		return fmt.Errorf("%w: prefill rate %v and decode rate %v must be positive", ErrConfig, c.PrefillRate, c.DecodeRate)
	case c.LoadWeight < 0:
		return fmt.Errorf("%w: load weight %v is negative", ErrConfig, c.LoadWeight)
	case c.Buckets < 1:
		return fmt.Errorf("%w: %d buckets", ErrConfig, c.Buckets)
	}
	return nil
}

// KVKind is the kind of a simulated engine's KV event.
type KVKind uint8

// The KV event kinds the engines emit.
const (
	KVStored KVKind = iota + 1
	KVRemoved
)

// KVEvent is one KV event of one worker, as an engine would publish it.
type KVEvent struct {
	Kind       KVKind
	DC, Worker int
	// EventID counts the worker's events from 1.
	EventID uint64
	// At is the simulated time in seconds.
	At float64
	// Keys are the blocks' canonical hashes (the engine's block ids); Locals their local block
	// hashes (KVStored only). Parent is the block the first stored block follows; HasParent is
	// false when they start a sequence.
	Keys, Locals []uint64
	// IDs are the stored blocks' hash ids in the trace (KVStored only).
	IDs []uint64
	// Chain is the local hashes of the whole prefix through the last stored block (KVStored
	// only): what a router asks for to see the event.
	Chain     []uint64
	Parent    uint64
	HasParent bool
	// DCChange are the keys that this event made resident in, or absent from, the DC as a
	// whole (no other worker of the DC held them before, or holds them after).
	DCChange []uint64
}

// View is what a policy knows when it places a request: the request and, for the oracles, the
// exact state of the fleet at its arrival.
type View struct {
	// Index is the request's position in the replay; Req the request; Keys its blocks'
	// canonical hashes and Locals their local hashes.
	Index  int
	Req    *Request
	Keys   []uint64
	Locals []uint64
	// Now is the simulated time in seconds.
	Now float64
	// Depth is each DC's exact cached prefix in blocks: the deepest over its workers.
	Depth []int
	// Load is each DC's outstanding prefill work in seconds, summed over its workers.
	Load []float64
}

// Policy places requests on DCs. Choose returns a DC index in [0, DCs).
type Policy interface {
	Name() string
	Choose(v *View, rng *rand.Rand) int
}

// WorkerView is what a two-stage policy knows when it places a request inside the DC it chose.
type WorkerView struct {
	// DC is the DC the policy chose.
	DC int
	// Out is each of the DC's workers' outstanding prefill work in seconds: the load term of the
	// worker rule (Config.WorkerCost), known to the router as the DC loads are.
	Out []float64
	// Depth is each worker's exact cached prefix in blocks: for measuring an answer against,
	// not for choosing (the exact-knowledge rule chooses on it).
	Depth []int
}

// WorkerPolicy is implemented by two-stage policies: after Choose, the fleet asks ChooseWorker
// for the worker inside the chosen DC instead of choosing it by the DC's exact knowledge of its
// workers' caches. For such a policy the fleet also counts, in Result.TwoStage, how often the DC
// and the worker equal what exact knowledge chooses with the same random draws.
type WorkerPolicy interface {
	ChooseWorker(v *View, wv *WorkerView, rng *rand.Rand) int
}

// Observer is implemented by policies that see the engines' KV events (an index model).
type Observer interface {
	Observe(ev *KVEvent)
}

type blk struct {
	key, local uint64
	refs       int
	prev, next *blk
	inLRU      bool
}

type job struct {
	idx        int
	req        *Request
	dc, worker int
	keys       []uint64
	locals     []uint64
	hit        int
	prefill    float64 // seconds
	arrival    float64
	pinned     []*blk
}

type worker struct {
	blocks  map[uint64]*blk
	lru     blk // sentinel of the list of unpinned blocks: lru.next is the least recent
	queue   []*job
	busy    bool
	out     float64 // outstanding prefill seconds
	eventID uint64
	busyFor float64 // prefill seconds served
}

func newWorker() *worker {
	w := &worker{blocks: map[uint64]*blk{}}
	w.lru.next, w.lru.prev = &w.lru, &w.lru
	return w
}

func (w *worker) pushMRU(b *blk) {
	b.prev, b.next = w.lru.prev, &w.lru
	w.lru.prev.next = b
	w.lru.prev = b
	b.inLRU = true
}

func (w *worker) unlink(b *blk) {
	b.prev.next, b.next.prev = b.next, b.prev
	b.prev, b.next, b.inLRU = nil, nil, false
}

func (w *worker) pin(b *blk) {
	if b.inLRU {
		w.unlink(b)
	}
	b.refs++
}

// depth is the worker's cached prefix of keys in blocks.
func (w *worker) depth(keys []uint64) int {
	for i, k := range keys {
		if w.blocks[k] == nil {
			return i
		}
	}
	return len(keys)
}

type simEvent struct {
	at   float64
	seq  uint64
	kind uint8 // 1 prefill done, 2 decode done
	job  *job
}

type eventHeap []simEvent

func (h eventHeap) Len() int { return len(h) }
func (h eventHeap) Less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return h[i].seq < h[j].seq
}
func (h eventHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *eventHeap) Push(x any)   { *h = append(*h, x.(simEvent)) }
func (h *eventHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// Fleet is one simulated fleet replaying one trace under one policy.
type Fleet struct {
	cfg     Config
	policy  Policy
	obs     Observer
	two     WorkerPolicy // nil unless the policy chooses the worker too
	src     *rand.PCG    // rng's source: saved and restored around the exact-knowledge choices
	rng     *rand.Rand
	workers [][]*worker
	dcHeld  []map[uint64]int32 // per DC: workers holding each key
	heap    eventHeap
	seq     uint64
	now     float64
	emit    func(*KVEvent)
	res     *Result
	dur     float64
}

// Hooks connect a fleet to the outside (processor replay's live run); every field is optional.
type Hooks struct {
	// Wait is called before the fleet moves to simulated time t (seconds); a live run sleeps
	// until the wall clock reaches it. An error stops the replay.
	Wait func(t float64) error
	// Emit receives every KV event as it happens. The event and its slices are the caller's
	// only until Emit returns.
	Emit func(ev *KVEvent)
	// Warmed is called after the warm start's blocks were stored, before the first request.
	Warmed func() error
}

// NewFleet builds a fleet of cfg that places requests with p.
func NewFleet(cfg Config, p Policy) (*Fleet, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	f := &Fleet{cfg: cfg, policy: p, src: rand.NewPCG(cfg.Seed, 0x6576616c)}
	f.rng = rand.New(f.src)
	f.obs, _ = p.(Observer)
	f.two, _ = p.(WorkerPolicy)
	for range cfg.DCs {
		ws := make([]*worker, cfg.Workers)
		for i := range ws {
			ws[i] = newWorker()
		}
		f.workers = append(f.workers, ws)
		f.dcHeld = append(f.dcHeld, map[uint64]int32{})
	}
	return f, nil
}

// Run replays reqs (in time order, times in milliseconds) and returns the result. warm is the
// shared prefix to preload when Config.Warm is set (SharedPrefix of the same requests).
func (f *Fleet) Run(reqs []Request, warm [][]uint64, h Hooks) (*Result, error) {
	if len(reqs) == 0 {
		return nil, ErrEmptyTrace
	}
	f.emit = h.Emit
	f.dur = reqs[len(reqs)-1].Time/1000 + 1e-9
	f.res = newResult(f.policy.Name(), f.cfg, f.dur)
	if f.cfg.Warm {
		for _, ids := range warm {
			keys, locals := BlockKeys(ids), LocalHashes(ids)
			for d := range f.workers {
				for w := range f.workers[d] {
					f.store(d, w, ids, keys, locals, 0, false)
				}
			}
		}
		if h.Warmed != nil {
			if err := h.Warmed(); err != nil {
				return nil, err
			}
		}
	}
	next := 0
	for next < len(reqs) || len(f.heap) > 0 {
		var t float64
		arrival := false
		if next < len(reqs) {
			t, arrival = reqs[next].Time/1000, true
		}
		if len(f.heap) > 0 && (!arrival || f.heap[0].at <= t) {
			t, arrival = f.heap[0].at, false
		}
		if h.Wait != nil {
			if err := h.Wait(t); err != nil {
				return nil, err
			}
		}
		f.now = t
		if arrival {
			f.arrive(next, &reqs[next])
			next++
			continue
		}
		ev := heap.Pop(&f.heap).(simEvent)
		switch ev.kind {
		case 1:
			f.prefillDone(ev.job)
		case 2:
			f.decodeDone(ev.job)
		}
	}
	f.res.finish(f)
	return f.res, nil
}

func (f *Fleet) push(at float64, kind uint8, j *job) {
	f.seq++
	heap.Push(&f.heap, simEvent{at: at, seq: f.seq, kind: kind, job: j})
}

// view returns the exact state for a request: each DC's deepest cached prefix and load.
func (f *Fleet) view(idx int, r *Request) *View {
	v := &View{Index: idx, Req: r, Keys: BlockKeys(r.HashIDs), Locals: LocalHashes(r.HashIDs), Now: f.now,
		Depth: make([]int, f.cfg.DCs), Load: make([]float64, f.cfg.DCs)}
	for d, held := range f.dcHeld {
		n := 0
		for n < len(v.Keys) && held[v.Keys[n]] > 0 {
			n++
		}
		v.Depth[d] = n
		for _, w := range f.workers[d] {
			v.Load[d] += w.out
		}
	}
	return v
}

func (f *Fleet) arrive(idx int, r *Request) {
	v := f.view(idx, r)
	exactDC := -1
	if f.two != nil {
		// What exact knowledge (the ckf rule on the exact depths: the cost oracle's choice) picks
		// with the draws the policy is about to use.
		saved := *f.src
		exactDC = f.cfg.ChooseByCost(r.InputTokens, v.Depth, v.Load, f.rng)
		*f.src = saved
	}
	dc := f.policy.Choose(v, f.rng)
	if dc < 0 || dc >= f.cfg.DCs {
		panic(fmt.Sprintf("eval: policy %s chose DC %d of %d", f.policy.Name(), dc, f.cfg.DCs))
	}
	f.res.noteArrival(v)
	// Inside the DC: the worker with the least estimated time to first token (WorkerChoice), by
	// the DC's exact knowledge of its workers' caches and queues, or by a two-stage policy's.
	ws := f.workers[dc]
	wv := &WorkerView{DC: dc, Out: make([]float64, len(ws)), Depth: make([]int, len(ws))}
	for w, wk := range ws {
		wv.Out[w], wv.Depth[w] = wk.out, wk.depth(v.Keys)
	}
	var best int
	if f.two == nil {
		best = f.cfg.WorkerChoice(r.InputTokens, wv.Depth, wv.Out, f.rng)
	} else {
		saved := *f.src
		exact := f.cfg.WorkerChoice(r.InputTokens, wv.Depth, wv.Out, f.rng)
		*f.src = saved
		best = f.two.ChooseWorker(v, wv, f.rng)
		if best < 0 || best >= len(ws) {
			panic(fmt.Sprintf("eval: policy %s chose worker %d of %d", f.policy.Name(), best, len(ws)))
		}
		f.res.noteTwoStage(dc == exactDC, best == exact)
	}
	wk := f.workers[dc][best]
	j := &job{idx: idx, req: r, dc: dc, worker: best, keys: v.Keys, locals: v.Locals, arrival: f.now}
	j.hit = wk.depth(v.Keys)
	for _, k := range v.Keys[:j.hit] {
		b := wk.blocks[k]
		wk.pin(b)
		j.pinned = append(j.pinned, b)
	}
	j.prefill = f.uncached(r, j.hit) / f.cfg.PrefillRate
	f.res.noteHit(f, j)
	wk.out += j.prefill
	wk.queue = append(wk.queue, j)
	f.startNext(wk)
}

// uncached is the tokens a request must prefill when its first hit blocks are cached: at least
// one (an engine computes the last prompt token even on a full hit).
func (f *Fleet) uncached(r *Request, hit int) float64 {
	return float64(max(r.InputTokens-hit*f.cfg.BlockTokens, min(1, r.InputTokens)))
}

func (f *Fleet) startNext(wk *worker) {
	if wk.busy || len(wk.queue) == 0 {
		return
	}
	j := wk.queue[0]
	wk.queue = wk.queue[1:]
	wk.busy = true
	f.push(f.now+j.prefill, 1, j)
}

func (f *Fleet) prefillDone(j *job) {
	wk := f.workers[j.dc][j.worker]
	wk.busy = false
	wk.out -= j.prefill
	if wk.out < 1e-12 && len(wk.queue) == 0 {
		wk.out = 0
	}
	wk.busyFor += j.prefill
	f.res.noteTTFT(f.now - j.arrival)
	j.pinned = append(j.pinned, f.store(j.dc, j.worker, j.req.HashIDs, j.keys, j.locals, j.hit, true)...)
	f.push(f.now+float64(j.req.OutputTokens)/f.cfg.DecodeRate, 2, j)
	f.startNext(wk)
}

// store makes a request's blocks from position from on resident on a worker (those before are
// resident and, when pin is set, pinned by the request), evicting least recently used unpinned
// blocks to make room, and emits the KVRemoved and KVStored events. With pin set it pins the
// blocks from position from on and returns them; the warm start pins nothing.
func (f *Fleet) store(dc, w int, ids, keys, locals []uint64, from int, pin bool) []*blk {
	wk := f.workers[dc][w]
	var pinned []*blk
	// Blocks another request stored meanwhile are already resident: the first missing one and
	// every later one are missing (a worker's cache is closed under prefixes).
	m := from
	for m < len(keys) && wk.blocks[keys[m]] != nil {
		b := wk.blocks[keys[m]]
		if pin {
			wk.pin(b)
			pinned = append(pinned, b)
		}
		m++
	}
	if m == len(keys) {
		return pinned
	}
	// Pin the chain we store onto while evicting, so that it cannot be evicted under us.
	var parent *blk
	var parentKey uint64
	hasParent := m > 0
	if hasParent {
		parentKey = keys[m-1]
	}
	if hasParent && !pin {
		parent = wk.blocks[parentKey]
		wk.pin(parent)
	}
	need := len(keys) - m
	var evicted []uint64
	for len(wk.blocks)+need > f.cfg.CacheBlocks && wk.lru.next != &wk.lru {
		b := wk.lru.next
		wk.unlink(b)
		delete(wk.blocks, b.key)
		evicted = append(evicted, b.key)
	}
	if over := len(wk.blocks) + need - f.cfg.CacheBlocks; over > 0 {
		f.res.Overflow += over
	}
	if parent != nil {
		parent.refs--
		if parent.refs == 0 {
			wk.pushMRU(parent)
		}
	}
	if len(evicted) > 0 {
		ev := &KVEvent{Kind: KVRemoved, DC: dc, Worker: w, At: f.now, Keys: evicted}
		held := f.dcHeld[dc]
		for _, k := range evicted {
			if held[k]--; held[k] <= 0 {
				delete(held, k)
				ev.DCChange = append(ev.DCChange, k)
			}
		}
		f.res.EvictedBlocks += len(evicted)
		f.send(wk, ev)
	}
	ev := &KVEvent{Kind: KVStored, DC: dc, Worker: w, At: f.now, Keys: keys[m:], Locals: locals[m:], IDs: ids[m:], Chain: locals, Parent: parentKey, HasParent: hasParent}
	held := f.dcHeld[dc]
	newBlocks := make([]*blk, 0, need)
	for i := m; i < len(keys); i++ {
		b := &blk{key: keys[i], local: locals[i]}
		wk.blocks[b.key] = b
		newBlocks = append(newBlocks, b)
		if held[b.key]++; held[b.key] == 1 {
			ev.DCChange = append(ev.DCChange, b.key)
		}
	}
	if pin {
		for _, b := range newBlocks {
			b.refs++
			pinned = append(pinned, b)
		}
	} else {
		for i := len(newBlocks) - 1; i >= 0; i-- {
			wk.pushMRU(newBlocks[i])
		}
	}
	f.res.StoredBlocks += need
	f.send(wk, ev)
	return pinned
}

func (f *Fleet) send(wk *worker, ev *KVEvent) {
	wk.eventID++
	ev.EventID = wk.eventID
	if ev.Kind == KVStored {
		f.res.StoredEvents++
	} else {
		f.res.RemovedEvents++
	}
	if f.obs != nil {
		f.obs.Observe(ev)
	}
	if f.emit != nil {
		f.emit(ev)
	}
}

// decodeDone releases the request's blocks, tail first, so that they are evicted leaves first.
func (f *Fleet) decodeDone(j *job) {
	wk := f.workers[j.dc][j.worker]
	for i := len(j.pinned) - 1; i >= 0; i-- {
		b := j.pinned[i]
		if b.refs--; b.refs == 0 {
			wk.pushMRU(b)
		}
	}
	j.pinned = nil
	f.res.Completed++
}
