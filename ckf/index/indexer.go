package index

import (
	"strconv"
	"sync/atomic"

	"github.com/ckf-stream/ckf-stream/ckf"
)

// GlobalIndexer is GlobalCkfIndexer (consumer §2.2): the consumer-side global
// index of one indexer domain. It owns the transposed table shared by the
// manifest's lanes (one per DC pool: 16 as in the reference, or 1..64 from
// NewManifestN, consumer §16), the immutable addressing, the search
// configuration and two lane masks.
//
// Concurrency model: any number of goroutines may query (FindPrefixMatches,
// ReadyLanes) at any time, without locks. Each configured lane is written by
// at most one LaneIngestor (ClaimLane enforces a single owner), which is used
// by a single goroutine (the lane's goroutine in streams, or its sticky
// worker in a pool.IngestionPool, package ckf/index/pool).
//
// Memory-ordering contract. Go's sync/atomic operations are sequentially
// consistent, which is at least as strong as every ordering the reference
// specifies (consumer §2.4); the mapping is:
//
//	snapshot activation   ready |= bit     (Release)  -> atomic.Uint64.Or
//	ingestor clear_ready  ready &^= bit    (AcqRel)   -> atomic.Uint64.And
//	pool retirement       ready &^= bit    (Release)  -> atomic.Uint64.And
//	query capture         load, once       (Acquire)  -> atomic.Uint64.Load
//	ReadyLanes()          load             (Acquire)  -> atomic.Uint64.Load
//	claim                 claimed |= bit   (AcqRel)   -> atomic.Uint64.Or (old value tested)
//	release               claimed &^= bit  (Release)  -> atomic.Uint64.And
//	table word load       one per word        (Relaxed)  -> atomic.LoadUint64
//	table word store      one per word        (Relaxed)  -> atomic.StoreUint64; snapshot words and delta
//	                                                        images on amd64: a plain MOV
//	                                                        (transposedTable.storeColumn, storeImages)
//
// The masks are 64 bits wide whatever the lane count (consumer §16): one
// word, so capturing every lane is still one load.
//
// A snapshot's words are all stored before its Or; a query's Load that
// observes the bit therefore observes every snapshot word (Go memory model:
// the Or is synchronized before the Load that reads it). Deltas are not
// atomic for readers and a query that captured a bit may finish after the
// lane was retired or re-snapshotted ("weak read", consumer §5.5); results are
// advisory.
type GlobalIndexer struct {
	manifest Manifest
	addr     ckf.Addressing
	table    transposedTable
	window   int

	ready   atomic.Uint64 // bit l set ⇔ lane l queryable
	claimed atomic.Uint64 // bit l set ⇔ an ingestor owns lane l
}

// NewGlobalIndexer validates the search configuration (window 1..8, else a
// *BuildError matching ErrBuildInvalidVerificationWindow), validates the
// manifest format (version 1, 16-bit fingerprints, 4 slots, power-of-two
// bucket count >= 2 — a choice: the reference trusts the format), builds the
// addressing and allocates bucket_count rows of zeroed words, 16 per row for
// a manifest of 16 lanes, rowStride(lanes) for the others (consumer §16;
// ErrCapacityOverflow if that size overflows). Both lane masks start at 0.
func NewGlobalIndexer(m Manifest, search ckf.SearchConfig) (*GlobalIndexer, error) {
	if err := search.Validate(); err != nil {
		return nil, err
	}
	if err := m.format.Validate(); err != nil {
		return nil, err
	}
	addr, err := ckf.NewAddressing(m.format.BucketCount, m.format.Seed)
	if err != nil {
		return nil, err
	}
	t, err := newTransposedTable(m.format.BucketCount, m.LaneCount())
	if err != nil {
		return nil, err
	}
	return &GlobalIndexer{manifest: m, addr: addr, table: t, window: search.VerificationWindow}, nil
}

// Manifest returns the immutable manifest.
func (g *GlobalIndexer) Manifest() Manifest { return g.manifest }

// Addressing returns the immutable addressing shared with every query.
func (g *GlobalIndexer) Addressing() ckf.Addressing { return g.addr }

