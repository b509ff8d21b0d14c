package engineemu

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"slices"

	"github.com/ckf-stream/ckf-stream/ckf"
)

// vocab bounds the emulated token ids.
const vocab = 32000

// block is one block the pool has made: its digest, its parent's, its tokens, LoRA and extra
// keys (as they enter the local hash: the image and cache salt, not the LoRA name).
type block struct {
	digest   Digest
	parent   *Digest
	tokens   []uint32
	lora     string
	extra    ExtraKeys
	salt     string // the SGLang cache salt of the block's sequence ("" for none; SaltFraction)
	copies   int    // stores not yet matched by a removal, while resident on GPU
	children int    // resident GPU children
}

// indexedSet is a set with constant-time add, remove and uniform choice.
type indexedSet struct {
	items []Digest
	pos   map[Digest]int
}

func newIndexedSet() *indexedSet { return &indexedSet{pos: make(map[Digest]int)} }

func (s *indexedSet) len() int { return len(s.items) }

func (s *indexedSet) add(d Digest) {
	if _, ok := s.pos[d]; !ok {
		s.pos[d] = len(s.items)
		s.items = append(s.items, d)
	}
}

func (s *indexedSet) remove(d Digest) {
	i, ok := s.pos[d]
	if !ok {
		return
	}
	delete(s.pos, d)
	last := s.items[len(s.items)-1]
	s.items = s.items[:len(s.items)-1]
	if i < len(s.items) {
		s.items[i] = last
		s.pos[last] = i
	}
}

func (s *indexedSet) clear() { s.items = s.items[:0]; clear(s.pos) }

// sample returns up to n distinct members chosen uniformly.
func (s *indexedSet) sample(rng *rand.Rand, n int) []Digest {
	n = min(n, len(s.items))
	out := make([]Digest, 0, n)
	picked := make(map[int]bool, n)
	for len(out) < n {
		i := rng.IntN(len(s.items))
		if picked[i] {
			continue
		}
		picked[i] = true
		out = append(out, s.items[i])
	}
	return out
}

// pool is one rank's emulated block pool: resident GPU blocks (prefix-closed: only leaves are
// evicted), a CPU tier, a sliding-window group, and every block ever made.
type pool struct {
	cfg    *cfg
	rng    *rand.Rand
	known  map[Digest]*block
	gpu    map[Digest]*block
	keys   *indexedSet // gpu's keys
	leaves *indexedSet // resident GPU blocks without resident children
	cpu    *indexedSet
	window *indexedSet
	// windowOnly and evicted are the ends of chains that were stored elsewhere or evicted: the
	// model's absent chains (bounded).
	windowOnly []Digest
	evicted    []Digest
	dupStores  int
}

func newPool(c *cfg, rank int) *pool {
	return &pool{
		cfg: c, rng: rand.New(rand.NewPCG(c.seed, uint64(rank))),
		known: make(map[Digest]*block), gpu: make(map[Digest]*block),
		keys: newIndexedSet(), leaves: newIndexedSet(), cpu: newIndexedSet(), window: newIndexedSet(),
	}
}

const absentKept = 2000

// dropAll empties every tier (an engine restart or a clear).
func (p *pool) dropAll() {
	for d := range p.gpu {
		p.noteEvicted(d)
	}
	clear(p.gpu)
	p.keys.clear()
	p.leaves.clear()
	p.cpu.clear()
	p.window.clear()
}

func (p *pool) noteEvicted(d Digest) {
	p.evicted = append(p.evicted, d)
	if len(p.evicted) > 2*absentKept {
		p.evicted = slices.Delete(p.evicted, 0, len(p.evicted)-absentKept)
	}
}

// blockDigest is the emulated engine hash of a block: SHA-256 of the parent digest (zeros for
// a root), the tokens as little-endian u32, the LoRA name and the canonical encoding of the
// extra keys (nothing without).
func blockDigest(parent *Digest, tokens []uint32, lora string, extra ExtraKeys) Digest {
	h := sha256.New()
	var zero Digest
	if parent != nil {
		h.Write(parent[:])
	} else {
		h.Write(zero[:])
	}
	var b [4]byte
	for _, t := range tokens {
		binary.LittleEndian.PutUint32(b[:], t)
		h.Write(b[:])
	}
	h.Write([]byte(lora))
	h.Write(extra.AppendCanonical(nil))
	var d Digest
	h.Sum(d[:0])
	return d
}

