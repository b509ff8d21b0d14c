package peer

import (
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"testing"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/ckf/index"
	"github.com/ckf-stream/ckf-stream/ckf/producer"
)

// Fixture parameters. bench/peer-dynamo/src/main.rs declares the same
// values under the same names in SCREAMING_CASE; a change here needs the same
// change there (the fixture checksums then tell whether both still agree).
const (
	queryBuckets        = 1 << 20
	queryChainLen       = 128
	queryChainsPerShape = 512
	queryStream         = 0x5045455251554552

	snapshotBuckets = 1 << 20
	snapshotStream  = 0x50454552534E4150
	deltaBuckets    = 1 << 20
	deltaImages     = 23
	deltaRing       = 1 << 12
	deltaStream     = 0x5045455244454C54

	chainStream       = 0x5045455243484149
	addressingBuckets = 1 << 12

	storeWindow     = 1024
	storeStream90   = 0x5045455253543930
	storeStreamFill = 0x5045455253543530
	fillBuckets     = 1 << 16

	lookupStream     = 0x504545524C4F4F4B
	lookupRingStream = 0x504545524C52494E
	lookupRing       = 1 << 16

	peerWorker   ckf.WorkerID           = 1
	peerConsumer ckf.ConsumerInstanceID = 1
)

// splitMix is SplitMix64 (producer §6.1), the generator of every fixture.
type splitMix uint64

func (s *splitMix) next() uint64 {
	*s += 0x9E3779B97F4A7C15
	z := uint64(*s)
	z = (z ^ z>>30) * 0xBF58476D1CE4E5B9
	z = (z ^ z>>27) * 0x94D049BB133111EB
	return z ^ z>>31
}

// checksum is FNV-1a over 64-bit words, folded to 48 bits so that a float64
// benchmark metric carries it exactly.
type checksum uint64

func newChecksum() checksum { return 0xCBF29CE484222325 }

func (c *checksum) add(w uint64) { *c = (*c ^ checksum(w)) * 0x00000100000001B3 }

func (c checksum) fold48() uint64 { return (uint64(c) ^ uint64(c)>>48) & (1<<48 - 1) }

// expectedBlocksFor is the expected_blocks_per_dc that yields exactly
// buckets buckets (producer §5.2).
func expectedBlocksFor(buckets uint64) uint64 { return buckets * 16 / 5 }

func peerDomain() ckf.IndexerDomainID {
	var d ckf.IndexerDomainID
	d.CacheSemantics.Digest[0] = 0xC5
	d.CacheSemantics.Source = ckf.IdentityExplicit
	d.RoutingScope.Digest[0] = 0x5C
	d.RoutingScope.Source = ckf.IdentityExplicit
	return d
}

// consumer is a GlobalIndexer with lanes 0..lanes-1 configured, lane l
// owned by DC 100+l.
type consumer struct {
	g      *index.GlobalIndexer
	format ckf.FormatIdentity
	pools  []ckf.PoolID
}