// VerificationWindow returns the configured verification window.
func (g *GlobalIndexer) VerificationWindow() int { return g.window }

// BucketCount returns the number of buckets per lane.
func (g *GlobalIndexer) BucketCount() uint64 { return g.table.buckets }

// LaneCount returns the manifest's lane count (consumer §16).
func (g *GlobalIndexer) LaneCount() int { return g.manifest.LaneCount() }

// RowWords returns the number of words of one table row: 16 for 16 lanes,
// the lane count rounded up (to a power of two up to 8, then to a multiple
// of 8) for the others. The table takes BucketCount × RowWords × 8 bytes.
func (g *GlobalIndexer) RowWords() int { return g.table.stride }

// ReadyLanes returns the current ready mask of lanes 0..15 (one atomic
// load): the whole mask of an indexer of at most 16 lanes; ReadyLanes64
// reports every lane. It may be stale by the time the caller uses it.
func (g *GlobalIndexer) ReadyLanes() uint16 { return uint16(g.ready.Load()) }

// ReadyLanes64 returns the current ready mask of every lane (one atomic
// load, consumer §16).
func (g *GlobalIndexer) ReadyLanes64() uint64 { return g.ready.Load() }

// ClaimedLanes returns the current claim mask of lanes 0..15 (one atomic
// load); ClaimedLanes64 reports every lane.
func (g *GlobalIndexer) ClaimedLanes() uint16 { return uint16(g.claimed.Load()) }

// ClaimedLanes64 returns the current claim mask of every lane.
func (g *GlobalIndexer) ClaimedLanes64() uint64 { return g.claimed.Load() }

// LaneWords returns a copy of lane's words in bucket order (diagnostics and
// tests; it reads each word atomically but the copy is not a consistent cut
// while the lane is being written). lane must be < LaneCount().
func (g *GlobalIndexer) LaneWords(lane uint8) []uint64 {
	if int(lane) >= g.manifest.LaneCount() {
		panic("index: LaneWords lane " + strconv.Itoa(int(lane)) + " out of range")
	}
	return g.table.laneWords(int(lane), make([]uint64, 0, g.table.buckets))
}

// ClaimLane makes the caller the single owner of lane and returns its
// ingestor in state Unassigned (consumer §2.3). Errors, in order: ErrInvalidLane
// (lane >= the lane count, 16 unless NewManifestN set another),
// ErrUnconfiguredLane, ErrLaneAlreadyClaimed. The claim is
// released by LaneIngestor.Close, which first clears the lane's ready bit.
//
// The validation scratch (a bitmap of ceil(bucket_count/64) words and the
// list of touched words, plus a fixed 1 KiB set for small deltas inside the
// ingestor) is allocated here. The reference clears the claim
// and reports AllocationFailed when that allocation fails; a Go allocation
// failure aborts the process instead, so that error is never returned.
func (g *GlobalIndexer) ClaimLane(lane uint8) (*LaneIngestor, error) {
	if int(lane) >= g.manifest.LaneCount() {
		return nil, ErrInvalidLane
	}
	pool, ok := g.manifest.PoolOf(lane)
	if !ok {
		return nil, ErrUnconfiguredLane
	}
	bit := uint64(1) << lane
	if g.claimed.Or(bit)&bit != 0 {
		return nil, ErrLaneAlreadyClaimed
	}
	words := (g.table.buckets + 63) / 64
	return &LaneIngestor{
		g:       g,
		lane:    lane,
		bit:     bit,
		pool:    pool,
		seen:    make([]uint64, words),
		touched: make([]uint32, 0, words),
	}, nil
}

// activateLane sets lane's ready bit (snapshot activation, Release).
func (g *GlobalIndexer) activateLane(bit uint64) { g.ready.Or(bit) }

// clearReadyLane clears lane's ready bit (ingestor clear_ready, AcqRel, and
// pool retirement, Release).
func (g *GlobalIndexer) clearReadyLane(bit uint64) { g.ready.And(^bit) }

// releaseLane clears lane's claim bit (Release).
func (g *GlobalIndexer) releaseLane(bit uint64) { g.claimed.And(^bit) }