// newChain makes n blocks of random tokens after parent (nil: a new root, salted with salt
// when it is not empty; after a parent, the parent's salt).
func (p *pool) newChain(parent *block, n int, lora, salt string) []*block {
	out := make([]*block, 0, n)
	prev := parent
	for range n {
		tokens := make([]uint32, p.cfg.blockSize)
		for i := range tokens {
			tokens[i] = uint32(p.rng.IntN(vocab))
		}
		prev = p.chainBlock(prev, tokens, lora, nil, salt)
		out = append(out, prev)
	}
	return out
}

// chainBlock returns the block after prev (nil: a root) with these tokens, LoRA and extra
// keys, the known one when the pool made it before. A block after prev is in prev's salt's
// namespace; a root is in salt's, which enters its digest as SGLang's salted event hashes are
// seeded from the salt, so salted and unsalted sequences share no block.
func (p *pool) chainBlock(prev *block, tokens []uint32, lora string, extra ExtraKeys, salt string) *block {
	var pd *Digest
	digestExtra := extra
	if prev != nil {
		d := prev.digest
		pd = &d
		salt = prev.salt
	} else if salt != "" {
		digestExtra = append(extra[:len(extra):len(extra)], ckf.ExtraStringValue(salt))
	}
	d := blockDigest(pd, tokens, lora, digestExtra)
	b := p.known[d]
	if b == nil {
		b = &block{digest: d, parent: pd, tokens: tokens, lora: lora, extra: extra, salt: salt}
		p.known[d] = b
	}
	return b
}

// salts says whether the pool salts sequences as SGLang does (SaltFraction; only in SGLang's
// shapes: the six-field array, whose salted stores append a metadata map, and the map events,
// whose salted stores carry a cache_salt key).
func (p *pool) salts() bool {
	return p.cfg.saltFraction > 0 && (p.cfg.wire == WireArray6 || p.cfg.wire == WireMapEvents)
}

// imagePlaceholder is the token id of an image's positions: outside the random vocabulary.
const imagePlaceholder = vocab

// images says whether the pool makes image chains and sends extra_keys (MMFraction; only in
// the shapes with the full field set: the shorter ones predate extra_keys).
func (p *pool) images() bool { return p.cfg.mmFraction > 0 && p.cfg.wire.HasGroups() }

// imageChain makes a new root chain of n blocks holding one image, as a multimodal prompt's
// blocks look to vLLM: token 1 before the image, the placeholder over it, 2 after it, so
// chains of different images often have the same tokens. The image (one of eight identifiers)
// starts in block 0 and ends within the chain; half the chains also carry a cache salt (one of
// two). A block's extra keys are what vLLM 0.34.0 mixes into its hash besides the LoRA name
// (vllm/v1/core/kv_cache_utils.py, generate_block_hash_extra_keys): (identifier, the image's
// offset from the block's first token) when the image overlaps the block, then the salt in
// block 0.
func (p *pool) imageChain(n int, lora string) []*block {
	bs := p.cfg.blockSize
	start := p.rng.IntN(bs)
	length := 1 + p.rng.IntN(n*bs-start)
	id := fmt.Sprintf("img-%d", p.rng.IntN(8))
	salt := ""
	if p.rng.IntN(2) == 0 {
		salt = fmt.Sprintf("salt-%d", p.rng.IntN(2))
	}
	out := make([]*block, 0, n)
	var prev *block
	for b := range n {
		lo, hi := b*bs, (b+1)*bs
		tokens := make([]uint32, bs)
		for i := range tokens {
			switch pos := lo + i; {
			case pos < start:
				tokens[i] = 1
			case pos < start+length:
				tokens[i] = imagePlaceholder
			default:
				tokens[i] = 2
			}
		}
		var extra ExtraKeys
		if start < hi && start+length > lo {
			extra = append(extra, ckf.ExtraTupleValue(ckf.ExtraStringValue(id), ckf.ExtraIntValue(int64(start-lo))))
		}
		if b == 0 && salt != "" {
			extra = append(extra, ckf.ExtraStringValue(salt))
		}
		prev = p.chainBlock(prev, tokens, lora, extra, "")
		out = append(out, prev)
	}
	return out
}