func newConsumer(tb testing.TB, buckets uint64, lanes int) *consumer {
	tb.Helper()
	c := &consumer{format: ckf.NewFormatIdentity(ckf.DefaultSeed, buckets)}
	var ml index.ManifestLanes
	for l := 0; l < lanes; l++ {
		p := ckf.PoolID{Domain: peerDomain(), Dc: ckf.DcID(100 + l)}
		c.pools = append(c.pools, p)
		ml[l] = &c.pools[len(c.pools)-1]
	}
	m, _, err := index.NewManifest(peerConsumer, peerDomain(), c.format, ml)
	if err != nil {
		tb.Fatal(err)
	}
	c.g, err = index.NewGlobalIndexer(m, ckf.SearchConfig{VerificationWindow: ckf.DefaultVerificationWindow})
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

func (c *consumer) identity(lane uint8) ckf.ProducerIdentity {
	return ckf.ProducerIdentity{Pool: c.pools[lane], Incarnation: 4, LayoutGeneration: 1, Format: c.format}
}

func lease(lane uint8, epoch uint64) ckf.LaneLease {
	return ckf.LaneLease{Consumer: peerConsumer, Lane: lane, Epoch: epoch}
}

// readyLane claims lane, assigns epoch 1 and installs words at sequence 0.
func (c *consumer) readyLane(tb testing.TB, lane uint8, words []uint64) *index.LaneIngestor {
	tb.Helper()
	in, err := c.g.ClaimLane(lane)
	if err != nil {
		tb.Fatal(err)
	}
	if err := in.Assign(c.identity(lane), lease(lane, 1)); err != nil {
		tb.Fatal(err)
	}
	s := &ckf.Snapshot{Identity: c.identity(lane), Lease: lease(lane, 1), Buckets: words}
	if out := in.InstallSnapshot(s); out.Kind != index.OutcomeSnapshotInstalled {
		tb.Fatalf("snapshot of lane %d: %v", lane, out)
	}
	return in
}

// ---- query fixture ------------------------------------------------------------

// queryFixture is the 16-lane, 2^20-bucket table of the query rows, built in
// this order (bench/peer-dynamo builds the same):
//  1. 2 × 512 chains of 128 local hashes, one draw each; the first 512 are
//     "shared", the rest "divergent";
//  2. a shared chain is present in every lane at depth 128; a divergent
//     chain gets, lane by lane, a depth draw % 129, redrawn until it differs
//     from the depths of the chain's earlier lanes;
//  3. on empty lanes, chain by chain, lane by lane, position by position, the
//     fingerprint goes into the lowest empty slot of bucket A, else of
//     bucket B (a fixture in which both are full fails);
//  4. then lane by lane, bucket by bucket, two draws occ and fps; empty slot
//     s gets the fingerprint uint16(fps >> 16s) (0 -> 1) when bit s of occ
//     is set, about 50 % of the slots.
type queryFixture struct {
	c         *consumer
	shared    [][]uint64
	divergent [][]uint64
	depths    [][ckf.LaneCount]int // per chain, shared first
	sum       uint64
	load      float64 // occupied slots / all slots over the 16 lanes
}

// fixtureCache keeps a benchmark's fixtures by size, for every sub-benchmark and b.N ramp-up
// that uses them, until releaseFixtures drops them.
type fixtureCache[T any] struct {
	mu sync.Mutex
	m  map[uint64]*T
}

// get returns the fixture of key, building it first when there is none.
func (c *fixtureCache[T]) get(key uint64, build func() *T) *T {
	c.mu.Lock()
	defer c.mu.Unlock()
	if fx, ok := c.m[key]; ok {
		return fx
	}
	fx := build()
	if c.m == nil {
		c.m = map[uint64]*T{}
	}
	c.m[key] = fx
	return fx
}

func (c *fixtureCache[T]) release() {
	c.mu.Lock()
	clear(c.m)
	c.mu.Unlock()
}

// queryFixtures holds the one query fixture (key 0).
var queryFixtures fixtureCache[queryFixture]

// getQueryFixture returns the query fixture, built once for both shapes of
// BenchmarkPeerQuery128 (it holds 256 MiB while it is built).
func getQueryFixture(tb testing.TB) *queryFixture {
	tb.Helper()
	return queryFixtures.get(0, func() *queryFixture {
		fx, err := buildQueryFixture(tb)
		if err != nil {
			tb.Fatal(err)
		}
		return fx
	})
}

// releaseFixtures drops the fixtures shared by a benchmark's sub-benchmarks
// (the query, steady-producer and lookup states, hundreds of MiB together)
// and collects them, returning their memory to the OS. Each parent
// benchmark calls it once its rows are done, so that, as on the Rust side,
// where each row's state is dropped at the end of its function, a row does
// not run beside the live states of the rows before it: in one process they
// raised the heap to about 290 MiB, and with it the garbage collector's
// goal, so the 0 -> 50 % row's growing tables kept taking fresh memory
// (1.4x its time alone, on Intel Xeon, 2 vCPUs).
func releaseFixtures() {
	queryFixtures.release()
	steadies.release()
	lookupFixtures.release()
	debug.FreeOSMemory() // a full collection first, then the release
}

func lowestEmpty(word uint64) int {
	for s := 0; s < 4; s++ {
		if uint16(word>>(16*s)) == 0 {
			return s
		}
	}
	return -1
}

func buildQueryFixture(tb testing.TB) (*queryFixture, error) {
	addr, err := ckf.NewAddressing(queryBuckets, ckf.DefaultSeed)
	if err != nil {
		return nil, err
	}
	rng := splitMix(queryStream)
	chains := make([][]uint64, 2*queryChainsPerShape)
	for c := range chains {
		chains[c] = make([]uint64, queryChainLen)
		for i := range chains[c] {
			chains[c][i] = rng.next()
		}
	}
	depths := make([][ckf.LaneCount]int, len(chains))
	for c := range depths {
		for l := range depths[c] {
			depths[c][l] = queryChainLen
		}
		if c < queryChainsPerShape {
			continue
		}
		for l := 0; l < ckf.LaneCount; l++ {
		draw:
			for {
				v := int(rng.next() % (queryChainLen + 1))
				for _, prev := range depths[c][:l] {
					if prev == v {
						continue draw
					}
				}
				depths[c][l] = v
				break
			}
		}
	}
	lanes := make([][]uint64, ckf.LaneCount)
	for l := range lanes {
		lanes[l] = make([]uint64, queryBuckets)
	}
	probes := make([]ckf.Probe, queryChainLen)
	for c, chain := range chains {
		for i, h := range ckf.SequenceHashes(chain) {
			probes[i] = addr.Probe(h)
		}
		for l, words := range lanes {
			for _, p := range probes[:depths[c][l]] {
				if s := lowestEmpty(words[p.BucketA]); s >= 0 {
					words[p.BucketA] |= uint64(p.Fingerprint) << (16 * s)
				} else if s := lowestEmpty(words[p.BucketB]); s >= 0 {
					words[p.BucketB] |= uint64(p.Fingerprint) << (16 * s)
				} else {
					return nil, fmt.Errorf("query fixture: both buckets full for chain %d lane %d", c, l)
				}
			}
		}
	}
	var occupied uint64
	for _, words := range lanes {
		for b := range words {
			occ, fps := rng.next(), rng.next()
			w := words[b]
			for s := 0; s < 4; s++ {
				if uint16(w>>(16*s)) == 0 && occ>>s&1 == 1 {
					fp := uint16(fps >> (16 * s))
					if fp == 0 {
						fp = 1
					}
					w |= uint64(fp) << (16 * s)
				}
			}
			words[b] = w
			for s := 0; s < 4; s++ {
				if uint16(w>>(16*s)) != 0 {
					occupied++
				}
			}
		}
	}
	sum := newChecksum()
	for _, chain := range chains {
		for _, h := range chain {
			sum.add(h)
		}
	}
	for _, d := range depths {
		for _, v := range d {
			sum.add(uint64(v))
		}
	}
	for _, words := range lanes {
		for _, w := range words {
			sum.add(w)
		}
	}
	fx := &queryFixture{
		c:         newConsumer(tb, queryBuckets, ckf.LaneCount),
		shared:    chains[:queryChainsPerShape],
		divergent: chains[queryChainsPerShape:],
		depths:    depths,
		sum:       sum.fold48(),
		load:      float64(occupied) / float64(4*queryBuckets*ckf.LaneCount),
	}
	for l, words := range lanes {
		fx.c.readyLane(tb, uint8(l), words) // the table copies the words
	}
	return fx, nil
}

// ---- snapshot and delta fixtures -------------------------------------------------

// snapshotWords is the snapshot row's 2^20 words, one draw each.
func snapshotWords() ([]uint64, uint64) {
	rng := splitMix(snapshotStream)
	sum := newChecksum()
	words := make([]uint64, snapshotBuckets)
	for i := range words {
		words[i] = rng.next()
		sum.add(words[i])
	}
	return words, sum.fold48()
}

// deltaImageRing is the delta row's 4,096 image sets: 23 distinct buckets
// each (a bucket already in the set is drawn again), a bucket draw then a
// value draw per image.
func deltaImageRing() ([][]ckf.BucketImage, uint64) {
	rng := splitMix(deltaStream)
	sum := newChecksum()
	ring := make([][]ckf.BucketImage, deltaRing)
	for i := range ring {
		imgs := make([]ckf.BucketImage, 0, deltaImages)
	draw:
		for len(imgs) < deltaImages {
			bucket := rng.next() & (deltaBuckets - 1)
			value := rng.next()
			for _, im := range imgs {
				if im.Bucket == bucket {
					continue draw
				}
			}
			sum.add(bucket)
			sum.add(value)
			imgs = append(imgs, ckf.BucketImage{Bucket: bucket, Value: value})
		}
		ring[i] = imgs
	}
	return ring, sum.fold48()
}

// chainLocals is the 128-block chain of the hashing rows.
func chainLocals() []uint64 {
	rng := splitMix(chainStream)
	local := make([]uint64, queryChainLen)
	for i := range local {
		local[i] = rng.next()
	}
	return local
}

// ---- producer fixtures ------------------------------------------------------------

func newState(tb testing.TB, buckets uint64) *producer.DcState {
	tb.Helper()
	s, err := producer.NewDcState(ckf.NewCkfConfig(expectedBlocksFor(buckets)))
	if err != nil {
		tb.Fatal(err)
	}
	if s.BucketCount() != buckets {
		tb.Fatalf("state has %d buckets, want %d", s.BucketCount(), buckets)
	}
	return s
}

// storeEvent is a one-block store of a root block from worker 1 rank 0 on
// the Device tier with Worker residency (the reference's in-process
// default); the caller sets the block.
func storeEvent(block []producer.StoredBlock) producer.RouterEvent {
	return producer.RouterEvent{
		WorkerID:  peerWorker,
		Residency: producer.ResidencyWorker,
		Event:     producer.KvCacheEvent{Kind: producer.KvEventStored, Stored: producer.StoreData{Blocks: block}},
	}
}

func removeEvent(ids []ckf.ExternalBlockHash) producer.RouterEvent {
	return producer.RouterEvent{
		WorkerID:  peerWorker,
		Residency: producer.ResidencyWorker,
		Event:     producer.KvCacheEvent{Kind: producer.KvEventRemoved, Removed: ids},
	}
}

// errFixture reports a producer outcome a fixture does not expect.
var errFixture = errors.New("peer fixture")

// store applies a one-block store of (id, tokens) and reports whether its
// fingerprint was omitted for capacity.
func store(s *producer.DcState, ev *producer.RouterEvent, id, tokens uint64) (bool, error) {
	ev.Event.EventID = id
	ev.Event.Stored.Blocks[0] = producer.StoredBlock{BlockHash: ckf.ExternalBlockHash(id), TokensHash: ckf.LocalBlockHash(tokens)}
	out := s.ApplyEvent(*ev)
	switch {
	case out.FirstError == nil:
		return false, nil
	case errors.Is(out.FirstError, ckf.ErrCapacityExhausted):
		return true, nil
	default:
		return false, fmt.Errorf("%w: store %d: %v", errFixture, id, out.FirstError)
	}
}

// steadyProducer is the state of a producer-store/2^k@90 row: it holds
// between 90 % of its slots minus one window (1,024 blocks) and 90 %. Each
// window stores 1,024 new one-block events (token hashes from one stream,
// external ids 0, 1, 2, …) and is followed by the removal of the 1,024
// oldest blocks. The state lives across benchmark invocations (b.N
// ramp-up), so the fill happens once per process.
type steadyProducer struct {
	s        *producer.DcState
	buckets  uint64
	keys     splitMix
	window   [storeWindow]uint64 // token hashes of the current window, drawn at its start
	inWindow int                 // stores done in the current window
	nextID   uint64
	oldest   uint64
	omitted  uint64
	sum      uint64 // checksum of the fill keys
	ev       producer.RouterEvent
	removeID []ckf.ExternalBlockHash
}

// steadies holds the steady producers by bucket count.
var steadies fixtureCache[steadyProducer]

func steadyBase(buckets uint64) uint64 { return 4*buckets*9/10 - storeWindow }

func getSteadyProducer(tb testing.TB, buckets uint64) *steadyProducer {
	tb.Helper()
	return steadies.get(buckets, func() *steadyProducer { return buildSteadyProducer(tb, buckets) })
}

func buildSteadyProducer(tb testing.TB, buckets uint64) *steadyProducer {
	p := &steadyProducer{
		s:        newState(tb, buckets),
		buckets:  buckets,
		keys:     splitMix(storeStream90 ^ buckets),
		ev:       storeEvent(make([]producer.StoredBlock, 1)),
		removeID: make([]ckf.ExternalBlockHash, 1),
	}
	sum := newChecksum()
	for id := uint64(0); id < steadyBase(buckets); id++ {
		k := p.keys.next()
		sum.add(k)
		om, err := store(p.s, &p.ev, id, k)
		if err != nil {
			tb.Fatal(err)
		}
		if om {
			p.omitted++
		}
	}
	p.sum = sum.fold48()
	p.nextID = steadyBase(buckets)
	p.startWindow()
	return p
}

func (p *steadyProducer) startWindow() {
	for i := range p.window {
		p.window[i] = p.keys.next()
	}
	p.inWindow = 0
}

// storeNext stores the next block of the window; it reports whether the
// window is complete (then the caller runs endWindow, untimed).
func (p *steadyProducer) storeNext() (bool, error) {
	om, err := store(p.s, &p.ev, p.nextID, p.window[p.inWindow])
	if err != nil {
		return false, err
	}
	if om {
		p.omitted++
	}
	p.nextID++
	p.inWindow++
	return p.inWindow == storeWindow, nil
}

// endWindow removes the window's worth of oldest blocks and draws the next
// window's keys.
func (p *steadyProducer) endWindow() error {
	for i := 0; i < storeWindow; i++ {
		p.removeID[0] = ckf.ExternalBlockHash(p.oldest)
		out := p.s.ApplyEvent(removeEvent(p.removeID))
		if out.FirstError != nil || out.UnknownRemovals != 0 {
			return fmt.Errorf("%w: remove %d: %v (unknown %d)", errFixture, p.oldest, out.FirstError, out.UnknownRemovals)
		}
		p.oldest++
	}
	p.startWindow()
	return nil
}

// live is the number of blocks the state holds (stored, not yet removed).
func (p *steadyProducer) live() uint64 { return p.nextID - p.oldest }

// loadPct is the share of slots holding a fingerprint, in percent.
func (p *steadyProducer) loadPct() float64 {
	return float64(p.s.ResidentCount()) * 100 / float64(4*p.buckets)
}

// fillTokens is the key stream of producer-store/2^16/0-50: 131,072 token
// hashes (half the slots of 2^16 buckets), the same for every pass.
func fillTokens() ([]uint64, uint64) {
	rng := splitMix(storeStreamFill)
	sum := newChecksum()
	toks := make([]uint64, 2*fillBuckets)
	for i := range toks {
		toks[i] = rng.next()
		sum.add(toks[i])
	}
	return toks, sum.fold48()
}

// fillPass stores every token of toks into s as one-block events with
// external ids 0, 1, 2, …; an omission below 50 % is a broken fixture.
func fillPass(s *producer.DcState, ev *producer.RouterEvent, toks []uint64) error {
	for id, k := range toks {
		om, err := store(s, ev, uint64(id), k)
		if err != nil {
			return err
		}
		if om {
			return fmt.Errorf("%w: omission at %d of %d stores", errFixture, id, len(toks))
		}
	}
	return nil
}

// lookupFixture is the state of the lookup/2^k/* rows: a fresh state of
// buckets buckets filled to 90 % of its slots with one-block root stores
// (token hashes from lookupStream^buckets, external ids 0, 1, 2, …), and two
// rings of lookupRing canonical hashes drawn from lookupRingStream^buckets,
// interleaved: hit[i] is a stored block's (the fill token at index
// next() % fill count) and miss[i] is the next stream value, which no store
// used. sum folds the fill tokens, both rings and the number of ring entries
// the filter reports present, so equal checksums on both sides also mean the
// two filters answer the rings alike (false positives included).
type lookupFixture struct {
	s          *producer.DcState
	hit, miss  []ckf.CanonicalHash
	sum        uint64
	loadPct    float64
	omitted    uint64
	hits       [2]uint64 // ring entries found: hit ring, miss ring (false positives)
	fillBlocks uint64
}

// lookupFixtures holds the lookup fixtures by bucket count.
var lookupFixtures fixtureCache[lookupFixture]

func lookupFill(buckets uint64) uint64 { return 4 * buckets * 9 / 10 }

func getLookupFixture(tb testing.TB, buckets uint64) *lookupFixture {
	tb.Helper()
	return lookupFixtures.get(buckets, func() *lookupFixture { return buildLookupFixture(tb, buckets) })
}

func buildLookupFixture(tb testing.TB, buckets uint64) *lookupFixture {
	fx := &lookupFixture{s: newState(tb, buckets), fillBlocks: lookupFill(buckets)}
	keys := splitMix(lookupStream ^ buckets)
	sum := newChecksum()
	ev := storeEvent(make([]producer.StoredBlock, 1))
	toks := make([]uint64, fx.fillBlocks)
	for id := range toks {
		toks[id] = keys.next()
		sum.add(toks[id])
		om, err := store(fx.s, &ev, uint64(id), toks[id])
		if err != nil {
			tb.Fatal(err)
		}
		if om {
			fx.omitted++
		}
	}
	ring := splitMix(lookupRingStream ^ buckets)
	fx.hit = make([]ckf.CanonicalHash, lookupRing)
	fx.miss = make([]ckf.CanonicalHash, lookupRing)
	for i := range lookupRing {
		fx.hit[i] = ckf.CanonicalHash(toks[ring.next()%fx.fillBlocks])
		fx.miss[i] = ckf.CanonicalHash(ring.next())
		sum.add(uint64(fx.hit[i]))
		sum.add(uint64(fx.miss[i]))
	}
	for r, keys := range [][]ckf.CanonicalHash{fx.hit, fx.miss} {
		for _, h := range keys {
			if fx.s.Contains(h) {
				fx.hits[r]++
			}
		}
	}
	sum.add(fx.hits[0])
	sum.add(fx.hits[1])
	fx.sum = sum.fold48()
	fx.loadPct = float64(fx.s.ResidentCount()) * 100 / float64(4*buckets)
	return fx
}