func (p *pool) storedEvent(chain []*block, medium string, g *Group) Event {
	ev := Event{Kind: BlockStored, Parent: chain[0].parent, BlockSize: p.cfg.blockSize, Medium: medium,
		LoRAName: chain[0].lora, Group: g, CacheSalt: chain[0].salt}
	if ev.LoRAName != "" {
		id := p.cfg.loraID
		ev.LoRAID = &id
	}
	for _, b := range chain {
		ev.Hashes = append(ev.Hashes, b.digest)
		ev.Tokens = append(ev.Tokens, b.tokens...)
	}
	if p.images() {
		// vLLM 0.34.0 (to_event_extra_keys): per block, the LoRA name, then the block's own
		// keys; None for a block with neither.
		ev.ExtraKeys = make([]ExtraKeys, len(chain))
		for i, b := range chain {
			var k ExtraKeys
			if b.lora != "" {
				k = append(k, ckf.ExtraStringValue(b.lora))
			}
			ev.ExtraKeys[i] = append(k, b.extra...)
		}
	}
	return ev
}

func (p *pool) randomResident() *block { return p.gpu[p.keys.sample(p.rng, 1)[0]] }

func (p *pool) gpuStore() Event {
	if p.keys.len() > 0 && p.rng.Float64() < p.cfg.dupFraction {
		// The same block stored again (two requests computed it): one more copy to remove.
		b := p.randomResident()
		b.copies++
		p.dupStores++
		return p.storedEvent([]*block{b}, "GPU", nil)
	}
	var parent *block
	if p.keys.len() > 0 && p.rng.Float64() < 0.7 {
		parent = p.randomResident()
	}
	lora := ""
	if parent != nil {
		lora = parent.lora
	} else if p.rng.Float64() < p.cfg.loraFraction {
		lora = p.cfg.loraName
	}
	var chain []*block
	if parent == nil && p.images() && p.rng.Float64() < p.cfg.mmFraction {
		chain = p.imageChain(1+p.rng.IntN(4), lora)
	} else {
		salt := ""
		if parent == nil && p.salts() && p.rng.Float64() < p.cfg.saltFraction {
			salt = fmt.Sprintf("tenant-%d", p.rng.IntN(2))
		}
		chain = p.newChain(parent, 1+p.rng.IntN(4), lora, salt)
	}
	for _, b := range chain {
		if _, ok := p.gpu[b.digest]; ok {
			b.copies++
			continue
		}
		b.copies, b.children = 1, 0
		p.gpu[b.digest] = b
		p.keys.add(b.digest)
		p.leaves.add(b.digest)
		if b.parent != nil {
			if pb, ok := p.gpu[*b.parent]; ok {
				pb.children++
				p.leaves.remove(pb.digest)
			}
		}
	}
	return p.storedEvent(chain, "GPU", nil)
}

func (p *pool) gpuEvict() (Event, bool) {
	if p.leaves.len() == 0 {
		return Event{}, false
	}
	ev := Event{Kind: BlockRemoved, Medium: "GPU"}
	for _, d := range p.leaves.sample(p.rng, 1+p.rng.IntN(4)) {
		b := p.gpu[d]
		ev.Hashes = append(ev.Hashes, d)
		b.copies--
		if b.copies > 0 {
			continue
		}
		delete(p.gpu, d)
		p.keys.remove(d)
		p.leaves.remove(d)
		p.noteEvicted(d)
		if b.parent != nil {
			if pb, ok := p.gpu[*b.parent]; ok {
				pb.children--
				if pb.children == 0 {
					p.leaves.add(pb.digest)
				}
			}
		}
	}
	return ev, true
}

func (p *pool) cpuEvent() Event {
	if p.cpu.len() > 0 && p.rng.Float64() < 0.4 {
		victims := p.cpu.sample(p.rng, 1+p.rng.IntN(3))
		for _, d := range victims {
			p.cpu.remove(d)
		}
		return Event{Kind: BlockRemoved, Medium: p.cfg.cpuMedium, Hashes: victims}
	}
	var chain []*block
	if p.keys.len() > 0 && p.rng.Float64() < 0.5 {
		// Offload a resident GPU block: the same hash on another medium.
		chain = []*block{p.randomResident()}
	} else {
		// A chain that only ever lives on the CPU tier.
		chain = p.newChain(nil, 1+p.rng.IntN(3), "", "")
	}
	for _, b := range chain {
		p.cpu.add(b.digest)
	}
	return p.storedEvent(chain, p.cfg.cpuMedium, nil)
}

func (p *pool) windowEvent() Event {
	if p.window.len() > 0 && p.rng.Float64() < 0.3 {
		victims := p.window.sample(p.rng, 2)
		for _, d := range victims {
			p.window.remove(d)
		}
		return Event{Kind: BlockRemoved, Medium: "GPU", Hashes: victims, Group: slidingWindowGroup}
	}
	chain := p.newChain(nil, 1+p.rng.IntN(3), "", "")
	for _, b := range chain {
		p.window.add(b.digest)
	}
	p.windowOnly = append(p.windowOnly, chain[len(chain)-1].digest)
	if len(p.windowOnly) > 2*absentKept {
		p.windowOnly = slices.Delete(p.windowOnly, 0, len(p.windowOnly)-absentKept)
	}
	return p.storedEvent(chain, "GPU", slidingWindowGroup)
}

// nextBatch makes the events of one batch (one to maxEvents).
func (p *pool) nextBatch() []Event {
	c := p.cfg
	n := 1 + p.rng.IntN(c.maxEvents)
	events := make([]Event, 0, n)
	for range n {
		r := p.rng.Float64()
		switch {
		case len(p.gpu) >= c.capacity || (len(p.gpu) > 0 && r < 0.3):
			if ev, ok := p.gpuEvict(); ok {
				events = append(events, ev)
			}
		case r < 0.3+c.cpuFraction && c.wire.HasMedium():
			events = append(events, p.cpuEvent())
		case c.hybrid && c.wire.HasGroups() && r < 0.35+c.cpuFraction:
			events = append(events, p.windowEvent())
		default:
			events = append(events, p.gpuStore())
		}
	}
	return events
}

// chainOf returns the LoRA, the tokens from the root to d, the number of blocks and their
// extra keys (nil when none has any).
func (p *pool) chainOf(d Digest) Chain {
	var parts [][]uint32
	var extra []ExtraKeys
	withExtra := false
	b := p.known[d]
	lora := b.lora
	for {
		parts = append(parts, b.tokens)
		k := b.extra
		if b.parent == nil && b.salt != "" {
			// The salt of an SGLang sequence enters its first block's hash (bridge.WithCacheSalt).
			k = append(k[:len(k):len(k)], ckf.ExtraStringValue(b.salt))
		}
		extra = append(extra, k)
		withExtra = withExtra || len(k) > 0
		if b.parent == nil {
			break
		}
		b = p.known[*b.parent]
	}
	slices.Reverse(parts)
	c := Chain{LoRAName: lora, Tokens: slices.Concat(parts...), Blocks: len(parts)}
	if withExtra {
		slices.Reverse(extra)
		c.ExtraKeys = extra
	}
	return c
}

// model returns the rank's exact model.
func (p *pool) model(rank int, nextSeq uint64) RankModel {
	m := RankModel{Rank: rank, NextSeq: nextSeq, ResidentBlocks: len(p.gpu)}
	for _, d := range p.leaves.items {
		m.Resident = append(m.Resident, p.chainOf(d))
	}
	seen := make(map[Digest]bool)
	others := slices.Concat(p.cpu.items, lastN(p.windowOnly, absentKept/2), lastN(p.evicted, absentKept))
	for _, d := range others {
		if _, ok := p.gpu[d]; ok || seen[d] {
			continue
		}
		seen[d] = true
		m.Absent = append(m.Absent, p.chainOf(d))
	}
	sortChains(m.Resident)
	sortChains(m.Absent)
	return m
}

func lastN(ds []Digest, n int) []Digest { return ds[max(0, len(ds)-n):] }

func sortChains(cs []Chain) {
	slices.SortFunc(cs, func(a, b Chain) int {
		if c := slices.Compare(a.Tokens, b.Tokens); c != 0 {
			return c
		}
		return slices.CompareFunc(a.ExtraKeys, b.ExtraKeys, func(x, y ExtraKeys) int {
			return slices.Compare(x.AppendCanonical(nil), y.AppendCanonical(nil))
		})
	})
}
